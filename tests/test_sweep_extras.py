"""Sweeps with [sensitivity], [solve] and [reduce] tables, and presets in [base]."""

import os
import signal
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest

import jaxmodel
from jaxmodel.engine import SweepInterrupted, run_sweep
from jaxmodel.errors import SpecError
from jaxmodel.sensitivity import sensitivities
from jaxmodel.solving import solve
from jaxmodel.spec import load_spec, parse_spec
from jaxmodel.sweeping import build_plan

GRID = """
model = "seed"
[base]
model_params_b = 13
num_layers = 40
hidden_dim = 5120
[axes]
link_bandwidth_gb_s = {geomspace = [25, 3200, 8]}
num_gpus = {powers_of_two = [8, 128]}
tensor_parallel = [1, 2, 4, 8]
pipeline_parallel = [1, 2, 4]
gradient_accum_steps = [4, 32]
"""


def read(path) -> dict[str, np.ndarray]:
    table = ds.dataset(path, format="parquet").to_table()
    if "config_id" in table.column_names:
        table = table.sort_by("config_id")
    return {n: table[n].to_numpy(zero_copy_only=False) for n in table.column_names}


def everything(spec):
    """All rows of a grid spec via host decoding + jaxmodel.evaluate (independent path)."""
    plan = build_plan(spec)
    ids = np.arange(spec.size)
    inputs = plan.space.host_inputs(ids)
    out = jaxmodel.evaluate(spec.model, **inputs)
    return ids, inputs, out


def test_sensitivity_columns_equal_the_api(tmp_path):
    spec = parse_spec(GRID + """
[sensitivity]
of = ["step_time_ms", "mfu_percent"]
wrt = ["link_bandwidth_gb_s", "gradient_accum_steps"]
kind = "both"
""", "sens")
    run_sweep(build_plan(spec, chunk_size=200), tmp_path / "ds")
    got = read(tmp_path / "ds")
    inputs = {f.name: got[f.name] for f in spec.model.inputs}
    api = sensitivities(inputs, of=["step_time_ms", "mfu_percent"],
                        wrt=["link_bandwidth_gb_s", "gradient_accum_steps"], kind="both",
                        model=spec.model)
    assert len(api.columns) == 8
    for name, expected in api.columns.items():
        np.testing.assert_allclose(got[name], expected, rtol=2e-6, equal_nan=True,
                                   err_msg=name)
    assert np.isnan(got["d_step_time_ms__d_link_bandwidth_gb_s"][~got["valid_layout"]]).all()
    assert (got["d_step_time_ms__d_link_bandwidth_gb_s"][got["valid_layout"]] <= 0).all()


@pytest.mark.slow
def test_solve_columns_equal_the_api(tmp_path):
    spec = parse_spec(GRID + """
[solve]
target = "mfu_percent=40"
vary = "link_bandwidth_gb_s"
""", "solve")
    run_sweep(build_plan(spec, chunk_size=200, x64=True), tmp_path / "ds")
    got = read(tmp_path / "ds")
    inputs = {f.name: got[f.name] for f in spec.model.inputs}
    sol = solve(inputs, target="mfu_percent=40", vary="link_bandwidth_gb_s", x64=True,
                model=spec.model)
    np.testing.assert_array_equal(got["solve_reached"], sol.reached)
    np.testing.assert_allclose(got["solved_link_bandwidth_gb_s"], sol.solved, rtol=1e-9,
                               equal_nan=True)
    reached = got["solve_reached"]
    assert 0 < reached.sum() < len(reached)
    # plugging the solutions back in reaches the target
    back = jaxmodel.evaluate("seed", x64=True, **{**{k: v[reached] for k, v in inputs.items()},
                                          "link_bandwidth_gb_s":
                                          got["solved_link_bandwidth_gb_s"][reached]})
    np.testing.assert_allclose(back.mfu_percent, 40.0, rtol=1e-6)


def _best_order(metric, ids, maximize):
    """Exhaustive order: valid (finite) first, best metric, then config_id."""
    bad = ~np.isfinite(metric)
    key = np.where(bad, 0.0, -metric if maximize else metric)
    return np.lexsort((ids, key, bad))


