"""Mixture-of-Experts and Multi-head Latent Attention: the formulas, as pure functions.

The refined model (``jaxmodel.models.refined``) calls these at a few hooks;
everything MoE-specific is here so that it reads (and is tested) on its own.
Every function takes the model's input pytree ``x`` (or plain numbers) and
returns jax scalars; nothing here branches in Python on a value, so they jit,
vmap and differentiate.  A dense model is ``num_experts = 1``: then every
function below reduces to the dense formula, and the refined model selects its
own unchanged expressions (``is_plain``), so dense results are bit-for-bit
those of the model without MoE.

Architecture (symbols: ``h`` hidden, ``a`` heads, ``kv`` key/value heads,
``d_h`` head dimension, ``E`` experts, ``k`` experts per token, ``f_e`` expert
FFN width, ``S`` shared experts, ``w`` FFN weight matrices: 3 SwiGLU, 2 GeLU):

* **Layers**: the first ``dense_layers`` have a dense FFN of ``ffn_hidden_dim``;
  of the rest, every ``moe_layer_interval``-th (the first included) is an MoE
  layer, the others dense (Megatron-Core ``--moe-layer-freq``; DeepSeek-V3's
  ``first_k_dense_replace``).
* **MoE layer parameters**: router ``h E`` + ``E`` routed experts and ``S``
  shared experts of ``w h f_e`` each.  Active per token: the router, ``k``
  routed and the ``S`` shared experts.
* **LatentMoE** (``moe_latent_size`` ``l`` > 0; Megatron-Core
  ``moe_latent_size``, Nemotron-3 Super): the routed experts work in a latent
  space of width ``l``.  Per token, once, before the dispatch, ``fc1_latent_proj``
  projects ``h -> l``; the dispatch, the ``k`` experts (``w l f_e`` each: FC1
  ``l -> f_e``, FC2 ``f_e -> l``) and the combine run at width ``l``; after the
  combine ``fc2_latent_proj`` projects the summed ``l`` back to ``h``.  The
  router and the shared experts see ``h`` (Megatron-Core's ``MoELayer`` routes
  the hidden states, then projects; the shared experts take the layer input).
  So the layer adds ``2 h l`` weights (active for every token, held by every
  rank: the projections are not split) and two GEMMs ``[T, h] x [h, l]`` and
  ``[T, l] x [l, h]``; every routed-token quantity below (expert GEMMs,
  dispatch and combine bytes, permutation, the stored dispatched copies)
  takes ``l`` in place of ``h``, and the combined latent ``T l`` (the input
  of ``fc2_latent_proj``) is stored as well (``2 - fp8`` bytes).  ``l`` 0 is a
  plain MoE layer, every formula unchanged.
* **Attention** (``attention`` 0): Q and output ``2 h a d_h``, K and V
  ``2 h kv d_h`` (``d_h = h / a`` unless ``head_dim`` is set: Qwen3 uses 128
  with ``a d_h = 2 h``).  **MLA** (``attention`` 1, DeepSeek-V2 sec. 2.1):
  queries ``h r_q + r_q a (d_h + d_r)`` (or ``h a (d_h + d_r)`` without
  ``q_lora_rank``), keys and values ``h (r_kv + d_r) + r_kv a 2 d_h``, output
  ``a d_h h`` (``d_r`` = ``qk_rope_dim``, values of ``d_h``); the score core
  ``2 s a (d_h + d_r)`` + ``2 s a d_h`` FLOPs per token (QK^T, AV).
* **Embeddings**: ``(2 - tied) V h``, counted in total *and* active parameters
  (as Mistral and DeepSeek count them); biases and norms are left out (< 0.1%).

Costs (per GPU, one micro-batch, one MoE layer; tokens per rank ``T = s b / t``
as Megatron-Core requires sequence parallelism with TP and MoE):

* **FLOPs**: ``2 T`` per active weight (router included); model FLOPs and
  MFU count active parameters only.
* **Grouped expert GEMMs** (``layer_gemm_seconds``): the ``k T`` routed token
  copies run on this GPU's ``E / e`` experts, ``k T e / E`` tokens each (times
  the imbalance), at the efficiency that GEMM shape reaches (the refined
  model's shape-aware ``gemm_seconds``: tile quantization per expert, waves
  over the group, each expert's weights read); the busiest rank sets the pace
  (everyone meets it at the next all-to-all), so expert time is multiplied by
  ``load_factor`` = ``moe_imbalance`` (dropless) or ``min(moe_imbalance,
  capacity_factor)`` (tokens over capacity are dropped).
* **Dispatch and combine** (``dispatch_bytes``): two all-to-alls forward, two
  backward, each moving
  the ``k T`` copies of ``h`` bf16 values (full recompute's second forward
  adds two more).  Flat (``moe_dispatcher`` 0,
  Megatron's alltoall): ``(g - 1) / e`` of them to the ``g`` EP peers in the
  node, ``(e - g) / e`` over the NIC.  Hierarchical (1 DeepEP, 2 HybridEP): a
  token crosses the network once per remote *node* that holds one of its
  experts (``(K - 1)(1 - (1 - 1/K)^k)`` of the ``K = e / g`` nodes for uniform
  routing, at most ``max_nodes_per_token``) and goes over NVLink once to each
  other *GPU* that holds one of its experts (``ranks_reached``: ``R (1 - (1 -
  1/R)^k)`` of the ``R`` ranks it may reach, ``(g - 1) / g`` of them off the
  GPU), which permutes it to its experts locally; the combine returns one sum
  per GPU.  Those kernels run on a few SMs and reach ``deepep_link_efficiency``
  or ``hybridep_link_efficiency`` of the NVLink rate (measured: ``jaxmodel.
  models.presets``), not the ring's ``intra_node_efficiency``.  Both levels
  run at once, the slower sets the time (``jaxmodel.collectives``).
* **Kernels and host**: an MoE layer launches the router's kernels (31 fused,
  72 not: ``router_fusion``), the dispatcher's (counts, permutation, dispatch
  and combine: ``dispatch_kernels``, by dispatcher, expert parallelism and
  local experts) and one GEMM per local expert and pass (TE's multi-stream
  cuBLAS grouped GEMM) in place of the dense FFN's (``layer_extra_kernels``),
  with GroupedLinear's casts of each expert's slice under FP8 (16 per local
  expert with per-tensor current scaling, 4 MXFP8 / blockwise:
  ``expert_quantize_kernels``), each at ``kernel_overhead_us``; expert
  weight gradients accumulate into the fp32 gradient buffer (read and
  written, ``wgrad_accumulate_seconds``); the flat dispatcher permutes twice
  each way (``permute_passes``); routed experts need no TP collective
  (``tp_collectives_per_layer``); ``moe_host_overhead_us`` of host time per
  MoE forward pass (the dropless dispatch's device-to-host sync).
* **Low-precision casts** (``ffn_cast_elements``): under FP8 / FP4 the routed
  experts quantise every routed copy (``k`` per token) of their GEMM inputs
  forward and output gradients backward, not one token's worth.
* **Clamped GLU and expert biases** (``glu_clamp``, ``expert_bias``; GPT-OSS):
  Megatron-Core clamps the GLU input and adds the FC2 bias with eager PyTorch
  ops on every routed copy, outside the fused kernels: their bytes
  (``eager_expert_bytes``), kernels (``eager_expert_kernels``, at the host's
  pace in a dropless layer) and, without recompute, the clamped copy stored
  (``clamp_activation_bytes``).
* **Fine-grained recompute** (``moe_recompute``): the expert activation
  (``moe_act``) or the whole MoE layer (``moe``: its forward GEMMs, traffic
  and two more all-to-alls) runs again; the activations it drops are not
  stored (``recomputed_activation_bytes``).
* **Activation offload** (``moe_offload``): the routed experts' FC1
  output, and at level 2 their FC1 input, wait in host memory between the
  forward and backward passes, one MoE layer's on the GPU in transit
  (``offloaded_activation_bytes``).
* **Overlap**: ``moe_overlap`` of the all-to-all is hidden under compute (1F1B
  all-to-all overlap, DualPipe), never more than the compute there is.  Under
  Combined 1F1B (``ep_overlap``) each of a layer pair's four all-to-alls hides
  behind its partner module only (``paired_hidden_seconds``: the backward
  combine behind the attention forward, the forward dispatch behind the MLP
  input gradient, the backward dispatch behind the MLP weight gradient and
  forward, the forward combine behind the attention backward); the hidden
  all-to-all holds ``A2A_COMM_SMS`` of the SMs, and the compute beside it loses
  that share (``sm_contention_seconds``).
* **Host pace** (``host_paced_seconds``): a dropless MoE layer syncs its token
  counts to the host every forward pass, so the host cannot run ahead and each
  kernel of the layer costs ``host_kernel_us`` (derived in the GPU presets
  from a published measurement) in place of ``kernel_overhead_us``, those of
  per-layer CUDA graphs too (the sync stays; none under a full-iteration graph);
  an expert GEMM hides the host's issue time under its own GPU time
  (``expert_gemm_kernel_seconds``), so only ``max(0, host - launch - GEMM)``
  of it shows.  The layers without experts that follow an MoE layer up to
  the next sync (a hybrid's Mamba-2 and attention layers) run at the same
  pace (``paced_layer_share``).
* **Expert tensor parallelism** ``etp``: an all-gather and a reduce-scatter of
  the routed tokens in the ETP group, forward and backward.
* **Memory**: expert weights, gradients and optimizer state sharded by
  ``etp e`` (parallel folding: the stage's ``t d`` GPUs are also ``etp x e x
  edp``); ZeRO-1 shards expert optimizer state over ``edp = t d / (etp e)``;
  expert gradients are reduced over ``edp``.  Activations of an MoE layer:
  the FFN width ``(k + S) f_e`` in place of ``f``, plus the dispatched
  copies ``2 k`` bytes per ``T h`` (``k`` under FP8,
  ``dispatch_activation_bytes``).  MLA's stored tensors and latents
  (``attention_activation_bytes``, ``latent_activation_bytes``), with the
  up-projections' recompute (``mla_recompute``).
"""

