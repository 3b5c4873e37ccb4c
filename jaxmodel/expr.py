"""Filter expressions over sweep columns, parsed safely (no ``eval``).

Grammar (lowest precedence first)::

    expr       := and_expr ("or" and_expr)*
    and_expr   := not_expr ("and" not_expr)*
    not_expr   := "not" not_expr | comparison
    comparison := sum (("<" | "<=" | ">" | ">=" | "==" | "!=") sum)?
    sum        := product (("+" | "-") product)*
    product    := unary (("*" | "/") unary)*
    unary      := "-" unary | atom
    atom       := NUMBER | STRING | NAME | "true" | "false" | "(" expr ")"
                | ("abs" | "min" | "max" | "log" | "sqrt") "(" expr ("," expr)* ")"

Names are column names (inputs, outputs and extra columns such as
sensitivities).  A category column (``bottleneck``, ``regime``) compares with
a quoted name: ``bottleneck == "tp_comm"``.  ``&&``, ``||`` and ``!`` are
accepted for ``and``, ``or`` and ``not``.  The same tree evaluates on the
device (jax, inside the sweep's jitted step) and as a pyarrow dataset filter
(for reading datasets with pushdown).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxmodel.errors import SpecError, closest

_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<str>\"[^\"]*\"|'[^']*')"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op><=|>=|==|!=|&&|\|\||[-+*/()<>!,]))"
)
_FUNCTIONS = {"abs": 1, "min": 2, "max": 2, "log": 1, "sqrt": 1}
# Parsing and evaluating are recursive: nesting (parentheses, function calls,
# not, unary minus) and the depth of the finished tree (a chain of 1,000 "and"
# is 1,000 levels deep) are capped well below Python's recursion limit.
MAX_NESTING = 32
MAX_DEPTH = 200
MAX_TOKENS = 10_000
MAX_CHARACTERS = 100_000  # room for MAX_TOKENS words and symbols of ten characters
_SPACE = re.compile(r"\s*")
_COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


@dataclass(frozen=True)
class Node:
    """One node of a parsed expression: ``op`` and its ``args``.

    ``op`` is ``"num"`` (args: float), ``"str"`` (args: text), ``"col"`` (args:
    name), ``"bool"``, a function name, or an operator.
    """

    op: str
    args: tuple

    def columns(self) -> set[str]:
        """The column names the expression reads."""
        if self.op == "col":
            return {self.args[0]}
        out: set[str] = set()
        for a in self.args:
            if isinstance(a, Node):
                out |= a.columns()
        return out


@dataclass(frozen=True)
class Expr:
    """A parsed expression with its source text."""

    text: str
    root: Node

    def columns(self) -> set[str]:
        return self.root.columns()

    def evaluate_jax(self, cols: Mapping[str, Any], categories: Mapping[str, tuple[str, ...]]):
        """Evaluate on jax arrays (inside jit); category columns hold int codes."""
        import jax.numpy as jnp

        return _eval(self.root, cols, categories, _JAX_OPS(jnp))

    def evaluate_numpy(self, cols: Mapping[str, Any], categories: Mapping[str, tuple[str, ...]]):
        """Evaluate on numpy arrays (host); category columns hold int codes."""
        import numpy as np

        return _eval(self.root, cols, categories, _JAX_OPS(np))

    def check_condition(self, booleans: set[str], categories: Mapping[str, Any]) -> None:
        """Check that the expression is a condition and every operand has the
        right kind: ``and``/``or``/``not`` take conditions; arithmetic and
        ordering take numbers; a category column compares only with ``==`` or
        ``!=`` against one of its quoted names.

        Args:
          booleans: the boolean columns; categories: the category columns.

        Raises:
          SpecError: one line saying what is wrong.
        """
        if _kind(self.root, booleans, categories, self.text) != "bool":
            raise SpecError(f"filter: {self.text!r} is not a condition (compare a value, "
                            "e.g. mfu_percent >= 40, or name a boolean column such as "
                            "valid_layout)")

    def to_arrow(self, schema=None):
        """A ``pyarrow.compute.Expression`` for dataset filters (category columns
        are dictionary-encoded strings there, so they compare with names).

        With ``schema`` (the dataset's ``pyarrow.Schema``), numbers are typed
        as on the device, so that a filter keeps the same rows in a sweep and in
        a scan of what it wrote: a literal takes the type of the column it meets
        (``matmul_efficiency == 0.7`` compares with float32(0.7) on a float32
        column; a whole literal against an integer column is an integer), and
        columns combine by jax's promotion rules (see :func:`_typed_arrow`).
        Without it, literals are float64 scalars and arrow's own rules apply.
        """
        import pyarrow.compute as pc

        if schema is None:
            return _arrow(self.root, pc)
        import pyarrow as pa

        types = {f.name: f.type for f in schema}
        expr, _ = _typed_arrow(self.root, types, pa, pc)
        return expr if isinstance(expr, pc.Expression) else pc.scalar(bool(expr))


def _JAX_OPS(xp) -> dict[str, Callable]:
    return {
        "or": xp.logical_or, "and": xp.logical_and, "not": xp.logical_not,
        "<": xp.less, "<=": xp.less_equal, ">": xp.greater, ">=": xp.greater_equal,
        "==": xp.equal, "!=": xp.not_equal,
        "+": xp.add, "-": xp.subtract, "*": xp.multiply, "/": xp.divide, "neg": xp.negative,
        "abs": xp.abs, "min": xp.minimum, "max": xp.maximum, "log": xp.log, "sqrt": xp.sqrt,
    }


def _kind(node: Node, booleans, categories, text: str) -> str:
    """``bool``, ``num``, ``str`` or ``cat``: the kind of value a node gives."""
    op = node.op
    if op == "bool":
        return "bool"
    if op == "num":
        return "num"
    if op == "str":
        return "str"
    if op == "col":
        name = node.args[0]
        return "bool" if name in booleans else "cat" if name in categories else "num"
    kinds = [_kind(a, booleans, categories, text) for a in node.args]
    if op in ("and", "or", "not"):
        if any(k != "bool" for k in kinds):
            raise SpecError(f"filter: '{op}' joins conditions, in {text!r}")
        return "bool"
    if op in _COMPARISONS:
        if "cat" in kinds or "str" in kinds:
            a, b = node.args
            pair = {kinds[0], kinds[1]}
            if op not in ("==", "!=") or pair != {"cat", "str"}:
                raise SpecError(
                    f"filter: a category column compares with == or != to one of its "
                    f"quoted names (e.g. bottleneck == \"tp_comm\"), in {text!r}")
            return "bool"
        if "bool" in kinds and set(kinds) != {"bool"}:
            raise SpecError(f"filter: a condition compared with a number, in {text!r}")
        return "bool"
    if any(k != "num" for k in kinds):
        raise SpecError(f"filter: '{op}' takes numbers, in {text!r}")
    return "num"


def _category_code(node: Node, other: Node, categories) -> int | None:
    """The code of a quoted name compared with a category column, else None."""
    if node.op == "str" and other.op == "col" and other.args[0] in categories:
        names = categories[other.args[0]]
        if node.args[0] not in names:
            raise SpecError(
                f"filter: {node.args[0]!r} is not a value of {other.args[0]} "
                f"(one of {', '.join(names)})"
            )
        return names.index(node.args[0])
    return None


def _eval(node: Node, cols, categories, ops):
    if node.op == "num":
        return node.args[0]
    if node.op == "bool":
        return node.args[0]
    if node.op == "col":
        return cols[node.args[0]]
    if node.op == "str":
        raise SpecError(f"filter: the text {node.args[0]!r} only compares with a category column")
    if node.op in _COMPARISONS:
        a, b = node.args
        code_b = _category_code(b, a, categories)
        code_a = _category_code(a, b, categories)
        left = code_a if code_a is not None else _eval(a, cols, categories, ops)
        right = code_b if code_b is not None else _eval(b, cols, categories, ops)
        return ops[node.op](left, right)
    return ops[node.op](*(_eval(a, cols, categories, ops) for a in node.args))


def _arrow(node: Node, pc):
    if node.op in ("num", "bool", "str"):
        return pc.scalar(node.args[0])
    if node.op == "col":
        return pc.field(node.args[0])
    return _ARROW_OPS[node.op](*(_arrow(a, pc) for a in node.args))


def _arrow_op(name: str):
    """The arrow compute function ``name`` as an expression builder (imported late)."""
    def build(*args):
        import pyarrow.compute as pc

        return getattr(pc, name)(*args)
    return build


_ARROW_OPS: dict[str, Callable] = {
    "or": lambda a, b: a | b, "and": lambda a, b: a & b, "not": lambda a: ~a,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: a / b, "neg": _arrow_op("negate"), "abs": _arrow_op("abs"),
    "min": _arrow_op("min_element_wise"), "max": _arrow_op("max_element_wise"),
    "log": _arrow_op("ln"), "sqrt": _arrow_op("sqrt"),
}


# Literals and what the device does with them (jax's type promotion, with
# 64-bit types on as in every entry point): a number literal is "weak" and
# takes the type of the array it meets; int64 with a weak float, int64 / int64,
# and log/sqrt of an integer give float64; an integer with float32 gives
# float32; float32 with float64 gives float64.  ``_typed_arrow`` follows the
# same rules on arrow types, so the value of every node is the device's.
_WEAK = "weak"


def _arrow_kind(t, pa) -> str:
    """``int``, ``f32``, ``f64``, ``bool`` or ``other`` for an arrow type."""
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_float32(t) or pa.types.is_float16(t):
        return "f32"
    if pa.types.is_floating(t):
        return "f64"
    if pa.types.is_boolean(t):
        return "bool"
    return "other"


def _as_float(expr, kind, pa, target: str):
    """``expr`` of ``kind`` cast to float32 or float64 (no-op when it already is).

    Unsafe casts: int64 -> float32 rounds, as jax's promotion does, instead of
    raising arrow's "Integer value ... not in range".
    """
    if kind == target:
        return expr
    return expr.cast(pa.float32() if target == "f32" else pa.float64(), safe=False)


def _literal(value: float, kind: str, pa, pc):
    return pc.scalar(pa.scalar(value, pa.float32() if kind == "f32" else pa.float64()))


def _promote(a, b):
    """jax's result kind of two numeric kinds (``weak`` = a literal)."""
    if a == _WEAK:
        return "f64" if b in ("int", _WEAK) else b
    if b == _WEAK:
        return _promote(b, a)
    if a == b:
        return a
    if "f64" in (a, b):
        return "f64"
    return "f32"  # int with float32


def _typed_arrow(node: Node, types, pa, pc):
    """``(expression or folded Python float, kind)`` of a node, typed as on the device.

    Literal-only subtrees fold to Python floats (kind ``weak``), so that a
    literal is cast once, to the type of what it meets.
    """
    op = node.op
    if op == "num":
        return float(node.args[0]), _WEAK
    if op in ("bool", "str"):
        return pc.scalar(node.args[0]), "other"
    if op == "col":
        name = node.args[0]
        return pc.field(name), _arrow_kind(types[name], pa) if name in types else "other"
    args = [_typed_arrow(a, types, pa, pc) for a in node.args]
    kinds = [k for _, k in args]
    result = "bool" if op in _COMPARISONS or op in ("and", "or", "not") else None
    if all(k == _WEAK for k in kinds):  # a constant: fold in float64, as jax does
        with np.errstate(all="ignore"):
            value = _JAX_OPS(np)[op](*(np.float64(v) for v, _ in args))
        return (pc.scalar(bool(value)), "bool") if result else (float(value), _WEAK)
    if any(k in ("bool", "other") for k in kinds):
        # Conditions, booleans and categories: no numbers to type.
        vals = [pc.scalar(v) if k == _WEAK else v for v, k in args]
        return _ARROW_OPS[op](*vals), result or kinds[0]
    if op in ("neg", "abs"):
        (v, k), = args
        return _ARROW_OPS[op](v), k
    if op in ("log", "sqrt"):
        (v, k), = args
        target = "f32" if k == "f32" else "f64"
        return _ARROW_OPS[op](_as_float(v, k, pa, target)), target
    (a, ka), (b, kb) = args
    if result and {ka, kb} == {"int", _WEAK}:
        # A count against a literal: exact in int64 when the literal is whole
        # (the device compares in float64, exact for every count a sweep holds);
        # a fractional literal falls through to float64.
        lit = b if ka == "int" else a
        if np.isfinite(lit) and lit == int(lit) and abs(lit) < 2.0**63:
            scalar = pc.scalar(pa.scalar(int(lit), pa.int64()))
            a, b = (a, scalar) if ka == "int" else (scalar, b)
            return _ARROW_OPS[op](a, b), result
    kind = _promote(ka, kb)
    if op == "/" and kind == "int":
        kind = "f64"  # true division, as jnp.divide
    if kind != "int":
        a = _literal(a, kind, pa, pc) if ka == _WEAK else _as_float(a, ka, pa, kind)
        b = _literal(b, kind, pa, pc) if kb == _WEAK else _as_float(b, kb, pa, kind)
    return _ARROW_OPS[op](a, b), result or kind


class _Parser:
    def __init__(self, text: str, columns: set[str] | None):
        self.text = text
        self.columns = columns
        self.tokens: list[tuple[str, str, int]] = []
        if len(text) > MAX_CHARACTERS:  # before any work: a 20 MB filter pinned a thread
            raise SpecError(f"filter: {_short(text)} is {len(text):,} characters long; allowed: "
                            f"at most {MAX_CHARACTERS:,}")
        pos = 0
        while pos < len(text):
            # Linear: each step looks only at what follows pos (text[pos:].strip()
            # per token made a long filter quadratic).
            at = _SPACE.match(text, pos).end()
            if at == len(text):
                break
            m = _TOKEN.match(text, pos)
            if not m:
                raise SpecError(f"filter: cannot read {text[at:at + 20]!r} "
                                f"at position {at} of {_short(text)}")
            kind = m.lastgroup
            self.tokens.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
            if len(self.tokens) > MAX_TOKENS:
                raise SpecError(f"filter: {_short(text)} is too long (more than {MAX_TOKENS:,} "
                                "words and symbols); write a shorter condition")
        self.i = 0
        self.nesting = 0

    def nest(self) -> None:
        """Enter one level of nesting (a parenthesis, a call, not, unary minus)."""
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise SpecError(f"filter: {_short(self.text)} nests more than {MAX_NESTING} levels "
                            "(parentheses, not, unary minus); simplify it")

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, *values: str) -> str | None:
        tok = self.peek()
        if tok and tok[0] in ("op", "name") and tok[1] in values:
            self.i += 1
            return tok[1]
        return None

    def expect(self, value: str) -> None:
        if not self.take(value):
            tok = self.peek()
            found = "the end" if tok is None else repr(tok[1])
            raise SpecError(f"filter: expected {value!r} but found {found} in {self.text!r}")

    def parse(self) -> Node:
        if not self.tokens:
            raise SpecError("filter: empty expression")
        node = self.or_expr()
        tok = self.peek()
        if tok is not None:
            raise SpecError(f"filter: unexpected {tok[1]!r} at position {tok[2]} of {self.text!r}")
        return node

    def or_expr(self) -> Node:
        node = self.and_expr()
        while self.take("or", "||"):
            node = Node("or", (node, self.and_expr()))
        return node

    def and_expr(self) -> Node:
        node = self.not_expr()
        while self.take("and", "&&"):
            node = Node("and", (node, self.not_expr()))
        return node

    def not_expr(self) -> Node:
        if self.take("not", "!"):
            self.nest()
            node = Node("not", (self.not_expr(),))
            self.nesting -= 1
            return node
        return self.comparison()

    def comparison(self) -> Node:
        node = self.sum()
        op = self.take(*_COMPARISONS)
        if op:
            node = Node(op, (node, self.sum()))
            if self.peek() and self.peek()[1] in _COMPARISONS:
                raise SpecError(f"filter: chained comparison in {self.text!r}; "
                                "join comparisons with 'and'")
        return node

    def sum(self) -> Node:
        node = self.product()
        while op := self.take("+", "-"):
            node = Node(op, (node, self.product()))
        return node

    def product(self) -> Node:
        node = self.unary()
        while op := self.take("*", "/"):
            node = Node(op, (node, self.unary()))
        return node

    def unary(self) -> Node:
        if self.take("-"):
            self.nest()
            node = Node("neg", (self.unary(),))
            self.nesting -= 1
            return node
        return self.atom()

    def atom(self) -> Node:
        tok = self.peek()
        if tok is None:
            raise SpecError(f"filter: {self.text!r} ends too early")
        kind, value, pos = tok
        self.i += 1
        if kind == "num":
            return Node("num", (float(value),))
        if kind == "str":
            return Node("str", (value[1:-1],))
        if kind == "op" and value == "(":
            self.nest()
            node = self.or_expr()
            self.expect(")")
            self.nesting -= 1
            return node
        if kind == "name":
            if value in ("true", "false", "True", "False"):
                return Node("bool", (value.lower() == "true",))
            if value in _FUNCTIONS and self.take("("):
                self.nest()
                args = [self.or_expr()]
                while self.take(","):
                    args.append(self.or_expr())
                self.expect(")")
                self.nesting -= 1
                if len(args) != _FUNCTIONS[value]:
                    raise SpecError(f"filter: {value}() takes {_FUNCTIONS[value]} argument(s)")
                return Node(value, tuple(args))
            if self.columns is not None and value not in self.columns:
                raise SpecError(
                    f"filter: unknown column {value!r}{closest(value, self.columns)}"
                )
            return Node("col", (value,))
        raise SpecError(f"filter: unexpected {value!r} at position {pos} of {self.text!r}")


def parse(text: str, columns: set[str] | None = None) -> Expr:
    """Parse a filter expression; with ``columns``, unknown names are an error.

    Raises:
      SpecError: one line saying what is wrong and where.
    """
    if not isinstance(text, str):
        raise SpecError(f"filter: expected a string, got {text!r}")
    root = _Parser(text, columns).parse()
    if root.op in ("num", "str"):
        raise SpecError(f"filter: {text!r} is not a condition")
    depth = _depth(root)
    if depth > MAX_DEPTH:
        raise SpecError(f"filter: {_short(text)} is {depth:,} operations deep (at most "
                        f"{MAX_DEPTH}); write a shorter condition")
    return Expr(text, root)


def _depth(root: Node) -> int:
    """Depth of the tree, without recursion (the tree may be deeper than the stack)."""
    deepest, stack = 0, [(root, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((a, d + 1) for a in node.args if isinstance(a, Node))
    return deepest


def _short(text: str) -> str:
    """The expression for a one-line message: quoted, long ones cut in the middle."""
    return repr(text) if len(text) <= 60 else repr(text[:40] + " ... " + text[-15:])
