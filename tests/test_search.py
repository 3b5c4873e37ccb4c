"""Layout search: the enumeration against brute force, the winner against
``jaxmodel.evaluate`` and the plain-Python reference over every candidate, the
``best`` command through CliRunner and the console script, and bad input."""

import dataclasses
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from reference import seed_reference
from typer.testing import CliRunner

import jaxmodel
from jaxmodel.cli import app
from jaxmodel.deferred import hosted
from jaxmodel.errors import SpecError
from jaxmodel.searching import divisors, enumerate_layouts, search

runner = CliRunner()
SEED = jaxmodel.get_model("seed")
CONSOLE_SCRIPT = Path(sys.executable).parent / "jaxmodel"
AXES = ("tensor_parallel", "pipeline_parallel", "micro_batch", "gradient_accum_steps")


def brute_force_layouts(n, h, L, G, allow_idle=False):
    """Every (t, p, b, m) by trying all values: the rule as stated, in (t, p, d, b)
    order; idle GPUs allowed: every d from 1 to floor(n / (t p))."""
    out = []
    for t, p in itertools.product(range(1, n + 1), range(1, n + 1)):
        if h % t or L % p or t * p > n or (n % (t * p) and not allow_idle):
            continue
        ds = range(1, n // (t * p) + 1) if allow_idle else [n // (t * p)]
        for d in ds:
            for b in range(1, G + 1):
                for m in range(1, G + 1):
                    if b * m * d == G:
                        out.append((t, p, b, m, d))
    return out


@pytest.mark.parametrize("n,h,L,G,idle", [
    (24, 12, 8, 12, False), (24, 12, 8, 12, True), (16, 64, 6, 32, False), (7, 14, 21, 14, True),
])
def test_enumeration_equals_brute_force(n, h, L, G, idle):
    got = enumerate_layouts(n, h, L, G, allow_idle=idle)
    rows = list(zip(*(got[k].tolist() for k in (*AXES, "data_parallel")), strict=True))
    assert rows == brute_force_layouts(n, h, L, G, idle)
    assert len(rows) > 5


def test_divisors():
    for n in (1, 2, 12, 97, 1536, 12288):
        assert divisors(n).tolist() == [q for q in range(1, n + 1) if n % q == 0]


def test_pinned_axes_filter():
    all_rows = enumerate_layouts(64, 8192, 80, 64)
    pinned = enumerate_layouts(64, 8192, 80, 64, pinned={"tensor_parallel": 8,
                                                          "gradient_accum_steps": 4})
    sel = (all_rows["tensor_parallel"] == 8) & (all_rows["gradient_accum_steps"] == 4)
    for k in pinned:
        np.testing.assert_array_equal(pinned[k], all_rows[k][sel])
    assert sel.sum() > 1


QUESTION = dict(SEED.defaults, model_params_b=13.0, num_gpus=48, hidden_dim=5120,
                num_layers=40, seq_length=2048, link_bandwidth_gb_s=100.0)


def reference_table(values, G, allow_idle=False):
    """Every candidate through the plain-Python reference, in config_id order."""
    n, h, L = (int(values[k]) for k in ("num_gpus", "hidden_dim", "num_layers"))
    rows = []
    for t, p, b, m, d in brute_force_layouts(n, h, L, G, allow_idle):
        # A layout with fewer replicas than fit runs on the d t p GPUs it uses.
        args = {**values, "tensor_parallel": t, "pipeline_parallel": p, "micro_batch": b,
                "gradient_accum_steps": m, "num_gpus": d * t * p}
        args = {k: int(v) if float(v).is_integer() and k != "model_params_b" else v
                for k, v in args.items()}
        rows.append(((t, p, b, m), seed_reference(**args)))
    return rows


@pytest.mark.parametrize("by,maximize,idle", [("throughput_tokens_s", True, False),
                                              ("step_time_ms", False, True),
                                              ("mfu_percent", True, True)])
def test_top_1_is_the_brute_force_best(by, maximize, idle):
    G = 96
    result = search(SEED, QUESTION, global_batch=G, by=by, maximize=maximize, top=5,
                    allow_idle=idle, x64=True)
    ref = reference_table(QUESTION, G, idle)
    assert result.candidates == len(ref) > 50
    assert result.valid == sum(r["valid_layout"] for _, r in ref)
    sign = 1 if maximize else -1
    best = max(sign * r[by] for _, r in ref if r["valid_layout"])
    top1 = tuple(int(result.top[k][0]) for k in AXES)
    assert sign * result.top[by][0] == pytest.approx(best, rel=1e-9)
    # the winner is one of the layouts the reference says reach the best value
    winners = [lay for lay, r in ref if r["valid_layout"]
               and sign * r[by] >= best * (1 - 1e-9 * np.sign(best))]
    assert top1 in winners
    # and, brute force over jaxmodel.evaluate of every candidate, the same value
    cols = {k: np.array([lay[i] for lay, _ in ref]) for i, k in enumerate(AXES)}
    cols["num_gpus"] = np.array([r["used_gpus"] for _, r in ref])
    out = jaxmodel.evaluate(SEED, x64=True, **{**QUESTION, **cols})
    metric = np.where(out.valid_layout, getattr(out, by), np.nan)
    assert result.top[by][0] == (np.nanmax(metric) if maximize else np.nanmin(metric))
    # the five rows are the five best, best first, ties by config_id
    order = np.lexsort((np.arange(len(metric)), -sign * np.nan_to_num(metric, nan=-sign * 1e300)))
    np.testing.assert_array_equal(result.top["config_id"], order[:5])


@pytest.mark.slow
def test_refined_model_is_searched_too():
    refined = jaxmodel.get_model("refined")
    values = dict(refined.defaults, num_gpus=64)
    # (the 3D layout alone: p dividing L, plain 1F1B, t within the node)
    result = search(refined, values, global_batch=64, top=3,
                    vary={"pipeline_parallel": divisors(80), "virtual_stages": [1]})
    cand = enumerate_layouts(64, int(values["hidden_dim"]), int(values["num_layers"]), 64)
    node = cand["tensor_parallel"] <= 8
    cand = {k: v[node] for k, v in cand.items()}
    out = jaxmodel.evaluate(refined, **{**values, **{k: cand[k] for k in AXES}})
    metric = np.where(out.valid_layout, out.throughput_tokens_s, -np.inf)
    assert result.candidates == len(metric)
    assert result.valid == int(out.valid_layout.sum()) > 0
    # The search's program folds the inputs it fixes, so a float32 value may
    # round one ulp away from jaxmodel.evaluate's (all inputs as columns).
    np.testing.assert_allclose(result.top["throughput_tokens_s"][0], metric.max(), rtol=1e-5)
    assert result.top["config_id"][0] == int(np.argmax(metric))


@pytest.mark.parametrize("filter_first", [False, True])
def test_chunking_changes_nothing_and_compiles_once(filter_first, monkeypatch):
    from jaxmodel.program import Plan

    traces, host_calls = [], []

    def counting_apply(x):
        (host_calls if hosted() else traces).append(1)
        return SEED.apply(x)

    model = dataclasses.replace(SEED, apply=counting_apply)
    whole = search(SEED, QUESTION, global_batch=96, top=20, allow_idle=True)
    if filter_first:  # as a search of more than Plan.FILTER_FIRST_ROWS runs
        monkeypatch.setattr(Plan, "FILTER_FIRST_ROWS", 0)
    chunked = search(model, QUESTION, global_batch=96, top=20, allow_idle=True, chunk=16)
    assert chunked.chunks > 5 and whole.chunks == 1
    # one trace for the column dtypes (eval_shape), then in the single compile
    # one for every row (a search this small) or two (the filter over every
    # row, then the ranked columns of the kept rows: Plan.filter_first); none
    # per chunk; and one NumPy call for the winners' other columns (the search
    # folds only what it ranks by: Plan.widen)
    assert len(traces) == (3 if filter_first else 2)
    assert len(host_calls) == 1
    for k, v in whole.top.items():
        np.testing.assert_array_equal(chunked.top[k], v, err_msg=k)
    assert chunked.valid == whole.valid


def test_best_per_group_equals_brute_force():
    result = search(SEED, QUESTION, global_batch=96, group_by=["tensor_parallel"],
                    allow_idle=True, chunk=40)
    ref = reference_table(QUESTION, 96, allow_idle=True)
    expected = {}
    for i, ((t, *_), r) in enumerate(ref):
        if r["valid_layout"] and (t not in expected or r["throughput_tokens_s"]
                                  > expected[t][1] * (1 + 1e-6)):
            expected[t] = (i, r["throughput_tokens_s"])
    g = result.per_group
    assert g["tensor_parallel"].tolist() == sorted(expected)
    np.testing.assert_allclose(g["throughput_tokens_s"],
                               [expected[t][1] for t in sorted(expected)], rtol=1e-5)


@pytest.mark.slow
def test_pareto_front_equals_brute_force():
    # GPUs used (min) against throughput (max), idle GPUs allowed: the front
    # from jaxmodel.evaluate over every candidate by pairwise dominance.
    values = {**QUESTION, "num_gpus": 46.0}
    result = search(SEED, values, global_batch=96, allow_idle=True, chunk=32,
                    pareto=("used_gpus", "throughput_tokens_s", True, False))
    cand = enumerate_layouts(46, 5120, 40, 96, allow_idle=True)
    used = cand["data_parallel"] * cand["tensor_parallel"] * cand["pipeline_parallel"]
    out = jaxmodel.evaluate(SEED, **{**values, **{k: cand[k] for k in AXES}, "num_gpus": used})
    x = out.used_gpus.astype(float)
    y = np.where(out.valid_layout, out.throughput_tokens_s, np.nan).astype(float)
    front = []
    for i in np.flatnonzero(~np.isnan(y)):
        dominated = np.any((x <= x[i]) & (y >= y[i]) & ((x < x[i]) | (y > y[i])))
        first_of_equal = not np.any((x == x[i]) & (y == y[i]) & (np.arange(len(x)) < i))
        if not dominated and first_of_equal:
            front.append(i)
    front.sort(key=lambda i: (x[i], -y[i]))
    assert len(front) >= 3
    assert result.pareto["config_id"].tolist() == front
    assert not result.pareto_overflow


def test_global_batch_options():
    from jaxmodel.searching import global_batch_of

    assert global_batch_of(SEED.defaults, None, None) == 32  # the seed's b m d = 1 x 16 x 2
    assert global_batch_of(SEED.defaults, 12, None) == 12
    assert global_batch_of(SEED.defaults, None, 4096 * 7) == 7
    with pytest.raises(jaxmodel.InputError, match="multiple of seq_length"):
        global_batch_of(SEED.defaults, None, 1000)
    with pytest.raises(SpecError, match="not both"):
        global_batch_of(SEED.defaults, 4, 4096)


# --- the command -------------------------------------------------------------

ARGS_175B = ["--model-params-b", "175", "--num-layers", "96", "--hidden-dim", "12288",
             "--num-gpus", "512", "--global-batch", "1536"]


def best(*args):
    result = runner.invoke(app, ["best", "--model", "seed", *args])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    return result.stdout


def test_best_json_is_the_search():
    doc = json.loads(best(*ARGS_175B, "--format", "json", "--top", "4"))
    n = len(enumerate_layouts(512, 12288, 96, 1536)["micro_batch"])
    assert doc["candidates"] == n and doc["valid"] == n
    assert doc["question"]["global_batch_tokens"] == 1536 * 4096
    assert len({r["config_id"] for r in doc["top"]}) == len(doc["top"]) == 4
    ref = [seed_reference(175.0, 512, r["tensor_parallel"], r["pipeline_parallel"],
                          r["micro_batch"], r["gradient_accum_steps"], 4096, 12288, 96,
                          450.0, 500.0) for r in doc["top"]]
    for row, r in zip(doc["top"], ref, strict=True):
        assert row["micro_batch"] * row["gradient_accum_steps"] * row["data_parallel"] == 1536
        assert row["throughput_tokens_s"] == pytest.approx(r["throughput_tokens_s"], rel=1e-5)
    thr = [r["throughput_tokens_s"] for r in doc["top"]]
    assert thr == sorted(thr, reverse=True)
    assert doc["seconds"]["compile"] > 0 and doc["seconds"]["run"] > 0


def test_best_table_and_minimize():
    text = best(*ARGS_175B, "--minimize", "step_time_ms", "--top", "3", "--tensor-parallel", "8")
    lines = text.splitlines()
    assert "ranked by step_time_ms (min)" in lines[0]
    assert any(line.startswith("rank") for line in lines)
    n = len(enumerate_layouts(512, 12288, 96, 1536, pinned={"tensor_parallel": 8})["micro_batch"])
    assert lines[-1].startswith(f"{n:,} candidates evaluated, {n:,} valid")
    rows = [line.split() for line in lines[:-1] if line.strip()[:1].isdigit()]
    assert len(rows) == 3 and all(r[1] == "8" for r in rows)  # t pinned to 8
    steps = [float(r[6].replace(",", "")) for r in rows]
    assert steps == sorted(steps)


def test_best_group_by_table():
    text = best(*ARGS_175B, "--group-by", "pipeline_parallel", "--top", "1")
    assert "best per pipeline_parallel:" in text
    part = text.split("best per pipeline_parallel:")[1].split("\n\n")[0].splitlines()[2:]
    assert [int(r.split()[2]) for r in part] == [1, 2, 4, 8, 16, 32]


@pytest.mark.slow
def test_best_pareto_json():
    on_500 = [a if a != "512" else "500" for a in ARGS_175B]
    doc = json.loads(best(*on_500, "--allow-idle", "--pareto",
                          "min:used_gpus,max:throughput_tokens_s", "--format", "json"))
    assert doc["pareto_of"] == {"x": "used_gpus", "y": "throughput_tokens_s",
                                "minimize_x": True, "minimize_y": False, "overflow": False}
    front = doc["pareto"]
    used = [r["used_gpus"] for r in front]
    thr = [r["throughput_tokens_s"] for r in front]
    assert len(front) >= 2
    assert used == sorted(used) and thr == sorted(thr)  # more GPUs buy more throughput
    assert len(set(used)) == len(used)
    assert max(thr) == doc["top"][0]["throughput_tokens_s"]  # the front ends at the best


def test_console_script_end_to_end():
    assert CONSOLE_SCRIPT.exists(), "install the project first (make test does)"
    done = subprocess.run([str(CONSOLE_SCRIPT), "best", "--model", "seed", *ARGS_175B,
                           "--format", "json",
                           "--top", "1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["top"][0]["valid_layout"] is True


def assert_one_line_error(result, *names):
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    err = result.stderr
    assert err.count("\n") == 1 and err.startswith("error: "), err
    for name in names:
        assert name in err, (name, err)


@pytest.mark.parametrize("args,names", [
    (["--num-gpus", "3", "--global-batch", "7"], ["no layout fits", "7 sequences on 3 GPUs"]),
    (["--num-gpus", "64", "--global-batch", "64", "--tensor-parallel", "3"], ["no layout"]),
    (["--by", "throughput"], ["throughput", "did you mean 'throughput_tokens_s'"]),
    (["--minimize", "step_ms"], ["step_ms", "did you mean"]),
    (["--by", "mfu_percent", "--minimize", "step_time_ms"], ["not both"]),
    (["--global-batch-tokens", "1000"], ["global_batch_tokens", "multiple of seq_length"]),
    (["--global-batch", "0"], ["global_batch"]),
    (["--top", "0"], ["top", "1 to 10000"]),
    (["--top", "10001"], ["top"]),
    (["--group-by", "tp"], ["--group-by", "tensor_parallel"]),
    (["--num-gpus", "-4"], ["num_gpus"]),
    (["--pareto", "used_gpus"], ["--pareto", "two columns"]),
    (["--pareto", "up:used_gpus,step_time_ms"], ["--pareto", "min:COLUMN"]),
    (["--pareto", "used_gpus,step_ms"], ["--pareto", "did you mean"]),
    (["--chunk", "0"], ["--chunk"]),
], ids=["indivisible", "pinned", "by", "minimize", "both", "tokens", "zero", "top0", "top-big",
        "group", "gpus", "pareto-one", "pareto-direction", "pareto-column", "chunk"])
def test_bad_input_is_one_line(args, names):
    assert_one_line_error(runner.invoke(app, ["best", "--model", "seed", *args]), *names)


@pytest.mark.slow
def test_allow_idle_tries_fewer_replicas_405b_on_16384_gpus():
    """Issue 17 item 5: with idle GPUs allowed, Llama-3-405B on 16,384 H100s at
    16M tokens is best at t8 p14 with d = 128 of the 146 replicas that fit,
    which the old enumeration (d = floor(N / (t p)) only) never tried; the
    winner is the brute-force best over every (t, p, d, b)."""
    refined = jaxmodel.get_model("refined")
    values = {**refined.defaults,
              **jaxmodel.presets.apply_presets(refined, gpu="h100-sxm", llm="llama3-405b"),
              "num_gpus": 16384.0, "recompute": 2.0}
    G, n = 2048, 16384
    # (the space of issue 17: p dividing L, plain 1F1B; t within the node)
    result = search(refined, values, global_batch=G, top=1, allow_idle=True,
                    vary={"pipeline_parallel": divisors(126), "virtual_stages": [1]})
    rows = [(t, p, d, b) for t in divisors(int(values["hidden_dim"])) if t <= 8
            for p in divisors(int(values["num_layers"])) if t * p <= n
            for d in range(1, n // (t * p) + 1) if G % d == 0
            for b in divisors(G // d)]
    t, p, d, b = (np.array(c, float) for c in zip(*rows, strict=True))
    out = jaxmodel.evaluate(refined, **{**values, "tensor_parallel": t, "pipeline_parallel": p,
                                        "micro_batch": b, "gradient_accum_steps": G / (d * b),
                                        "num_gpus": d * t * p})
    metric = np.where(out.valid_layout, out.throughput_tokens_s, -np.inf)
    i = int(np.argmax(metric))
    assert result.candidates == len(rows)
    assert result.top["throughput_tokens_s"][0] == pytest.approx(metric[i], rel=1e-6)
    top = tuple(int(result.top[k][0]) for k in ("tensor_parallel", "pipeline_parallel",
                                                "data_parallel"))
    assert top == (8, 14, 128) == (int(t[i]), int(p[i]), int(d[i]))
    assert result.top["idle_gpus"][0] == n - 8 * 14 * 128
    assert result.top["num_gpus"][0] == n
