"""Field descriptions shared by the model, the CLI, sweep specs and the Parquet schema.

Every input and output of a model is described once here-in-shape: its name
(with the unit in the name), its unit, a one-line meaning, and for inputs the
domain a value must lie in.  The CLI builds its options from these, sweep specs
validate against them, and the Parquet sink writes them as field metadata.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from jaxmodel.deferred import jnp
from jaxmodel.errors import InputError

OutputKind = Literal["int", "float", "bool", "category"]


@dataclass(frozen=True)
class InputField:
    """One model input.

    Attributes:
      name: the keyword / column name, unit in the name (``link_bandwidth_gb_s``).
      unit: human unit, e.g. ``"GB/s (1 GB = 1e9 bytes)"``.
      doc: one-line meaning.
      integer: the value must be a whole number (counts, ways, stages).
      low: smallest allowed value.
      low_inclusive: whether ``low`` itself is allowed (``False`` for "> 0").
      high: largest allowed value (inclusive), or ``None``.
      default: the seed value.
    """

    name: str
    unit: str
    doc: str
    integer: bool
    low: float
    low_inclusive: bool
    default: float
    high: float | None = None

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    def allowed(self) -> str:
        """What is allowed, in words, for error messages."""
        kind = "a whole number" if self.integer else "a finite number"
        bound = f">= {_fmt(self.low)}" if self.low_inclusive else f"> {_fmt(self.low)}"
        text = f"{kind} {bound}"
        if self.high is not None:
            text += f" and <= {_fmt(self.high)}"
        return text

    def check_scalar(self, value: object, *, text: bool = False) -> float:
        """Validate one host value; return it as a Python float.

        ``text``: the value comes from the command line, so a string of a
        number is read as that number (in files and specs, text is an error).

        Raises:
          InputError: naming the field, the value and what is allowed.
        """
        if isinstance(value, bool):  # JSON/TOML true is not the count 1
            raise InputError(self.name, value, self.allowed())
        if isinstance(value, str) and not text:
            raise InputError(self.name, value, self.allowed() + " (a number, not text)")
        if not isinstance(value, (int, float)):
            try:
                value = float(value)  # numpy scalars; command-line text
            except (TypeError, ValueError):
                raise InputError(self.name, value, self.allowed()) from None
        try:
            x = float(value)
        except OverflowError:  # a whole number beyond float range (JSON has no limit)
            raise InputError(self.name, value, self.allowed()) from None
        # Whole numbers are shown as such ("got 0", not "got 0.0" for "--num-gpus 0").
        shown = int(x) if math.isfinite(x) and x.is_integer() and abs(x) < 1e16 else x
        if not math.isfinite(x):
            raise InputError(self.name, shown, self.allowed())
        if self.integer and x != math.floor(x):
            raise InputError(self.name, shown, self.allowed())
        if x < self.low or (x == self.low and not self.low_inclusive):
            raise InputError(self.name, shown, self.allowed())
        if self.high is not None and x > self.high:
            raise InputError(self.name, shown, self.allowed())
        if not in_float32_range(x):
            raise InputError(self.name, shown, self.allowed() + FLOAT32_NOTE)
        return x


@dataclass(frozen=True)
class OutputField:
    """One model output (a column of a sweep).

    Attributes:
      name: column name, unit in the name.
      unit: human unit ("ms", "%", "" for counts and flags).
      doc: one-line meaning.
      kind: ``int`` (exact int64), ``float`` (float32, or float64 with x64),
        ``bool``, or ``category`` (a small integer code into ``categories``).
      categories: the names table for ``category`` outputs.
    """

    name: str
    unit: str
    doc: str
    kind: OutputKind
    categories: tuple[str, ...] = ()


# Inputs are computed in float32 unless x64 is asked for: a value outside
# float32's normal range would silently become inf or 0 there.
FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 1.1754943508222875e-38
FLOAT32_NOTE = " and within float32's range (1.2e-38 to 3.4e38)"


def in_float32_range(x):
    """Whether ``|x|`` is 0 or a normal float32 magnitude (numpy arrays too)."""
    a = np.abs(x)
    return (a == 0) | ((a >= FLOAT32_TINY) & (a <= FLOAT32_MAX))


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def check_values(field: InputField, value: Any) -> np.ndarray:
    """``value`` as a float64 array, every element in ``field``'s domain.

    Raises:
      InputError: for a non-numeric value or the first element out of domain.
    """
    arr = np.asarray(value)
    # jnp.issubdtype also knows jax's extra dtypes (bfloat16, float8, int4),
    # which numpy reports as kind "V" (asked only then: such a value comes from
    # jax, already imported; numbers from a spec or a command line never import it).
    numeric = arr.dtype.kind in "iuf" or (arr.dtype.kind == "V" and (
        jnp.issubdtype(arr.dtype, jnp.integer) or jnp.issubdtype(arr.dtype, jnp.floating)))
    if arr.dtype == bool or not numeric:
        if arr.ndim == 0:
            field.check_scalar(value)  # raises with the offending value
        raise InputError(field.name, value, field.allowed() + " (numeric values)")
    arr = arr.astype(np.float64)
    bad = ~np.isfinite(arr)
    if field.integer:
        bad |= arr != np.floor(np.where(np.isfinite(arr), arr, 0.0))
    with np.errstate(invalid="ignore"):
        bad |= arr < field.low if field.low_inclusive else arr <= field.low
        if field.high is not None:
            bad |= arr > field.high
    allowed = field.allowed()
    if not bad.any() and not np.all(in_float32_range(arr)):
        bad = ~in_float32_range(arr)
        allowed += FLOAT32_NOTE
    if bad.any():
        first = arr.flat[int(np.argmax(bad.ravel()))]
        shown = int(first) if field.integer and float(first).is_integer() else float(first)
        raise InputError(field.name, shown, allowed)
    return arr
