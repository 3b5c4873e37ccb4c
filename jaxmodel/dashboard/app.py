"""The live dashboard: a Dash app over a :class:`~jaxmodel.dashboard.data.Catalog`.

Layout: the dataset and its filters on the left (a range slider per varied
numeric input, a multi-select per category or flag, the free filter box);
tabs on the right: View (heatmap, lines, scatter, regime map; export), Rows
(top-k table, sortable), Pareto, Configuration (breakdown, tornado, what-if),
Compare and Schema.

Every callback answers from one query or one model evaluation; any error is
one line in the page's message bar (never a traceback): a bad filter, an
unknown column, a value out of an input's domain.  Requests carry column
names and values only: the datasets are fixed when the app is built, and a
dataset is addressed by its label, never by a path.
"""

from __future__ import annotations

import io
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxmodel.dashboard import config as cfg
from jaxmodel.dashboard import data as q
from jaxmodel.dashboard import figures as figs
from jaxmodel.errors import JaxmodelError

VIEW_KINDS = {"heatmap": "Heatmap", "line": "Lines", "scatter": "Scatter",
              "regimes": "Regime map"}
TABLE_ROWS = 20


def _preferred(names: Sequence[str], *wanted: str) -> str | None:
    for w in wanted:
        if w in names:
            return w
    return names[0] if names else None


def defaults(src: q.Source) -> dict[str, Any]:
    """The first view of a dataset: the first two axes, MFU at its best."""
    axes = src.axis_columns()
    numeric = src.numeric_columns()
    x = axes[0] if axes else None
    y = axes[1] if len(axes) > 1 else None
    value = _preferred([c for c in numeric if src.columns[c].kind == "float"],
                       "mfu_percent", "step_time_ms") or _preferred(numeric)
    return {"x": x, "y": y, "value": value, "agg": "max", "facet": None}


def filters_from(src: q.Source, range_values, range_ids, choice_values, choice_ids,
                 where: str | None) -> q.Filters:
    """The widgets' state as :class:`Filters`; a widget at its full extent adds nothing."""
    ranges: dict[str, tuple[float, float]] = {}
    choices: dict[str, list] = {}
    for value, ident in zip(range_values or [], range_ids or [], strict=False):
        if ident.get("ds") != src.name or value is None:
            continue
        col = ident["col"]
        levels = src.levels.get(col)
        if levels is not None:  # the slider moves over indices into the levels
            lo, hi = (int(round(v)) for v in value)
            if lo <= 0 and hi >= len(levels) - 1:
                continue
            lo, hi = max(lo, 0), min(hi, len(levels) - 1)
            ranges[col] = (float(levels[lo]), float(levels[hi]))
        else:
            full = src.ranges.get(col)
            if full and value[0] <= full[0] and value[1] >= full[1]:
                continue
            ranges[col] = (float(value[0]), float(value[1]))
    for value, ident in zip(choice_values or [], choice_ids or [], strict=False):
        if ident.get("ds") != src.name or value is None:
            continue
        col = ident["col"]
        levels = src.levels.get(col, ())
        if src.columns.get(col) and src.columns[col].kind == "bool":
            value = [v if isinstance(v, bool) else v == "true" for v in value]
        if levels and set(value) >= set(levels):
            continue
        choices[col] = list(value)
    return q.Filters(ranges, choices, (where or "").strip())


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if not np.isfinite(v):
            return "n/a"
        if v.is_integer() and abs(v) < 1e15:
            return f"{int(v):,}"
        # Thousands with separators, as the whole numbers beside them (1,381 and 3,200).
        return f"{v:,.0f}" if 1e3 <= abs(v) < 1e15 else f"{v:.4g}"
    return str(v)