from __future__ import annotations

import numpy as np

from jaxmodel.collectives import GEMM_TILE_M, all_gather, all_to_all, all_to_all_two_level
from jaxmodel.deferred import jax, jnp
from jaxmodel.models.refined.rates import low_precision_gemms
from jaxmodel.numerics import positive_part

# Bytes per value moved by the dispatch and combine (bf16 activations).
DISPATCH_BYTES = 2.0
# Bytes of one bf16 element.
BF16_BYTES = 2.0
# Memory-bound bytes of token permutation per routed copy and hidden element:
# permute reads and writes bf16 (4), un-permute with the weighted sum the same.
PERMUTE_BYTES = 8.0
# Activation bytes stored per routed copy and hidden element in bf16: the
# permuted input of the expert FC1 (2).  The expert output is not kept for the
# combine: Megatron-Core weights each copy by its routing probability inside
# the expert (experts.py, activation_func_with_probs), so the combine is a
# plain sum that needs no saved input.
DISPATCH_ACTIVATION_BYTES = 2.0
# The share of the expert all-to-all that the combined 1F1B schedule hides
# (Megatron-Core --overlap-moe-expert-parallel-comm): one micro-batch's
# dispatch/combine overlaps another's compute, but the communication kernels
# take about a fifth of the SMs and the first and last all-to-all of each pair
# are not covered (jaxmodel.models.validation_moe's module doc).
A2A_OVERLAP = 0.5
# SMs the dispatch and combine kernels hold while they run beside another
# micro-batch's compute (Combined 1F1B, ep_overlap): Megatron-Core's
# TransformerConfig.moe_deepep_num_sms default 20 (DeepEP's Buffer.num_sms
# default 20; the DeepSeek-V3 report, sec. 3.2.2: "only 20 SMs" saturate IB and
# NVLink); moe_hybridep_num_sms defaults to 24.  NCCL's all-to-all is taken
# alike (an assumption: its channel count is not published per GPU).
A2A_COMM_SMS = 20.0


# The inputs that a dense model (num_experts = 1) does not use.
DENSE_UNUSED = ("experts_per_token", "moe_ffn_hidden_dim", "shared_experts", "dense_layers",
                "moe_latent_size",
                "moe_layer_interval", "q_lora_rank", "kv_lora_rank", "qk_rope_dim",
                "expert_tensor_parallel", "moe_dispatcher", "max_nodes_per_token",
                "moe_overlap", "moe_imbalance", "capacity_factor", "moe_recompute",
                "moe_host_overhead_us", "ep_overlap", "host_kernel_us", "router_fusion",
                "glu_clamp", "expert_bias", "moe_offload", "deepep_link_efficiency",
                "hybridep_link_efficiency")


def is_plain(x):
    """True where the configuration is a dense model with standard attention
    (``head_dim`` included: the refined model's own expressions handle it).

    Then the refined model uses its original expressions unchanged, so dense
    results are exactly those of the model before MoE.
    """
    return (x.num_experts < 1.5) & (x.attention < 0.5)


def head_dim(x):
    """Per-head dimension of queries, keys and values: ``head_dim`` or ``h / a``."""
    return jnp.where(x.head_dim > 0.5, x.head_dim, x.hidden_dim / x.num_heads)


def score_head_width(x):
    """The mean width of a head's two score products: ``d_h`` for GQA/MHA, ``(d_h
    + d_r + d_h) / 2`` for MLA (``QK^T`` over ``d_h + d_r``, ``PV`` over ``d_h``)."""
    dh = head_dim(x)
    return jnp.where(x.attention > 0.5, dh + 0.5 * x.qk_rope_dim, dh)


def attention_params(x):
    """Weight parameters of one attention block (GQA/MHA or MLA; module doc)."""
    h, a, dh = x.hidden_dim, x.num_heads, head_dim(x)
    gqa = 2.0 * h * a * dh + 2.0 * h * x.num_kv_heads * dh
    rq, rkv, dr = x.q_lora_rank, x.kv_lora_rank, x.qk_rope_dim
    q = jnp.where(rq > 0.5, h * rq + rq * a * (dh + dr), h * a * (dh + dr))
    kv = h * (rkv + dr) + rkv * a * 2.0 * dh
    mla = q + kv + a * dh * h
    return jnp.where(x.attention > 0.5, mla, gqa)


def attention_core_flops(x):
    """Forward FLOPs of the score core per token and per unit of sequence length.

    ``4 a d_h`` for GQA/MHA (``4 h`` when ``d_h = h / a``: the refined model's
    ``4 b s^2 h``), ``2 a (d_h + d_r) + 2 a d_h`` for MLA.  No causal halving,
    as the refined model counts it.
    """
    a, dh = x.num_heads, head_dim(x)
    mla = 2.0 * a * (dh + x.qk_rope_dim) + 2.0 * a * dh
    return jnp.where(x.attention > 0.5, mla, 4.0 * a * dh)


def moe_layers(x):
    """Number of MoE layers: every ``moe_layer_interval``-th after ``dense_layers``."""
    rest = x.num_layers - x.dense_layers
    count = jnp.floor((rest - 1.0) / x.moe_layer_interval) + 1.0
    return jnp.where((x.num_experts > 1.5) & (rest > 0.5), count, jnp.zeros_like(rest))


def moe_fraction(x):
    """Share of the layers that are MoE layers (0 for a dense model)."""
    return moe_layers(x) / x.num_layers


def dense_ffn_params(x):
    """One dense feed-forward block: ``w h f``."""
    return x.mlp_weight_matrices * x.hidden_dim * x.ffn_hidden_dim


def expert_params(x):
    """One shared expert (or a routed one without a latent space): ``w h f_e``."""
    return x.mlp_weight_matrices * x.hidden_dim * x.moe_ffn_hidden_dim


def has_latent(x):
    """True where the routed experts work in a latent space (``moe_latent_size`` > 0)."""
    return x.moe_latent_size > 0.5


def routed_width(x):
    """Width of a routed token copy: ``l`` (``moe_latent_size``) under LatentMoE, else ``h``."""
    return jnp.where(has_latent(x), x.moe_latent_size, x.hidden_dim)


def routed_expert_params(x):
    """One routed expert: ``w h f_e``, or ``w l f_e`` in a latent space."""
    return x.mlp_weight_matrices * routed_width(x) * x.moe_ffn_hidden_dim


def latent_projection_params(x):
    """LatentMoE's two projections ``h -> l`` and ``l -> h``: ``2 h l`` (0 without)."""
    return jnp.where(has_latent(x), 2.0 * x.hidden_dim * x.moe_latent_size, 0.0)


def router_params(x):
    """The router's gate: ``h E``."""
    return x.hidden_dim * x.num_experts


def _per_layer(x, moe_value, dense_value):
    """Average over the ``L`` layers of a per-layer quantity, MoE vs dense layers."""
    f = moe_fraction(x)
    return f * moe_value + (1.0 - f) * dense_value


def layer_active_params(x):
    """Weight parameters one token meets in the average layer (router included)."""
    return attention_params(x) + _per_layer(x, moe_block_active_params(x), dense_ffn_params(x))


def moe_block_active_params(x):
    """Weights one token meets in an MoE layer's MoE block: the router and the
    ``k + S`` experts."""
    plain_moe = router_params(x) + (x.experts_per_token + x.shared_experts) * expert_params(x)
    latent = (router_params(x) + x.experts_per_token * routed_expert_params(x)
              + x.shared_experts * expert_params(x) + latent_projection_params(x))
    return jnp.where(has_latent(x), latent, plain_moe)


def moe_block_resident_params(x):
    """Weights of an MoE block every tensor-parallel group holds: the router,
    the shared experts and LatentMoE's projections."""
    return router_params(x) + x.shared_experts * expert_params(x) + latent_projection_params(x)


def layer_resident_params(x):
    """Weights of the average layer held by every tensor-parallel group
    (everything but the routed experts): attention, dense FFN or router and
    shared experts."""
    return attention_params(x) + _per_layer(x, moe_block_resident_params(x),
                                            dense_ffn_params(x))


def layer_expert_params(x):
    """Routed-expert weights of the average layer (all ``E``), sharded by ``etp e``."""
    return _per_layer(x, x.num_experts * routed_expert_params(x), 0.0)


def embedding_params(x):
    """Input and output embeddings: ``(2 - tied) V h``."""
    return (2.0 - x.tied_embeddings) * x.vocab_size * x.hidden_dim


def total_params(x):
    """Every parameter: ``L`` layers of every expert, plus the embeddings."""
    return x.num_layers * (layer_resident_params(x) + layer_expert_params(x)) + embedding_params(x)


def active_params(x):
    """Parameters one token uses: ``L`` average active layers plus the embeddings."""
    return x.num_layers * layer_active_params(x) + embedding_params(x)


def ffn_width(x):
    """Feed-forward width of the average layer for activations and kernels:
    ``(k + S) f_e`` in an MoE layer, ``f`` in a dense one."""
    moe = (x.experts_per_token + x.shared_experts) * x.moe_ffn_hidden_dim
    return _per_layer(x, moe, x.ffn_hidden_dim)


def load_factor(x):
    """Busiest expert's tokens over the mean: ``moe_imbalance``, capped at
    ``capacity_factor`` when tokens over capacity are dropped (> 0)."""
    capped = jnp.minimum(x.moe_imbalance, x.capacity_factor)
    return jnp.where(x.capacity_factor > 0.0, capped, x.moe_imbalance)


def ep_ranks_per_node(x, gpus_per_node):
    """EP peers in one node: the EP group has stride ``etp`` (ranks ordered
    expert-tensor, expert, expert-data), so ``G / etp`` of it share a node."""
    return jnp.clip(gpus_per_node / x.expert_tensor_parallel, 1.0, x.expert_parallel)


