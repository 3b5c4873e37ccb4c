"""Memory per GPU: model state and activations of every stage kind; the fullest is reported.

* **Model state** (Rajbhandari et al. 2020, sec. 3.1): per parameter bf16
  weights 2, the gradient buffer ``grad_buffer_bytes`` (fp32 ``main_grad`` by
  default), fp32 master, momentum and variance 12 (Megatron-Core
  distributed-optimizer guide: 18 bytes, or 6 + 12 / d sharded).  ZeRO-1
  shards the 12 over ``z`` ranks, ZeRO-2 also the gradients, ZeRO-3
  everything, and then holds two layers' weights gathered (the one in use, the
  one prefetched) and one layer's gradients unsharded, or, kept gathered
  across micro-batches (``fsdp_keep_gathered``: torchtitan's FSDP2 under
  pipeline parallelism), the whole stage's weights and gradients.  FP8
  primary weights (``fp8_param_gather``) are gathered in FP8 (1 byte).  FP8 (Transformer
  Engine) keeps an FP8 copy and its transpose of each layer weight (2 bytes),
  or, with FP8 primary weights (``fp8_param_gather``), holds the weight itself
  in FP8 with its transpose (1 + 1 bytes in place of bf16's 2).
  The routed experts: the same bytes per parameter, sharded over their ``edp``
  replicas instead.
* **Activations** (Korthikanti et al. 2022, sec. 4, Table 2) per layer and
  micro-batch: ``s b h (10 + 24 / t + 5 a s / (h t))`` without recompute,
  ``s b h (10 + 24 / t)`` selective, ``2 s b h`` full; with sequence
  parallelism ``s b h (34 + 5 a s / h) / t``, ``34 s b h / t``, ``2 s b h / t``
  -- with dropout (``dropout`` 1) in bf16.  ``layer_activation_bytes``
  generalises the ``10`` and ``24`` to grouped-query attention, SwiGLU and any
  ``ffn_hidden_dim``, drops the dropout masks at probability 0 (``dropout``
  0: 8 and 25.5 for Llama 3 70B), and under FP8 counts the GEMM inputs that
  Transformer Engine saves in FP8 (1 byte).  The first stage holds ``min(m,
  p)`` micro-batches of its layers, times ``1 + (p - 1) / (p v)`` when
  interleaved (sec. 4.2.3; Megatron-Core's interleaved schedule on rank 0:
  ``2 (p - 1) + (v - 1) p`` warm-up chunks + 1, of ``L / (p v)`` layers each),
  and never more than the ``m`` micro-batches there are (all ``m v`` chunks
  when ``m = p``: Meta's Llama 3 405B, 16 micro-batches on 16 stages);
  full recompute also holds one layer's full activations while it is
  recomputed.  ``offload_layers`` of a stage's layers keep their activations
  in host memory (one layer's in transit stays); ``moe_offload`` keeps
  the routed experts' FC1 output there, and at level 2 their FC1 input
  (``moe.offloaded_activation_bytes``).  The output layer's input (sec. 4.3)
  and the logits sit on the last stage (10 bytes a logit, or the
  bf16 logits alone, 2, under Transformer Engine's in-place cross entropy:
  ``cross_entropy_fusion`` 2; 12, or 16 under loss parallelism, with PyTorch's
  F.cross_entropy: 3; 4, the bf16 logits and their gradient, with it compiled by
  torch.compile: 4), the embedding's dropout mask on the first.
* **Multi-token prediction** (``mtp_layers``, ``jaxmodel.models.refined.mtp``):
  the last stage holds the modules' weights (and the input embedding of an
  untied model), their blocks' activations as one more layer's each, their
  inputs and a second set of logits.
* **Pipeline runtime** (``pp_stage_buffers``, ``pipeline_buffer_bytes``):
  PyTorch's torch.distributed.pipelining keeps a receive buffer per
  micro-batch each way and the last stage's output (the logits) of every
  micro-batch until the step ends (in 2024 every stage's output).
* **Offload copies** (``offload_seconds``, the step's ``offload_ms``): what
  the offloaded layers and MoE FC1 outputs send to host memory crosses the
  host link (``host_link_gb_s``: PCIe, or NVLink-C2C on Grace) during the
  forward pass and back during the backward pass, on the copy engines beside
  the kernels; only the part that outlasts its pass shows.
* **Other**: tensor-parallel overlap's userbuffers and ``reserved_memory_gb``
  (CUDA context, NCCL buffers, library workspaces, fragmentation).

Every stage kind (first, middle, last) is computed; the fullest is reported
(``memory_gb_per_gpu``) and must fit in ``gpu_memory_gb``.
"""

