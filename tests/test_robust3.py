"""Regression tests of issue 29 ("nothing lost, nothing wrong, round three").

One test (or a few) per numbered item of the issue; each failed before its fix.
The concurrent-split kill -9 cases are in ``test_faults.py``, the parser fuzz
test in ``test_fuzz.py`` (both slow).
"""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from jaxmodel.cli import app
from jaxmodel.dataset import (
    DatasetDamaged,
    _process_of,
    prepare_directory,
    remove_dataset,
)
from jaxmodel.engine import run_sweep
from jaxmodel.errors import SpecError
from jaxmodel.program import dataset_metadata
from jaxmodel.spec import load_spec
from jaxmodel.sweeping import build_plan

SPECS = Path(__file__).parent / "specs"
SMALL = SPECS / "small.toml"
runner = CliRunner()


def read(path) -> dict[str, np.ndarray]:
    table = ds.dataset(path, format="parquet").to_table().sort_by("config_id")
    return {name: table[name].to_numpy(zero_copy_only=False) for name in table.column_names}


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in b:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def one_line_error(result) -> str:
    err = result.stderr
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.fixture(scope="module")
def plan():
    return build_plan(load_spec(SMALL), chunk_size=100)


@pytest.fixture(scope="module")
def clean(plan, tmp_path_factory):
    out = tmp_path_factory.mktemp("clean") / "d"
    run_sweep(plan, out)
    return out


# -- 1. runs of different splits into one dataset at once ----------------------

@pytest.mark.parametrize("first, second", [((0, 1), (1, 2)), ((1, 2), (0, 1)),
                                           ((0, 2), (1, 3)), ((1, 3), (0, 2))])
def test_a_run_of_another_split_is_refused_while_one_is_alive(tmp_path, plan, first, second):
    meta = dataset_metadata(plan)
    held = prepare_directory(tmp_path, meta, process=first[0], processes=first[1],
                             resume=False, overwrite=False)
    try:
        with pytest.raises(SpecError, match="is being written by"):
            prepare_directory(tmp_path, meta, process=second[0], processes=second[1],
                              resume=True, overwrite=False)
        # An --overwrite of another split deletes nothing of the live run's.
        with pytest.raises(SpecError, match="is being written by"):
            prepare_directory(tmp_path, meta, process=second[0], processes=second[1],
                              resume=False, overwrite=True)
        # The same split shares the dataset (another shard of it).
        if first[1] > 1:
            other = prepare_directory(tmp_path, meta, process=(first[0] + 1) % first[1],
                                      processes=first[1], resume=True, overwrite=False)
            for lock in other:
                lock.release()
    finally:
        for lock in held:
            lock.release()
    assert json.loads((tmp_path / "_jaxmodel.json").read_text())["processes"] == first[1]
    # Once no run is alive, another split may take over the dataset.
    for lock in prepare_directory(tmp_path, meta, process=second[0], processes=second[1],
                                  resume=True, overwrite=False):
        lock.release()
    assert json.loads((tmp_path / "_jaxmodel.json").read_text())["processes"] == second[1]


@pytest.mark.parametrize("split", [1, 2])
def test_a_kill_while_the_metadata_was_written_leaves_nothing_after_resume(tmp_path, plan,
                                                                         split):
    """CI's failure at 51aaf68: a SIGKILL between ``os.link`` of the metadata and
    the unlink of its temporary left ``._jaxmodel.json.p0.tmp`` beside a
    complete ``_jaxmodel.json``, and --resume kept it for ever."""
    meta = dataset_metadata(plan)
    for lock in prepare_directory(tmp_path, meta, process=0, processes=split, resume=False,
                                  overwrite=False):
        lock.release()
    os.link(tmp_path / "_jaxmodel.json", tmp_path / "._jaxmodel.json.p0.tmp")
    (tmp_path / "._jaxmodel.json.split.tmp").write_text("{")
    foreign = tmp_path / ".notes.tmp"  # not the dataset's: never touched
    foreign.write_text("keep me")
    if split == 1:  # refused without --resume: nothing changes
        with pytest.raises(SpecError, match="already holds"):
            prepare_directory(tmp_path, meta, process=0, processes=1, resume=False,
                              overwrite=False)
        assert (tmp_path / "._jaxmodel.json.p0.tmp").exists()
    for lock in prepare_directory(tmp_path, meta, process=split - 1, processes=split,
                                  resume=True, overwrite=False):
        lock.release()
    assert sorted(p.name for p in tmp_path.glob(".*.tmp")) == [".notes.tmp"]
    assert json.loads((tmp_path / "_jaxmodel.json").read_text())["processes"] == split


