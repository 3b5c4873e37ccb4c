"""The Python API: evaluate a model on scalars or broadcastable arrays."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxmodel.errors import InputError
from jaxmodel.fields import FLOAT32_NOTE, InputField, in_float32_range
from jaxmodel.models import DEFAULT_MODEL, Model, get_model
from jaxmodel.precision import computing, float_dtype


def check_values(field: InputField, value: Any) -> np.ndarray:
    """``value`` as a float64 array, every element in ``field``'s domain.

    Raises:
      InputError: for a non-numeric value or the first element out of domain.
    """
    arr = np.asarray(value)
    # jnp.issubdtype also knows jax's extra dtypes (bfloat16, float8, int4),
    # which numpy reports as kind "V".
    numeric = jnp.issubdtype(arr.dtype, jnp.integer) or jnp.issubdtype(arr.dtype, jnp.floating)
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


def resolve_inputs(model: Model, values: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Defaults filled in, names and domains checked, arrays broadcast together."""
    unknown = sorted(set(values) - set(model.input_names))
    if unknown:
        raise InputError(
            unknown[0], values[unknown[0]], f"an input of model {model.name!r}: "
            + ", ".join(model.input_names)
        )
    merged = {**model.defaults, **{k: v for k, v in values.items() if v is not None}}
    checked = {f.name: check_values(f, merged[f.name]) for f in model.inputs}
    model.check_products(checked)
    try:
        arrays = np.broadcast_arrays(*checked.values())
    except ValueError:
        shapes = {k: v.shape for k, v in checked.items() if v.ndim}
        raise InputError("inputs", shapes, "shapes that broadcast together") from None
    return dict(zip(checked, arrays, strict=True))


@functools.cache
def batched(model: Model):
    """``jit(vmap(model.apply))`` over a 1-D batch (compiled once per shape)."""
    return jax.jit(jax.vmap(model.apply))


def evaluate(model: str | Model = DEFAULT_MODEL, *, x64: bool = False, **inputs: Any):
    """Evaluate a cost model on scalars or arrays.

    Args:
      model: model name (``"seed"``) or a ``Model``.
      x64: compute floats in float64 instead of float32.
      **inputs: input values by name (see ``jaxmodel.models.seed.INPUTS``);
        Python scalars or numpy / jax arrays of any numeric dtype, broadcast
        together.  Missing inputs take the model's defaults (the seed values).

    Returns:
      The model's outputs ``NamedTuple`` of numpy arrays, each of the broadcast
      shape: integers int64, floats float32 (float64 with ``x64``), booleans,
      and category codes (int32; names in the field's ``categories``).

    Raises:
      InputError: an unknown input name or a value outside an input's domain.
    """
    model = get_model(model)
    arrays = resolve_inputs(model, inputs)
    shape = next(iter(arrays.values())).shape
    dtype = float_dtype(x64)
    with computing():
        flat = model.inputs_type(*(a.reshape(-1).astype(dtype) for a in arrays.values()))
        out = batched(model)(flat)
        host = jax.device_get(out)
    return model.outputs_type(*(np.asarray(v).reshape(shape) for v in host))


def as_dicts(model: Model, outputs) -> dict[str, Any]:
    """Outputs of one configuration as Python scalars, categories as names."""
    row: dict[str, Any] = {}
    for field, value in zip(model.outputs, outputs, strict=True):
        v = np.asarray(value).item()
        if field.kind == "category":
            v = field.categories[int(v)]
        row[field.name] = v
    return row
