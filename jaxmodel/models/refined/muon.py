"""Muon (``optimizer`` 1): the Newton-Schulz orthogonalisation and the smaller state.

Muon (K. Jordan et al. 2024; Moonshot AI's Kimi K2 trained with it) updates each
weight matrix by its momentum orthogonalised with a few Newton-Schulz
iterations; embeddings, the output layer and 1-D parameters stay on Adam.
Megatron-Core runs it as ``TensorParallelMuon`` (megatron/core/optimizer/muon.py,
NVIDIA's emerging_optimizers: ``OrthogonalizedOptimizer``, ``num_ns_steps`` 5,
the quintic coefficients, momentum 0.95 with Nesterov), and with
``--use-distributed-optimizer`` as a layer-wise distributed optimizer: whole
matrices are assigned to the data-parallel ranks, each orthogonalises its own
and the updated weights are gathered as the distributed optimizer's are.

* **Newton-Schulz FLOPs** (``ns_flops``): a quintic iteration on ``X`` (``m x n``,
  ``m <= n``, transposed if taller) is ``A = X X^T`` (``2 m^2 n``), ``B = b A + c
  A A`` (``2 m^3``) and ``X = a X + B X`` (``2 m^2 n``): ``4 m^2 n + 2 m^3`` a step,
  ``NS_STEPS`` steps a matrix.  They run as bf16 GEMMs (``fp32_matmul_prec``
  "medium") at the bf16 ceiling (``matmul_efficiency``; the matrices are
  large, the shape model is not applied).
* **Which matrices** (``layer_ns_flops``, the average layer as ``memory.stage_params``
  holds it): attention (GQA/MHA: the fused QKV and the output projection,
  Megatron-Core's ``linear_qkv`` and ``linear_proj``; MLA: the query down and up,
  the key-value down and up and the output projections), the FFN (fused
  ``linear_fc1`` and ``linear_fc2``), the router, the shared experts, LatentMoE's
  projections, Mamba-2's in- and out-projections; each routed expert's two
  (``expert_ns_flops``).  With tensor parallelism each rank orthogonalises its
  own block (Megatron-Core's ``muon_tp_mode`` "blockwise"): column-parallel
  matrices ``1 / t`` of their rows, row-parallel ``1 / t`` of their columns; the
  down-projections of MLA, the router and LatentMoE's projections whole.  The
  multi-token-prediction modules and Mamba-2's conv1d are left out (a small
  share).
* **Sharding**: with a distributed optimizer (ZeRO 1-3) each rank
  orthogonalises ``1 / z`` of the matrices (``1 / edp`` of the experts'); without
  one every replica runs all of its own.
* **State** (``STATE_BYTES_SAVED``): fp32 master weights and one fp32 momentum,
  8 bytes a matrix parameter, where Adam keeps a second moment too (12).
* **Step traffic** (``STEP_BYTES``): read the bf16 gradient, read and write the
  momentum and the master weights, write the bf16 weights: 20 bytes a parameter,
  against mixed-precision Adam's 28.
"""

from __future__ import annotations

from jaxmodel.deferred import jnp
from jaxmodel.models.refined import mamba, moe
from jaxmodel.models.refined.derived import optimizer_shards
from jaxmodel.models.refined.layer import layer_gemm_shapes

# Newton-Schulz steps a matrix (Megatron-Core OptimizerConfig.muon_num_ns_steps,
# emerging_optimizers' default; Moonshot's Moonlight and Kimi K2 use 5 too).
NS_STEPS = 5.0
# fp32 optimizer state a matrix parameter saves under Muon: Adam's second moment.
STATE_BYTES_SAVED = 4.0
# Memory-bound bytes a parameter of the Muon step moves (module doc).
STEP_BYTES = 20.0


def on(x):
    """1 where the weight matrices train with Muon (``optimizer`` 1), else 0."""
    return (x.optimizer >= 0.5).astype(jnp.result_type(x.hidden_dim))


def ns_flops(rows, cols):
    """FLOPs of ``NS_STEPS`` quintic Newton-Schulz steps on a ``rows x cols`` matrix."""
    m = jnp.minimum(rows, cols)
    n = jnp.maximum(rows, cols)
    return NS_STEPS * (4.0 * m * m * n + 2.0 * m * m * m)


