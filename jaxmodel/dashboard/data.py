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

Safety: the only paths read are the part files of the datasets named when the
:class:`Catalog` was built.  SQL text is assembled only from column names
checked against the dataset's schema (then quoted) and fixed keywords; every
value from a request (a bound, a category, a number of a filter) is a bound
parameter.  The free filter box is parsed by the project's own filter parser
(:mod:`jaxmodel.expr`) into a tree, which is translated here; its text never
reaches DuckDB.

NaN (an invalid layout's metrics) follows the filter language's numpy
semantics, not DuckDB's (where NaN is larger than every number): a comparison
with NaN is false (``!=`` true), and aggregates skip NaN, as
``jaxmodel plot heatmap`` does.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxmodel.errors import JaxmodelError, closest
from jaxmodel.expr import Node, parse
from jaxmodel.models import Model, get_model
from jaxmodel.sink import METADATA_FILE, part_files

AGGS = ("max", "min", "mean", "count")
KINDS = ("heatmap", "line", "scatter", "regimes")
MAX_CELLS = 100_000  # groups a view may return (a 316 x 316 heatmap)
SCATTER_POINTS = 4_000
EXPORT_ROWS = 1_000_000
CUBE_MIN_ROWS = 20_000_000  # datasets this big get a summary cube at start (Catalog)
CUBE_SHRINK = 16  # the cube's grid axes span at most rows / CUBE_SHRINK combinations
PARETO_SAMPLE_ROWS = 100_000  # rows the Pareto pre-pass samples (about)
PARETO_WINDOWS = 16  # runs of consecutive ids those rows come in
PARETO_TERMS = 4  # sampled front points the Pareto scan tests each row against
PARETO_CUBE_SAMPLE = 65_536  # cube groups the Pareto view's first staircase comes from
PARETO_CUBE_SHARE = 0.25  # at most this share of the rows read by position, else a scan
PARETO_CUBE_GROUPS = 1_000_000  # at most this many groups left by the sample's steps
_SQL_AGG = {"max": "max", "min": "min", "mean": "avg"}


class DashboardError(JaxmodelError):
    """A request the dashboard cannot answer: shown as one line in the page."""


def quote(name: str) -> str:
    """A column name as a SQL identifier (names are checked before this)."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class ColumnInfo:
    """One column: kind (``int``, ``float``, ``bool``, ``category``), unit, meaning."""

    name: str
    kind: str
    unit: str
    description: str
    categories: tuple[str, ...] = ()

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "float")


def _kind(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t) or pa.types.is_string(t) or pa.types.is_large_string(t):
        return "category"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    return "other"


@dataclass(frozen=True)
class Cube:
    """A dataset's summary, built once when the catalog opens a big dataset.

    One row per combination of ``dims`` present (the sweep's first grid axes, while
    their combinations stay under ``rows / CUBE_SHRINK``, and every category and
    boolean column), holding for each of ``values`` (the other numeric columns) the
    max, min, sum and count of its finite values, the group's row count and its
    lowest and highest ``config_id`` (``_id_lo``, ``_id_hi``).  A heatmap, line
    chart, regime map or row count whose axes and filters use only ``dims`` is
    answered from it exactly (a mean as sum / count, in float64), else from the
    rows; the top rows, the scatter and the Pareto front use it to read fewer rows.
    """

    table: str
    dims: tuple[str, ...]
    values: dict[str, int]  # value column -> its index k (columns _v{k}_max, ...)
    groups: int
    seconds: float
    ids: IdRuns | None = None  # where each group's rows lie in the parts, if known


@dataclass(frozen=True)
class IdRuns:
    """Where a cube's groups lie in the parts, when two things hold (checked when the
    cube is built; an engine-written grid sweep has both):

    - every part holds consecutive ``config_id`` in order, so a row's id is its
      part's ``offsets[file]`` plus its row number in the part;
    - the rows of each combination of the cube's numeric axes are one run of
      consecutive ids (the ids of every combination's groups, from the cube's
      ``_id_lo`` / ``_id_hi``, span exactly as many ids as the combination has
      rows), so a group's id span holds only rows with its axes' values.

    Then the rows of chosen groups can be read by position, with no filter on
    the rows (the Pareto view, :func:`pareto`).
    """

    offsets: dict[str, int]  # part file -> the id of its first row
    row_groups: dict[str, tuple[int, ...]]  # part file -> its row groups' row counts
    columns: dict[str, frozenset[str]]  # part file -> the columns it holds


@dataclass
class Source:
    """One dataset: its parts, schema, sweep metadata and a DuckDB view.

    Attributes:
      name: the label users pick it by (the directory name, made unique).
      path: the dataset directory.
      files: its Parquet parts (the only files ever read for it).
      hive: whether it is partitioned (``col=value`` directories).
      columns: column name -> :class:`ColumnInfo`, in schema order.
      meta: the dataset's ``_jaxmodel.json``.
      model: the cost model the sweep ran.
      base: every input's fixed value in the sweep (the spec's ``[base]``).
      varied: the inputs the sweep varied that are columns, in spec order.
      levels: for varied inputs with a known set of values (grid axes,
        ``choice`` draws), those values ascending; categories' names.
      ranges: for every varied numeric input, ``(low, high)``.
      view: the DuckDB view name.
    """

    name: str
    path: Path
    files: list[str]
    hive: bool
    columns: dict[str, ColumnInfo]
    meta: dict[str, Any]
    model: Model
    base: dict[str, float]
    varied: tuple[str, ...]
    levels: dict[str, tuple] = field(default_factory=dict)
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    view: str = ""
    rows: int | None = None  # rows in the parts, from their footers (row_count)
    cube: Cube | None = None  # the summary built at start, if any (Catalog)

    def row_count(self) -> int:
        """Rows in the dataset's parts, read once from the Parquet footers."""
        if self.rows is None:
            self.rows = sum(pq.read_metadata(f).num_rows for f in self.files)
        return self.rows

    @property
    def spec_text(self) -> str:
        return str(self.meta.get("spec", ""))

    def column(self, name: str, what: str) -> ColumnInfo:
        """The column ``name``, or a one-line error naming ``what`` and the closest name."""
        if not isinstance(name, str) or name not in self.columns:
            raise DashboardError(f"{what}: no column {name!r} in dataset {self.name!r}"
                                 f"{closest(str(name), self.columns)}")
        return self.columns[name]

    def numeric_columns(self) -> list[str]:
        return [c for c, i in self.columns.items() if i.numeric]

    def axis_columns(self) -> list[str]:
        """Columns with a small known set of values: heatmap / line / regime axes."""
        out = [c for c in self.varied if c in self.levels]
        out += [c for c, i in self.columns.items() if i.kind in ("category", "bool")]
        return out


