"""Pictures: profile curves, step-time breakdowns, sweep heatmaps and regime maps, tornado charts.

Each ``plot_*`` function computes what it draws with a ``*_data`` function
(usable without matplotlib), draws it on a fresh ``Figure`` rendered by the
Agg canvas (headless; no global backend is switched, nothing happens on
import), writes PNG or SVG by the path's extension, and returns the data.

Sizes are in pixels at ``DPI`` dots per inch (an SVG gets the same size in
inches).  Datasets are read with pyarrow dataset scanning: only the columns
needed, the ``where`` filter pushed down, batch by batch, with partial
aggregates merged, so memory is bounded by the grid, not the dataset.

Choices:

* Heatmaps aggregate the finite values of a cell (NaN marks an invalid layout;
  it is skipped).  A cell with no finite value is left blank (grey).
* Regime maps show, per cell, by default the category (``bottleneck``) of the
  row with the highest ``mfu_percent``: what limits the best layout there.
  ``rule="most"`` shows the most frequent category among valid rows instead.
  Ties go to the earlier category in the column's order; a cell with no valid
  row shows ``invalid``.
* An axis is drawn on a log scale when its values are positive, span a factor
  of 8 or more and are closer to evenly spaced in log than in linear terms; a
  few (<= 12) irregular values, or names, are drawn as equal cells labelled
  with the values; anything else on a linear scale.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jaxmodel.errors import JaxmodelError, SpecError, closest
from jaxmodel.models import DEFAULT_MODEL, Model, get_model
from jaxmodel.models.layout import BANDWIDTH, GPUS, LABELS, TITLE
from jaxmodel.models.terms import SHARED_TERMS

DPI = 100
DEFAULT_SIZE = (960, 600)
FORMATS = (".png", ".svg")
INSTALL_HINT = "install the plot extra: pip install 'jaxmodel[plot]'"
AGGS = ("max", "mean", "min")
RULES = ("best", "most")


def shown_terms(model: Model) -> tuple[tuple[str, str], ...]:
    """``(label, output)`` of the model's step-time terms, in stacking order."""
    return tuple((t.label, t.output) for t in model.terms)


# The default model's terms (what a breakdown of the default model stacks).
TERMS: tuple[tuple[str, str], ...] = shown_terms(get_model(DEFAULT_MODEL))
_CATEGORY_COLORS = {
    # bottlenecks: the shared terms' colours (a model's own terms use theirs)
    **{t.name: t.colour for t in SHARED_TERMS},
    # regimes
    "compute-bound": "#4C72B0", "overhead-limited": "#64B5CD",
    "communication-bound": "#DD8452", "bubble-bound": "#C44E52",
    "invalid": "#D9D9D9",
}


class PlotError(JaxmodelError):
    """A plotting request that cannot be met (one line, exit code 2)."""


# --------------------------------------------------------------------- output


def check_output(path: str | Path) -> Path:
    """The output path, if its extension is ``.png`` or ``.svg``.

    Raises:
      PlotError: any other extension.
    """
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise PlotError(f"output {str(path)!r}: the file name must end in .png or .svg "
                        "(the format is taken from it)")
    return path


def check_size(width: int, height: int) -> tuple[int, int]:
    for name, v in (("width", width), ("height", height)):
        if not 100 <= v <= 10_000:
            raise PlotError(f"{name}: got {v}; allowed: 100 to 10000 pixels")
    return width, height


def require_matplotlib() -> None:
    """Raises ``PlotError`` with the install hint when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError(INSTALL_HINT) from None


def _figure(size: tuple[int, int]):
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width, height = check_size(*size)
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig, output: Path) -> None:
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(output, dpi=DPI, format=output.suffix.lower()[1:])
    except OSError as e:
        raise PlotError(f"output {str(output)!r}: cannot write ({e.strerror})") from None


def _unit(text: str) -> str:
    """A unit without its parenthetical note (``GB/s (1 GB = 1e9 bytes)`` -> ``GB/s``)."""
    return text.split(" (")[0].strip()


def _label(name: str, unit: str) -> str:
    unit = _unit(unit)
    return f"{name} ({unit})" if unit else name


def _fmt(v: float) -> str:
    """A tick or bar label: whole numbers with separators, else 3 significant digits."""
    v = float(v)
    if not math.isfinite(v):
        return "n/a"
    if v.is_integer() and abs(v) < 1e7:
        return f"{int(v):,}"
    if 1e3 <= abs(v) < 1e7:
        return f"{v:,.0f}"
    return f"{v:.3g}"


# -------------------------------------------------------------------- profile


@dataclass(frozen=True)
class ProfileData:
    """The two curves and the configuration's own point (MFU in %)."""

    gpus: np.ndarray
    mfu_vs_gpus: np.ndarray
    bandwidths_gb_s: np.ndarray
    mfu_vs_bandwidth: np.ndarray
    own_gpus: float
    own_bandwidth_gb_s: float
    own_mfu: float


