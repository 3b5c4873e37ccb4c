"""The refined model's search space: the axes a layout search ranges over, and
which of them mean nothing for a given candidate.

Besides the 3D layout (``jaxmodel.models.layout``) a search tries

* the expert layout (``moe.expert_layout_axes``): ``expert_parallel``, and
  ``expert_tensor_parallel`` when asked;
* ``virtual_stages`` 1, 2 and 4 (interleaved 1F1B; Llama 3 405B ran v = 4 on
  p = 16, Llama Team 2024, sec. 3.3.2), and every ``v`` that splits each
  stage's layers into equal chunks (``p v`` divides ``num_layers``, + 2 with
  ``pipeline_split_embedding``: Megatron-LM's own rule for interleaving;
  Megatron-Bridge runs Llama 3 70B at p = 8, v = 5, two layers a chunk);
* for an MoE model, the levers that decide its step (DeepSeek-AI 2024,
  DeepSeek-V3 technical report, sec. 3.2): the all-to-all overlap
  ``moe_overlap`` 0 or ``A2A_OVERLAP`` (the 1F1B all-to-all overlap, as the
  validation rows take it), node-limited routing ``max_nodes_per_token`` 0
  (no limit) or 4 (DeepSeek-V3's limit), and the dispatcher
  ``moe_dispatcher`` flat (0) or hierarchical (1 DeepEP, and 2 HybridEP where
  the GPU's rates for the two differ).

A column means nothing (:func:`meaningless`) where it cannot change the step:
virtual stages and the pipeline schedule without a pipeline (p = 1), the
expert levers without expert parallelism (e = 1), node-limited routing with
the flat dispatcher or when the expert-parallel group spans no more nodes
than the tightest limit searched, the context-parallel exchange without context parallelism.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from jaxmodel.models.refined import moe
from jaxmodel.models.refined.moe import A2A_OVERLAP
from jaxmodel.models.refined.pipeline import split_mtp_units

VIRTUAL_STAGES = (1, 2, 4)
# DeepSeek-V3 sends each token to at most 4 nodes (DeepSeek-AI 2024, sec. 2.1.2).
NODE_LIMIT = 4
# The layout columns the rules below read (``LayoutSpace.rule_columns``).
RULE_COLUMNS = ("tensor_parallel", "pipeline_parallel", "context_parallel")
EXPERT_LEVERS = ("moe_overlap", "max_nodes_per_token", "moe_dispatcher", "moe_recompute",
                 "moe_host_overhead_us")


def layout_axes(values: Mapping[str, float], also=frozenset()) -> dict[str, np.ndarray]:
    """The refined model's own axes for one configuration (``LayoutSpace.extra``)."""
    axes = moe.expert_layout_axes(values, also)
    # (each v that splits some p's layers evenly divides them all; admissible
    # keeps it only where it does)
    units = _pipeline_units(values)
    even = [v for v in range(1, units + 1) if units % v == 0]
    axes["virtual_stages"] = np.asarray(sorted(set(VIRTUAL_STAGES) | set(even)), np.int64)
    if int(values["num_experts"]) > 1:
        axes["moe_overlap"] = np.asarray([0.0, A2A_OVERLAP])
        axes["max_nodes_per_token"] = np.asarray([0, NODE_LIMIT], np.int64)
        # HybridEP is a plan of its own only where its rate differs from DeepEP's
        # (the Hopper presets take DeepEP's measured one for both).
        backends = [1] if (values["hybridep_link_efficiency"]
                           == values["deepep_link_efficiency"]) else [1, 2]
        axes["moe_dispatcher"] = np.asarray([0, *backends], np.int64)
    return axes


def _pipeline_units(values: Mapping[str, float]) -> int:
    """What the pipeline splits: the layers, + the embedding and the output layer
    with ``pipeline_split_embedding``, + the MTP modules with ``mtp_in_pipeline_split``."""
    return (int(values["num_layers"]) + 2 * int(values["pipeline_split_embedding"])
            + split_mtp_units(values))


def admissible(values: Mapping[str, float],
               cand: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The rows whose virtual stages go with their pipeline (``LayoutSpace.admissible``):
    the standard 1, 2 and 4, or a ``v`` with ``p v`` dividing the layers."""
    v = np.asarray(cand["virtual_stages"])
    p = np.asarray(cand["pipeline_parallel"])
    even = _pipeline_units(values) % (p * v) == 0
    return {"virtual_stages": np.isin(v, VIRTUAL_STAGES) | even}


def meaningless(values: Mapping[str, float],
                cand: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per searched column, the candidate rows where it changes nothing (module doc)."""
    n = len(cand["tensor_parallel"])

    def col(name):
        return np.asarray(cand[name]) if name in cand else np.full(n, float(values[name]))

    no_pipeline = col("pipeline_parallel") == 1
    e = col("expert_parallel")
    no_experts = (e == 1) | (int(values["num_experts"]) == 1)
    etp = col("expert_tensor_parallel")
    ep_per_node = np.clip(float(values["gpus_per_node"]) / etp, 1.0, e)
    nodes = e / ep_per_node
    out = {"virtual_stages": no_pipeline, "pipeline_schedule": no_pipeline,
           "cp_comm": col("context_parallel") == 1,
           "sequence_parallel": col("tensor_parallel") == 1,
           "expert_tensor_parallel": np.full(n, int(values["num_experts"]) == 1)}
    for name in EXPERT_LEVERS:
        out[name] = no_experts
    # A limit binds only where the group spans more nodes than the tightest
    # limit searched (then no two limits above the span differ either).
    limits = col("max_nodes_per_token")
    tightest = limits[limits > 0].min() if (limits > 0).any() else np.inf
    out["max_nodes_per_token"] = (no_experts | (col("moe_dispatcher") < 0.5)
                                  | (nodes <= tightest))
    return out
