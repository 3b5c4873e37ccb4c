"""The refined model as a package, one module per concern (overview: ``model``).

Everything other modules and tests use is re-exported here.
"""

from jaxmodel.models.refined import moe
from jaxmodel.models.refined.fields import (
    CLUSTER,
    DESCRIPTION,
    INPUTS,
    OUTPUTS,
    TERMS,
    RefinedInputs,
    RefinedOutputs,
)
from jaxmodel.models.refined.layer import (
    attention_width,
    layer_gemm_shapes,
    layer_weight_params,
    model_params,
)
from jaxmodel.models.refined.memory import layer_activation_bytes
from jaxmodel.models.refined.model import REFINED, refined_model
from jaxmodel.models.refined.pipeline import uneven_note
from jaxmodel.models.refined.rates import gemm_seconds, network
from jaxmodel.models.refined.validity import (
    layout_reasons,
    moe_layout_ok,
    moe_layout_reasons,
    refined_verdict,
)

__all__ = [
    "CLUSTER",
    "DESCRIPTION",
    "INPUTS",
    "OUTPUTS",
    "REFINED",
    "TERMS",
    "RefinedInputs",
    "RefinedOutputs",
    "attention_width",
    "gemm_seconds",
    "layer_activation_bytes",
    "layer_gemm_shapes",
    "layer_weight_params",
    "layout_reasons",
    "model_params",
    "moe",
    "moe_layout_ok",
    "moe_layout_reasons",
    "network",
    "refined_model",
    "refined_verdict",
    "uneven_note",
]
