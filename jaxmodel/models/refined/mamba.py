"""Mamba-2 layers and hybrid models (``mamba_layers``): parameters, FLOPs, time and memory.

A hybrid model (Nemotron-H, Nemotron-3; Megatron-Core's ``MambaModel`` with a
``hybrid_layer_pattern``) stacks separate layers of four kinds: ``M`` a
Mamba-2 mixer, ``*`` a self-attention mixer, ``E`` an MoE FFN and ``-`` a
dense FFN, each with its own pre-norm and residual add; a mixer layer has no
FFN and an FFN layer no mixer.  Here ``num_layers`` counts all of them (the
pattern's length, as Megatron-Core does): ``mamba_layers`` are Mamba-2
layers, ``attention_layers`` attention layers and the rest FFN layers, of
which the ``dense_layers`` / ``moe_layer_interval`` rule picks the MoE ones
(Nemotron-3: every FFN layer; ``moe_view`` hands the MoE module the mixer
layers as layers without an MoE FFN).  The refined model keeps its *average
layer*: each block of a transformer layer (attention, FFN) enters weighted by
the share of layers that have it (``attention_share``, ``ffn_share``), and the
Mamba-2 mixer by ``mamba_share``; each layer kind's norm, residual add and
kernels count once per layer of that kind.  With ``mamba_layers`` 0 (the
default) every layer is a transformer layer and the model's expressions are
selected unchanged (``hybrid``).

The Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", sec. 7.1, the
parallel Mamba block; Megatron-Core ``mamba_mixer.py``), symbols ``h``
hidden, ``H`` heads (``mamba_heads``), ``P`` head dimension, ``d = H P``
inner width, ``G`` groups of B and C, ``N`` state size, ``K`` conv width,
``Q`` chunk length:

* **Parameters**: the in-projection ``h -> 2 d + 2 G N + H`` (``z``, ``x``,
  ``B``, ``C``, ``dt``), the depthwise causal conv1d over ``x, B, C``
  (``(d + 2 G N) K`` and a bias), ``A``, ``D`` and the ``dt`` bias (``H``
  each), the gated RMSNorm (``d``) and the out-projection ``d h``.  The
  layer's pre-norm (``h``) is left out as the transformer layer's are.
* **GEMMs**: in- and out-projection, column- and row-parallel (Megatron-Core
  splits heads and groups by ``t``), forward, input and weight gradients at
  their shapes' rates (``rates.gemm_seconds``).
* **SSD scan** (sec. 6, the chunked state-space-dual algorithm): per chunk
  of ``Q`` tokens the diagonal block ``C B^T`` (per group, ``2 Q^2 N``) masked
  and applied to ``x`` (per head, ``2 Q^2 P``), the chunk's final state
  ``B^T x`` (``2 Q N P``) and the states' contribution to the outputs ``C h``
  (``2 Q N P``); forward FLOPs per token ``2 G Q N + H (2 Q P + 4 N P)``
  (the inter-chunk recurrence, ``O(H N P / Q)``, is memory traffic).  Like
  the attention core it is model FLOPs outside the weight GEMMs; backward
  twice the forward.  The kernels (Triton, ``mamba_ssm``'s
  ``mamba_chunk_scan_combined``: five launches of small tiled matmuls over
  ``Q x Q`` blocks and the chunk states) run at ``SSD_PEAK_FRACTION`` of the
  bf16 peak, besides their bytes below: measured on one H100 (vLLM PR 27299,
  ``ssd_peak_fraction``), 0.137, a quarter of what a fused-attention kernel
  reaches there (the model took that rate before, having no measurement).  The
  same fraction is taken on every GPU and for the backward pass (the same
  Triton kernels; no measurement of either was found).
* **Memory-bound bytes** (forward, per token, bf16; backward twice):
  the conv1d reads and writes ``d + 2 G N`` (4 bytes each), the gated
  RMSNorm reads ``y`` and ``z`` and writes its output (6 per ``d``), the
  scan reads ``x, B, C`` and writes ``y`` (2 per element) and writes and
  reads the fp32 chunk states (``8 H P N / Q``).
* **Stored activations** (per token, bf16, before the split by ``t``):
  the in-projection's output ``z x B C dt`` (the fused conv-scan function
  saves it and recomputes the conv in its backward pass), the scan output
  ``y`` and the gated norm's output (the out-projection's input, 1 byte
  under FP8); the layer's pre-norm input and the in-projection's input count
  as the norm inputs of a transformer layer do.
* **Kernels**: ``MAMBA_LAYER_KERNELS`` per layer and micro-batch; in a
  hybrid with dropless MoE layers all of them at the host's pace
  (``paced_layer_share``).
* **TP collectives**: as the attention block's, one pair per Mamba layer.
"""

