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
(and ``kv / t`` key/value heads) to divide by ``c``.
"""

from __future__ import annotations

from jaxmodel.collectives import all_gather, all_to_all, point_to_point, reduce_scatter
from jaxmodel.deferred import jnp
from jaxmodel.models.common import whole
from jaxmodel.models.refined.rates import BF16
from jaxmodel.numerics import positive_part


def cp_seconds(x, g, lt, stage_layers):
    """``(kv_bytes, cp)``: the local chunk's K and V bytes, the exposed CP seconds a step."""
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
    cp_layer = jnp.where(comm == 2, ulysses, jnp.where(comm == 1, gather_kv, ring))
    cp = m * stage_layers * cp_layer
    return kv_bytes, cp