def profile_data(model: Model, inputs: Mapping[str, float], *, x64: bool = False) -> ProfileData:
    """``jaxmodel.profile.profile_curves`` plus the configuration's own MFU."""
    from jaxmodel.profile import evaluate_with_profile

    point, curves = evaluate_with_profile(model, inputs, x64=x64)
    own = float(point.mfu_percent)
    gpus, eff_g = curves["eff_vs_gpus"]
    bws, eff_b = curves["eff_vs_bw"]
    return ProfileData(np.asarray(gpus), np.asarray(eff_g), np.asarray(bws), np.asarray(eff_b),
                       float(curves["at"][GPUS]), float(curves["at"][BANDWIDTH]), own)


def plot_profile(model: Model, inputs: Mapping[str, float], output: str | Path, *,
                 size: tuple[int, int] = DEFAULT_SIZE, x64: bool = False) -> ProfileData:
    """MFU against GPU count and against link bandwidth, the configuration marked."""
    output = check_output(output)
    fig = _figure(size)
    data = profile_data(model, inputs, x64=x64)
    ax_g, ax_b = fig.subplots(1, 2, sharey=True)
    mark = dict(marker="*", markersize=14, color="#C44E52", linestyle="none", zorder=3)
    ax_g.plot(data.gpus, data.mfu_vs_gpus, marker="o", markersize=3, color="#4C72B0",
              label="MFU")
    ax_g.plot([data.own_gpus], [data.own_mfu], label=f"this configuration "
              f"({_fmt(data.own_gpus)} GPUs, {data.own_mfu:.1f}%)", **mark)
    ax_g.set_xscale("log", base=2)
    ax_g.xaxis.set_major_formatter(_formatter())
    ax_g.set_xlabel(_label("GPUs", model.input_field(GPUS).unit))
    ax_g.set_ylabel("MFU (%)")
    ax_g.set_title(f"MFU vs GPU count ({_fmt(data.own_bandwidth_gb_s)} GB/s links)")
    ax_b.plot(data.bandwidths_gb_s, data.mfu_vs_bandwidth, marker="o", markersize=3,
              color="#4C72B0", label="MFU")
    ax_b.plot([data.own_bandwidth_gb_s], [data.own_mfu], label=f"this configuration "
              f"({_fmt(data.own_bandwidth_gb_s)} GB/s, {data.own_mfu:.1f}%)", **mark)
    ax_b.set_xlabel(_label("link bandwidth", model.input_field(BANDWIDTH).unit))
    ax_b.set_title(f"MFU vs link bandwidth ({_fmt(data.own_gpus)} GPUs)")
    for ax in (ax_g, ax_b):
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
    ax_g.set_ylim(bottom=0)
    fig.suptitle(f"Profile: {_layout_text(inputs)} ({model.name} model)")
    _save(fig, output)
    return data


def _layout_text(inputs: Mapping[str, float]) -> str:
    parts = [f"{k}={_fmt(inputs[n])}" + ("B" if k == "P" else "") for k, n in TITLE if n in inputs]
    return " ".join(parts)


def _formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: _fmt(v))


# ------------------------------------------------------------------ breakdown


@dataclass(frozen=True)
class BreakdownData:
    """Step-time terms (ms) of each bar by output, in the model's ``terms``
    order; NaN for an invalid layout."""

    labels: tuple[str, ...]
    terms: dict[str, np.ndarray]
    step_time_ms: np.ndarray
    mfu_percent: np.ndarray
    valid: np.ndarray
    configs: tuple[dict[str, float], ...]


def breakdown_data(model: Model, configs: Sequence[Mapping[str, float]],
                   labels: Sequence[str] | None = None, *, x64: bool = False) -> BreakdownData:
    """Evaluate each configuration (one batch) and keep its step-time terms.

    A few configurations for a person: on the host where the model runs there
    (``jaxmodel.profile.answer``, no compile), as ``jaxmodel eval`` answers.
    """
    from jaxmodel.profile import answer

    if not configs:
        raise PlotError("breakdown: no configuration to show")
    batch = {n: np.array([float(c[n]) for c in configs]) for n in model.input_names}
    out = answer(model, x64=x64, **batch)
    terms = {col: np.asarray(getattr(out, col), dtype=np.float64)
             for _, col in shown_terms(model)}
    if labels is None:
        labels = [_layout_text(c) for c in configs]
    return BreakdownData(tuple(labels), terms,
                         np.asarray(out.step_time_ms, dtype=np.float64),
                         np.asarray(out.mfu_percent, dtype=np.float64),
                         np.asarray(getattr(out, model.validity), dtype=bool),
                         tuple(dict(c) for c in configs))