from __future__ import annotations

from typing import NamedTuple

from jaxmodel.deferred import jnp
from jaxmodel.models.common import whole
from jaxmodel.models.refined import mamba, moe, mtp, muon
from jaxmodel.models.refined.derived import optimizer_shards
from jaxmodel.models.refined.layer import SCORE_BYTES, attention_width, layer_weight_params
from jaxmodel.models.refined.rates import BF16, low_precision_gemms

# Model state per parameter (Rajbhandari et al. 2020, sec. 3.1): bf16 weights,
# the gradient buffer (grad_buffer_bytes), and 12 bytes of fp32 optimizer state.
_OPTIMIZER_BYTES = 12.0
# Each layer weight keeps an FP8 copy and its transpose (1 + 1 bytes).
_FP8_WEIGHT_BYTES = 2.0
# Logits in memory per element: bf16 (2), the fused cross-entropy's fp32
# copy (4) and the fp32 softmax kept for the backward pass (4).
_LOGIT_MEMORY_BYTES = 10.0
# ... with Transformer Engine's parallel cross entropy (cross_entropy_fusion 2):
# the bf16 logits alone (2).  transformer_engine/pytorch/cross_entropy.py,
# CrossEntropyFunction: the Triton kernels compute the loss and the gradient in
# fp32 registers, forward saves only ``_input`` (the bf16 logits, with an fp32
# max and sum per token) and backward returns that same tensor as the gradient,
# written in place: no fp32 copy of the [s, b, V / t] logits exists.
_LOGIT_IN_PLACE_BYTES = 2.0
# ... with PyTorch's F.cross_entropy on the fp32 logits (cross_entropy_fusion 3;
# torchtitan's loss_fn, not compiled, ``F.cross_entropy(pred.flatten(0, 1).float(),
# ...)`` on the model's bf16 output, with ``del pred`` before ``loss.backward()``),
# at the loss's backward pass,
# where the step's memory peaks (every layer's activations still stored): the
# log_softmax output it saved (fp32, 4; the bf16 and fp32 logits are freed by
# then), nll_loss_backward's gradient (``zeros_like`` then a scatter, 4) and
# _log_softmax_backward_data's output (4): 12 bytes (PyTorch
# tools/autograd/derivatives.yaml: _log_softmax saves ``result``).  Under loss
# parallelism (torchtitan's default with TP: the logits sharded over the vocabulary),
# DTensor's _nll_loss_and_log_softmax_backward (torch/distributed/tensor/
# parallel/loss.py) computes ``(grad_input + torch.exp(x)) * grad_output``: the
# saved output, ``grad_input``, ``exp(x)`` and their sum live at once, 16 bytes.
_LOGIT_TORCH_BYTES = 12.0
_LOGIT_TORCH_PARALLEL_BYTES = 16.0
# ... with the same loss compiled by torch.compile (cross_entropy_fusion 4;
# torchtitan's loss under --training.compile in 2025, on the model's bf16
# output): AOTAutograd's partitioner saves the graph's bf16 input and the
# per-token max and log-sum-exp (recomputing the pointwise upcast, subtraction
# and exponential in the backward), and the fused backward writes a new bf16
# gradient: at the loss's backward pass the bf16 logits (2) and their
# gradient (2), 4 bytes (the per-token values are a few bytes a token).
_LOGIT_COMPILED_MEMORY_BYTES = 4.0
# A layer's stored activations per s b h (layer_activation_bytes): the inputs of
# its two norms (bf16, 2 + 2); its two GEMM inputs that follow a norm (QKV and
# FC1), 2 bytes each in bf16, 1 in FP8; its two dropout masks (1 byte each).
_NORM_INPUT_BYTES = 4.0
_NORM_GEMM_INPUTS = 2.0
_DROPOUT_MASK_BYTES = 2.0


