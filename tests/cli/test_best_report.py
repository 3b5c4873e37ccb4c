"""What a planner reads first (issue 17 items 3, 4 and 12): memory in the eval
and best tables, why best found no valid layout, and the seed model's missing
memory limit said out loud."""

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

import jaxmodel
from jaxmodel.cli import app
from jaxmodel.presets import apply_presets
from jaxmodel.searching import enumerate_layouts, explain_no_valid

runner = CliRunner()
REFINED = jaxmodel.get_model("refined")
LLAMA3_70B = ["--model", "refined", "--gpu", "h100-sxm", "--llm", "llama3-70b"]
# H100's "80 GB" are 80 GiB: 85.89934592e9 bytes.
H100_GB = 80 * 2**30 / 1e9


@pytest.mark.slow
def test_eval_table_shows_memory_and_its_breakdown():
    """Llama-3-70B, t8 p4 (the defaults) on H100s.  By hand: one layer's weight
    matrices W = 2 h^2 (1 + kv / a) + 3 h f = 855,638,016; the first stage holds
    20 layers and the embedding, (20 W + V h) / t = 2,270,429,184 parameters
    per GPU, 18 bytes each (bf16 weights 2, fp32 main_grad buffer 4, Adam's fp32
    copy and two moments 12) = 40.87 GB of weights, gradients and Adam states."""
    result = runner.invoke(app, ["eval", *LLAMA3_70B, "--format", "table", "--no-profile"])
    assert result.exit_code == 0, result.output
    out = jaxmodel.evaluate(REFINED, **jaxmodel.presets.apply_presets(
        REFINED, gpu="h100-sxm", llm="llama3-70b"))
    total = float(out.memory_gb_per_gpu)
    have = H100_GB
    assert (f"memory per GPU: {total:,.2f} GB of {have:g} GB (fits: yes, "
            f"{have - total:,.2f} GB free)") in result.output
    assert re.search(r"weights, gradients, optimizer\s+40\.87 GB", result.output)
    act = float(out.activation_gb_per_gpu)
    assert re.search(rf"activations\s+{act:,.2f} GB", result.output)


@pytest.mark.slow
def test_eval_table_says_when_memory_does_not_fit():
    result = runner.invoke(app, ["eval", *LLAMA3_70B, "--format", "table", "--no-profile",
                                 "--gpu-memory-gb", "40"])
    assert result.exit_code == 0, result.output
    assert re.search(r"memory per GPU: [\d.]+ GB of 40 GB \(fits: no, [\d.]+ GB over\)",
                     result.output)


def test_seed_eval_table_has_no_memory_section():
    result = runner.invoke(app, ["eval", "--model", "seed", "--format", "table", "--no-profile"])
    assert "memory per GPU" not in result.output


