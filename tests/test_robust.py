"""Regression tests of issue 16: nothing lost, nothing wrong, no traceback.

One test (or a few) per numbered item of the issue; each failed before its fix.
The kill -9 fault injection is in ``test_faults.py`` (slow).
"""

import errno
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

import jaxmodel
from jaxmodel.cli import app
from jaxmodel.engine import Plan, run_sweep
from jaxmodel.errors import InputError, SpecError
from jaxmodel.expr import parse
from jaxmodel.searching import search
from jaxmodel.sensitivity import sensitivities
from jaxmodel.spec import load_spec, parse_spec
from jaxmodel.sweeping import build_plan

SPECS = Path(__file__).parent / "specs"
SMALL = SPECS / "small.toml"
JAXMODEL = str(Path(sys.executable).with_name("jaxmodel"))
REDUCE = SMALL.read_text() + '\n[reduce]\nby = "mfu_percent"\ngroup_by = ["tensor_parallel"]\n'
runner = CliRunner()


def read(path) -> dict[str, np.ndarray]:
    table = ds.dataset(path, format="parquet").to_table().sort_by("config_id")
    return {name: table[name].to_numpy(zero_copy_only=False) for name in table.column_names}


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in b:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def one_line_error(result) -> str:
    """The CLI's stderr, checked to be one error line and no traceback."""
    err = result.stderr if hasattr(result, "stderr") else result
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# -- 1. a reduce sweep killed during its final merge ---------------------------

def _merge_cut_short(directory: Path) -> None:
    """The state a kill -9 between taking the merge lock and recording the
    merged part leaves: every final state on disk, the lock file, no part (or
    an unrecorded one), no manifest line."""
    for path in directory.glob("_manifest-p*.jsonl"):
        path.unlink()
    for path in directory.glob("part-*.parquet"):
        path.rename(path.with_name("." + path.name + ".tmp"))
    (directory / "_reduce-merge.lock").touch()


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
def test_a_merge_cut_short_is_redone_on_resume(tmp_path, processes):
    spec = parse_spec(REDUCE, "reduce")
    run_sweep(build_plan(spec, chunk_size=100), tmp_path / "clean")
    expected = read(tmp_path / "clean")
    out = tmp_path / "cut"
    for i in range(processes):
        run_sweep(build_plan(spec, chunk_size=100), out, process=i, processes=processes)
    _merge_cut_short(out)
    result = run_sweep(build_plan(spec, chunk_size=100), out, resume=True)
    assert result.reduced is not None and result.rows == len(expected["config_id"])
    assert_same(read(out), expected)
    assert not list(out.glob(".*.tmp"))
    # Resuming again has nothing left to do and writes nothing twice.
    again = run_sweep(build_plan(spec, chunk_size=100), out, resume=True)
    assert again.reduced is None
    assert_same(read(out), expected)


def test_resume_of_a_cut_merge_says_it_merged(tmp_path):
    spec_path = tmp_path / "r.toml"
    spec_path.write_text(REDUCE)
    out = tmp_path / "ds"
    args = ["sweep", str(spec_path), "-o", str(out), "--chunk-size", "100"]
    assert runner.invoke(app, args).exit_code == 0
    _merge_cut_short(out)
    result = runner.invoke(app, [*args, "--resume"])
    assert result.exit_code == 0
    assert "nothing to do" not in result.stdout
    assert "merged the finished reducer states into 4 rows" in result.stdout


# -- 2. parts and manifests carry the sweep's identity -------------------------