from __future__ import annotations

from types import SimpleNamespace

from jaxmodel.deferred import jnp
from jaxmodel.models.refined import moe
from jaxmodel.models.refined.rates import BF16, low_precision_gemms

# Kernels of one Mamba-2 layer and micro-batch, forward and backward: Megatron-
# Core's MambaMixer in training (megatron/core/ssm/mamba_mixer.py,
# _ssm_training) calls mamba_ssm's mamba_split_conv1d_scan_combined without
# rmsnorm_weight and outproj_weight, so the gate z goes into the scan and the
# mixer's own norm and out-projection follow it.  Forward the pre-norm, the
# in-projection, the conv1d, the five SSD kernels of mamba_ssm's
# ops/triton/ssd_combined.py _mamba_chunk_scan_combined_fwd (_chunk_cumsum_fwd,
# _chunk_state_fwd, _state_passing_fwd, _bmm_chunk_fwd C B^T, _chunk_scan_fwd),
# the norm, the out-projection, the residual add and the two TP collectives
# (13), and MAMBA_EAGER_KERNELS of the mixer's eager ops around the scan;
# backward the norm, two GEMMs per projection (4), the conv1d again and its
# gradient (2), the SSD backward (below), the norm, the residual and two TP
# collectives (11 besides the SSD backward) and the eager ops' gradients.
# The SSD backward, _mamba_chunk_scan_combined_bwd in the same file, launches
# with z: dt.clone(); the forward's _chunk_cumsum_fwd, _bmm_chunk_fwd,
# _chunk_state_fwd and _state_passing_fwd again (5); _chunk_scan_bwd_dz (the
# gate's gradient, 1); _chunk_scan_bwd_dstates, _state_passing_bwd,
# _chunk_scan_chunk_state_bwd_dx, _chunk_state_bwd_db, _chunk_scan_bwd_dC,
# _chunk_scan_bwd_dcb and _bmm_chunk_bwd twice (8); the eager ops on ddA:
# ddA_cumsum_prev[..., -1] += (1), .flip().cumsum().flip() (3), ddA += ddA_next
# + ddA_prev (2); and _chunk_scan_bwd_ddAcs_stable and _chunk_cumsum_bwd (2):
# 22.  The reductions inside the Triton wrappers (e.g. dD's sum) are left out:
# a lower bound.  (The count before took the SSD backward at 10, no eager ops,
# and summed the backward's 21 to 20: 33.)
SSD_BACKWARD_KERNELS = 22.0
# _ssm_training's eager ops: rearrange(zxBCdt, "l b d -> b l d").contiguous()
# (a copy), A = -torch.exp(A_log.float()) (cast, exp, neg: the parameters are
# bf16 under Megatron's Float16Module), dt_bias.float() (a cast) and y's
# rearrange(...).contiguous() (a copy): 6 forward; backward the two copies'
# gradients (copies), neg's and exp's (a neg and a mul) and the two casts
# back: 6.
MAMBA_EAGER_KERNELS = 6.0
MAMBA_LAYER_KERNELS = 13.0 + 11.0 + SSD_BACKWARD_KERNELS + 2.0 * MAMBA_EAGER_KERNELS
# Half of a transformer layer's kernels belong to each block (layer.py's
# _LAYER_KERNELS 60 = attention 30 + FFN 30); a hybrid model's norm and
# residual add are one per layer, so its per-layer [s b h] traffic is half a
# transformer layer's.
HALF = 0.5
# Bytes per element of the chunk states, written and read once (fp32).
STATE_BYTES = 8.0


# The SSD scan's rate, measured: vLLM PR 27299 (cyang49, 2025-10-25, "supporting
# performance results on single H100"; RishiAstra's microbenchmark script):
# mamba_ssm's Triton forward, mamba_chunk_scan_combined, at 128 heads of 64, one
# group, state 128 (granite-4.0-h-small's shape) and the chunk of 256 ("matching
# mamba config"), ran 1.206e7, 1.262e7, 1.292e7, 1.180e7, 1.107e7, 1.070e7 and
# 1.082e7 tokens/s over 4,096-262,144 tokens (1,024 and 2,048: launch-bound, left
# out); median 1.18e7.  ssd_peak_fraction takes off the time of the scan's bytes
# (the model charges them as memory traffic, forward_bytes_per_token) at the H100
# preset's HBM rate and divides the rest into the scan's FLOPs at H100's bf16 peak.
SSD_MEASURED_TOKENS_S = 1.18e7
SSD_MEASURED_SHAPE = dict(mamba_heads=128.0, mamba_head_dim=64.0, mamba_groups=1.0,
                          mamba_state_dim=128.0, mamba_chunk_size=256.0)
