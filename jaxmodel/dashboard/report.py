"""``jaxmodel report``: one self-contained HTML file of a sweep's views.

The file holds plotly.js once, inline (no network needed to open it), and
only aggregates: per view a few small grids computed by the same DuckDB
queries as the live dashboard.  The charts keep plotly's hover and zoom; the
filter controls are plotly's own dropdown menus and sliders, which switch
between precomputed grids (the value and its aggregation; one slider step per
value of a third input), so no hand-written JavaScript is involved.

Views: a heatmap of the first two varied axes (a menu of values and
aggregations), the same at each value of a third axis (a slider), lines of
the value against the first axis (one per value of the second), the regime
map, the Pareto front of step time against throughput, the top rows, and the
schema with the spec.
"""

from __future__ import annotations

import html
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from jaxmodel.dashboard import data as q
from jaxmodel.dashboard import figures as figs

VALUES = ("mfu_percent", "step_time_ms", "throughput_tokens_s")
REPORT_AGGS = ("max", "mean", "min")
MAX_SLIDER_STEPS = 16
MAX_TABLE_ROWS = 20


def _values(src: q.Source) -> list[str]:
    out = [v for v in VALUES if v in src.columns and src.columns[v].numeric]
    return out or [c for c in src.numeric_columns() if src.columns[c].kind == "float"][:3]


def _heatmaps(catalog: q.Catalog, src: q.Source, x: str, y: str,
              cases: Sequence[tuple[str, str, q.Filters, str]]):
    """One figure holding a precomputed heatmap per case ``(value, agg, filters, label)``,
    the first visible."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for v, a, f, lbl in cases:
        try:
            g = q.grid(catalog, src.name, x, y, v, a, f)
        except q.DashboardError:  # e.g. no row for one slider value
            g = None
        fig.add_trace(go.Heatmap(
            x=figs._clean(g.x_values) if g else [], y=figs._clean(g.y_values) if g else [],
            z=figs._z(g.cells[0]) if g else [[None]], colorscale="Viridis",
            visible=not fig.data, colorbar={"title": {"text": f"{a} {v}"}}, name=lbl,
            hovertemplate=f"{x}=%{{x}}<br>{y}=%{{y}}<br>{a} {v}=%{{z:.4g}}<extra></extra>"))
    fig.update_layout(
        xaxis=figs._axis(src.levels.get(x, ()), figs.label(src, x)),
        yaxis=figs._axis(src.levels.get(y, ()), figs.label(src, y)),
        template=figs.TEMPLATE, plot_bgcolor="#EEEEEE",
        margin={"t": 110, "l": 70, "r": 20, "b": 60})
    return fig


def _showing(n: int, k: int) -> list[bool]:
    return [i == k for i in range(n)]


def heatmap_menu(catalog: q.Catalog, src: q.Source, x: str, y: str):
    """A heatmap whose dropdown picks the value and its aggregation over the other axes."""
    cases = [(v, a, q.Filters(), f"{a} {v}") for v in _values(src) for a in REPORT_AGGS]
    fig = _heatmaps(catalog, src, x, y, cases)
    buttons = [{"label": lbl, "method": "update",
                "args": [{"visible": _showing(len(cases), k)},
                         {"title": f"{lbl} by {x} and {y}"}]}
               for k, (_, _, _, lbl) in enumerate(cases)]
    fig.update_layout(title=f"{cases[0][3]} by {x} and {y}", updatemenus=[{
        "buttons": buttons, "x": 1.0, "y": 1.22, "xanchor": "right", "yanchor": "bottom",
        "direction": "down"}])
    return fig


def heatmap_slider(catalog: q.Catalog, src: q.Source, x: str, y: str, axis: str):
    """The first value's maximum by ``x`` and ``y``, a slider step per value of ``axis``."""
    value = _values(src)[0]
    levels = list(src.levels[axis])[:MAX_SLIDER_STEPS]
    cases = [(value, "max", q.Filters(ranges={axis: (s, s)}),
              f"{axis}={figs._clean([s])[0]}") for s in levels]
    fig = _heatmaps(catalog, src, x, y, cases)
    fig.update_layout(title=f"max {value} by {x} and {y}, at each {axis}", sliders=[{
        "active": 0, "currentvalue": {"prefix": f"{axis} = "}, "pad": {"t": 50},
        "steps": [{"label": str(figs._clean([s])[0]), "method": "update",
                   "args": [{"visible": _showing(len(cases), k)}]}
                  for k, s in enumerate(levels)]}])
    return fig


