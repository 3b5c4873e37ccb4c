"""Achievable rates: GEMMs, fused attention and the network, on one configuration's GPU.

* **GEMMs** (``gemm_seconds``): ``2 m n k`` FLOPs at the dense bf16 peak
  ``compute_tflops`` (or, for the layers' GEMMs in a low ``precision``, its
  peak, ceiling and operand size: ``low_precision_rate``), times an
  efficiency: with ``gemm_shape_model`` 1 the one each GEMM's shape reaches
  (tile and wave quantization over ``num_sms`` and arithmetic intensity
  against ``hbm_bandwidth_tb_s``; ``jaxmodel.collectives.gemm_efficiency``),
  capped by ``matmul_efficiency`` (the large-GEMM ceiling: a round value at the
  low end of what cuBLAS sustains on transformer-sized bf16 GEMMs on A100 and
  H100, 70-80% of dense peak); with 0 the ceiling for every GEMM.
* **Fused attention** (``flash_attention_seconds``): FlashAttention (Dao et al.
  2022) at ``attention_efficiency`` of the bf16 peak (``fa2_attention_efficiency``
  for FlashAttention-2, ``attention_kernel`` 1, and a measured fraction of it for
  its predecessors, 2 and 3); with a causal mask it
  executes only the unmasked half of the score blocks, with a sliding window
  only the band (``jaxmodel.models.refined.layer.attention_keys``).
* **Memory-bound kernels** run at ``hbm_efficiency`` of ``hbm_bandwidth_tb_s``
  (streaming kernels reach 80-90% of datasheet bandwidth); the bytes each
  moves are counted in ``jaxmodel.models.refined.layer``.
* **Network** (``network``): achieved bandwidths (link x efficiency) and
  per-step latencies of the two-level alpha-beta model every collective in
  ``jaxmodel.collectives`` uses.  A collective over ``n`` ranks of which
  ``g`` share a node runs hierarchically (reduce-scatter in the node, the
  collective across nodes on ``1 / g`` of the data, one NIC per GPU,
  all-gather in the node), each level ``steps x latency + bytes / (bandwidth
  x efficiency)``.  NCCL all-reduce bus bandwidth on DGX A100 is about 230-240
  GB/s of NVLink's 300 (nccl-tests); large transfers over InfiniBand run at
  about 90% of line rate; a small all-reduce on 8 NVLink GPUs takes 10-15 us
  over 14 ring steps, an InfiniBand hop with NCCL's proxy about 5 us.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from jaxmodel.collectives import Network, gemm_efficiency
from jaxmodel.deferred import jnp
from jaxmodel.models.common import whole

# Bytes of a bf16 element: weights, activations and the GEMM operands.
BF16 = 2.0


def network(x) -> Network:
    """Achieved bandwidths (bandwidth x efficiency) and per-step latencies."""
    return Network(
        intra_bw=x.link_bandwidth_gb_s * 1e9 * x.intra_node_efficiency,
        inter_bw=x.network_bandwidth_gb_s * 1e9 * x.inter_node_efficiency,
        intra_latency=x.intra_node_latency_us * 1e-6,
        inter_latency=x.inter_node_latency_us * 1e-6,
    )


def low_precision_rate(x):
    """The peak FLOP/s, large-GEMM ceiling and operand bytes of ``precision``'s GEMMs.

    1 per-tensor FP8 at ``fp8_peak_tflops`` and ``fp8_matmul_efficiency``, 2
    block-scaled FP8 at ``mxfp8_peak_tflops`` and ``fp8_matmul_efficiency x
    mxfp8_matmul_ratio`` (the scale factors the MMA loads; both 1-byte operands),
    3 NVFP4 at ``fp4_peak_tflops`` and ``fp4_matmul_efficiency`` (half-byte
    operands); 0 (BF16) gives the bf16 peak and ceiling.
    """
    p = whole(x.precision)
    conds = [p == 1, p == 2, p == 3]

    # Nested wheres, not jnp.select: NumPy's select does not hand its default
    # to __array_function__, so on the host (jaxmodel.dual) a Dual bf16 peak
    # there became an object array of Duals, not a Dual.
    def by_precision(fp8, mxfp8, fp4, bf16):
        return jnp.where(conds[0], fp8, jnp.where(conds[1], mxfp8, jnp.where(conds[2], fp4, bf16)))

    peak = by_precision(x.fp8_peak_tflops, x.mxfp8_peak_tflops, x.fp4_peak_tflops,
                        x.compute_tflops) * 1e12
    ceiling = by_precision(x.fp8_matmul_efficiency,
                           x.fp8_matmul_efficiency * x.mxfp8_matmul_ratio,
                           x.fp4_matmul_efficiency, x.matmul_efficiency)
    element = jnp.select(conds, [1.0, 1.0, 0.5], BF16).astype(jnp.result_type(peak))
    return peak, ceiling, element


class GemmRates(NamedTuple):
    """What every GEMM of one configuration shares, computed once (``gemm_rates``).

    Attributes:
      bf16: peak FLOP/s, large-GEMM ceiling and operand bytes in bf16.
      low: the same for the layers' GEMMs in ``precision``
        (``low_precision_rate``: the bf16 ones for precision 0).
      hbm_rate: achieved HBM bytes/s.  num_sms: the GPU's SMs.
      shaped: ``gemm_shape_model`` on (the shape's efficiency, else the ceiling).
    """

    bf16: Any
    low: Any
    hbm_rate: Any
    num_sms: Any
    shaped: Any


def gemm_rates(x, hbm_rate) -> GemmRates:
    """The rates of this configuration's GEMMs (``hbm_rate``: achieved bytes/s)."""
    return GemmRates(bf16=(x.compute_tflops * 1e12, x.matmul_efficiency, BF16),
                     low=low_precision_rate(x), hbm_rate=hbm_rate, num_sms=x.num_sms,
                     shaped=x.gemm_shape_model > 0.5)


def gemm_seconds(r: GemmRates, m, n, k, low_precision: bool):
    """Seconds of an ``[m, k] x [k, n]`` GEMM on this configuration's GPU.

    At ``precision``'s peak, ceiling and operand size (``low_precision_rate``)
    where ``low_precision`` (a layer GEMM: True), else at the bf16 ones (the
    output layer, unfused attention); the efficiency from the shape
    (``collectives.gemm_efficiency``, capped by the ceiling) or, with
    ``gemm_shape_model`` 0, the ceiling.  A peak of 0 (no tensor cores for that
    precision) gives an infinite time, and the layout is invalid
    (``validity.layout_ok``).  ``r``: ``gemm_rates``, computed once per
    configuration rather than per GEMM.  (Written as ``2 m n k / (rate x
    efficiency)``: the same time as the sum of ``gemm_efficiency``'s math and
    memory seconds, but XLA fuses it without duplicating the tile counts into
    each consumer, 2x faster in a sweep.)
    """
    rate, ceiling, element = r.low if low_precision else r.bf16
    shaped = gemm_efficiency(m, n, k, ceiling=ceiling, peak_flops=rate,
                             hbm_bytes_s=r.hbm_rate, num_sms=r.num_sms,
                             bytes_per_element=element)
    eff = jnp.where(r.shaped, shaped, ceiling)
    return 2.0 * m * n * k / (rate * eff)


# The fused-attention fractions of the GPU presets are measured at head dimension
# 128.  A score element costs the kernel a fixed softmax part (the exponential,
# the running maximum, the rescale) and its two matrix products 4 d FLOPs, so
# its fraction of peak goes as d / (d + d0): a small head does less MMA work per
# exponential.  FlashAttention-3 paper (Shah et al. 2024, arXiv 2407.08608,
# Figures 5 and 6: H100 SXM5, bf16, non-causal, sequence 8K), TFLOP/s forward /
# backward: cuDNN 412 / 432 at head dim 64, 600 / 518 at 128 (only their ratio is
# used), combined by the model's 1 : 2.5 to 426 and 539, a ratio 0.790, so d0
# = 128 (1 - 0.790) / (2 x 0.790 - 1) = 46.2; FlashAttention-2 322 / 287 and
# 370 / 318, 296 and 331, ratio 0.894, d0 = 17.2.  At 256 cuDNN's d0 gives
# 1.153x the 128 rate, FlashAttention-3's own forward 746 / 646 = 1.155x.
#
# The softmax part is the exponential each score element takes on the SM's
# special-function units (MUFU.EX2) and the work around it, so d0, counted in
# the tensor cores' FLOPs, grows with the GPU's ratio of tensor-core FLOPs to
# exponentials per SM and clock (``mma_per_exponential``): the figures above are
# H100's, 4,096 / 16 = 256 (the paper, sec. 3: "989 TFLOPS of FP16 matmul but
# only 3.9 TFLOPS of special functions").  The GPU presets give the ratio.
ATTENTION_REFERENCE_HEAD_DIM = 128.0
ATTENTION_HEAD_DIM_D0 = 46.2
FA2_HEAD_DIM_D0 = 17.2
HOPPER_MMA_PER_EXPONENTIAL = 256.0


def softmax_d0(d0, mma_per_exponential):
    """A kernel's softmax part ``d0`` (fitted on H100) on a GPU whose tensor cores
    do ``mma_per_exponential`` FLOPs per exponential: ``d0 x ratio / 256``."""
    return d0 * mma_per_exponential / HOPPER_MMA_PER_EXPONENTIAL


def head_dim_factor(width, d0):
    """A fused-attention kernel's rate at per-head width ``width`` over its rate at
    the reference head dimension 128: ``(w / (w + d0)) / (128 / (128 + d0))``,
    written ``1 + d0 (w - 128) / (128 (w + d0))`` so that at the reference width it
    is exactly 1 and its derivative in ``d0`` (``mma_per_exponential``) exactly 0
    in float32 too (the two-ratio form leaves a rounding residue there)."""
    ref = ATTENTION_REFERENCE_HEAD_DIM
    return 1.0 + d0 * (width - ref) / (ref * (width + d0))


# FlashAttention-2's predecessors, as fractions of its rate (attention_kernel 2
# and 3).  Dao 2023 (FlashAttention-2, arXiv 2307.08691, sec. 4.1, A100 80 GB
# SXM4, head dimension 64 and 128, with and without the causal mask, 512-16k):
# "FlashAttention-2 is around 2x faster than FlashAttention", forward and
# backward alike, and "around 1.3-1.5x faster than FlashAttention in Triton in
# the forward pass and around 2x faster in the backward pass".  The first
# FlashAttention (flash-attn 1.x) thus runs at 1/2 of FlashAttention-2's rate;
# the Triton kernel at 1/1.4 forward and 1/2 backward, which the model's FLOP
# ratio 1 : 2.5 combines to 3.5 / (1.4 + 2.5 x 2) = 0.547.  The same paper puts
# the first FlashAttention at "only 25-40% of the theoretical maximum FLOPs/s"
# against FlashAttention-2's 50-73%.  Measured on A100; on other GPUs the same
# ratios are assumed (the kernels predate Hopper and use none of its features).
FA1_OVER_FA2 = 0.5
TRITON_FA_OVER_FA2 = 3.5 / (1.4 + 2.5 * 2.0)


# A fused kernel's fixed work per query tile and call: loading the tile's
# queries, the prologue that fills its pipeline, the final rescale and the
# output and log-sum-exp stores, and the tail of a wave of tiles of unequal
# length.  It costs about as much as ``attention_tile_keys`` (default 512) keys
# more of the main loop, so a query runs ``keys + 512`` keys' time, and the
# presets' fractions, measured at ``ATTENTION_REFERENCE_SEQUENCE`` keys without a
# mask, already hold 8192 / (8192 + 512) of it.  NVIDIA's cuDNN-frontend SDPA
# training benchmark (NVIDIA/cudnn-frontend, benchmark/sdpa_benchmark_training/
# results/{h200,gb200,gb300}_919_only_cudnn/llama3.1_*.csv: cuDNN 9.19.1, bf16, 64 query
# and 8 key/value heads of 128, batch 1, with and without the causal mask, 2K-32K)
# measures it: each GPU's forward and backward combined by the model's 1 : 2.5,
# at 4K-32K, fitted by ``E n / (n + c)`` without the mask and ``E n / (n + 1 +
# 2 c)`` with it (``n`` = keys / 128; the causal count is the half square, and
# the kernel runs ``(n + 1) / 2`` tiles a query tile, ``masked_tile_keys``), one
# ``E`` per GPU and one ``c``: c = 4.3 tiles (3.4 on H200, 5.1 on GB200, 4.4 on
# GB300 alone), every point within 5.6%; 4 tiles of 128 keys are taken.  It is
# why a causal 4K sequence runs at 0.80-0.81 of the unmasked 8K rate on all
# three (the model: 0.83), and why GPT-OSS's attention in the same benchmark
# (gpt_oss_*.csv: head dim 64, a causal window of 1,024 keys, 8K) runs at 0.254
# of GB200's peak and 0.316 of H200's (the model: 0.268 and 0.317; without this
# term 0.371 and 0.440).  FlashAttention-2's fraction (``fa2_attention_efficiency``)
# is its causal forward at 8K already and its rate is flat from 4K on (the
# FlashAttention-3 paper's figures), so attention_kernel 1-3 take none.
ATTENTION_REFERENCE_SEQUENCE = 8192.0

# FP8's dense tensor-core rate over bf16's, per SM and clock, on every GPU with FP8
# (H100 1,979 / 989, B200 4.5 / 2.25 PFLOP/s, MI300X 2,614.9 / 1,307.4: the
# datasheets in jaxmodel.models.presets).
FP8_TENSOR_RATE = 2.0


def kernel_keys(x, executed, calls):
    """Keys' worth of fused-kernel time per query: the ``executed`` keys
    (``layer.attention_keys``) plus ``attention_tile_keys`` for each of the
    ``calls`` kernel calls a query takes a layer (one; one per ring step under
    context parallelism), over the part of it the preset's fraction holds."""
    tile = jnp.where(whole(x.attention_kernel) >= 1, 0.0, x.attention_tile_keys)
    ref = ATTENTION_REFERENCE_SEQUENCE
    return (executed + tile * calls) * ref / (ref + tile)


def flash_attention_seconds(x, flops, peak, head_width=None):
    """Seconds of a fused attention pass that executes ``flops``.

    ``flops`` are those the kernel runs: a causal kernel skips the masked
    score blocks, a sliding-window one those outside the band
    (``jaxmodel.models.refined.layer.attention_keys``).  ``head_width``: the
    mean width of the two products per head (``d`` for GQA/MHA, ``(d_qk + d_v)
    / 2`` for MLA), which scales the preset's fraction (``head_dim_factor``,
    with the GPU's ``softmax_d0``); None: the reference width, 128.
    """
    kernel = whole(x.attention_kernel)
    # Kernels 1-3 are FlashAttention-2 and its predecessors: FlashAttention-2's
    # measured fraction, scaled by the generation (above), and its softmax part.
    fa2 = kernel >= 1
    generation = jnp.where(kernel == 2, FA1_OVER_FA2,
                           jnp.where(kernel == 3, TRITON_FA_OVER_FA2, 1.0))
    # FP8 attention (fp8_attention, the fused kernel only): its own measured fraction
    # of the bf16 peak, and twice the matrix FLOPs per exponential (FP8's tensor rate
    # is twice bf16's per SM and clock), so its softmax part d0 doubles.
    fp8 = (x.fp8_attention > 0.5) & ~fa2
    efficiency = jnp.where(fa2, x.fa2_attention_efficiency * generation,
                           jnp.where(fp8, x.fp8_attention_efficiency, x.attention_efficiency))
    if head_width is not None:
        # A wide head can raise a fraction near 1 past the peak; no kernel runs faster
        # (an FP8 kernel's bound is the FP8 peak, twice the bf16 one).
        d0 = softmax_d0(jnp.where(fa2, FA2_HEAD_DIM_D0, ATTENTION_HEAD_DIM_D0),
                        x.mma_per_exponential * jnp.where(fp8, FP8_TENSOR_RATE, 1.0))
        efficiency = jnp.minimum(efficiency * head_dim_factor(head_width, d0),
                                 jnp.where(fp8, FP8_TENSOR_RATE, 1.0))
    return flops / (peak * efficiency)


def bf16_layer_share(x):
    """The share of the layers whose GEMMs stay BF16 under a low ``precision``
    (``bf16_layers`` of ``num_layers``; 0 in BF16, where every layer is)."""
    share = jnp.clip(x.bf16_layers / x.num_layers, 0.0, 1.0)
    return share * low_precision_gemms(x)


def low_precision_gemms(x):
    """1 where the layer GEMMs run in FP8 or FP4 (``precision`` >= 1), else 0.

    The one definition of the switch: the FP8 / FP4 peaks and ceilings
    (``rates.gemm_seconds``), the quantisation kernels, and the low-precision
    weight copies and saved inputs in memory all key on it.
    """
    # precision is a checked whole number, so >= 0.5 is >= 1 (and needs no int cast).
    return (x.precision >= 0.5).astype(jnp.result_type(x.hidden_dim))
