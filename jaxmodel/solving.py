"""Inverse questions: the input value at which an output reaches a target.

"How much link bandwidth for 60% MFU?"  For one continuous input ``vary``
(every other input fixed), find ``x`` with ``output(x) = target`` by a
safeguarded Newton method on the autodiff derivative, vmappable and always
terminating:

1. **Bracket.**  The model is evaluated on a fixed grid expanding
   geometrically from the current value ``x0`` on both sides, within the
   input's domain: ``x0 + max(|x0|, 1) (4^k - 1)`` upwards (capped at the
   field's upper bound) and ``low + (x0 - low) 4^-k`` downwards, k = 1..40, plus
   the domain's ends (``low``, the upper bound or +inf).  The bracket is the
   pair of neighbouring finite grid points, inside the domain, where
   ``output - target`` changes sign, nearest to ``x0``.
2. **Refine** (``rtsafe``, Numerical Recipes 3rd ed. section 9.4): Newton steps
   with the ``jax.jvp`` derivative, falling back to bisection when a step would
   leave the bracket or does not halve the step before last; at most
   ``ITERATIONS`` steps (``jax.lax.while_loop`` with a cap).
3. **Check.**  ``reached`` is true when a bracket was found and the output at
   the solution is within ``eps^(3/4)`` (relative: 2e-12 in float64, 7e-6 in
   float32) of the target: an honest test even where the model jumps (a
   relaxed count crossing a validity rule).  A zero target has no scale of
   its own: there the tolerance is relative to ``|d output / d vary| |vary|``
   (:func:`_tolerance`).  A target the working precision cannot hold is
   refused (:func:`check_representable`).
   An output that is flat and already at the target to that tolerance (no
   sign change to bracket) is reached at the grid point nearest the start.

When the target is out of reach, the **limit** is the best value the output
takes on the grid in the target's direction, including the domain's ends.
The ends are evaluated by the model's own closed form at the end value, e.g.
at infinite bandwidth, where IEEE arithmetic makes every ``bytes / inf`` term
exactly 0: for the seed model's MFU that is exactly the analytic limit
``compute / (compute + bubble) = 1 / (1 + (p - 1) / m)``.  An end where the
model is not finite (0 TFLOP/s) is skipped and the nearest grid point stands in.

Columns per row (:func:`solve_kernel`): ``solved_<vary>`` (NaN when not
reached), ``solve_reached`` (bool), ``solve_limit_<output>`` and
``solve_limit_<vary>`` (where the limit is attained; +inf for "infinite") and
``solve_blocked`` (bool: some grid values of ``vary`` make the configuration
invalid, e.g. a relaxed layer count that no longer splits over the stages, so
"not reached" may be the layout rules' doing rather than the output's range).

The solver is written once, against ``jnp``.  The sweep's ``[solve]`` table and
:func:`solve` trace it (vmapped over rows, compiled); for a model that runs on
the host (``Model.on_host``), :func:`solve_on_host` runs the same code eagerly
with NumPy, one row at a time: the loop in Python, the derivatives by
``jaxmodel.dual``'s forward mode (jax's rules), in float64 (issue 26: the
command line's answer in about a second, where compiling the solver for the
refined model took most of a minute).  :func:`answer_solve` chooses.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxmodel.api import program_key, resolve_inputs
from jaxmodel.deferred import hosted, jax, jnp
from jaxmodel.errors import SpecError
from jaxmodel.models import DEFAULT_MODEL, Model, get_model
from jaxmodel.models.layout import BANDWIDTH
from jaxmodel.precision import computing, float_dtype
from jaxmodel.profile import answer
from jaxmodel.program_cache import CachedProgram

# The question is checked in the spec layer, for the API, the CLI and the
# spec's [solve] table alike.
from jaxmodel.spec_tables import (  # noqa: F401 (re-exported)
    check_solve,
    parse_solve_table,
    parse_target,
)
from jaxmodel.xla_options import QUICK_ROWS, quick_compile

GROWTH = 4.0
EXPANSIONS = 40
ITERATIONS = 100


def _rtsafe(fdf, a, b, ga, iterations):
    """Safeguarded Newton on ``[a, b]`` with ``g(a)`` of sign ``ga``; a root of ``g``.

    ``fdf(x) -> (g, dg)``.  Numerical Recipes' ``rtsafe``: Newton where the step
    stays in the bracket and shrinks fast enough, bisection otherwise.
    """
    xl = jnp.where(ga < 0, a, b)  # g(xl) < 0 <= g(xh)
    xh = jnp.where(ga < 0, b, a)
    x = 0.5 * (a + b)
    dx_old = jnp.abs(b - a)
    dx = dx_old
    g, dg = fdf(x)
    eps = jnp.finfo(x.dtype).eps

    def cond(s):
        xl, xh, x, dx_old, dx, g, dg, i = s
        return (i < iterations) & (g != 0) & (jnp.abs(dx) > 2 * eps * jnp.abs(x))

    def body(s):
        xl, xh, x, dx_old, dx, g, dg, i = s
        finite = jnp.isfinite(g) & jnp.isfinite(dg) & (dg != 0)
        leaves = ((x - xh) * dg - g) * ((x - xl) * dg - g) > 0
        slow = jnp.abs(2.0 * g) > jnp.abs(dx_old * dg)
        bisect = ~finite | leaves | slow
        safe_dg = jnp.where(finite, dg, jnp.ones_like(dg))
        # As in rtsafe, dx is the half-width after a bisection, the step after Newton.
        half = 0.5 * (xh - xl)
        dx_old, dx = dx, jnp.where(bisect, half, g / safe_dg)
        x = jnp.where(bisect, xl + half, x - g / safe_dg)
        g, dg = fdf(x)
        # A NaN (a relaxed count crossing a validity rule) counts as above.
        below = g < 0
        xl = jnp.where(below, x, xl)
        xh = jnp.where(below, xh, x)
        return xl, xh, x, dx_old, dx, g, dg, i + 1

    init = (xl, xh, x, dx_old, dx, g, dg, jnp.zeros((), jnp.int32))
    return _while_loop(cond, body, init)[2]


# -- the same solver under jax or on the host ----------------------------------------------
# The solver below is written once, against ``jnp``.  Under jax it is traced
# (vmapped over rows, ``jax.jvp`` derivatives, ``jax.lax.while_loop``); inside
# ``jaxmodel.deferred.on_host`` (``jnp`` is NumPy) these three helpers run the
# same steps eagerly on one row: a Python loop, ``jaxmodel.dual``'s forward
# mode (jax's rules), and the model evaluated once on the whole grid (every
# model term is elementwise, as ``evaluate_on_host`` relies on).


def _while_loop(cond, body, init):
    """``jax.lax.while_loop``, or the same loop in Python on the host."""
    if not hosted():
        return jax.lax.while_loop(cond, body, init)
    state = init
    while bool(cond(state)):
        state = body(state)
    return state


def _jvp(f, v):
    """``(f(v), df/dv)`` for an elementwise ``f``: ``jax.jvp`` with a unit tangent,
    or on the host one pass on a :class:`jaxmodel.dual.Dual`."""
    if not hosted():
        return jax.jvp(f, (v,), (jnp.ones_like(v),))
    from jaxmodel.dual import Dual

    v = np.asarray(v)
    out = f(Dual(v, np.ones((1, *v.shape), v.dtype)))
    if not isinstance(out, Dual):  # an output that ``vary`` does not move
        return out, np.zeros_like(out)
    return out.primal, out.tangent[0]


def _replaced(x, vary, v):
    """``x`` with ``vary`` set to ``v``; on the host every other input spread to
    ``v``'s shape (one row evaluated at many points: the model stacks its
    per-pass terms on a leading axis, which needs the batch axis on every input,
    as ``evaluate_on_host``'s flat batch has it)."""
    if not hosted():
        return x._replace(**{vary: v})
    shape = np.shape(v)
    return x._replace(**{f: v if f == vary else np.broadcast_to(getattr(x, f), shape)
                         for f in x._fields})