def test_missing_metadata_cannot_pair_a_spec_with_another_sweeps_rows(tmp_path):
    spec = load_spec(SMALL)
    run_sweep(Plan(spec, chunk_size=100), tmp_path / "ds")
    (tmp_path / "ds" / "_jaxmodel.json").unlink()
    other = parse_spec(SMALL.read_text().replace("mfu_percent >= 20", "mfu_percent >= 30"))
    for resume in (False, True):
        with pytest.raises(SpecError, match="holds parts of another sweep"):
            run_sweep(Plan(other, chunk_size=100), tmp_path / "ds", resume=resume)
    assert not (tmp_path / "ds" / "_jaxmodel.json").exists()
    # The same sweep's resume rebuilds the metadata from the manifests' identity.
    run_sweep(Plan(spec, chunk_size=50), tmp_path / "clean")
    run_sweep(Plan(spec, chunk_size=100), tmp_path / "ds", resume=True)
    meta = json.loads((tmp_path / "ds" / "_jaxmodel.json").read_text())
    assert meta["filter"] == "valid_layout and mfu_percent >= 20"
    assert_same(read(tmp_path / "ds"), read(tmp_path / "clean"))


def test_replaced_metadata_cannot_adopt_another_sweeps_rows(tmp_path):
    spec = load_spec(SMALL)
    other = parse_spec(SMALL.read_text().replace("mfu_percent >= 20", "mfu_percent >= 30"))
    run_sweep(Plan(spec, chunk_size=100), tmp_path / "a")
    run_sweep(Plan(other, chunk_size=100), tmp_path / "b")
    shutil.copy(tmp_path / "b" / "_jaxmodel.json", tmp_path / "a" / "_jaxmodel.json")
    with pytest.raises(SpecError, match="holds parts of another sweep"):
        run_sweep(Plan(other, chunk_size=100), tmp_path / "a", resume=True)


def test_parts_name_their_sweep(tmp_path):
    import pyarrow.parquet as pq

    run_sweep(Plan(load_spec(SMALL), chunk_size=500), tmp_path / "ds")
    keys = {json.loads(line)["sweep"]
            for line in (tmp_path / "ds" / "_manifest-p0000.jsonl").read_text().splitlines()}
    assert len(keys) == 1
    for part in (tmp_path / "ds").glob("part-*.parquet"):
        assert pq.read_schema(part).metadata[b"jaxmodel.sweep"].decode() in keys


def test_an_overwrite_removes_manifests_before_parts_and_metadata_last(tmp_path, monkeypatch):
    from jaxmodel import engine

    run_sweep(Plan(load_spec(SMALL), chunk_size=100), tmp_path / "ds")
    order = []
    real = Path.unlink

    def record(self, *a, **k):
        order.append(self.name)
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "unlink", record)
    engine.remove_dataset(tmp_path / "ds")
    assert order[0].startswith("_manifest-p") and order[-1] == "_jaxmodel.json"


# -- 3. best --global-batch beyond float32's exact counts ------------------------

@pytest.mark.parametrize("value", ["16777217", "847288609443", str(10**20)])
def test_best_refuses_a_global_batch_beyond_exact_counts(value):
    result = runner.invoke(app, ["best", "--model", "seed", "--global-batch", value])
    assert result.exit_code == 2
    line = one_line_error(result)
    assert line.startswith("error: global_batch: got ") and "<= 16777216" in line
    assert len(line) < 200


def test_best_at_the_largest_global_batch_is_exact():
    # 2**24 = b m d exactly, and tokens_per_step = b m s d exactly (int64).
    values = {**jaxmodel.get_model("seed").defaults, "seq_length": 4096.0}
    r = search("seed", values, global_batch=2**24, top=5)
    b, m, d = (r.top[k] for k in ("micro_batch", "gradient_accum_steps", "data_parallel"))
    np.testing.assert_array_equal(b.astype(np.int64) * m.astype(np.int64) * d, 2**24)
    np.testing.assert_array_equal(r.top["tokens_per_step"], 2**24 * 4096)


# -- 4. integer overflow ---------------------------------------------------------

def test_eval_refuses_a_token_count_beyond_int64():
    result = runner.invoke(app, ["eval", "--model", "seed", "--micro-batch", "16777216",
                                 "--gradient-accum-steps",
                                 "16777216", "--seq-length", "16777216"])
    assert result.exit_code == 2
    line = one_line_error(result)
    assert "micro_batch x gradient_accum_steps x seq_length x num_gpus" in line
    assert "tokens_per_step" in line


