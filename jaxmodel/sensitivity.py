"""Sensitivities of model outputs to inputs, by forward-mode autodiff (never finite differences).

Two kinds, both per configuration and vmapped over batches:

* ``gradient``: d(output) / d(input) in the user's units, e.g. ms of step time
  per GB/s of link bandwidth, percentage points of MFU per TFLOP/s.  Column
  ``d_<output>__d_<input>``.
* ``elasticity``: d ln(output) / d ln(input), dimensionless: "1% more bandwidth
  gives e% more output".  Column ``e_<output>__<input>``.

Only float outputs are differentiated (counts, flags and categories are steps).
Gradients are forward mode (all outputs at once): one ``jax.jvp`` per input
for a handful of inputs, else passes of a few tangents each in a ``lax.map``,
so that the program, its compile and its memory do not grow with the number
of inputs (see ``_derivatives``).

How each input of the seed model is treated:

=====================  ==========================================================
input                  treatment
=====================  ==========================================================
model_params_b         continuous
link_bandwidth_gb_s    continuous
compute_tflops         continuous
micro_batch            continuous relaxation of a count (enters as a factor b)
gradient_accum_steps   continuous relaxation (factor m in compute, TP, PP; 1/m in
                       the bubble)
seq_length             continuous relaxation (factor s)
hidden_dim             continuous relaxation (factor h in the activation message)
num_layers             continuous relaxation (factor L in the TP term)
tensor_parallel        continuous relaxation of t as a factor, at fixed
                       d = floor(N / (t p)); at t = 1 the ring factor
                       2 (t - 1) / t is clamped with ``max(t, 1)``, whose
                       derivative there is the mean of the two one-sided ones
pipeline_parallel      continuous relaxation of p as a factor (bubble, DP shard),
                       at fixed d; the PP send term is a switch on p > 1 and
                       does not depend on p otherwise
num_gpus               **stepped**: N acts only through d = floor(N / (t p)), so
                       its derivative at fixed d is 0 and tells a user nothing.
                       It is reported as the discrete difference to the next GPU
                       count that adds a replica, N' = (d + 1) t p:
                       gradient (f(N') - f(N)) / (N' - N), elasticity
                       ((f(N') - f(N)) / f(N)) / ((N' - N) / N) (arc
                       elasticity from the current point)
=====================  ==========================================================

Kinks and switches.  The exposed DP all-reduce is ``max(0, raw - backward)``
written with ``numerics.positive_part``: at the tie the gradient is that of the
hidden side (0), one-sided.  The bottleneck and regime are categories and are
not differentiated; a change of bottleneck does not change any float output's
formula, so the gradients are continuous across it.

Invalid configurations (an invalid layout: NaN outputs) give NaN
sensitivities; :class:`Sensitivities` carries a ``valid`` flag per row.  In the
valid domain every gradient is finite.  The elasticity of an output that is
exactly zero (the exposed DP all-reduce while hidden, the PP term at p = 1) is 0
when its gradient is 0 too (it stays zero), else NaN (a relative change of a
zero quantity is undefined).

Every model declares its stepped inputs (``Model.steps``, ``{name:
f(inputs) -> next value}``); the others are ``Model.continuous``.  The
3D-parallel models step ``num_gpus`` with the rule above
(``jaxmodel.models.layout.replica_step``) and every switch
(``jaxmodel.models.common.switch_steps``: an integer input with at most
``SWITCH_VALUES`` allowed values, such as the refined model's flags
``zero_stage``, ``flash_attention``, ..., its ``recompute`` mode and
``mlp_weight_matrices``), stepped to the next allowed value (the previous one
at the top of the range).  Stepped inputs are left out of the default ``wrt``
but can be asked for by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from jaxmodel.api import program_key, resolve_inputs
from jaxmodel.deferred import jax, jnp
from jaxmodel.models import DEFAULT_MODEL, Model, get_model
from jaxmodel.precision import computing, float_dtype
from jaxmodel.program_cache import CachedProgram

# The names a request may use are checked in the spec layer, for the API, the
# CLI and the spec's [sensitivity] table alike.
from jaxmodel.spec_tables import (  # noqa: F401 (re-exported)
    DEFAULT_OF,
    KINDS,
    check_request,
    continuous_inputs,
    default_of,
    differentiable_outputs,
    parse_sensitivity_table,
)
from jaxmodel.xla_options import QUICK_ROWS, quick_compile

Kind = Literal["gradient", "elasticity", "both"]


def stepped_inputs(model: Model) -> dict[str, Callable[[Any], Any]]:
    """Inputs reported as a discrete difference: ``{name: next_value(inputs)}``
    (``Model.steps``)."""
    return dict(model.steps)


def gradient_column(output: str, input_name: str) -> str:
    return f"d_{output}__d_{input_name}"


def elasticity_column(output: str, input_name: str) -> str:
    return f"e_{output}__{input_name}"


def sensitivity_columns(
    model: Model | str, of: Sequence[str] | None = None, wrt: Sequence[str] | None = None,
    kind: Kind = "gradient",
) -> list[str]:
    """Column names the kernel returns, in order (outputs outer, inputs inner)."""
    model = get_model(model)
    of, wrt, kind = check_request(model, of, wrt, kind)
    cols = []
    for o in of:
        for w in wrt:
            if kind in ("gradient", "both"):
                cols.append(gradient_column(o, w))
            if kind in ("elasticity", "both"):
                cols.append(elasticity_column(o, w))
    return cols


def _unit(text: str, fallback: str) -> str:
    """A field's unit without its parenthetical note (``GB/s (1 GB = ...)`` -> ``GB/s``)."""
    return text.split(" (")[0].strip() or fallback


