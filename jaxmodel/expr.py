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

    def to_arrow(self):
        """A ``pyarrow.compute.Expression`` for dataset filters (category columns
        are dictionary-encoded strings there, so they compare with names)."""
        import pyarrow.compute as pc

        return _arrow(self.root, pc)


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
    args = [_arrow(a, pc) for a in node.args]
    table = {
        "or": lambda a, b: a | b, "and": lambda a, b: a & b, "not": lambda a: ~a,
        "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
        "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "/": lambda a, b: a / b, "neg": lambda a: pc.negate(a), "abs": lambda a: pc.abs(a),
        "min": lambda a, b: pc.min_element_wise(a, b),
        "max": lambda a, b: pc.max_element_wise(a, b),
        "log": lambda a: pc.ln(a), "sqrt": lambda a: pc.sqrt(a),
    }
    return table[node.op](*args)


class _Parser:
    def __init__(self, text: str, columns: set[str] | None):
        self.text = text
        self.columns = columns
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m:
                at = len(text) - len(text[pos:].lstrip())
                raise SpecError(f"filter: cannot read {text[at:at + 20]!r} "
                                f"at position {at} of {text!r}")
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