def dispatch_bytes(tokens, x, gpus_per_node):
    """Bytes one rank sends over NVLink and over the network in one dispatch.

    Args:
      tokens: tokens on the rank entering the MoE layer (``s b / t``).
      x: the inputs (``experts_per_token``, ``expert_parallel``,
        ``hidden_dim``, ``moe_dispatcher``, ``max_nodes_per_token``, the load).
      gpus_per_node: GPUs sharing NVLink.

    Returns:
      ``(intra_bytes, inter_bytes)``; the combine moves the same.  The busiest
      rank's share (``load_factor``) is included.
    """
    e, k = x.expert_parallel, x.experts_per_token
    g = ep_ranks_per_node(x, gpus_per_node)
    copy = tokens * routed_width(x) * DISPATCH_BYTES * load_factor(x)
    flat_intra = copy * k * (g - 1.0) / e
    flat_inter = copy * k * (e - g) / e
    nodes = e / g
    hit = nodes * (1.0 - (1.0 - 1.0 / nodes) ** k)
    limit = jnp.where(x.max_nodes_per_token > 0.5, x.max_nodes_per_token, nodes)
    distinct = jnp.minimum(hit, limit)
    deep_inter = copy * distinct * (nodes - 1.0) / nodes
    deep_intra = copy * ranks_reached(x, nodes, limit, g) * (g - 1.0) / g
    deep = x.moe_dispatcher > 0.5
    return jnp.where(deep, deep_intra, flat_intra), jnp.where(deep, deep_inter, flat_inter)


def ranks_reached(x, nodes, node_limit, ranks_per_node):
    """Distinct EP ranks holding a token's ``k`` experts, uniform routing over the
    ``min(node_limit, nodes) g`` ranks it may reach: ``R (1 - (1 - 1/R)^k)``.  The
    hierarchical dispatchers send a token once to each such rank (DeepEP's
    ``is_token_in_rank``; HybridEP's dispatch, then a local permute to the
    rank's experts) and the combine returns one sum per rank."""
    reach = jnp.minimum(node_limit, nodes) * ranks_per_node
    return reach * (1.0 - (1.0 - 1.0 / reach) ** x.experts_per_token)


def expert_gemm_tokens(tokens, x):
    """Rows of one local expert's GEMM: ``k T e / E`` tokens (times the load)."""
    return tokens * x.experts_per_token * x.expert_parallel / x.num_experts * load_factor(x)


def a2a_per_moe_layer(full_recompute):
    """All-to-alls per MoE layer and micro-batch: dispatch and combine forward,
    their gradients backward, and the forward again when the MoE layer is
    recomputed (full recompute, or ``moe_recompute`` 2)."""
    return 4.0 + 2.0 * full_recompute


def folded_size(x, data_parallel):
    """GPUs of one pipeline stage, ``t c d``, that the experts fold onto."""
    return x.tensor_parallel * x.context_parallel * data_parallel


def expert_data_parallel(x, data_parallel):
    """``edp = t c d / (etp e)``: replicas of each expert shard (>= 1 when valid)."""
    return folded_size(x, data_parallel) / (x.expert_tensor_parallel * x.expert_parallel)


def dispatch_seconds(tokens, x, gpus_per_node, net):
    """One dispatch (or combine) all-to-all on the busiest rank, seconds.

    Flat (``moe_dispatcher`` 0): ``jaxmodel.collectives.all_to_all`` of the
    ``k T h`` copies; hierarchical (1): the node- and rank-deduplicated bytes
    of ``dispatch_bytes`` through ``all_to_all_two_level``, NVLink at the
    dispatcher's measured fraction (``deepep_link_efficiency``,
    ``hybridep_link_efficiency``).
    """
    e = x.expert_parallel
    g = ep_ranks_per_node(x, gpus_per_node)
    buffer = tokens * routed_width(x) * DISPATCH_BYTES * load_factor(x) * x.experts_per_token
    flat = all_to_all(buffer, e, g, net)
    intra, inter = dispatch_bytes(tokens, x, gpus_per_node)
    fraction = jnp.where(x.moe_dispatcher > 1.5, x.hybridep_link_efficiency,
                         x.deepep_link_efficiency)
    kernels = net._replace(intra_bw=x.link_bandwidth_gb_s * 1e9 * fraction)
    deep = all_to_all_two_level(intra, inter, e, g, kernels)
    return jnp.where(x.moe_dispatcher > 0.5, deep, flat)


# Expert tensor parallelism searched up to one node's worth of GPUs.
MAX_SEARCHED_ETP = 8


def _divisors(n: int) -> np.ndarray:
    return np.array([q for q in range(1, n + 1) if n % q == 0], np.int64)


def expert_layout_axes(values, also=frozenset()) -> dict[str, np.ndarray]:
    """The expert layout a search ranges over (host side, ``LayoutSpace.extra``).

    ``expert_parallel``: every divisor of ``num_experts`` up to ``num_gpus``
    (just 1 for a dense model); ``expert_tensor_parallel`` when ``also`` names
    it: the divisors of the expert width up to ``MAX_SEARCHED_ETP``.  Which of
    them fold onto a given ``t d`` is the model's validity rule.
    """
    experts, gpus = int(values["num_experts"]), int(values["num_gpus"])
    eps = _divisors(experts)
    axes = {"expert_parallel": eps[eps <= gpus]}
    if "expert_tensor_parallel" in also and experts > 1:
        etps = _divisors(int(values["moe_ffn_hidden_dim"]))
        axes["expert_tensor_parallel"] = etps[etps <= MAX_SEARCHED_ETP]
    return axes


def permute_passes(x):
    """Token permutations per direction: the flat all-to-all dispatcher permutes
    globally before the all-to-all (one copy per routed expert) and again
    locally after it, to group the received chunks by local expert (Megatron-
    Core's ``sort_chunks_by_idxs``); DeepEP fuses the global one into its
    dispatch kernel (Megatron-LM docs/discussions/deepseek-v3-gb200-
    optimization, sec. 2.1.1).  Without expert parallelism there is one."""
    flat_ep = (x.moe_dispatcher < 0.5) & (x.expert_parallel > 1.5)
    return 1.0 + flat_ep.astype(x.expert_parallel.dtype)


def permute_bytes(x, tokens):
    """Memory-bound bytes of permuting ``tokens`` (one rank's, ``s b / (c t)``)
    to their experts and back, forward pass, the average layer
    (``permute_passes`` of them each way)."""
    return (PERMUTE_BYTES * permute_passes(x) * x.experts_per_token * load_factor(x)
            * moe_fraction(x) * tokens * routed_width(x))


def layer_comm_seconds(x, tokens, gpus_per_node, net, full_recompute):
    """Expert communication of one MoE layer and micro-batch on the busiest rank:
    the dispatch and combine all-to-alls (``a2a_per_moe_layer``) and, with
    expert tensor parallelism, an all-gather and a reduce-scatter of the routed
    tokens in the ETP group, forward and backward."""
    etp = x.expert_tensor_parallel
    routed = DISPATCH_BYTES * tokens * routed_width(x) * x.experts_per_token * load_factor(x)
    etp_s = all_gather(routed * etp, etp, jnp.minimum(etp, gpus_per_node), net)
    return a2a_per_moe_layer(full_recompute) * (
        dispatch_seconds(tokens, x, gpus_per_node, net) + etp_s)