# H100 SXM: 989 TFLOP/s dense bf16 (datasheet), HBM 3.35 TB/s at the preset's
# STREAM-measured 0.876 (jaxmodel.models.presets, h100-sxm).
SSD_MEASURED_PEAK = 989e12
SSD_MEASURED_HBM = 3.35e12 * 0.876


def ssd_peak_fraction() -> float:
    """The fraction of the bf16 peak the SSD scan kernels reach, from the
    measurement above (the module doc): ``F / (peak (1 / rate - B / hbm))`` of
    the scan's forward FLOPs ``F`` and bytes ``B`` per token at its shape."""
    x = SimpleNamespace(**SSD_MEASURED_SHAPE)
    flop_seconds = 1.0 / SSD_MEASURED_TOKENS_S - scan_bytes_per_token(x) / SSD_MEASURED_HBM
    return float(scan_flops_per_token(x)) / (SSD_MEASURED_PEAK * flop_seconds)


# The inputs a model without Mamba-2 layers does not use.
HYBRID_INPUTS = ("attention_layers", "mamba_heads", "mamba_head_dim", "mamba_state_dim",
                 "mamba_groups", "mamba_conv_kernel", "mamba_chunk_size")


def hybrid(x):
    """True where the model has Mamba-2 layers (``mamba_layers`` > 0)."""
    return x.mamba_layers > 0.5


def attention_share(x):
    """Share of the layers that have an attention block (1 without Mamba)."""
    return jnp.where(hybrid(x), x.attention_layers / x.num_layers, 1.0)


def mamba_share(x):
    """Share of the layers that are Mamba-2 layers (0 without Mamba)."""
    return jnp.where(hybrid(x), x.mamba_layers / x.num_layers, 0.0)


def ffn_layers(x):
    """Layers with an FFN block: all of them, or in a hybrid those with no mixer."""
    return jnp.where(hybrid(x), x.num_layers - x.mamba_layers - x.attention_layers,
                     x.num_layers)


def ffn_share(x):
    """Share of the layers that have an FFN block (1 without Mamba)."""
    return jnp.where(hybrid(x), ffn_layers(x) / x.num_layers, 1.0)


def plain(x):
    """A dense transformer with standard attention (``moe.is_plain``) and no Mamba-2 layers."""
    return moe.is_plain(x) & ~hybrid(x)


def moe_view(x):
    """``x`` as the MoE rule reads it (``moe.moe_layers``: every
    ``moe_layer_interval``-th layer after ``dense_layers``): a hybrid's mixer
    layers count with the leading layers that have no MoE FFN, so that the MoE
    layers are picked among its FFN layers.  Unchanged without Mamba."""
    return x._replace(dense_layers=jnp.where(
        hybrid(x), x.dense_layers + x.mamba_layers + x.attention_layers, x.dense_layers))


def _mixed(x, attention_value, mamba_value):
    """A hybrid's mixers, each kind in its share of the layers."""
    return attention_share(x) * attention_value + mamba_share(x) * mamba_value


def _ffn(x, moe_value, dense_value):
    """A hybrid's FFN blocks: the MoE layers' share (``moe_view``) and the other FFN layers'."""
    f = moe.moe_fraction(x)
    return f * moe_value + (ffn_share(x) - f) * dense_value


def layer_active_params(x):
    """Weights one token meets in a hybrid's average layer (``x``: ``moe_view``)."""
    return (_mixed(x, moe.attention_params(x), layer_params(x))
            + _ffn(x, moe.moe_block_active_params(x), moe.dense_ffn_params(x)))


def layer_resident_params(x):
    """Weights of a hybrid's average layer every tensor-parallel group holds: the
    mixers, dense FFNs, routers and shared experts (``x``: ``moe_view``)."""
    block = moe.moe_block_resident_params(x)
    return (_mixed(x, moe.attention_params(x), layer_params(x))
            + _ffn(x, block, moe.dense_ffn_params(x)))


def total_params(x):
    """Every parameter of a hybrid: ``L`` average layers of every expert and the embeddings."""
    return (x.num_layers * (layer_resident_params(x) + moe.layer_expert_params(x))
            + moe.embedding_params(x))


def active_params(x):
    """Parameters one token of a hybrid uses: ``L`` average active layers and the embeddings."""
    return x.num_layers * layer_active_params(x) + moe.embedding_params(x)


def ffn_width(x):
    """A hybrid's average FFN width for activations and kernels (``moe.ffn_width``)."""
    return _ffn(x, (x.experts_per_token + x.shared_experts) * x.moe_ffn_hidden_dim,
                x.ffn_hidden_dim)


def tp_collectives_per_layer(x, full_recompute):
    """TP collectives of a hybrid's average layer (``moe.tp_collectives_per_layer``):
    one pair per mixer (attention or Mamba-2) and per tensor-parallel FFN block."""
    blocks = _mixed(x, 1.0, 1.0) + _ffn(x, x.shared_experts > 0.5, 1.0)
    return (2.0 + full_recompute) * blocks