def layer_activation_bytes(x, recompute_code, sp):
    """Activation bytes one layer stores for one micro-batch on one GPU.

    Korthikanti et al. 2022, sec. 4 (Table 2), generalised to grouped-query
    attention, any feed-forward width, dropout 0 and FP8.  Per ``s b h``:

    * replicated (split by ``t`` only with sequence parallelism): the two norm
      inputs 4; the inputs of the QKV and FC1 GEMMs 2 + 2, or 1 + 1 under FP8
      (Transformer Engine's Linear and LayerNormLinear save the input they cast
      to FP8, ``saved_inputmat = inputmat``, and no bf16 copy), none with
      ``norm_recompute``.  Transformer Engine and Megatron-Core save these
      inputs as sequence shards and gather them again in backward
      (``tensor.regathers``); PyTorch DTensor TP (``tp_overlap_kind`` 1:
      torchtitan's ``ColwiseParallel`` behind a ``PrepareModuleInput`` to
      ``Replicate``) saves the gathered input, one per block shared by its
      GEMMs (wq, wk, wv; w1, w3), so these 2 + 2 are not split by ``t``;
      the two dropout masks 2 when ``dropout`` is 1 (PyTorch stores none at
      probability 0).  Korthikanti's 10 is
      ``dropout`` 1 without FP8;
    * split by ``t``: Q 2, K and V ``4 kv / a``, the attention output 2 (kept
      by the attention kernel and, in bf16, the projection's input; under FP8
      the projection keeps its own FP8 copy, 1 more), all times ``a d_h / h``;
      the FC1 output ``2 (w - 1) f / h`` (the GeLU input, or SwiGLU's gate and
      up) and the FC2 input ``2 f / h`` (``f / h`` under FP8): 24 for GPT;
    * the attention scores without FlashAttention, ``(2 + 3 dropout) a s / h``
      (softmax output 2, dropout mask 1 and output 2; split by ``t``; absent
      with selective recompute).

    Full recompute stores only the layer input, ``2 s b h`` (``/ t`` with SP).
    Per-op selective recompute (``recompute`` 3: ``op_sac_activation_bytes``)
    stores the layer input and the outputs its policy keeps.

    Args:
      recompute_code: 0 none, 1 selective, 2 full, 3 per-op selective (may be a
        traced value).
      sp: 1.0 with sequence parallelism, else 0.0.
    """
    s, b, h, t = x.seq_length, x.micro_batch, x.hidden_dim, x.tensor_parallel
    fp8, dropout = low_precision_gemms(x), x.dropout
    # With context parallelism each GPU holds s / c tokens of the sequence.
    sbh = s / x.context_parallel * b * h
    rep_split = jnp.where(sp > 0.5, t, jnp.ones_like(t))
    # Norm recompute (norm_recompute) frees the norm outputs, FP8 casts included
    # (Megatron-Core then has the GEMM save its original input, which the
    # checkpoint frees: set_save_original_input).
    # PyTorch DTensor TP (tp_overlap_kind 1) saves the QKV and FC1 inputs as
    # gathered: stored whole, not split by t (tensor.regathers).
    gathered = 1.0 + x.tp_overlap_kind * (rep_split - 1.0)
    replicated = (_NORM_INPUT_BYTES
                  + (1.0 - x.norm_recompute) * _NORM_GEMM_INPUTS * (BF16 - fp8) * gathered
                  + _DROPOUT_MASK_BYTES * dropout)
    # MLA's compressed latents are not split by tensor parallelism (moe).
    replicated = jnp.where(mamba.plain(x), replicated,
                           replicated + moe.latent_activation_bytes(x))
    # A hybrid model's layer has one norm, one GEMM after it and one dropout.
    replicated = jnp.where(mamba.hybrid(x), mamba.HALF * replicated, replicated) / rep_split
    attention = (4.0 + 4.0 * x.num_kv_heads / x.num_heads + fp8) * attention_width(x) / h

    def ffn(width):
        # FC1 output (bf16) and FC2 input (bf16, or its FP8 cast) per s b h.
        return (2.0 * (x.mlp_weight_matrices - 1.0) + BF16 - fp8) * width / h

    parallel = (attention + ffn(x.ffn_hidden_dim)) / t
    # MoE and attention variants (jaxmodel.models.refined.moe): attention tensors scale
    # with a d_h / h (MLA: its own tensors), the FFN with its width, plus the
    # dispatched token copies.
    # A hybrid model's Mamba-2 mixers store theirs (mamba.activation_bytes).
    moe_parallel = (mamba.mixer(x, moe.attention_activation_bytes(x), mamba.activation_bytes(x))
                    + ffn(jnp.where(mamba.hybrid(x), mamba.ffn_width(x), moe.ffn_width(x)))
                    + moe.dispatch_activation_bytes(x) - moe.recomputed_activation_bytes(x)
                    - moe.offloaded_activation_bytes(x)[0] + moe.clamp_activation_bytes(x)) / t
    parallel = jnp.where(mamba.plain(x), parallel, moe_parallel)
    scores = ((1.0 - x.flash_attention) * (2.0 + 3.0 * dropout) * x.num_heads * s
              / (h * t))
    none = sbh * (replicated + parallel + scores)
    selective = sbh * (replicated + parallel)
    full = 2.0 * sbh / rep_split
    op_sac = sbh * op_sac_activation_bytes(x, sp)
    return jnp.where(recompute_code == 3, op_sac,
                     jnp.where(recompute_code == 2, full,
                               jnp.where(recompute_code == 1, selective, none)))