def compare_configs(base: Mapping[str, float], compare: Mapping[str, Sequence[float]]
                    ) -> tuple[list[dict[str, float]], list[str]]:
    """Every combination of the compared inputs' values (first name slowest), with labels."""
    import itertools

    names = list(compare)
    configs, labels = [], []
    for combo in itertools.product(*(compare[n] for n in names)):
        c = dict(base)
        c.update(zip(names, (float(v) for v in combo), strict=True))
        configs.append(c)
        labels.append(" ".join(f"{_short(n)}={_fmt(v)}" for n, v in zip(names, combo,
                                                                       strict=True)))
    return configs, labels


def _short(name: str) -> str:
    return LABELS.get(name, name)


def layout_configs(model: Model, base: Mapping[str, float], *, x64: bool = False,
                   top: int = 16) -> tuple[list[dict[str, float]], list[str]]:
    """The ``top`` fastest valid layouts of ``base``'s model on its GPUs, same global batch.

    Layouts are the model's layout space (``Model.layout.candidates``: for the
    3D-parallel models t | hidden, p | layers, every GPU used, d b m = the
    configuration's global batch; the model's own axes stay at ``base``'s
    values), ranked by step time (then enumeration order): a layout search,
    run by the same engine as ``jaxmodel best``.
    """
    from jaxmodel.reduce import CONFIG_ID
    from jaxmodel.searching import search

    space = model.layout
    if space is None:
        raise PlotError(f"breakdown --layouts: model {model.name!r} declares no layout space")
    batch_size = space.global_batch(base)
    own = {name: int(base[name]) for name in space.extra_axes(base)}
    try:
        found = search(model, base, global_batch=batch_size, by="step_time_ms",
                       maximize=False, top=top, pinned=own, x64=x64)
    except SpecError as e:
        raise PlotError(f"breakdown --layouts: {e}") from None
    rows = found.top
    configs, labels = [], []
    for i in range(len(rows[CONFIG_ID])):
        c = dict(base)
        c.update({a: float(rows[a][i]) for a in space.axes})
        configs.append(c)
        labels.append(" ".join(f"{_short(a)}{int(rows[a][i])}" for a in space.axes))
    return configs, labels


def plot_breakdown(model: Model, configs: Sequence[Mapping[str, float]], output: str | Path, *,
                   labels: Sequence[str] | None = None, title: str | None = None,
                   size: tuple[int, int] = DEFAULT_SIZE, x64: bool = False) -> BreakdownData:
    """A stacked bar of the model's step-time terms per configuration."""
    output = check_output(output)
    fig = _figure(size)
    data = breakdown_data(model, configs, labels, x64=x64)
    ax = fig.subplots()
    x = np.arange(len(data.labels))
    bottom = np.zeros(len(x))
    # A term no configuration uses (a dense model's expert all-to-all) stays out
    # of the stack and the legend.
    used = {t.output for c in data.configs for t in model.used_terms(c)}
    for term in (t for t in model.terms if t.output in used):
        v = np.nan_to_num(data.terms[term.output], nan=0.0)
        ax.bar(x, v, bottom=bottom, color=term.colour, label=term.label, width=0.7)
        bottom += v
    top = float(np.nanmax(data.step_time_ms)) if data.valid.any() else 1.0
    for i in range(len(x)):
        text = (f"{data.mfu_percent[i]:.0f}% MFU" if data.valid[i] else "invalid")
        ax.text(x[i], bottom[i] + 0.01 * top, text, ha="center", va="bottom", fontsize="small")
    ax.set_xticks(x, data.labels, rotation=30 if len(x) > 4 else 0,
                  ha="right" if len(x) > 4 else "center")
    ax.set_ylabel("step time (ms)")
    ax.set_ylim(0, top * 1.12)
    ax.yaxis.set_major_formatter(_formatter())
    ax.grid(True, axis="y", alpha=0.3)
    handles, names = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], names[::-1], title="step-time term", loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize="small", borderaxespad=0.0)
    ax.set_title(title or f"Step-time breakdown ({model.name} model)")
    _save(fig, output)
    return data


# -------------------------------------------------------------------- datasets


def open_dataset(path: str | Path):
    """A sweep's Parquet dataset (hive partitions recognised).

    Raises:
      PlotError: no such directory or no Parquet part in it.
    """
    import pyarrow.dataset as ds

    path = Path(path)
    if not path.exists():
        raise PlotError(f"dataset {str(path)!r}: no such file or directory")
    try:
        dataset = ds.dataset(path, format="parquet", partitioning="hive")
    except Exception as e:  # pyarrow's errors name the bad file
        raise PlotError(f"dataset {str(path)!r}: {str(e).splitlines()[0]}") from None
    if not dataset.files:
        raise PlotError(f"dataset {str(path)!r}: no Parquet files")
    return dataset


def check_column(dataset, name: str, what: str) -> None:
    names = dataset.schema.names
    if name not in names:
        raise PlotError(f"{what}: no column {name!r} in the dataset{closest(name, names)}")