def paced_layer_share(x):
    """Share of a hybrid's layers that a dropless MoE layer's sync leaves at the
    host's pace (``moe.paced_layer_share``; ``x``: ``moe_view``).

    Nemotron-3's layer patterns interleave the MoE layers with the mixers from
    the start (Megatron-Bridge's nemotron_h_provider.py, the presets' Nano
    ``MEMEM*EMEMEM*E...`` and Super ``MEMEMEM*EMEM...``): every Mamba-2 and
    attention layer but the first follows an MoE layer in the forward pass,
    so its kernels are issued by a host that the sync before them left
    without a lead.  All layers, 1 (the leading mixer layer is counted too:
    1 of Nano's 52 layers, of Super's 88; the pattern is no model input).  A
    hybrid without MoE layers (Nemotron-H): 0.
    """
    return jnp.where(moe.moe_layers(x) > 0.5, 1.0, 0.0)


def mixer(x, attention_value, mamba_value):
    """The average layer's mixer: ``attention_value`` unchanged without Mamba, else
    the attention and Mamba-2 values weighted by their shares of the layers."""
    mixed = attention_share(x) * attention_value + mamba_share(x) * mamba_value
    return jnp.where(hybrid(x), mixed, attention_value)


def inner_width(x):
    """``d = H P``: the SSM's inner width."""
    return x.mamba_heads * x.mamba_head_dim


def conv_width(x):
    """Channels of the depthwise conv1d, ``x, B, C``: ``d + 2 G N``."""
    return inner_width(x) + 2.0 * x.mamba_groups * x.mamba_state_dim


def in_proj_width(x):
    """Outputs of the in-projection, ``z x B C dt``: ``2 d + 2 G N + H``."""
    return inner_width(x) + conv_width(x) + x.mamba_heads


def gemm_params(x):
    """Weights of the in- and out-projections: ``h (2 d + 2 G N + H) + d h``."""
    return x.hidden_dim * (in_proj_width(x) + inner_width(x))


def layer_params(x):
    """All parameters of one Mamba-2 mixer (module doc)."""
    conv = conv_width(x) * (x.mamba_conv_kernel + 1.0)
    return gemm_params(x) + conv + 3.0 * x.mamba_heads + inner_width(x)


def gemm_shapes(x):
    """``(n, k)`` of the mixer's two GEMMs on one GPU: in-projection
    ``[tok, h] x [h, (2 d + 2 G N + H) / t]``, out-projection ``[tok, d / t] x [d / t, h]``."""
    t = x.tensor_parallel
    return ((in_proj_width(x) / t, x.hidden_dim), (x.hidden_dim, inner_width(x) / t))


def scan_flops_per_token(x):
    """Forward FLOPs of the SSD scan per token, all heads: ``2 G Q N + H (2 Q P + 4 N P)``."""
    q, n, p = x.mamba_chunk_size, x.mamba_state_dim, x.mamba_head_dim
    return 2.0 * x.mamba_groups * q * n + x.mamba_heads * (2.0 * q * p + 4.0 * n * p)


def forward_bytes_per_token(x):
    """Memory-bound bytes of one Mamba-2 mixer's forward pass per token (module doc),
    all heads (divide by ``t`` for one GPU)."""
    conv = 2.0 * BF16 * conv_width(x)
    gated_norm = 3.0 * BF16 * inner_width(x)
    return conv + gated_norm + scan_bytes_per_token(x)


def scan_bytes_per_token(x):
    """The SSD scan's bytes per token, all heads: ``x, B, C`` in and ``y`` out
    (bf16) and the fp32 chunk states written and read (``8 H P N / Q``)."""
    states = (STATE_BYTES * x.mamba_heads * x.mamba_head_dim * x.mamba_state_dim
              / x.mamba_chunk_size)
    return BF16 * (conv_width(x) + inner_width(x)) + states


SSD_PEAK_FRACTION = round(ssd_peak_fraction(), 3)


def scan_seconds(flops, peak):
    """Seconds of the SSD scan kernels executing ``flops`` at ``peak`` (bf16
    FLOP/s): ``SSD_PEAK_FRACTION`` of it (their bytes are charged apart)."""
    return flops / (peak * SSD_PEAK_FRACTION)


def activation_bytes(x):
    """Bytes one Mamba-2 mixer stores per ``s b h`` before the split by ``t``: the
    in-projection output, the scan output and the out-projection's input."""
    d = inner_width(x)
    return (BF16 * in_proj_width(x) + BF16 * d + (BF16 - low_precision_gemms(x)) * d) \
        / x.hidden_dim
