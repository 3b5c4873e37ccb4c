"""Tensor parallelism: the collectives of each layer's activations, and their overlap.

Four all-reduces of the ``2 b s h`` bytes of the ``[s / c, b, h]`` activation
per layer and micro-batch (two forward, two backward; Shoeybi et al. 2019), six
with full recompute, for the layers of the busiest stage.  Sequence
parallelism (Korthikanti et al. 2022) replaces each by a reduce-scatter and an
all-gather of the same total bytes (and divides the replicated work and
activations by ``t``: ``Derived.rep_split``).  The MoE layer's routed experts
need no TP collective (``moe.tp_collectives_per_layer``).  Ranks are ordered
tensor, then context, data, pipeline (Megatron-LM), so tensor groups fill a
node first.

``tp_overlap`` pipelines each collective with the GEMM it feeds or is fed by,
in ``t`` chunks (Wang et al. 2023, "Overlap Communication with Dependent
Computation via Decomposition in Large Deep Learning Models"): the first
chunk's transfer cannot be hidden, nor more than that one GEMM's time.  In a
dense layer every collective has its own GEMM (``layer.layer_gemm_shapes``):
the reduce-scatter after the attention output projection cannot hide behind
the feed-forward GEMMs.  Forward (and its recompute): the all-gathers feed
QKV and the first feed-forward GEMM, the reduce-scatters follow the output
projection and the second feed-forward GEMM.  Backward: the all-gathers of
the output gradient feed the input-gradient GEMMs of the two row-parallel
projections; the reduce-scatters take the input gradients of the two
column-parallel ones.  MoE and hybrid layers keep one pool: their collectives
hide behind all of the layer's GEMMs.

Transformer Engine and Megatron-Core save only the sequence shard of each
column-parallel GEMM's input and gather it again in backward for the weight
gradient (``regathers``): one more all-gather per such block (QKV, first
feed-forward; a Mamba mixer's in-projection), hidden whole behind that GEMM's
dgrad where it fits, with or without ``tp_overlap``.

The backward collective of each column-parallel GEMM's input gradient (a
reduce-scatter with sequence parallelism, an all-reduce without) runs beside
that GEMM's weight-gradient GEMM in Transformer Engine and Megatron-Core,
asynchronously, with or without ``tp_overlap`` (``column_backward_seconds``):
hidden up to the weight gradient's time, whole rather than ``(t - 1) / t``.

``tp_overlap_kind`` names the implementation (0 also for Megatron-Core
without ``--tp-comm-overlap``, 1 for any PyTorch DTensor TP, which keeps the
gathered input), whose backward and last step differ:

* 0, Megatron-Core (Transformer Engine): the backward collective of the
  column-parallel input gradient runs beside that layer's weight-gradient
  GEMM, by userbuffers' "bulk" overlap of ``qkv_dgrad`` / ``fc1_dgrad`` under
  ``--tp-comm-overlap`` and by an asynchronous NCCL call without it.
* 1, PyTorch async TP (``torch._inductor.fx_passes.micro_pipeline_tp`` with
  ``torch.distributed._symmetric_memory``; torchtitan's ``async_tp``).  The
  compiler pass fuses a reduce-scatter only when one matmul produces its
  input; in the backward graph that input is the sum of the Q, K and V (or
  gate and up) input gradients, so both backward reduce-scatters stay
  exposed (pytorch/pytorch#149946, review of 2025-03-28: valid
  matmul-reduce-scatter patterns only in the forward graph, "the
  reduce-scatters are receiving as input the addition of various
  scaled_mms").  Its fused matmul-reduce-scatter
  (``_fused_matmul_reduce_scatter_impl``) copies each rank's partial
  ``[tok / t, h]`` block to its owner and then sums the ``t`` blocks in a
  separate kernel after the pipeline: a memory-bound pass over ``t`` partial
  blocks read and one written, ``act_bytes (1 + 1 / t)``, that the NCCL
  reduce-scatter does inside its own kernel.

Low-precision all-gathers (``tp_gather_bytes``).  Under FP8 the all-gather
of each sequence-parallel pair moves the quantized tensor its GEMM consumes,
the reduce-scatter stays bf16 (it sums partial GEMM outputs):

* forward, the input of the column-parallel GEMMs (QKV, first feed-forward):
  Transformer Engine's ``_LayerNormLinear.forward`` (module/layernorm_linear.py,
  TE 2.x) quantizes the norm output and, before ``gather_along_first_dim(ln_out,
  tp_group, quantizer=...)`` or the userbuffers all-gather, sets
  ``quantizer.set_usage(rowwise=True, columnwise=False)``: the row-wise data
  and its scales travel.  torchao's ``PrepareFloat8ModuleInput`` /
  ``Float8ColwiseParallel._prepare_input_fn`` (torchao/float8/
  float8_tensor_parallel.py; torchtitan's ``apply_tp`` uses them with Float8
  tensorwise) cast to float8 before ``redistribute`` to ``Replicate``.
* backward, the output gradient of the row-parallel GEMMs (projection, second
  feed-forward): TE's ``grad_output_preprocess`` (module/base.py: "FP8 with
  all-gather") gathers the quantized gradient, with the usages ``_Linear``'s
  backward set, row-wise for dgrad and column-wise for wgrad
  (``set_usage(rowwise=True, columnwise=True)``).  Per-tensor FP8 gathers the
  row-wise bytes and makes the transpose after the gather ("All-gather is not
  supported with FP8 column-wise data", ``supports_only_rowwise_all_gather``);
  block-scaled FP8 (MXFP8, 1x128 blockwise) gathers both.  torchao's
  ``Float8RowwiseParallel._prepare_output_fn`` wraps the reduce-scatter's
  output in ``_NoopFwToFloat8BwDynamic``, so its backward all-gather runs on
  the float8 gradient.

Bytes an element (``TP_GATHER_BYTES``, forward and backward): bf16 2 and 2;
per-tensor FP8 1 and 1 (one FP32 scale a tensor); block-scaled FP8 ``1 + 1/32``
(an E8M0 scale per 32 elements, or an FP32 scale per 128) and twice that;
NVFP4 is kept at bf16's 2 and 2: the stored sources do not show its
sequence-parallel gather (TE falls back to a high-precision gather where a
format cannot be gathered).  Without sequence parallelism the all-reduce is
bf16.  ``precision`` 2 follows Transformer Engine; torchao's rowwise recipes
keep bf16 TP (torchtitan enables float8 TP for tensorwise only).

Not charged: the split GEMMs' extra partial waves (PyTorch and TE run the
chunks on alternating streams so the next chunk fills the last wave's idle
SMs) and the ``t - 1`` extra reads of the weight (``(t - 1) k n`` elements,
a few hundredths of a millisecond for a 70B layer).
"""