def gradient_unit(model: Model, output: str, input_name: str) -> str:
    """``"ms per GB/s"``: the unit of d(output) / d(input)."""
    out = _unit(model.output_field(output).unit, "")
    per = _unit(model.input_field(input_name).unit, input_name)
    return f"{out} per {per}".strip() if out else f"per {per}"


def sensitivity_column_info(
    model: Model | str, of: Sequence[str] | None = None, wrt: Sequence[str] | None = None,
    kind: Kind = "gradient",
) -> list[tuple[str, str, str]]:
    """``(name, unit, meaning)`` of each column, in :func:`sensitivity_columns` order
    (for Parquet field metadata)."""
    model = get_model(model)
    of, wrt, kind = check_request(model, of, wrt, kind)
    steps = stepped_inputs(model)
    info = []
    for o in of:
        for w in wrt:
            how = (f" (discrete difference to the next {w})" if w in steps else "")
            if kind in ("gradient", "both"):
                info.append((gradient_column(o, w), gradient_unit(model, o, w),
                             f"d {o} / d {w}{how}"))
            if kind in ("elasticity", "both"):
                info.append((elasticity_column(o, w), "",
                             f"elasticity d ln {o} / d ln {w}{how}"))
    return info


def _elasticity(grad, x, y):
    """``grad x / y``; for ``y == 0``: 0 if ``grad == 0`` else NaN (double where)."""
    zero = y == 0
    safe_y = jnp.where(zero, jnp.ones_like(y), y)
    return jnp.where(zero, jnp.where(grad == 0, 0.0, jnp.nan), grad * x / safe_y)


def sensitivity_kernel(
    model: Model | str, of: Sequence[str] | None = None, wrt: Sequence[str] | None = None,
    kind: Kind = "gradient",
) -> Callable[[Any], dict[str, Any]]:
    """A per-configuration function for the sweep engine: ``jit(vmap(f))`` it.

    Args:
      model: a ``Model`` or its name.
      of: float outputs (default: step time, MFU, throughput).
      wrt: inputs (default: every continuous input).
      kind: ``gradient``, ``elasticity`` or ``both``.

    Returns:
      ``f(inputs) -> {column: scalar}`` with ``inputs`` a ``model.inputs_type``
      of float scalars; columns as :func:`sensitivity_columns`, in the input
      dtype.  NaN where the configuration is invalid.

    Raises:
      SpecError: a bad name or kind.
    """
    model = get_model(model)
    of, wrt, kind = check_request(model, of, wrt, kind)
    steps = stepped_inputs(model)
    smooth = [w for w in wrt if w not in steps]
    stepped = [w for w in wrt if w in steps]

    def values(x):
        out = model.apply(x)
        return jnp.stack([getattr(out, o) for o in of])

    def kernel(x) -> dict[str, Any]:
        grads: dict[str, Any] = {}
        elast: dict[str, Any] = {}
        y = values(x)
        for w, dy in zip(smooth, _derivatives(values, x, smooth), strict=True):
            # The model masks invalid rows with where(valid, v, nan), whose
            # tangent is 0, not NaN: mask the derivatives by the values.
            dy = jnp.where(jnp.isfinite(y), dy, jnp.nan)
            v0 = getattr(x, w)
            for i, o in enumerate(of):
                grads[o, w] = dy[i]
                elast[o, w] = _elasticity(dy[i], v0, y[i])
        for w in stepped:
            x0 = getattr(x, w)
            x1 = steps[w](x).astype(x0.dtype)
            y1 = values(x._replace(**{w: x1}))
            for i, o in enumerate(of):
                dy = y1[i] - y[i]
                grads[o, w] = dy / (x1 - x0)
                elast[o, w] = _elasticity(dy / (x1 - x0), x0, y[i])
        cols: dict[str, Any] = {}
        for o in of:
            for w in wrt:
                if kind in ("gradient", "both"):
                    cols[gradient_column(o, w)] = grads[o, w]
                if kind in ("elasticity", "both"):
                    cols[elasticity_column(o, w)] = elast[o, w]
        return cols

    return kernel


