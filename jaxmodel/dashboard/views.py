"""The views' queries: heatmap and line chart (:func:`grid`), regime map, scatter,
top rows, row counts, export, one row, the best row of a cell.

Each is one small result of one SQL query over the filtered rows (a group-by, a
bounded sample, the top rows), or of the summary cube where it holds the
columns asked for.  (The Pareto front: :mod:`jaxmodel.dashboard.data`.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxmodel.dashboard.catalog import Catalog, _cube_for, _filter_columns
from jaxmodel.dashboard.sources import ColumnInfo, DashboardError, IdRuns, Source, quote
from jaxmodel.dashboard.sql import Filters, Sql, _choice, where_clause

AGGS = ("max", "min", "mean", "count")
KINDS = ("heatmap", "line", "scatter", "regimes")
MAX_CELLS = 100_000  # groups a view may return (a 316 x 316 heatmap)
SCATTER_POINTS = 4_000
EXPORT_ROWS = 1_000_000
_SQL_AGG = {"max": "max", "min": "min", "mean": "avg"}


@dataclass(frozen=True)
class Grid:
    """An aggregated view: ``cells[f][i, j]`` for facet ``facets[f]``, ``y_values[i]``
    and ``x_values[j]`` (NaN where no row has a finite value)."""

    x: str
    y: str
    value: str
    agg: str
    facet: str | None
    x_values: tuple
    y_values: tuple
    facets: tuple
    cells: np.ndarray  # (facets, y, x), float64
    counts: np.ndarray  # (facets, y, x), int64: rows with a finite value
    rows: int  # rows under the filter


def _dim_sql(src: Source, name: str, what: str) -> str:
    src.column(name, what)
    return quote(name)


def _order(src: Source, name: str, values: Sequence[Any]) -> list[Any]:
    """Distinct values in display order: ascending, categories in their own order."""
    info = src.columns[name]
    vals = list(dict.fromkeys(values))
    if info.kind == "category" and info.categories:
        rank = {c: i for i, c in enumerate(info.categories)}
        return sorted(vals, key=lambda v: (rank.get(v, len(rank)), str(v)))
    return sorted(vals, key=lambda v: (v is None, v))


def _value_expr(src: Source, value: str) -> tuple[str, str]:
    """The value as SQL, and the condition for a row to count (finite values)."""
    info = src.column(value, "value")
    if not info.numeric and info.kind != "bool":
        raise DashboardError(f"value: column {value!r} is {info.kind}, not a number")
    v = quote(value)
    if info.kind == "bool":
        return f"{v}::INTEGER", f"{v} IS NOT NULL"
    if info.kind == "float":
        return v, f"NOT isnan({v})"
    return v, f"{v} IS NOT NULL"


def grid(catalog: Catalog, dataset: str, x: str, y: str, value: str, agg: str = "max",
         filters: Filters = Filters(), facet: str | None = None) -> Grid:
    """``agg`` of ``value`` per ``(x, y)`` (per facet value), one group-by query.

    Raises:
      DashboardError: unknown columns, a bad aggregation, x == y, too many cells, no rows.
    """
    src = catalog.source(dataset)
    if agg not in AGGS:
        raise DashboardError(f"aggregation: got {agg!r}; allowed: {', '.join(AGGS)}")
    xs, ys = _dim_sql(src, x, "x"), _dim_sql(src, y, "y")
    if x == y:
        raise DashboardError(f"x and y are both {x!r}: choose two different columns")
    fs = _dim_sql(src, facet, "facet") if facet else None
    if facet and facet in (x, y):
        raise DashboardError(f"facet {facet!r} is already an axis: choose another column")
    v, ok = _value_expr(src, value)
    keys = [xs, ys] + ([fs] if fs else [])
    w = where_clause(src, filters)
    cube = _cube_for(src, filters, (x, y, facet), None if agg == "count" else value)
    if cube is None:
        a = "count(*)" if agg == "count" else f"{_SQL_AGG[agg]}({v}) FILTER (WHERE {ok})"
        n = "count(*)" if agg == "count" else f"count(*) FILTER (WHERE {ok})"
        r, table = "count(*)", src.view
    else:
        k = cube.values.get(value)
        n = "sum(_rows)::BIGINT" if agg == "count" else f"sum(_v{k}_n)::BIGINT"
        a = {"count": n, "max": f"max(_v{k}_max)", "min": f"min(_v{k}_min)",
             "mean": f"sum(_v{k}_sum) / nullif(sum(_v{k}_n), 0)"}[agg]
        r, table = "sum(_rows)::BIGINT", cube.table
    sql = (f"SELECT {', '.join(keys)}, {a} AS a, {n} AS n, {r} AS r FROM {table} "
           f"{w.text} GROUP BY ALL LIMIT {MAX_CELLS + 1}")
    t = catalog.query(sql, w.params)
    if t.num_rows > MAX_CELLS:
        raise DashboardError(f"more than {MAX_CELLS:,} cells: choose axes with fewer values "
                             "or filter first")
    if t.num_rows == 0:
        raise DashboardError("no rows match the filters")
    cols = [t.column(i).to_pylist() for i in range(t.num_columns)]
    xv, yv = cols[0], cols[1]
    fv = cols[2] if fs else [None] * t.num_rows
    av, nv, rv = cols[-3], cols[-2], cols[-1]
    x_values = _order(src, x, xv)
    y_values = _order(src, y, yv)
    f_values = _order(src, facet, fv) if facet else [None]
    xi = {val: j for j, val in enumerate(x_values)}
    yi = {val: j for j, val in enumerate(y_values)}
    fi = {val: j for j, val in enumerate(f_values)}
    cells = np.full((len(f_values), len(y_values), len(x_values)), np.nan)
    counts = np.zeros(cells.shape, dtype=np.int64)
    for xx, yy, ff, aa, nn in zip(xv, yv, fv, av, nv, strict=True):
        k = (fi[ff], yi[yy], xi[xx])
        counts[k] = nn
        cells[k] = np.nan if aa is None or not nn else float(aa)
    return Grid(x, y, value, agg, facet, tuple(x_values), tuple(y_values),
                tuple(f_values) if facet else (), cells, counts, int(sum(rv)))


RULES = {"max": "best", "count": "most"}  # a regime map's aggregation -> its rule


@dataclass(frozen=True)
class Categorical:
    """A regime map: per facet value and cell the category of ``column`` that ``rule``
    picks (``jaxmodel plot regimes``' rules): ``best``, the category of the row with
    the highest ``by`` (ties: the earlier category); ``most``, the most frequent
    category among the rows with a finite ``by`` (ties: the earlier category).
    ``"invalid"`` (where that is a category, else ``""``) where no row of a cell has
    a finite ``by``."""

    x: str
    y: str
    column: str
    by: str
    x_values: tuple
    y_values: tuple
    names: np.ndarray  # (facets, y, x) object array of category names
    best: np.ndarray  # (facets, y, x): best, the chosen row's ``by``; most, its count
    rule: str = "best"
    facet: str | None = None
    facets: tuple = ()


def regimes(catalog: Catalog, dataset: str, x: str, y: str, column: str = "regime",
            by: str = "mfu_percent", filters: Filters = Filters(), *,
            rule: str = "best", facet: str | None = None) -> Categorical:
    """Per ``(x, y)`` (per facet value) the ``column`` category that ``rule`` picks
    (:class:`Categorical`), in one query."""
    src = catalog.source(dataset)
    info = src.column(column, "category column")
    if info.kind != "category":
        raise DashboardError(f"category column: {column!r} is {info.kind}; allowed: "
                             + ", ".join(c for c, i in src.columns.items()
                                         if i.kind == "category"))
    if rule not in RULES.values():
        raise DashboardError(f"rule: got {rule!r}; allowed: {', '.join(RULES.values())}")
    xs, ys = _dim_sql(src, x, "x"), _dim_sql(src, y, "y")
    if x == y:
        raise DashboardError(f"x and y are both {x!r}: choose two different columns")
    fs = _dim_sql(src, facet, "facet") if facet else None
    if facet and facet in (x, y, column):
        raise DashboardError(f"facet {facet!r} is already shown: choose another column")
    v, ok = _value_expr(src, by)
    rank = _category_rank(info)
    w = where_clause(src, filters)
    table = src.view
    cube = _cube_for(src, filters, (x, y, column, facet), by)
    keys = ["_cx", "_cy"] + (["_cf"] if fs else [])
    dims = ", ".join(f"{e} AS {k}" for e, k in zip([xs, ys, fs], keys, strict=False))
    if rule == "most":
        # Finite rows per cell and category; the most frequent is taken below.
        n = f"sum(_v{cube.values[by]}_n)::BIGINT" if cube is not None else \
            f"count(*) FILTER (WHERE {ok})"
        sql = (f"SELECT {dims}, {rank} AS _r, {n} AS _n FROM "
               f"{cube.table if cube is not None else table} {w.text} GROUP BY ALL "
               f"LIMIT {(MAX_CELLS + 1) * (len(info.categories) + 1)}")
        params = w.params
    else:
        if cube is not None:  # a group's best value; its category is one of the cube's dims
            table, v = cube.table, f"_v{cube.values[by]}_max"
            ok = f"{v} IS NOT NULL"
        # The best row per cell: the highest value, then the earlier category (as
        # jaxmodel plot's regime_data).  Two group-bys joined on the cell: the best
        # value per cell, then the earliest category among the rows that reach it
        # (one arg_max over a (value, rank) struct is several times slower).
        on = " AND ".join(f"{e} IS NOT DISTINCT FROM {k}"
                          for e, k in zip([xs, ys, fs], keys, strict=False))
        cells = (f"SELECT {dims}, max({v}) FILTER (WHERE {ok}) AS _cb "
                 f"FROM {table} {w.text} GROUP BY ALL LIMIT {MAX_CELLS + 1}")
        sql = (f"WITH cells AS ({cells}), hits AS (SELECT {', '.join(keys)}, min({rank}) AS "
               f"_r FROM {table} JOIN cells ON {on} {w.text} {'AND' if w.text else 'WHERE'} "
               f"{ok} AND {v} = _cb GROUP BY ALL) SELECT {', '.join('cells.' + k for k in keys)}"
               f", hits._r, cells._cb AS _n FROM cells LEFT JOIN hits USING ({', '.join(keys)})")
        params = w.params + w.params
    t = catalog.query(sql, params)
    cols = {c: t.column(c).to_pylist() for c in t.column_names}
    xv, yv = cols["_cx"], cols["_cy"]
    fv = cols["_cf"] if fs else [None] * t.num_rows
    if len(set(zip(xv, yv, fv, strict=True))) > MAX_CELLS:  # (a truncated answer too)
        raise DashboardError(f"more than {MAX_CELLS:,} cells: choose axes with fewer values")
    if t.num_rows == 0:
        raise DashboardError("no rows match the filters")
    x_values, y_values = _order(src, x, xv), _order(src, y, yv)
    f_values = _order(src, facet, fv) if facet else [None]
    cats = info.categories
    xi = {val: j for j, val in enumerate(x_values)}
    yi = {val: j for j, val in enumerate(y_values)}
    fi = {val: j for j, val in enumerate(f_values)}
    shape = (len(f_values), len(y_values), len(x_values))
    code = np.full(shape, len(cats), dtype=np.int64)  # len(cats): none picked
    best = np.full(shape, np.nan)
    present = np.zeros(shape, dtype=bool)
    for xx, yy, ff, rr, nn in zip(xv, yv, fv, cols["_r"], cols["_n"], strict=True):
        k = (fi[ff], yi[yy], xi[xx])
        present[k] = True
        if rr is None or rr >= len(cats) or nn is None or (rule == "most" and nn == 0):
            continue  # no finite row, or a category outside the declared ones
        # best: one answer row per cell; most: the highest count, then the earlier.
        nn = float(nn)
        if rule == "best" or not nn <= best[k] or (nn == best[k] and rr < code[k]):
            code[k], best[k] = rr, nn
    none = "invalid" if "invalid" in cats else ""
    names = np.full(shape, "", dtype=object)
    for k in zip(*np.nonzero(present), strict=True):
        names[k] = cats[code[k]] if code[k] < len(cats) else none
    return Categorical(x, y, column, by, tuple(x_values), tuple(y_values), names, best,
                       rule, facet, tuple(f_values) if facet else ())


def _category_rank(info: ColumnInfo) -> str:
    """The category's position in its declared order, as SQL (for tie-breaking)."""
    if not info.categories:
        return "0"
    cases = " ".join(f"WHEN '{c}' THEN {i}" for i, c in enumerate(info.categories)
                     if "'" not in c)
    return f"(CASE {quote(info.name)} {cases} ELSE {len(info.categories)} END)"


def scatter(catalog: Catalog, dataset: str, x: str, y: str, color: str | None = None,
            filters: Filters = Filters(), points: int = SCATTER_POINTS, *,
            facet: str | None = None) -> pa.Table:
    """A reproducible sample of at most ``points`` filtered rows (x, y, color, facet,
    config_id): the rows with the smallest hash of their ``config_id`` (a facet only
    adds its column: the panels split the one sample).

    With a summary cube that knows how many rows the filters keep (``n``), the
    query first drops every row whose hash is above the value 4 ``points`` of
    ``n`` uniform hashes fall under, so that only about ``4 points`` rows are
    sorted (10^8 rows, 5 x 10^7 filtered: 1.04 -> 0.60 s).  The sample is the
    same: should fewer than ``points`` rows pass (odds of about e^-4000), the
    query runs again without it."""
    src = catalog.source(dataset)
    cols = [x, y] + ([color] if color else [])
    for c, what in zip(cols, ("x", "y", "colour"), strict=False):
        src.column(c, what)
    if facet:
        src.column(facet, "facet")
        if facet in (x, y):
            raise DashboardError(f"facet {facet!r} is already an axis: choose another column")
        cols.append(facet)
    for c, what in ((x, "x"), (y, "y")):
        if not src.columns[c].numeric:
            raise DashboardError(f"{what}: column {c!r} is {src.columns[c].kind}, not a number")
    key = "config_id" if "config_id" in src.columns else None
    sel = list(dict.fromkeys(cols + ([key] if key else [])))
    order = f"ORDER BY hash({quote(key)}), {quote(key)}" if key else ""
    kept = _cube_count(catalog, src, filters) if key else None
    if kept is not None and kept > 8 * int(points):
        by_runs = _sample_by_id_runs(catalog, src, sel, filters, int(points))
        if by_runs is not None:
            return by_runs
        below = Sql(f"hash({quote(key)}) < ?::UBIGINT", [int(2**64 * 4 * int(points) / kept)])
        w = where_clause(src, filters, [below])
        sample = catalog.query(f"SELECT {', '.join(quote(c) for c in sel)} FROM {src.view} "
                               f"{w.text} {order} LIMIT {int(points)}", w.params)
        if sample.num_rows == int(points):
            return sample
    w = where_clause(src, filters)
    sql = (f"SELECT {', '.join(quote(c) for c in sel)} FROM {src.view} {w.text} {order} "
           f"LIMIT {int(points)}")
    return catalog.query(sql, w.params)


def _sample_by_id_runs(catalog: Catalog, src: Source, columns: Sequence[str],
                       filters: Filters, points: int) -> pa.Table | None:
    """The scatter's sample (the filtered rows with the ``points`` smallest hashes of
    their ``config_id``) from the cube's smallest hash of each group, then the rows
    read by position; ``None`` where it cannot (no :class:`IdRuns`, a filter on
    other columns than the cube's numeric axes, a column not in every part).

    The ``points``-th smallest group minimum ``B`` bounds the sample's hashes (that
    many rows hash to ``B`` or less), and only the groups whose minimum is ``B`` or
    less hold such rows: about ``points`` groups, whose ids are hashed here, not
    read.  Then ``columns`` are read at the chosen rows' positions.  (10^8 rows:
    0.4 s, against 1.0 s for the scan with a hash bound.)"""
    want = [c for c in columns if c != "config_id"]
    runs = _runs_for(src, filters, want)
    if runs is None:
        return None
    cube = src.cube
    cats = [c for c in want if src.columns[c].kind == "category"]
    w = where_clause(src, filters)
    bound = (f"(SELECT _id_hash FROM {cube.table} {w.text} ORDER BY _id_hash LIMIT 1 "
             f"OFFSET {points - 1})")
    w2 = where_clause(src, filters, [Sql(f"_id_hash <= {bound}", w.params)])
    chosen = catalog.query(
        f"SELECT i FROM (SELECT unnest(generate_series(_id_lo, _id_hi)) AS i FROM "
        f"{cube.table} {w2.text}) GROUP BY i ORDER BY hash(i), i LIMIT {points}",
        w2.params)["i"].to_numpy()

    def read(job):
        """One part's chosen rows."""
        f, start, sizes = job
        pf, out = None, []
        for i, n in enumerate(sizes):
            mine = chosen[(chosen >= start) & (chosen < start + n)]
            if len(mine):
                if pf is None:  # categories as their codes: 2x faster than as strings
                    pf = pq.ParquetFile(f, read_dictionary=cats)
                t = pf.read_row_group(i, columns=want, use_threads=False).take(mine - start)
                out.append(t.append_column("config_id", pa.array(mine, pa.int64())))
            start += n
        return out

    t = pa.concat_tables([t for ts in _each_part(catalog, src, runs, read) for t in ts],
                         promote_options="permissive")
    rank = {v: k for k, v in enumerate(chosen.tolist())}
    t = t.take(np.argsort([rank[v] for v in t["config_id"].to_pylist()], kind="stable"))
    return pa.table({c: _plain(t[c]) for c in columns})


def _runs_for(src: Source, filters: Filters, columns: Sequence[str]) -> IdRuns | None:
    """The cube's :class:`IdRuns` where a view may read ``columns`` by position under
    ``filters``: they name only the cube's numeric axes (so they hold for whole
    groups, and every row of a group's id span passes them) and every part holds
    ``columns``; else ``None``."""
    cube = src.cube
    runs = cube.ids if cube is not None else None
    if runs is None or not _filter_columns(src, filters) <= {
            d for d in cube.dims if src.columns[d].numeric}:
        return None
    if any(not set(columns) <= cols for cols in runs.columns.values()):
        return None
    return runs


def _each_part(catalog: Catalog, src: Source, runs: IdRuns, read) -> list:
    """``read((part file, its first id, its row groups' sizes))`` for every part, on
    the catalog's threads; the answers in part order."""
    jobs = [(f, runs.offsets[f], runs.row_groups[f]) for f in src.files]
    with ThreadPoolExecutor(max(1, min(len(jobs), catalog.threads))) as pool:
        return list(pool.map(read, jobs))


def _plain(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """Categories as their names (DuckDB returns them so)."""
    return col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col


def _cube_count(catalog: Catalog, src: Source, filters: Filters) -> int | None:
    """Rows the filters keep, from the summary cube (``None`` without one that can
    answer)."""
    cube = _cube_for(src, filters, (), None)
    if cube is None:
        return None
    w = where_clause(src, filters)
    return int(catalog.query(f"SELECT coalesce(sum(_rows), 0)::BIGINT FROM {cube.table} "
                             f"{w.text}", w.params).column(0)[0].as_py())


def top_rows(catalog: Catalog, dataset: str, by: str, *, descending: bool = True, k: int = 20,
             filters: Filters = Filters(), columns: Sequence[str] | None = None) -> pa.Table:
    """The ``k`` best filtered rows by ``by`` (NaN last), ties by ``config_id``."""
    src = catalog.source(dataset)
    info = src.column(by, "sort")
    if not 1 <= int(k) <= 10_000:
        raise DashboardError(f"rows: got {k!r}; allowed: 1 to 10000")
    cols = list(columns) if columns else list(src.columns)
    for c in cols:
        src.column(c, "table column")
    extra = [Sql(f"NOT isnan({quote(by)})")] if info.kind == "float" else []
    extra += _top_bounds(catalog, src, by, descending, int(k), filters)
    w = where_clause(src, filters, extra)
    tie = ", config_id" if "config_id" in src.columns else ""
    sql = (f"SELECT {', '.join(quote(c) for c in cols)} FROM {src.view} {w.text} "
           f"ORDER BY {quote(by)} {'DESC' if descending else 'ASC'}{tie} LIMIT {int(k)}")
    return catalog.query(sql, w.params)


def _top_bounds(catalog: Catalog, src: Source, by: str, descending: bool, k: int,
                filters: Filters) -> list[Sql]:
    """Conditions that keep every one of the ``k`` best rows by ``by``, from the
    summary cube (none without one): each group holds a row at its extreme, so
    the ``k`` best group extremes are ``k`` rows at least as good as the k-th of
    them, ``T``, and no row worse than ``T`` is among the ``k`` best.  A row at
    least as good as ``T`` lies in a group whose extreme is, so the rows read are
    also limited to the range of each grid axis over those groups: conditions
    that DuckDB checks against each row group's statistics, skipping row groups
    (the grid's leading axis is sorted in the parts)."""
    cube = _cube_for(src, filters, (), by)
    if cube is None:
        return []
    best = f"_v{cube.values[by]}_{'max' if descending else 'min'}"
    w = where_clause(src, filters, [Sql(f"{best} IS NOT NULL")])
    bound = catalog.query(f"SELECT {best} FROM {cube.table} {w.text} ORDER BY {best} "
                          f"{'DESC' if descending else 'ASC'} LIMIT 1 OFFSET {k - 1}",
                          w.params)
    if bound.num_rows == 0:  # fewer than k groups: any row may be among the best
        return []
    t = bound.column(0)[0].as_py()
    cmp = ">=" if descending else "<="
    axes = [d for d in cube.dims if src.columns[d].numeric]
    w = where_clause(src, filters, [Sql(f"{best} {cmp} ?", [t])])
    spans = catalog.query("SELECT " + ", ".join(f"min({quote(d)}) AS _lo{i}, max({quote(d)}) "
                                                f"AS _hi{i}" for i, d in enumerate(axes))
                          + f" FROM {cube.table} {w.text}", w.params).to_pylist()[0]
    out = [Sql(f"{quote(by)} {cmp} ?", [t])]
    for i, d in enumerate(axes):
        out.append(Sql(f"{quote(d)} BETWEEN ? AND ?", [spans[f"_lo{i}"], spans[f"_hi{i}"]]))
    return out


def count_rows(catalog: Catalog, dataset: str, filters: Filters = Filters()) -> int:
    src = catalog.source(dataset)
    kept = _cube_count(catalog, src, filters)
    if kept is not None:
        return kept
    w = where_clause(src, filters)
    return int(catalog.query(f"SELECT count(*) FROM {src.view} {w.text}",
                             w.params).column(0)[0].as_py())


def export_rows(catalog: Catalog, dataset: str, columns: Sequence[str],
                filters: Filters = Filters(), limit: int = EXPORT_ROWS) -> pa.Table:
    """The filtered rows' ``columns`` (at most ``limit``), in ``config_id`` order."""
    src = catalog.source(dataset)
    cols = list(dict.fromkeys(columns))
    for c in cols:
        src.column(c, "export column")
    w = where_clause(src, filters)
    order = "ORDER BY config_id" if "config_id" in src.columns else ""
    return catalog.query(f"SELECT {', '.join(quote(c) for c in cols)} FROM {src.view} "
                         f"{w.text} {order} LIMIT {int(limit)}", w.params)


def row_by_id(catalog: Catalog, dataset: str, config_id: int) -> dict[str, Any]:
    """One row by its ``config_id``."""
    src = catalog.source(dataset)
    src.column("config_id", "row")
    t = catalog.query(f"SELECT * FROM {src.view} WHERE config_id = ? LIMIT 1", [int(config_id)])
    if not t.num_rows:
        raise DashboardError(f"config_id: no row {config_id} in dataset {dataset!r}")
    return t.to_pylist()[0]


def best_in_cell(catalog: Catalog, dataset: str, cell: Mapping[str, Any], value: str,
                 filters: Filters = Filters(), *, lowest: bool = False) -> dict[str, Any]:
    """The filtered row with the highest (``lowest``: lowest) ``value`` among those
    whose columns equal ``cell`` (a clicked heatmap cell or line point)."""
    src = catalog.source(dataset)
    extra = []
    for name, v in cell.items():
        info = src.column(name, "cell")
        extra.append(Sql(f"{quote(name)} = ?", [_choice(info, v) if info.kind != "int"
                                               else float(v)]))
    v, ok = _value_expr(src, value)
    w = where_clause(src, filters, extra)
    tie = ", config_id" if "config_id" in src.columns else ""
    order = f"CASE WHEN {ok} THEN 0 ELSE 1 END, {v} {'ASC' if lowest else 'DESC'}{tie}"
    t = catalog.query(f"SELECT * FROM {src.view} {w.text} ORDER BY {order} LIMIT 1", w.params)
    if not t.num_rows:
        raise DashboardError("no row in that cell under the filters")
    return t.to_pylist()[0]