@pytest.mark.slow
def test_top_k_equals_exhaustive_sort_across_chunks_and_processes(tmp_path):
    spec = parse_spec('filter = "pipeline_parallel > 1"\n' + GRID + """
[reduce]
top_k = 25
by = "throughput_tokens_s"
""", "topk")
    ids, inputs, out = everything(spec)
    keep = inputs["pipeline_parallel"] > 1
    metric = np.where(keep, out.throughput_tokens_s, np.nan)
    expected = ids[_best_order(metric, ids, True)][:25]
    result = run_sweep(build_plan(spec, chunk_size=64), tmp_path / "one")
    got = ds.dataset(tmp_path / "one").to_table()
    assert result.rows == 25
    np.testing.assert_array_equal(got["config_id"].to_numpy(), expected)
    # two processes (one after the other, as two job-array tasks would)
    first = run_sweep(build_plan(spec, chunk_size=64), tmp_path / "two", process=0, processes=2)
    assert first.reduced is None and not list((tmp_path / "two").glob("part-*.parquet"))
    second = run_sweep(build_plan(spec, chunk_size=64), tmp_path / "two", process=1,
                       processes=2)
    assert second.reduced is not None
    got2 = ds.dataset(tmp_path / "two").to_table()
    np.testing.assert_array_equal(got2["config_id"].to_numpy(), expected)
    np.testing.assert_allclose(got2["throughput_tokens_s"].to_numpy(),
                               out.throughput_tokens_s[expected], rtol=3e-7)


def test_best_per_group_equals_exhaustive_group_by(tmp_path):
    spec = parse_spec(GRID + """
[reduce]
by = "mfu_percent"
group_by = ["link_bandwidth_gb_s", "bottleneck"]
""", "group")
    ids, inputs, out = everything(spec)
    run_sweep(build_plan(spec, chunk_size=100), tmp_path / "ds")
    got = read(tmp_path / "ds")
    expected = {}
    for bw in np.unique(inputs["link_bandwidth_gb_s"]):
        for code in np.unique(out.bottleneck):
            sel = (inputs["link_bandwidth_gb_s"] == bw) & (out.bottleneck == code)
            sel &= np.isfinite(out.mfu_percent)
            if sel.any():
                order = _best_order(out.mfu_percent[sel], ids[sel], True)
                expected[float(bw), int(code)] = int(ids[sel][order[0]])
    names = list(jaxmodel.BOTTLENECKS)
    pairs = {(float(b), names.index(str(n))): int(i) for b, n, i in
             zip(got["link_bandwidth_gb_s"], got["bottleneck"], got["config_id"], strict=True)}
    assert pairs == expected
    assert len(expected) > 8  # several bottlenecks occur


def test_pareto_front_equals_brute_force(tmp_path):
    spec = parse_spec(GRID + """
[reduce]
pareto = ["used_gpus", "step_time_ms"]
""", "pareto")
    ids, inputs, out = everything(spec)
    run_sweep(build_plan(spec, chunk_size=128), tmp_path / "ds")
    got = read(tmp_path / "ds")
    x, y = out.used_gpus.astype(np.float64), out.step_time_ms.astype(np.float64)
    ok = np.isfinite(y)
    front = set()
    for i in np.flatnonzero(ok):
        dominated = ok & (x <= x[i]) & (y <= y[i]) & ((x < x[i]) | (y < y[i]))
        twin = ok & (x == x[i]) & (y == y[i]) & (ids < ids[i])
        if not dominated.any() and not twin.any():
            front.add(int(ids[i]))
    assert set(got["config_id"].tolist()) == front
    assert len(front) >= 3