def _map(f, points):
    """``jax.vmap(f)(points)``; on the host ``f`` on all points at once (the model
    is elementwise), each result spread over the points (an output that
    ``vary`` does not move comes back a scalar)."""
    if not hosted():
        return jax.vmap(f)(points)
    out = f(points)
    if isinstance(out, tuple):
        return tuple(np.broadcast_to(o, points.shape) for o in out)
    return np.broadcast_to(out, points.shape)


def solve_columns(output: str, vary: str) -> list[str]:
    """Column names :func:`solve_kernel` returns, in order."""
    return [f"solved_{vary}", "solve_reached", f"solve_limit_{output}", f"solve_limit_{vary}",
            "solve_blocked"]


def solve_column_info(model: Model | str, output: str, vary: str) -> list[tuple[str, str, str]]:
    """``(name, unit, meaning)`` of each :func:`solve_columns` column (Parquet metadata);
    the reached and blocked flags are booleans, the rest floats."""
    model = get_model(model)
    out_unit = model.output_field(output).unit
    in_unit = model.input_field(vary).unit
    return [
        (f"solved_{vary}", in_unit, f"{vary} at which {output} reaches the target (NaN: not)"),
        ("solve_reached", "", f"the {output} target is reached by varying {vary}"),
        (f"solve_limit_{output}", out_unit, f"best {output} reachable by varying {vary}"),
        (f"solve_limit_{vary}", in_unit, f"{vary} where that limit is reached (inf: infinite)"),
        ("solve_blocked", "", f"some values of {vary} gave invalid configurations"),
    ]


