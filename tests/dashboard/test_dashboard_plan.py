"""The plan view (``jaxmodel.dashboard.plan``) over a plan.parquet written here:
one trace per GPU with its sizes as labels, and the Pareto front against a
brute-force dominance check; the dashboard command's one-line refusals."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

pytest.importorskip("dash")

from jaxmodel.cli import app as cli_app  # noqa: E402
from jaxmodel.dashboard.plan import build_plan_app, read_plan  # noqa: E402
from jaxmodel.dashboard.sources import DashboardError  # noqa: E402

runner = CliRunner()

# (gpu, num_gpus, days, $): h100 x 8192 and b200 x 4096 are each beaten in both
PLANS = [("h100-sxm", 4096, 60.0, 10.0e6), ("h100-sxm", 8192, 46.0, 14.5e6),
         ("h100-sxm", 16384, 24.0, 15.0e6), ("b200", 4096, 45.0, 12.0e6),
         ("b200", 8192, 25.0, 14.0e6), ("b200", 2048, 62.0, 12.5e6)]


def write_plan(path, plans=PLANS, drop=()):
    rows = [{"gpu": g, "num_gpus": n, "train_days": d, "cost_usd": c,
             "energy_mwh": d * n * 0.001, "layout": f"t8 p{n // 1024}"}
            for g, n, d, c in plans]
    table = pa.Table.from_pylist(rows).drop_columns(list(drop))
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path / "plan.parquet")
    return path


def brute_front(plans):
    """Plans no other plan beats in both time and cost."""
    return sorted((d, c) for _, _, d, c in plans
                  if not any(d2 <= d and c2 <= c and (d2, c2) != (d, c)
                             for _, _, d2, c2 in plans))


def plan_layout(path):
    app = build_plan_app(path)
    layout = app.server.test_client().get("/_dash-layout").get_json()
    children = layout["props"]["children"]
    graph = next(c for c in children if c["props"].get("id") == "plan-graph")
    table = next(c for c in children if c["props"].get("id") == "plan-front")
    return graph["props"]["figure"], table["props"]["data"]


def test_plan_view_has_a_trace_per_gpu_labelled_by_size_and_the_front(tmp_path):
    fig, front_rows = plan_layout(write_plan(tmp_path / "p"))
    traces = {t["name"]: t for t in fig["data"]}
    assert list(traces) == ["h100-sxm", "b200", "Pareto front"]
    for gpu in ("h100-sxm", "b200"):
        mine = [(n, d, c) for g, n, d, c in PLANS if g == gpu]
        t = traces[gpu]
        assert t["text"] == [f"{n:,}" for n, _, _ in mine]
        assert list(zip(t["x"], t["y"], strict=True)) == [(d, c) for _, d, c in mine]
    want = brute_front(PLANS)
    front = traces["Pareto front"]
    assert sorted(zip(front["x"], front["y"], strict=True)) == want
    assert len(want) == 4  # the example has dominated plans, so the check can fail
    assert sorted((r["train_days"], r["cost_usd"]) for r in front_rows) == want
    assert {"gpu", "num_gpus", "layout"} <= set(front_rows[0])


def test_a_plan_without_a_needed_column_is_one_line(tmp_path):
    path = write_plan(tmp_path / "p", drop=("cost_usd",))
    with pytest.raises(DashboardError, match="no column 'cost_usd'"):
        read_plan(path)
    out = runner.invoke(cli_app, ["dashboard", str(path), "--no-browser"])
    assert out.exit_code == 2 and out.stderr.count("\n") == 1, out.output
    assert "cost_usd" in out.stderr


def test_a_plan_is_shown_alone(tmp_path):
    path = write_plan(tmp_path / "p")
    out = runner.invoke(cli_app, ["dashboard", str(path), str(tmp_path / "other"),
                                  "--no-browser"])
    assert out.exit_code == 2 and out.stderr.count("\n") == 1
    assert "plan" in out.stderr and "alone" in out.stderr
