"""Bottleneck and regime codes (on the device) and verdict sentences (on the host).

Everything here is derived from a model's declared ``terms``
(:class:`jaxmodel.models.base.Term`); no term is named here.  A verdict has the
seed's shape: ``"<regime> -- <reason with the figures>. <the concrete lever>"``.
The regime is decided on the device (so it vmaps and lands in sweep columns)
by these rules, in order:

1. ``invalid``: the layout breaks the validity rule.
2. ``communication-bound``: the largest step-time term is a collective (a
   term of kind ``communication``); the verdict names it and its lever.
3. ``bubble-bound``: the largest term is of kind ``bubble`` (the pipeline bubble).
4. ``compute-bound``: the largest term is of kind ``compute`` and MFU is at
   least ``COMPUTE_BOUND_MFU_PERCENT`` (75%: all overheads together cost at
   most a third of the compute time).
5. ``overhead-limited``: compute is the largest single term, but MFU is below
   that threshold (the seed example, at 51%).  The verdict names the larger
   drag: the collectives and the bubble around compute (``step - compute``),
   or compute's own slowness (``compute - MFU x step``), split by cause when the
   model gives them (``compute_parts``: the refined model's GEMM shapes and
   attention, memory-bound kernels, recompute).

This is the one rule of every model: the regime compares MFU (model FLOPs
against the GPU's peak), never the compute share of the step, with the
threshold, so "compute-bound" always means a step near the hardware's limit.

Ties between terms go to the earlier term in the model's ``terms`` (argmax order).
The bubble-bound sentence speaks of the pipeline inputs of the 3D-parallel
models (``pipeline_parallel``, ``gradient_accum_steps``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from jaxmodel.deferred import jnp
from jaxmodel.models.base import Term
from jaxmodel.models.terms import bottleneck_categories

REGIMES: tuple[str, ...] = (
    "compute-bound",
    "overhead-limited",
    "communication-bound",
    "bubble-bound",
    "invalid",
)
COMPUTE_BOUND_MFU_PERCENT = 75.0

_CB, _OVERHEAD, _COMM, _BUBBLE_BOUND, _INVALID = range(5)


class ComputePart(NamedTuple):
    """One cause of compute time beyond the ideal (model FLOPs at the peak).

    Attributes:
      what: the cause in a verdict sentence (``memory-bound kernels``).
      ms: its time per step, ms.
      lever: the sentence that shortens it.
    """

    what: str
    ms: float
    lever: str
_KIND_CODES = {"compute": 0, "bubble": 1, "communication": 2}


def bottleneck_and_regime(terms: tuple[Term, ...], values, mfu_percent, valid):
    """Codes into ``bottleneck_categories(terms)`` and ``REGIMES`` (int32 scalars).

    Args:
      terms: the model's declared terms.
      values: one scalar per term, in ``terms`` order (the value that competes
        for the bottleneck; a model may fold a related cost into a term).
      mfu_percent: scalar, compared with ``COMPUTE_BOUND_MFU_PERCENT``.
      valid: scalar bool.
    """
    if len(values) != len(terms):
        raise ValueError(f"bottleneck_and_regime: {len(values)} values for {len(terms)} terms")
    categories = bottleneck_categories(terms)
    codes = [categories.index(t.name) for t in terms]
    kinds = [_KIND_CODES[t.kind] for t in terms]
    # An unrolled argmax (first index wins ties): cheaper than jnp.argmax
    # over a stacked axis once vmapped, on every backend.
    best = values[0]
    top = jnp.int32(codes[0])
    kind = jnp.int32(kinds[0])
    for i in range(1, len(terms)):
        better = values[i] > best
        top = jnp.where(better, jnp.int32(codes[i]), top)
        kind = jnp.where(better, jnp.int32(kinds[i]), kind)
        best = jnp.where(better, values[i], best)
    bottleneck = jnp.where(valid, top, categories.index("invalid")).astype(jnp.int32)
    regime = jnp.where(
        kind == _KIND_CODES["compute"],
        jnp.where(mfu_percent >= COMPUTE_BOUND_MFU_PERCENT, _CB, _OVERHEAD),
        jnp.where(kind == _KIND_CODES["bubble"], _BUBBLE_BOUND, _COMM),
    )
    return bottleneck, jnp.where(valid, regime, _INVALID).astype(jnp.int32)


def _ms(v: float) -> str:
    return f"{v:.0f} ms" if abs(v) >= 100 else f"{v:.3g} ms"


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.0f}%"


def _divisors_near(n: int, k: int) -> str:
    """Up to four divisors of ``n`` closest to ``k``, ascending."""
    divs = [q for q in range(1, n + 1) if n % q == 0] if n <= 10**6 else [1, n]
    near = sorted(sorted(divs, key=lambda q: (abs(q - k), q))[:4])
    return ", ".join(str(q) for q in near)


def _multiples_near(n: int, k: int) -> str:
    """The multiples of ``k`` just below and above ``n`` (the one below only if >= k)."""
    below = n // k * k
    return f"{below} or {below + k}" if below else f"{k}"


def _name(table: tuple[str, ...], code: Any) -> str:
    return code if isinstance(code, str) else table[int(code)]


def render_verdict(
    terms: tuple[Term, ...],
    inputs: Mapping[str, float],
    outputs: Mapping[str, Any],
    invalid_reasons: list[tuple[str, str]],
    compute_parts: Sequence[ComputePart] = (),
) -> str:
    """The verdict sentence for one configuration.

    Args:
      terms: the model's declared terms.
      inputs: input values by name (host scalars).
      outputs: output values by name (host scalars); ``regime`` and
        ``bottleneck`` may be codes or names.
      invalid_reasons: what the model found wrong with an invalid layout.
      compute_parts: the compute term's time beyond the ideal by cause, largest
        first (empty: a model whose compute runs at the peak, as the seed's).
    """
    regime = _name(REGIMES, outputs["regime"])
    if regime == "invalid":
        problems = "; ".join(r for r, _ in invalid_reasons) or "the layout is not valid"
        fixes = " ".join(f for _, f in invalid_reasons)
        # The seed's verdict ends without a full stop; so does this one.
        return f"invalid layout -- {problems}. {fixes}".rstrip().rstrip(".")

    mfu = float(outputs["mfu_percent"])
    step = float(outputs["step_time_ms"])
    compute = sum(float(outputs[t.output]) for t in terms if t.kind == "compute")
    bubble = sum(float(outputs[t.output]) for t in terms if t.kind == "bubble")
    comm = step - compute - bubble

    if regime == "compute-bound":
        return (
            f"compute-bound -- compute is {_pct(compute, step)} of the step and "
            f"model-FLOPs utilisation is {mfu:.0f}%; communication and the pipeline bubble "
            f"are small. Only faster GPUs (more TFLOP/s) shorten the step; to train faster, "
            f"add data-parallel replicas (tokens/s grows with d at about the same step time)"
        )
    if regime == "overhead-limited":
        ideal = mfu / 100.0 * step
        excess, overhead = compute - ideal, step - compute
        if excess > overhead and any(p.ms > 0 for p in compute_parts):
            causes = ", ".join(f"{p.what} {_ms(p.ms)}" for p in compute_parts if p.ms > 0)
            lever = next(p.lever for p in compute_parts if p.ms > 0)
            return (
                f"overhead-limited -- compute is the largest term ({_pct(compute, step)} of the "
                f"step) but runs at {_pct(ideal, compute)} of the GPU's peak, so model-FLOPs "
                f"utilisation is {mfu:.0f}%: of its {_ms(compute)}, {_ms(excess)} is beyond the "
                f"ideal: {causes}; communication and the pipeline bubble add "
                f"{_ms(overhead)}. {lever}"
            )
        if bubble > 0 and comm > 0:
            lever = (
                "Raise gradient-accumulation micro-batches to shrink the bubble, "
                "or widen the interconnect to hide the collectives"
            )
        elif bubble > 0:
            lever = "Raise gradient-accumulation micro-batches to shrink the bubble"
        else:
            lever = "Widen the interconnect or lower tensor parallelism to hide the collectives"
        return (
            "overhead-limited -- compute is still the largest single term, but the combined "
            "communication + pipeline-bubble overhead drags model-FLOPs utilisation to "
            f"{mfu:.0f}%. {lever}"
        )
    if regime == "bubble-bound":
        p, m = int(inputs["pipeline_parallel"]), int(inputs["gradient_accum_steps"])
        return (
            f"bubble-bound -- the pipeline bubble is the largest single term at {_ms(bubble)} "
            f"({_pct(bubble, step)} of the step): with p = {p} stages and m = {m} micro-batches "
            f"the pipeline idles (p - 1) / m = {(p - 1) / m:.2g} x the compute time, dragging "
            f"model-FLOPs utilisation to {mfu:.0f}%. Raise gradient-accumulation micro-batches "
            f"well above the {p} pipeline stages, or use fewer stages"
        )
    name = _name(bottleneck_categories(terms), outputs["bottleneck"])
    term = next(t for t in terms if t.name == name)
    what = term.what or f"the {term.title or term.label}"
    lever = term.lever(inputs, outputs) if term.lever else "Widen the interconnect"
    value = float(outputs[term.output])
    return (
        f"communication-bound -- {what} is the largest single term at {_ms(value)} "
        f"({_pct(value, step)} of the step, against {_ms(compute)} of compute), dragging "
        f"model-FLOPs utilisation to {mfu:.0f}%. {lever}"
    )