@pytest.mark.parametrize("x64", [False, True])
def test_tokens_at_the_limit_are_exact_and_beyond_it_refused(x64):
    inputs = dict(micro_batch=2**20, gradient_accum_steps=2**20, seq_length=2**20,
                  num_gpus=4, tensor_parallel=1, pipeline_parallel=1)
    out = jaxmodel.evaluate("seed", x64=x64, **inputs)
    assert int(out.tokens_per_step) == 2**20 * 2**20 * 2**20 * 4 == 2**62
    with pytest.raises(InputError, match="tokens_per_step"):
        jaxmodel.evaluate("seed", x64=x64, **{**inputs, "num_gpus": np.array([4, 8])})


def test_sweeps_refuse_axes_whose_tokens_could_wrap():
    with pytest.raises(InputError, match="spec: largest micro_batch x .* tokens_per_step"):
        parse_spec("[axes]\nmicro_batch = [1, 16777216]\ngradient_accum_steps = [16777216]\n"
                   "seq_length = [16777216]\n")
    with pytest.raises(InputError, match="tokens_per_step"):
        parse_spec("[sample]\nn = 10\nmicro_batch = {uniform = [1, 16777216]}\n"
                   "gradient_accum_steps = {choice = [16777216]}\n[base]\nseq_length = 16777216\n")


# -- 5. partition keys read back with their types -------------------------------

@pytest.mark.parametrize("column, reason", [
    ("link_bandwidth_gb_s", "is a float"),
    ("valid_layout", "true/false flag"),
    ("config_id", "one directory per row"),
])
def test_partition_keys_that_would_read_back_as_text_are_refused(column, reason):
    text = SMALL.read_text().replace("rows_per_file = 200",
                                     f'rows_per_file = 200\npartition_by = ["{column}"]')
    with pytest.raises(SpecError, match=reason):
        Plan(parse_spec(text))


def test_integer_partition_keys_read_back_as_numbers(tmp_path):
    import pyarrow as pa

    from jaxmodel.plot import open_dataset

    text = SMALL.read_text().replace("rows_per_file = 200",
                                     'rows_per_file = 200\npartition_by = ["micro_batch"]')
    run_sweep(Plan(parse_spec(text), chunk_size=500), tmp_path / "ds")
    dataset = open_dataset(tmp_path / "ds")  # as jaxmodel plot reads it
    assert pa.types.is_integer(dataset.schema.field("micro_batch").type)
    table = dataset.to_table(filter=parse("micro_batch > 2").to_arrow())
    assert table.num_rows > 0
    assert set(table["micro_batch"].to_pylist()) == {4}


# -- 6. deep filters --------------------------------------------------------------

DEEP = [
    "(" * 150 + "mfu_percent > 1" + ")" * 150,
    " and ".join(["valid_layout"] * 1000),
    "not " * 2000 + "valid_layout",
    " + ".join(["mfu_percent"] * 20000) + " > 1",
]


@pytest.mark.parametrize("text", DEEP, ids=["parens", "ands", "nots", "sum"])
def test_deep_filters_are_one_line_errors(text):
    deep_or_long = "filter: .*(nests more than|operations deep|too long|characters long)"
    with pytest.raises(SpecError, match=deep_or_long):
        parse(text)


def test_deep_filters_in_sweeps_and_plots_are_one_line(tmp_path):
    spec = tmp_path / "deep.toml"
    spec.write_text(SMALL.read_text().replace('"valid_layout and mfu_percent >= 20"',
                                              json.dumps(DEEP[1])))
    result = runner.invoke(app, ["sweep", str(spec), "-o", str(tmp_path / "ds")])
    assert result.exit_code == 2 and "operations deep" in one_line_error(result)
    assert not (tmp_path / "ds").exists()
    run_sweep(Plan(load_spec(SMALL), chunk_size=500), tmp_path / "small")
    result = runner.invoke(app, ["plot", "heatmap", str(tmp_path / "small"), "--x",
                                 "link_bandwidth_gb_s", "--y", "num_gpus", "--value",
                                 "mfu_percent", "--where", DEEP[2], "-o",
                                 str(tmp_path / "p.png")])
    assert result.exit_code == 2 and "nests more than" in one_line_error(result)


