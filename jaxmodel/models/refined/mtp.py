"""Multi-token prediction (``mtp_layers``): the modules' parameters, FLOPs, time and memory.

DeepSeek-AI 2024 (DeepSeek-V3 Technical Report), sec. 2.2: MTP module ``k``
normalises the previous depth's hidden state and the embedding of token
``i + k`` (RMSNorm each; the embedding is the main model's, shared),
concatenates them and projects ``2 h -> h`` (``M_k``), runs one transformer
block and predicts through the shared output head with its own
cross-entropy loss.  Megatron-Core (``--mtp-num-layers``,
``megatron/core/transformer/multi_token_prediction.py``) builds the block
with the decoder's last layer spec (an MoE layer in DeepSeek-V3), the
projection ``eh_proj`` as a column-parallel linear, and, without a custom
pipeline layout, places every module on the last pipeline stage, which then
builds the input embedding as well; a custom layout can count each module as
a unit of the split (``mtp_in_pipeline_split``, ``jaxmodel.models.refined.pipeline``).

Per module and micro-batch, on the last stage:

* **Parameters**: the block, of the last layer's kind (``block_inputs``),
  and the projection ``2 h^2`` (split by ``t``); when the model is untied and
  ``p > 1`` the last stage also holds the input embedding, ``V h / t`` (once,
  shared by the modules).  The three norms (``3 h``) are left out (< 0.01%).
  DeepSeek-V3: the MoE block 11.51B and the projection 0.10B; its Hugging Face
  checkpoint stores the module with its own copies of the embedding and the
  head (``2 V h``, 1.85B): 13.46B, the "14B of MTP module weights" beside
  the 671B.
* **FLOPs**: the block's (its active weights and the attention core), the
  projection's ``2 x 2 h^2`` per token and the output layer's ``2 h V`` per
  token again, each three times (forward, input and weight gradients), as
  Megatron-LM's ``num_floating_point_operations`` counts them.
* **Time**: the block as one more layer of the last stage (the average layer
  of ``jaxmodel.models.refined.layer``: its GEMMs, kernels, collectives and
  expert all-to-all; DeepSeek-V3's dense and MoE layers have active FFN
  weights within 0.5% of each other), the output layer and loss again, and
  the projection's three GEMMs (``projection_seconds``).
* **Memory**: the block's stored activations as one more layer's, the two
  norm inputs and the projection's input ``[s b 2h]`` in bf16
  (``INPUT_BYTES`` per ``s b h``), and a second set of logits.
"""

from __future__ import annotations

from jaxmodel.deferred import jnp
from jaxmodel.models.refined import moe
from jaxmodel.models.refined.rates import gemm_seconds

# Bytes per s b h one module stores before its block (bf16): the inputs of its
# two norms (hidden state and embedding, 2 + 2) and the projection's input,
# their normalised concatenation of 2 h (4).
INPUT_BYTES = 8.0


def modules(x):
    """Multi-token-prediction modules, ``mtp_layers`` (0: none)."""
    return x.mtp_layers


def last_layer_is_moe(x):
    """True where the decoder's last layer (index ``L - 1``) is an MoE layer:
    after the ``dense_layers``, on the ``moe_layer_interval`` grid."""
    rest = x.num_layers - x.dense_layers
    on_grid = jnp.mod(rest - 1.0, x.moe_layer_interval) < 0.5
    return (x.num_experts > 1.5) & (rest > 0.5) & on_grid


def block_inputs(x):
    """``x`` with every layer of the last layer's kind, so that the per-layer
    functions of ``moe`` give the MTP block's own values."""
    moe_block = last_layer_is_moe(x)
    return x._replace(dense_layers=jnp.where(moe_block, 0.0, x.num_layers),
                      moe_layer_interval=jnp.ones_like(x.moe_layer_interval))


def projection_params(x):
    """The projection ``M_k``: ``2 h x h``."""
    return 2.0 * x.hidden_dim * x.hidden_dim


def params(x):
    """Parameters the modules add to the model (the embedding is shared)."""
    xb = block_inputs(x)
    block = moe.layer_resident_params(xb) + moe.layer_expert_params(xb)
    return modules(x) * (block + projection_params(x))


def active_params(x):
    """Parameters one token meets in the modules (block, projection)."""
    return modules(x) * (moe.layer_active_params(block_inputs(x)) + projection_params(x))


def resident_params(x, g):
    """Parameters per GPU every tensor-parallel group of the last stage holds for the
    modules' blocks (attention, dense FFN or router and shared experts) and
    projections, split by ``t``."""
    return modules(x) * (moe.layer_resident_params(block_inputs(x))
                         + projection_params(x)) / g.t


def embedding_params(x, g):
    """The input embedding the last stage holds for the modules where it would not
    otherwise (untied, ``p > 1``), per GPU: ``V h / t``."""
    on = (modules(x) > 0.5).astype(g.fdt)
    return on * g.pp_active * (1.0 - x.tied_embeddings) * g.V * g.h / g.t


def expert_params(x, g):
    """Routed-expert parameters per GPU of the modules' blocks (sharded by ``etp e``)."""
    return modules(x) * moe.layer_expert_params(block_inputs(x)) / (g.etp * g.e)


def model_flops(x, g, attn_core, logit_flops):
    """Model FLOPs of one micro-batch through the modules (all ``t c`` ranks):
    the block's weights and attention core (``attn_core``, the average layer's),
    the projection and the output layer (``logit_flops``, forward and backward)."""
    weights = moe.layer_active_params(block_inputs(x)) + projection_params(x)
    return modules(x) * (3.0 * (2.0 * g.b * g.s * weights + attn_core) + logit_flops)


def projection_seconds(x, g):
    """``(forward, total)`` seconds of one module's projection GEMMs on one GPU:
    ``[tok, 2h] x [2h, h / t]`` forward, input and weight gradients, in the layers'
    precision."""
    h, t, tok = g.h, g.t, g.tok
    fwd = gemm_seconds(g.gemm, tok, h / t, 2.0 * h, True)
    dgrad = gemm_seconds(g.gemm, tok, 2.0 * h, h / t, True)
    wgrad = gemm_seconds(g.gemm, 2.0 * h, h / t, tok, True)
    return fwd, fwd + dgrad + wgrad


def input_activation_bytes(x, g):
    """Bytes the modules store before their blocks, one micro-batch on one GPU
    (replicated over TP, split by it with sequence parallelism)."""
    return modules(x) * INPUT_BYTES * g.tok * g.h / g.rep_split