def _filter(dataset, where: str | None):
    if not where:
        return None
    import pyarrow as pa

    from jaxmodel.expr import parse

    expr = parse(where, set(dataset.schema.names))
    schema = dataset.schema
    booleans = {f.name for f in schema if pa.types.is_boolean(f.type)}
    categories = {f.name: () for f in schema
                  if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)}
    expr.check_condition(booleans, categories)
    return expr.to_arrow(schema)


def column_unit(dataset, name: str) -> str:
    meta = dataset.schema.field(name).metadata or {}
    return _unit(meta.get(b"unit", b"").decode())


@dataclass(frozen=True)
class GridData:
    """Aggregated cells: ``cells[i, j]`` for ``y_values[i]`` and ``x_values[j]``.

    ``counts`` is the number of finite values aggregated per cell (0: blank, NaN).
    """

    x: str
    y: str
    value: str
    agg: str
    x_values: np.ndarray
    y_values: np.ndarray
    cells: np.ndarray
    counts: np.ndarray
    rows_read: int


def heatmap_data(dataset, x: str, y: str, value: str, agg: str = "max",
                 where: str | None = None, *, batch_size: int = 1 << 17) -> GridData:
    """``agg`` of ``value`` over every row with each ``(x, y)``, reading batch by batch.

    Only ``x``, ``y`` and ``value`` (plus the filter's columns) are read; the
    filter is pushed down into the scan.  Each batch is grouped by ``(x, y)``
    and merged into a running partial aggregate (max / min / sum and count).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(dataset, (str, Path)):
        dataset = open_dataset(dataset)
    if agg not in AGGS:
        raise PlotError(f"agg: got {agg!r}; allowed: {', '.join(AGGS)}")
    for name, what in ((x, "x"), (y, "y"), (value, "value")):
        check_column(dataset, name, what)
    if x == y:
        raise PlotError(f"x and y are both {x!r}: choose two different columns")
    vtype = dataset.schema.field(value).type
    if not (pa.types.is_integer(vtype) or pa.types.is_floating(vtype)):
        raise PlotError(f"value: column {value!r} is not numeric ({vtype})")
    merge = {"max": "max", "min": "min", "mean": "sum"}[agg]
    scanner = dataset.scanner(columns=[x, y, value], filter=_filter(dataset, where),
                              batch_size=batch_size)
    partial = None
    rows = 0
    for batch in scanner.to_batches():
        if not batch.num_rows:
            continue
        rows += batch.num_rows
        v = pc.cast(batch.column(value), pa.float64())
        v = pc.if_else(pc.is_nan(v), pa.scalar(None, pa.float64()), v)
        t = pa.table({"x": _decoded(batch.column(x)), "y": _decoded(batch.column(y)), "v": v})
        part = t.group_by(["x", "y"]).aggregate([("v", merge), ("v", "count")])
        part = part.rename_columns(["x", "y", "a", "n"])
        if partial is not None:
            part = pa.concat_tables([partial, part]).group_by(["x", "y"]).aggregate(
                [("a", merge), ("n", "sum")]).rename_columns(["x", "y", "a", "n"])
        partial = part
    if partial is None:
        raise PlotError(f"no rows to plot{' where ' + where if where else ''}")
    xs, ys, xi, yi = _grid_index(partial, dataset, x, y)
    cells = np.full((len(ys), len(xs)), np.nan)
    counts = np.zeros((len(ys), len(xs)), dtype=np.int64)
    a = partial["a"].to_numpy(zero_copy_only=False).astype(np.float64)
    n = partial["n"].to_numpy(zero_copy_only=False).astype(np.int64)
    if agg == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            a = np.where(n > 0, a / np.maximum(n, 1), np.nan)
    cells[yi, xi] = np.where(n > 0, a, np.nan)
    counts[yi, xi] = n
    return GridData(x, y, value, agg, xs, ys, cells, counts, rows)


def _decoded(arr):
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _axis_values(raw: np.ndarray, dataset, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of an axis, ascending (a category column in its categories'
    order), and each raw value's position among them."""
    values, inverse = np.unique(raw, return_inverse=True)
    meta = dataset.schema.field(name).metadata or {}
    if b"categories" in meta:
        cats = meta[b"categories"].decode().split(",")
        rank = [cats.index(v) if v in cats else len(cats) for v in values]
        order = np.argsort(rank, kind="stable")
        values = values[order]
        inverse = np.argsort(order)[inverse]
    return values, inverse.ravel()


def _grid_index(table, dataset, x: str, y: str):
    xs, xi = _axis_values(table["x"].to_numpy(zero_copy_only=False), dataset, x)
    ys, yi = _axis_values(table["y"].to_numpy(zero_copy_only=False), dataset, y)
    return xs, ys, xi, yi


@dataclass(frozen=True)
class RegimeData:
    """Per cell the code of the category shown (``categories[code]``); -1 where the
    dataset has no row with that ``(x, y)``."""

    x: str
    y: str
    column: str
    rule: str
    by: str | None
    x_values: np.ndarray
    y_values: np.ndarray
    categories: tuple[str, ...]
    codes: np.ndarray
    best: np.ndarray  # the ``by`` value of the chosen row (rule "best") or the count ("most")
    rows_read: int

    def names(self) -> np.ndarray:
        """The grid as category names (``""`` where there is no row)."""
        names = np.asarray((*self.categories, ""), dtype=object)
        return names[np.where(self.codes >= 0, self.codes, len(self.categories))]


