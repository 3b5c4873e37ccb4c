"""The catalog of datasets, each a DuckDB view over its parts, and the summary cube.

A dataset of :data:`CUBE_MIN_ROWS` rows or more gets a
:class:`~jaxmodel.dashboard.sources.Cube` when the catalog opens it: one
aggregation over its rows, grouped by its grid axes and categories, that the
group-by views whose columns it holds read instead of the rows
(:func:`_cube_for`), and, where the rows of each group lie in consecutive ids
(:class:`~jaxmodel.dashboard.sources.IdRuns`), a map from groups to positions
in the parts.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from jaxmodel.dashboard.sources import (
    ColumnInfo,
    Cube,
    DashboardError,
    IdRuns,
    Source,
    open_source,
    quote,
)
from jaxmodel.dashboard.sql import Filters
from jaxmodel.expr import parse

CUBE_MIN_ROWS = 20_000_000  # datasets this big get a summary cube at start (Catalog)
CUBE_SHRINK = 16  # the cube's grid axes span at most rows / CUBE_SHRINK combinations


class Catalog:
    """The datasets named on the command line, each a DuckDB view over its parts.

    Queries run on a cursor per call (DuckDB cursors are per thread), so the
    web server may answer requests in several threads.
    """

    def __init__(self, paths: Sequence[str | Path], *, threads: int | None = None,
                 cube_min_rows: int | None = CUBE_MIN_ROWS, cube_shrink: int = CUBE_SHRINK,
                 on_cube=None):
        """Open ``paths``; datasets of at least ``cube_min_rows`` rows (``None``: none)
        get a :class:`Cube` (one scan at start: 40-70 s for 10^8 rows here);
        ``on_cube(name, rows)`` is called before each is built."""
        import duckdb

        if not paths:
            raise DashboardError("datasets: give at least one dataset directory")
        self.sources: dict[str, Source] = {}
        for i, p in enumerate(paths):
            name = Path(p).resolve().name or f"dataset{i}"
            while name in self.sources:
                name = f"{name}-{i}"
            src = open_source(p, name)
            src.view = f"ds{i}"
            self.sources[name] = src
        self._db = duckdb.connect(":memory:")
        self.threads = int(threads) if threads else (os.cpu_count() or 1)
        if threads:
            self._db.execute(f"SET threads = {int(threads)}")
        self._lock = threading.Lock()
        for src in self.sources.values():
            files = ", ".join("'" + f.replace("'", "''") + "'" for f in src.files)
            hive = "true" if src.hive else "false"
            # can_have_nan: Parquet's float statistics leave NaN out (invalid layouts
            # are NaN), so without it DuckDB prunes, or folds away, NaN rows.
            self._db.execute(f"CREATE VIEW {src.view} AS SELECT * FROM read_parquet([{files}], "
                             f"hive_partitioning = {hive}, union_by_name = true, "
                             "can_have_nan = true)")
            src.columns = _with_duckdb_types(self._db, src)
        for i, src in enumerate(self.sources.values()):
            if cube_min_rows is not None and src.row_count() >= cube_min_rows:
                if on_cube is not None:
                    on_cube(src.name, src.row_count())
                src.cube = _build_cube(self._db, src, f"cube{i}", cube_shrink)

    @property
    def names(self) -> list[str]:
        return list(self.sources)

    def source(self, name: str) -> Source:
        if name not in self.sources:
            raise DashboardError(f"dataset: got {name!r}; allowed: {', '.join(self.sources)}")
        return self.sources[name]

    def query(self, sql: str, params: Sequence[Any] = ()) -> pa.Table:
        """Run one query on a fresh cursor; DuckDB errors become one line."""
        import duckdb

        with self._lock:
            cur = self._db.cursor()
        try:
            rel = cur.sql(sql, params=list(params))
            # DuckDB 1.4 added to_arrow_table; 2.0 dropped fetch_arrow_table.
            fetch = getattr(rel, "to_arrow_table", None) or rel.fetch_arrow_table
            return fetch()
        except duckdb.Error as e:
            raise DashboardError("query: " + str(e).splitlines()[0]) from None
        finally:
            cur.close()

    def close(self) -> None:
        self._db.close()


def _with_duckdb_types(db, src: Source) -> dict[str, ColumnInfo]:
    """Keep only columns DuckDB sees, in its order (partition columns included)."""
    rows = db.execute(f"DESCRIBE {src.view}").fetchall()
    out: dict[str, ColumnInfo] = {}
    for name, dtype, *_ in rows:
        if name in src.columns:
            out[name] = src.columns[name]
        elif src.hive:
            kind = "float" if dtype in ("DOUBLE", "FLOAT") else "int" if "INT" in dtype else (
                "category")
            out[name] = ColumnInfo(name, kind, "", "partition column")
    return out


def _build_cube(db, src: Source, table: str, shrink: int) -> Cube | None:
    """The dataset's :class:`Cube`, or ``None`` when it would not be much smaller."""
    import time

    rows = src.row_count()
    dims: list[str] = []
    combos = 1
    for c in src.varied:  # the spec's axes, in its order
        if c not in src.levels or not src.columns[c].numeric:
            continue
        if combos * len(src.levels[c]) > rows / max(1, shrink):
            break
        dims.append(c)
        combos *= len(src.levels[c])
    if not dims:
        return None
    dims += [c for c, i in src.columns.items() if i.kind in ("category", "bool")]
    values = {c: k for k, c in enumerate(c for c, i in src.columns.items()
                                         if i.numeric and c not in dims and c != "config_id")}
    aggs = []
    for c, k in values.items():
        ok = f"NOT isnan({quote(c)})" if src.columns[c].kind == "float" else \
            f"{quote(c)} IS NOT NULL"
        aggs += [f"max({quote(c)}) FILTER (WHERE {ok}) AS _v{k}_max",
                 f"min({quote(c)}) FILTER (WHERE {ok}) AS _v{k}_min",
                 f"sum({quote(c)}::DOUBLE) FILTER (WHERE {ok}) AS _v{k}_sum",
                 f"count(*) FILTER (WHERE {ok}) AS _v{k}_n"]
    if "config_id" in src.columns:
        aggs += ["min(config_id) AS _id_lo", "max(config_id) AS _id_hi",
                 "min(hash(config_id)) AS _id_hash"]
    t0 = time.perf_counter()
    db.execute(f"CREATE TABLE {table} AS SELECT {', '.join(quote(c) for c in dims)}, "
               f"{', '.join(aggs + ['count(*) AS _rows'])} FROM {src.view} GROUP BY ALL")
    groups = int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    if groups * 2 > rows:  # the categories split the groups: not worth its memory
        db.execute(f"DROP TABLE {table}")
        return None
    ids = _id_runs(db, src, table, [d for d in dims if src.columns[d].numeric])
    return Cube(table, tuple(dims), values, groups, time.perf_counter() - t0, ids)