@pytest.mark.slow
def test_best_table_shows_memory_columns():
    result = runner.invoke(app, ["best", *LLAMA3_70B, "--num-gpus", "64", "--global-batch",
                                 "64", "--top", "3"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.lstrip().startswith("rank"))
    cols = lines[head].split()
    assert {"mem_gb", "state_gb", "act_gb", "hfu_percent", "per_gpu_tokens_s"} <= set(cols)
    doc = json.loads(runner.invoke(app, ["best", *LLAMA3_70B, "--num-gpus", "64",
                                         "--global-batch", "64", "--top", "3",
                                         "--format", "json"]).output)
    for row, line in zip(doc["top"], lines[head + 1:head + 4], strict=True):
        cells = dict(zip(cols, line.split(), strict=True))
        assert float(cells["mem_gb"]) == round(row["memory_gb_per_gpu"], 3)
        assert float(cells["hfu_percent"]) == round(row["hfu_percent"], 3)
        assert float(cells["per_gpu_tokens_s"].replace(",", "")) == pytest.approx(
            row["per_gpu_tokens_s"], abs=0.0006)
        assert row["memory_gb_per_gpu"] <= H100_GB
    assert "every layout listed fits" in result.output


def test_best_with_the_seed_model_says_it_has_no_memory_limit():
    result = runner.invoke(app, ["best", "--model", "seed", "--num-gpus", "64", "--global-batch",
                                 "64"])
    assert result.exit_code == 0
    assert "model 'seed' has no memory limit" in result.output
    assert "--model refined" in result.output
    one = runner.invoke(app, ["best", "--model", "seed", "--num-gpus", "64", "--global-batch",
                              "64", "--top", "1"])
    assert "best 1 layout:" in one.output  # issue 27 item 13: plurals agree
    assert "; 1 chunk of " in one.output


@pytest.mark.slow
def test_no_valid_layout_is_explained_by_counts_and_the_nearest_fix():
    """Llama-3-70B on 64 GPUs of 20 GB: nothing fits.  Counts against every
    candidate evaluated independently; the suggested memory makes the closest fit."""
    values = {**REFINED.defaults, **jaxmodel.presets.apply_presets(
        REFINED, gpu="h100-sxm", llm="llama3-70b"), "num_gpus": 64.0, "gpu_memory_gb": 20.0}
    why = explain_no_valid(REFINED, values, global_batch=64)
    # the refined search tries every p (uneven pipelines), not only the divisors of L
    cand = enumerate_layouts(64, 8192, 80, 64, uneven=True)
    cols = {k: cand[k].astype(float) for k in ("tensor_parallel", "pipeline_parallel",
                                               "micro_batch", "gradient_accum_steps")}
    out = jaxmodel.evaluate(REFINED, **{**values, **cols})
    assert not out.valid_layout.any()
    formed = np.isfinite(out.memory_gb_per_gpu)
    assert why.counts["do not fit in memory"] == formed.sum() > 0
    assert sum(why.counts.values()) == len(cand["micro_batch"])
    # t = 16, 32, 64 divide the 64 attention heads but not the 8 key/value heads
    t = cand["tensor_parallel"]
    assert why.counts["# key/value heads do not split evenly over # tensor-parallel ranks"] \
        == int(((t > 8) & (t <= 64)).sum()) > 0
    i = int(np.argmin(np.where(formed, out.memory_gb_per_gpu, np.inf)))
    assert why.closest["memory_gb_per_gpu"] == float(out.memory_gb_per_gpu[i])
    assert why.closest["tensor_parallel"] == cand["tensor_parallel"][i]
    need = float(why.changes[0].split(">=")[1].split()[0])
    fixed = jaxmodel.evaluate(REFINED, **{**values, **{k: v[i] for k, v in cols.items()},
                                          "gpu_memory_gb": need})
    assert fixed.valid_layout
    assert why.pairs["leave GPUs idle (t p does not divide num_gpus)"] > 0
    assert any(c.startswith("--allow-idle adds") for c in why.changes)


@pytest.mark.slow
def test_best_prints_why_no_layout_is_valid():
    result = runner.invoke(app, ["best", *LLAMA3_70B, "--num-gpus", "64", "--global-batch",
                                 "64", "--gpu-memory-gb", "20"])
    assert result.exit_code == 0, result.output
    assert "no valid layout." in result.output
    assert re.search(r"\d+  do not fit in memory", result.output)
    assert re.search(r"closest to fitting: t\d+ p\d+ d\d+ b\d+ m\d+ needs [\d.]+ GB per GPU",
                     result.output)
    assert "nearest change: gpu_memory_gb >= " in result.output
    doc = json.loads(runner.invoke(app, ["best", *LLAMA3_70B, "--num-gpus", "64",
                                         "--global-batch", "64", "--gpu-memory-gb", "20",
                                         "--format", "json"]).output)
    assert doc["top"] == [] and doc["why_no_valid"]["counts"]["do not fit in memory"] > 0


def test_eval_table_shows_per_gpu_rates_and_only_the_terms_in_use():
    """Issue 27 item 11: HFU and tokens/s per GPU beside MFU (the JSON's values); the
    expert all-to-all row only for an MoE model."""
    dense = runner.invoke(app, ["eval", *LLAMA3_70B, "--format", "table", "--no-profile"])
    doc = json.loads(runner.invoke(app, ["eval", *LLAMA3_70B, "--no-profile"]).stdout)
    o = doc["outputs"]
    assert dense.exit_code == 0, dense.output
    assert f"MFU: {o['mfu_percent']}%   HFU: {o['hfu_percent']}%" in dense.output
    assert f"({o['per_gpu_tokens_s']:,.0f} per GPU)" in dense.output
    assert o["per_gpu_tokens_s"] == pytest.approx(o["throughput_tokens_s"] / o["used_gpus"],
                                                  rel=1e-3)
    assert "expert all-to-all" not in dense.output and "tensor-parallel" in dense.output
    moe = runner.invoke(app, ["eval", "--llm", "qwen3-235b-a22b", "--gpu", "h100-sxm",
                              "--num-gpus", "256", "--expert-parallel", "8",
                              "--pipeline-parallel", "8", "--format", "table", "--no-profile"])
    assert moe.exit_code == 0, moe.output
    assert "exposed expert all-to-all" in moe.output


def test_best_explains_no_valid_layout_with_tensor_and_pipeline_both_pinned():
    """Regression: with both ``--tensor-parallel`` and ``--pipeline-parallel`` given and
    no valid layout, the explanation filtered the pipeline column against the tensor
    column's already-filtered length (IndexError, a traceback).  Llama-3-8B on 8 GPUs at
    t2 p2: the one (t, p) pair, d = 8 / 4 = 2 dividing the batch of 16, gives
    candidates; none fits in 1 GB."""
    result = runner.invoke(app, ["best", "--model", "refined", "--gpu", "h100-sxm", "--llm",
                                 "llama3-8b", "--num-gpus", "8", "--tensor-parallel", "2",
                                 "--pipeline-parallel", "2", "--global-batch", "16",
                                 "--gpu-memory-gb", "1", "--format", "json"])
    assert result.exit_code == 0, result.output
    why = json.loads(result.output)["why_no_valid"]
    assert why["counts"] == {"do not fit in memory": 4}  # b = 1, 2, 4, 8 (G / d = 8)
    assert (why["closest"]["tensor_parallel"], why["closest"]["pipeline_parallel"]) == (2, 2)
    text = runner.invoke(app, ["best", "--model", "refined", "--gpu", "h100-sxm", "--llm",
                               "llama3-8b", "--num-gpus", "8", "--tensor-parallel", "2",
                               "--pipeline-parallel", "2", "--global-batch", "16",
                               "--gpu-memory-gb", "1"])
    assert text.exit_code == 0, text.output
    assert re.search(r"\n  1  give candidates\n", text.output), text.output


LLAMA3_8B_16 = ["best", "--model", "refined", "--gpu", "h100-sxm", "--llm", "llama3-8b",
                "--num-gpus", "16", "--seq-length", "8192"]


@pytest.mark.slow
def test_best_holds_the_global_batch_at_the_configurations_context_degree():
    """Regression: a context degree given as an input (not searched) split each
    replica's GPUs but not the batch's count of replicas: the search took d = N / (t p)
    and every layout trained G / c sequences (32 asked at c = 2: 16 trained), and the
    configuration's own batch read c times too large.  By hand, on 16 GPUs at c = 2:
    t p d = 8, so each listed layout holds b m d = 32 sequences, 262,144 tokens; the
    configuration t2 p2 b1 m4 has d = 16 / (2 2 2) = 2 and a batch of 1 x 4 x 2 = 8."""
    result = runner.invoke(app, [*LLAMA3_8B_16, "--context-parallel", "2", "--global-batch",
                                 "32", "--top", "40", "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["question"]["global_batch"] == 32 and doc["top"]
    for row in doc["top"]:
        assert row["context_parallel"] == 2
        assert (row["tensor_parallel"] * row["pipeline_parallel"] * row["data_parallel"]
                * row["context_parallel"]) == 16
        assert row["micro_batch"] * row["gradient_accum_steps"] * row["data_parallel"] == 32
        assert row["tokens_per_step"] == 32 * 8192
    own = runner.invoke(app, [*LLAMA3_8B_16, "--context-parallel", "2", "--tensor-parallel",
                              "2", "--pipeline-parallel", "2", "--micro-batch", "1",
                              "--gradient-accum-steps", "4", "--top", "1", "--format", "json"])
    assert own.exit_code == 0, own.output
    assert json.loads(own.output)["question"]["global_batch"] == 8


def test_best_says_a_context_degree_that_does_not_divide_the_gpus():
    """Given as an input or searched (--vary), c = 3 leaves no layout of 16 GPUs: the
    error says so, and counts no (t, p) pair as giving candidates (searched, it counted
    the pairs of c = 1: "10 give candidates" beside "no layout fits")."""
    for option in (["--context-parallel", "3"], ["--vary", "context_parallel=3"]):
        result = runner.invoke(app, [*LLAMA3_8B_16, *option, "--global-batch", "8"])
        assert result.exit_code == 2
        assert result.output.strip().splitlines() == [result.output.strip()]
        assert ("no layout fits a global batch of 8 sequences on 16 GPUs at context_parallel=3 "
                "(t p d on N / c GPUs; 3 does not divide 16)") in result.output
        assert "give candidates" not in result.output


def test_best_explains_no_valid_layout_at_each_varied_context_degree():
    """Regression: under ``--vary context_parallel`` the no-valid explanation evaluated
    the configuration's own degree only (c = 1: 4 candidates, its closest at c = 1).
    Llama-3-8B on 8 GPUs at t2 p2, global batch 16, 1 GB: at c = 1, d = 2 and b m = 8
    (b = 1, 2, 4, 8); at c = 2, the 4 GPUs of N / c give d = 1 and b m = 16 (b = 1 ...
    16): 4 + 5 candidates, none fits.  The closest, recomputed here, is at c = 2."""
    argv = ["best", "--model", "refined", "--gpu", "h100-sxm", "--llm", "llama3-8b",
            "--num-gpus", "8", "--tensor-parallel", "2", "--pipeline-parallel", "2",
            "--vary", "context_parallel=1,2", "--global-batch", "16", "--gpu-memory-gb", "1"]
    result = runner.invoke(app, [*argv, "--format", "json"])
    assert result.exit_code == 0, result.output
    why = json.loads(result.output)["why_no_valid"]
    assert why["counts"] == {"do not fit in memory": 4 + 5}
    c = why["closest"]
    assert (c["tensor_parallel"], c["context_parallel"], c["pipeline_parallel"],
            c["data_parallel"]) == (2, 2, 2, 1)
    values = {**apply_presets(REFINED, gpu="h100-sxm", llm="llama3-8b"), "num_gpus": 8,
              "tensor_parallel": 2, "pipeline_parallel": 2, "context_parallel": 2,
              "micro_batch": c["micro_batch"], "gradient_accum_steps": c["gradient_accum_steps"],
              "gpu_memory_gb": 1}
    assert c["micro_batch"] * c["gradient_accum_steps"] == 16
    alone = jaxmodel.evaluate(REFINED, **values)
    assert c["memory_gb_per_gpu"] == pytest.approx(float(alone.memory_gb_per_gpu), rel=1e-6)
    # No candidate at c = 1 comes closer: the smallest micro-batch there needs more.
    at_one = jaxmodel.evaluate(REFINED, **{**values, "context_parallel": 1, "micro_batch": 1,
                                           "gradient_accum_steps": 8})
    assert float(at_one.memory_gb_per_gpu) > c["memory_gb_per_gpu"]
    text = runner.invoke(app, argv)
    assert text.exit_code == 0, text.output
    assert "at each context degree searched (c in {1,2}):" in text.output
    assert "closest to fitting: t2 c2 p2 d1 b1 m16" in text.output