# Kernels an MoE layer launches per micro-batch, forward and backward, beyond
# the dense layer's (``layer_extra_kernels``), counted from Megatron-Core's
# source with Transformer Engine's fused permutation (``moe_permute_fusion``,
# which every MoE recipe of the validation sets turns on: Megatron-LM's
# examples/moe_recipes YAMLs, the Megatron-MoE-ModelZoo configs; TE >= 2.1).
#
# Router (TopKRouter.forward: gating, routing, the auxiliary losses, the expert
# bias update), forward and backward together: 72 kernels unfused, 31 with
# ``--moe-router-fusion`` (TE's fused_topk_with_score_function,
# fused_compute_score_for_moe_aux_loss and fused_moe_aux_loss, TE PR 1883), as
# Megatron-LM measured for DeepSeek-V3 (docs/discussions/deepseek-v3-gb200-
# optimization, sec. 2.1.4, "reducing the total number of kernels in the router
# part from 72 to 31"; the preset's host_kernel_us is derived from those 41).
# That they are forward and backward: the unfused source counts 74 (router.py
# router_gating_linear: 2 casts + GEMM forward, 2 GEMMs + 2 casts backward;
# moe_utils.py topk_routing_with_score_function with sigmoid, expert bias and
# group-limited top-k: 23 forward, 12 backward; compute_routing_scores_for_aux_loss:
# 9 and 7; TopKRouter._apply_seq_aux_loss with switch_load_balancing_loss_func:
# 6 and 5; MoEAuxLossAutoScaler.backward 2; save_to_aux_losses_tracker 1;
# _apply_expert_bias 2).  The same reading of the fused path gives 21 (11
# forward, 10 backward); the measured 31 is kept (what the reading misses, the
# fused ops' allocations and fills among them, is not itemised).  Other
# score functions and auxiliary losses change the unfused count (Qwen3's
# softmax without expert bias, groups or scaling: about 15 fewer forward, 9
# fewer backward) and the fused one by a few (no bias update, aux_loss for
# seq_aux_loss: 4 fewer); the model has no input for either, so the measured
# pair stands for every router.
ROUTER_KERNELS_FUSED = 31.0
ROUTER_KERNELS_UNFUSED = 72.0
# Flat all-to-all dispatcher (MoEAlltoAllTokenDispatcher, token_dispatcher.py),
# expert parallelism e > 1, forward:
#   preprocess: routing_map.sum (the tokens per expert), input_splits sum, the
#     all-gather of the counts (gather_from_sequence_parallel_region), the local
#     experts' slice .contiguous(), the sums per rank, per TP rank and per local
#     expert: 7; the device-to-host copies (_maybe_dtoh_and_synchronize, on a
#     side stream) of the tokens per local expert (the grouped GEMM's split
#     sizes), input_splits, output_splits and output_splits_tp: 4 (the chunk
#     sizes stay on the device under the fused permutation);
#   dispatch_preprocess: permute (TE moe_permute_with_probs: make_row_id_map's
#     3 Triton passes and permute_with_mask_map): 4;
#   token_dispatch: the all-to-all of the tokens and of their probabilities: 2;
#   dispatch_postprocess, combine_preprocess (num_local_experts > 1):
#     sort_chunks_by_idxs (TE moe_sort_chunks_by_index: make_chunk_sort_map
#     and sort_chunks_by_map) each way: 2 + 2;
#   token_combine: the all-to-all: 1; combine_postprocess: unpermute (TE
#     unpermute_with_mask_map): 1;
# backward: one kernel each for permute, unpermute and the two chunk sorts,
# and the three all-to-alls again: 7.  Forward 23 + backward 7 = 30; 24 with
# one local expert (no chunk sorts); without expert parallelism the counts'
# sum and its copy to the host, permute and unpermute: 2 + 4 + 1 forward, 2
# backward = 9.
FLAT_PREPROCESS_KERNELS = 11.0
FLAT_DISPATCH_KERNELS = 30.0
CHUNK_SORT_KERNELS = 6.0
LOCAL_DISPATCH_KERNELS = 9.0
# DeepEP (MoEFlexTokenDispatcher, _DeepepManager; fused_a2a.py): forward the
# top-k of the probabilities back to indices (setup_metadata) 1, DeepEP's
# get_dispatch_layout, notify_dispatch and dispatch 3, the received counts to
# the device (torch.tensor of the host list) 1, fused_indices_to_multihot 1,
# permute 4, unpermute 1, cached_notify_combine and combine 2: 13; backward the
# top-k's gradient (zeros and scatter) 2, dispatch's (a combine) 2, the
# converter's 1, permute's 1, unpermute's 1, combine's (a cached dispatch) 2:
# 9.  22 in all; HybridEP is taken alike.
DEEPEP_PREPROCESS_KERNELS = 2.0
DEEPEP_DISPATCH_KERNELS = 22.0
# The routed experts' activation with the routing probabilities (experts.py,
# weighted_bias_swiglu_impl): one fused kernel forward, the input gradient and
# the probabilities' gradient (a row sum) backward: 3.  The dense FFN it stands
# in for has 6 GEMMs and an activation forward and backward (8 of
# refined.layer's _LAYER_KERNELS); with shared experts those stay (the shared
# expert's) and the layer adds its output to the routed one (1).
ROUTED_ACT_KERNELS = 3.0
DENSE_FFN_KERNELS = 8.0
SHARED_ADD_KERNELS = 1.0
# GEMM kernels per local expert and micro-batch: TE GroupedLinear launches one
# cuBLAS GEMM per expert (multi-stream backend) for FC1 and FC2, forward,
# input gradient and weight gradient.
EXPERT_GEMM_KERNELS = 6.0
# Quantisation kernels per local expert and micro-batch beyond those GEMMs
# (``expert_quantize_kernels``), by ``precision``.  Transformer Engine 2.x
# GroupedLinear (pytorch/module/grouped_linear.py, _GroupedLinear) quantises
# one tensor per expert four times a micro-batch: forward its input
# (tex.split_quantize(inp, m_splits, input_quantizers), rowwise and, as the
# weights need a gradient, columnwise) of FC1 and FC2, backward its output
# gradient (split_quantize of grad_output, no bias: Qwen3, DeepSeek) of FC1
# and FC2.  split_quantize (pytorch/csrc/extensions/cast.cpp) hands the
# pieces to multi_tensor_quantize_impl, whose one fused kernel for all
# experts (nvte_multi_cast_transpose) serves only delayed-scaling Float8
# quantizers; every other quantizer runs quantizer->quantize per tensor:
# * per-tensor current scaling (Float8CurrentScalingQuantizer::quantize_impl,
#   pytorch/csrc/quantizer.cpp): nvte_compute_amax (launch_amax_kernel zeroes
#   the amax first, a cudaMemsetAsync or zero_amax_kernel, then the amax
#   kernel: 2), nvte_compute_scale_from_amax (1), nvte_quantize_v2 (the cast
#   and transpose in one kernel: 1) = 4 per tensor, 16 per expert (no amax
#   all-reduce: with_amax_reduction only for sequence-parallel inputs);
# * MXFP8 and 1x128 / 128x128 blockwise FP8 (MXFP8Quantizer,
#   Float8BlockQuantizer): one nvte_quantize_v2 kernel writes both the rowwise
#   and columnwise copies, 1 per tensor, 4 per expert (the outputs bulk
#   allocated in one buffer; the grouped GEMM swizzles the MXFP8 scales of all
#   experts at once, multi_tensor_swizzle_scaling_factors: per call, not per
#   expert);
# * BF16: torch.split views, no kernel; NVFP4: split_quantize_nvfp4_impl's
#   grouped amax and Hadamard-cast kernels, per call (0 per expert).
# ``precision`` 1 is taken as current scaling, the recipe Megatron-Bridge's
# H100 FP8 perf configs run (fp8_cs); delayed scaling would add none per
# expert.  Not counted: the weights' casts (get_weight_workspace with
# Megatron's is_first_microbatch: once per step, cached for the other
# micro-batches; none with fp8_param_gather), the weight-gradient
# placeholders (torch.empty, no kernel; zeroed only for shared embeddings),
# bias gradients (no expert bias, or fused: bgrad_quantize), and the
# per-expert Python work and multi-stream cuBLAS stream waits that launch no
# kernel (host time the model does not itemise).
EXPERT_QUANTIZED_TENSORS = 4.0
CURRENT_SCALING_KERNELS = 4.0
BLOCK_SCALING_KERNELS = 1.0


def expert_quantize_kernels(x):
    """Quantisation kernels per local expert and micro-batch, forward and
    backward: ``EXPERT_QUANTIZED_TENSORS`` tensors, ``CURRENT_SCALING_KERNELS``
    each at ``precision`` 1 (per-tensor current scaling), ``BLOCK_SCALING_KERNELS``
    at 2 (MXFP8 / blockwise FP8), none at 0 (BF16) or 3 (NVFP4's grouped kernels)."""
    per_tensor = jnp.where(x.precision < 0.5, 0.0,
                           jnp.where(x.precision < 1.5, CURRENT_SCALING_KERNELS,
                                     jnp.where(x.precision < 2.5, BLOCK_SCALING_KERNELS, 0.0)))
    return EXPERT_QUANTIZED_TENSORS * per_tensor


def router_kernels(x):
    """The router's kernels per MoE layer and micro-batch, forward and backward:
    ``ROUTER_KERNELS_FUSED`` with ``router_fusion``, else ``ROUTER_KERNELS_UNFUSED``."""
    return jnp.where(x.router_fusion > 0.5, ROUTER_KERNELS_FUSED, ROUTER_KERNELS_UNFUSED)


def _flat_ep(x):
    return (x.moe_dispatcher < 0.5) & (x.expert_parallel > 1.5)


def preprocess_kernels(x):
    """The dispatcher's preprocessing kernels (the token counts and their copies
    to the host; DeepEP: the indices and the layout) per MoE layer and
    micro-batch: the ``moe_preprocess`` scope of a per-layer CUDA graph."""
    deepep = (x.moe_dispatcher > 0.5) & (x.expert_parallel > 1.5)
    return jnp.where(_flat_ep(x), FLAT_PREPROCESS_KERNELS,
                     jnp.where(deepep, DEEPEP_PREPROCESS_KERNELS, 2.0))


def dispatch_kernels(x):
    """The dispatcher's kernels per MoE layer and micro-batch, forward and
    backward: counts, permutation, dispatch, combine (``FLAT_DISPATCH_KERNELS``,
    less ``CHUNK_SORT_KERNELS`` with one local expert; ``DEEPEP_DISPATCH_KERNELS``;
    ``LOCAL_DISPATCH_KERNELS`` without expert parallelism)."""
    local = x.num_experts / x.expert_parallel
    flat = FLAT_DISPATCH_KERNELS - jnp.where(local > 1.5, 0.0, CHUNK_SORT_KERNELS)
    return jnp.where(x.expert_parallel < 1.5, LOCAL_DISPATCH_KERNELS,
                     jnp.where(x.moe_dispatcher > 0.5, DEEPEP_DISPATCH_KERNELS, flat))


def layer_extra_kernels(x):
    """Kernel launches the average layer adds to the dense layer's, per
    micro-batch forward and backward, in MoE layers: the router's
    (``router_kernels``), the dispatcher's (``dispatch_kernels``), the weighted
    activation (``ROUTED_ACT_KERNELS``) and ``EXPERT_GEMM_KERNELS`` plus the
    low-precision casts' ``expert_quantize_kernels`` per local expert
    (``E / e``), less the dense FFN's ``DENSE_FFN_KERNELS`` (plus
    ``SHARED_ADD_KERNELS`` where shared experts keep them); ``eager_expert_kernels``
    adds a clamped GLU's and expert biases'."""
    local = x.num_experts / x.expert_parallel
    ffn = jnp.where(x.shared_experts > 0.5, SHARED_ADD_KERNELS, -DENSE_FFN_KERNELS)
    return moe_fraction(x) * (router_kernels(x) + dispatch_kernels(x) + ROUTED_ACT_KERNELS
                              + ffn + (EXPERT_GEMM_KERNELS + expert_quantize_kernels(x)) * local)


def graph_scope_kernels(x):
    """The MoE kernels a per-layer CUDA graph of the ``moe_router`` and
    ``moe_preprocess`` scopes captures, the average layer: the router's and
    the dispatcher's preprocessing (``preprocess_kernels``)."""
    return moe_fraction(x) * (router_kernels(x) + preprocess_kernels(x))