def build_app(catalog: q.Catalog, *, x64: bool = False):
    """The Dash app (``app.server`` is the Flask/WSGI application)."""
    import dash
    from dash import ALL, Dash, Input, Output, State, dash_table, dcc, html, no_update

    app = Dash(__name__, title="jaxmodel dashboard", assets_folder="_no_assets",
               suppress_callback_exceptions=True, update_title=None)
    first = catalog.source(catalog.names[0])
    d0 = defaults(first)
    _quiet_errors(app.server)

    def rows_table():
        # Dash 4 announces DataTable's move out of the core for a later major version
        # (the extra pins dash < 5); its server-side sorting is what the table needs.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return dash_table.DataTable(
                id="rows-table", sort_action="custom", sort_mode="single", sort_by=[],
                page_action="none", style_table={"overflowX": "auto"},
                style_cell={"fontFamily": "monospace", "fontSize": "12px"})

    def dropdown(id_: str, label: str, **kw) -> html.Div:
        return html.Div([html.Label(label, htmlFor=id_), dcc.Dropdown(id=id_, **kw)],
                        className="control", style={"minWidth": "180px", "flex": "1"})

    controls = html.Div([
        dropdown("kind", "view", options=[{"label": v, "value": k}
                                           for k, v in VIEW_KINDS.items()],
                 value="heatmap", clearable=False),
        dropdown("x", "x"), dropdown("y", "y (lines: one per value)"),
        dropdown("value", "value / colour"),
        dropdown("agg", "aggregation over other axes",
                 options=[{"label": a, "value": a} for a in q.AGGS], value="max",
                 clearable=False),
        dropdown("facet", "facet", placeholder="none"),
    ], style={"display": "flex", "gap": "8px", "flexWrap": "wrap"})

    export = html.Div([
        html.Span("export the view: "),
        dcc.RadioItems(id="export-format", options=["png", "svg"], value="png", inline=True,
                       style={"display": "inline-block"}),
        html.Span(" (camera button on the chart) · rows: "),
        html.Button("CSV", id="export-csv"), html.Button("Parquet", id="export-parquet"),
        dcc.Download(id="download"),
    ], style={"margin": "6px 0"})

    view_tab = dcc.Tab(label="View", value="view", children=[
        controls, export,
        dcc.Loading(dcc.Graph(id="view-graph", style={"height": "560px"},
                              config={"toImageButtonOptions": {"format": "png",
                                                               "filename": "jaxmodel-view"}})),
        html.Div(id="view-info", style={"color": "#555"}),
        dcc.Store(id="view-meta"),
    ])
    rows_tab = dcc.Tab(label="Rows", value="rows", children=[
        html.Div([html.Label("rows ", htmlFor="rows-k"),
                  dcc.Input(id="rows-k", type="number", value=TABLE_ROWS, min=1, max=1000),
                  html.Span(" best by the sorted column (click a column header to sort; "
                            "click a row to open it)")]),
        rows_table(),
    ])
    pareto_tab = dcc.Tab(label="Pareto", value="pareto", children=[
        html.Div([dropdown("pareto-x", "x"),
                  dropdown("pareto-xdir", "x is better", options=["lower", "higher"],
                           value="lower", clearable=False),
                  dropdown("pareto-y", "y"),
                  dropdown("pareto-ydir", "y is better", options=["lower", "higher"],
                           value="higher", clearable=False)],
                 style={"display": "flex", "gap": "8px"}),
        dcc.Graph(id="pareto-graph", style={"height": "520px"}),
    ])
    config_tab = dcc.Tab(label="Configuration", value="config", children=[
        html.Div(id="config-info", children="Click a heatmap cell, a point or a table row."),
        html.Div([
            dcc.Graph(id="breakdown-graph", style={"height": "420px", "flex": "1"}),
            html.Div([dropdown("tornado-of", "sensitivity of"),
                      dcc.Graph(id="tornado-graph", style={"height": "380px"})],
                     style={"flex": "1"}),
        ], style={"display": "flex"}),
        html.H4("What if"),
        html.Div(id="whatif-inputs", style={"display": "flex", "flexWrap": "wrap",
                                            "gap": "6px"}),
        html.Div(id="whatif-outputs"),
        dcc.Graph(id="whatif-graph", style={"height": "380px"}),
    ])
    compare_tab = dcc.Tab(label="Compare", value="compare", children=[
        html.Div([dropdown("compare-dataset", "against dataset",
                           options=catalog.names, value=catalog.names[-1]),
                  dropdown("compare-mode", "show",
                           options=[{"label": "side by side", "value": "side"},
                                    {"label": "difference (this - other)", "value": "diff"}],
                           value="side", clearable=False)],
                 style={"display": "flex", "gap": "8px"}),
        html.Div("Uses the View tab's heatmap settings and the filters.",
                 style={"color": "#555"}),
        dcc.Graph(id="compare-graph", style={"height": "520px"}),
    ])
    schema_tab = dcc.Tab(label="Schema", value="schema", children=[
        html.Div(id="schema"),
    ])

    app.layout = html.Div([
        html.Div([
            html.H3("jaxmodel", style={"margin": "0 12px 0 0"}),
            html.Div(dcc.Dropdown(id="dataset", options=catalog.names, value=first.name,
                                  clearable=False), style={"width": "320px"}),
            html.Div(id="row-count", style={"marginLeft": "12px", "color": "#555"}),
        ], style={"display": "flex", "alignItems": "center"}),
        html.Div(id="message", role="alert",
                 style={"color": "#A00", "minHeight": "1.4em", "fontWeight": "bold"}),
        html.Div([
            html.Div([
                html.Label("filter (the sweep filter language; Enter to apply)",
                           htmlFor="where"),
                dcc.Input(id="where", type="text", debounce=True, value="",
                          placeholder='e.g. valid_layout and bottleneck == "tp_comm"',
                          style={"width": "100%"}),
                html.Div(id="filters"),
            ], style={"width": "300px", "flex": "none", "paddingRight": "12px"}),
            html.Div(dcc.Tabs(id="tabs", value="view", children=[
                view_tab, rows_tab, pareto_tab, config_tab, compare_tab, schema_tab]),
                style={"flex": "1", "minWidth": "0"}),
        ], style={"display": "flex", "marginTop": "6px"}),
        dcc.Store(id="selected"),
        dcc.Store(id="errors", data={}),
    ], style={"fontFamily": "sans-serif", "fontSize": "14px", "padding": "8px"})

    filter_inputs = [
        Input({"type": "range", "ds": ALL, "col": ALL}, "value"),
        State({"type": "range", "ds": ALL, "col": ALL}, "id"),
        Input({"type": "choice", "ds": ALL, "col": ALL}, "value"),
        State({"type": "choice", "ds": ALL, "col": ALL}, "id"),
        Input("where", "value"),
    ]

    # ---------------------------------------------------------------- dataset

    @app.callback(
        Output("filters", "children"), Output("schema", "children"),
        Output("x", "options"), Output("x", "value"), Output("y", "options"),
        Output("y", "value"), Output("value", "options"), Output("value", "value"),
        Output("facet", "options"), Output("facet", "value"),
        Output("pareto-x", "options"), Output("pareto-x", "value"),
        Output("pareto-y", "options"), Output("pareto-y", "value"),
        Input("dataset", "value"))
    def on_dataset(name):
        src = catalog.source(name if name in catalog.sources else first.name)
        d = defaults(src)
        axes = src.axis_columns()
        numeric = src.numeric_columns()
        px = _preferred(numeric, "step_time_ms", "used_gpus")
        py = _preferred(numeric, "throughput_tokens_s", "mfu_percent")
        return (filter_widgets(src), schema_panel(src), axes, d["x"], axes, d["y"],
                numeric + [c for c in axes if c not in numeric], d["value"], axes, None,
                numeric, px, numeric, py)

    def filter_widgets(src: q.Source) -> list:
        out = []
        for col in src.varied:
            info = src.columns[col]
            levels = src.levels.get(col)
            lbl = html.Label(figs.label(src, col), style={"marginTop": "8px",
                                                          "display": "block"})
            ident = {"type": "range", "ds": src.name, "col": col}
            if levels is not None and len(levels) > 1:
                n = len(levels)
                step = max(1, n // 6)
                marks = {i: _fmt(float(levels[i])) for i in range(0, n, step)}
                marks[n - 1] = _fmt(float(levels[-1]))
                out += [lbl, dcc.RangeSlider(id=ident, min=0, max=n - 1, step=1,
                                             value=[0, n - 1], marks=marks,
                                             allowCross=False)]
            elif col in src.ranges and info.numeric:
                lo, hi = src.ranges[col]
                out += [lbl, dcc.RangeSlider(id=ident, min=lo, max=hi, value=[lo, hi],
                                             marks=None, tooltip={"placement": "bottom"})]
        for col, info in src.columns.items():
            if info.kind in ("category", "bool") and col in src.levels:
                opts = [{"label": str(v).lower() if isinstance(v, bool) else v,
                         "value": str(v).lower() if isinstance(v, bool) else v}
                        for v in src.levels[col]]
                out += [html.Label(col, style={"marginTop": "8px", "display": "block"}),
                        dcc.Dropdown(id={"type": "choice", "ds": src.name, "col": col},
                                     options=opts, value=[o["value"] for o in opts],
                                     multi=True)]
        return out

    def schema_panel(src: q.Source) -> list:
        header = html.Tr([html.Th(h) for h in ("column", "type", "unit", "description")])
        rows = [html.Tr([html.Td(c), html.Td(i.kind), html.Td(i.unit),
                         html.Td(i.description + (f" ({', '.join(i.categories)})"
                                                  if i.categories else ""))])
                for c, i in src.columns.items()]
        meta = src.meta
        facts = (f"model {meta.get('model')} · {meta.get('configurations', '?'):,} "
                 f"configurations · created {meta.get('created', '?')} · jaxmodel "
                 f"{meta.get('jaxmodel_version', '?')}" if isinstance(
                     meta.get("configurations"), int) else f"model {meta.get('model')}")
        return [html.P(facts), html.Table([header, *rows], id="schema-table",
                                          style={"fontSize": "12px"}),
                html.H4("The spec this sweep came from"),
                html.Pre(src.spec_text, id="spec-text",
                         style={"background": "#F4F4F4", "padding": "8px"})]

    # ------------------------------------------------------------------- view

    def answer(fn):
        """Run a callback body; a user error or a crash is one line in the page."""
        try:
            return fn(), ""
        except JaxmodelError as e:
            return None, str(e)
        except Exception as e:  # never a traceback in the page or on the terminal
            print(f"jaxmodel dashboard: internal error: {type(e).__name__}: {e}",
                  file=sys.stderr)
            return None, f"internal error: {type(e).__name__}: {e}"

    @app.callback(
        Output("view-graph", "figure"), Output("view-meta", "data"),
        Output("view-info", "children"), Output("errors", "data", allow_duplicate=True),
        Input("dataset", "value"), Input("kind", "value"), Input("x", "value"),
        Input("y", "value"), Input("value", "value"), Input("agg", "value"),
        Input("facet", "value"), *filter_inputs, State("errors", "data"),
        prevent_initial_call="initial_duplicate")
    def on_view(name, kind, x, y, value, agg, facet, rv, rid, cv, cid, where, errors):
        def run():
            src = catalog.source(name)
            f = filters_from(src, rv, rid, cv, cid, where)
            return view(src, kind, x, y, value, agg, facet, f)

        out, err = answer(run)
        errors = dict(errors or {}, view=err)
        if out is None:
            return figs.message(err), None, "", errors
        fig, meta, info = out
        return fig, meta, info, errors

    def view(src, kind, x, y, value, agg, facet, f):
        if kind not in VIEW_KINDS:
            raise q.DashboardError(f"view: got {kind!r}; allowed: {', '.join(VIEW_KINDS)}")
        if not x or not y:
            raise q.DashboardError("choose x and y")
        if kind == "scatter":  # rows, not aggregates: the aggregation does not apply
            t = q.scatter(catalog, src.name, x, y, value, f, facet=facet or None)
            return (figs.scatter(src, t, x, y, value, facet=facet or None),
                    {"kind": kind, "dataset": src.name},
                    f"{t.num_rows:,} rows sampled (the same rows every time: smallest hash "
                    "of config_id)")
        if kind == "regimes":
            cat = value if value in src.columns and src.columns[value].kind == "category" \
                else _preferred([c for c, i in src.columns.items() if i.kind == "category"],
                                "regime", "bottleneck")
            by = "mfu_percent" if "mfu_percent" in src.columns else src.numeric_columns()[0]
            rule = q.RULES.get(agg or "max")
            if rule is None:
                raise q.DashboardError(
                    f"aggregation: got {agg!r} for a regime map; allowed: max (the category "
                    f"of the best row by {by}), count (the most frequent category)")
            c = q.regimes(catalog, src.name, x, y, cat, by, f, rule=rule, facet=facet or None)
            meta = {"kind": kind, "dataset": src.name, "x": x, "y": y, "value": by,
                    "agg": "max", "facet": facet or None, "facets": list(c.facets),
                    "x_values": list(c.x_values), "y_values": list(c.y_values)}
            what = f"of the best row by {by}" if rule == "best" else \
                f"most frequent among rows with a finite {by}"
            return figs.regime_map(src, c), meta, f"{cat} {what}, per cell"
        g = q.grid(catalog, src.name, x, y, value, agg or "max", f, facet or None)
        meta = {"kind": kind, "dataset": src.name, "x": x, "y": y, "value": value,
                "agg": g.agg, "facet": facet, "x_values": list(g.x_values),
                "y_values": list(g.y_values), "facets": list(g.facets)}
        fig = figs.heatmap(src, g) if kind == "heatmap" else figs.lines(src, g)
        return fig, meta, f"{g.rows:,} rows under the filters; {g.cells[0].size:,} cells"

    @app.callback(Output("view-graph", "config"), Input("export-format", "value"))
    def on_format(fmt):
        fmt = fmt if fmt in ("png", "svg") else "png"
        return {"toImageButtonOptions": {"format": fmt, "filename": "jaxmodel-view"},
                "displaylogo": False}

    @app.callback(Output("message", "children"), Input("errors", "data"))
    def on_errors(errors):
        return next((e for e in (errors or {}).values() if e), "")

    @app.callback(Output("row-count", "children"), Input("dataset", "value"), *filter_inputs)
    def on_count(name, rv, rid, cv, cid, where):
        out, err = answer(lambda: q.count_rows(
            catalog, name, filters_from(catalog.source(name), rv, rid, cv, cid, where)))
        return "" if out is None else f"{out:,} rows match"

    # ----------------------------------------------------------------- export

    @app.callback(Output("download", "data"), Output("errors", "data", allow_duplicate=True),
                  Input("export-csv", "n_clicks"), Input("export-parquet", "n_clicks"),
                  State("dataset", "value"), State("view-meta", "data"),
                  State("value", "value"), *[State(i.component_id, i.component_property)
                                             for i in filter_inputs],
                  State("errors", "data"), prevent_initial_call=True)
    def on_export(_csv, _pq, name, meta, value, rv, rid, cv, cid, where, errors):
        fmt = "parquet" if dash.ctx.triggered_id == "export-parquet" else "csv"

        def run():
            src = catalog.source(name)
            f = filters_from(src, rv, rid, cv, cid, where)
            cols = (["config_id"] if "config_id" in src.columns else []) + list(src.varied)
            for k in ("x", "y", "facet", "value"):
                c = (meta or {}).get(k)
                if c and c in src.columns:
                    cols.append(c)
            if value in src.columns:
                cols.append(value)
            t = q.export_rows(catalog, name, cols, f)
            buf = io.BytesIO()
            if fmt == "csv":
                import pyarrow.csv as pcsv

                pcsv.write_csv(t, buf)
            else:
                import pyarrow.parquet as pq

                pq.write_table(t, buf)
            return dcc.send_bytes(buf.getvalue(), f"{name}-rows.{fmt}")

        out, err = answer(run)
        return (out if out is not None else no_update), dict(errors or {}, export=err)

    # ------------------------------------------------------------------- rows

    @app.callback(Output("rows-table", "data"), Output("rows-table", "columns"),
                  Output("errors", "data", allow_duplicate=True),
                  Input("dataset", "value"), Input("rows-table", "sort_by"),
                  Input("rows-k", "value"), Input("value", "value"), *filter_inputs,
                  State("errors", "data"), prevent_initial_call="initial_duplicate")
    def on_rows(name, sort_by, k, value, rv, rid, cv, cid, where, errors):
        def run():
            src = catalog.source(name)
            f = filters_from(src, rv, rid, cv, cid, where)
            by, desc = (value or d0["value"]), True
            if sort_by:
                by, desc = sort_by[0]["column_id"], sort_by[0]["direction"] == "desc"
            cols = list(dict.fromkeys(
                (["config_id"] if "config_id" in src.columns else []) + list(src.varied)
                + [c for c in ("mfu_percent", "step_time_ms", "throughput_tokens_s",
                               "bottleneck", "regime", "valid_layout") if c in src.columns]
                + ([by] if by in src.columns else [])))
            t = q.top_rows(catalog, name, by, descending=desc, k=int(k or TABLE_ROWS),
                           filters=f, columns=cols)
            rows = [{c: (v if not isinstance(v, float) or np.isfinite(v) else None)
                     for c, v in r.items()} for r in t.to_pylist()]
            return rows, [{"name": c, "id": c} for c in cols]

        out, err = answer(run)
        errors = dict(errors or {}, rows=err)
        return (*(out if out is not None else ([], [])), errors)

    # ----------------------------------------------------------------- pareto

    @app.callback(Output("pareto-graph", "figure"), Input("dataset", "value"),
                  Input("pareto-x", "value"), Input("pareto-xdir", "value"),
                  Input("pareto-y", "value"), Input("pareto-ydir", "value"),
                  Input("tabs", "value"), *filter_inputs)
    def on_pareto(name, x, xdir, y, ydir, tab, rv, rid, cv, cid, where):
        if tab != "pareto":
            return no_update

        def run():
            src = catalog.source(name)
            f = filters_from(src, rv, rid, cv, cid, where)
            t = q.pareto(catalog, name, x, y, minimize_x=xdir != "higher",
                         minimize_y=ydir == "lower", filters=f)
            return figs.pareto(src, t, x, y)

        out, err = answer(run)
        return out if out is not None else figs.message(err)

    # ---------------------------------------------------------- configuration

    @app.callback(Output("selected", "data"), Output("tabs", "value"),
                  Output("errors", "data", allow_duplicate=True),
                  Input("view-graph", "clickData"), Input("pareto-graph", "clickData"),
                  Input("rows-table", "active_cell"), State("rows-table", "data"),
                  State("view-meta", "data"), State("dataset", "value"),
                  *[State(i.component_id, i.component_property) for i in filter_inputs],
                  State("errors", "data"), prevent_initial_call=True)
    def on_pick(view_click, pareto_click, cell, table, meta, name, rv, rid, cv, cid, where,
                errors):
        trigger = dash.ctx.triggered_id

        def run():
            src = catalog.source(name)
            f = filters_from(src, rv, rid, cv, cid, where)
            if trigger == "rows-table":
                if not cell or not table or cell["row"] >= len(table):
                    return None
                row = q.row_by_id(catalog, name, int(table[cell["row"]]["config_id"]))
            elif trigger == "pareto-graph":
                row = q.row_by_id(catalog, name, int(pareto_click["points"][0]["customdata"]))
            else:
                row = picked_row(src, view_click, meta, f)
            return {"dataset": name, "row": row}

        out, err = answer(run)
        if out is None:
            return no_update, no_update, dict(errors or {}, pick=err)
        return out, "config", dict(errors or {}, pick="")

    def picked_row(src, click, meta, f):
        point = (click or {}).get("points", [{}])[0]
        if meta is None or not point:
            raise q.DashboardError("nothing to open: click a cell of the chart")
        if meta.get("kind") == "scatter":
            return q.row_by_id(catalog, src.name, int(point["customdata"]))
        x_values, y_values = meta["x_values"], meta["y_values"]
        xi = _index(figs._clean(x_values), point.get("x"))
        cell = {meta["x"]: x_values[xi]}
        if meta["kind"] == "line":
            cell[meta["y"]] = y_values[point["curveNumber"] % len(y_values)]
            facet_index = point["curveNumber"] // len(y_values)
        else:
            cell[meta["y"]] = y_values[_index(figs._clean(y_values), point.get("y"))]
            facet_index = point.get("curveNumber", 0)
        if meta.get("facet"):
            cell[meta["facet"]] = meta["facets"][facet_index]
        return q.best_in_cell(catalog, src.name, cell, meta["value"], f,
                              lowest=meta.get("agg") == "min")

    def _index(values, v):
        for i, w in enumerate(values):
            if w == v or str(w) == str(v):
                return i
        raise q.DashboardError(f"cell: {v!r} is not a value of the axis")

    @app.callback(Output("config-info", "children"), Output("breakdown-graph", "figure"),
                  Output("whatif-inputs", "children"), Output("tornado-of", "options"),
                  Output("tornado-of", "value"), Input("selected", "data"),
                  prevent_initial_call=True)
    def on_selected(sel):
        def run():
            src = catalog.source(sel["dataset"])
            inputs = cfg.inputs_of_row(src, sel["row"])
            ev = cfg.evaluate(src.model, inputs, x64=x64)
            row = sel["row"]
            shown = "  ".join(f"{k}={_fmt(float(inputs[k]))}" for k in src.varied)
            stored = row.get("step_time_ms")
            info = [html.Div([html.B(f"config_id {row.get('config_id', '?')}"),
                              f" of {src.name}: {shown}"], id="config-row"),
                    html.Div(f"live {src.model.name} model: step time "
                             f"{_fmt(ev.outputs['step_time_ms'])} ms, MFU "
                             f"{_fmt(ev.outputs['mfu_percent'])}%"
                             + (f" (the sweep wrote {_fmt(float(stored))} ms)"
                                if isinstance(stored, float) else ""),
                             id="config-live")]
            boxes = [html.Div([html.Label(f.name, htmlFor=f"whatif-{f.name}",
                                          title=f"{f.doc} ({f.unit})",
                                          style={"display": "block", "fontSize": "11px"}),
                               dcc.Input(id={"type": "whatif", "input": f.name}, type="text",
                                         value=_fmt(float(inputs[f.name])).replace(",", ""),
                                         debounce=False, style={"width": "120px"})])
                     for f in src.model.inputs]
            floats = [f.name for f in src.model.outputs if f.kind == "float"]
            fig = figs.breakdown([ev], ["selected"], title=f"Step-time breakdown of "
                                 f"config_id {row.get('config_id', '?')}")
            return info, fig, boxes, floats, _preferred(floats, "step_time_ms")

        out, err = answer(run)
        if out is None:
            return err, figs.message(err), [], [], None
        return out

    @app.callback(Output("tornado-graph", "figure"), Input("selected", "data"),
                  Input("tornado-of", "value"), prevent_initial_call=True)
    def on_tornado(sel, of):
        def run():
            src = catalog.source(sel["dataset"])
            inputs = cfg.inputs_of_row(src, sel["row"])
            return figs.tornado(cfg.tornado(src.model, inputs, of or "step_time_ms", x64=x64))

        out, err = answer(run)
        return out if out is not None else figs.message(err)

    @app.callback(Output("whatif-outputs", "children"), Output("whatif-graph", "figure"),
                  Input({"type": "whatif", "input": ALL}, "value"),
                  State({"type": "whatif", "input": ALL}, "id"), State("selected", "data"),
                  prevent_initial_call=True)
    def on_whatif(values, ids, sel):
        if not sel or not ids:
            return no_update, no_update

        def run():
            src = catalog.source(sel["dataset"])
            base = cfg.inputs_of_row(src, sel["row"])
            asked = {i["input"]: v for i, v in zip(ids, values, strict=True)}
            inputs = cfg.check_inputs(src.model, {**base, **asked})
            ev0 = cfg.evaluate(src.model, base, x64=x64)
            ev = cfg.evaluate(src.model, inputs, x64=x64)
            keys = [k for k in ("step_time_ms", "mfu_percent", "throughput_tokens_s",
                                "used_gpus", "bottleneck", "regime", "valid_layout")
                    if k in ev.outputs]
            header = html.Tr([html.Th("output"), html.Th("selected"), html.Th("what if")])
            rows = [html.Tr([html.Td(k), html.Td(_fmt(ev0.outputs[k])),
                             html.Td(_fmt(ev.outputs[k]), id=f"whatif-out-{k}")])
                    for k in keys]
            fig = figs.breakdown([ev0, ev], ["selected", "what if"],
                                 title="Step-time breakdown: selected and what if")
            return html.Table([header, *rows], id="whatif-table"), fig

        out, err = answer(run)
        if out is None:
            return html.Div(err, id="whatif-error", style={"color": "#A00"}), no_update
        return out

    # ---------------------------------------------------------------- compare

    @app.callback(Output("compare-graph", "figure"), Input("tabs", "value"),
                  Input("dataset", "value"), Input("compare-dataset", "value"),
                  Input("compare-mode", "value"), Input("x", "value"), Input("y", "value"),
                  Input("value", "value"), Input("agg", "value"), *filter_inputs)
    def on_compare(tab, name, other, mode, x, y, value, agg, rv, rid, cv, cid, where):
        if tab != "compare":
            return no_update

        def run():
            a_src, b_src = catalog.source(name), catalog.source(other)
            fa = filters_from(a_src, rv, rid, cv, cid, where)
            # The other dataset gets the same free filter (its widgets are this one's).
            fb = q.Filters({c: r for c, r in fa.ranges.items() if c in b_src.columns},
                           {c: v for c, v in fa.choices.items() if c in b_src.columns},
                           fa.where)
            ga = q.grid(catalog, name, x, y, value, agg or "max", fa)
            gb = q.grid(catalog, other, x, y, value, agg or "max", fb)
            return compare_figure(a_src, ga, gb, name, other, mode)

        out, err = answer(run)
        return out if out is not None else figs.message(err)

    return app


def _quiet_errors(server) -> None:
    """Requests Dash refuses (a script path it did not register, e.g. ``../``) answer
    404 in one line, not a 500 with a traceback on the terminal."""
    from dash.exceptions import DependencyException
    from werkzeug.exceptions import HTTPException

    @server.errorhandler(Exception)
    def _refuse(e):
        if isinstance(e, HTTPException):
            return e
        if isinstance(e, DependencyException):
            return "not found: the dashboard serves only its own scripts\n", 404
        print(f"jaxmodel dashboard: internal error: {type(e).__name__}: "
              f"{str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return "internal error\n", 500


def compare_figure(src: q.Source, ga: q.Grid, gb: q.Grid, name_a: str, name_b: str,
                   mode: str):
    """Two grids side by side (one facet each), or their difference on shared cells."""
    if mode == "diff":
        xs = [v for v in ga.x_values if v in set(gb.x_values)]
        ys = [v for v in ga.y_values if v in set(gb.y_values)]
        if not xs or not ys:
            raise q.DashboardError(f"{name_a} and {name_b} share no ({ga.x}, {ga.y}) cell")
        ai = np.ix_([ga.y_values.index(v) for v in ys], [ga.x_values.index(v) for v in xs])
        bi = np.ix_([gb.y_values.index(v) for v in ys], [gb.x_values.index(v) for v in xs])
        cells = ga.cells[0][ai] - gb.cells[0][bi]
        counts = np.minimum(ga.counts[0][ai], gb.counts[0][bi])
        g = q.Grid(ga.x, ga.y, ga.value, ga.agg, None, tuple(xs), tuple(ys), (),
                   cells[None], counts[None], ga.rows)
        return figs.heatmap(src, g, diff=True, title=f"{ga.agg} {ga.value}: {name_a} - "
                            f"{name_b} on their shared cells")
    xs = sorted(set(ga.x_values) | set(gb.x_values), key=lambda v: (str(type(v)), v))
    ys = sorted(set(ga.y_values) | set(gb.y_values), key=lambda v: (str(type(v)), v))
    cells = np.full((2, len(ys), len(xs)), np.nan)
    counts = np.zeros(cells.shape, dtype=np.int64)
    for k, g in enumerate((ga, gb)):
        ii = np.ix_([ys.index(v) for v in g.y_values], [xs.index(v) for v in g.x_values])
        cells[k][ii] = g.cells[0]
        counts[k][ii] = g.counts[0]
    g = q.Grid(ga.x, ga.y, ga.value, ga.agg, "dataset", tuple(xs), tuple(ys),
               (name_a, name_b), cells, counts, ga.rows + gb.rows)
    return figs.heatmap(src, g, title=f"{ga.agg} {ga.value}: {name_a} and {name_b}")
