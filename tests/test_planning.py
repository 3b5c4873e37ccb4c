"""``jaxmodel plan``: the per-(GPU, size) winner against brute force over its
candidates, the Pareto front and the constraints by hand, and the CLI."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import jaxmodel
from jaxmodel.cli import app
from jaxmodel.errors import InputError
from jaxmodel.planning import choose, pareto_front, parse_gpu_counts, plan
from jaxmodel.presets import apply_presets

runner = CliRunner()
REFINED = jaxmodel.get_model("refined")


def test_gpu_counts_parse_lists_ranges_and_steps():
    assert parse_gpu_counts("4096-32768") == [4096, 8192, 16384, 32768]
    assert parse_gpu_counts("1000-3000:1000, 64") == [64, 1000, 2000, 3000]
    for bad in ("0", "x", "8-4", "", "5-7"):  # (no power of two from 5 to 7)
        with pytest.raises(InputError, match="--num-gpus"):
            parse_gpu_counts(bad)


def _row(gpu, n, days, cost, power=1.0):
    return {"gpu": gpu, "num_gpus": n, "train_days": days, "cost_usd": cost,
            "power_mw": power, "layout": "t8"}


ROWS = [_row("h100", 4096, 60, 10e6, 8), _row("h100", 8192, 41, 13.2e6, 16),
        _row("b200", 4096, 45, 12e6, 9), _row("b200", 8192, 25, 14e6, 18)]


def test_pareto_front_by_hand():
    # (days, $M): (60, 10), (41, 13.2), (45, 12), (25, 14) trade time for money,
    # none beaten in both; (70, 15) is beaten by every one of them.
    front = pareto_front([*ROWS, _row("a100", 4096, 70, 15e6)])
    assert [(r["train_days"], r["cost_usd"]) for r in front] == [
        (25, 14e6), (41, 13.2e6), (45, 12e6), (60, 10e6)]


def test_constraints_pick_and_explain():
    c = choose(ROWS, 15e12, deadline_days=50, budget_usd=13.5e6)
    assert c.cheapest["cost_usd"] == 12e6 and c.fastest["train_days"] == 41
    assert c.problems == []
    c = choose(ROWS, 15e12, deadline_days=30, budget_usd=10e6)
    # within $10M the fastest takes 60 days; within 30 days the cheapest is $14M
    assert c.problems == ["no plan meets 30 days for 15T tokens under $10.0M; the nearest "
                          "is 60 days or $14.0M"]
    c = choose(ROWS, 15e12, max_power_mw=5)
    assert c.problems == ["no plan draws at most 5 MW; the nearest draws 8.00 MW (h100, "
                          "4,096 GPUs)"]
    c = choose(ROWS, 15e12, max_power_mw=10, deadline_days=30)
    assert "the fastest takes 45.0 days (b200, 4,096 GPUs" in c.problems[0]


@pytest.mark.slow
def test_plan_keeps_the_fastest_valid_layout_of_each_pair(tmp_path):
    sizes = (64, 128)
    result = plan("llama3-8b", 1e12, gpus=["h100-sxm", "b200"], num_gpus=sizes,
                  global_batch_tokens=2**22)
    assert [(r["gpu"], r["num_gpus"]) for r in result.rows] == [
        ("h100-sxm", 64), ("h100-sxm", 128), ("b200", 64), ("b200", 128)]
    # brute force: every candidate of every pair through one jaxmodel.evaluate
    # (one program for the four pairs, not one a candidate count)
    columns, ends = [], []
    for row in result.rows:
        values = {**REFINED.defaults, **apply_presets(REFINED, llm="llama3-8b",
                                                      gpu=row["gpu"]),
                  "train_tokens": 1e12, "num_gpus": float(row["num_gpus"])}
        cand = REFINED.layout.candidates(values, 2**22 // 8192)
        cols = {k: np.asarray(v, float) for k, v in cand.items() if k in REFINED.input_names}
        n = len(next(iter(cols.values())))
        columns.append({k: cols[k] if k in cols else np.full(n, float(v))
                        for k, v in values.items() if k in REFINED.input_names})
        ends.append(n + (ends[-1] if ends else 0))
    out = jaxmodel.evaluate(REFINED, **{k: np.concatenate([c[k] for c in columns])
                                        for k in columns[0]})
    days = np.split(np.where(out.valid_layout, out.train_days, np.inf), ends[:-1])
    for row, pair in zip(result.rows, days, strict=True):
        assert row["train_days"] == pytest.approx(pair.min(), rel=1e-5)
        assert row["cost_usd"] == pytest.approx(
            row["num_gpus"] * pair.min() * 24 * 2.0, rel=1e-5)
    # more GPUs of a kind: never slower here
    h = [r["train_days"] for r in result.rows if r["gpu"] == "h100-sxm"]
    assert h[1] < h[0]

    out = runner.invoke(app, ["plan", "--llm", "llama3-8b", "--train-tokens", "1e12",
                              "--gpu", "h100-sxm,b200", "--num-gpus", "64,128",
                              "--global-batch-tokens", str(2**22), "--deadline-days", "1",
                              "--budget-usd", "1000", "-o", str(tmp_path), "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["problems"][0].startswith("no plan meets 1 days for 1T tokens under $1,000")
    table = pq.read_table(tmp_path / "plan.parquet").to_pylist()
    assert [r["train_days"] for r in table] == pytest.approx(
        [r["train_days"] for r in result.rows], rel=1e-6)
    assert (tmp_path / "plan.png").stat().st_size > 0
    assert not list(tmp_path.glob(".*tmp*"))


def test_plan_refuses_bad_input_in_one_line():
    for args, what in ((["--num-gpus", "0"], "--num-gpus"), (["--gpu", "h1000"], "gpu"),
                       (["--deadline-days", "-1"], "--deadline-days"),
                       (["--set", "zero_stage"], "--set")):
        out = runner.invoke(app, ["plan", "--llm", "llama3-8b", "--train-tokens", "1e12",
                                  *args])
        assert out.exit_code == 2, out.output
        assert what in out.output and "Traceback" not in out.output


def test_the_plan_guides_405b_paragraph_is_the_models():
    """docs/guide/plan.md's closing paragraph runs its second command (Llama 3.1
    405B on four GPUs at 4K-32K): the layouts evaluated, H100's MFU at 4K, 16K and
    32K GPUs and the 16K GB200 plan it prints are recomputed here (it printed
    45.7% and 28.7% MFU and 26.5 days for $20.8M, long after the model had moved)."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from jaxmodel.cli import app

    text = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "plan.md").read_text()
    paragraph = " ".join(text[text.index("`jaxmodel plan` for Llama"):].split())
    result = CliRunner().invoke(app, [
        "plan", "--llm", "llama3.1-405b", "--train-tokens", "15.6e12", "--gpu",
        "h100-sxm,h200,b200,gb200-nvl72", "--num-gpus", "4096-32768", "--set", "zero_stage=1",
        "--set", "pipeline_split_embedding=1", "--price", "h100-sxm=2", "--price", "b200=3.5",
        "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert f"evaluated {doc['timing'].split()[0]} layouts" in paragraph
    plans = {(p["gpu"], p["num_gpus"]): p for p in doc["plans"]}
    h100 = [f"{plans['h100-sxm', n]['mfu_percent']:.1f}%" for n in (4096, 16384, 32768)]
    assert f"({h100[0]} MFU at 4K GPUs, {h100[1]} at 16K, {h100[2]} at 32K" in paragraph
    for n in (4096, 8192, 16384, 32768):
        assert max(plans[g, n]["gpu_hours"] for g in ("h100-sxm", "h200", "b200",
                                                      "gb200-nvl72")) == plans["h100-sxm", n][
            "gpu_hours"], n
    gb = plans["gb200-nvl72", 16384]
    assert f"{gb['train_days']:.1f} days for ${gb['cost_usd'] / 1e6:.1f}M at 16K" in paragraph
    assert {(p["gpu"], p["num_gpus"]) for p in doc["pareto"]} <= {
        ("gb200-nvl72", n) for n in (4096, 8192, 16384, 32768)}
