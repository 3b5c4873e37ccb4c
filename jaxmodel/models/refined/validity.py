"""The refined model's validity rule, on the device and in words.

A layout is valid (``valid_layout``) when it is well formed and the fullest
stage fits in ``gpu_memory_gb`` (``fits_in_memory``, computed in
``jaxmodel.models.refined.memory``).  Well formed (``layout_ok``): at least
one replica (``d = N / (t c p) >= 1``); ``num_layers`` (+ 2 with
``pipeline_split_embedding``, + ``mtp_layers`` with ``mtp_in_pipeline_split``) at
least the ``p v`` chunks (an uneven split is
valid: the busiest stage sets the pace); ``hidden_dim``, ``num_heads`` and
``num_kv_heads`` divide by ``t``; ``num_heads`` divides by ``num_kv_heads``;
the interleaved schedule needs ``m`` a multiple of ``p`` (Megatron-LM's
requirement); ZB-H1 runs ``v = 1``, ZB-V ``v = 2``; ``seq_length`` divides by
``2 c`` (and, with all-to-all context parallelism, ``a / t`` and ``kv / t``
by ``c``); ``zero_shard_degree`` divides ``d c``; the expert layout
(``moe_layout_ok``) folds onto the stage's GPUs; and the GPU has tensor cores
for ``precision`` (``precision_ok``: its peak input above 0), and FP8 attention
runs in the fused kernel on a GPU with FP8 (``fp8_attention_ok``); a hybrid model's
Mamba-2 and attention layers are at most ``num_layers``, ``t`` divides
``mamba_heads`` and ``mamba_groups`` (``hybrid_ok``; Megatron-Core's
MambaMixer splits both) and it runs without context parallelism (the
Mamba-2 layers' is not modelled).  Timings are NaN for an
invalid layout; ``memory_gb_per_gpu`` is reported whenever the layout itself
is well formed, so the verdict can say by how much it does not fit.

``layout_reasons`` says, host side, which of these rules a configuration
breaks and how to fix it; ``refined_verdict`` is the model's verdict sentence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from jaxmodel.deferred import jnp
from jaxmodel.models.common import whole
from jaxmodel.models.compute_drag import refined_compute_parts
from jaxmodel.models.refined.fields import TERMS
from jaxmodel.models.refined.pipeline import split_mtp_units, uneven_note
from jaxmodel.models.verdicts import _divisors_near, render_verdict


def layout_ok(x, d_i, t_i, c_i, p_i, v_i, m_i, schedule):
    """The layout rule without the memory fit (int64 counts in, bool out)."""
    heads_i, kv_i = whole(x.num_heads), whole(x.num_kv_heads)
    split_i = whole(x.pipeline_split_embedding)
    mtp_i = whole(x.mtp_in_pipeline_split) * whole(x.mtp_layers)
    dc_i = jnp.maximum(d_i, 1) * c_i
    shard_i = jnp.where(whole(x.zero_shard_degree) == 0, dc_i, whole(x.zero_shard_degree))
    return (
        (d_i >= 1)
        & (whole(x.num_layers) + 2 * split_i + mtp_i >= p_i * v_i)
        & last_stage_ok(x, p_i)
        & (whole(x.hidden_dim) % t_i == 0)
        & (heads_i % t_i == 0)
        & (kv_i % t_i == 0)
        & (heads_i % kv_i == 0)
        & ((v_i == 1) | (m_i % p_i == 0) | (schedule == 2))
        & (((schedule == 0)) | ((schedule == 1) & (v_i == 1)) | ((schedule == 2) & (v_i == 2)))
        & ((c_i == 1) | (whole(x.seq_length) % (2 * c_i) == 0))
        & ((whole(x.cp_comm) != 2) | (((heads_i // t_i) % c_i == 0) & ((kv_i // t_i) % c_i == 0)))
        & (shard_i <= dc_i) & (dc_i % jnp.maximum(shard_i, 1) == 0)
        & moe_layout_ok(x, t_i, c_i * d_i)
        & precision_ok(x)
        & fp8_attention_ok(x)
        & hybrid_ok(x, t_i)
    )


def _first_stage_layers(layers, last, p):
    """Layers of the first stage when the last holds ``last`` (``pipeline``'s
    ``last_stage_layers``): the rest over ``p - 1`` stages, the first the remainder."""
    others = max(p - 1, 1)
    per = -(-(layers - last) // others)
    return layers - last - (p - 2) * per


def last_stage_ok(x, p_i):
    """``last_stage_layers`` (0: unset) leaves every other stage at least one layer."""
    z_i, layers_i = whole(x.last_stage_layers), whole(x.num_layers)
    others = jnp.maximum(p_i - 1, 1)
    per = (layers_i - z_i + others - 1) // others
    first = layers_i - z_i - (p_i - 2) * per
    return (z_i == 0) | (p_i == 1) | ((layers_i - z_i >= p_i - 1) & (first >= 1))


def hybrid_ok(x, t_i):
    """A hybrid model's layers add up, its Mamba-2 heads and groups split over ``t``, and
    it has no context parallelism (not modelled for the Mamba-2 layers)."""
    mamba_i = whole(x.mamba_layers)
    return ((mamba_i == 0)
            | ((mamba_i + whole(x.attention_layers) <= whole(x.num_layers))
               & (whole(x.mamba_heads) % t_i == 0) & (whole(x.mamba_groups) % t_i == 0)
               & (whole(x.context_parallel) == 1)))


# The peak input of each low precision (precision 1, 2, 3).
_PRECISION_PEAKS = ("fp8_peak_tflops", "mxfp8_peak_tflops", "fp4_peak_tflops")
_PRECISION_NAMES = ("BF16", "per-tensor FP8", "block-scaled FP8", "NVFP4")


def precision_ok(x):
    """The GPU has tensor cores for ``precision``: its peak input is above 0."""
    p = whole(x.precision)
    peak = jnp.select([p == 1, p == 2, p == 3],
                      [getattr(x, name) for name in _PRECISION_PEAKS], 1.0)
    return peak > 0


def fp8_attention_ok(x):
    """FP8 attention (``fp8_attention``) runs in the fused kernel (``flash_attention`` 1,
    ``attention_kernel`` 0) on a GPU with FP8 tensor cores."""
    return ((x.fp8_attention < 0.5)
            | ((x.fp8_peak_tflops > 0) & (whole(x.attention_kernel) == 0)
               & (x.flash_attention > 0.5)))


def moe_layout_ok(x, t_i, dc_i):
    """The expert layout's part of the validity rule (int64 counts in).

    ``e`` divides ``E``; ``etp e`` divides the stage's ``t c d`` GPUs (parallel
    folding); ``k <= E``; ``etp`` divides the expert width.  A dense model
    needs only ``e = 1`` (``e`` divides ``E = 1``).
    """
    E, e, etp = whole(x.num_experts), whole(x.expert_parallel), whole(x.expert_tensor_parallel)
    dense = E == 1
    folded = jnp.maximum(t_i * dc_i, 1)
    return ((E % e == 0)
            & (dense | ((folded % (etp * e) == 0) & (whole(x.experts_per_token) <= E)
                        & (whole(x.moe_ffn_hidden_dim) % etp == 0))))


def layout_reasons(inputs: Mapping[str, float], outputs: Mapping[str, Any]
                   ) -> list[tuple[str, str]]:
    """(problem, fix) pairs for everything the refined validity rule rejects."""
    n, t, p = int(inputs["num_gpus"]), int(inputs["tensor_parallel"]), int(
        inputs["pipeline_parallel"])
    c = int(inputs.get("context_parallel", 1))
    v, m = int(inputs["virtual_stages"]), int(inputs["gradient_accum_steps"])
    layers, hidden = int(inputs["num_layers"]), int(inputs["hidden_dim"])
    heads, kv = int(inputs["num_heads"]), int(inputs["num_kv_heads"])
    e = int(inputs.get("pipeline_split_embedding", 0))
    u = split_mtp_units(inputs)
    schedule = int(inputs.get("pipeline_schedule", 0))
    reasons = []
    precision = int(inputs.get("precision", 0))
    if precision and inputs.get(_PRECISION_PEAKS[precision - 1], 1.0) <= 0:
        reasons.append((
            f"precision {precision} ({_PRECISION_NAMES[precision]}) has no tensor cores on "
            f"this GPU ({_PRECISION_PEAKS[precision - 1]} 0)",
            "Use a precision the GPU runs (A100: 0; H100: 0-2; Blackwell: 0-3).",
        ))
    if int(inputs.get("fp8_attention", 0)) and (
            inputs.get("fp8_peak_tflops", 1.0) <= 0 or int(inputs.get("attention_kernel", 0))
            or not int(inputs.get("flash_attention", 1))):
        reasons.append((
            "FP8 attention (fp8_attention 1) runs only in the fused kernel (flash_attention 1, "
            "attention_kernel 0) on a GPU with FP8 tensor cores",
            "Use fp8_attention 0, or the fused kernel on an H100 or newer.",
        ))
    if int(inputs.get("cp_comm", 0)) == 2 and c > 1 and (heads // t % c or kv // t % c):
        reasons.append((
            f"all-to-all context parallelism splits the {heads // t} heads (and {kv // t} "
            f"key/value heads) of a tensor-parallel rank over {c} ranks unevenly",
            "Use a context-parallel degree that divides the heads per tensor-parallel rank, "
            "or the ring (cp_comm 0).",
        ))
    if t * c * p > n:
        reasons.append((
            f"tensor x context x pipeline = {t} x {c} x {p} = {t * c * p} GPUs per replica, "
            f"more than the {n} available",
            f"Use at least {t * c * p} GPUs, or lower tensor, context or pipeline "
            f"parallelism so that t x c x p <= {n}.",
        ))
    if layers + 2 * e + u < p * v:
        units = (f"{layers} layers" + (" + embedding + output layer" if e else "")
                 + (f" + {u} MTP module{'s' * (u > 1)}" if u else ""))
        reasons.append((
            f"{units} cannot fill {p} stages x {v} virtual chunks",
            f"Use fewer pipeline stages or virtual chunks (p x v <= {layers + 2 * e + u}).",
        ))
    last = int(inputs.get("last_stage_layers", 0))
    if last and p > 1 and (layers - last < p - 1 or _first_stage_layers(layers, last, p) < 1):
        reasons.append((
            f"{last} layers on the last stage leave {layers - last} for the other {p - 1} "
            f"stages, {-(-(layers - last) // (p - 1))} a stage, and none for the first",
            "Use a last_stage_layers that leaves every other stage a layer, or 0 for the "
            "even split.",
        ))
    if hidden % t:
        reasons.append((
            f"hidden size {hidden} does not split evenly over {t} tensor-parallel ranks",
            f"Choose a tensor-parallel degree that divides {hidden}.",
        ))
    for what, heads_count in (("attention heads", heads), ("key/value heads", kv)):
        if heads_count % t:
            reasons.append((
                f"{heads_count} {what} do not split evenly over {t} tensor-parallel ranks",
                f"Choose a tensor-parallel degree that divides {heads_count}.",
            ))
    if heads % kv:
        reasons.append((f"{heads} attention heads do not group evenly into {kv} key/value "
                        "heads", f"Use a key/value head count that divides {heads}."))
    if schedule == 0 and v > 1 and m % p:
        reasons.append((
            f"the interleaved schedule needs the {m} micro-batches to be a multiple of "
            f"the {p} stages",
            f"Use a multiple of {p} gradient-accumulation micro-batches, or v = 1.",
        ))
    if schedule == 1 and v != 1:
        reasons.append((f"the ZB-H1 schedule runs one chunk per stage, not v = {v}",
                        "Use virtual_stages = 1 with pipeline_schedule 1."))
    if schedule == 2 and v != 2:
        reasons.append((f"the ZB-V schedule runs two chunks per stage, not v = {v}",
                        "Use virtual_stages = 2 with pipeline_schedule 2."))
    seq = int(inputs["seq_length"])
    if c > 1 and seq % (2 * c):
        reasons.append((
            f"sequence length {seq} does not split into 2 x {c} chunks (context parallelism "
            "balances the causal mask with two chunks per rank)",
            f"Use a sequence length that is a multiple of {2 * c}, or another context degree.",
        ))
    d = n // (t * c * p) if t * c * p else 0
    shard = int(inputs.get("zero_shard_degree", 0))
    if d >= 1 and shard and (shard > d * c or (d * c) % shard):
        reasons.append((
            f"zero_shard_degree {shard} does not divide the {d * c} data x context ranks",
            f"Use a divisor of {d * c}, or 0 for all of them.",
        ))
    reasons += moe_layout_reasons(inputs, outputs)
    reasons += hybrid_reasons(inputs, t)
    memory = outputs.get("memory_gb_per_gpu")
    if not reasons and memory is not None and not bool(outputs.get("fits_in_memory", True)):
        need, have = float(memory), float(inputs["gpu_memory_gb"])
        reasons.append((
            f"does not fit in memory by {need - have:.1f} GB ({need:.1f} GB needed per GPU, "
            f"{have:g} GB available)",
            "Use more pipeline, tensor or context parallelism, full activation recompute, "
            "sequence parallelism, ZeRO, or a smaller micro-batch.",
        ))
    return reasons


def hybrid_reasons(inputs: Mapping[str, float], t: int) -> list[tuple[str, str]]:
    """(problem, fix) pairs for a hybrid model's layers (``hybrid_ok``)."""
    mamba = int(inputs.get("mamba_layers", 0))
    if not mamba:
        return []
    reasons = []
    attention, layers = int(inputs.get("attention_layers", 0)), int(inputs["num_layers"])
    if mamba + attention > layers:
        reasons.append((
            f"mamba_layers {mamba} + attention_layers {attention} exceed the {layers} layers",
            "Count each layer of the hybrid pattern once: num_layers is its length.",
        ))
    for name in ("mamba_heads", "mamba_groups"):
        value = int(inputs.get(name, 1))
        if value % t:
            reasons.append((f"tensor parallelism t = {t} does not divide {name} {value}",
                            f"Use a tensor-parallel degree that divides {value}."))
    c = int(inputs.get("context_parallel", 1))
    if c > 1:
        reasons.append((f"context parallelism c = {c} of the Mamba-2 layers is not modelled",
                        "Use context_parallel 1 for a hybrid model."))
    return reasons