def solve_kernel(
    model: Model | str, target_output: str, target_value: float, vary: str, *,
    expansions: int = EXPANSIONS, iterations: int = ITERATIONS,
) -> Callable[[Any], dict[str, Any]]:
    """A per-configuration solver for the sweep engine: ``jit(vmap(f))`` it.

    Args:
      model: a ``Model`` or its name.
      target_output: a float output.
      target_value: the value it should reach, in its units.
      vary: the continuous input to change (others stay as given).
      expansions: grid points on each side of the current value.
      iterations: cap on Newton / bisection steps.

    Returns:
      ``f(inputs) -> {column: scalar}`` (see :func:`solve_columns` and the
      module doc), floats in the input dtype.

    Raises:
      SpecError: a bad name or value.
    """
    model = get_model(model)
    output, target, vary = check_solve(model, target_output, target_value, vary)
    solver = _solver(model, output, vary, expansions, iterations)

    def kernel(x) -> dict[str, Any]:
        return solver(x, target)

    return kernel


def _tolerance(target, v, dg):
    """How near ``target`` an output at ``v`` (slope ``dg``) must be to reach it:
    ``eps^(3/4)`` relative to the target; at a zero target, relative to how far
    the output moves over a relative change of ``v`` (``|dg| |v|``), as a zero
    has no scale of its own.  (It was the largest |output| on the grid, which
    is infinite where a rate tends to 0: every target 0 was "reached".)  A
    target a rate only tends to (MFU 0 as bandwidth -> 0) is then out of reach,
    since there ``|output| = |dg| |v|``."""
    slope = jnp.abs(dg * v)
    scale = jnp.where(target != 0, jnp.abs(target),
                      jnp.where(jnp.isfinite(slope), slope, 0.0))
    return jnp.finfo(v.dtype).eps ** 0.75 * scale


