"""Tensor parallelism: the collectives of each layer's activations, and their overlap.

Four all-reduces of the ``2 b s h`` bytes of the ``[s / c, b, h]`` activation
per layer and micro-batch (two forward, two backward; Shoeybi et al. 2019), six
with full recompute, for the layers of the busiest stage.  Sequence
parallelism (Korthikanti et al. 2022) replaces each by a reduce-scatter and an
all-gather of the same total bytes (and divides the replicated work and
activations by ``t``: ``Derived.rep_split``).  The MoE layer's routed experts
need no TP collective (``moe.tp_collectives_per_layer``).  Ranks are ordered
tensor, then context, data, pipeline (Megatron-LM), so tensor groups fill a
node first.  ``tp_overlap`` (Megatron-Core ``--tp-comm-overlap``) pipelines
each collective with its GEMM in ``t`` chunks (userbuffers ring exchange): the
first chunk's transfer cannot be hidden, nor more than the GEMMs' time.
"""

from __future__ import annotations

from jaxmodel.collectives import all_reduce
from jaxmodel.deferred import jnp
from jaxmodel.models.refined import mamba, moe
from jaxmodel.models.refined.rates import BF16


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
    tp_layer = tp_count * all_reduce(act_bytes, t, jnp.minimum(t, G), net)
    gemm_layer = gemm_fwd_s * (1.0 + full) + gemm_dgrad_s + gemm_wgrad_s
    # Overlap pipelines each collective with its GEMM in t chunks (userbuffers
    # ring exchange): the first chunk's transfer cannot be hidden.
    tp_hidden = jnp.minimum(x.tp_overlap * (t - 1.0) / t * tp_layer, gemm_layer)
    tp_layer_exposed = tp_layer - tp_hidden
    tp = m * stage_layers * tp_layer_exposed
    return act_bytes, tp