@pytest.mark.slow
def test_reduce_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    spec = parse_spec(GRID + "\n[reduce]\ntop_k = 10\nby = \"mfu_percent\"\n", "resume")
    plan = build_plan(spec, chunk_size=50)
    real = plan.reduce_step
    calls = []

    def step_then_interrupt(state, chunk):
        calls.append(chunk)
        if len(calls) == 4:
            os.kill(os.getpid(), signal.SIGINT)
        return real(state, chunk)

    monkeypatch.setattr(plan, "reduce_step", step_then_interrupt)
    with pytest.raises(SweepInterrupted):
        run_sweep(plan, tmp_path / "ds")
    assert (tmp_path / "ds" / "_reduce-p0000.npz").exists()
    assert not list((tmp_path / "ds").glob("part-*.parquet"))
    resumed = build_plan(spec, chunk_size=50)
    result = run_sweep(resumed, tmp_path / "ds", resume=True)
    assert result.chunks == resumed.num_chunks - 4
    run_sweep(build_plan(spec, chunk_size=50), tmp_path / "clean")
    a, b = read(tmp_path / "ds"), read(tmp_path / "clean")
    for name in b:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize(
    "table, message",
    [
        ("[reduce]\ntop_k = 5", "reduce.by"),
        ("[reduce]\ntop_k = 5\nby = \"mfu\"", "reduce: unknown column 'mfu'"),
        ("[reduce]\ntop_k = 0\nby = \"mfu_percent\"", "reduce.top_k"),
        ("[reduce]\nby = \"mfu_percent\"", "exactly one of top_k, group_by or pareto"),
        ("[reduce]\nby = \"mfu_percent\"\ngroup_by = [\"step_time_ms\"]", "neither an input"),
        ("[reduce]\npareto = [\"used_gpus\"]", "reduce.pareto"),
        ("[reduce]\ntopk = 3", "did you mean 'top_k'"),
        ("[sensitivity]\nof = [\"mfu\"]", "mfu"),
        ("[solve]\ntarget = \"mfu_percent=60\"", "vary"),
        ("[reduce]\ntop_k = 3\nby = \"bottleneck\"", "not a number to rank by"),
        ("[reduce]\npareto = [\"valid_layout\", \"step_time_ms\"]", "not a number"),
    ],
)
def test_bad_extra_tables(table, message):
    with pytest.raises(SpecError) as info:
        build_plan(parse_spec(GRID + table, "bad"))
    assert message in str(info.value)


def test_presets_in_base():
    spec = parse_spec('model = "refined"\n[base]\ngpu = "h100-sxm"\nllm = "llama3-70b"\n'
                      "num_gpus = 1024\n")
    from jaxmodel.presets import apply_presets

    expected = apply_presets(jaxmodel.get_model("refined"), gpu="h100-sxm", llm="llama3-70b")
    for name, value in expected.items():
        assert spec.base[name] == value, name
    assert spec.base["num_gpus"] == 1024
    with pytest.raises(jaxmodel.InputError, match="base.gpu"):
        parse_spec('[base]\ngpu = "h100"\n')


@pytest.mark.slow
def test_refined_model_sweeps(tmp_path):
    spec = parse_spec('model = "refined"\n[base]\ngpu = "h100-sxm"\nllm = "llama2-70b"\n'
                      "[axes]\nnum_gpus = [256, 512]\ntensor_parallel = [4, 8]\n"
                      "recompute = [0, 1, 2]\n", "refined")
    run_sweep(build_plan(spec, chunk_size=8), tmp_path / "ds")
    got = read(tmp_path / "ds")
    inputs = {f.name: got[f.name] for f in spec.model.inputs}
    out = jaxmodel.evaluate("refined", **inputs)
    np.testing.assert_allclose(got["step_time_ms"], out.step_time_ms, rtol=3e-7)
    np.testing.assert_array_equal(got["fits_in_memory"], out.fits_in_memory)
    assert Path(tmp_path / "ds" / "_jaxmodel.json").exists()


