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

``tp_overlap_kind`` names the implementation, whose backward and last step
differ:

* 0, Megatron-Core ``--tp-comm-overlap`` (Transformer Engine userbuffers):
  the backward reduce-scatter of the column-parallel input gradient runs
  beside that layer's weight-gradient GEMM (TE's "bulk" overlap of
  ``qkv_dgrad`` / ``fc1_dgrad``).
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

Not charged: the split GEMMs' extra partial waves (PyTorch and TE run the
chunks on alternating streams so the next chunk fills the last wave's idle
SMs) and the ``t - 1`` extra reads of the weight (``(t - 1) k n`` elements,
a few hundredths of a millisecond for a 70B layer).
"""

from __future__ import annotations

from jaxmodel.collectives import all_reduce
from jaxmodel.deferred import jnp
from jaxmodel.models.refined import mamba, moe
from jaxmodel.models.refined.layer import layer_gemm_shapes
from jaxmodel.models.refined.rates import BF16, gemm_seconds


def dense_overlap_seconds(x, g, half, act_bytes):
    """``(hidden, extra)``: a dense layer's TP seconds hidden behind their own GEMMs,
    and the seconds the overlap adds (async TP's reduction of the partials).

    ``half``: one all-gather or reduce-scatter (half an all-reduce's time).
    Each pair hides ``min(tp_overlap (t - 1) / t half, GEMM)``; the forward
    pairs run ``1 + full`` times (full recompute runs the forward again).
    """
    t, tok, fp8, hbm_rate = g.t, g.tok, g.fp8, g.hbm_rate
    shapes = layer_gemm_shapes(x)
    fwd = [gemm_seconds(x, tok, n, k, fp8, hbm_rate) for n, k in shapes]
    dgrad = [gemm_seconds(x, tok, k, n, fp8, hbm_rate) for n, k in shapes]
    wgrad = [gemm_seconds(x, k, n, tok, fp8, hbm_rate) for n, k in shapes]
    share = x.tp_overlap * (t - 1.0) / t * half
    te = 1.0 - x.tp_overlap_kind

    def hide(gemm):
        return jnp.minimum(share, gemm)

    qkv, proj, up, down = 0, 1, 2, 3
    passes = 1.0 + g.full
    forward = hide(fwd[qkv]) + hide(fwd[proj]) + hide(fwd[up]) + hide(fwd[down])
    backward = hide(dgrad[proj]) + hide(dgrad[down]) + te * (hide(wgrad[qkv]) + hide(wgrad[up]))
    # Async TP: the two forward reduce-scatters each end with the sum of t partials.
    reduce_s = act_bytes * (1.0 + 1.0 / t) / hbm_rate
    extra = x.tp_overlap_kind * x.tp_overlap * passes * 2.0 * reduce_s * (t > 1.0)
    return passes * forward + backward, extra


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
    one = all_reduce(act_bytes, t, jnp.minimum(t, G), net)
    tp_layer = tp_count * one
    # MoE / hybrid layers: one pool, every GEMM of the layer.
    gemm_layer = gemm_fwd_s * (1.0 + full) + gemm_dgrad_s + gemm_wgrad_s
    pooled = jnp.minimum(x.tp_overlap * (t - 1.0) / t * tp_layer, gemm_layer)
    dense_hidden, dense_extra = dense_overlap_seconds(x, g, 0.5 * one, act_bytes)
    tp_hidden = jnp.where(plain, dense_hidden, pooled)
    tp_layer_exposed = tp_layer - tp_hidden + jnp.where(plain, dense_extra, 0.0)
    tp = m * stage_layers * tp_layer_exposed
    return act_bytes, tp