def _solver(model: Model, output: str, vary: str, expansions: int, iterations: int):
    """``f(inputs, target) -> columns``: the kernel with the target as an argument."""
    field = model.input_field(vary)
    k = np.arange(1, expansions + 1, dtype=np.float64)
    up_factor = GROWTH**k - 1.0
    down_factor = GROWTH ** -k[::-1]

    def kernel(x, target) -> dict[str, Any]:
        x0 = getattr(x, vary)
        dtype = x0.dtype

        def g(v):
            return getattr(model.apply(_replaced(x, vary, v)), output) - target

        def gdg(v):
            return _jvp(g, v)

        low = jnp.asarray(field.low, dtype)
        up = x0 + jnp.maximum(jnp.abs(x0), 1.0) * jnp.asarray(up_factor, dtype)
        if field.high is not None:
            up = jnp.minimum(up, field.high)
        down = low + (x0 - low) * jnp.asarray(down_factor, dtype)
        grid = [down, x0[None], up]
        if field.low_inclusive:
            grid.insert(0, low[None])
        pts = jnp.concatenate(grid)
        i0 = expansions + int(field.low_inclusive)
        gv, dgv = _map(gdg, pts)

        finite = jnp.isfinite(gv)
        change = finite[:-1] & finite[1:] & (jnp.sign(gv[:-1]) * jnp.sign(gv[1:]) <= 0)
        centre = jnp.arange(pts.shape[0] - 1) + 0.5
        dist = jnp.where(change, jnp.abs(centre - i0), jnp.inf)
        j = jnp.argmin(dist)
        found = jnp.any(change)
        a, b, ga, gb = pts[j], pts[j + 1], gv[j], gv[j + 1]
        # An end that is itself a root needs no refinement.
        safe_a = jnp.where(found, a, x0)
        safe_b = jnp.where(found, b, x0 + 1.0)
        # (no bracket, no steps: the root is not used, and on the host each step
        # is a model call)
        root = _rtsafe(gdg, safe_a, safe_b, jnp.where(found, ga, -1.0),
                       jnp.where(found, iterations, 0))
        root = jnp.where(ga == 0, a, jnp.where(gb == 0, b, root))
        residual, droot = gdg(root)
        refined = found & (jnp.abs(residual) <= _tolerance(target, root, droot))
        # A flat output already at the target to rounding, with no sign change
        # (throughput against accumulation steps when the step scales with m):
        # the grid point nearest the start that is within tolerance.
        close = finite & (jnp.abs(gv) <= _tolerance(target, pts, dgv))
        nearest = jnp.argmin(jnp.where(close, jnp.abs(jnp.arange(pts.shape[0]) - i0), jnp.inf))
        root = jnp.where(refined, root, pts[nearest])
        reached = refined | jnp.any(close)

        # The limit in the target's direction, over the grid and the domain's ends.
        high_end = jnp.asarray(jnp.inf if field.high is None else field.high, dtype)
        ends = [high_end[None]]
        if not field.low_inclusive:
            ends.insert(0, low[None])
        end_pts = jnp.concatenate(ends)
        # Ends first: where the grid's far points equal the end's value to
        # rounding, the limit is attributed to the end ("infinite bandwidth").
        all_pts = jnp.concatenate([end_pts, pts])
        all_g = jnp.concatenate([_map(g, end_pts), gv])
        upward = gv[i0] < 0
        score = jnp.where(jnp.isfinite(all_g), jnp.where(upward, all_g, -all_g), -jnp.inf)
        best = jnp.argmax(score)
        any_finite = jnp.any(jnp.isfinite(all_g))
        return {
            f"solved_{vary}": jnp.where(reached, root, jnp.nan).astype(dtype),
            "solve_reached": reached,
            f"solve_limit_{output}": jnp.where(any_finite, all_g[best] + target,
                                               jnp.nan).astype(dtype),
            f"solve_limit_{vary}": jnp.where(any_finite, all_pts[best], jnp.nan).astype(dtype),
            "solve_blocked": jnp.isfinite(gv[i0]) & ~jnp.all(finite),
        }

    return kernel


@dataclass(frozen=True)
class Solution:
    """The answer for one configuration or a batch (arrays of the batch shape).

    Attributes:
      output, target, vary: the question (``target`` a float, or an array of
        one target per configuration).
      start: ``vary``'s value as given; ``start_value``: the output there.
      solved: the value of ``vary`` reaching the target (NaN where not reached).
      reached: bool.
      limit: best value of ``output`` reachable by varying ``vary``, in the
        target's direction; ``limit_at``: where (+inf: "infinite ``vary``").
      blocked: the search met invalid configurations (see module doc).
    """

    output: str
    target: float
    vary: str
    start: np.ndarray
    start_value: np.ndarray
    solved: np.ndarray
    reached: np.ndarray
    limit: np.ndarray
    limit_at: np.ndarray
    blocked: np.ndarray