def op_sac_activation_bytes(x, sp):
    """Bytes per ``s b h`` (of the GPU's ``s / c`` tokens) that one layer stores
    under torchtitan's per-op selective activation checkpointing (``recompute`` 3).

    torchtitan ``parallelize_llama.py`` (``_save_list`` and ``_custom_policy``,
    Dec 2024): inside each checkpointed transformer block the outputs of
    ``aten.mm``, of the attention kernel and of ``reduce_scatter_tensor`` are
    saved, "except every second mm"; everything else is recomputed in the
    backward pass.  The block's forward runs its matmuls in the order wq, wk,
    wv, wo, w1, w3, w2 (SwiGLU; w1, w2 with two matrices), so it keeps the
    outputs of wq (``2 a d_h / (h t)``), wv (``2 kv d_h / (h t)``), w1 (``2 f /
    (h t)``) and, with three matrices, w2 (row-parallel: each TP rank's partial
    sum of all ``h``, 2), the attention output (``2 a d_h / (h t)``) with its
    fp32 log-sum-exp (``4 a / (h t)``), and the checkpoint's input (2); with
    sequence parallelism the two reduce-scatter outputs (``2 + 2``; none
    without TP, ``t`` 1) and the input are split by ``t``.  The outputs are bf16
    under FP8 too (the matmuls are counted whatever their precision).  Llama 3
    8B without TP: ``2 + 2 + 0.5 + 2 + 2 x 3.5 + 2 + 0.03 = 15.5``.
    """
    h, t, a = x.hidden_dim, x.tensor_parallel, x.num_heads
    qw = attention_width(x)
    rep_split = jnp.where(sp > 0.5, t, jnp.ones_like(t))
    # The reduce-scatters exist only where tensor parallelism does (torchtitan
    # applies its TP plan only when tp > 1: parallelize_llama, apply_tp), however
    # sequence_parallel is set.
    reduce_scatters = sp * (t > 1.5).astype(t.dtype)
    replicated = (BF16 + reduce_scatters * 2.0 * BF16) / rep_split
    saved_mms = (BF16 * qw * (2.0 + x.num_kv_heads / a) + 4.0 * a
                 + BF16 * x.ffn_hidden_dim) / (h * t)
    return replicated + saved_mms + BF16 * (x.mlp_weight_matrices - 2.0)


