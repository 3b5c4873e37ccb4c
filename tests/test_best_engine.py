"""``jaxmodel best`` and ``jaxmodel.search`` through the sweep engine: the same
rows sharded over 4 CPU devices, split over 2 processes, and interrupted by
Ctrl-C then resumed, each against a brute force over ``jaxmodel.evaluate``
of every candidate (independent of the engine and of the reducers)."""

import json
import os
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest
from typer.testing import CliRunner

import jaxmodel
from jaxmodel.cli import app
from jaxmodel.engine import Plan, SweepInterrupted
from jaxmodel.errors import InputError, SpecError
from jaxmodel.searching import enumerate_layouts, search

runner = CliRunner()
SEED = jaxmodel.get_model("seed")
AXES = ("tensor_parallel", "pipeline_parallel", "micro_batch", "gradient_accum_steps")
# 46 GPUs with idle GPUs allowed: rows run on the d t p GPUs they use.
N, G = 46, 96
VALUES = dict(SEED.defaults, model_params_b=13.0, num_gpus=float(N), hidden_dim=5120.0,
              num_layers=40.0, seq_length=2048.0, link_bandwidth_gb_s=100.0)
QUESTION = dict(global_batch=G, top=7, allow_idle=True, group_by=("tensor_parallel",),
                pareto=("used_gpus", "throughput_tokens_s", True, False), x64=True)
CLI_ARGS = ["--model-params-b", "13", "--num-gpus", str(N), "--hidden-dim", "5120",
            "--num-layers", "40", "--seq-length", "2048", "--link-bandwidth-gb-s", "100",
            "--global-batch", str(G), "--allow-idle", "--top", "7", "--group-by",
            "tensor_parallel", "--pareto", "min:used_gpus,max:throughput_tokens_s", "--x64",
            "--format", "json"]


def brute_force():
    """config ids of the top 7 by throughput, the best per t and the Pareto front
    of (used GPUs min, throughput max), by plain numpy over every candidate."""
    cand = enumerate_layouts(N, 5120, 40, G, allow_idle=True)
    used = cand["data_parallel"] * cand["tensor_parallel"] * cand["pipeline_parallel"]
    out = jaxmodel.evaluate(SEED, x64=True, **{**VALUES, **{k: cand[k] for k in AXES},
                                               "num_gpus": used})
    y = np.where(out.valid_layout, out.throughput_tokens_s, np.nan).astype(float)
    ids = np.arange(len(y))
    valid = np.flatnonzero(~np.isnan(y))
    ranked = sorted(valid, key=lambda i: (-y[i], i))
    per_t = {}
    for i in ranked:
        per_t.setdefault(int(cand["tensor_parallel"][i]), int(i))
    x = out.used_gpus.astype(float)
    front = [int(i) for i in valid
             if not np.any((x <= x[i]) & (y >= y[i]) & ((x < x[i]) | (y > y[i])))
             and not np.any((x == x[i]) & (y == y[i]) & (ids < i))]
    front.sort(key=lambda i: (x[i], -y[i]))
    return {"top": [int(i) for i in ranked[:7]], "per_group": [per_t[t] for t in sorted(per_t)],
            "pareto": front, "valid": len(valid), "used": used, "throughput": y}


def rows_of(r) -> dict:
    return {"top": {k: v.tolist() for k, v in r.top.items()},
            "per_group": {k: v.tolist() for k, v in r.per_group.items()},
            "pareto": {k: v.tolist() for k, v in r.pareto.items()},
            "valid": r.valid, "candidates": r.candidates}


@pytest.fixture(scope="module")
def expected():
    return brute_force()


@pytest.fixture(scope="module")
def one_device():
    return rows_of(search(SEED, VALUES, **QUESTION))


def check_against(rows, ref):
    assert rows["valid"] == ref["valid"] > 20
    assert rows["candidates"] == len(ref["used"])
    for part in ("top", "per_group", "pareto"):
        assert rows[part]["config_id"] == ref[part], part
        ids = rows[part]["config_id"]
        np.testing.assert_allclose(rows[part]["throughput_tokens_s"],
                                   ref["throughput"][ids], rtol=1e-12, err_msg=part)
        # idle rows: evaluated on d t p GPUs, reported with the job's
        assert rows[part]["used_gpus"] == ref["used"][ids].tolist()
        assert set(rows[part]["num_gpus"]) == {N}
        assert rows[part]["idle_gpus"] == (N - ref["used"][ids]).tolist()
    assert any(i > 0 for i in rows["top"]["idle_gpus"] + rows["pareto"]["idle_gpus"])
    assert len(rows["pareto"]["config_id"]) >= 3


@pytest.mark.slow
def test_in_memory_search_is_the_brute_force(one_device, expected):
    check_against(one_device, expected)