def _categories(dataset, column: str) -> tuple[str, ...]:
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = dataset.schema.field(column).type
    if not (pa.types.is_dictionary(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind) or pa.types.is_boolean(kind)):
        raise PlotError(f"column: {column!r} is a number, not a category; allowed: "
                        "a category column such as bottleneck or regime")
    meta = dataset.schema.field(column).metadata or {}
    if b"categories" in meta:
        return tuple(meta[b"categories"].decode().split(","))
    seen: set[str] = set()
    for batch in dataset.scanner(columns=[column]).to_batches():
        col = _decoded(batch.column(column))
        seen.update(str(v) for v in pc.unique(pc.cast(col, pa.string())).to_pylist()
                    if v is not None)
    return tuple(sorted(seen))


def regime_data(dataset, x: str, y: str, column: str = "bottleneck", rule: str = "best",
                by: str = "mfu_percent", where: str | None = None, *,
                batch_size: int = 1 << 17) -> RegimeData:
    """Which category of ``column`` holds where, one cell per ``(x, y)``.

    Rule ``best``: the category of the row with the largest finite ``by``
    (ties: the earlier category).  Rule ``most``: the most frequent category
    among rows with a finite ``by`` (ties: the earlier category).  A cell whose
    rows all have a NaN ``by`` (invalid layouts) shows ``invalid`` when that is
    a category; a cell without any row stays -1 (blank).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(dataset, (str, Path)):
        dataset = open_dataset(dataset)
    if rule not in RULES:
        raise PlotError(f"rule: got {rule!r}; allowed: {', '.join(RULES)}")
    for name, what in ((x, "x"), (y, "y"), (column, "column"), (by, "by")):
        check_column(dataset, name, what)
    if x == y:
        raise PlotError(f"x and y are both {x!r}: choose two different columns")
    cats = _categories(dataset, column)
    scanner = dataset.scanner(columns=list(dict.fromkeys([x, y, column, by])),
                              filter=_filter(dataset, where), batch_size=batch_size)
    # Running state per cell: best (by value, -code) for "best", counts per code for "most".
    best: dict[tuple, tuple[float, int]] = {}
    counts: dict[tuple, np.ndarray] = {}
    cells: set[tuple] = set()
    rows = 0
    for batch in scanner.to_batches():
        if not batch.num_rows:
            continue
        rows += batch.num_rows
        xv = _decoded(batch.column(x)).to_numpy(zero_copy_only=False)
        yv = _decoded(batch.column(y)).to_numpy(zero_copy_only=False)
        names = pc.cast(_decoded(batch.column(column)), pa.string())
        code = pc.fill_null(pc.index_in(names, value_set=pa.array(cats, pa.string())), -1)
        code = code.to_numpy(zero_copy_only=False).astype(np.int64)
        bv = pc.cast(batch.column(by), pa.float64()).to_numpy(zero_copy_only=False)
        bv = np.asarray(bv, dtype=np.float64)
        ux, xi = np.unique(xv, return_inverse=True)
        uy, yi = np.unique(yv, return_inverse=True)
        key = xi.ravel() * len(uy) + yi.ravel()
        for k in np.unique(key):
            cells.add((ux[k // len(uy)], uy[k % len(uy)]))
        ok = np.isfinite(bv) & (code >= 0)
        if rule == "best":
            # Sort by cell, then by descending value, then ascending code; first per cell wins.
            idx = np.flatnonzero(ok)
            order = idx[np.lexsort((code[idx], -bv[idx], key[idx]))]
            first = order[np.r_[True, key[order][1:] != key[order][:-1]]] if len(order) else order
            for i in first:
                cell = (ux[key[i] // len(uy)], uy[key[i] % len(uy)])
                cand = (bv[i], -int(code[i]))
                if cell not in best or cand > best[cell]:
                    best[cell] = cand
        else:
            idx = np.flatnonzero(ok)
            pair = key[idx] * len(cats) + code[idx]
            up, n = np.unique(pair, return_counts=True)
            for p, c in zip(up, n, strict=True):
                k, cd = divmod(int(p), len(cats))
                cell = (ux[k // len(uy)], uy[k % len(uy)])
                counts.setdefault(cell, np.zeros(len(cats), np.int64))[cd] += c
    if not cells:
        raise PlotError(f"no rows to plot{' where ' + where if where else ''}")
    xs, _ = _axis_values(np.array([c[0] for c in cells]), dataset, x)
    ys, _ = _axis_values(np.array([c[1] for c in cells]), dataset, y)
    none = cats.index("invalid") if "invalid" in cats else -1
    codes = np.full((len(ys), len(xs)), -1, dtype=np.int64)
    value = np.full((len(ys), len(xs)), np.nan)
    xpos = {v: j for j, v in enumerate(xs)}
    ypos = {v: i for i, v in enumerate(ys)}
    for cx, cy in cells:
        codes[ypos[cy], xpos[cx]] = none
    if rule == "best":
        for (cx, cy), (v, neg_code) in best.items():
            codes[ypos[cy], xpos[cx]] = -neg_code
            value[ypos[cy], xpos[cx]] = v
    else:
        for (cx, cy), n in counts.items():
            codes[ypos[cy], xpos[cx]] = int(np.argmax(n))  # first maximum: earlier category
            value[ypos[cy], xpos[cx]] = float(n.max())
    return RegimeData(x, y, column, rule, by if rule == "best" else None, xs, ys, cats,
                      codes, value, rows)


# ------------------------------------------------------------- grid drawing


def _spread(d: np.ndarray) -> float:
    """How uneven a set of steps is (coefficient of variation; 0: even)."""
    return float(np.std(d) / np.mean(d)) if len(d) and np.mean(d) > 0 else math.inf


def is_geometric(values: np.ndarray) -> bool:
    """Positive, spanning 8x or more, and closer to even in log than in linear spacing."""
    v = np.asarray(values)
    if v.dtype.kind not in "iuf" or len(v) < 3:
        return False
    v = np.sort(v.astype(np.float64))
    if v[0] <= 0 or v[-1] / v[0] < 8:
        return False
    return _spread(np.diff(np.log(v))) <= _spread(np.diff(v))


def axis_scale(values: np.ndarray) -> str:
    """``log`` (geometric values), ``linear`` (evenly spaced, or many), or ``index``:
    a few irregular values (e.g. 312, 500, 989, 2250 TFLOP/s) or names, drawn as
    equal cells labelled with the values."""
    v = np.asarray(values)
    if v.dtype.kind not in "iuf":
        return "index"
    if is_geometric(v):
        return "log"
    if len(v) <= 2 or _spread(np.diff(np.sort(v.astype(np.float64)))) < 0.05 or len(v) > 12:
        return "linear"
    return "index"


def _edges(values: np.ndarray, log: bool) -> np.ndarray:
    """Cell edges halfway between neighbouring values (in log space for a log axis)."""
    v = np.asarray(values, dtype=np.float64)
    t = np.log(v) if log else v
    if len(t) == 1:
        half = 0.5 if not log else math.log(2) / 2
        e = np.array([t[0] - half, t[0] + half])
    else:
        mid = (t[1:] + t[:-1]) / 2
        e = np.concatenate([[t[0] - (mid[0] - t[0])], mid, [t[-1] + (t[-1] - mid[-1])]])
    return np.exp(e) if log else e


def _set_axis(ax, which: str, values: np.ndarray, label: str) -> tuple[np.ndarray, np.ndarray]:
    """Scale, label and ticks of one axis; returns the cell edges and centres to draw at."""
    from matplotlib.ticker import FixedLocator, LogLocator, MaxNLocator, NullLocator

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xlabel if which == "x" else ax.set_ylabel)(label)
    set_lim = ax.set_xlim if which == "x" else ax.set_ylim
    scale = axis_scale(values)
    if scale == "index":
        centres = np.arange(len(values), dtype=np.float64)
        edges = np.arange(len(values) + 1) - 0.5
        set_lim(edges[0], edges[-1])
        axis.set_major_locator(FixedLocator(centres))
        axis.set_minor_locator(NullLocator())
        shown = [_fmt(v) if np.asarray(values).dtype.kind in "iuf" else str(v) for v in values]
        axis.set_major_formatter(lambda _v, pos: shown[pos] if pos is not None
                                 and pos < len(shown) else "")
        return edges, centres
    log = scale == "log"
    edges = _edges(values, log)
    if log:
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    set_lim(edges[0], edges[-1])
    if len(values) <= 12:  # a tick at every value of the grid
        axis.set_major_locator(FixedLocator(np.asarray(values, dtype=np.float64)))
    elif log:  # round values: 10, 20, 50, 100, ...
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    else:
        axis.set_major_locator(MaxNLocator(10))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(_formatter())
    return edges, np.asarray(values, dtype=np.float64)


def _axis_label(dataset, name: str) -> str:
    return _label(name, column_unit(dataset, name))


def plot_heatmap(dataset, x: str, y: str, value: str, output: str | Path, *,
                 agg: str = "max", where: str | None = None,
                 size: tuple[int, int] = DEFAULT_SIZE, batch_size: int = 1 << 17) -> GridData:
    """A heatmap of ``agg(value)`` over ``(x, y)`` from a sweep dataset."""
    output = check_output(output)
    require_matplotlib()
    if isinstance(dataset, (str, Path)):
        dataset = open_dataset(dataset)
    data = heatmap_data(dataset, x, y, value, agg, where, batch_size=batch_size)
    fig = _figure(size)
    ax = fig.subplots()
    xe, xc = _set_axis(ax, "x", data.x_values, _axis_label(dataset, x))
    ye, yc = _set_axis(ax, "y", data.y_values, _axis_label(dataset, y))
    grid = np.ma.masked_invalid(data.cells)
    mesh = ax.pcolormesh(xe, ye, grid, cmap="viridis", shading="flat")
    cbar = fig.colorbar(mesh, ax=ax)
    cbar.set_label(f"{agg} {_axis_label(dataset, value)}")
    if data.cells.size <= 120:
        _annotate(ax, data, xc, yc)
    ax.set_facecolor("#EEEEEE")
    _title(ax, f"{agg} of {value} by {x} and {y}", where, size)
    if np.isnan(data.cells).any():
        ax.text(1.0, -0.1, "grey: no row with a value", transform=ax.transAxes, ha="right",
                va="top", fontsize="x-small")
    _save(fig, output)
    return data


def _title(ax, text: str, where: str | None, size: tuple[int, int]) -> None:
    """A title, with the filter on wrapped lines below it."""
    import textwrap

    chars = max(40, size[0] // 9)
    lines = textwrap.wrap(text, chars)
    if where:
        lines += textwrap.wrap(f"where {where}", chars)
    ax.set_title("\n".join(lines), fontsize="medium")


def _annotate(ax, data: GridData, xc: np.ndarray, yc: np.ndarray) -> None:
    finite = data.cells[np.isfinite(data.cells)]
    mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for i, yy in enumerate(yc):
        for j, xx in enumerate(xc):
            v = data.cells[i, j]
            if math.isfinite(v):
                ax.text(xx, yy, f"{v:.3g}", ha="center", va="center", fontsize="x-small",
                        color="white" if v < mid else "black")


def plot_regimes(dataset, x: str, y: str, output: str | Path, *, column: str = "bottleneck",
                 rule: str = "best", by: str = "mfu_percent", where: str | None = None,
                 size: tuple[int, int] = DEFAULT_SIZE,
                 batch_size: int = 1 << 17) -> RegimeData:
    """A categorical map of ``column`` over ``(x, y)`` (see ``regime_data``)."""
    output = check_output(output)
    require_matplotlib()
    if isinstance(dataset, (str, Path)):
        dataset = open_dataset(dataset)
    data = regime_data(dataset, x, y, column, rule, by, where, batch_size=batch_size)
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch

    fig = _figure(size)
    ax = fig.subplots()
    xe, _ = _set_axis(ax, "x", data.x_values, _axis_label(dataset, x))
    ye, _ = _set_axis(ax, "y", data.y_values, _axis_label(dataset, y))
    palette = [_CATEGORY_COLORS.get(c, f"C{i}") for i, c in enumerate(data.categories)]
    cmap = ListedColormap(palette)
    norm = BoundaryNorm(np.arange(len(palette) + 1) - 0.5, len(palette))
    ax.pcolormesh(xe, ye, np.ma.masked_less(data.codes, 0), cmap=cmap, norm=norm,
                  shading="flat")
    shown = sorted(set(int(c) for c in data.codes.ravel() if c >= 0))
    ax.legend(handles=[Patch(color=palette[c], label=data.categories[c]) for c in shown],
              title=column, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small",
              borderaxespad=0.0)
    how = (f"the {column} of the row with the highest {by}" if rule == "best"
           else f"the most frequent {column} among valid rows")
    _title(ax, f"{column} by {x} and {y}: {how}", where, size)
    _save(fig, output)
    return data


# -------------------------------------------------------------------- tornado


@dataclass(frozen=True)
class TornadoData:
    """Elasticities of ``output`` (d ln output / d ln input), ranked by magnitude."""

    output: str
    value: float
    inputs: tuple[str, ...]
    elasticities: np.ndarray
    stepped_to: dict[str, float]


def tornado_data(model: Model, inputs: Mapping[str, float], output: str = "step_time_ms",
                 wrt: Sequence[str] | None = None, *, x64: bool = False) -> TornadoData:
    """``jaxmodel.sensitivity.sensitivities`` (elasticities), largest |e| first.

    Inputs whose elasticity is not finite (a zero output) are left out.

    Raises:
      PlotError: the layout is invalid (nothing to rank).
    """
    from jaxmodel.sensitivity import answer_sensitivities

    s = answer_sensitivities(dict(inputs), of=[output], wrt=wrt, kind="elasticity",
                             model=model, x64=x64)
    if not bool(s.valid):
        raise PlotError("tornado: the layout is invalid, its sensitivities are undefined "
                        "(see jaxmodel eval)")
    e = {w: float(s.elasticity(output, w)) for w in s.wrt}
    ranked = sorted((w for w in e if math.isfinite(e[w])), key=lambda w: -abs(e[w]))
    return TornadoData(output, float(s.values[output]), tuple(ranked),
                       np.array([e[w] for w in ranked]),
                       {w: float(v) for w, v in s.stepped_to.items()})


def tornado_title(model: Model, inputs: Mapping[str, float], of: str, value: float) -> str:
    """``Sensitivity of step_time_ms = 5,121 ms: 70.6B parameters on 64 GPUs, t=8 p=4
    b=1 m=16 (refined model)``: what was differentiated, for which LLM and cluster."""
    from jaxmodel.api import as_dicts
    from jaxmodel.profile import answer

    size = inputs.get("model_params_b")
    if size is None and "total_params_b" in model.output_names:
        size = as_dicts(model, answer(model, **inputs))["total_params_b"]
    layout = " ".join(f"{k}={_fmt(inputs[n])}" for k, n in TITLE if n in inputs and k != "P")
    what = ", ".join(part for part in (
        f"{float(size):,.3g}B parameters" if size is not None else "",
        f"{_fmt(inputs['num_gpus'])} GPUs" if "num_gpus" in inputs else "", layout) if part)
    unit = _unit(model.output_field(of).unit)
    return f"Sensitivity of {of} = {_fmt(value)} {unit}: {what} ({model.name} model)"


def plot_tornado(model: Model, inputs: Mapping[str, float], output: str | Path, *,
                 of: str = "step_time_ms", wrt: Sequence[str] | None = None,
                 size: tuple[int, int] = DEFAULT_SIZE, x64: bool = False) -> TornadoData:
    """Horizontal bars of each input's elasticity, largest on top, negative to the left."""
    output = check_output(output)
    fig = _figure(size)
    data = tornado_data(model, inputs, of, wrt, x64=x64)
    ax = fig.subplots()
    yy = np.arange(len(data.inputs))[::-1]
    colors = ["#C44E52" if v < 0 else "#4C72B0" for v in data.elasticities]
    ax.barh(yy, data.elasticities, color=colors, height=0.7)
    labels = [w + (f" (stepped to {_fmt(data.stepped_to[w])})" if w in data.stepped_to else "")
              for w in data.inputs]
    ax.set_yticks(yy, labels)
    ax.axvline(0.0, color="black", linewidth=0.8)
    lim = float(np.max(np.abs(data.elasticities))) * 1.25 if len(data.elasticities) else 1.0
    ax.set_xlim(-lim, lim)
    for y0, v in zip(yy, data.elasticities, strict=True):
        ax.text(v, y0, f" {v:+.3f} ", ha="left" if v >= 0 else "right", va="center",
                fontsize="small")
    ax.set_xlabel(f"elasticity: % change of {of} per +1% of the input (dimensionless)")
    ax.grid(True, axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="#4C72B0", label=f"raises {of}"),
                       Patch(color="#C44E52", label=f"lowers {of}")],
              loc="lower right", fontsize="small")
    ax.set_title(tornado_title(model, inputs, of, data.value), fontsize="medium")
    _save(fig, output)
    return data