def sweep_on_four_devices(spec_path: Path, out: Path, chunk_size: int) -> None:
    """Run the sweep of ``spec_path`` into ``out`` in a process with 4 CPU devices."""
    import subprocess
    import sys

    script = (
        "import sys; from jaxmodel.sweeping import build_plan; "
        "from jaxmodel.engine import run_sweep; "
        f"p = build_plan(sys.argv[1], chunk_size={int(chunk_size)}); "
        "assert p.mesh.devices.size == 4; run_sweep(p, sys.argv[2])"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    proc = subprocess.run([sys.executable, "-c", script, str(spec_path), str(out)], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_reductions_are_the_same_on_four_devices(tmp_path):
    for name, table in [("topk", '[reduce]\ntop_k = 9\nby = "throughput_tokens_s"\n'),
                        ("group", '[reduce]\nby = "mfu_percent"\ngroup_by = ["num_gpus"]\n'),
                        ("pareto", '[reduce]\npareto = ["used_gpus", "step_time_ms"]\n')]:
        spec_path = tmp_path / f"{name}.toml"
        spec_path.write_text(GRID + table)
        sweep_on_four_devices(spec_path, tmp_path / f"{name}-four", 100)
        run_sweep(build_plan(spec_path, chunk_size=100), tmp_path / f"{name}-one")
        a, b = read(tmp_path / f"{name}-four"), read(tmp_path / f"{name}-one")
        assert len(b["config_id"]) > 0
        for col in b:
            np.testing.assert_array_equal(a[col], b[col], err_msg=f"{name}: {col}")


@pytest.mark.slow
@pytest.mark.parametrize("by", ["mfu_percent", "step_time_ms"])
def test_top_k_cut_per_device_equals_one_device(tmp_path, by):
    """Chunks of 65,536 rows, so each of 4 devices cuts its 16,384-row shard to
    candidates (TopK.candidates under shard_map) before the fold; the top 50,
    ties in MFU between layouts that split b m differently included, are the
    one-device rows (which the fold selects from the whole chunk)."""
    grid = Path(__file__).parent.parent / "sweeps" / "default.toml"
    text = grid.read_text().replace("{geomspace = [25, 3200, 128]}", "[100, 400, 1600, 3200]")
    text += f'\n[reduce]\ntop_k = 50\nby = "{by}"\nminimize = {str(by != "mfu_percent").lower()}\n'
    spec_path = tmp_path / "cut.toml"
    spec_path.write_text(text)
    sweep_on_four_devices(spec_path, tmp_path / "four", 65536)
    run_sweep(build_plan(spec_path, chunk_size=65536), tmp_path / "one")
    a, b = read(tmp_path / "four"), read(tmp_path / "one")
    assert len(b["config_id"]) == 50
    for col in b:
        np.testing.assert_array_equal(a[col], b[col], err_msg=col)


@pytest.mark.slow
def test_reduce_resumed_with_another_split_folds_each_chunk_once(tmp_path):
    spec = parse_spec(GRID + "\n[reduce]\ntop_k = 40\nby = \"mfu_percent\"\n", "split")
    run_sweep(build_plan(spec, chunk_size=64), tmp_path / "ds", process=1, processes=2)
    result = run_sweep(build_plan(spec, chunk_size=64), tmp_path / "ds", resume=True)
    assert result.reduced is not None
    run_sweep(build_plan(spec, chunk_size=64), tmp_path / "clean")
    a, b = read(tmp_path / "ds"), read(tmp_path / "clean")
    assert len(np.unique(a["config_id"])) == len(a["config_id"]) == 40
    for name in b:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_a_grid_at_a_fixed_global_batch(tmp_path):
    """Issue 27 item 12: [base] global_batch_tokens derives every row's
    gradient_accum_steps, m = G / (b s d), and keeps only rows that reach G."""
    import itertools

    spec = tmp_path / "fixed.toml"
    spec.write_text('model = "seed"\n[base]\nglobal_batch_tokens = 262144\n'  # 64 x 4096
                    "[axes]\nnum_gpus = [8, 16, 24, 64]\ntensor_parallel = [1, 2, 8]\n"
                    "pipeline_parallel = [1, 4]\nmicro_batch = [1, 2, 3]\n")
    jaxmodel.sweep(spec, tmp_path / "ds")
    got = ds.dataset(tmp_path / "ds").to_table().to_pylist()
    want = {}
    for n, t, p, b in itertools.product([8, 16, 24, 64], [1, 2, 8], [1, 4], [1, 2, 3]):
        d = n // (t * p)
        if d >= 1 and 64 % (b * d) == 0:
            want[(n, t, p, b)] = 64 // (b * d)
    assert {(r["num_gpus"], r["tensor_parallel"], r["pipeline_parallel"], r["micro_batch"]):
            r["gradient_accum_steps"] for r in got} == want
    assert all(r["tokens_per_step"] == 262144 for r in got)
    with pytest.raises(SpecError, match="gradient_accum_steps is derived from it"):
        parse_spec('[base]\nglobal_batch_tokens = 4096\n[axes]\n'
                   'gradient_accum_steps = [1, 2]\n')


def test_the_fixed_batch_example_spec_parses():
    spec = load_spec(Path(__file__).parents[1] / "sweeps" / "fixed_batch.toml")
    assert spec.global_batch_tokens == 4_194_304 and spec.size == 400
    assert "gradient_accum_steps" in spec.varied and spec.filter is not None
