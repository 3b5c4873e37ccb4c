"""The quantities every term of the refined model uses, derived once per configuration.

The layout as exact integers (``d = N / (t c p)`` replicas, the switches as
codes), the validity of the layout (``jaxmodel.models.refined.validity``), the
switches as 0/1 floats, the smooth (relaxed) counts under their short names
(``t c p v m b s h L V a kv f G``, as the papers write them), and the achieved
rates in SI: peak FLOP/s, HBM bytes/s and the network.  Each concern's module
takes a :class:`Derived` and the model's inputs ``x``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from jaxmodel.deferred import jnp
from jaxmodel.models.common import whole
from jaxmodel.models.refined import mamba, moe
from jaxmodel.models.refined.rates import (
    bf16_layer_share,
    gemm_rates,
    low_precision_gemms,
    network,
)
from jaxmodel.models.refined.validity import layout_ok

# Bytes moved per element by the quantisation kernels of each precision
# (Transformer Engine 2.x, the recipes Megatron-Bridge runs: fp8_cs, mxfp8,
# nvfp4).  Each casts a bf16 tensor (2 bytes read) into a row-wise and a
# column-wise (transposed) copy, since the weight-gradient GEMM contracts over
# the other dimension:
# - 1, per-tensor FP8 with current scaling (recipe.Float8CurrentScaling): an
#   amax pass over the tensor first (nvte_compute_amax, 2 bytes read), then the
#   cast-transpose (2 read, 1 + 1 written) = 6.  Delayed scaling fuses the
#   amax into the cast (4), but the 2025-26 recipes run current scaling.
# - 2, block-scaled FP8: MXFP8 (recipe.MXFP8BlockScaling: a 1-byte E8M0 scale
#   per 32 elements) and 1x128 / 128x128 blockwise (recipe.Float8BlockScaling:
#   a 4-byte FP32 scale per 128 along a row) both store 1/32 byte of scales per
#   element in each direction, and compute the scales within the block (no
#   amax pass): 2 + 2 x (1 + 1/32) = 4.0625.
# - 3, NVFP4 (recipe.NVFP4BlockScaling; TE docs, "NVFP4"): a global amax pass
#   (2 bytes read) for the FP32 second-level scale, then the cast (2 read, two
#   4-bit copies 0.5 + 0.5, a 1-byte E4M3 scale per 16 elements each way
#   1/16 + 1/16) = 5.125.  Its random Hadamard transform (on the weight-gradient
#   operands) is fused into the cast and moves no further bytes.
# Only per-tensor FP8 runs at those bytes: its kernels (amax, cast-transpose)
# stream at HBM rate.  The block-scaled casts also reduce each block to its
# scale, and NVFP4's also transform (Hadamard), round stochastically and scale
# weights in 2D, which is work on top of the bytes.  NVIDIA measured the three
# recipes' quantisation on the same tensors (Transformer Engine's GEMM tutorial,
# docs/examples/gemm_profiling/gemm_profiling.rst, B300: autocast minus
# pre-quantized time of a hidden-4096 layer's 12 GEMMs): FP8 current scaling
# 9.147 - 6.812 = 2.335 ms, MXFP8 8.984 - 7.161 = 1.823 ms, NVFP4 6.453 - 3.764
# = 2.689 ms.  So each is per-tensor FP8's 6 bytes times its measured ratio:
# MXFP8 (and the blockwise recipe, same kernel family) 4.68, NVFP4 6.91 bytes'
# worth of HBM time an element, against the 4.06 and 5.13 their bytes alone give.
_CAST_MEASURED_MS = {1: 9.147 - 6.812, 2: 8.984 - 7.161, 3: 6.453 - 3.764}
_FP8_CAST_BYTES = 6.0
CAST_BYTES_PER_ELEMENT = (0.0, _FP8_CAST_BYTES,
                          *(round(_FP8_CAST_BYTES * _CAST_MEASURED_MS[p] / _CAST_MEASURED_MS[1], 3)
                            for p in (2, 3)))


def cast_bytes_per_element(x):
    """HBM bytes' worth of time the quantisation kernels take per element cast
    (``CAST_BYTES_PER_ELEMENT``)."""
    p = whole(x.precision)
    return jnp.select([p == 1, p == 2, p == 3], list(CAST_BYTES_PER_ELEMENT[1:]),
                      CAST_BYTES_PER_ELEMENT[0]).astype(jnp.result_type(x.hidden_dim))


def optimizer_shards(g, ranks):
    """The ranks a distributed optimizer splits the optimizer state, its step and
    Muon's orthogonalisation over: ``ranks`` (``z`` for the dense parameters,
    ``edp`` for the routed experts') under ZeRO 1-3, one rank without."""
    return jnp.where(g.zero_i >= 1, ranks, jnp.ones_like(ranks))