def test_a_kill_while_a_manifest_was_rewritten_leaves_nothing(tmp_path, plan, clean):
    """A manifest's rewrite (drop_damaged_records) is written under a temporary
    name and renamed; a kill in between left the temporary, which neither
    --resume nor --overwrite deleted (it was not even one of the dataset's files)."""
    def leftovers(d):
        return sorted(p.name for p in d.rglob(".*.tmp"))

    out = tmp_path / "d"
    shutil.copytree(clean, out)
    (out / "._manifest-p0000.jsonl.tmp").write_text('{"chunks": [[0, 1]]')
    (out / "._manifest-p0001.jsonl.tmp").write_text("")  # a slot this run cleans
    run_sweep(plan, out, resume=True)
    assert leftovers(out) == []
    assert_same(read(out), read(clean))
    (out / "._manifest-p0000.jsonl.tmp").write_text("")
    run_sweep(plan, out, overwrite=True)
    assert leftovers(out) == []
    assert_same(read(out), read(clean))


def test_a_chunk_held_twice_is_never_complete(tmp_path, plan, clean):
    """What the race left before its fix: two manifests holding the same chunks."""
    out = tmp_path / "d"
    shutil.copytree(clean, out)
    record = json.loads((out / "_manifest-p0000.jsonl").read_text().splitlines()[0])
    copies = []
    for part in record["parts"]:
        copy = part.replace("part-p0000", "part-p0001")
        shutil.copy(out / part, out / copy)
        copies.append(copy)
    (out / "_manifest-p0001.jsonl").write_text(json.dumps({**record, "parts": copies}) + "\n")
    with pytest.raises(DatasetDamaged, match="twice"):
        run_sweep(plan, out, resume=True)
    result = runner.invoke(app, ["sweep", str(SMALL), "-o", str(out), "--resume",
                                 "--chunk-size", "100"])
    assert result.exit_code == 2 and "twice" in one_line_error(result)


# -- 2. more shards than file names number -------------------------------------

def test_a_shard_beyond_the_process_limit_is_refused(tmp_path):
    result = runner.invoke(app, ["sweep", str(SMALL), "-o", str(tmp_path / "d"),
                                 "--shard", "1234/20000", "--overwrite"])
    assert result.exit_code == 2
    assert "at most 10,000" in one_line_error(result)


def test_process_numbers_are_read_whole(tmp_path):
    assert _process_of(Path("part-p12345-c000000000000.parquet")) == 12345
    assert _process_of(Path("_manifest-p12345.jsonl")) == 12345
    assert _process_of(Path(".part-p0007-c000000000001.parquet.tmp")) == 7
    others = ["part-p12345-c000000000000.parquet", "_manifest-p12345.jsonl",
              "_reduce-p12345.npz"]
    for name in others + ["part-p1234-c000000000000.parquet", "_manifest-p1234.jsonl"]:
        (tmp_path / name).write_text("x")
    remove_dataset(tmp_path, [1234])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(others)


# -- 3. a recorded part deleted or truncated ------------------------------------

@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_a_lost_part_is_named_and_written_again(tmp_path, plan, clean, damage):
    out = tmp_path / "d"
    shutil.copytree(clean, out)
    part = sorted(out.glob("part-*.parquet"))[1]
    if damage == "delete":
        part.unlink()
    else:
        part.write_bytes(part.read_bytes()[:-100])
    result = runner.invoke(app, ["sweep", str(SMALL), "-o", str(out), "--resume",
                                 "--chunk-size", "100"])
    assert result.exit_code == 0, result.output
    assert "nothing to do" not in result.stdout
    assert part.name in result.stderr and "written again" in result.stderr
    assert_same(read(out), read(clean))


# -- 4, 5. solve's zero, underflowing and overflowing targets --------------------

