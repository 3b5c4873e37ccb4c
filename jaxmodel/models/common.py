"""Helpers every model shares: input-field builders, counts, masking, stepped inputs.

A model module builds its fields with these (so that every count has the same
domain) and computes with :func:`whole` and :func:`masked`; its ``steps``
(``Model.steps``) are usually ``switch_steps(INPUTS)`` plus a rule for the
replica count (``jaxmodel.models.layout``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxmodel.deferred import jnp
from jaxmodel.fields import InputField

# Counts are carried as floats (so they can be relaxed and differentiated);
# 2**24 keeps every whole number exactly representable in float32.
MAX_COUNT = float(2**24)
# An integer input with at most this many allowed values is a switch (a flag,
# a mode), not a count: it has no continuous relaxation.
SWITCH_VALUES = 5


def count(name: str, unit: str, doc: str, default: float, high: float | None = MAX_COUNT,
          low: float = 1.0) -> InputField:
    """A whole-number input ``>= low`` (a count of GPUs, ways, layers...)."""
    return InputField(name, unit, doc, True, low, True, float(default), high)


def switch(name: str, doc: str, default: float, high: float = 1.0) -> InputField:
    """A numeric-coded switch: a whole number from 0 to ``high``."""
    return InputField(name, "code", doc, True, 0.0, True, float(default), high)


def positive(name: str, unit: str, doc: str, default: float,
             high: float | None = None) -> InputField:
    """A real input ``> 0``."""
    return InputField(name, unit, doc, False, 0.0, False, float(default), high)


def whole(x):
    """A relaxed count as an exact int64 (zero gradient: counts are steps)."""
    return jnp.round(x).astype(jnp.int64)


def masked(valid, value, dtype):
    """``value`` where ``valid``, else NaN, in ``dtype`` (an invalid row's metric)."""
    return jnp.where(valid, value, jnp.nan).astype(dtype)


def _next_switch_value(name: str, high: float) -> Callable[[Any], Any]:
    """The next allowed value of a switch (the previous one at the top)."""

    def next_value(x):
        v = jnp.round(getattr(x, name))
        return jnp.where(v + 1.0 <= high, v + 1.0, v - 1.0)

    return next_value


def next_whole_value(name: str) -> Callable[[Any], Any]:
    """``Model.steps`` rule for a count that acts through a staircase (``ceil`` or
    ``floor`` of a ratio), so that its local slope is 0 or an artefact of a
    relaxation: the discrete difference to the next whole value."""

    def next_value(x):
        return jnp.round(getattr(x, name)) + 1.0

    return next_value


def switch_steps(inputs: tuple[InputField, ...]) -> dict[str, Callable[[Any], Any]]:
    """``Model.steps`` entries for every switch among ``inputs``: an integer
    input with at most ``SWITCH_VALUES`` allowed values, stepped to the next
    allowed value (the previous one at the top of the range)."""
    return {f.name: _next_switch_value(f.name, f.high) for f in inputs
            if f.integer and f.high is not None and f.high - f.low < SWITCH_VALUES}