def recomputed_share(x):
    """The share of a stage's layers that full recompute recomputes (0..1).

    Megatron-LM's ``--recompute-method block --recompute-num-layers k``
    recomputes the first ``k`` layers of each pipeline chunk of ``L / (p v)``
    layers and stores the others' activations: ``min(k, L / (p v)) / (L /
    (p v))``; ``recompute_layers`` 0 (every layer, as ``uniform``) is 1.
    """
    chunk = x.num_layers / (x.pipeline_parallel * x.virtual_stages)
    share = jnp.minimum(x.recompute_layers, chunk) / chunk
    return jnp.where(x.recompute_layers > 0.5, share, jnp.ones_like(share))


class Derived(NamedTuple):
    """Shared quantities of one configuration (jax scalars; ``_i``: int64 exact).

    Attributes:
      fdt: the floating-point dtype of the inputs.
      n_i, t_i, p_i, c_i, v_i, m_i: GPUs, tensor, pipeline, context degrees,
        virtual stages and micro-batches per step, exact.
      d_i, used_i, tokens_i: replicas ``N // (t c p)``, GPUs used, tokens a step.
      schedule, zero_i, recompute: the pipeline schedule, ZeRO stage and
        recompute codes.
      well_formed: the layout rule without the memory fit.
      full: the share of layers fully recomputed (``recomputed_share``; 0
        unless ``recompute`` is 2).
      selective, sp, flash: recompute kind and switches, 0/1 floats.
      op_sac: per-op selective recompute (``recompute`` 3, torchtitan's policy), 0/1.
      fp8: the layer GEMMs in a low precision (``low_precision_gemms``), 0/1.
      cast_bytes: bytes the quantisation kernels move per element cast, over the
        average layer (``cast_bytes_per_element`` times the share of layers not
        kept in BF16; 0 in BF16).
      bf16_share: the share of the layers whose GEMMs stay BF16 under a low
        precision (``rates.bf16_layer_share``).
      one_stage, pp_active, has_mid: ``p = 1``, ``p > 1``, ``p >= 3``, 0/1 floats.
      d, t, c, p, v, m, b, s, h, L, V, a, kv, f, G: the counts as floats
        (``d`` at least 1, so that an invalid layout divides by no zero).
      net: the achieved network (``rates.network``).
      peak: the dense bf16 peak, FLOP/s.  hbm_rate: achieved HBM bytes/s.
      gemm: the rates every GEMM shares (``rates.gemm_rates``).
      rep_split: ``t`` with sequence parallelism, else 1 (the replicated part).
      tok: tokens of one micro-batch on one GPU, ``b s / c``.
      plain: a dense model with standard attention and no Mamba-2 layers
        (``mamba.plain``).
      has_experts: MoE layers present.  e, etp: expert and expert-tensor degrees.
    """

    fdt: Any
    n_i: Any
    t_i: Any
    p_i: Any
    c_i: Any
    v_i: Any
    m_i: Any
    d_i: Any
    used_i: Any
    tokens_i: Any
    schedule: Any
    zero_i: Any
    well_formed: Any
    recompute: Any
    full: Any
    selective: Any
    op_sac: Any
    sp: Any
    flash: Any
    fp8: Any
    cast_bytes: Any
    bf16_share: Any
    one_stage: Any
    pp_active: Any
    has_mid: Any
    d: Any
    t: Any
    c: Any
    p: Any
    v: Any
    m: Any
    b: Any
    s: Any
    h: Any
    L: Any
    V: Any
    a: Any
    kv: Any
    f: Any
    G: Any
    net: Any
    peak: Any
    hbm_rate: Any
    gemm: Any
    rep_split: Any
    tok: Any
    plain: Any
    has_experts: Any
    e: Any
    etp: Any