def moe_layout_reasons(inputs: Mapping[str, float], outputs: Mapping[str, Any]
                       ) -> list[tuple[str, str]]:
    """(problem, fix) pairs for the expert layout (``moe_layout_ok``)."""
    # (a caller may pass only the dense inputs: a dense model then)
    E, e = int(inputs.get("num_experts", 1)), int(inputs.get("expert_parallel", 1))
    etp, k = (int(inputs.get("expert_tensor_parallel", 1)),
              int(inputs.get("experts_per_token", 1)))
    reasons = []
    if E % e:
        reasons.append((
            f"expert parallelism e = {e} does not divide the {E} experts",
            f"Choose e among the divisors of {E} (nearest: {_divisors_near(E, e)}).",
        ))
    if E == 1:
        return reasons
    d = outputs.get("data_parallel")
    folded = (int(inputs["tensor_parallel"]) * int(inputs.get("context_parallel", 1)) * int(d)
              if d is not None else 0)
    if folded >= 1 and folded % (etp * e):
        reasons.append((
            f"expert-tensor x expert parallelism = {etp} x {e} = {etp * e} does not divide the "
            f"{folded} GPUs of a pipeline stage (t x c x d)",
            f"Choose etp x e dividing {folded} (e nearest: "
            f"{_divisors_near(math.gcd(folded // etp, E) or 1, e)}).",
        ))
    if k > E:
        reasons.append((f"{k} experts per token exceed the {E} experts",
                        f"Use at most {E} experts per token."))
    ffn = int(inputs["moe_ffn_hidden_dim"])
    if ffn % etp:
        reasons.append((
            f"expert width {ffn} does not split over {etp} expert-tensor-parallel ranks",
            f"Choose an expert tensor parallelism that divides {ffn} "
            f"(nearest: {_divisors_near(ffn, etp)}).",
        ))
    return reasons


def refined_verdict(inputs: Mapping[str, float], outputs: Mapping[str, Any]) -> str:
    """The verdict sentence for one evaluated configuration."""
    verdict = render_verdict(TERMS, inputs, outputs, layout_reasons(inputs, outputs),
                             refined_compute_parts(inputs, outputs))
    if verdict.startswith("invalid"):
        return verdict
    note = uneven_note(inputs)
    return verdict + ("." + note if note else "")


