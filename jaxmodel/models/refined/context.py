"""Context parallelism: the exchange of keys and values of each layer.

Each sequence is split over ``c`` ranks (two chunks per rank, so that the
causal mask balances: ``seq_length`` divides by ``2 c``); every rank needs the
keys and values of the whole sequence.  The context group has stride ``t``,
so it leaves the node when ``t c > G``.  ``cp_comm`` 0, ring (Megatron-LM):
``c - 1`` sends of K, V forward (of K, V and dK, dV backward), each overlapped
with the attention of the block in hand.  ``cp_comm`` 1, all-gather (Llama 3):
gather K, V before attention and reduce-scatter their gradients after, not
overlapped; the layer's full-sequence K and V are then held in memory
(``jaxmodel.models.refined.memory``).  ``cp_comm`` 2, all-to-all (DeepSpeed-
Ulysses, Jacobs et al. 2023; Megatron-Core ``--cp-comm-type a2a``): each rank
trades its sequence chunk of every head for the whole sequence of ``a / (t c)``
heads, an all-to-all of Q, K and V before the attention and of its output
after (their gradients backward), not overlapped; it needs the ``a / t`` heads
(and ``kv / t`` key/value heads) to divide by ``c``.  ``cp_comm`` 3, PyTorch's
experimental ``context_parallel`` as torchtitan runs it (pytorch/pytorch
``torch/distributed/tensor/experimental/_attention.py``: ``_ContextParallelOptions``
defaults to ``_RotateMethod.ALL_GATHER`` and load balancing; torchtitan's
``context_parallel_rotate_method`` defaults to "allgather").  The SDPA call on a
rank runs block by block (``_templated_ring_attention``), ``c`` flash calls a
layer: the local causal block, then one of ``s_l x s_l / 2`` per peer (the
round-robin load balance: all local queries against the peer's first chunk,
or the second local chunk against both of the peer's), each ``1 / c`` of the
layer's attention, their outputs merged by log-sum-exp (``_SDPAMerger``).  Its
K and V are those the SDPA call receives: torchtitan's Llama repeats them to the
``a / t`` query heads (``repeat_kv``) before ``F.scaled_dot_product_attention``,
so the exchange moves ``a / kv`` times the grouped K, V.  ``_AllGatherRotater``
issues one asynchronous all-gather of them before the first block and waits for
it after it ("all-gathers KV shards while performing the local SDPA", PyTorch's
context-parallel tutorial, pytorch/tutorials PR 3319): exposed where it outlasts
one block.  The backward (``_templated_ring_attention_backward``) gathers them
again the same way and passes the K, V gradients around the ring in fp32
(``dkv_rotater`` is always ``ALL_TO_ALL``, a ``permute_tensor`` to the next rank
of float32 accumulators): ``c`` hops, each waited for after the next block's
backward, the last after the loop, exposed.  The gathered K, V of a layer are
held in memory, as with ``cp_comm`` 1.  Not counted: the merges of the partial
outputs (fp32) and the fp32 gradient accumulation; torchtitan compiles each
block with ``fullgraph=True``, so they are traced into the block and fused, about
10 bytes an output element a block forward and 30 backward, 2-3% of the blocks'
attention time at ``s_l`` = 32K (a block runs ``2 s_l`` FLOPs an element).
"""

from __future__ import annotations

from jaxmodel.collectives import all_gather, all_to_all, point_to_point, reduce_scatter
from jaxmodel.deferred import jnp
from jaxmodel.models.common import whole
from jaxmodel.models.refined.rates import BF16
from jaxmodel.numerics import positive_part


def attention_calls(x, c):
    """Fused-attention kernel calls a query takes a layer: one per block, ``c``, for
    the ring (``cp_comm`` 0) and PyTorch's ``context_parallel`` (3); one for the
    all-gather (1) and all-to-all (2), whose kernel sees the whole sequence."""
    comm = whole(x.cp_comm)
    return jnp.where((comm == 0) | (comm == 3), c, 1.0)


def cp_seconds(x, g, lt, stage_layers):
    """``(kv_bytes, cp)``: the local chunk's K and V bytes (as exchanged), the exposed CP
    seconds a step."""
    fdt, full, tok, t, c, a, kv, G, net, m = (g.fdt, g.full, g.tok, g.t, g.c, g.a, g.kv, g.G,
                                              g.net, g.m)
    t_i, c_i = g.t_i, g.c_i
    qw, attn_fwd_s, attn_bwd_s = lt.qw, lt.attn_fwd_s, lt.attn_bwd_s
    # The context group has stride t, so it leaves the node when t c > G.
    kv_bytes = 2.0 * BF16 * tok * qw * (kv / a) / t
    cp_crosses = (t_i * c_i > whole(G)).astype(fdt)
    cp_per_node = jnp.clip(G / t, 1.0, c)
    hop = point_to_point(kv_bytes, cp_crosses, net)
    hops = c - 1.0
    # Ring (Megatron-LM): c - 1 sends of K, V forward (of K, V and dK, dV
    # backward), each overlapped with the attention of the block in hand.
    ring_fwd = positive_part(hops * hop - attn_fwd_s)
    ring_bwd = positive_part(2.0 * hops * hop - attn_bwd_s)
    ring = (1.0 + full) * ring_fwd + ring_bwd
    # All-gather (Llama 3): gather K, V before attention, reduce-scatter their
    # gradients after; not overlapped.
    gather_kv = (all_gather(kv_bytes * c, c, cp_per_node, net) * (1.0 + full)
                 + reduce_scatter(kv_bytes * c, c, cp_per_node, net))
    # All-to-all (Ulysses): Q, K, V in and the attention output back, forward
    # (again with full recompute) and backward, each over the c ranks.
    q_bytes = BF16 * tok * qw / t
    ulysses = (2.0 + full) * all_to_all(2.0 * q_bytes + kv_bytes, c, cp_per_node, net)
    comm = whole(x.cp_comm)
    # PyTorch context_parallel (torchtitan): the K, V at the query heads, bf16.
    sdpa_kv_bytes = 2.0 * BF16 * tok * qw / t
    gathered = all_gather(sdpa_kv_bytes * c, c, cp_per_node, net)
    # Each of the c blocks is 1 / c of the layer's attention (load-balanced); a
    # block's FlashAttention backward recomputes its QK^T (half a forward).
    block_fwd = attn_fwd_s / c
    block_bwd = (attn_bwd_s + 0.5 * g.flash * attn_fwd_s) / c
    # The K, V gradients travel in fp32: twice the bf16 bytes a hop.
    dkv_hop = point_to_point(2.0 * sdpa_kv_bytes, cp_crosses, net)
    torch_fwd = positive_part(gathered - block_fwd)
    torch_bwd = (positive_part(gathered - block_bwd) + hops * positive_part(dkv_hop - block_bwd)
                 + (c > 1.0).astype(fdt) * dkv_hop)
    torch_cp = (1.0 + full) * torch_fwd + torch_bwd
    cp_layer = jnp.where(comm == 3, torch_cp, jnp.where(
        comm == 2, ulysses, jnp.where(comm == 1, gather_kv, ring)))
    cp = m * stage_layers * cp_layer
    # The K, V bytes a layer's exchange holds (memory: c x these while gathered).
    return jnp.where(comm == 3, sdpa_kv_bytes, kv_bytes), cp
