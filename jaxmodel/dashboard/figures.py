"""Plotly figures of the dashboard's views (shared by the live app and the report).

Each builder takes the small result of one query (:mod:`jaxmodel.dashboard.data`)
or one evaluation (:mod:`jaxmodel.dashboard.config`) and returns a
``plotly.graph_objects.Figure``; the data behind a chart is what the query
returned, so a test can read it back from the page.  Axes with geometric
values (bandwidths, GPU counts) are drawn on a log scale, as ``jaxmodel plot``
does (:func:`jaxmodel.plot.axis_scale`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from jaxmodel.dashboard.config import Evaluation, Tornado
from jaxmodel.dashboard.data import Categorical, Grid, Source
from jaxmodel.dashboard.views import _order
from jaxmodel.plot import _CATEGORY_COLORS, axis_scale

TEMPLATE = "plotly_white"


def _go():
    import plotly.graph_objects as go

    return go


def unit(src: Source | None, name: str) -> str:
    if src is None or name not in src.columns:
        return ""
    return src.columns[name].unit.split(" (")[0].strip()


def label(src: Source | None, name: str) -> str:
    u = unit(src, name)
    return f"{name} ({u})" if u else name


def _ticks(values: np.ndarray, most: int = 10) -> dict:
    """At most ``most`` ticks at grid values, labelled as ``jaxmodel plot`` labels them."""
    from jaxmodel.plot import _fmt

    step = max(1, math.ceil(len(values) / most))
    shown = [float(v) for v in values[::step]]
    return {"tickvals": shown, "ticktext": [_fmt(v) for v in shown]}


def _axis(values: Sequence, title: str) -> dict:
    """Plotly axis settings: log for geometric values, labelled categories for a few
    irregular values or names, linear otherwise; ticks at the grid's values."""
    v = np.asarray(values)
    if v.dtype.kind not in "iuf":
        return {"title": title, "type": "category"}
    scale = axis_scale(v)
    if scale == "log":
        return {"title": title, "type": "log", **_ticks(np.sort(v.astype(float)))}
    if scale == "index":
        return {"title": title, "type": "category", **_ticks(v, most=len(v))}
    return {"title": title, **(_ticks(np.sort(v.astype(float))) if len(v) <= 40 else {})}


def _spread_axis(values: np.ndarray, title: str) -> dict:
    """A scatter's axis: rows' values, not a grid's, so Plotly places the ticks; log
    where the finite values are positive and span 20x or more (every panel alike)."""
    v = values[np.isfinite(values)]
    log = v.size > 0 and v.min() > 0 and v.max() >= 20 * v.min()
    return {"title": title, "type": "log" if log else "linear"}


def _clean(values: Sequence) -> list:
    """Axis values for JSON: whole floats as ints, names as text."""
    out = []
    for v in values:
        if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
            out.append(int(v))
        elif isinstance(v, (bool, np.bool_)):
            out.append(str(bool(v)).lower())
        else:
            out.append(v)
    return out


def _z(a: np.ndarray) -> np.ndarray:
    """A grid of cells for a trace: a float array, NaN (an empty cell) kept, so
    that Plotly serialises it as one typed array (``bdata``) and plotly.js
    leaves NaN cells blank.  Nested lists of Python floats, as before, made
    Plotly validate every cell: 0.35 s to build and 0.13 s to serialise a
    9 x 4,340 heatmap (10^8-row dataset) against 0.015 s and 0.016 s."""
    return np.asarray(a, dtype=float)


