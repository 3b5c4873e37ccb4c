"""The plan view: ``jaxmodel plan -o DIR``'s ``plan.parquet`` in the browser.

Training time against cost, one trace (marker and colour) per GPU, each point
labelled with its GPU count, and the Pareto front of time and cost (as
``jaxmodel plot``'s ``plan.png`` draws them), with the front's plans as a table
below.  ``jaxmodel dashboard DIR`` shows it for a directory holding a plan.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from jaxmodel.dashboard.sources import DashboardError

PLAN_FILE = "plan.parquet"
NEEDED = ("gpu", "num_gpus", "train_days", "cost_usd")
FRONT_COLUMNS = ("gpu", "num_gpus", "layout", "train_days", "cost_usd", "energy_mwh")


def is_plan(path: str | Path) -> bool:
    """A directory ``jaxmodel plan -o`` wrote (it holds ``plan.parquet``)."""
    return (Path(path) / PLAN_FILE).is_file()


def read_plan(path: str | Path) -> list[dict[str, Any]]:
    """The plans of ``path/plan.parquet``, one dict per (GPU, size).

    Raises:
      DashboardError: unreadable, or a column the view needs is missing (one line).
    """
    file = Path(path) / PLAN_FILE
    try:
        table = pq.read_table(file)
    except (OSError, pa.ArrowException) as e:
        raise DashboardError(f"plan {str(file)!r}: {str(e).splitlines()[0]}") from None
    for name in NEEDED:
        if name not in table.column_names:
            raise DashboardError(f"plan {str(file)!r}: no column {name!r} (a plan needs "
                                 f"{', '.join(NEEDED)}; write one with jaxmodel plan -o)")
    return table.to_pylist()


def plan_figure(rows: list[dict[str, Any]], *, title: str | None = None):
    """Time against cost: a trace per GPU (text: the GPU count; customdata: the
    count too, for the hover), then the Pareto front as a dashed line."""
    from jaxmodel.dashboard.figures import TEMPLATE, _go, _palette
    from jaxmodel.planning import pareto_front

    go = _go()
    fig = go.Figure()
    symbols = ("circle", "square", "diamond", "triangle-up", "triangle-down", "cross", "x",
               "star", "hexagon", "pentagon")
    for i, gpu in enumerate(dict.fromkeys(r["gpu"] for r in rows)):
        mine = [r for r in rows if r["gpu"] == gpu]
        fig.add_trace(go.Scatter(
            x=[r["train_days"] for r in mine], y=[r["cost_usd"] for r in mine],
            mode="markers+text", name=gpu, text=[f"{r['num_gpus']:,}" for r in mine],
            textposition="top right", customdata=[r["num_gpus"] for r in mine],
            marker={"size": 10, "symbol": symbols[i % len(symbols)], "color": _palette(i)},
            hovertemplate=(f"{gpu} x %{{customdata:,}}<br>%{{x:.4g}} days<br>"
                           "$%{y:,.0f}<extra></extra>")))
    front = pareto_front(rows)
    fig.add_trace(go.Scatter(
        x=[r["train_days"] for r in front], y=[r["cost_usd"] for r in front],
        mode="lines", name="Pareto front", line={"dash": "dash", "color": "#999999"},
        hoverinfo="skip"))
    fig.update_layout(template=TEMPLATE,
                      title=title or f"Training time against cost: {len(rows)} plans, "
                      f"{len(front)} on the Pareto front",
                      xaxis={"title": "training time (days)", "type": "log"},
                      yaxis={"title": "cost (USD)"},
                      margin={"t": 60, "l": 80, "r": 20, "b": 60})
    return fig


def build_plan_app(path: str | Path):
    """A Dash app showing one plan directory (``app.server`` is the WSGI app)."""
    from dash import Dash, dash_table, dcc, html

    from jaxmodel.planning import pareto_front

    rows = read_plan(path)
    app = Dash(__name__, title="jaxmodel plan", assets_folder="_no_assets",
               update_title=None)
    front = [{k: r.get(k) for k in FRONT_COLUMNS if k in r} for r in pareto_front(rows)]
    # (Dash 4 announces DataTable's move out of the core, as in app.py)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        table = dash_table.DataTable(
            id="plan-front", data=front,
            columns=[{"name": k, "id": k} for k in FRONT_COLUMNS if front and k in front[0]],
            style_cell={"fontFamily": "monospace", "fontSize": "12px"})
    app.layout = html.Div([
        html.H3(f"jaxmodel plan: {Path(path).resolve().name}"),
        dcc.Graph(id="plan-graph", figure=plan_figure(rows), style={"height": "600px"}),
        html.H4("Pareto front of time and cost"),
        table,
    ], style={"fontFamily": "sans-serif", "fontSize": "14px", "padding": "8px"})
    return app
