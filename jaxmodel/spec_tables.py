"""The sweep spec's tables, validated in one place and in one error style.

``parse_spec`` hands every table here before anything is planned:
``[output]``, ``[sensitivity]``, ``[solve]`` and ``[reduce]``.  The grid's
``[base]``, ``[axes]``, ``[[zip]]`` and ``[sample]`` are read by
``jaxmodel.spec`` with the same key and table checks; its value messages keep
the ``expected ..., got ...`` wording scripts and tests already match.  The
names a table refers to are checked against the model here too, with the same
checks the Python API (``jaxmodel.sensitivities``, ``jaxmodel.solve``) and the
CLI use.

Every error is a :class:`~jaxmodel.errors.SpecError` of one line naming the
field, the value and what is allowed::

    sensitivity: unknown key 'off' (did you mean 'of'?); allowed: of, wrt, kind
    reduce.top_k: got 0; allowed: a whole number from 1 to 10000
    solve.vary: got 'num_gpus', a stepped input; allowed: a continuous input: ...

Only column names (``reduce.by``, ``output.columns``, the filter) wait for
the plan, which knows every column the sweep computes.

This module is the spec layer: it imports the models and the reducers, never
the API (``jaxmodel.api``) or the CLI.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from jaxmodel.errors import SpecError, closest
from jaxmodel.models import Model, get_model

# Keys of each table, in the order the README documents them.
OUTPUT_KEYS = ("path", "columns", "partition_by", "rows_per_file", "compression",
               "row_group_size")
SENSITIVITY_KEYS = ("of", "wrt", "kind")
SOLVE_KEYS = ("target", "vary")
REDUCE_KEYS = ("top_k", "by", "minimize", "group_by", "pareto", "capacity")
COMPRESSIONS = ("lz4", "zstd", "snappy", "gzip", "none")
KINDS: tuple[str, ...] = ("gradient", "elasticity", "both")
# Sensitivities of these outputs by default, where the model has them.
DEFAULT_OF: tuple[str, ...] = ("step_time_ms", "mfu_percent", "throughput_tokens_s")
MAX_TOP_K = 10_000
MAX_PARETO_CAPACITY = 1_000_000
# jaxmodel calibrate's request: bootstrap resamples for the intervals, layouts to
# suggest measuring next (here, with the other requests' defaults, so that the
# command line's options need no jax).
DEFAULT_BOOTSTRAP = 200
DEFAULT_SUGGEST = 5


# -- the helpers every table uses ---------------------------------------------------------


def check_keys(table: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    """Refuse a key not in ``allowed``:
    ``where: unknown key 'k' (did you mean ...); allowed: ...``."""
    for key in table:
        if key not in allowed:
            raise SpecError(f"{where}: unknown key {key!r}{closest(key, allowed)}; "
                            f"allowed: {', '.join(allowed)}")


def require_keys(table: Mapping[str, Any], required: Sequence[str], where: str,
                 example: str) -> None:
    """Refuse a table missing one of ``required``: ``where: missing key 'k' (e.g. ...)``."""
    for key in required:
        if key not in table:
            raise SpecError(f"{where}: missing key {key!r} (e.g. {example})")


def as_table(value: Any, where: str, what: str = "a table") -> Mapping[str, Any]:
    """``value`` if it is a TOML table, else the one-line error."""
    if not isinstance(value, Mapping):
        raise SpecError.bad(where, value, what)
    return value


def whole_number(value: Any, where: str, low: int = 1, high: int = 2**31 - 1) -> int:
    """An integer (not a bool) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SpecError.bad(where, value, f"a whole number from {low} to {high}")
    return value


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError.bad(where, value, "true or false")
    return value