def test_a_filter_at_the_depth_limit_still_runs(tmp_path):
    text = " and ".join(["valid_layout"] * 150) + " and mfu_percent >= 20"
    spec = parse_spec(SMALL.read_text().replace('"valid_layout and mfu_percent >= 20"',
                                                json.dumps(text)))
    got = run_sweep(Plan(spec, chunk_size=500), tmp_path / "ds")
    assert got.rows == run_sweep(Plan(load_spec(SMALL), chunk_size=500), tmp_path / "b").rows


# -- 7. non-UTF-8 files ----------------------------------------------------------

def test_non_utf8_spec_and_config_are_one_line_errors(tmp_path):
    spec = tmp_path / "latin1.toml"
    spec.write_bytes(SMALL.read_text().encode() + "# caf\u00e9\n".encode("latin-1"))
    result = runner.invoke(app, ["sweep", str(spec), "-o", str(tmp_path / "ds")])
    assert result.exit_code == 2 and "is not UTF-8" in one_line_error(result)
    config = tmp_path / "c.json"
    config.write_bytes(b'{"num_gpus": 64, "note": "\xff"}')
    result = runner.invoke(app, ["eval", "--model", "seed", "--config", str(config)])
    assert result.exit_code == 2 and "UTF-8" in one_line_error(result)


# -- 8. damaged metadata and manifests -------------------------------------------

@pytest.mark.parametrize("content", [b'{"format": "jaxmodel-dataset/1", "spec"', b"[]",
                                     b"\x00\xff\xfe binary", b"{}"])