# GPT-OSS's routed experts (openai/gpt-oss-120b config.json "swiglu_limit": 7.0;
# its MLPBlock's gate_up_proj and down_proj carry biases) as Megatron-Core
# trains them (Megatron-Bridge's GPTOSSBridge.provider_bridge:
# activation_func quick_gelu, activation_func_clamp_value 7.0,
# glu_linear_offset 1.0, add_bias_linear True, bias_activation_fusion True;
# moe_router_dtype unset, so the router's probabilities are bf16:
# Transformer Engine's fused top-k returns them in the logits' dtype, and
# router_gating_linear gives logits in the input's).  Two parts of it run as
# eager PyTorch ops on every routed copy, outside the fused kernels the
# refined model counts (bf16, 2 bytes an element; each kernel reads its
# inputs and writes its output once):
#
# * The clamp (glu_clamp).  megatron/core/fusions/fused_bias_geglu.py,
#   weighted_bias_quick_geglu_impl: before the compiled weighted Quick-GEGLU
#   kernel, x_glu, x_linear = input.chunk(2, -1) (views), then
#   torch.cat((x_glu.clamp(max=7), x_linear.clamp(-7, 7)), -1).  Per routed
#   copy and element of f_e (each half is f_e wide), forward: two clamps
#   (read 2, write 2: 4 each) and the cat (read and write both halves: 8) =
#   16 bytes, 3 kernels.  Backward, PyTorch's autograd
#   (torch/csrc/autograd/FunctionsManual.cpp, clamp_backward): max only,
#   where(self <= max, grad, zero): compare (read 2, write a 1-byte mask: 3),
#   where (mask 1, grad 2, write 2: 5) = 8; min and max,
#   where((self >= min).logical_and_(self <= max), grad, zero): 3 + 3 + 3
#   (logical_and_ reads two masks, writes one) + 5 = 14; each with a
#   scalar_tensor fill (no bytes); the cat's gradient is views, the chunk's
#   (split) a cat of the two gradients: 8.  30 bytes, 9 kernels.  It sits
#   inside the moe_act checkpoint (experts.py, TEGroupedMLP.forward:
#   activation_checkpoint.checkpoint(bias_act_func, ...)), so moe_act
#   recompute runs the forward again.  Without recompute the fused function
#   saves the clamped copy besides the FC1 output the clamps keep: 2 x 2 f_e
#   bytes more stored per routed copy.
# * The FC2 bias (expert_bias).  TEGroupedMLP builds linear_fc1 with its bias
#   in the grouped GEMM (skip_bias_add False: the cuBLAS epilogue adds it and
#   the weight-gradient GEMM's epilogue reduces its gradient, TE
#   GroupedLinear: no traffic counted) but linear_fc2 with skip_bias_add True,
#   and adds that bias after the GEMM, weighted by each copy's routing
#   probability (TEGroupedMLP._apply_bias): torch.cat([t + b * p for t, b, p
#   in zip(split(output, tokens_per_expert), biases, split(probs, ...))]).
#   Per routed copy and element of d (the FC2 output width), forward: b * p
#   (write 2), t + b p (read 4, write 2) per local expert, one cat (4) = 12
#   bytes; 2 kernels per local expert and the cat.  Backward: the cat's and
#   the add's gradients are views; b * p's: grad * p and its sum over the
#   rows (4 + 2), grad * b and its sum over the width (4 + 2); the split's
#   gradient a cat (4) = 16 bytes; 4 kernels per local expert and the cats
#   of the two splits' gradients, and the DDP hook adding each expert's FC1
#   and FC2 bias gradient into the gradient buffer (main_grad.add_: 2 per
#   local expert, bytes negligible).
GLU_CLAMP_BYTES = (16.0, 30.0)
GLU_CLAMP_KERNELS = (3.0, 9.0)
EXPERT_BIAS_BYTES = (12.0, 16.0)
EXPERT_BIAS_KERNELS_PER_EXPERT = (2.0, 6.0)
EXPERT_BIAS_KERNELS = (1.0, 2.0)


def eager_expert_kernels(x):
    """Eager kernels the routed experts add to the average layer per
    micro-batch, forward and backward (and the clamp's forward again under
    ``moe_act`` recompute; like ``layer_extra_kernels``, a third again where
    the whole MoE layer is recomputed): a clamped GLU's ``GLU_CLAMP_KERNELS``
    (``glu_clamp``), expert biases' ``EXPERT_BIAS_KERNELS_PER_EXPERT`` per
    local expert and ``EXPERT_BIAS_KERNELS`` (``expert_bias``), in MoE
    layers; 0 without either."""
    act, _ = recompute_flags(x)
    local = x.num_experts / x.expert_parallel
    clamp = sum(GLU_CLAMP_KERNELS) + act * GLU_CLAMP_KERNELS[0]
    bias = sum(EXPERT_BIAS_KERNELS_PER_EXPERT) * local + sum(EXPERT_BIAS_KERNELS)
    return moe_fraction(x) * (x.glu_clamp * clamp + x.expert_bias * bias)


def eager_expert_bytes(x, rank_tokens):
    """Memory-bound bytes of the routed experts' eager ops in the average
    layer, per micro-batch: ``(forward, backward, clamp forward, bias
    forward)`` (the last two: what ``moe_act`` and ``moe`` recompute run
    again).

    Per routed copy (``k`` per token of the rank, ``rank_tokens`` = ``s b /
    (c t)``, times the load; with expert tensor parallelism ``etp`` times the
    rows, ``1 / etp`` of ``f_e``): ``GLU_CLAMP_BYTES`` per element of ``f_e``
    with ``glu_clamp``, ``EXPERT_BIAS_BYTES`` per element of the FC2 output
    (``h``, or ``l`` under LatentMoE) with ``expert_bias`` (Transformer
    Engine's GroupedLinear refuses a bias under tensor parallelism, so biased
    experts run with ``etp`` 1).
    """
    copies = x.experts_per_token * load_factor(x) * rank_tokens * moe_fraction(x)
    clamp = x.glu_clamp * copies * x.moe_ffn_hidden_dim
    bias = x.expert_bias * copies * routed_width(x)
    clamp_fwd, bias_fwd = GLU_CLAMP_BYTES[0] * clamp, EXPERT_BIAS_BYTES[0] * bias
    return (clamp_fwd + bias_fwd, GLU_CLAMP_BYTES[1] * clamp + EXPERT_BIAS_BYTES[1] * bias,
            clamp_fwd, bias_fwd)


def clamp_activation_bytes(x):
    """Activation bytes per ``s b h`` (before the split by ``t``) a clamped GLU
    stores beside the FC1 output, the average layer: the clamped copy the
    fused activation saves, ``2 x 2 f_e`` per routed copy (``4 k f_e / h``
    times the load), unless ``moe_act`` or ``moe`` recompute checkpoints it
    away (full recompute stores only the layer inputs: the memory module adds
    none of the per-layer tensors there); 0 without ``glu_clamp``."""
    act, layer = recompute_flags(x)
    kept = (1.0 - act) * (1.0 - layer)
    return (x.glu_clamp * kept * moe_fraction(x) * 2.0 * BF16_BYTES * x.experts_per_token
            * load_factor(x) * x.moe_ffn_hidden_dim / x.hidden_dim)


def recompute_flags(x):
    """``(act, layer)``, 0/1 each: the MoE layers' fine-grained recompute
    (``moe_recompute`` 1: the expert activation, Megatron-Core's ``moe_act``;
    2: the whole MoE layer, ``moe``).  Both 0 under full recompute
    (``recompute`` 2), which recomputes every layer whole already."""
    partial_ok = x.recompute < 1.5
    act = (partial_ok & (x.moe_recompute > 0.5) & (x.moe_recompute < 1.5)).astype(
        x.moe_recompute.dtype)
    layer = (partial_ok & (x.moe_recompute > 1.5)).astype(x.moe_recompute.dtype)
    return act, layer


def attention_activation_bytes(x):
    """Attention activations one layer stores per ``s b h``, before the split by ``t``.

    GQA/MHA: Q 2, K and V ``4 kv / a``, the output 2, times ``a d_h / h``; the
    output projection's FP8 input copy (``a d_h / h``) under FP8.  MLA
    (DeepSeek-V2 sec. 2.1): Q and K of ``a (d_h + d_r)`` each and V of ``a d_h``
    (2 bytes each) as the attention kernel keeps them, and the output ``a d_h``
    (2, and the FP8 copy); with ``mla_recompute`` (Megatron-Core's
    ``mla_up_proj``) Q, K and V are rebuilt from the latents for the backward
    pass, so only the output stays.
    """
    a, dh, h = x.num_heads, head_dim(x), x.hidden_dim
    out = (2.0 + low_precision_gemms(x)) * a * dh / h
    gqa = (2.0 + 4.0 * x.num_kv_heads / a) * a * dh / h + out
    qkv = (2.0 * 2.0 * a * (dh + x.qk_rope_dim) + 2.0 * a * dh) / h
    mla = (1.0 - x.mla_recompute) * qkv + out
    return jnp.where(x.attention > 0.5, mla, gqa)


def latent_activation_bytes(x):
    """MLA's compressed latents one layer stores per ``s b h`` (0 without MLA):
    the down-projections' outputs ``r_q + r_kv + d_r`` as their norms' inputs
    (2 bytes) and the normed ``r_q + r_kv`` as the up-projections' inputs (2,
    1 under FP8).  Replicated over tensor parallelism (the down-projections are)."""
    rq, rkv = x.q_lora_rank, x.kv_lora_rank
    low = low_precision_gemms(x)
    mla = (2.0 * (rq + rkv + x.qk_rope_dim) + (2.0 - low) * (rq + rkv)) / x.hidden_dim
    return jnp.where(x.attention > 0.5, mla, jnp.zeros_like(mla))


