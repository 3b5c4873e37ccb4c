"""The Python API: evaluate a model on scalars or broadcastable arrays."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxmodel.deferred import jax
from jaxmodel.errors import InputError
from jaxmodel.fields import check_values
from jaxmodel.models import DEFAULT_MODEL, MODELS, Model, get_model
from jaxmodel.precision import computing, float_dtype
from jaxmodel.program_cache import CachedProgram
from jaxmodel.xla_options import QUICK_ROWS, quick_compile


def resolve_inputs(model: Model, values: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Defaults filled in, names and domains checked, arrays broadcast together."""
    unknown = sorted(set(values) - set(model.input_names))
    if unknown:
        raise InputError(
            unknown[0], values[unknown[0]], f"an input of model {model.name!r}"
            f"{model.input_hint(unknown[0])}: " + ", ".join(model.input_names)
        )
    merged = {**model.defaults, **{k: v for k, v in values.items() if v is not None}}
    checked = {f.name: check_values(f, merged[f.name]) for f in model.inputs}
    model.check_products(checked)
    model.check_at_least(checked)
    try:
        arrays = np.broadcast_arrays(*checked.values())
    except ValueError:
        shapes = {k: v.shape for k, v in checked.items() if v.ndim}
        raise InputError("inputs", shapes, "shapes that broadcast together") from None
    return dict(zip(checked, arrays, strict=True))


def program_key(model: Model) -> dict[str, str] | None:
    """What fixes a program of ``model`` beside the jaxmodel package's files
    (:class:`jaxmodel.program_cache.CachedProgram`): a registered model's name;
    None for a caller's own ``Model``, which the package's files do not fix."""
    return {"model": model.name} if MODELS.get(model.name) is model else None


@functools.cache
def batched(model: Model, quick: bool = False):
    """``jit`` of ``model.apply`` over a 1-D batch (``Model.apply_rows``; compiled once
    per shape), its lowered form kept on disk when the command line asks
    (:mod:`jaxmodel.program_cache`); ``quick``: with :mod:`jaxmodel.xla_options`'
    options for a short run."""

    def columns(*inputs):
        return tuple(model.apply_rows(model.inputs_type(*inputs), inputs[0].shape[0]))

    columns.__name__ = getattr(model.apply, "__name__", model.name)
    program = CachedProgram("api.batched", columns, program_key(model), quick_compile(quick))

    def run(inputs):
        return model.outputs_type(*program(*inputs))

    return run


def evaluate(model: str | Model = DEFAULT_MODEL, *, x64: bool = False, **inputs: Any):
    """Evaluate a cost model on scalars or arrays.

    Args:
      model: model name (``"refined"``, the default, or ``"seed"``) or a ``Model``.
      x64: compute floats in float64 instead of float32.
      **inputs: input values by name (see the model's ``inputs``);
        Python scalars or numpy / jax arrays of any numeric dtype, broadcast
        together.  Missing inputs take the model's defaults.

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
    columns = [a.reshape(-1).astype(dtype) for a in arrays.values()]
    n = columns[0].size
    size = padded_rows(n)
    if size != n:  # (the last row repeated: rows are independent, the extra ones dropped)
        columns = [np.pad(c, (0, size - n), mode="edge") for c in columns]
    with computing():
        out = batched(model, quick=size <= QUICK_ROWS)(model.inputs_type(*columns))
        host = jax.device_get(out)
    return model.outputs_type(*(np.asarray(v)[:n].reshape(shape) for v in host))


# The fewest rows :func:`evaluate` runs: every batch up to this size shares one
# compiled program (a refined model's compile takes seconds, its run of 512 rows
# about a millisecond).  A single configuration with its two profile curves
# (``jaxmodel eval``'s 97 rows, :mod:`jaxmodel.profile`) and a few hundred
# configurations to compare are such batches.
MIN_PADDED_ROWS = 512


def padded_rows(n: int) -> int:
    """The rows :func:`evaluate` runs for a batch of ``n``: the next power of two, at
    least :data:`MIN_PADDED_ROWS`, up to ``QUICK_ROWS``, so that one compiled program
    serves every batch of a size class (a program is compiled per shape: the refined
    model took 5 s for each new length); ``n`` itself beyond that, or for an empty
    batch."""
    if n == 0 or n > QUICK_ROWS:
        return n
    return max(MIN_PADDED_ROWS, 1 << (n - 1).bit_length())


# Output dtypes by field kind, as evaluate returns them with x64.
_HOST_DTYPES = {"float": np.float64, "int": np.int64, "bool": np.bool_, "category": np.int32}


def evaluate_on_host(model: str | Model = DEFAULT_MODEL, **inputs: Any):
    """:func:`evaluate` in float64 with NumPy: no jax, no trace, no compile.

    The model's own function runs once on the whole batch with NumPy as its
    array module (``jaxmodel.deferred.on_host``): every model term is
    elementwise, so a batch of rows is one call, as the vmapped program's is.
    It is how one configuration is answered for a person (``jaxmodel eval``,
    ``validate``): a few milliseconds, where jax's first evaluation of the
    refined model traces and compiles it for seconds to minutes (issue 26).
    The numbers are those of ``evaluate(..., x64=True)`` to the last bits
    (tests/test_host_eval.py); a sweep, a search and autodiff stay on jax.

    Returns:
      The model's outputs ``NamedTuple`` of numpy arrays of the broadcast
      shape, dtypes as :func:`evaluate`'s with ``x64``.

    Raises:
      InputError: an unknown input name or a value outside an input's domain.
      ValueError: the model does not declare ``on_host``.
    """
    from jaxmodel.deferred import on_host

    model = get_model(model)
    if not model.on_host:
        raise ValueError(f"model {model.name!r} does not declare on_host; use evaluate")
    arrays = resolve_inputs(model, inputs)
    shape = next(iter(arrays.values())).shape
    n = int(np.prod(shape, dtype=np.int64))
    with on_host():
        flat = model.inputs_type(*(a.reshape(-1).astype(np.float64) for a in arrays.values()))
        out = model.apply(flat)
        # (an output that no input moves comes back a scalar: spread it over the rows)
        return model.outputs_type(*(
            np.broadcast_to(np.asarray(v).astype(_HOST_DTYPES[f.kind]), (n,)).reshape(shape)
            .copy() for f, v in zip(model.outputs, out, strict=True)))


def as_dicts(model: Model, outputs) -> dict[str, Any]:
    """Outputs of one configuration as Python scalars, categories as names."""
    row: dict[str, Any] = {}
    for field, value in zip(model.outputs, outputs, strict=True):
        v = np.asarray(value).item()
        if field.kind == "category":
            v = field.categories[int(v)]
        row[field.name] = v
    return row