@pytest.mark.parametrize("x64", [False, True])
def test_a_zero_target_no_bandwidth_reaches_is_out_of_reach(x64):
    from jaxmodel.api import evaluate
    from jaxmodel.solving import solve

    # The infinite-bandwidth step: the model at a bandwidth so high every
    # transfer term rounds to nothing.
    floor = float(evaluate("seed", x64=x64, link_bandwidth_gb_s=1e30).step_time_ms)
    s = solve({}, ("step_time_ms", 0.0), "link_bandwidth_gb_s", model="seed", x64=x64)
    assert not s.reached and np.isnan(s.solved)
    assert float(s.limit) == pytest.approx(floor, rel=1e-6)
    # MFU only tends to 0 as bandwidth tends to 0: out of reach, too.
    assert not solve({}, ("mfu_percent", 0.0), "link_bandwidth_gb_s", model="seed",
                     x64=x64).reached


def test_a_zero_target_in_a_sweep_is_not_reached(tmp_path):
    from jaxmodel.spec import parse_spec

    spec = parse_spec(SMALL.read_text().replace('filter = "valid_layout and mfu_percent >= 20"',
                                                "")
                      + '\n[solve]\ntarget = "step_time_ms=0"\nvary = "link_bandwidth_gb_s"\n',
                      "zero")
    run_sweep(build_plan(spec, chunk_size=512), tmp_path / "d")
    assert not read(tmp_path / "d")["solve_reached"].any()


@pytest.mark.parametrize("target", ["step_time_ms=1e-40", "step_time_ms=1e-300",
                                    "mfu_percent=1e-50", "step_time_ms=1e308"])
def test_a_target_float32_cannot_hold_is_refused(target, recwarn):
    """The float32 solve (the API's default; the command line pinned this before it
    answered on the host in float64, issue 26)."""
    from jaxmodel.solving import parse_target, solve

    with pytest.raises(SpecError, match="float32 cannot hold") as e:
        solve({}, parse_target(target), "link_bandwidth_gb_s", model="seed")
    assert "--x64" in str(e.value) and "\n" not in str(e.value)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("target", ["step_time_ms=1e-310", "mfu_percent=1e-320"])
def test_a_target_float64_cannot_hold_is_one_line(target, recwarn):
    """The command line answers on the host in float64 (issue 26): a subnormal
    float64 target is refused there, with no --x64 hint."""
    result = runner.invoke(app, ["solve", "--target", target, "--vary",
                                 "link_bandwidth_gb_s"])
    assert result.exit_code == 2
    line = one_line_error(result)
    assert "float64 cannot hold" in line and "--x64" not in line
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


# -- 6. [sample] draws the same configurations in float32 and x64 ----------------

def test_sample_draws_are_the_same_in_both_precisions():
    import jax

    from jaxmodel.precision import computing
    from jaxmodel.space import IndexSpace
    from jaxmodel.spec import parse_spec

    spec = parse_spec("""
[sample]
n = 300000
seed = 3
link_bandwidth_gb_s = {log_uniform = [25, 3200]}
num_gpus = {choice = [8, 16, 32, 64]}
tensor_parallel = {choice = [1, 2, 4, 8]}
micro_batch = {uniform = [1, 4]}
compute_tflops = {uniform = [100, 200]}
""", "sample")
    ids = np.arange(0, 300000, 7, dtype=np.int64)
    drawn = {}
    for dtype in (np.float32, np.float64):
        space = IndexSpace(spec, dtype)
        with computing():
            x = jax.device_get(space.decode(jax.numpy.asarray(ids), space.tables))
        drawn[dtype] = {k: np.broadcast_to(np.asarray(v), ids.shape)
                        for k, v in x._asdict().items()}
    f32, f64 = drawn[np.float32], drawn[np.float64]
    for name in ("num_gpus", "tensor_parallel", "micro_batch"):
        np.testing.assert_array_equal(f32[name], f64[name], err_msg=name)
    for name in ("link_bandwidth_gb_s", "compute_tflops"):
        # The float32 value is the float64 draw, rounded once.
        np.testing.assert_array_equal(f32[name], f64[name].astype(np.float32), err_msg=name)


# -- 7. the smaller ones ----------------------------------------------------------

