"""Field descriptions shared by the model, the CLI, sweep specs and the Parquet schema.

Every input and output of a model is described once here-in-shape: its name
(with the unit in the name), its unit, a one-line meaning, and for inputs the
domain a value must lie in.  The CLI builds its options from these, sweep specs
validate against them, and the Parquet sink writes them as field metadata.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

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

    def check_scalar(self, value: object) -> float:
        """Validate one host value; return it as a Python float.

        Raises:
          InputError: naming the field, the value and what is allowed.
        """
        if isinstance(value, bool):  # JSON/TOML true is not the count 1
            raise InputError(self.name, value, self.allowed())
        if not isinstance(value, (int, float)):
            try:
                value = float(value)  # numpy scalars, strings of numbers
            except (TypeError, ValueError):
                raise InputError(self.name, value, self.allowed()) from None
        x = float(value)
        # Whole numbers are shown as such ("got 0", not "got 0.0" for "--num-gpus 0").
        shown = int(x) if math.isfinite(x) and x.is_integer() else x
        if not math.isfinite(x):
            raise InputError(self.name, shown, self.allowed())
        if self.integer and x != math.floor(x):
            raise InputError(self.name, shown, self.allowed())
        if x < self.low or (x == self.low and not self.low_inclusive):
            raise InputError(self.name, shown, self.allowed())
        if self.high is not None and x > self.high:
            raise InputError(self.name, shown, self.allowed())
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


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))