def pipeline_buffer_bytes(x, g, chunks, first, last):
    """Bytes a pipeline rank holds for its micro-batches besides its layers'
    activations (``pp_stage_buffers``), with ``chunks`` chunk passes in flight.

    PyTorch's ``torch.distributed.pipelining`` (``pp_stage_buffers`` 1 or 2;
    torch/distributed/pipelining/stage.py, Dec 2024):

    * ``_prepare_forward_infra`` and ``_prepare_backward_infra`` build, for every
      one of the ``m`` micro-batches, a receive buffer (``_make_tensor_from_meta``)
      for the stage's input activation (not on stage 0) and one for the gradient
      of its output (not on the last stage).  They live as long as the stage
      (PyTorch issue 136380, Sep 2024: "allocate N buffers when we are using an N
      microbatch schedule"; PR 193872, Aug 2026, allocates them just in time).
      A receive buffer of a micro-batch in flight is its first layer's input,
      already among the stored activations, so only the others are counted.
    * ``forward_one_chunk`` keeps the stage's output: the last stage appends it
      to ``output_chunks`` for every micro-batch and returns them merged when the
      step ends (PR 138504 detached them from the graph, Oct 2024; issue 159251);
      before PR 153383 (May 2025) every stage did (2).  Otherwise a non-last
      stage's output stays in ``fwd_cache`` until its backward pass (1).

    A stage's input and output are one layer's input, ``2 b s h / (c t_sp)``
    bytes; the last stage's output is the logits, ``b s V / (c t)``, in bf16
    (2 bytes: torchtitan's model returns the output layer's bf16 result and its
    loss upcasts, ``pred.float()``, since PR 642 of Oct 2024), kept beside the
    loss's own buffers.  With ``v`` stages a rank, stage 0 on
    the first rank receives nothing and the last stage sends nothing; the
    chunks in flight are spread evenly over a rank's stages.

    Megatron-Core (0): the received tensor is the input itself and the output's
    storage is freed once sent (``deallocate_output_tensor``): nothing more.
    """
    m, v, tok, h, t, V = g.m, g.v, g.tok, g.h, g.t, g.V
    mode = whole(x.pp_stage_buffers)
    on = g.pp_active * (mode >= 1).astype(g.fdt)
    act = BF16 * tok * h / g.rep_split
    n_in = v - 1.0 if first else v
    n_out = v - 1.0 if last else v
    receive = n_in * m - n_in / v * chunks + n_out * m
    outputs = jnp.where(mode >= 2, n_out * m, n_out / v * chunks)
    logits = m * BF16 * tok * V / t if last else 0.0
    return on * (act * (receive + outputs) + logits)


class StageParams(NamedTuple):
    """Parameters per GPU of each stage kind (embedding on the first, the output
    layer on the last: also a copy of the shared embedding when tied).

    ``layer_params``: one layer's resident parameters on a GPU (MoE: attention,
    router and shared experts); ``expert_layer_params``: its routed experts'
    share, sharded by ``etp e`` (parallel folding) and held apart for their own
    sharding and reduction; ``params_gpu``: the fullest stage's;
    ``mtp_params``, ``mtp_expert_params``: the multi-token-prediction modules'
    resident and routed-expert parameters on a GPU of the last stage (the
    embedding copy they need is in ``params_last``).
    """

    layer_params: object
    expert_layer_params: object
    mtp_params: object
    mtp_expert_params: object
    params_first: object
    params_last: object
    params_mid: object
    params_gpu: object