@pytest.mark.parametrize("args, named", [
    (["--dense-layers", "1000", "--num-layers", "32"], "num_layers: got '32'; allowed: 0 "
     "(absent) or at least dense_layers (1000)"),
    (["--fp8-peak-tflops", "500", "--compute-tflops", "989"], "fp8_peak_tflops: got '500'; "
     "allowed: 0 (absent) or at least compute_tflops (989)"),
])
def test_inputs_out_of_order_are_one_line(args, named):
    result = runner.invoke(app, ["eval", "--model", "refined", *args])
    assert result.exit_code == 2
    assert named in one_line_error(result)


def test_a_sweep_with_inputs_out_of_order_is_refused():
    from jaxmodel.errors import JaxmodelError
    from jaxmodel.spec import parse_spec

    with pytest.raises(JaxmodelError, match="fp8_peak_tflops: got '500'"):
        parse_spec('model = "refined"\n[axes]\nfp8_peak_tflops = [500, 2000]\n', "fp8")
    # Set together (a zip), each pair is compared as given: this one is fine, and
    # a 0 peak (a GPU without FP8, like the A100) is never compared.
    parse_spec('model = "refined"\n[[zip]]\ncompute_tflops = [312, 989]\n'
               'fp8_peak_tflops = [0, 1979]\n', "gpus")


def test_a_resumed_reduction_counts_only_what_it_folded(tmp_path):
    from jaxmodel.documents import sweep_summary
    from jaxmodel.spec import parse_spec

    spec = parse_spec(SMALL.read_text() + '\n[reduce]\nby = "mfu_percent"\n'
                      'group_by = ["tensor_parallel"]\n', "reduce")
    plan = build_plan(spec, chunk_size=100)
    run_sweep(plan, tmp_path / "d", process=0, processes=2)  # half, in its state
    result = run_sweep(plan, tmp_path / "d", resume=True)  # the rest, then the merge
    assert 0 < result.configurations_done < plan.size
    assert result.extra["kept_rows"] <= result.configurations_done
    assert result.valid_rows <= result.extra["kept_rows"]
    text = sweep_summary(plan, result, tmp_path / "d")
    assert f"reduced {result.configurations_done:,} configurations" in text


def test_a_config_with_inputs_and_top_level_inputs_is_refused(tmp_path):
    from jaxmodel.config import load_config
    from jaxmodel.errors import InputError
    from jaxmodel.models import get_model

    path = tmp_path / "c.json"
    path.write_text(json.dumps({"inputs": {"num_gpus": 64}, "tensor_parallel": 4,
                                "outputs": {"mfu_percent": 40}}))
    with pytest.raises(InputError, match='config tensor_parallel.*inside "inputs"'):
        load_config(path, get_model("seed"))


@pytest.mark.parametrize("csv, named", [
    ("num_gpus,measured_step_time_ms\n0x10,5000\n", "runs row 1 num_gpus: got '0x10'"),
    ("num_gpus,measured_step_time_ms\n64,5365\n64,abc\n",
     "runs row 2 measured_step_time_ms: got 'abc'"),
    ("num_gpus,measured_step_time_ms\n1_000,5000\n", "runs row 1 num_gpus: got '1_000'"),
])
def test_the_calibrate_reader_names_the_bad_cell(tmp_path, csv, named):
    from jaxmodel.calibration import read_runs
    from jaxmodel.errors import InputError
    from jaxmodel.models import get_model

    path = tmp_path / "runs.csv"
    path.write_text(csv)
    model = get_model("seed")
    with pytest.raises(InputError) as e:
        read_runs(path, model, model.defaults)
    assert str(e.value).startswith(named)


# -- 9. calibrated.toml holds nothing a label or path injects ------------------------

def test_labels_and_paths_cannot_inject_into_calibrated_toml():
    import tomllib

    from jaxmodel.calibration import Calibration

    stats = {"mean_abs_percent": 1.0, "max_abs_percent": 2.0}
    cal = Calibration(
        model="seed", fit=("intra_node_efficiency",), outputs=("step_time_ms",),
        start={"intra_node_efficiency": 0.8}, values={"intra_node_efficiency": 0.7},
        intervals={"intra_node_efficiency": (0.6, 0.75)}, confidence=0.9, runs=[],
        errors={"before": stats, "after": stats, "leave_one_out": stats},
        warnings=["run 'a\nnum_gpus = 7\r\n[x]\x00' fits badly"],
        suggestions=[], bootstrap={"converged": 20, "resamples": 20}, converged=True,
        digest="0" * 64, source="runs\nnum_gpus = 7\n.csv", context={"gpu": "h100\nllm = 1"})
    loaded = tomllib.loads(cal.to_toml())
    # The file names its model (so that --config alone reproduces the fit) and
    # holds nothing else beside the fitted value.
    assert loaded == {"model": "seed", "intra_node_efficiency": 0.7}


