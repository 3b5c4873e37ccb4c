"""What every cost model offers the engine: fields, a pure function, a verdict."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from jaxmodel.errors import InputError
from jaxmodel.fields import InputField, OutputField

# An exact int64 output is a product of counts; keeping the product <= 2**62
# leaves a factor of two to 2**63, so a float64 check of it is never fooled.
MAX_EXACT_PRODUCT = 2**62


@dataclass(frozen=True)
class Model:
    """A cost model as the engine sees it.

    Attributes:
      name: the name users select it by (``--model seed``).
      description: one line, printed as ``model`` in ``jaxmodel eval`` JSON.
      inputs: input fields, in order; ``inputs_type(*values)`` builds the pytree.
      outputs: output fields, in order; the fields of ``outputs_type``.
      inputs_type: a ``NamedTuple`` of scalars (one configuration).
      outputs_type: a ``NamedTuple`` of scalars.
      apply: the pure model, ``apply(inputs) -> outputs`` for ONE configuration;
        callers ``jax.vmap`` it.  Inputs are floating point (counts are relaxed
        to floats so that they can be differentiated); integer outputs are int64.
      verdict: host-side text for one configuration,
        ``verdict(inputs: Mapping[str, float], outputs: Mapping[str, Any]) -> str``.
      exact_products: ``(output, inputs)`` pairs: an exact int64 output bounded
        by the product of those count inputs (``tokens_per_step <= b m s N``).
        Every caller refuses inputs whose product exceeds ``MAX_EXACT_PRODUCT``
        (:meth:`check_products`), so the output can never wrap around.
    """

    name: str
    description: str
    inputs: tuple[InputField, ...]
    outputs: tuple[OutputField, ...]
    inputs_type: type[NamedTuple]
    outputs_type: type[NamedTuple]
    apply: Callable[[Any], Any]
    verdict: Callable[[Mapping[str, float], Mapping[str, Any]], str]
    exact_products: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def check_products(self, values: Mapping[str, Any], where: str = "") -> None:
        """Refuse inputs (scalars or broadcastable arrays; a spec passes each
        input's largest value) whose ``exact_products`` exceed the int64 range.

        Raises:
          InputError: naming the inputs, the product and the limit.
        """
        import numpy as np

        for output, names in self.exact_products:
            product = np.ones(())
            for name in names:
                product = product * np.asarray(values[name], dtype=np.float64)
            if np.any(product > MAX_EXACT_PRODUCT):
                worst = int(np.max(product))
                raise InputError(where + " x ".join(names), worst,
                                 f"a product of at most 2**62 ({float(MAX_EXACT_PRODUCT):.3g})"
                                 f", so that {output} is an exact int64")

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.outputs)

    @property
    def defaults(self) -> dict[str, float]:
        return {f.name: f.default for f in self.inputs}

    def input_field(self, name: str) -> InputField:
        for f in self.inputs:
            if f.name == name:
                return f
        raise KeyError(name)

    def output_field(self, name: str) -> OutputField:
        for f in self.outputs:
            if f.name == name:
                return f
        raise KeyError(name)