def dispatch_activation_bytes(x):
    """Routed token copies the average layer stores per ``s b h``: ``k`` copies
    (times the load) of the permuted expert FC1 input (2 bytes; 1 under FP8,
    the grouped GEMM saves its FP8 cast), each ``l / h`` as wide under
    LatentMoE, which also stores the combined latent, the input of
    ``fc2_latent_proj`` (``(2 - fp8) l / h``; ``fc1_latent_proj``'s input is the
    norm output the layer count keeps)."""
    bytes_ = DISPATCH_ACTIVATION_BYTES - low_precision_gemms(x)
    plain_moe = bytes_ * x.experts_per_token * moe_fraction(x) * load_factor(x)
    return jnp.where(has_latent(x), _latent_copies_bytes(x) * moe_fraction(x), plain_moe)


def _latent_copies_bytes(x):
    """LatentMoE's stored routed copies and combined latent per ``s b h`` of
    one MoE layer: ``(2 - fp8) (k load + 1) l / h``."""
    bytes_ = DISPATCH_ACTIVATION_BYTES - low_precision_gemms(x)
    return (bytes_ * (x.experts_per_token * load_factor(x) + 1.0)
            * x.moe_latent_size / x.hidden_dim)


def recomputed_activation_bytes(x):
    """Activation bytes per ``s b h`` (before the split by ``t``) that the MoE
    layers' fine-grained recompute does not store, the average layer.

    ``moe_act``: the routed experts' activation output, ``(2 - fp8) k f_e / h``
    (recomputed from the FC1 output it keeps; 1 byte under FP8, the FC2
    input's cast).  ``moe``: everything inside the MoE layer, the FC1 output
    and activation of every expert, ``(2 (w - 1) + 2 - fp8) (k + S) f_e / h``,
    and the dispatched copies and LatentMoE's combined latent
    (``dispatch_activation_bytes``); its input stays
    (the norm output the layer count keeps).
    """
    act, layer = recompute_flags(x)
    k, fe, h = x.experts_per_token, x.moe_ffn_hidden_dim, x.hidden_dim
    width = (k + x.shared_experts) * fe
    fc2_input = 2.0 - low_precision_gemms(x)
    whole_layer = ((2.0 * (x.mlp_weight_matrices - 1.0) + fc2_input) * width / h
                   + jnp.where(has_latent(x), _latent_copies_bytes(x),
                               (DISPATCH_ACTIVATION_BYTES - low_precision_gemms(x)) * k
                               * load_factor(x)))
    return moe_fraction(x) * (act * fc2_input * k * fe / h + layer * whole_layer)


def offloaded_activation_bytes(x):
    """Activation bytes per ``s b h`` (before the split by ``t``) that the MoE
    layers keep in host memory in place of the GPU's, the average layer, and
    those of one MoE layer, which stay on the GPU while they are in transit:
    ``(average, one_layer)``.

    Megatron-Core's fine-grained activation offloading
    (``--fine-grained-activation-offloading --offload-modules ...``) moves a
    module's saved input.  ``moe_offload`` 1 (``moe_act``) moves the routed
    experts' FC1 output, the activation's input, ``2 (w - 1) k f_e / h`` (bf16,
    the GEMM's output; ``w - 1`` halves for SwiGLU's gate and up, one for
    squared ReLU); Megatron-Bridge's Nemotron 3 Ultra recipes reach the same
    tensor with ``offload_modules ["fused_group_mlp"]`` and a size floor that
    only it passes.  ``moe_offload`` 2 (``expert_fc1 moe_act``, the
    Megatron-MoE model zoo's Qwen3-235B MXFP8 run on GB200) also moves FC1's
    input, the routed token copies ``(2 - fp8) k`` (times the load; ``l / h``
    as wide under LatentMoE), as ``dispatch_activation_bytes`` counts them.
    Only with Megatron-Core's recompute choices, none or selective
    (``recompute`` 0, 1; full recompute stores no per-layer tensors), and not
    with the whole MoE layer recomputed (``moe_recompute`` 2), which stores
    neither.  The copies' time: ``memory.offload_seconds``.
    """
    _, layer = recompute_flags(x)
    kept = (x.recompute < 1.5).astype(x.moe_offload.dtype) * (1.0 - layer)
    fc1_output = (2.0 * (x.mlp_weight_matrices - 1.0) * x.experts_per_token
                  * x.moe_ffn_hidden_dim / x.hidden_dim)
    width = jnp.where(has_latent(x), x.moe_latent_size / x.hidden_dim, 1.0)
    fc1_input = ((DISPATCH_ACTIVATION_BYTES - low_precision_gemms(x)) * x.experts_per_token
                 * load_factor(x) * width)
    one_layer = kept * ((x.moe_offload > 0.5) * fc1_output + (x.moe_offload > 1.5) * fc1_input)
    # Selected by where, so that a sweep without the offload compiles it away.
    on = x.moe_offload > 0.5
    return (jnp.where(on, moe_fraction(x) * one_layer, 0.0),
            jnp.where(on & (moe_fraction(x) > 0.0), one_layer, 0.0))


def recompute_bytes(x, rank_tokens):
    """Memory-bound bytes the MoE recompute runs again per micro-batch, the
    average layer: the activation function (``moe_act``: the routed part of the
    FFN activation traffic, ``2 w k f_e`` per token) or the whole layer's
    (``moe``: ``2 w (k + S) f_e`` per token and the token permutation), with
    the eager ops inside them (``eager_expert_bytes``: a clamped GLU's clamps
    with either, the expert biases' with ``moe``)."""
    act, layer = recompute_flags(x)
    w, k, fe = x.mlp_weight_matrices, x.experts_per_token, x.moe_ffn_hidden_dim
    _, _, clamp_fwd, bias_fwd = eager_expert_bytes(x, rank_tokens)
    act_bytes = moe_fraction(x) * 2.0 * w * k * fe * rank_tokens + clamp_fwd
    layer_bytes = (moe_fraction(x) * 2.0 * w * (k + x.shared_experts) * fe * rank_tokens
                   + permute_bytes(x, rank_tokens) + clamp_fwd + bias_fwd)
    return act * act_bytes + layer * layer_bytes


def tp_collectives_per_layer(x, full_recompute):
    """Tensor-parallel collectives (all-reduce equivalents) of the average layer
    per micro-batch: the attention block's two (one forward, one backward;
    sequence parallelism: an all-gather and a reduce-scatter each), again in
    the recompute with full recompute, and as many for an FFN block that is
    tensor-parallel: every dense layer's and an MoE layer's shared experts.
    The routed experts take their tokens as the sequence-parallel shards
    (Megatron-Core's MoE layer with parallel folding: the dispatcher gathers
    only in the expert-tensor-parallel group, ``layer_comm_seconds``), so an
    MoE layer without shared experts has only the attention block's.
    Dense: ``4 + 2 full``, the refined model's count."""
    frac = moe_fraction(x)
    ffn_blocks = (1.0 - frac) + frac * (x.shared_experts > 0.5)
    return (2.0 + full_recompute) * (1.0 + ffn_blocks)


def host_seconds(x, forward_again):
    """Host time the GPU waits for in the average layer, per micro-batch:
    ``moe_host_overhead_us`` for each forward pass of an MoE layer (the
    forward, and again when it is recomputed: ``forward_again`` 0/1)."""
    return moe_fraction(x) * x.moe_host_overhead_us * 1e-6 * (1.0 + forward_again)


def dropless(x):
    """1 for a dropless MoE model (``capacity_factor`` 0 and experts), else 0."""
    return jnp.where((x.num_experts > 1.5) & (x.capacity_factor <= 0.0), 1.0, 0.0)


def paced_layer_share(x):
    """Share of the layers whose kernels a dropless model issues at the host's pace.

    After a dropless MoE layer's token-count sync the GPU's queue is empty,
    and the host issues every kernel after it, the MoE layer's and those of
    the layers that follow it up to the next sync, from no lead: a layer
    without experts between two MoE layers (a dense layer of a
    ``moe_layer_interval`` > 1 model; a hybrid's Mamba-2 and attention
    layers, ``mamba.paced_layer_share``) runs at the host's pace as the MoE
    layer does.  The leading ``dense_layers`` come before the first sync of
    the forward pass and are not counted.  Here: the layers from the first MoE
    layer on, ``(L - dense_layers) / L`` (``moe_fraction`` when every layer
    after the leading dense ones is an MoE layer: Qwen3, GPT-OSS,
    DeepSeek-V3), 0 without MoE layers.
    """
    rest = jnp.maximum(x.num_layers - x.dense_layers, 0.0)
    return jnp.where(moe_layers(x) > 0.5, rest / x.num_layers, 0.0)


def host_pace_per_kernel(x, launch_s):
    """Seconds a kernel issued after a device-to-host wait costs beyond the
    ``kernel_overhead_us`` (``launch_s``) charged for it elsewhere: the host's
    ``host_kernel_us`` less that, never below 0 (``host_paced_seconds``)."""
    return jnp.maximum(x.host_kernel_us * 1e-6 - launch_s, 0.0)