from __future__ import annotations

from jaxmodel.collectives import all_gather, reduce_scatter
from jaxmodel.deferred import jnp
from jaxmodel.models.common import whole
from jaxmodel.models.refined import mamba, moe
from jaxmodel.models.refined.rates import BF16

# Bytes an element of a sequence-parallel all-gather, forward (the GEMM input)
# and backward (the output gradient), by ``precision`` (module docstring).
_BLOCK = 1.0 + 1.0 / 32.0
TP_GATHER_BYTES = ((BF16, BF16), (1.0, 1.0), (_BLOCK, 2.0 * _BLOCK), (BF16, BF16))


def tp_gather_bytes(x, sp):
    """``(forward, backward)``: bytes an element of the TP all-gathers
    (``TP_GATHER_BYTES`` by ``precision`` with sequence parallelism ``sp``; bf16
    without)."""
    p = whole(x.precision)
    conds = [p == 1, p == 2, p == 3]
    dtype = jnp.result_type(x.hidden_dim)
    fwd = jnp.select(conds, [row[0] for row in TP_GATHER_BYTES[1:]], BF16).astype(dtype)
    bwd = jnp.select(conds, [row[1] for row in TP_GATHER_BYTES[1:]], BF16).astype(dtype)
    on = sp > 0.5
    return jnp.where(on, fwd, BF16), jnp.where(on, bwd, BF16)