def heatmap(src: Source | None, g: Grid, *, title: str | None = None,
            diff: bool = False):
    """One heatmap per facet value (side by side), the value on a shared colour scale."""
    go = _go()
    from plotly.subplots import make_subplots

    n = max(1, len(g.facets))
    names = [f"{g.facet} = {_clean([f])[0]}" for f in g.facets] if g.facets else None
    fig = make_subplots(rows=1, cols=n, subplot_titles=names, shared_yaxes=True,
                        horizontal_spacing=0.04)
    finite = g.cells[np.isfinite(g.cells)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if diff:
        lim = max(abs(lo), abs(hi)) or 1.0
        lo, hi = -lim, lim
    what = "count" if g.agg == "count" else f"{g.agg} {g.value}"
    for f in range(n):
        fig.add_trace(go.Heatmap(
            x=_clean(g.x_values), y=_clean(g.y_values), z=_z(g.cells[f]),
            zmin=lo, zmax=hi, colorscale="RdBu" if diff else "Viridis",
            showscale=f == 0, colorbar={"title": {"text": "difference" if diff else what}},
            customdata=np.asarray(g.counts[f]),
            hovertemplate=(f"{g.x}=%{{x}}<br>{g.y}=%{{y}}<br>{what}=%{{z:.4g}}"
                           "<br>rows with a value: %{customdata}<extra></extra>"),
            name=str(names[f]) if names else what), row=1, col=f + 1)
        fig.update_xaxes(**_axis(g.x_values, label(src, g.x)), row=1, col=f + 1)
    fig.update_yaxes(**_axis(g.y_values, label(src, g.y)), row=1, col=1)
    fig.update_layout(template=TEMPLATE, title=title or f"{what} by {g.x} and {g.y}",
                      margin={"t": 70, "l": 70, "r": 20, "b": 60}, plot_bgcolor="#EEEEEE")
    return fig


def lines(src: Source | None, g: Grid, *, title: str | None = None):
    """One line per value of ``g.y`` (the series input), x along ``g.x``."""
    go = _go()
    from plotly.subplots import make_subplots

    n = max(1, len(g.facets))
    names = [f"{g.facet} = {_clean([f])[0]}" for f in g.facets] if g.facets else None
    fig = make_subplots(rows=1, cols=n, subplot_titles=names, shared_yaxes=True,
                        horizontal_spacing=0.04)
    what = "count" if g.agg == "count" else f"{g.agg} {g.value}"
    for f in range(n):
        for i, series in enumerate(g.y_values):
            fig.add_trace(go.Scatter(
                x=_clean(g.x_values), y=[None if not math.isfinite(c) else float(c)
                                         for c in g.cells[f, i]],
                mode="lines+markers", name=f"{g.y}={_clean([series])[0]}",
                legendgroup=str(i), showlegend=f == 0,
                line={"color": _palette(i)}, marker={"size": 5}), row=1, col=f + 1)
        fig.update_xaxes(**_axis(g.x_values, label(src, g.x)), row=1, col=f + 1)
    fig.update_yaxes(title=f"{g.agg} {label(src, g.value)}" if g.agg != "count" else "rows",
                     row=1, col=1)
    fig.update_layout(template=TEMPLATE, title=title or f"{what} against {g.x}, "
                      f"one line per {g.y}", legend={"title": {"text": g.y}},
                      margin={"t": 70, "l": 70, "r": 20, "b": 60})
    return fig


def _palette(i: int) -> str:
    import plotly.express.colors as pc  # noqa: F401  (plotly ships the palettes)
    from plotly.colors import qualitative

    return qualitative.Plotly[i % len(qualitative.Plotly)]


def scatter(src: Source | None, table, x: str, y: str, color: str | None, *,
            facet: str | None = None, title: str | None = None):
    """Sampled rows as points (colour by a column when asked: a category gives one
    trace per value, with a legend), one panel per value of ``facet`` (side by side,
    on the same axes).  The coordinates go to Plotly as numpy arrays (sent as typed arrays,
    not checked point by point: 4,000 points coloured by regime took 0.25-0.55 s
    to build as lists, 0.01 s now)."""
    go = _go()
    from plotly.subplots import make_subplots

    names = table.column_names
    ids = table.column("config_id").to_numpy() if "config_id" in names else None
    xv = np.asarray(table.column(x).to_numpy(zero_copy_only=False), dtype=float)
    yv = np.asarray(table.column(y).to_numpy(zero_copy_only=False), dtype=float)
    hover = (f"{x}=%{{x:.4g}}<br>{y}=%{{y:.4g}}"
             + ("<br>config_id=%{customdata}" if ids is not None else "") + "<extra></extra>")
    marker: dict = {"size": 5, "opacity": 0.7}
    groups: list[tuple[str | None, np.ndarray, dict]] = [(None, np.ones(len(xv), bool), marker)]
    if color and color in names:
        cv = table.column(color).to_pylist()
        if cv and isinstance(cv[0], str):
            cv = np.asarray(cv, dtype=object)
            groups = [(c, cv == c, dict(marker, color=_CATEGORY_COLORS.get(c, _palette(i))))
                      for i, c in enumerate(dict.fromkeys(cv.tolist()))]
        else:
            values = np.asarray([np.nan if v is None else v for v in cv], dtype=float)
            finite = values[np.isfinite(values)]
            scale = {"cmin": float(finite.min()), "cmax": float(finite.max())} \
                if finite.size else {}  # one scale for every panel
            groups = [(None, groups[0][1], dict(
                marker, color=np.where(np.isfinite(values), values, np.nan),
                colorscale="Viridis", showscale=True, colorbar={"title": {"text": color}},
                **scale))]
    panels: list[tuple[str | None, np.ndarray]] = [(None, np.ones(len(xv), bool))]
    if facet and facet in names:
        fv = np.asarray(table.column(facet).to_pylist(), dtype=object)
        order = _order(src, facet, fv.tolist()) if src and facet in src.columns else \
            list(dict.fromkeys(fv.tolist()))
        panels = [(f"{facet} = {_clean([v])[0]}", fv == v) for v in order]
    fig = make_subplots(rows=1, cols=len(panels), shared_xaxes="all", shared_yaxes=True,
                        horizontal_spacing=0.04,
                        subplot_titles=[p for p, _ in panels] if panels[0][0] else None)
    legend: set[str] = set()  # categories with a legend entry (their first trace)
    for j, (_, inside) in enumerate(panels):
        for name, m, mk in groups:
            m = m & inside
            if not m.any() and (name is not None or len(panels) > 1):
                continue  # (one empty trace keeps an empty sample's axes)
            if isinstance(mk.get("color"), np.ndarray):  # a value per point: this panel's
                mk = dict(mk, color=mk["color"][m], showscale=mk["showscale"] and not j)
            fig.add_trace(go.Scattergl(
                x=xv[m], y=yv[m], mode="markers", marker=mk, name=name, legendgroup=name,
                showlegend=name is not None and name not in legend,
                customdata=ids[m] if ids is not None else None, hovertemplate=hover),
                row=1, col=j + 1)
            legend.add(name)
        fig.update_xaxes(**_spread_axis(xv, label(src, x)), row=1, col=j + 1)
    fig.update_yaxes(**_spread_axis(yv, label(src, y)), row=1, col=1)
    fig.update_layout(template=TEMPLATE, title=title or f"{y} against {x} "
                      f"({len(xv):,} rows sampled)",
                      margin={"t": 70 if len(panels) > 1 else 60, "l": 70, "r": 20, "b": 60})
    return fig


def regime_map(src: Source | None, c: Categorical, *, title: str | None = None):
    """A categorical heatmap per facet value (side by side): each category its own
    colour, names in the hover."""
    go = _go()
    from plotly.subplots import make_subplots

    cats = [n for n in (src.columns[c.column].categories if src and c.column in src.columns
                        else ()) or sorted(set(c.names.ravel()) - {""})]
    code = {n: i for i, n in enumerate(cats)}
    k = max(1, len(cats))
    colorscale = []
    for i, n in enumerate(cats):
        col = _CATEGORY_COLORS.get(n, _palette(i))
        colorscale += [[i / k, col], [(i + 1) / k, col]]
    n = max(1, len(c.facets))
    names = [f"{c.facet} = {_clean([f])[0]}" for f in c.facets] if c.facets else None
    fig = make_subplots(rows=1, cols=n, subplot_titles=names, shared_yaxes=True,
                        horizontal_spacing=0.04)
    what = f"best {c.by}" if c.rule == "best" else f"rows with a finite {c.by}"
    for f in range(n):
        fig.add_trace(go.Heatmap(
            x=_clean(c.x_values), y=_clean(c.y_values),
            z=[[code.get(v) if v else None for v in row] for row in c.names[f]],
            zmin=-0.5, zmax=k - 0.5, colorscale=colorscale or "Viridis",
            text=c.names[f].tolist(), customdata=_z(c.best[f]), showscale=f == 0,
            hovertemplate=(f"{c.x}=%{{x}}<br>{c.y}=%{{y}}<br>{c.column}: %{{text}}"
                           f"<br>{what}=%{{customdata:.4g}}<extra></extra>"),
            colorbar={"tickvals": list(range(k)), "ticktext": cats,
                      "title": {"text": c.column}},
            name=str(names[f]) if names else c.column), row=1, col=f + 1)
        fig.update_xaxes(**_axis(c.x_values, label(src, c.x)), row=1, col=f + 1)
    fig.update_yaxes(**_axis(c.y_values, label(src, c.y)), row=1, col=1)
    rule = f"of the best row by {c.by}" if c.rule == "best" else \
        f"most frequent (rows with a finite {c.by})"
    fig.update_layout(template=TEMPLATE, title=title or f"{c.column} {rule}",
                      margin={"t": 70 if names else 60, "l": 70, "r": 20, "b": 60},
                      plot_bgcolor="#EEEEEE")
    return fig


def pareto(src: Source | None, table, x: str, y: str, *, title: str | None = None):
    go = _go()
    d = {k: table.column(k).to_pylist() for k in table.column_names}
    ids = d.get("config_id")
    fig = go.Figure(go.Scatter(
        x=d["x"], y=d["y"], mode="lines+markers", line={"shape": "hv"},
        customdata=ids, marker={"size": 7, "color": "#C44E52"},
        hovertemplate=(f"{x}=%{{x:.4g}}<br>{y}=%{{y:.4g}}"
                       + ("<br>config_id=%{customdata}" if ids else "") + "<extra></extra>")))
    fig.update_layout(template=TEMPLATE, title=title or f"Pareto front: {y} against {x} "
                      f"({len(d['x'])} rows)", xaxis={"title": label(src, x)},
                      yaxis={"title": label(src, y)},
                      margin={"t": 60, "l": 70, "r": 20, "b": 60})
    return fig


def breakdown(evals: Sequence[Evaluation], names: Sequence[str], *, title: str | None = None):
    """Stacked step-time terms per configuration, MFU on top."""
    go = _go()
    fig = go.Figure()
    if not evals:
        return fig
    for k, (lbl, col, _) in enumerate(evals[0].terms):
        fig.add_trace(go.Bar(
            x=list(names), y=[e.terms[k][2] if e.valid else 0.0 for e in evals],
            name=lbl, marker={"color": evals[0].colours[k]},
            hovertemplate=f"{lbl} ({col})=%{{y:.4g}} ms<extra></extra>"))
    for e, n in zip(evals, names, strict=True):
        text = f"{e.outputs['mfu_percent']:.1f}% MFU" if e.valid else "invalid"
        top = e.outputs["step_time_ms"] if e.valid else 0.0
        fig.add_annotation(x=n, y=top, text=text, showarrow=False, yshift=10)
    fig.update_layout(template=TEMPLATE, barmode="stack", yaxis={"title": "step time (ms)"},
                      title=title or "Step-time breakdown", legend={"title": {
                          "text": "step-time term"}},
                      margin={"t": 60, "l": 70, "r": 20, "b": 40})
    return fig


def tornado(t: Tornado, *, title: str | None = None):
    go = _go()
    ys = list(t.inputs)[::-1]
    xs = list(t.elasticities)[::-1]
    fig = go.Figure(go.Bar(
        x=xs, y=ys, orientation="h",
        marker={"color": ["#C44E52" if v < 0 else "#4C72B0" for v in xs]},
        text=[f"{v:+.3f}" for v in xs], textposition="outside",
        hovertemplate="+1% of %{y} -> %{x:+.4f}% " + t.output + "<extra></extra>"))
    lim = max((abs(v) for v in xs), default=1.0) * 1.3 or 1.0
    fig.update_layout(template=TEMPLATE, xaxis={"title": f"% change of {t.output} per +1% of "
                                                "the input", "range": [-lim, lim]},
                      title=title or f"Sensitivity of {t.output} = {t.value:.4g}",
                      margin={"t": 60, "l": 170, "r": 20, "b": 50})
    return fig


def message(text: str):
    """An empty figure carrying a message (shown where a chart would be)."""
    go = _go()
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font={"size": 14})
    fig.update_layout(template=TEMPLATE, xaxis={"visible": False}, yaxis={"visible": False})
    return fig