def _read_meta(path: Path) -> dict[str, Any]:
    meta_path = path / METADATA_FILE
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        meta = None
    if not isinstance(meta, dict) or "spec" not in meta:
        raise DashboardError(f"dataset {str(path)!r}: not a jaxmodel dataset (no readable "
                             f"{METADATA_FILE}; write one with jaxmodel sweep)")
    return meta


def open_source(path: str | Path, name: str) -> Source:
    """Read a dataset's metadata and schema (not its rows).

    Raises:
      DashboardError: missing, not a directory, not a jaxmodel dataset, no parts.
    """
    from jaxmodel.spec import parse_spec

    path = Path(path)
    if not path.exists():
        raise DashboardError(f"dataset {str(path)!r}: no such directory")
    if not path.is_dir():
        raise DashboardError(f"dataset {str(path)!r}: not a directory (a dataset is the "
                             "directory jaxmodel sweep wrote)")
    meta = _read_meta(path)
    files = [str(p.resolve()) for p in part_files(path)]
    if not files:
        raise DashboardError(f"dataset {str(path)!r}: no Parquet parts (an unfinished sweep? "
                             "jaxmodel sweep SPEC --resume)")
    try:
        spec = parse_spec(meta["spec"], meta.get("spec_name", "sweep"))
    except JaxmodelError as e:
        raise DashboardError(f"dataset {str(path)!r}: its spec does not parse ({e})") from None
    model = get_model(meta.get("model", spec.model.name))
    hive = any(Path(f).parent != path.resolve() for f in files)
    try:
        schema = pq.read_schema(files[0])
    except (OSError, pa.ArrowException) as e:
        raise DashboardError(f"dataset {str(path)!r}: {str(e).splitlines()[0]}") from None
    columns: dict[str, ColumnInfo] = {}
    for f in schema:
        md = {k.decode(): v.decode() for k, v in (f.metadata or {}).items()}
        cats = tuple(md["categories"].split(",")) if md.get("categories") else ()
        kind = _kind(f.type)
        if kind != "other":
            columns[f.name] = ColumnInfo(f.name, kind, md.get("unit", ""),
                                         md.get("description", ""), cats)
    for part in spec.output.partition_by if hive else ():
        if part not in columns:  # partition columns live in the directory names
            fld = model.input_field(part) if part in model.input_names else None
            columns[part] = ColumnInfo(part, "int" if fld is None or fld.integer else "float",
                                       fld.unit if fld else "", fld.doc if fld else "")
    varied = tuple(n for n in spec.varied if n in columns)
    levels: dict[str, tuple] = {}
    ranges: dict[str, tuple[float, float]] = {}
    for d in spec.dims:
        for n, values in zip(d.names, _dim_values(d), strict=True):
            if n in columns:
                vals = tuple(sorted({float(v) for v in values}))
                levels[n] = vals
                ranges[n] = (vals[0], vals[-1])
    if spec.sample is not None:
        for d in spec.sample.distributions:
            if d.name not in columns:
                continue
            if d.values is not None:
                vals = tuple(sorted({float(v) for v in d.values}))
                levels[d.name] = vals
                ranges[d.name] = (vals[0], vals[-1])
            else:
                ranges[d.name] = (float(d.low), float(d.high))
    for c, info in columns.items():
        if info.kind == "category" and info.categories:
            levels[c] = info.categories
        elif info.kind == "bool":
            levels[c] = (False, True)
    return Source(name, path, files, hive, columns, meta, model, dict(spec.base), varied,
                  levels, ranges)