def attention_ns_flops(x, t):
    """One attention block's matrices on one tensor-parallel rank (module doc)."""
    h, a, kv = x.hidden_dim, x.num_heads, x.num_kv_heads
    dh = moe.head_dim(x)
    gqa = (ns_flops((a + 2.0 * kv) * dh / t, h) + ns_flops(h, a * dh / t))
    rq, rkv, dr = x.q_lora_rank, x.kv_lora_rank, x.qk_rope_dim
    q = jnp.where(rq > 0.5, ns_flops(rq, h) + ns_flops(a * (dh + dr) / t, rq),
                  ns_flops(a * (dh + dr) / t, h))
    mla = (q + ns_flops(rkv + dr, h) + ns_flops(a * 2.0 * dh / t, rkv)
           + ns_flops(h, a * dh / t))
    return jnp.where(x.attention > 0.5, mla, gqa)


def ffn_ns_flops(x, width, t):
    """A feed-forward block of ``width`` on one rank: ``linear_fc1`` (``(w - 1)
    width / t x h``) and ``linear_fc2`` (``h x width / t``)."""
    h = x.hidden_dim
    return ns_flops((x.mlp_weight_matrices - 1.0) * width / t, h) + ns_flops(h, width / t)


def moe_block_ns_flops(x, t):
    """An MoE block's matrices every tensor-parallel group holds: the router, the
    shared experts (one FFN of ``S f_e``) and LatentMoE's two projections."""
    h = x.hidden_dim
    shared = jnp.where(x.shared_experts > 0.5,
                       ffn_ns_flops(x, x.shared_experts * x.moe_ffn_hidden_dim, t), 0.0)
    latent = jnp.where(moe.has_latent(x), 2.0 * ns_flops(x.moe_latent_size, h), 0.0)
    return ns_flops(x.num_experts, h) + shared + latent


def expert_ns_flops(x, etp):
    """One routed expert's two matrices on one expert-tensor-parallel rank
    (its width ``moe.routed_width``: ``h``, or the latent size)."""
    d, f = moe.routed_width(x), x.moe_ffn_hidden_dim
    return ns_flops((x.mlp_weight_matrices - 1.0) * f / etp, d) + ns_flops(d, f / etp)


def layer_ns_flops(x, t, plain):
    """The average layer's matrices a tensor-parallel rank holds, routed experts
    apart (``x``: ``mamba.moe_view``; as ``memory.stage_params`` weighs them)."""
    # A plain dense layer's matrices are its GEMMs' weights (layer.layer_gemm_shapes).
    dense = sum(ns_flops(n, k) for n, k in layer_gemm_shapes(x))
    attention = attention_ns_flops(x, t)
    block = moe_block_ns_flops(x, t)
    dense_ffn = ffn_ns_flops(x, x.ffn_hidden_dim, t)
    mamba_mixer = sum(ns_flops(n, k) for n, k in mamba.gemm_shapes(x))
    hybrid = (mamba.attention_share(x) * attention + mamba.mamba_share(x) * mamba_mixer
              + moe.moe_fraction(x) * block
              + (mamba.ffn_share(x) - moe.moe_fraction(x)) * dense_ffn)
    f = moe.moe_fraction(x)
    layered = attention + f * block + (1.0 - f) * dense_ffn
    return jnp.where(plain, dense, jnp.where(mamba.hybrid(x), hybrid, layered))


def orthogonalise_seconds(x, g, stage_layers, z, edp):
    """Seconds of the Newton-Schulz steps a step on the busiest stage's GPU (0 with
    Adam): its layers' matrices over the ``z`` ranks that share them (``edp`` for
    the routed experts' ``E / e`` local experts) with a distributed optimizer."""
    experts = jnp.where(g.has_experts, moe.moe_fraction(x) * x.num_experts / g.e
                        * expert_ns_flops(x, g.etp) / optimizer_shards(g, edp), 0.0)
    flops = stage_layers * (layer_ns_flops(x, g.t, g.plain) / optimizer_shards(g, z)
                            + experts)
    return on(x) * flops / (g.peak * x.matmul_efficiency)