def derive(x) -> Derived:
    """The shared quantities of configuration ``x`` (``RefinedInputs``)."""
    fdt = jnp.result_type(x.hidden_dim)
    n_i, t_i, p_i = whole(x.num_gpus), whole(x.tensor_parallel), whole(x.pipeline_parallel)
    c_i = whole(x.context_parallel)
    v_i, m_i = whole(x.virtual_stages), whole(x.gradient_accum_steps)
    d_i = n_i // (t_i * c_i * p_i)
    used_i = d_i * t_i * c_i * p_i
    tokens_i = whole(x.micro_batch) * m_i * whole(x.seq_length) * d_i
    schedule = whole(x.pipeline_schedule)
    zero_i = whole(x.zero_stage)
    well_formed = layout_ok(x, d_i, t_i, c_i, p_i, v_i, m_i, schedule)
    recompute = whole(x.recompute)
    full = (recompute == 2).astype(fdt) * recomputed_share(x)
    selective = (recompute == 1).astype(fdt)
    op_sac = (recompute == 3).astype(fdt)
    sp = x.sequence_parallel
    one_stage = (p_i == 1).astype(fdt)

    # An invalid layout (d = 0) is computed with d = 1 and masked afterwards,
    # so that neither values nor gradients see a division by zero.
    d = jnp.maximum(d_i, 1).astype(fdt)
    t = x.tensor_parallel
    hbm_rate = x.hbm_bandwidth_tb_s * 1e12 * x.hbm_efficiency
    bf16_share = bf16_layer_share(x)
    return Derived(
        fdt=fdt, n_i=n_i, t_i=t_i, p_i=p_i, c_i=c_i, v_i=v_i, m_i=m_i, d_i=d_i,
        used_i=used_i, tokens_i=tokens_i, schedule=schedule, zero_i=zero_i,
        well_formed=well_formed, recompute=recompute, full=full, selective=selective, op_sac=op_sac,
        sp=sp, flash=x.flash_attention, fp8=low_precision_gemms(x),
        cast_bytes=cast_bytes_per_element(x) * (1.0 - bf16_share),
        bf16_share=bf16_share, one_stage=one_stage,
        pp_active=1.0 - one_stage, has_mid=(p_i >= 3).astype(fdt),
        d=d, t=t, c=x.context_parallel, p=x.pipeline_parallel, v=x.virtual_stages,
        m=x.gradient_accum_steps, b=x.micro_batch, s=x.seq_length, h=x.hidden_dim,
        L=x.num_layers, V=x.vocab_size, a=x.num_heads, kv=x.num_kv_heads,
        f=x.ffn_hidden_dim, G=x.gpus_per_node, net=network(x),
        peak=x.compute_tflops * 1e12,
        hbm_rate=hbm_rate, gemm=gemm_rates(x, hbm_rate),
        rep_split=jnp.where(sp > 0.5, t, jnp.ones_like(t)),
        tok=x.micro_batch * x.seq_length / x.context_parallel,
        # MoE and MLA (moe) enter by where: a dense model with standard
        # attention keeps its expressions bit for bit (XLA may fuse a sum with
        # a zero term differently).
        plain=mamba.plain(x), has_experts=moe.moe_layers(x) > 0.5,
        e=x.expert_parallel, etp=x.expert_tensor_parallel,
    )