def dense_overlap_seconds(x, g, halves, act_bytes, dense_gemms):
    """``(hidden, extra)``: a dense layer's TP seconds hidden behind their own GEMMs,
    and the seconds the overlap adds (async TP's reduction of the partials).

    ``halves``: ``(rs, ag_fwd, ag_bwd)``, one reduce-scatter, one forward and
    one backward all-gather (each half an all-reduce's time in bf16);
    ``dense_gemms``: the layer's GEMM passes (``LayerTimes.dense_gemms``).  Each
    hides ``min(tp_overlap (t - 1) / t its time, GEMM)``; the forward pairs run
    ``1 + full`` times (full recompute runs the forward again).  Whatever
    ``tp_overlap``, the backward re-gathers of the QKV and first feed-forward
    inputs (``regathers``) hide whole behind those GEMMs' dgrad, and their input
    gradients' collectives (``column_backward_seconds``) behind their wgrad.
    """
    t, hbm_rate = g.t, g.hbm_rate
    rs, ag_fwd, ag_bwd = halves
    fwd, dgrad, wgrad = dense_gemms
    share = x.tp_overlap * (t - 1.0) / t
    te = 1.0 - x.tp_overlap_kind

    def hide(gemm, collective):
        return jnp.minimum(share * collective, gemm)

    qkv, proj, up, down = 0, 1, 2, 3
    passes = 1.0 + g.full
    forward = (hide(fwd[qkv], ag_fwd) + hide(fwd[proj], rs) + hide(fwd[up], ag_fwd)
               + hide(fwd[down], rs))
    # Without sequence parallelism the row-parallel GEMMs' output gradient is
    # whole on every rank: no backward all-gather to hide.  The column-parallel
    # input gradient's collective runs beside the weight-gradient GEMM whatever
    # tp_overlap (column_backward_seconds).
    column = column_backward_seconds(g, rs, ag_bwd)
    backward = (jnp.where(g.sp > 0.5, hide(dgrad[proj], ag_bwd) + hide(dgrad[down], ag_bwd),
                          0.0)
                + te * (jnp.minimum(column, wgrad[qkv]) + jnp.minimum(column, wgrad[up])))
    # Transformer Engine / Megatron-Core: each column-parallel GEMM's input is
    # gathered again, launched before its dgrad GEMM and independent of it.
    backward = backward + regathers(x, g) * (
        jnp.minimum(ag_fwd, dgrad[qkv]) + jnp.minimum(ag_fwd, dgrad[up]))
    # Async TP: the two forward reduce-scatters each end with the sum of t partials.
    reduce_s = act_bytes * (1.0 + 1.0 / t) / hbm_rate
    extra = x.tp_overlap_kind * x.tp_overlap * passes * 2.0 * reduce_s * (t > 1.0)
    return passes * forward + backward, extra


def column_backward_seconds(g, rs, ag_bwd):
    """Seconds of one column-parallel GEMM's backward collective, which Megatron
    runs beside that GEMM's weight-gradient GEMM with or without ``tp_overlap``.

    Transformer Engine's ``_Linear`` and ``_LayerNormLinear`` backward
    (module/linear.py, layernorm_linear.py, TE 1.x and 2.x), where userbuffers
    do not take the collective, launch ``reduce_scatter_along_first_dim(dgrad,
    tp_group, async_op=True)`` under sequence parallelism (``allreduce(dgrad,
    tp_group, async_op=True)`` without), compute the weight gradient, and wait
    for the collective after it; ``_LayerNormMLP`` does the same for ``fc1``.
    Megatron-Core's own ``LinearWithGradAccumulationAndAsyncCommunication.
    backward`` (tensor_parallel/layers.py) launches ``dist_reduce_scatter_func(
    ..., async_op=True)`` or ``all_reduce(grad_input, ..., async_op=True)``
    before the weight-gradient GEMM likewise.  The collective is the reduce-
    scatter ``rs`` with sequence parallelism, and the all-reduce ``rs +
    ag_bwd`` without.  PyTorch DTensor TP (``tp_overlap_kind`` 1) runs it in
    autograd's order, after the GEMM that makes it: exposed."""
    return jnp.where(g.sp > 0.5, rs, rs + ag_bwd)


