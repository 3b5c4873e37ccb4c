"""Sweep specifications: a TOML file -> a validated :class:`SweepSpec`.

A spec names a model, fixes some inputs, varies others, and says what to keep
and where to write it::

    model = "refined"                    # optional; the default (--model seed: the seed)
    filter = "valid_layout and mfu_percent >= 40"    # optional, see jaxmodel.expr

    [base]                               # fixed inputs (default: the model's defaults)
    gpu = "h100-sxm"                     # optional presets (jaxmodel presets), then
    config = "calibrated.toml"           # an optional config file (relative to the spec),
    model_params_b = 70                  # then explicit values, which win

    [axes]                               # the grid: one dimension per input
    link_bandwidth_gb_s = {geomspace = [50, 3200, 64]}
    num_gpus = {powers_of_two = [64, 16384]}
    tensor_parallel = [1, 2, 4, 8]       # an explicit list
    micro_batch = {range = [1, 9, 1]}    # start, stop (exclusive), step
    compute_tflops = {linspace = [200, 2000, 10]}

    [[zip]]                              # inputs that vary together (equal lengths)
    seq_length = [2048, 4096, 8192]
    gradient_accum_steps = [32, 16, 8]

    [output]
    path = "out/my-sweep"                # relative to the spec; default: out/<spec file stem>
    columns = ["mfu_percent", "step_time_ms"]   # default: all inputs and outputs
    partition_by = ["tensor_parallel"]   # hive partitioning (optional)
    rows_per_file = 2_000_000
    compression = "lz4"                  # lz4 (fastest here), zstd, snappy, gzip, none

Instead of ``[axes]`` / ``[[zip]]``, a ``[sample]`` table draws ``n``
configurations at random (Monte-Carlo studies)::

    [sample]
    n = 1_000_000
    seed = 0
    link_bandwidth_gb_s = {log_uniform = [25, 3200]}
    compute_tflops = {uniform = [200, 2500]}
    tensor_parallel = {choice = [1, 2, 4, 8]}

Grid order: row-major over the dimensions in the order written, ``[axes]``
first (the first axis varies slowest), then each ``[[zip]]`` group.  The
configuration index ``config_id`` is the row's position in that order (for
``[sample]``, the draw number).  Integer inputs given by ``linspace`` or
``geomspace`` are rounded to the nearest whole number and deduplicated
(ascending); explicit lists are kept as written but must hold whole numbers.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from jaxmodel.config import MAX_VALUE_NESTING, nesting
from jaxmodel.errors import InputError, SpecError, closest
from jaxmodel.expr import Expr, parse
from jaxmodel.fields import check_values
from jaxmodel.models import DEFAULT_MODEL, Model, get_model
from jaxmodel.spec_tables import (
    OutputSettings,
    SensitivityRequest,
    SolveRequest,
    as_table,
    check_keys,
    parse_tables,
)

MAX_CONFIGURATIONS = 2**62  # config_id is int64; chunk counts stay exact
# Configurations per device chunk (jaxmodel.program): the default, and the most
# (offsets are int32, see IndexSpace.chunk_digits).  Here, beside the other
# limits of a sweep, so that the command line's help needs no jax.
DEFAULT_CHUNK = 1 << 20

MAX_WRITERS = 256  # far beyond what any machine's cores keep busy encoding


def check_writers(writers: int | None) -> None:
    """Refuse a writer count that is not 1 to :data:`MAX_WRITERS`, before any
    file is made (100,000 threads failed to start after the metadata was
    written, and the next run refused the directory)."""
    if writers is not None and not 1 <= writers <= MAX_WRITERS:
        raise SpecError(f"--writers: got {writers}; allowed: a whole number of threads, "
                        f"1 to {MAX_WRITERS}")


MAX_CHUNK = 1 << 30
MAX_AXIS = 100_000_000  # values one axis (or sample choice list) may hold: 800 MB as float64

# [base] key of a sweep at a fixed global batch (tokens a step), and the input
# derived from it.
BATCH_TOKENS = "global_batch_tokens"
ACCUMULATION = "gradient_accum_steps"
TOP_LEVEL = ("model", "description", "filter", "base", "axes", "zip", "sample", "output",
             "sensitivity", "solve", "reduce")
AXIS_KINDS = ("linspace", "geomspace", "range", "powers_of_two")
SAMPLE_KINDS = ("uniform", "log_uniform", "choice")


@dataclass(frozen=True)
class Dimension:
    """One dimension of the grid: one input, or a zip group of several.

    Attributes:
      names: the inputs this dimension sets.
      values: one float64 array per name, all of length ``size``.
    """

    names: tuple[str, ...]
    values: tuple[np.ndarray, ...]

    @property
    def size(self) -> int:
        return len(self.values[0])


@dataclass(frozen=True)
class Distribution:
    """How ``[sample]`` draws one input: ``uniform``/``log_uniform`` over
    ``[low, high]`` (integers: every whole number equally likely / rounded
    log-uniform) or ``choice`` among ``values``."""

    name: str
    kind: str
    low: float = 0.0
    high: float = 0.0
    values: np.ndarray | None = None
    integer: bool = False


@dataclass(frozen=True)
class Sample:
    n: int
    seed: int
    distributions: tuple[Distribution, ...]


@dataclass(frozen=True, eq=False)
class CandidateTable:
    """Explicit candidate rows (``jaxmodel best``): row ``i`` is configuration ``i``.

    Attributes:
      columns: equal-length numpy columns of some inputs; every other input
        is the spec's ``base``.
      group_by, group_ids, num_groups: the columns a reducer's ``group_by``
        names, each row's group index in ``[0, num_groups)`` (int64), and the
        group count; ``group_ids`` is None without groups.
      report: a pure function of a chunk's columns (config_id, inputs,
        outputs: jax arrays) returning them as reported, run on the device
        after the model (a search's rows run on the GPUs they use and are
        reported with the job's); None: as evaluated.
        With ``crossed``, ``group_ids`` is ``(of_layout, of_combo, ids)``
        (``CrossedCandidates.groups``).
      crossed: the rows as layouts crossed with searched axes
        (``jaxmodel.models.layout.CrossedCandidates``: ``columns`` are then
        per layout, and the device decodes configuration ``i`` into its
        layout and its axes' values); None: ``columns`` are the rows.
    """

    columns: dict[str, np.ndarray]
    group_by: tuple[str, ...] = ()
    group_ids: Any = None
    num_groups: int = 1
    report: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    crossed: Any = None

    @property
    def size(self) -> int:
        if self.crossed is not None:
            return self.crossed.size
        return len(next(iter(self.columns.values()))) if self.columns else 0

    @property
    def names(self) -> tuple[str, ...]:
        """The inputs the rows set (the others are the spec's ``base``)."""
        return tuple(self.columns) + (tuple(self.crossed.axes) if self.crossed is not None
                                      else ())


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep specification.

    Attributes:
      text: the TOML source, stored in the dataset's metadata.
      name: the spec file's stem (default output directory name).
      model: the cost model.
      base: every input's fixed value (the grid or sample overrides some).
      dims: grid dimensions, slowest first (empty in sample mode).
      sample: random mode, or ``None``.
      table: explicit candidate rows (``dims`` and ``sample`` empty), or ``None``.
      filter: rows to keep, or ``None`` for all.
      output: Parquet settings.
      tables: the raw ``sensitivity``, ``solve`` and ``reduce`` tables, as written.
      sensitivity: the validated ``[sensitivity]`` request, or ``None``.
      solve: the validated ``[solve]`` request, or ``None``.
      reduce: the ``[reduce]`` table's reducer (``jaxmodel.reduce``), or ``None``.
      global_batch_tokens: ``[base] global_batch_tokens``: every row's
        ``gradient_accum_steps`` is derived so that it trains this many tokens a
        step (``LayoutSpace.accumulation_for``), and rows that cannot are
        filtered out; or ``None``.
    """

    text: str
    name: str
    model: Model
    base: dict[str, float]
    dims: tuple[Dimension, ...] = ()
    sample: Sample | None = None
    filter: Expr | None = None
    output: OutputSettings = field(default_factory=OutputSettings)
    tables: dict[str, Any] = field(default_factory=dict)
    table: CandidateTable | None = None
    sensitivity: SensitivityRequest | None = None
    solve: SolveRequest | None = None
    global_batch_tokens: int | None = None
    reduce: Any = None

    @property
    def size(self) -> int:
        """Number of configurations (exact Python int, may exceed 2**63 only in theory)."""
        if self.table is not None:
            return self.table.size
        if self.sample is not None:
            return self.sample.n
        size = 1
        for d in self.dims:
            size *= d.size
        return size

    @property
    def varied(self) -> tuple[str, ...]:
        """The inputs that differ between rows (one derived from
        ``global_batch_tokens`` included)."""
        derived = (ACCUMULATION,) if self.global_batch_tokens is not None else ()
        if self.table is not None:
            return self.table.names
        if self.sample is not None:
            return tuple(d.name for d in self.sample.distributions) + derived
        return tuple(n for d in self.dims for n in d.names) + derived


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise SpecError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _int(value: Any, where: str, low: int = 1, high: int = 2**31 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SpecError(f"{where}: expected a whole number from {low} to {high}, got {value!r}")
    return value


def _input(model: Model, name: str, where: str):
    try:
        return model.input_field(name)
    except KeyError:
        raise SpecError(f"{where}: unknown input {name!r}{model.input_hint(name)} "
                        f"of model {model.name!r}") from None


def axis_values(model: Model, name: str, value: Any, where: str) -> np.ndarray:
    """The values of one axis, validated against the input's domain."""
    f = _input(model, name, where)
    where = f"{where}.{name}"
    if isinstance(value, list):
        if not value:
            raise SpecError(f"{where}: empty axis")
        arr = np.array([_number(v, where) for v in value], dtype=np.float64)
    elif isinstance(value, dict):
        if len(value) != 1:
            raise SpecError(f"{where}: give exactly one of {', '.join(AXIS_KINDS)} "
                            "or a list of values")
        (kind, args), = value.items()
        if kind not in AXIS_KINDS:
            raise SpecError(f"{where}: unknown axis kind {kind!r}{closest(kind, AXIS_KINDS)}; "
                            f"allowed: {', '.join(AXIS_KINDS)}")
        arr = _generate(kind, args, f"{where}.{kind}", f.integer)
    else:
        raise SpecError(f"{where}: expected a list of values or a table such as "
                        f"{{linspace = [lo, hi, n]}}, got {value!r}")
    if arr.size == 0:
        raise SpecError(f"{where}: empty axis")
    try:
        check_values(f, arr)
    except InputError as e:
        raise InputError(where, e.value, e.allowed) from None
    return arr


def _generate(kind: str, args: Any, where: str, integer: bool) -> np.ndarray:
    arity = {"linspace": 3, "geomspace": 3, "range": 3, "powers_of_two": 2}[kind]
    if not isinstance(args, list) or len(args) != arity:
        shape = {"linspace": "[lo, hi, n]", "geomspace": "[lo, hi, n]",
                 "range": "[start, stop, step]", "powers_of_two": "[lo, hi]"}[kind]
        raise SpecError(f"{where}: expected {shape}, got {args!r}")
    nums = [_number(a, where) for a in args]
    if kind in ("linspace", "geomspace"):
        lo, hi = nums[0], nums[1]
        n = _int(args[2], f"{where} (count)", high=MAX_AXIS)
        if kind == "geomspace" and (lo <= 0 or hi <= 0):
            raise SpecError(f"{where}: geomspace needs positive bounds, got {args!r}")
        arr = (np.linspace if kind == "linspace" else np.geomspace)(lo, hi, n)
        if integer:
            arr = np.unique(np.round(arr))
        return arr
    if kind == "range":
        start, stop, step = nums
        if step == 0:
            raise SpecError(f"{where}: step must not be 0")
        count = int(np.ceil((stop - start) / step))
        if count <= 0:
            raise SpecError(f"{where}: empty axis (start {start:g}, stop {stop:g}, step {step:g})")
        if count > MAX_AXIS:
            raise SpecError(f"{where}: {count:,} values is more than one axis may hold "
                            f"({MAX_AXIS:,})")
        return start + step * np.arange(count, dtype=np.float64)
    lo, hi = nums
    if lo < 1 or hi < lo:
        raise SpecError(f"{where}: expected 1 <= lo <= hi, got {args!r}")
    k0, k1 = int(np.ceil(np.log2(lo) - 1e-12)), int(np.floor(np.log2(hi) + 1e-12))
    arr = 2.0 ** np.arange(k0, k1 + 1)
    if arr.size == 0:
        raise SpecError(f"{where}: no power of two between {lo:g} and {hi:g}")
    return arr


def _check_at_least(model: Model, base: dict[str, float], spec: SweepSpec) -> None:
    """Refuse a sweep in which some configuration breaks the model's
    ``at_least`` order: compared value by value where one dimension (or
    ``[base]``) sets both inputs, else every value against every value, as
    the grid (or the draws) combines them."""
    where: dict[str, tuple[Any, np.ndarray]] = {n: (None, np.asarray(v)) for n, v in base.items()}
    for d in spec.dims:
        where.update({n: (d, np.asarray(v)) for n, v in zip(d.names, d.values, strict=True)})
    for dist in (spec.sample.distributions if spec.sample else ()):
        span = dist.values if dist.kind == "choice" else np.array([dist.low, dist.high])
        where[dist.name] = (dist, np.asarray(span))
    for name, lower in model.at_least:
        (dn, vn), (dl, vl) = where[name], where[lower]
        if dn is not dl:  # independent: the smallest meets the largest somewhere
            vn, vl = vn.min(), vl.max()
        model.check_at_least({name: vn, lower: vl}, where="spec: ", pairs=((name, lower),))


def _sample(model: Model, table: dict) -> Sample:
    where = "sample"
    if "n" not in table:
        raise SpecError("sample: missing 'n', the number of configurations to draw")
    n = _int(table["n"], "sample.n", high=MAX_CONFIGURATIONS)
    seed = _int(table.get("seed", 0), "sample.seed", low=0, high=2**32 - 1)
    dists = []
    for name, value in table.items():
        if name in ("n", "seed"):
            continue
        f = _input(model, name, where)
        w = f"{where}.{name}"
        if not isinstance(value, dict) or len(value) != 1:
            raise SpecError(f"{w}: expected one of {{uniform = [lo, hi]}}, "
                            f"{{log_uniform = [lo, hi]}}, {{choice = [values]}}")
        (kind, args), = value.items()
        if kind not in SAMPLE_KINDS:
            raise SpecError(f"{w}: unknown distribution {kind!r}{closest(kind, SAMPLE_KINDS)}; "
                            f"allowed: {', '.join(SAMPLE_KINDS)}")
        if kind == "choice":
            if not isinstance(args, list) or not args:
                raise SpecError(f"{w}.choice: expected a non-empty list of values")
            values = np.array([_number(v, w) for v in args])
            check = values
            dists.append(Distribution(name, kind, values=values, integer=f.integer))
        else:
            if not isinstance(args, list) or len(args) != 2:
                raise SpecError(f"{w}.{kind}: expected [lo, hi], got {args!r}")
            lo, hi = (_number(a, w) for a in args)
            if hi < lo or (kind == "log_uniform" and lo <= 0):
                raise SpecError(f"{w}.{kind}: expected {'0 < ' if kind == 'log_uniform' else ''}"
                                f"lo <= hi, got {args!r}")
            check = np.array([lo, hi])
            dists.append(Distribution(name, kind, lo, hi, integer=f.integer))
        try:
            check_values(f, check)
        except InputError as e:
            raise InputError(w, e.value, e.allowed) from None
    if not dists:
        raise SpecError("sample: name at least one input to draw")
    return Sample(n, seed, tuple(dists))


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a spec file.

    Raises:
      SpecError / InputError: one line naming the key, the value and what is allowed.
    """
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as e:
        raise SpecError(f"spec: cannot read {str(path)!r} ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise SpecError(f"spec: {str(path)!r} is not UTF-8 text (byte {e.start}); TOML files "
                        "are UTF-8") from None
    return parse_spec(text, name=p.stem, root=p.parent)


def parse_spec(text: str, name: str = "sweep", root: str | Path | None = None) -> SweepSpec:
    """Validate a spec given as TOML text (see the module docstring).

    ``root``: the folder that relative paths in the spec (``[base] config``,
    ``[output] path``) are resolved from: the spec file's (default the working
    directory).
    """
    if not isinstance(text, str):  # e.g. a dataset's metadata with "spec": 123
        raise SpecError(f"spec: expected TOML text, got {type(text).__name__} {text!r:.40}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"spec: invalid TOML ({e})") from None
    except RecursionError:
        raise SpecError(f"spec: invalid TOML (values nested more than {MAX_VALUE_NESTING} "
                        "deep)") from None
    if nesting(data) > MAX_VALUE_NESTING:
        raise SpecError(f"spec: values nested more than {MAX_VALUE_NESTING} deep; a spec "
                        "needs a few levels (a table of tables of lists)")
    check_keys(data, TOP_LEVEL, "spec")
    model_name = data.get("model", DEFAULT_MODEL)
    if not isinstance(model_name, str):
        raise SpecError(f"model: expected a model name, got {model_name!r}")
    model = get_model(model_name)

    base = dict(model.defaults)
    base_table = as_table(data.get("base", {}), "base", "a table of input values")
    presets = {k: base_table[k] for k in ("gpu", "llm") if k in base_table}
    if presets:
        from jaxmodel.presets import apply_presets

        for key, preset in presets.items():
            if not isinstance(preset, str):
                raise SpecError(f"base.{key}: expected a preset name, got {preset!r} "
                                "(see 'jaxmodel presets')")
        try:
            base.update(apply_presets(model, **presets))
        except InputError as e:
            raise InputError(f"base.{e.field}", e.value, e.allowed) from None
    if "config" in base_table:
        from jaxmodel.config import load_config
        from jaxmodel.presets import apply_presets

        path = base_table["config"]
        if not isinstance(path, str):
            raise SpecError(f"base.config: expected a file name, got {path!r}")
        path = Path(root or ".") / path
        try:
            loaded = load_config(path, model)
            # The file's presets (a calibrated.toml's gpu / llm) where [base] names none.
            named = {k: loaded.pop(k) for k in ("gpu", "llm") if k in loaded}
            base.update(apply_presets(model, **{k: v for k, v in named.items()
                                                if k not in presets}))
            base.update({k: model.input_field(k).check_scalar(v) for k, v in loaded.items()})
        except InputError as e:
            where = e.field if e.field.startswith("config") else f"config {e.field}"
            raise InputError(f"base.{where}", e.value, e.allowed) from None
    batch_tokens = base_table.get(BATCH_TOKENS)
    if batch_tokens is not None:
        if model.layout is None:
            raise SpecError(f"base.{BATCH_TOKENS}: model {model.name!r} has no layout space "
                            "to derive gradient_accum_steps in")
        if isinstance(batch_tokens, bool) or not isinstance(batch_tokens, int) \
                or not 1 <= batch_tokens <= MAX_CONFIGURATIONS:
            raise SpecError(f"base.{BATCH_TOKENS}: expected a whole number of tokens from 1 "
                            f"to 2**62, got {batch_tokens!r}")
    for key, value in base_table.items():
        if key in presets or key in ("config", BATCH_TOKENS):
            continue
        f = _input(model, key, "base")
        try:
            base[key] = f.check_scalar(value)
        except InputError as e:
            raise InputError(f"base.{key}", e.value, e.allowed) from None

    dims: list[Dimension] = []
    axes = as_table(data.get("axes", {}), "axes", "a table of input = values")
    seen: set[str] = set()
    for key, value in axes.items():
        dims.append(Dimension((key,), (axis_values(model, key, value, "axes"),)))
        seen.add(key)
    zips = data.get("zip", [])
    if not isinstance(zips, list):
        raise SpecError("zip: write each group as a [[zip]] table")
    for i, group in enumerate(zips):
        where = f"zip[{i}]"
        if not isinstance(group, dict) or not group:
            raise SpecError(f"{where}: expected a table of input = values")
        names, values = [], []
        for key, value in group.items():
            if key in seen:
                raise SpecError(f"{where}.{key}: {key!r} is already varied elsewhere")
            if not isinstance(value, list):
                raise SpecError(f"{where}.{key}: zipped inputs take explicit lists")
            names.append(key)
            values.append(axis_values(model, key, value, where))
            seen.add(key)
        lengths = {len(v) for v in values}
        if len(lengths) != 1:
            raise SpecError(f"{where}: zipped lists must have equal lengths, got "
                            + ", ".join(f"{n}={len(v)}" for n, v in zip(names, values,
                                                                       strict=True)))
        dims.append(Dimension(tuple(names), tuple(values)))

    sample = None
    if "sample" in data:
        if dims:
            raise SpecError("sample: use either [sample] or [axes]/[[zip]], not both")
        sample = _sample(model, as_table(data["sample"], "sample"))

    parsed = parse_tables(data, model)
    if not isinstance(data.get("description", ""), str):
        raise SpecError(f"description: expected text, got {data['description']!r}")
    filt = data.get("filter")
    if batch_tokens is not None:
        varied = {n for d in dims for n in d.names} | (
            {d.name for d in sample.distributions} if sample else set())
        if ACCUMULATION in varied or ACCUMULATION in base_table:
            raise SpecError(f"base.{BATCH_TOKENS}: gradient_accum_steps is derived from it "
                            "(m = global_batch_tokens / (b s d)); do not also set or vary it")
        # Keep the rows whose b s d divides the batch (the others miss it).
        held = f"tokens_per_step == {batch_tokens}"
        filt = held if filt is None else f"{held} and ({filt})"
    output = parsed.output
    if output.path is not None and root is not None:
        output = dataclasses.replace(output, path=str(Path(root) / output.path))
    spec = SweepSpec(text=text, name=name, model=model, base=base, dims=tuple(dims),
                     sample=sample, output=output, global_batch_tokens=batch_tokens,
                     tables={k: data[k] for k in ("sensitivity", "solve", "reduce") if k in data},
                     sensitivity=parsed.sensitivity, solve=parsed.solve, reduce=parsed.reduce)
    if spec.size > MAX_CONFIGURATIONS:
        raise SpecError(f"spec: {spec.size:.3e} configurations is more than a sweep may hold "
                        f"(2**62 = {MAX_CONFIGURATIONS:.3e}); split it into several specs")
    # Exact integer outputs (tokens_per_step) must fit int64 for every row:
    # checked on each input's largest value, before anything is computed.
    highest = dict(base)
    for d in spec.dims:
        highest.update({n: float(np.max(v)) for n, v in zip(d.names, d.values, strict=True)})
    for dist in (spec.sample.distributions if spec.sample else ()):
        highest[dist.name] = float(np.max(dist.values)) if dist.kind == "choice" else dist.high
    model.check_products(highest, where="spec: largest ")
    _check_at_least(model, base, spec)
    if filt is not None:
        # The filter's columns are checked by the plan, which knows every
        # column (the extra tables add some).
        spec = SweepSpec(**{**spec.__dict__, "filter": parse(filt)})
    return spec