def stage_params(x, g, layers_mid, layers_end, layers_last) -> StageParams:
    """Parameters per GPU of the first, last and middle stages (``layers_last``: the
    last stage's decoder layers, ``jaxmodel.models.refined.pipeline.layers_per_stage``)."""
    t, V, h, plain, e, etp = g.t, g.V, g.h, g.plain, g.e, g.etp
    one_stage, has_mid = g.one_stage, g.has_mid
    layer_params = layer_weight_params(x) / t
    # MoE: every TP group holds the attention, router and shared experts;
    # the routed experts are sharded by etp x e (parallel folding) and held
    # apart (expert_layer_params) for their own sharding and reduction.
    layer_params = jnp.where(plain, layer_params, jnp.where(
        mamba.hybrid(x), mamba.layer_resident_params(x), moe.layer_resident_params(x)) / t)
    expert_layer_params = moe.layer_expert_params(x) / (etp * e)
    embed = V * h / t
    params_first = layers_end * layer_params + embed * (
        1.0 + one_stage * (1.0 - x.tied_embeddings))
    params_last = layers_last * layer_params + embed
    # The multi-token-prediction modules (and the input embedding they need) sit
    # on the last stage, which is also the first when p = 1.
    mtp_params = mtp.resident_params(x, g)
    mtp_held = mtp_params + mtp.embedding_params(x, g)
    params_first = params_first + one_stage * mtp_held
    params_last = params_last + mtp_held
    params_mid = layers_mid * layer_params
    # Without the modules the last stage holds what the first does (p > 1) or
    # less (p = 1, where the first is the whole model).
    params_gpu = jnp.maximum(jnp.maximum(params_first, params_last), has_mid * params_mid)
    return StageParams(layer_params, expert_layer_params, mtp_params, mtp.expert_params(x, g),
                       params_first, params_last, params_mid, params_gpu)


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


def stored_layer_bytes(x, g):
    """Activation bytes a layer stores for one micro-batch on one GPU, the
    average layer under the configuration's recompute."""
    stored = layer_activation_bytes(x, g.recompute, g.sp)
    # Full recompute of only some layers (recompute_layers): the others store
    # their activations as without recompute (g.full is the recomputed share).
    return jnp.where(g.recompute == 2, g.full * stored
                     + (1.0 - g.full) * layer_activation_bytes(x, 0, g.sp), stored)


def offload_seconds(x, g, stage_layers, micro_compute):
    """Host-link time of the activation offload that compute does not hide, a step.

    What a micro-batch sends to host memory on the busiest stage: the stored
    activations of ``min(offload_layers, L_stage)`` layers and the MoE layers'
    FC1 outputs and inputs (``moe_offload``).  The copy engines move it out during
    the forward pass and back during the backward pass, beside the kernels, at
    ``host_link_gb_s`` each way, so each direction shows only where it outlasts
    its pass: ``max(0, D / B - F) + max(0, D / B - 2 F)`` per micro-batch, with
    the forward pass a third of the stage's compute ``3 F`` (the backward's two
    GEMMs per forward GEMM).  Each micro-batch's copies must finish within its
    own passes (the GPU holds one layer's in transit), so the m micro-batches
    add up.
    """
    moved = (jnp.minimum(x.offload_layers, stage_layers) * stored_layer_bytes(x, g)
             + stage_layers * g.tok * g.h / g.t * moe.offloaded_activation_bytes(x)[0])
    copy = moved / (x.host_link_gb_s * 1e9)
    forward = micro_compute / 3.0
    exposed = g.m * (jnp.maximum(copy - forward, 0.0) + jnp.maximum(copy - 2.0 * forward, 0.0))
    # Selected by where, so that a sweep without offload compiles this away.
    return jnp.where((x.offload_layers > 0.5) | (x.moe_offload > 0.5), exposed, 0.0)


