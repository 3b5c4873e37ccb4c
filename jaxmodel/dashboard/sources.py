"""The datasets the dashboard reads: their parts, schema, sweep metadata, and the
structures of the summary cube (:class:`Cube`, :class:`IdRuns`) a catalog builds.

:func:`open_source` reads a dataset's ``_jaxmodel.json`` and its Parquet schema,
never its rows; the only files a :class:`Source` names are its part files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxmodel.errors import JaxmodelError, closest
from jaxmodel.models import Model, get_model
from jaxmodel.sink import METADATA_FILE, part_files


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
    the rows (the Pareto view, :func:`~jaxmodel.dashboard.data.pareto`).
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
