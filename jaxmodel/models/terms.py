"""Step-time terms that mean the same in every model, defined once.

Models list them in their ``terms`` beside their own (as ``outputs.py`` does
for outputs); a term's ``name`` is its bottleneck category.  The categories of
every model's ``bottleneck`` output start with these names in this order, so a
category's code is the same in every dataset; a model's own terms follow them,
then ``invalid``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

from jaxmodel.fields import OutputField

TermKind = Literal["compute", "bubble", "communication"]


class Term(NamedTuple):
    """One step-time term of a model, as everything outside the model sees it.

    Bottleneck categories, regimes, verdicts, plot stacks, report tables and
    the dashboard's breakdown are all derived from a model's ``terms``.

    Attributes:
      name: the bottleneck category it sets when it is the largest term
        (``tp_comm``); a name in ``jaxmodel.models.terms.SHARED_TERMS`` keeps
        that category's code.
      output: the output column holding the term, in ms (``tp_comm_ms``).
      label: a short legend label (``TP all-reduce``).
      colour: its colour in plots, ``#rrggbb``.
      kind: which regime it sets as the largest term: ``compute``
        (compute-bound or overhead-limited), ``bubble`` (bubble-bound) or
        ``communication`` (communication-bound).
      title: the longer label of text tables (``tensor-parallel all-reduce``).
      what: the term in a verdict sentence (``the tensor-parallel all-reduce``).
      lever: ``lever(inputs, outputs) -> str``, the verdict's concrete lever
        when this collective is the bottleneck (host side), or None.
    """

    name: str
    output: str
    label: str
    colour: str
    kind: TermKind = "communication"
    title: str = ""
    what: str = ""
    lever: Callable[[Mapping[str, float], Mapping[str, Any]], str] | None = None


def _tp_lever(inputs: Mapping[str, float], outputs: Mapping[str, Any]) -> str:
    return (f"Lower tensor parallelism (t = {int(inputs['tensor_parallel'])}) or widen the "
            "interconnect; a larger micro-batch does not help, TP traffic grows with it")


def _pp_lever(inputs: Mapping[str, float], outputs: Mapping[str, Any]) -> str:
    return (f"Use fewer pipeline stages (p = {int(inputs['pipeline_parallel'])}) or widen the "
            "interconnect")


def _dp_lever(inputs: Mapping[str, float], outputs: Mapping[str, Any]) -> str:
    # The all-reduce (2 P / (t p) bytes) and the backward pass (4 P b m s / (t p F))
    # shrink alike with more sharding, so t and p are no lever: it hides once
    # b m s >= (d - 1) / d x F / B tokens per replica, i.e. more micro-batches.
    # Backward (2/3 compute) grows with m while the all-reduce does not.
    m = int(inputs["gradient_accum_steps"])
    compute = float(outputs["compute_time_ms"])
    dp_raw = float(outputs.get("dp_allreduce_raw_ms", 0.0))
    m_hide = math.ceil(m * dp_raw / (2.0 / 3.0 * compute)) if compute > 0 else m
    return (f"Raise gradient-accumulation micro-batches to m >= {m_hide} (now {m}) so the "
            "backward pass hides it, or widen the interconnect")


def _moe_lever(inputs: Mapping[str, float], outputs: Mapping[str, Any]) -> str:
    # Dispatch and combine bytes per GPU do not shrink with more micro-batches
    # or more replicas; they leave NVLink when the EP group spans nodes.
    e = int(inputs.get("expert_parallel", 1))
    etp = int(inputs.get("expert_tensor_parallel", 1))
    g = int(inputs.get("gpus_per_node", 8))
    inside = max(g // max(etp, 1), 1)
    if e * etp > g:
        ep = (f"Keep expert parallelism inside the NVLink domain (e = {e} spans "
              f"{-(-e * etp // g)} nodes of {g} GPUs; e <= {inside} stays in one)")
    else:
        ep = f"Widen NVLink or lower expert parallelism (e = {e}, inside one node)"
    return (f"{ep}, overlap it with compute (moe_overlap, 1F1B all-to-all overlap), or use "
            "a hierarchical dispatcher with node-limited routing")


COMPUTE = Term("compute", "compute_time_ms", "compute", "#4C72B0", "compute", "compute",
               "compute")
TP_COMM = Term("tp_comm", "tp_comm_ms", "TP all-reduce", "#DD8452", "communication",
               "tensor-parallel all-reduce", "the tensor-parallel all-reduce", _tp_lever)
PP_COMM = Term("pp_comm", "pp_comm_ms", "PP send/recv", "#55A868", "communication",
               "pipeline point-to-point", "the pipeline point-to-point transfer", _pp_lever)
PIPELINE_BUBBLE = Term("pipeline_bubble", "pipeline_bubble_ms", "pipeline bubble", "#C44E52",
                       "bubble", "pipeline bubble", "the pipeline bubble")
DP_ALLREDUCE = Term("dp_allreduce", "dp_allreduce_ms", "exposed DP all-reduce", "#8172B3",
                    "communication", "exposed DP all-reduce",
                    "the exposed data-parallel gradient all-reduce", _dp_lever)
MOE_COMM = Term("moe_comm", "moe_comm_ms", "exposed expert all-to-all", "#937860",
                "communication", "exposed expert all-to-all",
                "the expert all-to-all (token dispatch and combine)", _moe_lever)

SHARED_TERMS: tuple[Term, ...] = (COMPUTE, TP_COMM, PP_COMM, PIPELINE_BUBBLE, DP_ALLREDUCE,
                                  MOE_COMM)
INVALID = "invalid"
BOTTLENECKS: tuple[str, ...] = (*(t.name for t in SHARED_TERMS), INVALID)


def bottleneck_categories(terms: tuple[Term, ...]) -> tuple[str, ...]:
    """The ``bottleneck`` output's categories for a model with ``terms``:
    ``BOTTLENECKS`` with the model's own term names inserted before ``invalid``."""
    own = tuple(t.name for t in terms if t.name not in BOTTLENECKS)
    return (*BOTTLENECKS[:-1], *own, INVALID)


def bottleneck_output(terms: tuple[Term, ...]) -> OutputField:
    """The ``bottleneck`` output field of a model with ``terms``."""
    return OutputField("bottleneck", "", "largest step-time term", "category",
                       bottleneck_categories(terms))