def build_report(catalog: q.Catalog, name: str) -> str:
    """The report's HTML text."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    src = catalog.source(name)
    axes = [c for c in src.varied if c in src.levels] or src.axis_columns()
    sections: list[tuple[str, str]] = []

    def add(title: str, fig) -> None:
        sections.append((title, pio.to_html(fig, include_plotlyjs=False, full_html=False,
                                            config={"displaylogo": False})))

    values = _values(src)
    if len(axes) >= 2 and values:
        x, y = axes[0], axes[1]
        add("Heatmap", heatmap_menu(catalog, src, x, y))
        if len(axes) > 2 and axes[2] in src.levels:  # a slider steps through levels
            add(f"Heatmap at each {axes[2]}", heatmap_slider(catalog, src, x, y, axes[2]))
        g = q.grid(catalog, name, x, y, values[0], "max")
        add("Lines", figs.lines(src, g))
        cats = [c for c, i in src.columns.items() if i.kind == "category"]
        if cats and "mfu_percent" in src.columns:
            cat = "regime" if "regime" in cats else cats[0]
            add("Regime map", figs.regime_map(src, q.regimes(catalog, name, x, y, cat,
                                                             "mfu_percent")))
    px, py = "step_time_ms", "throughput_tokens_s"
    if px in src.columns and py in src.columns:
        add("Pareto front", figs.pareto(src, q.pareto(catalog, name, px, py,
                                                      minimize_x=True, minimize_y=False),
                                        px, py))
    table = ""
    if values:
        cols = list(dict.fromkeys((["config_id"] if "config_id" in src.columns else [])
                                  + list(src.varied) + values))
        t = q.top_rows(catalog, name, values[0], k=MAX_TABLE_ROWS, columns=cols)
        table = _table(cols, t.to_pylist(), f"The {t.num_rows} best rows by {values[0]}")
    schema = _table(["column", "type", "unit", "description"],
                    [{"column": c, "type": i.kind, "unit": i.unit,
                      "description": i.description} for c, i in src.columns.items()],
                    "Schema")
    meta = src.meta
    # Every value from the dataset is escaped: its metadata is a file anyone
    # could have written (a 'configurations' of <img onerror=...> ran).
    head = (f"{html.escape(name)}: {html.escape(str(meta.get('configurations', '?')))} "
            "configurations of the "
            f"{html.escape(str(meta.get('model')))} model, written "
            f"{html.escape(str(meta.get('created', '?')))} by jaxmodel "
            f"{html.escape(str(meta.get('jaxmodel_version', '?')))}")
    body = "\n".join(f"<section><h2>{html.escape(t)}</h2>{h}</section>" for t, h in sections)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>jaxmodel report: {html.escape(name)}</title>
<style>body{{font-family:sans-serif;margin:16px;max-width:1200px}}
table{{border-collapse:collapse;font-size:12px}}td,th{{border:1px solid #ddd;padding:2px 6px}}
pre{{background:#f4f4f4;padding:8px}}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>jaxmodel report</h1><p id="summary">{head}</p>
{body}
<section>{table}</section>
<section>{schema}<h2>Spec</h2><pre>{html.escape(src.spec_text)}</pre></section>
</body></html>
"""


def _table(cols: Sequence[str], rows: Sequence[dict], title: str) -> str:
    def cell(v) -> str:
        if isinstance(v, float):
            return "n/a" if not np.isfinite(v) else f"{v:.6g}"
        return html.escape(str(v))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{cell(r.get(c))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<h2>{html.escape(title)}</h2><table><tr>{head}</tr>{body}</table>"


def write_report(dataset: str | Path, output: str | Path) -> tuple[Path, int]:
    """Write the report atomically (a temporary file renamed), return its path and size.

    Raises:
      DashboardError: a bad dataset, or an output that is not ``.html`` or not writable.
    """
    output = Path(output)
    if output.suffix.lower() not in (".html", ".htm"):
        raise q.DashboardError(f"output {str(output)!r}: the file name must end in .html")
    catalog = q.Catalog([dataset])
    try:
        text = build_report(catalog, catalog.names[0])
    finally:
        catalog.close()
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp",
                                   dir=output.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        # mkstemp makes the file 0600; give it the mode open() would (0644 under
        # the usual umask), as the Parquet parts and PNGs have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, output)
    except OSError as e:
        raise q.DashboardError(f"output {str(output)!r}: cannot write ({e.strerror})") from None
    return output, output.stat().st_size