@pytest.mark.slow
def test_four_devices_give_the_same_rows_as_one(tmp_path, one_device, expected):
    script = (
        "import json, sys, jax, jaxmodel\n"
        "from jaxmodel.searching import search\n"
        "from test_best_engine import QUESTION, SEED, VALUES, rows_of\n"
        "assert len(jax.devices()) == 4\n"
        "r = search(SEED, VALUES, chunk=100, **QUESTION)\n"
        "assert r.chunks > 4\n"
        "print(json.dumps(rows_of(r)))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__),
                                         env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    four = json.loads(done.stdout)
    assert four == one_device
    check_against(four, expected)


def spy_plans(monkeypatch) -> list:
    """The Plans built from here on, in order."""
    plans = []
    real_init = Plan.__init__

    def spy(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        plans.append(self)

    monkeypatch.setattr(Plan, "__init__", spy)
    return plans


def test_the_plan_shards_a_candidate_table_over_the_mesh(monkeypatch):
    # (in this process: 1 device) the plan a search runs is the sweep engine's
    plans = spy_plans(monkeypatch)
    r = search(SEED, VALUES, global_batch=G, top=2, chunk=256, allow_idle=True)
    (plan,) = plans
    assert plan.spec.table is not None and plan.size == r.candidates > 256
    assert r.chunks == plan.num_chunks == -(-plan.size // 256)
    assert plan.mesh.devices.size == len(jax.local_devices())


def test_a_search_folds_what_it_ranks_and_fills_the_winners_on_the_host(monkeypatch):
    # The reducer's state holds the ranked, grouped and Pareto columns only;
    # every other column of the winners comes from one NumPy evaluation of
    # their inputs (Plan.widen), checked here against jax's evaluate.  (With
    # the filter first, as a search of more than Plan.FILTER_FIRST_ROWS runs.)
    monkeypatch.setattr(Plan, "FILTER_FIRST_ROWS", 0)
    plans = spy_plans(monkeypatch)
    r = search(SEED, VALUES, chunk=64, **QUESTION)
    (plan,) = plans
    assert {c.name for c in plan.state_columns} == {
        "config_id", "throughput_tokens_s", "tensor_parallel", "used_gpus"}
    assert plan.filter_first == 64 // 16
    for part in (r.top, r.per_group, r.pareto):
        assert set(part) >= {c.name for c in plan.columns}
        inputs = {f.name: part[f.name] for f in SEED.inputs if f.name != "num_gpus"}
        # (rows with idle GPUs run on the GPUs they use: the table's num_gpus)
        out = jaxmodel.evaluate(SEED, x64=True, num_gpus=part["used_gpus"], **inputs)
        for f in SEED.outputs:
            if f.name != "idle_gpus":
                np.testing.assert_allclose(part[f.name], getattr(out, f.name), rtol=1e-12,
                                           err_msg=f.name)
        np.testing.assert_array_equal(part["num_gpus"], N)


def test_the_filter_first_gives_the_rows_of_the_whole_chunk(monkeypatch, one_device):
    # Plan.filter_first (the filter over every row, the ranked columns over
    # the kept ones, block by block), which a search of more than
    # Plan.FILTER_FIRST_ROWS runs, against the plain step over whole chunks,
    # which this small one runs by default.
    plans = spy_plans(monkeypatch)
    plain = rows_of(search(SEED, VALUES, chunk=64, **QUESTION))
    assert plans[-1].filter_first == 0
    monkeypatch.setattr(Plan, "FILTER_FIRST_ROWS", 0)
    first = rows_of(search(SEED, VALUES, chunk=64, **QUESTION))
    assert plans[-1].filter_first == 64 // 16
    assert first == plain == one_device


@pytest.mark.slow
def test_two_processes_give_the_same_rows_as_one(tmp_path, one_device, expected):
    out = tmp_path / "split"
    first = search(SEED, VALUES, chunk=64, out=out, process=1, processes=2, **QUESTION)
    assert not first.complete and first.top["config_id"].size == 0
    assert 0 < first.valid < expected["valid"]  # its share only
    second = search(SEED, VALUES, chunk=64, out=out, process=0, processes=2, **QUESTION)
    assert second.complete and second.chunks > 4
    assert rows_of(second) == one_device
    # a rerun with --resume finds both states and gives the result again
    again = search(SEED, VALUES, chunk=64, out=out, resume=True, **QUESTION)
    assert again.skipped_chunks == again.chunks
    assert rows_of(again) == one_device
    check_against(rows_of(again), expected)


@pytest.mark.slow
def test_ctrl_c_then_resume_gives_the_same_rows(tmp_path, monkeypatch, one_device):
    out = tmp_path / "stopped"
    real_step = Plan.reduce_step
    calls = []

    def step_then_interrupt(self, state, chunk):
        calls.append(chunk)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return real_step(self, state, chunk)

    monkeypatch.setattr(Plan, "reduce_step", step_then_interrupt)
    with pytest.raises(SweepInterrupted) as info:
        search(SEED, VALUES, chunk=64, out=out, **QUESTION)
    assert info.value.args[0].chunks == 3
    monkeypatch.setattr(Plan, "reduce_step", real_step)
    with pytest.raises(SpecError, match="--resume to finish it"):
        search(SEED, VALUES, chunk=64, out=out, **QUESTION)
    resumed = search(SEED, VALUES, out=out, resume=True, **QUESTION)  # chunk from the dataset
    assert resumed.skipped_chunks == 3 and resumed.chunk == 64
    assert rows_of(resumed) == one_device


@pytest.mark.slow
def test_cli_shards_interrupt_and_resume(tmp_path, monkeypatch, one_device):
    out = str(tmp_path / "cli")
    whole = json.loads(runner.invoke(app, ["best", "--model", "seed", *CLI_ARGS]).stdout)
    real_step = Plan.reduce_step
    calls = []

    def step_then_interrupt(self, state, chunk):
        calls.append(chunk)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real_step(self, state, chunk)

    monkeypatch.setattr(Plan, "reduce_step", step_then_interrupt)
    stopped = runner.invoke(app, ["best", "--model", "seed", *CLI_ARGS, "-o", out, "--shard", "0/2",
                                  "--chunk-size", "64"])
    assert stopped.exit_code == 130
    assert "rerun the same command with --resume" in stopped.stderr
    monkeypatch.setattr(Plan, "reduce_step", real_step)
    share = runner.invoke(app, ["best", "--model", "seed", *CLI_ARGS, "-o", out, "--shard", "1/2",
                                "--chunk-size", "64"])
    assert share.exit_code == 0, share.output
    assert json.loads(share.stdout)["complete"] is False
    last = runner.invoke(app, ["best", "--model", "seed", *CLI_ARGS, "-o", out, "--shard", "0/2",
                               "--resume"])
    assert last.exit_code == 0, last.output
    doc = json.loads(last.stdout)
    assert doc["output"] == out
    for part in ("top", "per_group", "pareto"):
        assert doc[part] == whole[part], part
        assert [r["config_id"] for r in doc[part]] == one_device[part]["config_id"]
    assert doc["valid"] == whole["valid"] == one_device["valid"]


def one_line(result):
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    return result.stderr


@pytest.mark.parametrize("args,text", [
    (["--resume"], "--resume: needs --output DIR"),
    (["--overwrite"], "--overwrite: needs --output DIR"),
    (["--shard", "0/2"], "--shard: needs --output DIR"),
    (["-o", "X", "--shard", "2/2"], "--shard: got '2/2'; allowed: I/N with 0 <= I < N"),
    (["-o", "X", "--shard", "one"], "--shard: got 'one'"),
    (["-o", "X", "--resume", "--overwrite"], "not both"),
])
def test_bad_output_options_are_one_line(args, text, tmp_path):
    args = [str(tmp_path / a) if a == "X" else a for a in args]
    assert text in one_line(runner.invoke(app, ["best", "--model", "seed", "--global-batch", "64",
                                                *args]))


def test_bad_process_values_in_python(tmp_path):
    with pytest.raises(InputError, match="process: got 2; allowed: a whole number from 0 to 1"):
        search(SEED, VALUES, global_batch=G, out=tmp_path, process=2, processes=2)
    with pytest.raises(InputError, match="processes: got 0"):
        search(SEED, VALUES, global_batch=G, out=tmp_path, processes=0)
    with pytest.raises(SpecError, match="several processes need an output directory"):
        search(SEED, VALUES, global_batch=G, process=0, processes=2)


def test_output_directory_holding_other_files_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    result = runner.invoke(app, ["best", "--model", "seed", "--global-batch", "64", "-o",
                                 str(tmp_path)])
    assert "holds other files" in one_line(result)
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_an_output_not_of_its_declared_kind_is_refused():
    # used_gpus is declared an exact integer; a float there would be cast
    # silently into the reducers' int64 column.
    import dataclasses

    def floats(x):
        out = SEED.apply(x)
        return out._replace(used_gpus=out.used_gpus * 1.0)

    model = dataclasses.replace(SEED, apply=floats)
    with pytest.raises(SpecError, match="output 'used_gpus' is float(32|64) of shape \\(\\); "
                                        "allowed: a scalar of its declared kind \\(int\\)"):
        search(model, VALUES, global_batch=G, allow_idle=True)


@pytest.mark.parametrize("x64", [False, True])
def test_every_registered_model_declares_its_output_kinds(x64):
    # (a search skips this trace for registered models: searching.check_outputs)
    from jaxmodel.models import MODELS
    from jaxmodel.precision import float_dtype
    from jaxmodel.searching import check_outputs

    for model in MODELS.values():
        check_outputs(model, float_dtype(x64), force=True)