def host_paced_seconds(x, eager_layer_kernels, eager_moe_kernels, launch_s,
                       expert_kernel_s=None, forward_again=0.0, layer_share=None):
    """Extra seconds of the average layer, per micro-batch pass, where the host sets the pace.

    A dropless MoE layer copies its tokens-per-expert counts to the host every
    forward pass (the grouped GEMM's split sizes), and that sync drains the
    GPU's queue: the host cannot run ahead of the GPU, so every kernel it
    launches eagerly in that layer reaches the GPU ``host_kernel_us`` after the
    one before (PyTorch and Transformer Engine dispatch plus the CUDA launch;
    Megatron-LM's "CPU overhead or host boundedness", docs/discussions/
    deepseek-v3-gb200-optimization).  The GPU waits only when a kernel ends
    before the next one arrives: beyond the ``kernel_overhead_us`` the model
    charges each kernel elsewhere, a kernel of ``d`` seconds on the GPU exposes
    ``max(0, host_kernel_us - kernel_overhead_us - d)``.  The kernels whose
    duration the model does not itemise (router, token counts, permutation,
    activation, the layer's own: short on these tensors) are taken at ``d``
    = 0, the full host pace; the routed experts' GEMMs (``EXPERT_GEMM_KERNELS``
    per local expert among ``eager_moe_kernels``, the forward two again for
    ``forward_again``, the full or MoE-layer recompute) at their own
    ``expert_kernel_s`` (``expert_gemm_kernel_seconds``; None: taken at 0 as
    well).  Each kernel is bounded on its own: the lead a long GEMM gives the
    host over the kernels after it is not carried (a lower bound on what is
    hidden).  Backward too is taken at the host's pace (autograd's engine
    issues it without a sync, but runs ahead only where the host is faster).

    Counted for the layers that follow a sync (``layer_share``; None:
    ``paced_layer_share``) of the layer's paced kernels
    (``eager_layer_kernels``, per layer) and for the MoE kernels
    (``eager_moe_kernels``, already the average layer's); 0 for a dense model
    or a token-dropping one (no sync: the host runs ahead).  The caller passes
    the kernels of per-layer CUDA graphs among them: a graph of the attention,
    router and preprocessing scopes leaves the sync in place and was measured
    not to shorten the iteration (Megatron-Bridge skills/mbridge-perf-cuda-
    graphs/SKILL.md, pitfall 13); a full-iteration graph passes none (static
    shapes, no sync).
    """
    paced = host_pace_per_kernel(x, launch_s)
    share = paced_layer_share(x) if layer_share is None else layer_share
    total = paced * (share * eager_layer_kernels + eager_moe_kernels)
    if expert_kernel_s is not None:
        # Each expert GEMM kernel hides min(paced, d) of its host pace.
        # (Indexed on the leading axis: inputs may carry a batch axis after it.)
        hid = [jnp.minimum(paced, expert_kernel_s[i]) for i in range(6)]
        hidden = (1.0 + forward_again) * (hid[0] + hid[3]) + hid[1] + hid[2] + hid[4] + hid[5]
        local = x.num_experts / x.expert_parallel
        total = total - moe_fraction(x) * local * hidden
    return dropless(x) * total


def batch_shape(x):
    """The shape of a batch of configurations ``x`` (``RefinedInputs`` whose fields
    are scalars or columns, ``Model.apply_rows``): () for one configuration."""
    fields = x if isinstance(x, tuple) else vars(x).values()
    return jnp.broadcast_shapes(*(jnp.shape(v) for v in fields))


def _stack(parts, shape):
    """``parts`` stacked on a leading axis, each broadcast to the batch ``shape``
    first: a stack of passes is ``[passes, *batch]`` whichever inputs its parts
    depend on, so that stacks concatenate, index and meet a batch's columns
    (a switch's ``where``) alike when some inputs are scalars every row shares."""
    return jnp.stack([jnp.broadcast_to(v, shape) for v in parts])


def _passes(gemm, m, n, k, shape=()):
    """Forward ``[m, k] x [k, n]``, input gradient ``[m, n] x [n, k]`` and weight
    gradient ``[k, m] x [m, n]`` seconds of one GEMM, stacked (``_stack``)."""
    return _stack([gemm(m, n, k), gemm(m, k, n), gemm(k, n, m)], shape)


def tile_padded_rows(groups, m):
    """Rows of ``groups`` GEMMs of ``m`` rows each, every group padded to whole
    ``GEMM_TILE_M`` tiles.  The padding is a step; its gradient is that of the
    unpadded rows ``groups m`` (the relaxation sensitivities report: the
    staircase's mean slope, not its zero or infinite local one)."""
    exact = groups * m
    padded = groups * jnp.ceil(m / GEMM_TILE_M - 1e-6) * GEMM_TILE_M
    return exact + jax.lax.stop_gradient(padded - exact)


def _grouped_passes(gemm, groups, m, n, k, hbm_rate, accumulate_bytes, accumulate=1.0,
                    shape=()):
    """The three passes of a grouped GEMM: ``groups`` GEMMs of ``m`` rows each.

    The groups' tiles fill the GPU together (Transformer Engine's
    GroupedLinear issues one cuBLAS GEMM per expert round-robin on its 4
    compute streams, so their tiles share the SMs), so it runs as one GEMM
    of the groups' tile-padded rows stacked (each group pads to whole tiles:
    tile quantization per expert, wave quantization over all), plus reading
    the ``groups - 1`` further weight matrices (bf16); see :func:`tile_padded_rows`.

    The weight gradient accumulates into the gradient buffer (Megatron-LM's
    gradient-accumulation fusion, TE's ``fuse_wgrad_accumulation``): each
    expert's ``n x k`` output is read and written at ``accumulate_bytes``
    (``grad_buffer_bytes``) instead of written once in bf16, which
    :func:`wgrad_accumulate_seconds` adds where ``accumulate`` is 1 (the
    refined model's ``grad_buffer_traffic``, which counts the same traffic for
    every other weight).
    """
    rows = tile_padded_rows(groups, m)
    weights = (groups - 1.0) * DISPATCH_BYTES * n * k / hbm_rate
    fwd = gemm(rows, n, k) + weights
    dgrad = gemm(rows, k, n) + weights
    wgrad = (gemm(groups * k, n, m) + weights
             + accumulate * wgrad_accumulate_seconds(groups * n * k, accumulate_bytes, hbm_rate))
    return _stack([fwd, dgrad, wgrad], shape)


def wgrad_accumulate_seconds(elements, accumulate_bytes, hbm_rate):
    """Extra memory time of accumulating a weight gradient of ``elements``
    values into the gradient buffer, seconds.

    With gradient-accumulation fusion (Megatron-LM's default; TE GroupedLinear
    ``fuse_wgrad_accumulation``) the wgrad GEMM's epilogue reads the buffer and
    writes it back (``2 x accumulate_bytes`` per element, 8 for fp32
    ``main_grad``) where the shape model counts one bf16 write (2).  Per
    expert the GEMM does ``2 m`` FLOPs per output element for ``m`` routed rows,
    so at a few hundred rows this traffic is as long as the math.
    """
    return (2.0 * accumulate_bytes - DISPATCH_BYTES) * elements / hbm_rate


def layer_gemm_seconds(x, tokens, gemm, hbm_rate, mixer=None, ffn_share=None, routed=None):
    """Forward, input-gradient and weight-gradient seconds of the average
    layer's weight GEMMs on one GPU, and the forward of its MoE block alone
    (router, shared and routed experts: what ``moe`` recompute runs again,
    weighted by the share of MoE layers), then one MoE layer's block forward,
    input gradient and weight gradient (the MLP node that Combined 1F1B pairs
    with the all-to-alls, ``exposed_comm_seconds``); shape [7].

    Args:
      x: the inputs (tensor parallelism ``t`` splits attention, dense FFN and
        shared experts as Megatron-LM does; routed experts run on ``k T e etp
        / E`` tokens each, ``T = tokens / t``, split ``etp`` ways).
      tokens: tokens of one micro-batch on one GPU's sequence shard (``s b / c``).
      gemm: ``gemm(m, n, k) -> seconds`` of one ``[m, k] x [k, n]`` GEMM at its
        shape's efficiency.
      hbm_rate: achieved memory bandwidth, bytes/s (weights of grouped GEMMs).
      mixer: ``mixer(attention, passes) -> seconds`` of the average layer's
        mixer from its attention GEMMs' and ``passes(n, k)`` (a hybrid model's
        Mamba-2 layers, ``jaxmodel.models.refined.mamba``); None: attention.
      ffn_share: the share of the layers with an FFN block (None: every layer).
      routed: ``routed_passes`` of the same arguments, where the caller has them.
    """
    h, t, a, kv, dh = x.hidden_dim, x.tensor_parallel, x.num_heads, x.num_kv_heads, head_dim(x)
    w, f, fe = x.mlp_weight_matrices, x.ffn_hidden_dim, x.moe_ffn_hidden_dim

    shape = batch_shape(x)

    def p(n, k, m=tokens):
        return _passes(gemm, m, n, k, shape)

    gqa = p((a * dh + 2.0 * kv * dh) / t, h) + p(h, a * dh / t)
    rq, rkv, dr = x.q_lora_rank, x.kv_lora_rank, x.qk_rope_dim
    q_lora = p(jnp.maximum(rq, 1.0), h) + p(a * (dh + dr) / t, jnp.maximum(rq, 1.0))
    q_full = p(a * (dh + dr) / t, h)
    mla = (jnp.where(rq > 0.5, q_lora, q_full) + p(rkv + dr, h) + p(2.0 * a * dh / t, rkv)
           + p(h, a * dh / t))
    attention = jnp.where(x.attention > 0.5, mla, gqa)
    if mixer is not None:
        attention = mixer(attention, p)
    dense = p((w - 1.0) * f / t, h) + p(h, f / t)
    # MoE layer: the router on the rank's sequence-parallel tokens, the shared
    # experts as a TP-split FFN of width S f_e, the routed experts grouped.
    rank_tokens = tokens / t
    router = p(x.num_experts, h, rank_tokens)
    shared_w = jnp.maximum(x.shared_experts, 1.0) * fe
    shared = (x.shared_experts > 0.5) * (p((w - 1.0) * shared_w / t, h) + p(h, shared_w / t))
    fc1, fc2 = routed_passes(x, tokens, gemm, hbm_rate) if routed is None else routed
    routed = fc1 + fc2
    # LatentMoE: fc1_latent_proj before the dispatch, fc2_latent_proj after the
    # combine, on the rank's tokens, not split.
    latent = jnp.maximum(x.moe_latent_size, 1.0)
    latent = has_latent(x) * (p(latent, h, rank_tokens) + p(h, latent, rank_tokens))
    frac = moe_fraction(x)
    block = frac * (router + shared + routed + latent)
    dense_share = (1.0 if ffn_share is None else ffn_share) - frac
    return jnp.concatenate([attention + dense_share * dense + block, block[:1],
                            router + shared + routed + latent])


