"""Memory per GPU: model state and activations of every stage kind; the fullest is reported.

* **Model state** (Rajbhandari et al. 2020, sec. 3.1): per parameter bf16
  weights 2, the gradient buffer ``grad_buffer_bytes`` (fp32 ``main_grad`` by
  default), fp32 master, momentum and variance 12 (Megatron-Core
  distributed-optimizer guide: 18 bytes, or 6 + 12 / d sharded).  ZeRO-1
  shards the 12 over ``z`` ranks, ZeRO-2 also the gradients, ZeRO-3
  everything, and then holds two layers' weights gathered (the one in use, the
  one prefetched) and one layer's gradients unsharded.  FP8 (Transformer
  Engine) keeps an FP8 copy and its transpose of each layer weight (2 bytes).
  The routed experts: the same bytes per parameter, sharded over their ``edp``
  replicas instead.
* **Activations** (Korthikanti et al. 2022, sec. 4, Table 2) per layer and
  micro-batch: ``s b h (10 + 24 / t + 5 a s / (h t))`` without recompute,
  ``s b h (10 + 24 / t)`` selective, ``2 s b h`` full; with sequence
  parallelism ``s b h (34 + 5 a s / h) / t``, ``34 s b h / t``, ``2 s b h / t``
  (the ``10`` and ``24`` generalised in ``layer_activation_bytes`` to
  grouped-query attention and any ``ffn_hidden_dim``).  The first stage holds
  ``min(m, p)`` micro-batches of its layers, times ``1 + (p - 1) / (p v)`` when
  interleaved (sec. 4.2.3); full recompute also holds one layer's full
  activations while it is recomputed.  The output layer's input (sec. 4.3) and
  the logits sit on the last stage, the embedding's dropout mask on the first.
* **Other**: tensor-parallel overlap's userbuffers and ``reserved_memory_gb``
  (CUDA context, NCCL buffers, library workspaces, fragmentation).

Every stage kind (first, middle, last) is computed; the fullest is reported
(``memory_gb_per_gpu``) and must fit in ``gpu_memory_gb``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from jaxmodel.models.common import whole
from jaxmodel.models.refined import moe
from jaxmodel.models.refined.layer import SCORE_BYTES, attention_width, layer_weight_params
from jaxmodel.models.refined.rates import BF16

# Model state per parameter (Rajbhandari et al. 2020, sec. 3.1): bf16 weights,
# the gradient buffer (grad_buffer_bytes), and 12 bytes of fp32 optimizer state.
_OPTIMIZER_BYTES = 12.0
# Each layer weight keeps an FP8 copy and its transpose (1 + 1 bytes).
_FP8_WEIGHT_BYTES = 2.0
# Logits in memory per element: bf16 (2), the fused cross-entropy's fp32
# copy (4) and the fp32 softmax kept for the backward pass (4).
_LOGIT_MEMORY_BYTES = 10.0


def layer_activation_bytes(x, recompute_code, sp):
    """Activation bytes one layer stores for one micro-batch on one GPU.

    Korthikanti et al. 2022, sec. 4 (Table 2), generalised to grouped-query
    attention and any feed-forward width.  Per ``s b h``: 10 replicated bytes
    (layer-norm inputs 4, attention and MLP inputs 4, two dropout masks 2),
    ``4 + 4 kv / a`` for Q, K, V, and the attention output (split by ``t``),
    ``2 (mlp_weight_matrices - 1) f / h + 2 f / h`` for the feed-forward
    activation inputs and outputs (16 for GPT; split by ``t``), and ``5 a s / h``
    for the attention scores (softmax output 2, dropout mask 1, dropout output 2;
    split by ``t``, absent with FlashAttention or selective recompute).  With
    sequence parallelism the replicated part is split by ``t`` as well.  Full
    recompute stores only the layer input, ``2 s b h`` (``/ t`` with SP).

    Args:
      recompute_code: 0 none, 1 selective, 2 full (may be a traced value).
      sp: 1.0 with sequence parallelism, else 0.0.
    """
    s, b, h, t = x.seq_length, x.micro_batch, x.hidden_dim, x.tensor_parallel
    # With context parallelism each GPU holds s / c tokens of the sequence.
    sbh = s / x.context_parallel * b * h
    rep_split = jnp.where(sp > 0.5, t, jnp.ones_like(t))
    replicated = 10.0 / rep_split
    parallel = ((4.0 + 4.0 * x.num_kv_heads / x.num_heads) * attention_width(x) / h
                + 2.0 * x.mlp_weight_matrices * x.ffn_hidden_dim / h) / t
    # MoE and attention variants (jaxmodel.models.refined.moe): attention tensors scale
    # with a d_h / h, the FFN with its width, plus the dispatched token copies.
    moe_parallel = ((4.0 + 4.0 * x.num_kv_heads / x.num_heads) * moe.attention_width_ratio(x)
                    + 2.0 * x.mlp_weight_matrices * moe.ffn_width(x) / h
                    + moe.DISPATCH_ACTIVATION_BYTES * x.experts_per_token * moe.moe_fraction(x)
                    * moe.load_factor(x)
                    - moe.recomputed_activation_bytes(x)) / t
    parallel = jnp.where(moe.is_plain(x), parallel, moe_parallel)
    scores = (1.0 - x.flash_attention) * 5.0 * x.num_heads * s / (h * t)
    none = sbh * (replicated + parallel + scores)
    selective = sbh * (replicated + parallel)
    full = 2.0 * sbh / rep_split
    return jnp.where(recompute_code == 2, full, jnp.where(recompute_code == 1, selective, none))


class StageParams(NamedTuple):
    """Parameters per GPU of each stage kind (embedding on the first, the output
    layer on the last: also a copy of the shared embedding when tied).

    ``layer_params``: one layer's resident parameters on a GPU (MoE: attention,
    router and shared experts); ``expert_layer_params``: its routed experts'
    share, sharded by ``etp e`` (parallel folding) and held apart for their own
    sharding and reduction; ``params_gpu``: the fuller of the first and a
    middle stage.
    """

    layer_params: object
    expert_layer_params: object
    params_first: object
    params_last: object
    params_mid: object
    params_gpu: object


def stage_params(x, g, layers_mid, layers_end) -> StageParams:
    """Parameters per GPU of the first, last and middle stages."""
    t, V, h, plain, e, etp = g.t, g.V, g.h, g.plain, g.e, g.etp
    one_stage, has_mid = g.one_stage, g.has_mid
    layer_params = layer_weight_params(x) / t
    # MoE: every TP group holds the attention, router and shared experts;
    # the routed experts are sharded by etp x e (parallel folding) and held
    # apart (expert_layer_params) for their own sharding and reduction.
    layer_params = jnp.where(plain, layer_params, moe.layer_resident_params(x) / t)
    expert_layer_params = moe.layer_expert_params(x) / (etp * e)
    embed = V * h / t
    params_first = layers_end * layer_params + embed * (
        1.0 + one_stage * (1.0 - x.tied_embeddings))
    params_last = layers_end * layer_params + embed
    params_mid = layers_mid * layer_params
    params_gpu = jnp.maximum(params_first, has_mid * params_mid)
    return StageParams(layer_params, expert_layer_params, params_first, params_last,
                       params_mid, params_gpu)


class Memory(NamedTuple):
    """Bytes per GPU of the fullest stage, and whether it fits.

    ``state``: weights, gradients and optimizer states; ``activations``: stored
    activations with logits and transient buffers; ``other``: workspaces and
    the reserve; ``memory_gb``: their sum in GB; ``fits``: ``<= gpu_memory_gb``.
    """

    state: object
    activations: object
    other: object
    memory_gb: object
    fits: object


def stage_memory(x, g, params, layers_mid, layers_end, z, edp, score_bytes, kv_bytes,
                 act_bytes) -> Memory:
    """Memory of each stage kind; the fullest one (``params``: ``StageParams``)."""
    fdt, zero_i, fp8, has_experts, schedule = g.fdt, g.zero_i, g.fp8, g.has_experts, g.schedule
    m, p, v, v_i, t, c, h, V = g.m, g.p, g.v, g.v_i, g.t, g.c, g.h, g.V
    recompute, sp, plain, tok, rep_split = g.recompute, g.sp, g.plain, g.tok, g.rep_split
    one_stage, pp_active, has_mid = g.one_stage, g.pp_active, g.has_mid
    layer_params, expert_layer_params = params.layer_params, params.expert_layer_params
    params_first, params_last, params_mid = (params.params_first, params.params_last,
                                             params.params_mid)
    gb = x.grad_buffer_bytes
    fsdp = (zero_i == 3).astype(fdt)
    per_param = jnp.where(
        zero_i == 0, 2.0 + gb + _OPTIMIZER_BYTES,
        jnp.where(zero_i == 1, 2.0 + gb + _OPTIMIZER_BYTES / z,
                  jnp.where(zero_i == 2, 2.0 + (gb + _OPTIMIZER_BYTES) / z,
                            (2.0 + gb + _OPTIMIZER_BYTES) / z)))
    fsdp_working = fsdp * (2.0 * BF16 + gb) * layer_params
    fp8_copies = fp8 * _FP8_WEIGHT_BYTES * layer_params

    # Routed experts: the same per-parameter bytes, sharded over edp instead
    # of the data x context ranks.
    per_param_expert = jnp.where(
        zero_i == 0, 2.0 + gb + _OPTIMIZER_BYTES,
        jnp.where(zero_i == 1, 2.0 + gb + _OPTIMIZER_BYTES / edp,
                  jnp.where(zero_i == 2, 2.0 + (gb + _OPTIMIZER_BYTES) / edp,
                            (2.0 + gb + _OPTIMIZER_BYTES) / edp)))
    expert_state = (per_param_expert + fp8 * _FP8_WEIGHT_BYTES) * expert_layer_params

    def state_bytes(held, layers):
        dense = held * per_param + fsdp_working + fp8_copies * layers
        return jnp.where(has_experts, dense + layers * expert_state, dense)

    in_flight_first = jnp.minimum(m, p)
    interleave = jnp.where((v_i > 1) & (schedule == 0), 1.0 + (p - 1.0) / (p * v),
                           jnp.ones_like(v))
    stored = layer_activation_bytes(x, recompute, sp)
    # Full recompute of only some layers (recompute_layers): the others store
    # their activations as without recompute (g.full is the recomputed share).
    stored = jnp.where(recompute == 2, g.full * stored
                       + (1.0 - g.full) * layer_activation_bytes(x, 0, sp), stored)
    working = jnp.where(recompute == 2, layer_activation_bytes(x, 0, sp),
                        jnp.where(recompute == 1, score_bytes / SCORE_BYTES * 5.0,
                                  jnp.zeros_like(t)))
    # All-gather context parallelism holds one layer's full-sequence K and V.
    working = working + (whole(x.cp_comm) == 1).astype(fdt) * kv_bytes * c
    # MoE recompute regenerates one layer's dropped activations at a time.
    working = jnp.where(plain, working,
                        working + tok * h / t * moe.recomputed_activation_bytes(x))
    # Output layer (Korthikanti et al. sec. 4.3, its input 4 s b h / t) and the
    # logits: bf16 (2), the fp32 copy the fused cross-entropy works on (4) and
    # the fp32 softmax it keeps for the backward pass (4).
    logits_mem = 4.0 * tok * h / t + _LOGIT_MEMORY_BYTES * tok * V / t
    # The embedding's dropout mask (1 byte per element) for each micro-batch in flight.
    embedding_mem = tok * h / rep_split * in_flight_first * interleave
    acts_first = (layers_end * in_flight_first * interleave * stored + working
                  + embedding_mem + one_stage * logits_mem)
    acts_last = layers_end * interleave * stored + working + logits_mem
    acts_mid = layers_mid * jnp.minimum(m, p - 1.0) * interleave * stored + working
    # Kernel workspaces: tensor-parallel overlap keeps userbuffers for the
    # gathered activation of a layer's GEMMs (3 of [s / c, b, h] in bf16).
    workspace = (x.tp_overlap > 0.0).astype(fdt) * 3.0 * act_bytes
    other = workspace + x.reserved_memory_gb * 1e9
    state_first = state_bytes(params_first, layers_end)
    state_last = state_bytes(params_last, layers_end)
    state_mid = state_bytes(params_mid, layers_mid)
    mem_first = state_first + acts_first
    mem_last = pp_active * (state_last + acts_last)
    mem_mid = has_mid * (state_mid + acts_mid)
    first_fullest = (mem_first >= mem_last) & (mem_first >= mem_mid)
    last_fullest = ~first_fullest & (mem_last >= mem_mid)
    state = jnp.where(first_fullest, state_first, jnp.where(last_fullest, state_last, state_mid))
    activations = jnp.where(first_fullest, acts_first,
                            jnp.where(last_fullest, acts_last, acts_mid))
    memory_gb = (state + activations + other) / 1e9
    fits = memory_gb <= x.gpu_memory_gb
    return Memory(state, activations, other, memory_gb, fits)