def solve(
    inputs: Mapping[str, Any] | None = None,
    target: tuple[str, float] | str = ("mfu_percent", 60.0),
    vary: str = BANDWIDTH,
    model: str | Model = DEFAULT_MODEL,
    x64: bool = False,
) -> Solution:
    """Solve ``output(vary) = target`` for one configuration or a batch.

    Args:
      inputs: input values by name (scalars or arrays broadcast together);
        missing inputs take the model's defaults.  ``vary``'s value is the start.
      target: ``(output, value)`` or ``"output=value"``; ``value`` may be an
        array broadcast with the inputs (one target per configuration).
      vary: a continuous input.
      model: model name or ``Model``.
      x64: compute in float64.

    Raises:
      InputError: an unknown input or a value out of domain.
      SpecError: a bad output / input name or target.
    """
    model = get_model(model)
    output, value, vary, arrays, targets, shape = _question(model, inputs, target, vary, x64)
    dtype = float_dtype(x64)
    with computing():
        flat = model.inputs_type(*(np.broadcast_to(a, shape).reshape(-1).astype(dtype)
                                   for a in arrays.values()))
        targets = targets.astype(dtype)
        program = _batched(model, output, vary, targets.size <= QUICK_ROWS)
        cols, start_value = jax.device_get(program(flat, targets))
    return _solution(output, value, vary, arrays, shape, dtype, cols, start_value)


def solve_on_host(
    inputs: Mapping[str, Any] | None = None,
    target: tuple[str, float] | str = ("mfu_percent", 60.0),
    vary: str = BANDWIDTH,
    model: str | Model = DEFAULT_MODEL,
) -> Solution:
    """:func:`solve` in float64 with NumPy: no jax, no trace, no compile.

    The same solver (:func:`_solver`: the same grid, ``rtsafe`` steps, cap and
    tolerance) runs eagerly on each row inside ``jaxmodel.deferred.on_host``,
    its derivatives by forward mode on the host (``jaxmodel.dual``), the grid
    evaluated in one call of the model.  A row takes milliseconds to a few
    tenths of a second (one model call per step), where jax compiled the
    solver for the refined model for most of a minute (issue 26): for a
    person's few configurations, not a sweep's million.

    Args and returns: as :func:`solve` (always float64).

    Raises:
      ValueError: the model does not declare ``on_host``.
      InputError, SpecError: as :func:`solve`.
    """
    from jaxmodel.deferred import on_host

    model = get_model(model)
    if not model.on_host:
        raise ValueError(f"model {model.name!r} does not declare on_host; use solve")
    output, value, vary, arrays, targets, shape = _question(model, inputs, target, vary, True)
    flat = {k: np.broadcast_to(a, shape).reshape(-1).astype(np.float64)
            for k, a in arrays.items()}
    solver = _solver(model, output, vary, EXPANSIONS, ITERATIONS)
    names = solve_columns(output, vary)
    rows = []
    with on_host():
        for i in range(targets.size):
            x = model.inputs_type(*(np.asarray(flat[f][i]) for f in model.input_names))
            cols = solver(x, np.asarray(targets[i]))
            rows.append((*(cols[c] for c in names), getattr(model.apply(x), output)))
    *cols, start_value = (np.array([r[j] for r in rows]).reshape(-1) for j in range(len(names) + 1))
    cols[names.index("solve_reached")] = cols[names.index("solve_reached")].astype(bool)
    cols[names.index("solve_blocked")] = cols[names.index("solve_blocked")].astype(bool)
    return _solution(output, value, vary, arrays, shape, np.float64,
                     dict(zip(names, cols, strict=True)), start_value)


# A person's question on the host, a batch larger than this on jax (one model call
# per step and row on the host, against one compiled program for all rows).
HOST_ROWS = 8


def answer_solve(
    inputs: Mapping[str, Any] | None = None,
    target: tuple[str, float] | str = ("mfu_percent", 60.0),
    vary: str = BANDWIDTH,
    model: str | Model = DEFAULT_MODEL,
    x64: bool = False,
) -> Solution:
    """A few configurations for a person (``jaxmodel solve``): :func:`solve_on_host`
    where the model runs there and the batch has at most ``HOST_ROWS`` rows
    (float64, no compile), else :func:`solve`."""
    model = get_model(model)
    if model.on_host:
        arrays = resolve_inputs(model, inputs or {})
        rows = int(np.prod(next(iter(arrays.values())).shape, dtype=np.int64))
        value = parse_target(target)[1] if isinstance(target, str) else target[1]
        rows = max(rows, int(np.size(value)))
        if rows <= HOST_ROWS:
            return solve_on_host(inputs, target, vary, model=model)
    return solve(inputs, target, vary, model=model, x64=x64)