# -- 12. calibrate's error exits cleanly ------------------------------------------

def test_reading_runs_starts_no_thread(tmp_path):
    """pyarrow's reader threads, alive when a bad CSV's one-line error exits,
    aborted the process ("terminate called ...", exit 134)."""
    import subprocess
    import sys

    path = tmp_path / "runs.csv"
    path.write_text("num_gpus,bogus,measured_step_time_ms\n64,1,5365\n")
    code = (
        "import os\n"
        "from jaxmodel.calibration import read_runs\n"
        "from jaxmodel.errors import InputError\n"
        "from jaxmodel.models import get_model\n"
        "m = get_model('seed')\n"
        # Importing pyarrow may start its own idle threads (the CLI imports it
        # lazily now); what must not start is a reader thread.
        "import pyarrow.csv, pyarrow.parquet\n"
        "before = len(os.listdir('/proc/self/task'))\n"
        "try:\n"
        f"    read_runs({str(path)!r}, m, m.defaults)\n"
        "except InputError:\n"
        "    pass\n"
        "print(len(os.listdir('/proc/self/task')) - before)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


# -- 8. the report escapes every value of the dataset -------------------------------

MARKUP = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


class _LiveMarkup:
    """The elements and attributes a browser would build from an HTML text."""

    def __init__(self, text: str):
        from html.parser import HTMLParser

        self.tags: list[tuple[str, dict]] = []
        outer = self

        class Parser(HTMLParser):
            def handle_starttag(self, tag, attrs):
                outer.tags.append((tag, dict(attrs)))

        Parser().feed(text)


def test_the_report_escapes_markup_planted_in_every_field_and_column(tmp_path, clean):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jaxmodel.dashboard.report import write_report

    out = tmp_path / f"d{MARKUP.replace('/', '')}"
    out.mkdir()
    meta = json.loads((clean / "_jaxmodel.json").read_text())
    planted = {k: (v if k in ("x64", "chunk_size", "spec", "model") else MARKUP)
               for k, v in meta.items()}
    planted["columns"] = [c + MARKUP for c in meta["columns"]]
    (out / "_jaxmodel.json").write_text(json.dumps(planted))
    for part in clean.glob("part-*.parquet"):
        table = pq.read_table(part)
        fields = [f.with_name(f.name + MARKUP).with_metadata(
            {b"unit": MARKUP.encode(), b"description": MARKUP.encode()})
            for f in table.schema]
        schema = pa.schema(fields, metadata={k: MARKUP.encode() if k != b"jaxmodel.spec"
                                             else v for k, v in table.schema.metadata.items()})
        pq.write_table(pa.Table.from_arrays(table.columns, schema=schema), out / part.name)
    page, _ = write_report(out, tmp_path / "r.html")
    live = _LiveMarkup(page.read_text())
    assert not [t for t, _ in live.tags if t == "img"]
    assert not [(t, a) for t, a in live.tags for k in a if k.startswith("on")]
    # Only the page's own scripts: plotly.js and one per chart, none with a source.
    scripts = [a for t, a in live.tags if t == "script"]
    charts = [a for t, a in live.tags if "plotly-graph-div" in a.get("class", "")]
    assert charts and len(scripts) == 1 + len(charts)
    assert not [a for a in scripts if "src" in a]


# -- 10. the dashboard: Host header, long filters ------------------------------------

@pytest.mark.parametrize("header, allowed", [
    ("127.0.0.1:8050", True), ("localhost:8050", True), ("[::1]:8050", True), ("", True),
    ("10.1.2.3", True), ("evil.example:8050", False), ("attacker.test", False),
    ("localhost.evil.example", False),
])
def test_a_host_header_naming_another_site_is_refused(header, allowed):
    import urllib.error
    import urllib.request

    from jaxmodel.dashboard.serve import Background, host_allowed

    assert host_allowed(header, "127.0.0.1") is allowed

    def hello(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"hello"]

    server = Background(hello)
    try:
        request = urllib.request.Request(server.url, headers={"Host": header} if header else {})
        try:
            status = urllib.request.urlopen(request, timeout=10).status
        except urllib.error.HTTPError as e:
            status = e.code
    finally:
        server.stop()
    assert status == (200 if allowed else 403)


def test_a_long_filter_is_refused_at_once_and_tokenizing_is_linear():
    import time

    from jaxmodel.expr import MAX_CHARACTERS, _Parser, parse

    t0 = time.perf_counter()
    with pytest.raises(SpecError, match="characters long"):
        parse("a > 1 and " * 1_000_000 + "b")
    assert time.perf_counter() - t0 < 1.0

    def tokenize_seconds(spaces: int) -> float:
        text = " " * spaces + "a " * 2000
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            _Parser(text, None)
            best = min(best, time.perf_counter() - t0)
        return best

    # 2,000 tokens after 4 KB or 96 KB of spaces: with text[pos:].strip() per
    # token the spaces were scanned once per token (2,000 x 96 KB, 24x the
    # work of 4 KB); linear, they are scanned once.
    near, far = tokenize_seconds(4_000), tokenize_seconds(MAX_CHARACTERS - 4_000)
    assert far < 0.05 + 3 * near


# -- 11. the tracebacks ------------------------------------------------------------

def test_a_duplicate_calibrate_column_is_one_line(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("num_gpus,num_gpus,measured_step_time_ms\n64,64,5365\n")
    result = runner.invoke(app, ["calibrate", str(path)])
    assert result.exit_code == 2
    assert "'num_gpus'; allowed: each column once" in one_line_error(result)


@pytest.mark.parametrize("suffix, text", [
    (".toml", "[axes]\nnum_gpus = " + "[" * 5000 + "]" * 5000 + "\n"),
    (".toml", "[axes]\nnum_gpus = " + "[" * 100 + "8" + "]" * 100 + "\n"),
    (".json", '{"num_gpus": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    (".config.toml", "num_gpus = " + "[" * 5000 + "]" * 5000 + "\n"),
])
def test_deeply_nested_values_are_one_line(tmp_path, suffix, text):
    path = tmp_path / f"deep{suffix}"
    path.write_text(text)
    if suffix == ".toml":
        result = runner.invoke(app, ["sweep", str(path), "-o", str(tmp_path / "d"), "--dry-run"])
    else:
        result = runner.invoke(app, ["eval", "--config", str(path)])
    assert result.exit_code == 2
    assert "nested" in one_line_error(result)


@pytest.mark.parametrize("command", [
    ["report", "{d}", "-o", "{out}/r.html"],
    ["plot", "heatmap", "{d}", "--x", "tensor_parallel", "--y", "num_gpus", "--value",
     "mfu_percent", "-o", "{out}/h.png"],
])
def test_a_truncated_later_part_is_named(tmp_path, clean, command):
    out = tmp_path / "d"
    shutil.copytree(clean, out)
    part = sorted(out.glob("part-*.parquet"))[2]
    part.write_bytes(part.read_bytes()[:500])
    args = [a.format(d=out, out=tmp_path) for a in command]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    line = one_line_error(result)
    assert part.name in line and "damaged" in line


def test_too_many_writers_is_refused_before_anything_is_written(tmp_path):
    result = runner.invoke(app, ["sweep", str(SMALL), "-o", str(tmp_path / "d"),
                                 "--writers", "100000"])
    assert result.exit_code == 2
    assert "--writers: got 100000" in one_line_error(result)
    assert not (tmp_path / "d").exists()


def test_metadata_with_a_spec_that_is_not_text_is_one_line(tmp_path, clean):
    out = tmp_path / "d"
    shutil.copytree(clean, out)
    meta = json.loads((out / "_jaxmodel.json").read_text())
    (out / "_jaxmodel.json").write_text(json.dumps({**meta, "spec": 123}))
    result = runner.invoke(app, ["report", str(out), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    assert "expected TOML text" in one_line_error(result)