def stage_memory(x, g, params, layers_mid, layers_end, layers_last, z, edp, score_bytes,
                 kv_bytes, act_bytes) -> Memory:
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
    # ZeRO-3 / FSDP: two layers' weights gathered (FP8 with fp8_param_gather)
    # and one layer's gradients unsharded.
    gathered_bytes = BF16 - (BF16 - 1.0) * fp8 * x.fp8_param_gather
    fsdp_working = fsdp * (2.0 * gathered_bytes + gb) * layer_params
    # Kept gathered across micro-batches (fsdp_keep_gathered): the stage's
    # weights whole (the embeddings in bf16) and its gradients unsharded, in
    # place of the two layers' working set.
    keep = fsdp * x.fsdp_keep_gathered
    # FP8 weights: an FP8 copy and its transpose beside each bf16 layer weight,
    # or, as the primary weights (fp8_param_gather), in its place: 1 + 1 bytes
    # for the 2 of bf16, no copy.
    fp8_copies = fp8 * (1.0 - x.fp8_param_gather) * _FP8_WEIGHT_BYTES * layer_params

    # Routed experts: the same per-parameter bytes, sharded over edp instead
    # of the data x context ranks.
    per_param_expert = jnp.where(
        zero_i == 0, 2.0 + gb + _OPTIMIZER_BYTES,
        jnp.where(zero_i == 1, 2.0 + gb + _OPTIMIZER_BYTES / edp,
                  jnp.where(zero_i == 2, 2.0 + (gb + _OPTIMIZER_BYTES) / edp,
                            (2.0 + gb + _OPTIMIZER_BYTES) / edp)))
    # Muon (optimizer 1) keeps no second moment for the weight matrices
    # (jaxmodel.models.refined.muon); the embeddings stay on Adam.
    muon_saved = muon.on(x) * muon.STATE_BYTES_SAVED
    muon_dense = muon_saved / optimizer_shards(g, z)
    expert_bytes = (per_param_expert + fp8 * (1.0 - x.fp8_param_gather) * _FP8_WEIGHT_BYTES
                    - muon_saved / optimizer_shards(g, edp))
    expert_state = expert_bytes * expert_layer_params
    # The multi-token-prediction modules' FP8 weight copies and routed experts
    # (their other parameters are in params_last).
    mtp_state = (fp8 * (1.0 - x.fp8_param_gather) * _FP8_WEIGHT_BYTES * params.mtp_params
                 + jnp.where(has_experts, expert_bytes * params.mtp_expert_params, 0.0))

    def state_bytes(held, layers):
        whole_stage = held * (BF16 + gb) - (BF16 - gathered_bytes) * layers * layer_params
        dense = (held * per_param + (1.0 - keep) * fsdp_working + keep * whole_stage
                 + fp8_copies * layers - muon_dense * layers * layer_params)
        return jnp.where(has_experts, dense + layers * expert_state, dense)

    in_flight_first = jnp.minimum(m, p)
    interleave = jnp.where((v_i > 1) & (schedule == 0), 1.0 + (p - 1.0) / (p * v),
                           jnp.ones_like(v))
    # Micro-batches in flight, in units of a stage's layers, never more than
    # the m there are: Megatron-Core's interleaved schedule runs min(2 (p - 1)
    # + (v - 1) p, m v) warm-up chunks (all m v forward passes first when m =
    # p: megatron/core/pipeline_parallel/schedules.py,
    # forward_backward_pipelining_with_interleaving, all_warmup_microbatches),
    # so the first stage holds min(p (1 + (p - 1) / (p v)), m) stages' worth.
    first_in_flight = jnp.minimum(in_flight_first * interleave, m)
    mid_in_flight = jnp.minimum(jnp.minimum(m, p - 1.0) * interleave, m)
    stored = stored_layer_bytes(x, g)
    # Full and per-op recompute rebuild one layer's activations at a time.
    working = jnp.where((recompute == 2) | (recompute == 3), layer_activation_bytes(x, 0, sp),
                        jnp.where(recompute == 1, score_bytes / SCORE_BYTES * 5.0,
                                  jnp.zeros_like(t)))
    # All-gather context parallelism (Llama 3's, PyTorch's) holds one layer's
    # full-sequence K and V.
    # (PyTorch's only where context_parallel is applied, c > 1.)
    gathers = (whole(x.cp_comm) == 1) | ((whole(x.cp_comm) == 3) & (c > 1.0))
    working = working + gathers.astype(fdt) * kv_bytes * c
    # MoE recompute regenerates one layer's dropped activations at a time.
    working = jnp.where(plain, working,
                        working + tok * h / t * moe.recomputed_activation_bytes(x))
    # Output layer (Korthikanti et al. sec. 4.3, its input 4 s b h / t) and the
    # logits: bf16 (2), the fp32 copy the fused cross-entropy works on (4) and
    # the fp32 softmax it keeps for the backward pass (4).
    torch_bytes = jnp.where(t > 1.5, _LOGIT_TORCH_PARALLEL_BYTES, _LOGIT_TORCH_BYTES)
    ce_kind = whole(x.cross_entropy_fusion)
    logit_bytes = jnp.where(ce_kind == 4, _LOGIT_COMPILED_MEMORY_BYTES,
                            jnp.where(ce_kind == 3, torch_bytes,
                                      jnp.where(ce_kind == 2, _LOGIT_IN_PLACE_BYTES,
                                                _LOGIT_MEMORY_BYTES)))
    logits_mem = 4.0 * tok * h / t + logit_bytes * tok * V / t
    # The embedding's dropout mask (1 byte per element) for each micro-batch in flight.
    embedding_mem = x.dropout * tok * h / rep_split * first_in_flight
    # Activation offload: offload_layers of a stage's layers send what they
    # store to host memory in the forward pass and get it back in the backward
    # pass; one layer's stays on the GPU in transit (offloaded while the next
    # layer computes, reloaded a layer ahead).
    offloading = (x.offload_layers > 0.5).astype(fdt)

    def kept(layers):
        return layers - jnp.minimum(x.offload_layers, layers)

    working = working + offloading * stored
    # The MoE activation offload (moe_offload) keeps one MoE layer's share on
    # the GPU while it is copied out, and again while it comes back.
    working = working + tok * h / t * moe.offloaded_activation_bytes(x)[1]
    # Pipeline runtime buffers (pp_stage_buffers), per rank: chunk passes in
    # flight (v per stage's worth of layers) on the first, middle and last ranks.
    runtime_first = pipeline_buffer_bytes(x, g, first_in_flight * v, first=True, last=False)
    runtime_mid = pipeline_buffer_bytes(x, g, mid_in_flight * v, first=False, last=False)
    runtime_last = pipeline_buffer_bytes(x, g, interleave * v, first=False, last=True)
    # Multi-token prediction (last stage): each module's block stores what a
    # layer does, its inputs, and a second set of logits.
    mtp_acts = (mtp.modules(x) * (stored + logits_mem)
                + mtp.input_activation_bytes(x, g))
    acts_first = (kept(layers_end) * first_in_flight * stored + working
                  + embedding_mem + one_stage * (logits_mem + mtp_acts) + runtime_first)
    acts_last = (kept(layers_last) * interleave * stored + working + logits_mem + mtp_acts
                 + runtime_last)
    acts_mid = kept(layers_mid) * mid_in_flight * stored + working + runtime_mid
    # Kernel workspaces: tensor-parallel overlap keeps userbuffers for the
    # gathered activation of a layer's GEMMs (3 of [s / c, b, h] in bf16).
    workspace = (x.tp_overlap > 0.0).astype(fdt) * 3.0 * act_bytes
    other = workspace + x.reserved_memory_gb * 1e9
    state_first = state_bytes(params_first, layers_end) + one_stage * mtp_state
    state_last = state_bytes(params_last, layers_last) + mtp_state
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