def regathers(x, g):
    """Backward re-gathers of column-parallel inputs per block with one (0, 1).

    Transformer Engine's ``_LayerNormLinear`` and ``_Linear`` (module/
    layernorm_linear.py, linear.py, TE 1.x and 2.x) save only the local
    sequence shard of the GEMM input (``ln_out``, ``inputmat``) and, with
    ``ctx.ln_out_needs_gather`` / ``backward_input_needs_gather`` (``weight.
    requires_grad and parallel_mode == "column" and sequence_parallel``),
    gather it again in backward for the weight-gradient GEMM: ``gather_along_
    first_dim(ln_out, tp_group, async_op=True, quantizer=...)`` ("Tensor-
    parallel communication is overlapped with dgrad GEMM"), or the userbuffers
    bulk all-gather run beside the dgrad GEMM (``ub_bulk_dgrad``).  Megatron-
    Core's own ``LinearWithGradAccumulationAndAsyncCommunication.backward``
    (tensor_parallel/layers.py) does the same: ``dist_all_gather_func(...,
    async_op=True)`` before ``grad_output.matmul(weight)``, "Here we rely on
    CUDA_DEVICE_MAX_CONNECTIONS=1 to ensure that the gather is scheduled
    before the input gradient computation"; Korthikanti et al. 2022, sec.
    4.2.2.  The bytes are the forward gather's
    (``tp_gather_bytes``): under per-tensor FP8 the saved shard keeps its
    row-wise FP8 data, gathered and transposed after ("For sequence parallel
    in vanilla FP8, rowwise data is to gather the input"); MXFP8 and
    blockwise FP8 keep and gather the column-wise data only, ``1 + 1/32`` B.
    Full recompute's forward saves the shard again, so the re-gather stays one
    per block.  PyTorch DTensor TP (torchtitan, ``tp_overlap_kind`` 1, with or
    without async TP) saves the ``Replicate`` input its ``ColwiseParallel``
    redistributed: no re-gather.  Compiled too: PyTorch's partitioner does
    not recompute collectives in backward (pytorch/pytorch#147561, "always
    ban compiler-driven recompute of collectives by default") and saves the
    all-gather's output unless ``torch._functorch.config.unsafe_allow_
    optimization_of_collectives`` is set (#146693, #150302, March 2025).
    Without sequence parallelism the input is whole on every rank."""
    return (1.0 - x.tp_overlap_kind) * (g.sp > 0.5) * (g.t > 1.0)


def tp_seconds(x, g, lt, stage_layers):
    """``(act_bytes, tp)``: one activation's bytes, and the exposed TP seconds a step."""
    full, plain, tok, h, t, G, net, m = g.full, g.plain, g.tok, g.h, g.t, g.G, g.net, g.m
    gemm_fwd_s, gemm_dgrad_s, gemm_wgrad_s = lt.gemm_fwd_s, lt.gemm_dgrad_s, lt.gemm_wgrad_s
    act_bytes = BF16 * tok * h
    tp_count = 4.0 + 2.0 * full
    # MoE layers: the routed experts need no TP collective (moe.tp_collectives_per_layer).
    tp_count = jnp.where(plain, tp_count, jnp.where(
        mamba.hybrid(x), mamba.tp_collectives_per_layer(x, full),
        moe.tp_collectives_per_layer(x, full)))
    # Each all-reduce equivalent: a bf16 reduce-scatter and an all-gather in the
    # precision the GEMM takes (tp_gather_bytes); (1 + full) of every 2 + full
    # pairs are forward ones, in every kind of layer.
    tg = jnp.minimum(t, G)
    gather_fwd, gather_bwd = tp_gather_bytes(x, g.sp)
    rs = reduce_scatter(act_bytes, t, tg, net)
    ag_fwd = all_gather(act_bytes * gather_fwd / BF16, t, tg, net)
    ag_bwd = all_gather(act_bytes * gather_bwd / BF16, t, tg, net)
    forward_share = (1.0 + full) / (2.0 + full)
    one = rs + forward_share * ag_fwd + (1.0 - forward_share) * ag_bwd
    # The blocks with a column-parallel input (2 + full pairs of collectives
    # each); a backward re-gather (regathers) for each.
    blocks = tp_count / (2.0 + full)
    regather = regathers(x, g) * blocks * ag_fwd
    tp_layer = tp_count * one + regather
    # MoE / hybrid layers: one pool, every GEMM of the layer; the re-gathers
    # hide behind the dgrad GEMMs and the column-parallel backward collectives
    # (column_backward_seconds, one per block) behind the wgrad GEMMs, whatever
    # tp_overlap.
    column = ((1.0 - x.tp_overlap_kind) * (t > 1.0) * blocks
              * column_backward_seconds(g, rs, ag_bwd))
    gemm_layer = gemm_fwd_s * (1.0 + full) + gemm_dgrad_s + gemm_wgrad_s
    pooled = jnp.minimum(x.tp_overlap * (t - 1.0) / t * (tp_layer - regather - column)
                         + jnp.minimum(regather, gemm_dgrad_s)
                         + jnp.minimum(column, gemm_wgrad_s), gemm_layer)
    dense_hidden, dense_extra = dense_overlap_seconds(x, g, (rs, ag_fwd, ag_bwd), act_bytes,
                                                     lt.dense_gemms)
    tp_hidden = jnp.where(plain, dense_hidden, pooled)
    tp_layer_exposed = tp_layer - tp_hidden + jnp.where(plain, dense_extra, 0.0)
    tp = m * stage_layers * tp_layer_exposed
    return act_bytes, tp
