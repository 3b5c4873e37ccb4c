"""SQL building: the filters of a request, as a WHERE clause with bound parameters.

Safety: SQL text is assembled only from column names checked against the
dataset's schema (then quoted, :func:`~jaxmodel.dashboard.sources.quote`) and
fixed keywords; every value from a request (a bound, a category, a number of a
filter) is a bound parameter.  The free filter box is parsed by the project's
own filter parser (:mod:`jaxmodel.expr`) into a tree, which is translated here;
its text never reaches DuckDB.

NaN (an invalid layout's metrics) follows the filter language's numpy
semantics, not DuckDB's (where NaN is larger than every number): a comparison
with NaN is false (``!=`` true), and aggregates skip NaN, as
``jaxmodel plot heatmap`` does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jaxmodel.dashboard.sources import ColumnInfo, DashboardError, Source, quote
from jaxmodel.errors import JaxmodelError
from jaxmodel.expr import Node, parse


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