def routed_passes(x, tokens, gemm, hbm_rate):
    """The routed experts' FC1 and FC2 grouped GEMMs of one MoE layer: two
    stacks ``[forward, input gradient, weight gradient]`` of seconds
    (``_grouped_passes``; arguments as ``layer_gemm_seconds``)."""
    w, fe = x.mlp_weight_matrices, x.moe_ffn_hidden_dim
    etp = x.expert_tensor_parallel
    groups = x.num_experts / x.expert_parallel
    rows = expert_gemm_tokens(tokens / x.tensor_parallel, x) * etp
    gb = x.grad_buffer_bytes
    on = x.grad_buffer_traffic
    d = routed_width(x)
    shape = batch_shape(x)
    return (_grouped_passes(gemm, groups, rows, (w - 1.0) * fe / etp, d, hbm_rate, gb, on, shape),
            _grouped_passes(gemm, groups, rows, d, fe / etp, hbm_rate, gb, on, shape))


def expert_gemm_kernel_seconds(x, routed):
    """GPU seconds of one expert's GEMM kernel in an MoE layer, shape [6]:
    FC1 forward, input gradient, weight gradient, then FC2's.

    Transformer Engine's GroupedLinear issues one cuBLAS GEMM per local expert
    and pass (``EXPERT_GEMM_KERNELS``), so one kernel runs for its grouped
    pass's time over the ``E / e`` local experts.  What ``host_paced_seconds``
    hides the host's issue time under.  ``routed``: the layer's
    ``routed_passes``."""
    fc1, fc2 = routed
    return jnp.concatenate([fc1, fc2]) / (x.num_experts / x.expert_parallel)


def combined_1f1b_share(g):
    """Share of a stage's chunk passes that Combined 1F1B pairs (``ep_overlap``).

    Megatron-Core's EP all-to-all overlap (``--overlap-moe-expert-parallel-comm``;
    docs "Combined 1F1B: Expert-Parallel All-to-All Overlap") runs the forward of
    one micro-batch with the backward of another, each one's dispatch and
    combine hidden under the other's compute.  Only the steady phase pairs:
    the first stage's warm-up forwards, ``2 (p - 1) + (v - 1) p`` of its ``m v``
    chunk passes (Megatron-LM's interleaved schedule; 1 when ``p = 1``), and
    as many cool-down backwards, run alone.
    """
    warmup = jnp.where(g.p_i == 1, 1.0, 2.0 * (g.p - 1.0) + (g.v - 1.0) * g.p)
    passes = g.m * g.v
    return positive_part(passes - warmup) / passes


def paired_hidden_seconds(a2a, attn_fwd, attn_bwd, mlp_fwd, mlp_dgrad, mlp_wgrad):
    """All-to-all seconds one Combined 1F1B layer pair hides (``ep_overlap``).

    Megatron-Core runs the forward of one micro-batch's layer with the
    backward of another's on two streams (``TransformerLayerSchedulePlan.run``,
    megatron/core/models/common/model_chunk_schedule_plan.py)::

        comm: combine_bwd | dispatch_fwd -> dispatch_bwd        | combine_fwd
        comp: attn_fwd    | mlp_bwd -> mlp_bwd_dw -> mlp_fwd    | attn_bwd

    Each all-to-all waits for its own micro-batch's previous node, so it hides
    only behind the compute issued beside it, not the whole step's: the
    backward combine behind the attention forward (the ``attn`` node: norm,
    attention, router, dispatch preprocess), the forward dispatch behind the
    MLP input gradient, the backward dispatch behind the MLP weight gradient
    (``delay_wgrad_compute``, which the recipes set, moves it after the
    dispatch; taken for every row, the model has no input for it: without it
    the forward dispatch would have the input and weight gradients, the
    backward dispatch the forward alone) and the MLP forward, the forward
    combine behind the attention backward.  The MLP node here is the MoE
    block's GEMMs (its router GEMM, in Megatron's attention node, is small).
    An all-to-all longer than its partner stays exposed by the difference.
    Arguments: one all-to-all's seconds and the partners' (one layer, one
    micro-batch)."""
    return (jnp.minimum(a2a, attn_fwd) + jnp.minimum(a2a, mlp_dgrad)
            + jnp.minimum(a2a, mlp_wgrad + mlp_fwd) + jnp.minimum(a2a, attn_bwd))


def exposed_comm_seconds(x, g, stage_layers, moe_layer_again, compute, partners):
    """``(moe_raw, moe_comm)``: the expert all-to-all seconds a step, before and after overlap.

    Dispatch and combine of the busiest stage's MoE layers (``layer_comm_seconds``);
    ``moe_overlap`` of it hidden under compute; with ``ep_overlap``, at least
    what the layer pairs of the share of passes Combined 1F1B pairs hide
    (``combined_1f1b_share``, ``paired_hidden_seconds``: each of the four
    all-to-alls behind its partner module only; the recompute's forward
    all-to-alls stay exposed), and the SMs the hidden part takes from the
    compute (``sm_contention_seconds``); the exposed rest stretches the 1F1B
    bubble as well (counted here, so the bubble keeps its dense meaning).
    ``g`` is the model's ``Derived``; ``partners`` the seconds of one MoE
    layer's attention forward and backward and MLP forward, input and weight
    gradient, one micro-batch.
    """
    m, t, p, v, tok, G, net = g.m, g.t, g.p, g.v, g.tok, g.G, g.net
    moe_layers = m * stage_layers * moe_fraction(x)
    moe_raw = moe_layers * layer_comm_seconds(x, tok / t, G, net, g.full + moe_layer_again)
    pairs = x.ep_overlap > 0.5
    a2a = layer_comm_seconds(x, tok / t, G, net, 0.0) / a2a_per_moe_layer(0.0)
    paired = combined_1f1b_share(g) * moe_layers * paired_hidden_seconds(a2a, *partners)
    plain = x.moe_overlap * jnp.minimum(moe_raw, compute)
    hidden = jnp.where(pairs, jnp.maximum(plain, paired), plain)
    moe_comm = ((moe_raw - hidden) * (1.0 + jnp.where(g.schedule == 0, (p - 1.0) / (v * m), 0.0))
                + jnp.where(pairs, sm_contention_seconds(x, hidden), 0.0))
    return moe_raw, moe_comm


def sm_contention_seconds(x, hidden):
    """Compute lost while ``hidden`` seconds of dispatch and combine run beside it.

    Under Combined 1F1B the all-to-all kernels of one micro-batch hold
    ``A2A_COMM_SMS`` of the GPU's ``num_sms`` while the other micro-batch
    computes, so in those ``hidden`` seconds the compute advances on
    ``1 - A2A_COMM_SMS / num_sms`` of the GPU and the rest,
    ``hidden x A2A_COMM_SMS / num_sms``, runs afterwards.  (``moe_overlap`` is
    a hidden share given net of this; the pairing share of ``ep_overlap`` is a
    count of passes, so the SMs are charged here.)
    """
    return hidden * jnp.minimum(A2A_COMM_SMS / x.num_sms, 1.0)



def ffn_cast_elements(x, t, rep_split, ffn_share=1.0):
    """Elements the low-precision casts of the average layer's FFN block
    quantise, per token of the micro-batch: ``(forward, backward)``.

    Under FP8 / FP4 every GEMM input is quantised in the forward pass and
    every output gradient in the backward pass (``derived.CAST_BYTES_PER_ELEMENT``
    bytes each).  A dense FFN quantises its input ``h`` and the FC2 input ``f``
    forward, the FC1 and FC2 output gradients ``(w - 1) f`` and ``h`` backward
    (per GPU: ``h / rep_split``, ``f / t``).  In an MoE layer the routed
    experts' GEMMs run on the ``k`` routed copies of each token (times the
    load), and Transformer Engine's GroupedLinear quantises each expert's
    slice of them (``split_quantize`` of the permuted input into the
    ``m_splits`` pieces, TE's ``fused_multi_cast_transpose`` in older releases:
    TransformerEngine issue 1499), so per token the casts take ``k`` copies of
    the FC1 input ``d`` (``h``, or ``l`` under LatentMoE) and of the FC2
    input ``f_e`` forward, of the FC1 output gradient ``(w - 1) f_e`` and the
    FC2 output gradient ``d`` backward (per GPU: the ``1 / t`` of the tokens
    the rank routes; with expert tensor parallelism ``etp`` ways more rows of
    ``1 / etp`` of ``f_e``).  Shared experts are a TP-split FFN of width
    ``S f_e``; LatentMoE's two projections (inputs ``h`` and ``l``, output
    gradients ``l`` and ``h``) run on the rank's tokens.  MoE layers take
    their share (``moe_fraction``), the other FFN layers (``ffn_share`` of the
    layers have an FFN block: a hybrid's mixer layers have none) the dense
    FFN's; a dense model gives the dense FFN's exactly.
    """
    w, fe, f, h = x.mlp_weight_matrices, x.moe_ffn_hidden_dim, x.ffn_hidden_dim, x.hidden_dim
    etp = x.expert_tensor_parallel
    d = routed_width(x)
    copies = x.experts_per_token * load_factor(x) * etp / t
    shared = jnp.where(x.shared_experts > 0.5, 1.0, 0.0)
    s_fe = x.shared_experts * fe
    latent = jnp.where(has_latent(x), (h + x.moe_latent_size) / t, 0.0)
    fwd_moe = (shared * (h / rep_split + s_fe / t) + copies * (d + fe / etp) + latent)
    bwd_moe = (shared * ((w - 1.0) * s_fe / t + h / rep_split)
               + copies * ((w - 1.0) * fe / etp + d) + latent)
    frac = moe_fraction(x)
    fwd = frac * fwd_moe + (ffn_share - frac) * (h / rep_split + f / t)
    bwd = frac * bwd_moe + (ffn_share - frac) * ((w - 1.0) * f / t + h / rep_split)
    return fwd, bwd