def _dim_values(d) -> list[np.ndarray]:
    """A grid dimension's values, one array per input (a zip group has several)."""
    return [np.asarray(v) for v in d.values]


# ------------------------------------------------------------------ filters


@dataclass
class Sql:
    """A SQL fragment and its bound parameters."""

    text: str
    params: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Filters:
    """What the page's filter widgets ask for.

    Attributes:
      ranges: numeric column -> ``(low, high)``, inclusive.
      choices: category or boolean column (or a numeric one with few values)
        -> the values kept.
      where: the free filter box (the sweep filter language), or ``""``.
    """

    ranges: Mapping[str, Sequence[float]] = field(default_factory=dict)
    choices: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    where: str = ""


def where_clause(src: Source, filters: Filters, extra: Sequence[Sql] = ()) -> Sql:
    """``WHERE ...`` for the filters (or ``""``), every value a parameter.

    Raises:
      DashboardError: an unknown column, a bad range or choice, a bad filter text.
    """
    parts: list[Sql] = []
    for name, bounds in filters.ranges.items():
        info = src.column(name, "range filter")
        if not info.numeric:
            raise DashboardError(f"range filter: column {name!r} is not numeric")
        lo, hi = _bounds(name, bounds)
        parts.append(Sql(f"{quote(name)} BETWEEN ? AND ?", [lo, hi]))
    for name, values in filters.choices.items():
        info = src.column(name, "choice filter")
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        if not values:
            parts.append(Sql("FALSE"))
            continue
        checked = [_choice(info, v) for v in values]
        marks = ", ".join("?" for _ in checked)
        parts.append(Sql(f"{quote(name)} IN ({marks})", checked))
    if filters.where and filters.where.strip():
        parts.append(filter_sql(src, filters.where))
    parts.extend(extra)
    if not parts:
        return Sql("")
    return Sql("WHERE " + " AND ".join(f"({p.text})" for p in parts),
               [v for p in parts for v in p.params])


def _bounds(name: str, bounds: Sequence[Any]) -> tuple[float, float]:
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise DashboardError(f"range filter {name}: got {bounds!r}; allowed: two numbers "
                             "[low, high]") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise DashboardError(f"range filter {name}: got {[lo, hi]!r}; allowed: finite "
                             "numbers with low <= high")
    return lo, hi


def _choice(info: ColumnInfo, value: Any) -> Any:
    if info.kind == "category":
        if not isinstance(value, str) or (info.categories and value not in info.categories):
            allowed = ", ".join(info.categories) or "a name"
            raise DashboardError(f"choice filter {info.name}: got {value!r}; allowed: {allowed}")
        return value
    if info.kind == "bool":
        if not isinstance(value, bool):
            raise DashboardError(f"choice filter {info.name}: got {value!r}; allowed: "
                                 "true, false")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value):
        raise DashboardError(f"choice filter {info.name}: got {value!r}; allowed: numbers")
    return float(value)


