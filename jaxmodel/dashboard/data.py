"""Server-side queries over sweep datasets: DuckDB over the Parquet parts.

Every view of the dashboard (and of the static report) is one small result of
one SQL query: a group-by over the filtered rows (heatmap, line chart, regime
map), a bounded sample (scatter), the top rows (table) or the Pareto front (a
block sample, then one pruned scan; or, for a big grid sweep, the summary cube
and a few groups' rows read by position).  DuckDB reads only the columns a query
names (projection pushdown) and skips row groups by the Parquet statistics of
simple conditions (filter pushdown), so nothing loads a whole dataset into
memory.  A dataset of :data:`CUBE_MIN_ROWS` rows or more gets a :class:`Cube`
when the catalog opens it, and the group-by views whose columns it holds read
that instead of the rows.

The queries come in layers, each its own module; every name is importable
from here:

* :mod:`~jaxmodel.dashboard.sources`: a dataset's parts, schema and metadata
  (the only paths ever read are the part files of the datasets named when the
  :class:`Catalog` was built), and the cube's structures;
* :mod:`~jaxmodel.dashboard.sql`: the filters as SQL with bound parameters
  (safety: no request text reaches DuckDB) and NaN handled as numpy does;
* :mod:`~jaxmodel.dashboard.catalog`: the catalog and the summary cube;
* :mod:`~jaxmodel.dashboard.views`: the views' queries;
* here: the Pareto front, its sampled pre-pass and the cube's shortcut to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxmodel.dashboard.catalog import CUBE_MIN_ROWS, CUBE_SHRINK, Catalog
from jaxmodel.dashboard.sources import (
    ColumnInfo,
    Cube,
    DashboardError,
    IdRuns,
    Source,
    open_source,
    quote,
)
from jaxmodel.dashboard.sql import Filters, Sql, filter_sql, where_clause
from jaxmodel.dashboard.views import (
    AGGS,
    EXPORT_ROWS,
    KINDS,
    MAX_CELLS,
    RULES,
    SCATTER_POINTS,
    Categorical,
    Grid,
    _each_part,
    _runs_for,
    best_in_cell,
    count_rows,
    export_rows,
    grid,
    regimes,
    row_by_id,
    scatter,
    top_rows,
)

PARETO_SAMPLE_ROWS = 100_000  # rows the Pareto pre-pass samples (about)
PARETO_WINDOWS = 16  # runs of consecutive ids those rows come in
PARETO_TERMS = 4  # sampled front points the Pareto scan tests each row against
PARETO_CUBE_SAMPLE = 65_536  # cube groups the Pareto view's first staircase comes from
PARETO_CUBE_SHARE = 0.25  # at most this share of the rows read by position, else a scan
PARETO_CUBE_GROUPS = 1_000_000  # at most this many groups left by the sample's steps


def pareto(catalog: Catalog, dataset: str, x: str, y: str, *, minimize_x: bool = True,
           minimize_y: bool = False, filters: Filters = Filters(),
           sample_percent: float | None = None, terms: int = PARETO_TERMS) -> pa.Table:
    """The exact Pareto front of ``(x, y)`` over the filtered rows (NaN rows skipped).

    With a summary cube that has :class:`IdRuns` and holds ``x`` and ``y``, under
    a filter on the cube's numeric axes only, and ``sample_percent`` left at
    ``None``: the cube picks the groups that may hold front rows and only those
    rows' ``x`` and ``y`` are read, by position (:func:`_front_by_id_runs`; 10^8
    rows: 0.3-0.6 s, against 1.5-2.5 s for the scan below).  Otherwise, or when those
    groups hold more than :data:`PARETO_CUBE_SHARE` of the rows, two queries, one
    full scan, no sort of the dataset:

    1. A sample: by default the filtered rows among about
       :data:`PARETO_SAMPLE_ROWS` rows of the dataset (none for a dataset smaller
       than that), in :data:`PARETO_WINDOWS` runs of consecutive ``config_id``
       spread evenly over the sweep: plain ranges of the ids, which DuckDB
       tests first and against the row groups' statistics (10^8 rows: 0.24 s,
       against 0.51 s for a 0.1% ``TABLESAMPLE``); with ``sample_percent``, or
       without a ``config_id``, the rows of about that % of the row blocks
       (``TABLESAMPLE ... (system)``).  Its front gives up to ``terms`` real
       rows ``q``, chosen greedily by how many sampled rows each dominates.
    2. The scan: every filtered row except those some ``q`` dominates (no better
       in x or y, and not equal to ``q``; compared on the raw columns, so exact):
       such a row is off the front, since ``q`` is itself a filtered row.  A test
       is a few comparisons, and only the rows no earlier test removed reach the
       next.

    The front is then taken among the rows left (about 10^4 of 10^7), on the host.
    Which rows the sample holds changes only how many rows the scan returns, never
    the front.  (Decoding ``config_id`` for every row is most of the scan's time:
    0.69 s against 0.22 s without it, 10^7 rows at load 3; a second query for the
    front's ids alone measured no faster, as DuckDB turns an ``IN`` list of floats
    into a join rather than a filter inside the Parquet read.)

    Returns columns ``x``, ``y`` and ``config_id`` (when the dataset has it), along
    x; of rows with equal ``(x, y)`` the lowest id.
    """
    src = catalog.source(dataset)
    for c, what in ((x, "x"), (y, "y")):
        if not src.column(c, what).numeric:
            raise DashboardError(f"{what}: column {c!r} is not a number")
    if x == y:
        raise DashboardError(f"x and y are both {x!r}: choose two different columns")
    if not 1 <= int(terms) <= 64:
        raise DashboardError(f"pareto terms: got {terms!r}; allowed: 1 to 64")
    sx = 1 if minimize_x else -1  # work in "minimise both"
    sy = 1 if minimize_y else -1
    qx, qy = quote(x), quote(y)
    ok = [Sql(f"NOT isnan({quote(c)})" if src.columns[c].kind == "float" else
              f"{quote(c)} IS NOT NULL") for c in (x, y)]
    key = "config_id" if "config_id" in src.columns else None
    if sample_percent is None:
        fast = _front_by_id_runs(catalog, src, x, y, sx, sy, filters)
        if fast is not None:
            return fast
    total = src.row_count()
    windows: list[Sql] = []
    if sample_percent is None:
        sample_percent = 100.0 * PARETO_SAMPLE_ROWS / total if total > PARETO_SAMPLE_ROWS \
            else 0.0
        if key and sample_percent > 0:
            windows = [_id_windows(src, total)]
    if not (0 <= float(sample_percent) <= 100):
        raise DashboardError(f"pareto sample: got {sample_percent!r}; allowed: 0 to 100 (%)")
    tests: list[Sql] = []
    if sample_percent > 0:
        w = where_clause(src, filters, ok + windows)
        how = "" if windows else f"TABLESAMPLE {float(sample_percent)!r}% (system, 42)"
        sample = catalog.query(f"SELECT {qx} AS x, {qy} AS y FROM {src.view} {how} {w.text}",
                               w.params)
        bx, by = ("<" if sx > 0 else ">"), ("<" if sy > 0 else ">")
        for vx, vy in _dominating(sample, sx, sy, int(terms)):
            # keep the rows q does not dominate: better in x or in y, or equal to q
            tests.append(Sql(f"{qx} {bx} ? OR {qy} {by} ? OR ({qx} = ? AND {qy} = ?)",
                             [vx, vy, vx, vy]))
    w = where_clause(src, filters, ok + tests)
    cand = catalog.query(f"SELECT {qx} AS x, {qy} AS y{', ' + key if key else ''} "
                         f"FROM {src.view} {w.text}", w.params)
    if cand.num_rows == 0:
        raise DashboardError("no rows match the filters")
    cx, cy = _signed(cand["x"], sx), _signed(cand["y"], sy)
    ids = cand[key].to_numpy() if key else np.arange(len(cx))
    return _front_table(cx, cy, ids, sx, sy, key is not None)


def _front_table(cx: np.ndarray, cy: np.ndarray, ids: np.ndarray, sx: int, sy: int,
                 with_ids: bool) -> pa.Table:
    """The front of the candidates (signed values) as :func:`pareto` returns it."""
    keep = _front(cx, cy, ids)
    out = {"x": (cx[keep] * sx).astype(np.float64), "y": (cy[keep] * sy).astype(np.float64)}
    if with_ids:
        out["config_id"] = ids[keep]
    return pa.table(out)


def _front_by_id_runs(catalog: Catalog, src: Source, x: str, y: str, sx: int, sy: int,
                      filters: Filters) -> pa.Table | None:
    """The exact Pareto front from the summary cube and the rows of a few of its
    groups, read by position; ``None`` where the cube cannot answer (no cube or no
    :class:`IdRuns`, a filter on other columns than the cube's numeric axes, ``x``
    or ``y`` not among its values or not in every part).

    Minimise both (values times ``sx``, ``sy``).  Each group of the cube has a best
    corner, its best x and its best y, which no row of the group beats; and two
    points that some row of the group is at least as good as, when every row of
    the group has both values: (best x, worst y), the row with the best x, and
    (worst x, best y).  Those points' front ``q`` is a staircase that real
    filtered rows reach (the filter holds for a whole group: it names only the
    cube's axes).  A group whose corner some ``q`` beats in both x and y holds
    only rows a filtered row dominates, so no front row: it is skipped.  (Done
    twice: the second time with the front of the points of the groups left,
    which is the exact front of all the points.)  The groups left are read,
    ``x`` and ``y`` only, by position (:class:`IdRuns`: a group's id span holds
    only rows with its axes' values, so every row read passes the filter); the
    rows ``q`` beats in both are dropped as each row group is read, and the
    front is taken among the rest.

    10^8 rows (the benchmark's step time against throughput under ``t p >= 16``):
    12 to 21 thousand of 3 million groups come back from the cube, 11 to 13
    thousand are read (0.3 M rows), and the view takes 0.3-0.6 s against 1.5-2.5 s
    for one scan of every row (bench/README.md).
    """
    cube = src.cube
    runs = _runs_for(src, filters, [x, y])
    if runs is None or x not in cube.values or y not in cube.values:
        return None
    kx, ky = cube.values[x], cube.values[y]
    cols = (f"_v{kx}_min AS x0, _v{kx}_max AS x1, _v{ky}_min AS y0, _v{ky}_max AS y1, "
            f"_v{kx}_n = _rows AND _v{ky}_n = _rows AS full")
    some = [Sql(f"_v{kx}_n > 0 AND _v{ky}_n > 0")]

    def corners(t: pa.Table) -> tuple[np.ndarray, ...]:
        """Signed best and worst x and y of each group, and whether it has no NaN."""
        bx, wx = _signed(t["x0"], sx, exact=True), _signed(t["x1"], sx, exact=True)
        by, wy = _signed(t["y0"], sy, exact=True), _signed(t["y1"], sy, exact=True)
        if sx < 0:
            bx, wx = wx, bx
        if sy < 0:
            by, wy = wy, by
        return bx, wx, by, wy, t["full"].to_numpy(zero_copy_only=False).astype(bool)

    # A first staircase from a sample of the groups (about PARETO_CUBE_SAMPLE of
    # them, whole row blocks of the cube), and the groups that up to 16 of its
    # steps do not beat (tested in the query: few groups come back).
    bx_, by_ = (f"_v{kx}_{'min' if sx > 0 else 'max'}", f"_v{ky}_{'min' if sy > 0 else 'max'}")
    w = where_clause(src, filters, some + [Sql(f"_v{kx}_n = _rows AND _v{ky}_n = _rows")])
    share = min(100.0, 100.0 * PARETO_CUBE_SAMPLE / max(1, cube.groups))
    sample = catalog.query(f"SELECT {cols} FROM {cube.table} TABLESAMPLE {share!r}% "
                           f"(system, 42) {w.text}", w.params)
    bx, wx, by, wy, _ = corners(sample)
    qx, qy = _staircase(bx, wy, wx, by)
    steps = np.unique(np.linspace(0, len(qx) - 1, min(len(qx), PARETO_TERMS * 4)).round()
                      .astype(np.int64)) if len(qx) else np.zeros(0, dtype=np.int64)
    beat = [Sql(f"NOT ({bx_} {'>' if sx > 0 else '<'} ? AND {by_} {'>' if sy > 0 else '<'} ?)",
                [(qx[i] * sx).item(), (qy[i] * sy).item()]) for i in steps]
    w = where_clause(src, filters, some + beat)
    g = catalog.query(f"SELECT {cols}, _id_lo, _id_hi, _rows FROM {cube.table} {w.text}",
                      w.params)
    if g.num_rows == 0:  # (the group of each step is never beaten)
        raise DashboardError("no rows match the filters")
    if g.num_rows > PARETO_CUBE_GROUPS:
        return None  # the sample's steps beat too few groups (it holds no group whole)
    bx, wx, by, wy, full = corners(g)
    # The exact staircase of the groups left (and the first one's steps).
    qx, qy = _staircase(np.r_[bx[full], qx], np.r_[wy[full], qy], wx[full], by[full])
    keep = ~_beaten(bx, by, qx, qy)
    if int(g["_rows"].to_numpy()[keep].sum()) > PARETO_CUBE_SHARE * src.row_count():
        return None  # the cube prunes too little: one scan of the rows does better
    lo, hi = g["_id_lo"].to_numpy()[keep], g["_id_hi"].to_numpy()[keep]
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], np.maximum.accumulate(hi[order])
    new = np.r_[True, lo[1:] > hi[:-1] + 1]
    lo, hi = lo[new], hi[np.r_[new[1:], True]]  # disjoint runs, in order
    def read(job):
        """One part's rows in the runs that no step beats, less those its own front
        drops (the front of all rows is among the parts' fronts)."""
        f, start, sizes = job
        pf = None
        xs, ys, ids = [], [], []
        for i, n in enumerate(sizes):
            a = np.searchsorted(hi, start, "left")
            b = np.searchsorted(lo, start + n - 1, "right")
            if b > a:  # runs a..b-1 overlap this row group's ids
                s = np.clip(lo[a:b] - start, 0, n)
                e = np.clip(hi[a:b] - start + 1, 0, n)
                pos = _ranges(s, e)
                if pf is None:
                    pf = pq.ParquetFile(f)
                t = pf.read_row_group(i, columns=[x, y], use_threads=False)
                vx = _signed(t[x].take(pos), sx, exact=True)
                vy = _signed(t[y].take(pos), sy, exact=True)
                left = np.flatnonzero(~(np.isnan(vx) | np.isnan(vy) | _beaten(vx, vy, qx, qy)))
                vx, vy, vi = vx[left], vy[left], pos[left] + start
                left = _front(vx, vy, vi)
                xs.append(vx[left])
                ys.append(vy[left])
                ids.append(vi[left])
            start += n
        return xs, ys, ids

    parts = _each_part(catalog, src, runs, read)
    cx = np.concatenate([a for p in parts for a in p[0]] or [np.zeros(0)])
    cy = np.concatenate([a for p in parts for a in p[1]] or [np.zeros(0)])
    ids = np.concatenate([a for p in parts for a in p[2]] or [np.zeros(0, np.int64)])
    if len(cx) == 0:
        raise DashboardError("no rows match the filters")
    return _front_table(cx, cy, ids, sx, sy, True)


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(s, e)`` for each pair (int64)."""
    n = ends - starts
    n = np.where(n > 0, n, 0)
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(starts - (np.cumsum(n) - n), n)
    return np.arange(total, dtype=np.int64) + shift


def _staircase(ax: np.ndarray, ay: np.ndarray, bx: np.ndarray,
               by: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The front (minimise both) of the points ``(ax, ay)`` and ``(bx, by)``, along
    x, y falling."""
    px, py = np.concatenate([ax, bx]), np.concatenate([ay, by])
    keep = _front(px, py, np.arange(len(px)))
    return px[keep], py[keep]


def _beaten(x: np.ndarray, y: np.ndarray, qx: np.ndarray, qy: np.ndarray) -> np.ndarray:
    """Which points some staircase point beats in both x and y (strictly), for a
    staircase along x with y falling: among the steps left of x the lowest is the
    last one."""
    if len(qx) == 0:
        return np.zeros(len(x), dtype=bool)
    j = np.searchsorted(qx, x, "left")  # steps with qx < x
    return (j > 0) & (qy[np.maximum(j - 1, 0)] < y)


def _id_windows(src: Source, total: int) -> Sql:
    """``config_id`` in :data:`PARETO_WINDOWS` runs spread evenly over the sweep's
    ids, together about :data:`PARETO_SAMPLE_ROWS` of the ``total`` rows (ids of
    a filtered sweep are sparser than its rows: the runs widen to match)."""
    span = max(int(src.meta.get("configurations") or 0), total)
    width = max(1, PARETO_SAMPLE_ROWS * span // (total * PARETO_WINDOWS))
    starts = [i * span // PARETO_WINDOWS for i in range(PARETO_WINDOWS)]
    return Sql(" OR ".join("config_id BETWEEN ? AND ?" for _ in starts),
               [v for a in starts for v in (a, a + width - 1)])


def _signed(col: pa.ChunkedArray, sign: int, exact: bool = False) -> np.ndarray:
    """A column as numpy (floats as float64, integers as int64), times ``sign``;
    ``exact``: floats keep their own width (negating is exact in any)."""
    a = col.to_numpy()
    if a.dtype.kind != "f":
        a = a.astype(np.int64)
    elif not exact:
        a = a.astype(np.float64)
    return a * a.dtype.type(sign)


def _front(x: np.ndarray, y: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Indices of the minimise-both front, along x; of equal points the lowest id."""
    if not len(x):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((ids, y, x))
    ys = y[order]
    best = np.minimum.accumulate(ys)
    keep = np.ones(len(ys), dtype=bool)
    keep[1:] = ys[1:] < best[:-1]  # below every row before it (all have x <= its x)
    return order[keep]


def _dominated(x: np.ndarray, y: np.ndarray, qx, qy) -> np.ndarray:
    """Which points ``(qx, qy)`` dominates (minimise both): no better, and not equal."""
    return (x >= qx) & (y >= qy) & ((x > qx) | (y > qy))


def _dominating(sample: pa.Table, sx: int, sy: int, terms: int) -> list[tuple[Any, Any]]:
    """Up to ``terms`` front points of the sample (raw values), each chosen to drop the
    most sampled rows not yet dropped (the rows it dominates)."""
    if sample.num_rows == 0:
        return []
    x, y = _signed(sample["x"], sx), _signed(sample["y"], sy)
    front = _front(x, y, np.arange(len(x)))
    if len(front) > 64:  # a long front: try 64 points spread along it
        front = front[np.linspace(0, len(front) - 1, 64).round().astype(np.int64)]
    alive = np.ones(len(x), dtype=bool)
    chosen: list[int] = []
    for _ in range(terms):
        drops = [int(np.count_nonzero(alive & _dominated(x, y, x[i], y[i]))) for i in front]
        j = int(np.argmax(drops))
        if drops[j] == 0:
            break
        i = int(front[j])
        chosen.append(i)
        alive &= ~_dominated(x, y, x[i], y[i])
    rx, ry = sample["x"].to_pylist(), sample["y"].to_pylist()
    return [(rx[i], ry[i]) for i in chosen]


__all__ = [
    "AGGS",
    "CUBE_MIN_ROWS",
    "CUBE_SHRINK",
    "EXPORT_ROWS",
    "KINDS",
    "MAX_CELLS",
    "PARETO_CUBE_GROUPS",
    "PARETO_CUBE_SAMPLE",
    "PARETO_CUBE_SHARE",
    "PARETO_SAMPLE_ROWS",
    "PARETO_TERMS",
    "PARETO_WINDOWS",
    "RULES",
    "SCATTER_POINTS",
    "Catalog",
    "Categorical",
    "ColumnInfo",
    "Cube",
    "DashboardError",
    "Filters",
    "Grid",
    "IdRuns",
    "Source",
    "Sql",
    "best_in_cell",
    "count_rows",
    "export_rows",
    "filter_sql",
    "grid",
    "open_source",
    "pareto",
    "quote",
    "regimes",
    "row_by_id",
    "scatter",
    "top_rows",
    "where_clause",
]
