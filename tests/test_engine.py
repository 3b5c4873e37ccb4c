"""The sweep engine: rows equal the model, one compile, devices, processes, resume."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import jaxmodel
from jaxmodel.engine import Plan, SweepInterrupted, run_sweep
from jaxmodel.errors import SpecError
from jaxmodel.spec import load_spec, parse_spec

SPECS = Path(__file__).parent / "specs"
SMALL = SPECS / "small.toml"
JAXMODEL = str(Path(sys.executable).with_name("jaxmodel"))


def read(path) -> dict[str, np.ndarray]:
    table = ds.dataset(path, format="parquet").to_table().sort_by("config_id")
    return {name: table[name].to_numpy(zero_copy_only=False) for name in table.column_names}


def all_rows(spec) -> tuple[np.ndarray, dict[str, np.ndarray], object]:
    """Every configuration of a grid spec, decoded on the host and evaluated
    with jaxmodel.evaluate (an independent path from the engine's)."""
    plan = Plan(spec)
    ids = np.arange(spec.size)
    inputs = plan.space.host_inputs(ids)
    return ids, inputs, jaxmodel.evaluate(spec.model, **inputs)


@pytest.mark.slow
@pytest.mark.parametrize("experts", [1, 8])
def test_fixed_inputs_stay_scalars_and_rows_still_equal_evaluate(experts):
    """Inputs the sweep fixes reach the vmapped model as scalars (so XLA folds
    the branches they switch off: a dense model's MoE terms, a Mixtral's dense
    ones), and every row still equals jaxmodel.evaluate on the full columns."""
    spec = parse_spec(f"""
model = "refined"
[base]
num_experts = {experts}
experts_per_token = 2
moe_ffn_hidden_dim = 14336
hidden_dim = 4096
num_layers = 32
num_heads = 32
num_kv_heads = 8
ffn_hidden_dim = 14336
gradient_accum_steps = 8
[axes]
tensor_parallel = [1, 2, 4, 8]
pipeline_parallel = [1, 2, 4]
expert_parallel = [1, 2, 8]
num_gpus = [64, 256]
recompute = [0, 1, 2]
""", "fixed")
    plan = Plan(spec)
    x = plan.space.decode(np.arange(4), plan.space.tables)
    varied = {"tensor_parallel", "pipeline_parallel", "expert_parallel", "num_gpus", "recompute"}
    for f, value in zip(spec.model.inputs, x, strict=True):
        assert np.ndim(value) == (1 if f.name in varied else 0), f.name
    rows, n, _ = plan.rows_for(0)
    assert n == spec.size
    ids, inputs, out = all_rows(spec)
    np.testing.assert_array_equal(rows["config_id"], ids)
    for name, values in inputs.items():
        np.testing.assert_array_equal(rows[name], values, err_msg=name)
    assert 0 < out.valid_layout.sum() < spec.size
    for f in spec.model.outputs:
        expected = getattr(out, f.name)
        if f.kind == "float":
            # Folding the fixed inputs rounds some float32 sums in another
            # order (seen: 2.2e-6 relative).
            np.testing.assert_allclose(rows[f.name], expected, rtol=1e-5, err_msg=f.name)
        else:
            np.testing.assert_array_equal(rows[f.name], expected, err_msg=f.name)


@pytest.mark.slow
def test_rows_equal_evaluate_and_count_matches_filter(tmp_path):
    spec = load_spec(SMALL)
    plan = Plan(spec, chunk_size=100)
    result = run_sweep(plan, tmp_path / "ds")
    got = read(tmp_path / "ds")

    ids, inputs, out = all_rows(spec)
    keep = out.valid_layout & (out.mfu_percent >= 20)
    assert result.rows == keep.sum() == len(got["config_id"])
    assert 0 < keep.sum() < spec.size  # the filter does something
    np.testing.assert_array_equal(got["config_id"], ids[keep])
    for name, values in inputs.items():
        np.testing.assert_array_equal(got[name], values[keep], err_msg=name)
    model = spec.model
    for f in model.outputs:
        expected = getattr(out, f.name)[keep]
        if f.kind == "category":
            expected = np.array(f.categories)[expected]
            np.testing.assert_array_equal(got[f.name].astype(str), expected)
        elif f.kind == "float":
            # Separately compiled programs may fuse differently: 1-ulp freedom.
            np.testing.assert_allclose(got[f.name], expected, rtol=3e-7, err_msg=f.name)
        else:
            np.testing.assert_array_equal(got[f.name], expected, err_msg=f.name)
    assert result.valid_rows == keep.sum()


def test_one_compile_for_many_chunks(tmp_path):
    spec = load_spec(SMALL)
    plan = Plan(spec, chunk_size=100)  # 12 chunks, the last one partial
    assert plan.num_chunks == 12 and spec.size % 100 != 0
    result = run_sweep(plan, tmp_path / "ds")
    assert result.chunks == 12
    assert plan.traces == 1


def test_schema_metadata_and_types(tmp_path):
    spec = load_spec(SMALL)
    run_sweep(Plan(spec, chunk_size=300), tmp_path / "ds")
    parts = sorted((tmp_path / "ds").glob("part-*.parquet"))
    assert len(parts) >= 2  # rows_per_file = 200 in the spec
    schema = pq.read_schema(parts[0])
    assert str(schema.field("num_gpus").type) == "int64"
    assert str(schema.field("tokens_per_step").type) == "int64"
    assert str(schema.field("mfu_percent").type) == "float"
    assert str(schema.field("valid_layout").type) == "bool"
    bottleneck = schema.field("bottleneck").type
    assert str(bottleneck) == "dictionary<values=string, indices=int8, ordered=0>"
    assert schema.field("step_time_ms").metadata[b"unit"] == b"ms"
    assert schema.field("step_time_ms").metadata[b"description"]
    meta = schema.metadata
    assert meta[b"jaxmodel.spec"].decode() == SMALL.read_text()
    assert meta[b"jaxmodel.model"] == b"seed"
    assert meta[b"jaxmodel.jax_version"]
    assert meta[b"jaxmodel.jaxmodel_version"] == jaxmodel.__version__.encode()
    assert meta[b"jaxmodel.created"]


@pytest.mark.slow
def test_x64_writes_float64(tmp_path):
    spec = load_spec(SMALL)
    run_sweep(Plan(spec, chunk_size=1000, x64=True), tmp_path / "ds")
    got = read(tmp_path / "ds")
    assert got["mfu_percent"].dtype == np.float64
    inputs = Plan(spec, x64=True).space.host_inputs(got["config_id"])
    out = jaxmodel.evaluate(spec.model, x64=True, **inputs)
    np.testing.assert_allclose(got["step_time_ms"], out.step_time_ms, rtol=1e-15)


def test_duckdb_and_polars_read_the_dataset(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    spec = load_spec(SMALL)
    result = run_sweep(Plan(spec, chunk_size=300), tmp_path / "ds")
    glob = str(tmp_path / "ds" / "*.parquet")
    con = duckdb.connect()
    [(n, best)] = con.execute(f"select count(*), max(mfu_percent) from '{glob}'").fetchall()
    assert n == result.rows
    got = read(tmp_path / "ds")
    assert best == pytest.approx(float(got["mfu_percent"].max()), rel=1e-7)
    by = con.execute(f"select bottleneck, count(*) from '{glob}' group by 1 order by 1").fetchall()
    values, counts = np.unique(got["bottleneck"].astype(str), return_counts=True)
    assert by == list(zip(values.tolist(), counts.tolist(), strict=True))
    frame = pl.scan_parquet(glob).select(pl.len(), pl.col("throughput_tokens_s").sum()).collect()
    assert frame.item(0, 0) == result.rows
    assert frame.item(0, 1) == pytest.approx(float(got["throughput_tokens_s"].sum()), rel=1e-5)


def test_hive_partitioning(tmp_path):
    text = SMALL.read_text().replace("rows_per_file = 200",
                                     'rows_per_file = 200\npartition_by = ["tensor_parallel"]')
    spec = parse_spec(text, "partitioned")
    result = run_sweep(Plan(spec, chunk_size=500), tmp_path / "ds")
    dirs = sorted(p.name for p in (tmp_path / "ds").iterdir() if p.is_dir())
    assert dirs == ["tensor_parallel=1", "tensor_parallel=2", "tensor_parallel=4",
                    "tensor_parallel=8"]
    table = ds.dataset(tmp_path / "ds", format="parquet", partitioning="hive").to_table()
    assert table.num_rows == result.rows
    got = table.sort_by("config_id")
    ids, inputs, out = all_rows(spec)
    keep = out.valid_layout & (out.mfu_percent >= 20)
    np.testing.assert_array_equal(got["tensor_parallel"].to_numpy(),
                                  inputs["tensor_parallel"][keep])


@pytest.mark.slow
def test_sample_mode_is_deterministic_and_in_range(tmp_path):
    text = """
model = "seed"
[sample]
n = 5000
seed = 3
link_bandwidth_gb_s = {log_uniform = [25, 3200]}
tensor_parallel = {choice = [1, 2, 4, 8]}
micro_batch = {uniform = [1, 4]}
compute_tflops = {uniform = [100, 200]}
"""
    spec = parse_spec(text, "sample")
    run_sweep(Plan(spec, chunk_size=1000), tmp_path / "a")
    run_sweep(Plan(spec, chunk_size=700), tmp_path / "b")
    a, b = read(tmp_path / "a"), read(tmp_path / "b")
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    bw = a["link_bandwidth_gb_s"]
    assert bw.min() >= 25 and bw.max() <= 3200
    # log-uniform: about half the draws below the geometric mean sqrt(25 x 3200) = 282.8
    assert abs(np.mean(bw < 282.84) - 0.5) < 0.05
    assert set(np.unique(a["tensor_parallel"])) == {1, 2, 4, 8}
    assert set(np.unique(a["micro_batch"])) == {1, 2, 3, 4}
    assert abs(np.mean(a["compute_tflops"]) - 150) < 3
    out = jaxmodel.evaluate(spec.model, **{f.name: a[f.name] for f in spec.model.inputs})
    np.testing.assert_allclose(a["mfu_percent"], out.mfu_percent, rtol=3e-7)


def test_indices_beyond_2_to_the_31_decode_exactly():
    spec = parse_spec("""
model = "seed"
[axes]
num_gpus = {range = [8, 65544, 8]}
link_bandwidth_gb_s = {geomspace = [10, 10000, 1000]}
compute_tflops = {linspace = [100, 1000, 1000]}
micro_batch = {range = [1, 3, 1]}
""")
    assert spec.size == 8192 * 1000 * 1000 * 2 > 2**33
    plan = Plan(spec, chunk_size=1024)
    last = plan.num_chunks - 1
    rows, n, _ = plan.rows_for(last)
    start = last * 1024
    assert n == spec.size - start
    ids = np.arange(start, spec.size)
    np.testing.assert_array_equal(rows["config_id"], ids)
    expected = plan.space.host_inputs(ids)
    for name in ("num_gpus", "link_bandwidth_gb_s", "compute_tflops", "micro_batch"):
        np.testing.assert_array_equal(rows[name], expected[name].astype(rows[name].dtype))
    assert rows["num_gpus"][-1] == 65536 and rows["micro_batch"][-1] == 2


@pytest.mark.slow
def test_existing_dataset_is_not_overwritten(tmp_path):
    spec = load_spec(SMALL)
    run_sweep(Plan(spec, chunk_size=500), tmp_path / "ds")
    before = read(tmp_path / "ds")
    with pytest.raises(SpecError, match="--resume to finish it or --overwrite"):
        run_sweep(Plan(spec, chunk_size=500), tmp_path / "ds")
    other = parse_spec(SMALL.read_text().replace("mfu_percent >= 20", "mfu_percent >= 30"))
    with pytest.raises(SpecError, match="another sweep"):
        run_sweep(Plan(other, chunk_size=500), tmp_path / "ds", resume=True)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    with pytest.raises(SpecError, match="holds other files"):
        run_sweep(Plan(spec, chunk_size=500), tmp_path / "notes")
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep me"
    result = run_sweep(Plan(other, chunk_size=500), tmp_path / "ds", overwrite=True)
    assert result.rows < len(before["config_id"])
    assert len(read(tmp_path / "ds")["config_id"]) == result.rows


@pytest.mark.slow
def test_ctrl_c_stops_after_a_chunk_and_resume_finishes(tmp_path, monkeypatch):
    spec = load_spec(SMALL)
    plan = Plan(spec, chunk_size=50)
    real_fetch = plan.fetch
    calls = []

    def fetch_then_interrupt(result):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return real_fetch(result)

    monkeypatch.setattr(plan, "fetch", fetch_then_interrupt)
    with pytest.raises(SweepInterrupted) as info:
        run_sweep(plan, tmp_path / "ds")
    assert info.value.args[0].chunks == 3
    done = read(tmp_path / "ds")["config_id"]
    assert done.max() < 150
    run_sweep(Plan(spec, chunk_size=50), tmp_path / "ds", resume=True)
    run_sweep(Plan(spec, chunk_size=50), tmp_path / "clean")
    a, b = read(tmp_path / "ds"), read(tmp_path / "clean")
    for name in b:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(extra)
    return env


@pytest.mark.slow
def test_sigkill_at_any_moment_then_resume_equals_uninterrupted(tmp_path):
    spec_path = tmp_path / "kill.toml"
    spec_path.write_text(SMALL.read_text()
                         .replace('filter = "valid_layout and mfu_percent >= 20"', "")
                         .replace("geomspace = [25, 3200, 6]", "geomspace = [25, 3200, 60]")
                         .replace("rows_per_file = 200", "rows_per_file = 100"))
    args = ["--chunk-size", "64", "-q"]
    clean = tmp_path / "clean"
    subprocess.run([JAXMODEL, "sweep", str(spec_path), "-o", str(clean), *args], check=True,
                   env=_env())
    expected = read(clean)
    total_chunks = -(-len(expected["config_id"]) // 64)
    cut_short = 0
    # Kill before any part, right after the first part, and a little later.
    for case, (marker, delay) in enumerate([("_jaxmodel.json", 0.0),
                                            ("_manifest-p0000.jsonl", 0.0),
                                            ("_manifest-p0000.jsonl", 0.2)]):
        out = tmp_path / f"killed-{case}"
        proc = subprocess.Popen([JAXMODEL, "sweep", str(spec_path), "-o", str(out), *args],
                                env=_env())
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None and not (out / marker).exists():
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for part in out.rglob("part-*.parquet"):
            pq.read_metadata(part)  # every visible part is a complete file
        manifest = out / "_manifest-p0000.jsonl"
        lines = manifest.read_text().splitlines() if manifest.exists() else []
        recorded = sum(b - a for line in lines for a, b in json.loads(line)["chunks"])
        if sum(1 for _ in out.rglob("*.tmp")) or recorded < total_chunks:
            cut_short += 1
        subprocess.run([JAXMODEL, "sweep", str(spec_path), "-o", str(out), "--resume", *args],
                       check=True, env=_env())
        got = read(out)
        for name in expected:
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
        assert not list(out.rglob(".*.tmp"))
    assert cut_short >= 2  # the kills really landed mid-sweep


@pytest.mark.slow
def test_four_devices_give_the_same_rows(tmp_path):
    script = (
        "import sys, jax; from jaxmodel.sweeping import build_plan; "
        "from jaxmodel.engine import run_sweep; "
        f"p = build_plan({str(SMALL)!r}, chunk_size=100); "
        "assert p.mesh.devices.size == 4, p.mesh; "
        "assert len(p.offsets.sharding.device_set) == 4; "
        "run_sweep(p, sys.argv[1]); print(p.padded)"
    )
    env = _env(XLA_FLAGS="--xla_force_host_platform_device_count=4")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "four")], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "100"
    run_sweep(Plan(load_spec(SMALL), chunk_size=100), tmp_path / "one")
    a, b = read(tmp_path / "four"), read(tmp_path / "one")
    for name in b:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


_GATHERS = r"""
import json, re, sys
import numpy as np
from jaxmodel.precision import computing
from jaxmodel.spec import parse_spec
from jaxmodel.sweeping import build_plan

grid = open(sys.argv[1]).read()


def gathered(text):
    found = re.finditer(r"= \w+\[(\d*)[\],][^=]*? all-gather\(", text)
    return [int(m.group(1) or 1) for m in found]


with computing():
    p = build_plan(parse_spec('filter = "valid_layout"\n' + grid, "f"), chunk_size=65536)
    assert p.mesh.devices.size == 4
    step = p._step.lower(np.int64(0), p.space.start_digits(0), p.offsets, p.tables)
    r = build_plan(parse_spec(grid + '[reduce]\ntop_k = 5\nby = "mfu_percent"\n', "r"),
                   chunk_size=65536)
    fold = r._reduce_step.lower(r.init_state(), np.int64(0), r.space.start_digits(0),
                                r.offsets, r.tables)
    print(json.dumps([gathered(step.compile().as_text()), gathered(fold.compile().as_text())]))
"""


@pytest.mark.slow
def test_sharded_steps_gather_no_chunk(tmp_path):
    """On 4 devices, the compiled programs of a filtered sweep and a top-k
    reduction move no chunk-sized array between devices: each device compacts
    its own shard, or cuts it to the reducer's 2k candidates.  (Before, XLA
    all-gathered the chunk for the compaction and for top_k: two CPU devices
    were 6x slower than one, bench/README.md.)"""
    grid = tmp_path / "grid.toml"
    grid.write_text((Path(__file__).parent.parent / "sweeps" / "default.toml").read_text()
                    .replace("{geomspace = [25, 3200, 128]}", "[100, 400, 1600, 3200]"))
    env = _env(XLA_FLAGS="--xla_force_host_platform_device_count=4")
    proc = subprocess.run([sys.executable, "-c", _GATHERS, str(grid)], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    step, fold = json.loads(proc.stdout.strip().splitlines()[-1])
    assert step == []
    # the fold gathers the 4 x 2k candidates and the k state rows (padded), no more
    assert fold and max(fold) <= 64, fold


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["distributed", "shard"])
def test_two_processes_split_the_sweep(tmp_path, mode):
    out = tmp_path / "two"
    port = _free_port()
    procs = []
    for i in range(2):
        if mode == "distributed":
            extra = ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                     "--process-id", str(i)]
        else:
            extra = ["--shard", f"{i}/2"]
        procs.append(subprocess.Popen(
            [JAXMODEL, "sweep", str(SMALL), "-o", str(out), "--chunk-size", "100", *extra],
            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        stdout, stderr = p.communicate(timeout=180)
        assert p.returncode == 0, stderr
        assert "of 2" in stdout
    manifests = sorted(p.name for p in out.glob("_manifest-*.jsonl"))
    assert manifests == ["_manifest-p0000.jsonl", "_manifest-p0001.jsonl"]
    run_sweep(Plan(load_spec(SMALL), chunk_size=100), tmp_path / "one")
    a, b = read(out), read(tmp_path / "one")
    assert len(np.unique(a["config_id"])) == len(a["config_id"])  # none duplicated
    for name in b:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    chunks = [json.loads(line)["chunks"] for m in out.glob("_manifest-*.jsonl")
              for line in m.read_text().splitlines()]
    assert sorted(c for runs in chunks for a_, b_ in runs for c in range(a_, b_)) == list(
        range(Plan(load_spec(SMALL), chunk_size=100).num_chunks))


def test_a_filter_that_keeps_nothing_still_leaves_a_readable_dataset(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    spec = parse_spec(SMALL.read_text().replace("mfu_percent >= 20", "mfu_percent > 100"))
    result = run_sweep(Plan(spec, chunk_size=500), tmp_path / "ds")
    assert result.rows == 0
    table = ds.dataset(tmp_path / "ds", format="parquet").to_table()
    assert table.num_rows == 0 and "mfu_percent" in table.column_names
    glob = str(tmp_path / "ds" / "*.parquet")
    assert duckdb.connect().execute(f"select count(*) from '{glob}'").fetchall() == [(0,)]


@pytest.mark.slow
def test_datasets_nested_in_the_output_are_never_touched(tmp_path):
    spec = load_spec(SMALL)
    run_sweep(Plan(spec, chunk_size=500), tmp_path / "parent" / "inner")
    inner = read(tmp_path / "parent" / "inner")
    # the parent holds another dataset's directory: refused, nothing deleted
    with pytest.raises(SpecError, match="holds other files"):
        run_sweep(Plan(spec, chunk_size=500), tmp_path / "parent")
    # a dataset with a dataset nested inside it: --overwrite and --resume leave it alone
    run_sweep(Plan(spec, chunk_size=500), tmp_path / "outer")
    run_sweep(Plan(spec, chunk_size=500), tmp_path / "outer" / "nested")
    run_sweep(Plan(spec, chunk_size=500), tmp_path / "outer", overwrite=True)
    run_sweep(Plan(spec, chunk_size=500), tmp_path / "outer", resume=True)
    for path in (tmp_path / "parent" / "inner", tmp_path / "outer" / "nested"):
        got = read(path)
        for name in inner:
            np.testing.assert_array_equal(got[name], inner[name], err_msg=name)


@pytest.mark.slow
def test_overwrite_by_one_shard_keeps_the_other_shards_work(tmp_path):
    spec = load_spec(SMALL)
    out = tmp_path / "ds"
    run_sweep(Plan(spec, chunk_size=100), out, process=1, processes=2, overwrite=True)
    run_sweep(Plan(spec, chunk_size=100), out, process=0, processes=2, overwrite=True)
    run_sweep(Plan(spec, chunk_size=100), tmp_path / "one")
    a, b = read(out), read(tmp_path / "one")
    for name in b:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_an_empty_partitioned_dataset_still_opens(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    text = SMALL.read_text().replace("mfu_percent >= 20", "mfu_percent > 100").replace(
        "rows_per_file = 200", 'rows_per_file = 200\npartition_by = ["tensor_parallel"]')
    result = run_sweep(Plan(parse_spec(text), chunk_size=500), tmp_path / "ds")
    assert result.rows == 0
    glob = str(tmp_path / "ds" / "**" / "*.parquet")
    query = f"select count(*) from read_parquet('{glob}', hive_partitioning=true)"
    assert duckdb.connect().execute(query).fetchall() == [(0,)]