def name_list(value: Any, where: str, *, what: str = "a list of names") -> tuple[str, ...] | None:
    """A list of names (one name alone stands for a list of one), or None if absent."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError.bad(where, value, what)
    return tuple(value)


def _once(names: Sequence[str], where: str, verb: str = "named") -> None:
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SpecError(f"{where}: {twice[0]!r} is {verb} twice; allowed: each name once")


# -- what a model offers these tables --------------------------------------------------------


def differentiable_outputs(model: Model) -> tuple[str, ...]:
    """Outputs that have derivatives: the float ones."""
    return tuple(f.name for f in model.outputs if f.kind == "float")


def continuous_inputs(model: Model) -> tuple[str, ...]:
    """Inputs differentiated by autodiff (every input that is not stepped)."""
    return model.continuous


def default_of(model: Model) -> tuple[str, ...]:
    """Step time, MFU and throughput where the model has them, else every float output."""
    have = differentiable_outputs(model)
    return tuple(n for n in DEFAULT_OF if n in have) or have


def _float_output(model: Model, name: Any, where: str, why: str) -> str:
    floats = differentiable_outputs(model)
    if name in floats:
        return name
    if name in model.output_names:
        raise SpecError(f"{where}: got {name!r}, a {model.output_field(name).kind} output "
                        f"{why}; allowed: a float output: " + ", ".join(floats))
    raise SpecError(f"{where}: unknown output {name!r} of model {model.name!r}"
                    f"{closest(str(name), floats)}; allowed: a float output "
                    "('jaxmodel eval' lists them)")


# -- sensitivities -------------------------------------------------------------------------


class SensitivityRequest(NamedTuple):
    """Sensitivities of ``of`` (float outputs) to ``wrt`` (inputs), of ``kind``."""

    of: tuple[str, ...]
    wrt: tuple[str, ...]
    kind: str


def check_request(model: Model, of: Sequence[str] | str | None,
                  wrt: Sequence[str] | str | None, kind: str,
                  where: str = "sensitivity") -> SensitivityRequest:
    """Names checked against the model; defaults filled in (every continuous input,
    :func:`default_of`).

    Raises:
      SpecError: one line naming the bad output, input or kind.
    """
    # One name given as a string means that name, not its letters.
    of = (of,) if isinstance(of, str) else of
    wrt = (wrt,) if isinstance(wrt, str) else wrt
    of = default_of(model) if not of else tuple(of)
    wrt = continuous_inputs(model) if not wrt else tuple(wrt)
    for name in of:
        _float_output(model, name, f"{where}.of", "without a derivative")
    for name in wrt:
        if name not in model.input_names:
            raise SpecError(f"{where}.wrt: unknown input {name!r} of model {model.name!r}"
                            f"{closest(name, model.input_names)}; allowed: "
                            + ", ".join(model.input_names))
    _once(of, f"{where}.of")
    _once(wrt, f"{where}.wrt")
    if kind not in KINDS:
        raise SpecError.bad(f"{where}.kind", kind, ", ".join(KINDS))
    return SensitivityRequest(of, wrt, kind)


def parse_sensitivity_table(table: Any, model: Model | str) -> SensitivityRequest:
    """``[sensitivity]``: ``of``, ``wrt`` (lists of names, default as
    :func:`check_request`) and ``kind`` (default ``gradient``)."""
    model = get_model(model)
    table = as_table(table, "sensitivity", "a table with keys " + ", ".join(SENSITIVITY_KEYS))
    check_keys(table, SENSITIVITY_KEYS, "sensitivity")
    of = name_list(table.get("of"), "sensitivity.of")
    wrt = name_list(table.get("wrt"), "sensitivity.wrt")
    kind = table.get("kind", "gradient")
    if not isinstance(kind, str):
        raise SpecError.bad("sensitivity.kind", kind, ", ".join(KINDS))
    return check_request(model, of, wrt, kind)


# -- inverse questions ---------------------------------------------------------------------


class SolveRequest(NamedTuple):
    """Find ``vary`` (a continuous input) where ``output`` (a float output) is ``value``."""

    output: str
    value: float
    vary: str


def parse_target(text: str, where: str = "solve.target") -> tuple[str, str]:
    """``"mfu_percent=60"`` -> ``("mfu_percent", "60")`` (the number checked by
    :func:`check_solve`).

    Raises:
      SpecError: not of the form NAME=NUMBER.
    """
    name, sep, number = str(text).partition("=")
    if not sep:
        raise SpecError.bad(where, text, "OUTPUT=VALUE, e.g. mfu_percent=60")
    return name.strip(), number.strip()


def check_solve(model: Model, output: Any, value: Any, vary: Any,
                where: str = "solve") -> SolveRequest:
    """Names and the target value checked against the model.

    Raises:
      SpecError: one line naming the bad output, input or value.
    """
    output = _float_output(model, output, f"{where}.target", "that cannot be solved for")
    cont = continuous_inputs(model)
    if vary not in cont:
        if vary in model.input_names:
            raise SpecError(f"{where}.vary: got {vary!r}, a stepped input, not continuous; "
                            "allowed: " + ", ".join(cont))
        raise SpecError(f"{where}.vary: unknown input {vary!r} of model {model.name!r}"
                        f"{closest(str(vary), cont)}; allowed: a continuous input: "
                        + ", ".join(cont))
    try:
        target = float(value)
    except (TypeError, ValueError):
        target = None
    if target is None or isinstance(value, bool) or not math.isfinite(target):
        what = "not a number" if target is None or isinstance(value, bool) else "not finite"
        raise SpecError(f"{where}.target: got {value!r} for {output}, {what}; allowed: "
                        "a finite number")
    return SolveRequest(output, target, vary)


def parse_solve_table(table: Any, model: Model | str) -> SolveRequest:
    """``[solve]``: ``target = "mfu_percent=60"`` (or ``{mfu_percent = 60}``) and
    ``vary``, a continuous input."""
    model = get_model(model)
    table = as_table(table, "solve", "a table with keys " + ", ".join(SOLVE_KEYS))
    check_keys(table, SOLVE_KEYS, "solve")
    require_keys(table, SOLVE_KEYS, "solve",
                 f"target = \"{default_of(model)[0]}=...\", vary = \"{model.continuous[0]}\"")
    target, vary = table["target"], table["vary"]
    if isinstance(target, Mapping):
        if len(target) != 1:
            raise SpecError.bad("solve.target", dict(target), "one OUTPUT = VALUE")
        output, value = next(iter(target.items()))
    elif isinstance(target, str):
        output, value = parse_target(target)
    else:
        raise SpecError.bad("solve.target", target, "\"OUTPUT=VALUE\"")
    if not isinstance(vary, str):
        raise SpecError.bad("solve.vary", vary, "an input name")
    return check_solve(model, output, value, vary)


# -- reductions ----------------------------------------------------------------------------


def parse_reduce_table(table: Any):
    """``[reduce]``: the on-device reduction, a ``TopK``, ``GroupBest`` or ``Pareto``.

    One of::

        [reduce]                    # the k best rows
        top_k = 100
        by = "throughput_tokens_s"  # maximised; minimize = true for times
        [reduce]                    # the best row per group
        by = "mfu_percent"
        group_by = ["num_gpus"]     # varied inputs or category outputs
        [reduce]                    # the Pareto front of two columns
        pareto = ["used_gpus", "step_time_ms"]   # both minimised by default
        minimize = [true, true]

    Whether the columns exist is checked by the plan, which knows every column.
    """
    from jaxmodel.reduce import GroupBest, Pareto, TopK

    table = as_table(table, "reduce")
    check_keys(table, REDUCE_KEYS, "reduce")
    modes = [k for k in ("top_k", "group_by", "pareto") if k in table]
    if len(modes) != 1:
        raise SpecError.bad("reduce", sorted(table), "exactly one of top_k, group_by or pareto")
    if modes == ["pareto"]:
        pair = table["pareto"]
        if not (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(c, str) for c in pair)):
            raise SpecError.bad("reduce.pareto", pair, "[x, y], two column names")
        mins = table.get("minimize", [True, True])
        if not (isinstance(mins, list) and len(mins) == 2
                and all(isinstance(m, bool) for m in mins)):
            raise SpecError.bad("reduce.minimize", mins, "with pareto, [bool, bool]")
        capacity = whole_number(table.get("capacity", 4096), "reduce.capacity",
                                high=MAX_PARETO_CAPACITY)
        return Pareto(pair[0], pair[1], mins[0], mins[1], capacity)
    if "capacity" in table:
        raise SpecError.bad("reduce.capacity", table["capacity"], "only with pareto")
    minimize = flag(table.get("minimize", False), "reduce.minimize")
    by = table.get("by")
    if not isinstance(by, str):
        raise SpecError.bad("reduce.by", by, "the column to rank by")
    if modes == ["top_k"]:
        k = whole_number(table["top_k"], "reduce.top_k", high=MAX_TOP_K)
        return TopK(by, k, not minimize)
    group_by = name_list(table["group_by"], "reduce.group_by", what="a list of column names")
    if not group_by:
        raise SpecError.bad("reduce.group_by", table["group_by"], "a list of column names")
    return GroupBest(by, group_by, not minimize)


# -- output ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputSettings:
    """``[output]``: where and how the dataset is written (see ``jaxmodel.spec``)."""

    path: str | None = None
    columns: tuple[str, ...] | None = None
    partition_by: tuple[str, ...] = ()
    rows_per_file: int = 4_000_000
    row_group_size: int = 1_048_576
    compression: str = "lz4"


def parse_output_table(table: Any) -> OutputSettings:
    """``[output]``: ``path``, ``columns``, ``partition_by``, ``rows_per_file``,
    ``row_group_size`` and ``compression``."""
    table = as_table(table, "output")
    check_keys(table, OUTPUT_KEYS, "output")
    kw: dict[str, Any] = {}
    if "path" in table:
        if not isinstance(table["path"], str) or not table["path"]:
            raise SpecError.bad("output.path", table["path"], "a directory path")
        kw["path"] = table["path"]
    for key in ("columns", "partition_by"):
        if key in table:
            names = name_list(table[key], f"output.{key}", what="a list of column names")
            if key == "columns" and not names:
                raise SpecError.bad("output.columns", table[key],
                                    "one column or more (omit it to keep every column)")
            _once(names, f"output.{key}", verb="listed")
            kw[key] = names
    for key in ("rows_per_file", "row_group_size"):
        if key in table:
            kw[key] = whole_number(table[key], f"output.{key}")
    if "compression" in table:
        c = table["compression"]
        if c not in COMPRESSIONS:
            raise SpecError.bad("output.compression", c, ", ".join(COMPRESSIONS))
        kw["compression"] = c
    return OutputSettings(**kw)


# -- all of them -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Tables:
    """A spec's tables beside the grid, each validated (None: the table is absent)."""

    output: OutputSettings = OutputSettings()
    sensitivity: SensitivityRequest | None = None
    solve: SolveRequest | None = None
    reduce: Any = None


def parse_tables(data: Mapping[str, Any], model: Model) -> Tables:
    """Every table of a spec's TOML beside the grid, checked against ``model``.

    Raises:
      SpecError: one line for the first bad key, value or name.
    """
    return Tables(
        output=parse_output_table(data.get("output", {})),
        sensitivity=(parse_sensitivity_table(data["sensitivity"], model)
                     if "sensitivity" in data else None),
        solve=parse_solve_table(data["solve"], model) if "solve" in data else None,
        reduce=parse_reduce_table(data["reduce"]) if "reduce" in data else None,
    )