def _question(model: Model, inputs, target, vary, x64: bool):
    """The question checked: ``(output, value, vary, arrays, targets, shape)`` with
    the inputs resolved (``arrays``, unbroadcast), the targets flat over the
    broadcast ``shape`` (float64)."""
    output, value = parse_target(target) if isinstance(target, str) else target
    values = np.asarray(value)
    if values.ndim == 0:
        output, value, vary = check_solve(model, output, value, vary)
        values = np.asarray(value)
    else:
        for v in values.ravel()[:1]:
            check_solve(model, output, float(v), vary)
        if values.dtype.kind not in "iuf" or not np.isfinite(values).all():
            raise SpecError(f"solve.target: got values of {output} that are not all finite "
                            "numbers; allowed: finite numbers")
        value = values
    check_representable(output, values, x64)
    arrays = resolve_inputs(model, inputs or {})
    try:
        shape = np.broadcast_shapes(next(iter(arrays.values())).shape, values.shape)
    except ValueError:
        raise SpecError(f"solve.target: got shape {values.shape}; allowed: a shape that "
                        "broadcasts with the inputs") from None
    targets = np.broadcast_to(values, shape).reshape(-1).astype(np.float64)
    return output, value, vary, arrays, targets, shape


def _solution(output, value, vary, arrays, shape, dtype, cols, start_value) -> Solution:
    """The :class:`Solution` of the flat columns, in the batch's ``shape``."""

    def arr(v):
        return np.asarray(v).reshape(shape)

    return Solution(
        output=output, target=value, vary=vary,
        start=np.broadcast_to(arrays[vary], shape).astype(dtype), start_value=arr(start_value),
        solved=arr(cols[f"solved_{vary}"]), reached=arr(cols["solve_reached"]),
        limit=arr(cols[f"solve_limit_{output}"]), limit_at=arr(cols[f"solve_limit_{vary}"]),
        blocked=arr(cols["solve_blocked"]),
    )


def check_representable(output: str, values: Any, x64: bool, where: str = "solve") -> None:
    """Refuse a target that the working precision cannot hold: one that
    overflows to inf, or a nonzero one that underflows (to 0 or a subnormal,
    which would silently ask another question, e.g. 1e-50 -> 0)."""
    info = np.finfo(float_dtype(x64))
    v = np.abs(np.asarray(values, dtype=np.float64))
    bad = (v > info.max) | ((v != 0) & (v < info.tiny))
    if bad.any():
        got = float(np.asarray(values, dtype=np.float64).reshape(-1)[np.argmax(bad.reshape(-1))])
        hint = "" if x64 else ", or use --x64"
        raise SpecError(
            f"{where}.target: got {got:g} for {output}, which {info.dtype} cannot hold; allowed: "
            f"0 or a magnitude between {float(info.tiny):.3g} and {float(info.max):.3g}{hint}")


_CACHE: dict[tuple, Callable] = {}


def _batched(model: Model, output: str, vary: str, quick: bool):
    """``jit(vmap(...))`` of the solver and the output at the start (cached, and its
    lowered form kept on disk when the command line asks:
    :mod:`jaxmodel.program_cache`; the targets are an argument, one per row, so
    new targets do not recompile); ``quick``: compiled with
    :mod:`jaxmodel.xla_options`' options for a short run."""
    key = (model, output, vary, quick)
    if key not in _CACHE:
        solver = _solver(model, output, vary, EXPANSIONS, ITERATIONS)
        names = solve_columns(output, vary)

        def columns(*inputs):
            *x, targets = inputs

            def row(x, target):
                cols = solver(x, target)
                return (*(cols[c] for c in names), getattr(model.apply(x), output))

            return jax.vmap(row)(model.inputs_type(*x), targets)

        columns.__name__ = "solve"
        static = program_key(model)
        if static is not None:
            static = {**static, "output": output, "vary": vary}
        program = CachedProgram("solving.batched", columns, static, quick_compile(quick))

        def run(x, targets):
            *cols, start_value = program(*x, targets)
            return dict(zip(names, cols, strict=True)), start_value

        _CACHE[key] = run
    return _CACHE[key]