def filter_sql(src: Source, text: str) -> Sql:
    """The free filter box as SQL: parsed by :func:`jaxmodel.expr.parse` against the
    dataset's columns, its kinds checked, then translated node by node."""
    if not isinstance(text, str):
        raise DashboardError(f"filter: expected text, got {text!r}")
    try:
        expr = parse(text, set(src.columns))
        booleans = {c for c, i in src.columns.items() if i.kind == "bool"}
        cats = {c: i.categories for c, i in src.columns.items() if i.kind == "category"}
        expr.check_condition(booleans, cats)
        for a, b in _category_pairs(expr.root, cats):
            if b.args[0] not in cats[a.args[0]] and cats[a.args[0]]:
                raise DashboardError(f"filter: {b.args[0]!r} is not a value of {a.args[0]} "
                                     f"(one of {', '.join(cats[a.args[0]])})")
    except JaxmodelError as e:
        raise DashboardError(str(e)) from None
    return _sql(src, expr.root)


def _category_pairs(node: Node, cats):
    if node.op in ("==", "!="):
        a, b = node.args
        if a.op == "str":
            a, b = b, a
        if a.op == "col" and a.args[0] in cats and b.op == "str":
            yield a, b
    for a in node.args:
        if isinstance(a, Node):
            yield from _category_pairs(a, cats)


_CMP = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "=", "!=": "<>"}
_ARITH = {"+": "+", "-": "-", "*": "*", "/": "/"}
_FUNC = {"abs": "abs", "min": "least", "max": "greatest", "log": "ln", "sqrt": "sqrt"}


def _may_nan(src: Source, node: Node) -> bool:
    """Whether a numeric node can be NaN (a float column, or a function of one)."""
    if node.op == "col":
        return src.columns[node.args[0]].kind == "float"
    if node.op in ("num", "str", "bool"):
        return False
    if node.op in ("/", "log", "sqrt"):
        return True
    return any(_may_nan(src, a) for a in node.args if isinstance(a, Node))


def _sql(src: Source, node: Node) -> Sql:
    op = node.op
    if op == "num":
        return Sql("?::DOUBLE", [float(node.args[0])])
    if op == "str":
        return Sql("?", [str(node.args[0])])
    if op == "bool":
        return Sql("TRUE" if node.args[0] else "FALSE")
    if op == "col":
        src.column(node.args[0], "filter")
        return Sql(quote(node.args[0]))
    args = [_sql(src, a) for a in node.args]
    params = [v for a in args for v in a.params]
    if op in ("and", "or"):
        return Sql(f"({args[0].text} {op.upper()} {args[1].text})", params)
    if op == "not":
        return Sql(f"(NOT {args[0].text})", params)
    if op in _CMP:
        text = f"({args[0].text} {_CMP[op]} {args[1].text})"
        nan = [a for a, n in zip(args, node.args, strict=True) if _may_nan(src, n)]
        if nan:
            # numpy: any comparison with NaN is false, except != (true); in DuckDB
            # NaN is the largest number, so spell it out.
            guard = " OR ".join(f"isnan({a.text})" for a in nan)
            guard_params = [v for a in nan for v in a.params]
            if op == "!=":
                return Sql(f"(({guard}) OR coalesce({text}, TRUE))", guard_params + params)
            return Sql(f"(NOT ({guard}) AND coalesce({text}, FALSE))", guard_params + params)
        return Sql(f"coalesce({text}, {'TRUE' if op == '!=' else 'FALSE'})", params)
    if op in _ARITH:
        a, b = args
        if op == "/":  # numpy: x / 0 is inf or NaN; DuckDB gives NULL
            return Sql(f"({a.text}::DOUBLE / {b.text}::DOUBLE)", params)
        return Sql(f"({a.text} {_ARITH[op]} {b.text})", params)
    if op == "neg":
        return Sql(f"(-{args[0].text})", params)
    if op in ("log", "sqrt"):  # numpy: NaN for negatives, -inf for log(0)
        a = args[0]
        fn = _FUNC[op]
        zero = "'-inf'::DOUBLE" if op == "log" else "0::DOUBLE"
        return Sql(f"(CASE WHEN {a.text} < 0 THEN 'nan'::DOUBLE WHEN {a.text} = 0 THEN {zero} "
                   f"ELSE {fn}({a.text}) END)", a.params * 3)
    if op in _FUNC:
        return Sql(f"{_FUNC[op]}({', '.join(a.text for a in args)})", params)
    raise DashboardError(f"filter: unsupported operation {op!r}")


# ------------------------------------------------------------------ catalog


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


# -------------------------------------------------------------------- views


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