def test_damaged_metadata_is_named(tmp_path, content):
    spec_path = tmp_path / "s.toml"
    spec_path.write_text(SMALL.read_text())
    out = tmp_path / "ds"
    assert runner.invoke(app, ["sweep", str(spec_path), "-o", str(out)]).exit_code == 0
    (out / "_jaxmodel.json").write_bytes(content)
    result = runner.invoke(app, ["sweep", str(spec_path), "-o", str(out), "--resume"])
    assert result.exit_code == 2
    line = one_line_error(result)
    assert "_jaxmodel.json" in line and "is damaged" in line
    # What the message says to do works: delete it and resume.
    (out / "_jaxmodel.json").unlink()
    assert runner.invoke(app, ["sweep", str(spec_path), "-o", str(out), "--resume"]
                         ).exit_code == 0
    assert json.loads((out / "_jaxmodel.json").read_text())["chunk_size"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("line", ["{}", "[]", "null", '{"parts": 5}', "not json",
                                  '{"parts": [], "chunks": [[0, 100000000000]]}',
                                  '{"parts": [], "chunks": [[3, 1]]}'])
def test_damaged_manifest_lines_are_named(tmp_path, line):
    spec_path = tmp_path / "s.toml"
    spec_path.write_text(SMALL.read_text())
    out = tmp_path / "ds"
    assert runner.invoke(app, ["sweep", str(spec_path), "-o", str(out), "--chunk-size", "100"]
                         ).exit_code == 0
    manifest = out / "_manifest-p0000.jsonl"
    manifest.write_text(manifest.read_text() + line + "\n")
    # A subprocess with a time limit: the huge chunk run used to hang.
    proc = subprocess.run([JAXMODEL, "sweep", str(spec_path), "-o", str(out), "--chunk-size",
                           "100", "--resume"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    msg = one_line_error(proc.stderr)
    assert "_manifest-p0000.jsonl' line" in msg and "is damaged" in msg


@pytest.mark.slow
def test_a_torn_manifest_line_does_not_swallow_the_next_record(tmp_path):
    spec = load_spec(SMALL)
    run_sweep(Plan(spec, chunk_size=100), tmp_path / "clean")
    out = tmp_path / "ds"
    run_sweep(Plan(spec, chunk_size=100), out)
    manifest = out / "_manifest-p0000.jsonl"
    lines = manifest.read_text().splitlines(keepends=True)
    # A kill mid-append of the last record: its part is then an orphan.
    manifest.write_text("".join(lines[:-1]) + lines[-1][:25])
    run_sweep(Plan(spec, chunk_size=100), out, resume=True)
    records = [json.loads(x) for x in manifest.read_text().splitlines()]
    assert len(records) == len(lines)
    assert_same(read(out), read(tmp_path / "clean"))


def test_a_damaged_reducer_state_is_named(tmp_path):
    spec = parse_spec(REDUCE, "reduce")
    run_sweep(build_plan(spec, chunk_size=100), tmp_path / "ds", process=0, processes=2)
    (tmp_path / "ds" / "_reduce-p0000.npz").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(SpecError, match="reducer state .*_reduce-p0000.npz' is damaged"):
        run_sweep(build_plan(spec, chunk_size=100), tmp_path / "ds", process=1, processes=2)


# -- 9. disk full ----------------------------------------------------------------

@pytest.mark.slow
def test_a_write_error_is_one_line_with_the_resume_command(tmp_path):
    """A file size limit (RLIMIT_FSIZE) makes the writer's write fail mid-sweep,
    as a full disk does; the finished chunks stay and --resume completes."""
    spec_path = tmp_path / "s.toml"
    spec_path.write_text(SMALL.read_text().replace('filter = "valid_layout and mfu_percent >= 20"',
                                                   "").replace("rows_per_file = 200",
                                                               "rows_per_file = 100"))
    out = tmp_path / "ds"
    script = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
              "resource.setrlimit(resource.RLIMIT_FSIZE, (8_000, 8_000)); "
              "from jaxmodel.cli import main; main(sys.argv[1:])")
    args = ["sweep", str(spec_path), "-o", str(out), "--chunk-size", "100"]
    proc = subprocess.run([sys.executable, "-c", script, *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    line = one_line_error(proc.stderr)
    assert "File too large" in line and "the chunks finished before it are kept" in line
    assert line.endswith(f"resume with: jaxmodel sweep {spec_path} -o {out} --resume "
                         "--chunk-size 100")
    assert runner.invoke(app, [*args, "--resume"]).exit_code == 0
    run_sweep(Plan(load_spec(spec_path), chunk_size=100), tmp_path / "clean")
    assert_same(read(out), read(tmp_path / "clean"))


def test_a_full_disk_is_named_as_such(tmp_path):
    from jaxmodel.engine import WriteFailed, write_failed

    err = write_failed(tmp_path, OSError(errno.ENOSPC, "No space left on device", "x.tmp"))
    assert isinstance(err, WriteFailed)
    assert "failed: the disk is full (x.tmp)" in str(err) and "\n" not in str(err)
    # pyarrow's writer names the errno only in its text.
    err = write_failed(tmp_path, OSError("Error writing bytes to file. Detail: [errno 28] "
                                         "No space left on device"))
    assert "failed: the disk is full;" in str(err)


# -- 10. two runs in one directory --------------------------------------------------

@pytest.mark.slow
def test_a_second_writer_is_refused_while_the_first_is_alive(tmp_path):
    spec = load_spec(SMALL)
    out = tmp_path / "ds"
    run_sweep(Plan(spec, chunk_size=100), out)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from jaxmodel.sink import slot_lock; assert slot_lock(Path(sys.argv[1]), 0)"
         ".try_acquire(); print('locked', flush=True); time.sleep(120)", str(out)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        for kw in ({"resume": True}, {"overwrite": True}):
            with pytest.raises(SpecError, match=f"being written by another run \\(pid "
                                                f"{holder.pid} on "):
                run_sweep(Plan(spec, chunk_size=100), out, **kw)
        assert (out / "_jaxmodel.json").exists()  # the overwrite deleted nothing
    finally:
        holder.kill()
        holder.communicate()
    # The OS released the dead holder's lock: no stale lock to clear.
    run_sweep(Plan(spec, chunk_size=100), out, overwrite=True)


@pytest.mark.slow
def test_two_cli_runs_at_once_one_is_refused(tmp_path):
    spec_path = tmp_path / "s.toml"
    spec_path.write_text(SMALL.read_text().replace("geomspace = [25, 3200, 6]",
                                                   "geomspace = [25, 3200, 60]"))
    out = tmp_path / "ds"
    first = subprocess.Popen([JAXMODEL, "sweep", str(spec_path), "-o", str(out), "--chunk-size",
                              "16", "-q"], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (out / "_manifest-p0000.jsonl").exists():
        time.sleep(0.01)
    second = subprocess.run([JAXMODEL, "sweep", str(spec_path), "-o", str(out), "--chunk-size",
                             "16", "--resume"], capture_output=True, text=True, timeout=300)
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    if second.returncode != 0:  # it started before the first finished: refused, one line
        assert second.returncode == 2
        assert "being written by another run" in one_line_error(second.stderr)
    run_sweep(Plan(load_spec(spec_path), chunk_size=16), tmp_path / "clean")
    assert_same(read(out), read(tmp_path / "clean"))


# -- 11. names the file system cannot hold -----------------------------------------

@pytest.mark.parametrize("name, message", [("a" * 300, "bytes per name"),
                                           ("caf\udcff", "not a valid UTF-8 name")])
def test_unwritable_output_names_are_refused_before_anything_is_created(tmp_path, name,
                                                                        message):
    out = tmp_path / name
    result = runner.invoke(app, ["sweep", str(SMALL), "-o", str(out)])
    assert result.exit_code == 2 and message in one_line_error(result)
    assert list(tmp_path.iterdir()) == []


# -- 12. axis lengths ----------------------------------------------------------------

@pytest.mark.parametrize("axis", ["{linspace = [1, 2, 2000000000]}",
                                  "{geomspace = [1, 2, 2000000000]}",
                                  "{range = [0, 2000000000, 1]}"])
def test_every_generator_caps_its_length(axis):
    with pytest.raises(SpecError, match="100,?000,?000"):
        parse_spec(f"[axes]\ncompute_tflops = {axis}\n")


# -- 14. smaller ------------------------------------------------------------------------

def test_best_refuses_to_rank_by_a_category():
    result = runner.invoke(app, ["best", "--model", "seed", "--by", "bottleneck"])
    assert result.exit_code == 2 and "not a number to rank by" in one_line_error(result)


def test_search_checks_pinned_names_and_values():
    values = jaxmodel.get_model("seed").defaults
    with pytest.raises(SpecError, match="'foo' is not a layout axis"):
        search("seed", values, global_batch=512, pinned={"foo": 3})
    with pytest.raises(InputError, match="model_params_b: got nan"):
        search("seed", {**values, "model_params_b": float("nan")}, global_batch=512)


def test_sensitivities_of_one_name_given_as_text():
    one = sensitivities(of="mfu_percent", wrt="link_bandwidth_gb_s", model="seed")
    listed = sensitivities(of=["mfu_percent"], wrt=["link_bandwidth_gb_s"], model="seed")
    assert one.of == ("mfu_percent",) and one.wrt == ("link_bandwidth_gb_s",)
    assert one.columns.keys() == listed.columns.keys()
    for name in listed.columns:
        np.testing.assert_array_equal(one.columns[name], listed.columns[name])


def test_huge_numbers_print_short(tmp_path):
    result = runner.invoke(app, ["best", "--model", "seed", "--global-batch", str(10**300)])
    line = one_line_error(result)
    assert "got 1.000e+300" in line and len(line) < 200
    assert len(str(InputError("x", 10**5000, "small"))) < 100
    config = tmp_path / "big.json"
    config.write_text('{"num_gpus": 1' + "0" * 400 + "}")  # beyond float range
    result = runner.invoke(app, ["eval", "--model", "seed", "--config", str(config)])
    assert result.exit_code == 2
    assert "num_gpus: got about 10**400" in one_line_error(result)