def whole_number_answer(solution: Solution, model: Model, inputs: Mapping[str, float]):
    """For a count: the whole value next to the relaxed answer that reaches the target.

    Of ``floor`` and ``ceil`` of the answer, the one nearest the start whose
    output is at or past the target (coming from the start value), with that
    output; ``None`` where neither is valid and past the target.
    """
    s = solution
    x = float(np.asarray(s.solved).reshape(-1)[0])
    field = model.input_field(s.vary)
    target = float(np.asarray(s.target).reshape(-1)[0])
    start_value = float(np.asarray(s.start_value).reshape(-1)[0])
    up = target > start_value
    lo, hi = max(math.floor(x), field.low), math.ceil(x)
    if field.high is not None:
        hi = min(hi, field.high)
    cands = sorted({lo, hi}, key=lambda c: abs(c - float(np.asarray(s.start).reshape(-1)[0])))
    x64 = np.asarray(s.solved).dtype == np.float64
    values = getattr(answer(model, x64=x64, **{**inputs, s.vary: np.array(cands)}), s.output)
    for c, v in zip(cands, values, strict=True):
        if math.isfinite(v) and ((v >= target) if up else (v <= target)):
            return c, float(v)
    return None


def describe(solution: Solution, model: Model | str = DEFAULT_MODEL, index: int = 0,
             inputs: Mapping[str, float] | None = None) -> str:
    """One sentence for a person about row ``index`` of a solution.

    With the configuration's ``inputs`` (one row), a count's relaxed answer is
    followed by the whole number that reaches the target.
    """
    model = get_model(model)
    s = solution
    unit_out = model.output_field(s.output).unit
    unit_in = model.input_field(s.vary).unit.split(" (")[0]

    def at(a):
        return float(np.asarray(a).reshape(-1)[index])

    def q(v, unit):
        return f"{v:.6g} {unit}".rstrip() if unit not in ("%",) else f"{v:.4g}%"

    start, start_value = at(s.start), at(s.start_value)
    target = float(np.broadcast_to(s.target, np.shape(s.start)).reshape(-1)[index])
    s = dataclasses.replace(s, target=target)
    if not math.isfinite(start_value):
        return (f"the configuration is invalid (its {s.output} is undefined), so no value of "
                f"{s.vary} can reach {s.output} = {q(s.target, unit_out)}")
    if at(s.reached):
        text = (f"{s.vary} = {q(at(s.solved), unit_in)} gives {s.output} = "
                f"{q(s.target, unit_out)} (from {q(start_value, unit_out)} at "
                f"{q(start, unit_in)})")
        if inputs is not None and model.input_field(s.vary).integer and np.size(s.solved) == 1:
            whole = whole_number_answer(solution, model, inputs)
            if whole is not None:
                text += (f"; as a whole number, {s.vary} = {whole[0]:g} gives "
                         f"{s.output} = {q(whole[1], unit_out)}")
        return text
    limit, where = at(s.limit), at(s.limit_at)
    if at(s.blocked):
        return (f"{s.output} = {q(s.target, unit_out)} was not reached by varying {s.vary}: "
                f"other values of {s.vary} make the configuration invalid (layout rules); "
                f"the best valid value found gives {q(limit, unit_out)} at {s.vary} = "
                f"{q(where, unit_in)}")
    if (limit - s.target) * (s.target - start_value) > 0:
        return (f"no value of {s.vary} gives {s.output} = {q(s.target, unit_out)} exactly: "
                f"between {q(start, unit_in)} and {q(where, unit_in)} the output jumps past the "
                f"target (a relaxed count crossing a layout rule); it reaches "
                f"{q(limit, unit_out)} at {s.vary} = {q(where, unit_in)}")
    if math.isinf(where):
        how = f"even infinite {s.vary}"
    elif where <= model.input_field(s.vary).low or where < start:
        how = f"even {s.vary} as low as {q(where, unit_in)}"
    else:
        how = f"even {s.vary} as high as {q(where, unit_in)}"
    verb = "caps" if s.target > start_value else "leaves"
    tail = "" if verb == "caps" else " at best"
    return (f"{s.output} = {q(s.target, unit_out)} is out of reach by varying {s.vary}: "
            f"{how} {verb} {s.output} at {q(limit, unit_out)}{tail}")