def _id_runs(db, src: Source, table: str, axes: Sequence[str]) -> IdRuns | None:
    """The cube's :class:`IdRuns`, or ``None`` where the parts are not laid out so
    (a filtered or sampled sweep, a reduced dataset, parts not in id order).
    One pass over the ids (10^8 rows: about 0.7 s)."""
    if "config_id" not in src.columns or not axes:
        return None
    runs = db.execute(f"SELECT count(*) FROM (SELECT min(_id_lo) AS a, max(_id_hi) AS b, "
                      f"sum(_rows) AS n FROM {table} GROUP BY {', '.join(map(quote, axes))}) "
                      "WHERE b - a + 1 <> n").fetchone()[0]
    if runs:
        return None
    files = ", ".join("'" + f.replace("'", "''") + "'" for f in src.files)
    spans = db.execute("SELECT filename, min(config_id - file_row_number), max(config_id - "
                       f"file_row_number), count(*) FROM read_parquet([{files}], filename = "
                       "true, file_row_number = true, union_by_name = true) GROUP BY filename"
                       ).fetchall()
    offsets = {f: int(lo) for f, lo, hi, _ in spans if lo == hi}
    if len(offsets) != len(src.files) or set(offsets) != set(src.files):
        return None
    row_groups, columns = {}, {}
    for f in src.files:
        md = pq.read_metadata(f)
        row_groups[f] = tuple(md.row_group(i).num_rows for i in range(md.num_row_groups))
        columns[f] = frozenset(md.schema.names)
    return IdRuns(offsets, row_groups, columns)


def _cube_for(src: Source, filters: Filters, columns: Sequence[str | None],
              value: str | None) -> Cube | None:
    """The source's cube if it answers a view of ``columns`` (and ``value``) under
    ``filters``, else ``None`` (the view then scans the rows)."""
    cube = src.cube
    if cube is None or (value is not None and value not in cube.values):
        return None
    used = {c for c in columns if c} | _filter_columns(src, filters)
    return cube if used <= set(cube.dims) else None


def _filter_columns(src: Source, filters: Filters) -> set[str]:
    used = set(filters.ranges) | set(filters.choices)
    if filters.where and filters.where.strip():
        used |= parse(filters.where, set(src.columns)).columns()
    return used