def describe(data: Any) -> str:
    """One line saying what a plotting function drew (for the CLI)."""
    if isinstance(data, GridData):
        return f"{data.cells.shape[1]} x {data.cells.shape[0]} cells from {data.rows_read:,} rows"
    if isinstance(data, RegimeData):
        return f"{data.codes.shape[1]} x {data.codes.shape[0]} cells from {data.rows_read:,} rows"
    if isinstance(data, BreakdownData):
        return f"{len(data.labels)} configuration(s)"
    if isinstance(data, TornadoData):
        return f"{len(data.inputs)} inputs"
    return "2 curves"


def plot_plan(rows: Sequence[Mapping[str, Any]], output: str | Path, *,
              size: tuple[int, int] = (1000, 700)) -> Path:
    """Training time against cost of each plan (``jaxmodel.planning``): one
    marker and colour per GPU, each point labelled with its GPU count, the
    Pareto front of time and cost drawn through its points."""
    from jaxmodel.planning import pareto_front

    output = check_output(output)
    fig = _figure(size)
    ax = fig.add_subplot()
    markers = "osD^vP*Xhp<>"
    for i, gpu in enumerate(dict.fromkeys(r["gpu"] for r in rows)):
        mine = [r for r in rows if r["gpu"] == gpu]
        ax.scatter([r["train_days"] for r in mine], [r["cost_usd"] / 1e6 for r in mine],
                   marker=markers[i % len(markers)], s=50, label=gpu)
        for r in mine:
            ax.annotate(f"{r['num_gpus']:,}", (r["train_days"], r["cost_usd"] / 1e6),
                        textcoords="offset points", xytext=(4, 4), fontsize=8)
    front = pareto_front(rows)
    if len(front) > 1:
        ax.plot([r["train_days"] for r in front], [r["cost_usd"] / 1e6 for r in front],
                color="0.6", linestyle="--", linewidth=1, label="Pareto front", zorder=0)
    ax.set_xlabel("training time (days)")
    ax.set_ylabel("cost (million USD)")
    ax.set_xscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, output)
    return output
