"""Bottleneck and regime codes (on the device) and verdict sentences (on the host).

A verdict has the seed's shape: ``"<regime> -- <reason with the figures>.
<the concrete lever>"``.  The regime is decided on the device (so it vmaps and
lands in sweep columns) by these rules, in order:

1. ``invalid``: the layout breaks the validity rule.
2. ``communication-bound``: the largest step-time term is a collective
   (``tp_comm``, ``pp_comm``, the exposed ``dp_allreduce`` or the exposed
   expert all-to-all ``moe_comm``); the verdict names it.
3. ``bubble-bound``: the largest term is the pipeline bubble.
4. ``compute-bound``: compute is the largest term and MFU is at least
   ``COMPUTE_BOUND_MFU_PERCENT`` (75%: all overheads together cost at most a
   third of the compute time).
5. ``overhead-limited``: compute is the largest single term, but the overheads
   together drag MFU below that threshold (the seed example, at 51%).

Ties between terms go to the earlier name in ``BOTTLENECKS`` (argmax order).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

BOTTLENECKS: tuple[str, ...] = (
    "compute",
    "tp_comm",
    "pp_comm",
    "pipeline_bubble",
    "dp_allreduce",
    "moe_comm",
    "invalid",
)
REGIMES: tuple[str, ...] = (
    "compute-bound",
    "overhead-limited",
    "communication-bound",
    "bubble-bound",
    "invalid",
)
COMPUTE_BOUND_MFU_PERCENT = 75.0

_COMPUTE, _TP, _PP, _BUBBLE, _DP, _MOE, _INVALID_TERM = range(7)
_CB, _OVERHEAD, _COMM, _BUBBLE_BOUND, _INVALID = range(5)


def bottleneck_and_regime(terms, mfu_percent, valid):
    """Codes into ``BOTTLENECKS`` and ``REGIMES`` (int32 scalars).

    Args:
      terms: the step-time terms in ``BOTTLENECKS`` order (a model without
        expert all-to-all passes the first five).
      mfu_percent: scalar.
      valid: scalar bool.
    """
    # An unrolled argmax (first index wins ties): cheaper than jnp.argmax
    # over a stacked axis once vmapped, on every backend.
    best = terms[0]
    top = jnp.zeros((), dtype=jnp.int32)
    for i in range(1, terms.shape[0]):
        better = terms[i] > best
        top = jnp.where(better, jnp.int32(i), top)
        best = jnp.where(better, terms[i], best)
    bottleneck = jnp.where(valid, top, _INVALID_TERM).astype(jnp.int32)
    regime = jnp.where(
        top == _COMPUTE,
        jnp.where(mfu_percent >= COMPUTE_BOUND_MFU_PERCENT, _CB, _OVERHEAD),
        jnp.where(top == _BUBBLE, _BUBBLE_BOUND, _COMM),
    )
    return bottleneck, jnp.where(valid, regime, _INVALID).astype(jnp.int32)


_COLLECTIVES = {
    "tp_comm": (
        "the tensor-parallel all-reduce",
        "Lower tensor parallelism (t = {t}) or widen the interconnect; "
        "a larger micro-batch does not help, TP traffic grows with it",
    ),
    "pp_comm": (
        "the pipeline point-to-point transfer",
        "Use fewer pipeline stages (p = {p}) or widen the interconnect",
    ),
    # The all-reduce (2 P / (t p) bytes) and the backward pass (4 P b m s / (t p F))
    # shrink alike with more sharding, so t and p are no lever: it hides once
    # b m s >= (d - 1) / d x F / B tokens per replica, i.e. more micro-batches.
    "dp_allreduce": (
        "the exposed data-parallel gradient all-reduce",
        "Raise gradient-accumulation micro-batches to m >= {m_hide} (now {m}) so the backward "
        "pass hides it, or widen the interconnect",
    ),
    # Dispatch and combine bytes per GPU do not shrink with more micro-batches
    # or more replicas; they leave NVLink when the EP group spans nodes.
    "moe_comm": (
        "the expert all-to-all (token dispatch and combine)",
        "{ep_lever}, overlap it with compute (moe_overlap, 1F1B all-to-all overlap), or use "
        "a hierarchical dispatcher with node-limited routing",
    ),
}


def _ep_lever(inputs: Mapping[str, float]) -> str:
    e = int(inputs.get("expert_parallel", 1))
    etp = int(inputs.get("expert_tensor_parallel", 1))
    g = int(inputs.get("gpus_per_node", 8))
    inside = max(g // max(etp, 1), 1)
    if e * etp > g:
        return (f"Keep expert parallelism inside the NVLink domain (e = {e} spans "
                f"{-(-e * etp // g)} nodes of {g} GPUs; e <= {inside} stays in one)")
    return f"Widen NVLink or lower expert parallelism (e = {e}, inside one node)"



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


def invalid_layout_reasons(inputs: Mapping[str, float]) -> list[tuple[str, str]]:
    """(problem, fix) pairs for each broken part of the layout validity rule."""
    n, t, p = int(inputs["num_gpus"]), int(inputs["tensor_parallel"]), int(
        inputs["pipeline_parallel"]
    )
    layers, hidden = int(inputs["num_layers"]), int(inputs["hidden_dim"])
    reasons = []
    if t * p > n:
        reasons.append(
            (
                f"tensor x pipeline = {t} x {p} = {t * p} GPUs per replica, "
                f"more than the {n} available",
                f"Use at least {t * p} GPUs, or lower tensor or pipeline parallelism "
                f"so that t x p <= {n}.",
            )
        )
    if layers % p:
        reasons.append(
            (
                f"{layers} layers do not split evenly into {p} pipeline stages",
                f"Choose a pipeline depth that divides {layers} "
                f"(nearest: {_divisors_near(layers, p)}), or a layer count that is a "
                f"multiple of {p} ({_multiples_near(layers, p)}).",
            )
        )
    if hidden % t:
        reasons.append(
            (
                f"hidden size {hidden} does not split evenly over {t} tensor-parallel ranks",
                f"Choose a tensor-parallel degree that divides {hidden} "
                f"(nearest: {_divisors_near(hidden, t)}), or a hidden size that is a "
                f"multiple of {t} ({_multiples_near(hidden, t)}).",
            )
        )
    return reasons


def _name(table: tuple[str, ...], code: Any) -> str:
    return code if isinstance(code, str) else table[int(code)]


def render_verdict(
    inputs: Mapping[str, float],
    outputs: Mapping[str, Any],
    invalid_reasons: list[tuple[str, str]],
) -> str:
    """The verdict sentence for one configuration.

    Args:
      inputs: input values by name (host scalars).
      outputs: output values by name (host scalars); ``regime`` and
        ``bottleneck`` may be codes or names.
      invalid_reasons: what the model found wrong with an invalid layout.
    """
    regime = _name(REGIMES, outputs["regime"])
    if regime == "invalid":
        problems = "; ".join(r for r, _ in invalid_reasons) or "the layout is not valid"
        fixes = " ".join(f for _, f in invalid_reasons)
        # The seed's verdict ends without a full stop; so does this one.
        return f"invalid layout -- {problems}. {fixes}".rstrip().rstrip(".")

    mfu = float(outputs["mfu_percent"])
    step = float(outputs["step_time_ms"])
    compute = float(outputs["compute_time_ms"])
    bubble = float(outputs["pipeline_bubble_ms"])
    comm = step - compute - bubble
    t, p = int(inputs["tensor_parallel"]), int(inputs["pipeline_parallel"])
    m = int(inputs["gradient_accum_steps"])

    if regime == "compute-bound":
        return (
            f"compute-bound -- compute is {_pct(compute, step)} of the step and "
            f"model-FLOPs utilisation is {mfu:.0f}%; communication and the pipeline bubble "
            f"are small. Only faster GPUs (more TFLOP/s) shorten the step; to train faster, "
            f"add data-parallel replicas (tokens/s grows with d at about the same step time)"
        )
    if regime == "overhead-limited":
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
        return (
            f"bubble-bound -- the pipeline bubble is the largest single term at {_ms(bubble)} "
            f"({_pct(bubble, step)} of the step): with p = {p} stages and m = {m} micro-batches "
            f"the pipeline idles (p - 1) / m = {(p - 1) / m:.2g} x the compute time, dragging "
            f"model-FLOPs utilisation to {mfu:.0f}%. Raise gradient-accumulation micro-batches "
            f"well above the {p} pipeline stages, or use fewer stages"
        )
    term = _name(BOTTLENECKS, outputs["bottleneck"])
    what, lever = _COLLECTIVES[term]
    value = float(outputs[{"tp_comm": "tp_comm_ms", "pp_comm": "pp_comm_ms",
                           "moe_comm": "moe_comm_ms"}.get(term, "dp_allreduce_ms")])
    # Backward (2/3 compute) grows with m while the all-reduce does not.
    dp_raw = float(outputs.get("dp_allreduce_raw_ms", 0.0))
    m_hide = math.ceil(m * dp_raw / (2.0 / 3.0 * compute)) if compute > 0 else m
    return (
        f"communication-bound -- {what} is the largest single term at {_ms(value)} "
        f"({_pct(value, step)} of the step, against {_ms(compute)} of compute), dragging "
        f"model-FLOPs utilisation to {mfu:.0f}%. "
        f"{lever.format(t=t, p=p, m=m, m_hide=m_hide, ep_lever=_ep_lever(inputs))}"
    )