# Up to this many inputs get a jvp each; more are differentiated in passes of
# TANGENTS_PER_PASS inputs (see _derivatives).
SEPARATE_JVPS = 8
TANGENTS_PER_PASS = 4


def _derivatives(values, x, names):
    """``d values(x) / d x.name`` for each name (a list of arrays like ``values(x)``).

    Up to ``SEPARATE_JVPS`` inputs: one ``jax.jvp`` per input, the others
    closed over, so their tangents are symbolic zeros that XLA drops (about
    2.5x faster to run than batched tangents on CPU; the primal is shared by
    CSE).  More inputs: forward mode in passes, a ``lax.map`` over the basis
    of tangents, ``TANGENTS_PER_PASS`` of them per pass.  The program holds one
    pass (the model and a tangent ``TANGENTS_PER_PASS`` wide) whatever the
    number of inputs, so its compile time and memory do not grow with it.  One
    jvp whose tangent was batched over all the inputs (as ``jax.jacfwd``) made
    the refined model's program, for its 52 continuous inputs, take 2.2 GB
    and minutes to compile, and with ``--of mfu_percent`` alone more than
    20 GB (bench/README.md, issue 26).
    """
    if len(names) <= SEPARATE_JVPS:
        out = []
        for w in names:
            v0 = getattr(x, w)
            _, dy = jax.jvp(lambda v, w=w: values(x._replace(**{w: v})), (v0,),
                            (jnp.ones_like(v0),))
            out.append(dy)
        return out
    # (Over a batch of columns, Model.apply_rows, each input and its tangent
    # carry the rows' axis after the inputs' one.)
    v0 = jnp.stack(jnp.broadcast_arrays(*[getattr(x, w) for w in names]))
    rows = (1,) * (v0.ndim - 1)

    def along(v):
        return values(x._replace(**{w: v[i] for i, w in enumerate(names)}))

    # Padded with zero tangents to whole passes: lax.map would otherwise
    # compile a second copy of the pass for the remainder.
    n = len(names)
    passes = -(-n // TANGENTS_PER_PASS)
    basis = jnp.eye(passes * TANGENTS_PER_PASS, n, dtype=v0.dtype)
    dys = jax.lax.map(
        lambda tangent: jax.jvp(along, (v0,),
                                (jnp.broadcast_to(tangent.reshape(-1, *rows), v0.shape),))[1],
        basis, batch_size=TANGENTS_PER_PASS)
    return list(dys[:n])


@dataclass(frozen=True)
class Sensitivities:
    """Sensitivities of a batch (or one configuration) of the given shape.

    Attributes:
      kind: ``gradient``, ``elasticity`` or ``both``.
      of: the outputs differentiated.
      wrt: the inputs.
      columns: column name -> array of the batch shape (see module doc).
      values: each output in ``of`` at the configuration(s).
      valid: bool array: every output in ``of`` is finite (a valid layout).
      stepped_to: for each stepped input in ``wrt`` (``num_gpus``), the next
        value the discrete difference was taken to.
    """

    kind: str
    of: tuple[str, ...]
    wrt: tuple[str, ...]
    columns: dict[str, np.ndarray]
    values: dict[str, np.ndarray]
    valid: np.ndarray
    stepped_to: dict[str, np.ndarray]

    def gradient(self, output: str, input_name: str) -> np.ndarray:
        return self.columns[gradient_column(output, input_name)]

    def elasticity(self, output: str, input_name: str) -> np.ndarray:
        return self.columns[elasticity_column(output, input_name)]

    def __getitem__(self, key: tuple[str, str]) -> np.ndarray:
        """``s[output, input]``: the elasticity for kind ``elasticity``, else the gradient."""
        if self.kind == "elasticity":
            return self.elasticity(*key)
        return self.gradient(*key)


def sensitivities(
    inputs: Mapping[str, Any] | None = None,
    of: Sequence[str] | None = None,
    wrt: Sequence[str] | None = None,
    kind: Kind = "gradient",
    model: str | Model = DEFAULT_MODEL,
    x64: bool = False,
) -> Sensitivities:
    """Sensitivities of outputs to inputs for one configuration or a batch.

    Args:
      inputs: input values by name, scalars or arrays broadcast together;
        missing inputs take the model's defaults (as ``jaxmodel.evaluate``).
      of: float outputs (default: ``step_time_ms``, ``mfu_percent``,
        ``throughput_tokens_s``).
      wrt: inputs (default: every continuous input; ``num_gpus`` is stepped).
      kind: ``gradient`` (output units per input unit), ``elasticity``
        (d ln out / d ln in) or ``both``.
      model: model name or ``Model``.
      x64: compute in float64.

    Returns:
      :class:`Sensitivities`, arrays of the broadcast shape.

    Raises:
      InputError: an unknown input or a value out of domain.
      SpecError: a bad output / input name or kind.
    """
    model = get_model(model)
    of, wrt, kind = check_request(model, of, wrt, kind)
    arrays = resolve_inputs(model, inputs or {})
    shape = next(iter(arrays.values())).shape
    dtype = float_dtype(x64)
    steps = {w: f for w, f in stepped_inputs(model).items() if w in wrt}
    with computing():
        flat = model.inputs_type(*(a.reshape(-1).astype(dtype) for a in arrays.values()))
        quick = flat[0].size <= QUICK_ROWS
        cols, vals, nxt = _batched(model, of, wrt, kind, tuple(steps), quick)(flat)
        cols, vals, nxt = jax.device_get((cols, vals, nxt))
    vals = {o: np.asarray(v).reshape(shape) for o, v in zip(of, vals, strict=True)}
    valid = np.logical_and.reduce([np.isfinite(v) for v in vals.values()])
    return Sensitivities(
        kind=kind, of=of, wrt=wrt,
        columns={k: np.asarray(v).reshape(shape) for k, v in cols.items()},
        values=vals,
        valid=np.asarray(valid).reshape(shape),
        stepped_to={w: np.asarray(v).reshape(shape) for w, v in nxt.items()},
    )


def sensitivities_on_host(
    inputs: Mapping[str, Any] | None = None,
    of: Sequence[str] | None = None,
    wrt: Sequence[str] | None = None,
    kind: Kind = "gradient",
    model: str | Model = DEFAULT_MODEL,
) -> Sensitivities:
    """:func:`sensitivities` in float64 with NumPy: no jax, no trace, no compile.

    The model runs once on the batch with :class:`jaxmodel.dual.Dual` inputs
    (forward mode with jax's rules, every continuous input in ``wrt`` a
    direction of the one pass), and once more per stepped input; the columns
    are :func:`sensitivity_kernel`'s, masked and divided as there.  For a few
    configurations (a person's question, the dashboard's tornado) this takes
    milliseconds and memory of ``k x rows`` floats a value (``k`` inputs),
    where the jax program of the refined model compiled for minutes (issue 26).

    Args and returns: as :func:`sensitivities` (always float64).

    Raises:
      ValueError: the model does not declare ``on_host``.
    """
    from jaxmodel.deferred import on_host
    from jaxmodel.dual import Dual, primal, seeded

    model = get_model(model)
    if not model.on_host:
        raise ValueError(f"model {model.name!r} does not declare on_host; use sensitivities")
    of, wrt, kind = check_request(model, of, wrt, kind)
    arrays = resolve_inputs(model, inputs or {})
    shape = next(iter(arrays.values())).shape
    flat = {k: a.reshape(-1).astype(np.float64) for k, a in arrays.items()}
    n = next(iter(flat.values())).size
    steps = stepped_inputs(model)
    smooth = [w for w in wrt if w not in steps]
    stepped = [w for w in wrt if w in steps]
    k = len(smooth)
    grads: dict[tuple[str, str], np.ndarray] = {}
    elast: dict[tuple[str, str], np.ndarray] = {}
    with on_host():
        x = model.inputs_type(*(seeded(flat[f], smooth.index(f), k) if f in smooth else flat[f]
                                for f in model.input_names))
        out = model.apply(x)
        y = {o: np.broadcast_to(np.asarray(primal(getattr(out, o)), np.float64), (n,))
             for o in of}
        for o in of:
            v = getattr(out, o)
            tangent = (np.broadcast_to(v.tangent, (k, n)) if isinstance(v, Dual)
                       else np.zeros((k, n)))
            for i, w in enumerate(smooth):
                # (as the kernel: the model's where(valid, v, nan) has a 0 tangent)
                dy = np.where(np.isfinite(y[o]), tangent[i], np.nan)
                grads[o, w] = dy
                elast[o, w] = _elasticity(dy, flat[w], y[o])
        plain = model.inputs_type(*(flat[f] for f in model.input_names))
        nxt = {}
        for w in stepped:
            x0 = flat[w]
            x1 = np.broadcast_to(np.asarray(steps[w](plain), np.float64), (n,))
            nxt[w] = x1
            y1 = model.apply(plain._replace(**{w: x1}))
            for o in of:
                dy = np.broadcast_to(np.asarray(getattr(y1, o), np.float64), (n,)) - y[o]
                grads[o, w] = dy / (x1 - x0)
                elast[o, w] = _elasticity(dy / (x1 - x0), x0, y[o])
    columns = {}
    for o in of:
        for w in wrt:
            if kind in ("gradient", "both"):
                columns[gradient_column(o, w)] = np.asarray(grads[o, w]).reshape(shape)
            if kind in ("elasticity", "both"):
                columns[elasticity_column(o, w)] = np.asarray(elast[o, w]).reshape(shape)
    vals = {o: np.asarray(v).reshape(shape) for o, v in y.items()}
    valid = np.logical_and.reduce([np.isfinite(v) for v in vals.values()])
    return Sensitivities(kind=kind, of=of, wrt=wrt, columns=columns, values=vals,
                         valid=np.asarray(valid).reshape(shape),
                         stepped_to={w: np.asarray(v).reshape(shape) for w, v in nxt.items()})


def answer_sensitivities(
    inputs: Mapping[str, Any] | None = None,
    of: Sequence[str] | None = None,
    wrt: Sequence[str] | None = None,
    kind: Kind = "gradient",
    model: str | Model = DEFAULT_MODEL,
    x64: bool = False,
) -> Sensitivities:
    """A few configurations for a person (``jaxmodel sensitivity``, the tornado):
    :func:`sensitivities_on_host` where the model runs there (float64, no
    compile), else :func:`sensitivities`."""
    model = get_model(model)
    if model.on_host:
        return sensitivities_on_host(inputs, of=of, wrt=wrt, kind=kind, model=model)
    return sensitivities(inputs, of=of, wrt=wrt, kind=kind, model=model, x64=x64)


_CACHE: dict[tuple, Callable] = {}


def _batched(model: Model, of, wrt, kind, stepped, quick):
    """``jit(vmap(...))`` of the kernel plus the values and step targets (cached, and
    its lowered form kept on disk when the command line asks:
    :mod:`jaxmodel.program_cache`); ``quick``: compiled with
    :mod:`jaxmodel.xla_options`' options for a short run."""
    key = (model, of, wrt, kind, quick)
    if key not in _CACHE:
        kernel = sensitivity_kernel(model, of, wrt, kind)
        steps = stepped_inputs(model)
        names = sensitivity_columns(model, of, wrt, kind)

        def row(x):
            out = model.apply(x)
            vals = tuple(getattr(out, o) for o in of)
            nxt = {w: steps[w](x).astype(getattr(x, w).dtype) for w in stepped}
            return kernel(x), vals, nxt

        def columns(*inputs):
            cols, vals, nxt = model.apply_rows(model.inputs_type(*inputs), inputs[0].shape[0],
                                               row)
            return (*(cols[c] for c in names), *vals, *(nxt[w] for w in stepped))

        columns.__name__ = "sensitivities"
        static = program_key(model)
        if static is not None:
            static = {**static, "of": of, "wrt": wrt, "kind": kind, "stepped": stepped}
        program = CachedProgram("sensitivity.batched", columns, static, quick_compile(quick))

        def run(x):
            out = program(*x)
            n, k = len(names), len(of)
            return (dict(zip(names, out[:n], strict=True)), out[n:n + k],
                    dict(zip(stepped, out[n + k:], strict=True)))

        _CACHE[key] = run
    return _CACHE[key]
