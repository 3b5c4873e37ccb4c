"""One transformer layer: its parameters, GEMM shapes, FLOPs, bytes and kernels, timed.

* **FLOPs** from the architecture, not ``6 P``: per layer and micro-batch the
  forward pass costs ``2 b s W + 4 b s^2 h`` (``W`` the layer's weight-matrix
  parameters, the second term QK^T and attention x V), the logits
  ``2 b s h V``; backward is twice the forward.  For a GPT layer ``W = 12 h^2``
  and full recompute this is Narayanan et al. 2021 (SC21) eq. 3,
  ``96 B s l h^2 (1 + s / 6h + V / 16 l h)``.  Recompute (Korthikanti et al.
  2022): ``none`` (0), ``selective`` (1, the attention core is recomputed:
  ``+ 4 b s^2 h``), ``full`` (2, the whole forward again) or per-op (3,
  torchtitan's op policy: the forward GEMMs of every other matmul again,
  ``op_sac_recomputed_shapes``, and the memory-bound kernels).  FlashAttention
  (Dao et al. 2022) recomputes QK^T inside its backward (``+ 2 b s^2 h``) and
  moves no ``s^2`` tensor through memory.  MFU counts model FLOPs (no
  recompute) against the true bf16 peak; HFU adds recompute.
* **Sliding-window attention** (``sliding_window`` ``w`` in
  ``sliding_window_share`` of the layers; Beltagy et al. 2020, Longformer
  sec. 3.1; Jiang et al. 2023, Mistral 7B sec. 2): a query attends to the last
  ``min(s, w)`` tokens, so those layers' ``s^2`` becomes ``s min(s, w)`` in
  the FLOPs and the fused kernel runs only the band (``attention_keys``).
  The stored activations do not change: training keeps Q, K, V and the output
  of every token whatever the window (no score tensor with FlashAttention;
  without it the eager path materialises the whole masked square).
* **GEMMs**: each weight GEMM ``[tok, k] x [k, n]`` forward, its input
  gradient and its weight gradient, at the rate its shape reaches
  (``jaxmodel.models.refined.rates``); in a low ``precision`` (FP8,
  Micikevicius et al. 2022; block-scaled FP8; NVFP4) at that precision's peak
  and ceiling; the output layer in bf16.
* **Memory-bound kernels** (layer norms, bias-dropout-add, activation, softmax
  and dropout of the attention scores, cross-entropy, quantisation casts) at
  ``hbm_efficiency`` of ``hbm_bandwidth_tb_s``, with the bytes each moves
  counted below (Megatron-LM's fused kernels; with ``elementwise_fusion`` 0
  eager PyTorch's one kernel an op, torchtitan's Llama layer op by op:
  ``eager_elementwise``).
* **Gradient-buffer traffic** (``grad_buffer_traffic``): the weight-gradient
  GEMMs accumulate into the buffer, and the input embedding's dense gradient
  is added to it (Megatron-Core DDP with gradient accumulation fusion).
* **Kernels**: a fixed cost per kernel (``kernel_overhead_us``), for the
  ``_LAYER_KERNELS`` of a layer and micro-batch; kernels a CUDA graph replays
  (``cuda_graphs``) keep only the GPU's gap between them
  (``GRAPH_KERNEL_GAP_US``).

A new layer kind adds its parameters, GEMM shapes, bytes and kernels here,
selected by ``jnp.where`` as the MoE layer (``jaxmodel.models.refined.moe``)
and the Mamba-2 layer of a hybrid model (``jaxmodel.models.refined.mamba``:
its projections with the attention GEMMs, its SSD scan beside the attention
core, one norm and residual add per layer of each kind) are.
"""

from __future__ import annotations

from typing import NamedTuple

from jaxmodel.deferred import jnp
from jaxmodel.models.common import whole
from jaxmodel.models.refined import context, mamba, moe
from jaxmodel.models.refined.rates import BF16, flash_attention_seconds, gemm_seconds, kernel_keys

# Bytes moved by the memory-bound kernels of one layer's forward pass, per
# element of the tensor named (bf16 = 2 bytes, a dropout mask 1 byte).  The
# backward pass moves about twice as much (it reads the saved input and the
# incoming gradient and writes a gradient).  Megatron-LM fused kernels:
#   [s b h] tensors: 2 layer norms (read 2, write 2) + 2 bias-dropout-add
#   (read input and residual, write output and mask: 7)    = 22 bytes.
_HIDDEN_BYTES = 22.0
# Eager PyTorch (elementwise_fusion 0): torchtitan's Llama layer without
# torch.compile, every elementwise op its own kernel that reads its inputs and
# writes its output once (bf16 2 bytes, fp32 4, per element; a per-row [tok, 1]
# tensor counted as a kernel of no bytes).  Source: pytorch/torchtitan at the
# Dec 2024 benchmark, torchtitan/models/llama/model.py and models/norms.py:
#   RMSNorm (norm_type "rmsnorm", the llama3 configs' choice: norms.py RMSNorm,
#   not the Triton fused_rmsnorm): (x.float() * rsqrt(x.pow(2).mean(-1) + eps))
#   .type_as(x) * weight, per [s b h] element: float() 6, pow 8, mean 4, add
#   and rsqrt 0, multiply 8, type_as 6, * weight 4 = 36 bytes, 8 kernels.
#   Its autograd backward: * weight (input gradient 4, g * y 6 and its sum 2:
#   12, 3 kernels), type_as 6, x * r (g * r 8, g * x 12 and its row sum 4:
#   24, 3), mean (expand / N: 4, 1), rsqrt and add (3 kernels, per row),
#   pow (derivatives.yaml pow_backward: x.pow(1) 8, * 2 8, * g 12: 28, 3),
#   the two gradients of x.float() summed 12, float() 6 = 92 bytes, 16 kernels.
#   Residual adds h = x + attn, out = h + ffn: read 4, write 2 = 6 bytes,
#   1 kernel each; backward the residual stream's gradient summed with the
#   norm's (6 bytes, 1 kernel each).
#   Per layer on [s b h]: 2 x 36 + 2 x 6 = 84 bytes forward, 2 x 92 + 2 x 6
#   = 196 backward (the fused count, _HIDDEN_BYTES, is replaced).
_EAGER_HIDDEN_BYTES = (84.0, 196.0)
#   With norm_kernel 0 each norm is one kernel a pass instead (PyTorch's
#   F.layer_norm, as Composer's MPT runs its LPLayerNorm: llm-foundry
#   llmfoundry/models/layers/norm.py): forward reads x and writes y (4 bytes, 1
#   kernel), backward reads x and the gradient and writes dx (6 bytes; 2
#   kernels, dx and the weight's row reduction), so per layer 2 x 4 + 2 x 6 = 20
#   bytes forward and 2 x 6 + 2 x 6 = 24 backward, norms 2 (4) kernels.
_EAGER_ONE_KERNEL_NORM_BYTES = (20.0, 24.0)
_EAGER_NORM_KERNELS = ((16.0, 32.0), (2.0, 4.0))  # op by op, one kernel: fwd (bwd)
#   Rotary embedding (apply_rotary_emb, view_as_complex in fp32) per element of
#   q and of k: float() 6, complex multiply by freqs_cis 8 (freqs_cis [s, d/2]
#   left to the cache), view_as_real and flatten views, type_as 6 = 20 bytes,
#   3 kernels; backward the same three (cast 6, grad * conj(freqs) 8, cast 6).
_EAGER_ROPE_BYTES = 20.0
_EAGER_ROPE_KERNELS = 6.0  # forward and backward each: 3 kernels for q, 3 for k
#   repeat_kv (n_rep = a / kv > 1): unsqueeze.expand.reshape copies k and v,
#   reading kv d_h and writing a d_h elements each (2 bytes apiece); backward
#   sums the copies back (the same bytes), 2 kernels each way: 2 bytes per
#   element of q and k widths each for k and v, 4 per (q + kv) element.  The
#   transposes around F.scaled_dot_product_attention are views; its flash
#   backend reads them with head-interleaved strides and allocates its output
#   [b, s, a, d_h], so output.transpose(1, 2).contiguous() copies nothing.
_EAGER_REPEAT_KV_BYTES = 4.0
#   SwiGLU w2(F.silu(w1(x)) * w3(x)) per [s b f] element: silu 4 and the
#   product 6 forward (10, 2 kernels); backward the product's two gradients
#   6 + 6 and silu_backward 6 (18, 3 kernels).  An activation of one input
#   (two weight matrices) is 4 and 6, 1 kernel each; each further gate adds
#   a product (6 forward, 12 backward, 1 and 2 kernels).  Replaces mlp_bytes.
_EAGER_ACT_BYTES = (4.0, 6.0)
_EAGER_GATE_BYTES = (6.0, 12.0)
#   Kernels, forward (backward): norms 16 (32), residual adds 2 (2), RoPE 6
#   (6), the activation 1 (1): 25 (41); each gate 1 (2), repeat_kv 2 (2):
#   28 + 45 = 73 for Llama 3.  _LAYER_KERNELS counts one fused kernel for each
#   norm, residual add, the RoPE and the activation (6 forward, 6 backward);
#   eager adds the rest.
_EAGER_FWD_KERNELS = 25.0
_EAGER_BWD_KERNELS = 41.0
_EAGER_REPEAT_KV_KERNELS = 2.0
_FUSED_ELEMENTWISE_KERNELS = 6.0
#   A fused QKV projection (fused_qkv 1: MPT's Wqkv, split by qkv.chunk(3)):
#   the split's backward concatenates the gradients of q, k and v (torch.cat:
#   read and write 2 bytes an element, 1 kernel).  Linear biases (linear_bias
#   1): F.linear adds each bias in the GEMM (addmm), but its gradient is a
#   reduction of the output gradient over the tokens (grad.sum(0): 2 bytes read
#   an output element, 1 kernel a linear layer).
_EAGER_QKV_CAT_BYTES = 4.0
_EAGER_BIAS_GRAD_BYTES = 2.0
# Unpadded attention (unpadded_attention 1): LLM Foundry's flash_attn_fn
# (llmfoundry/models/layers/attention.py, attn_impl "flash", which requires
# flash-attn 1.0.3) passes q, k and v through flash-attn's bert_padding.unpad_input
# and the kernel's output through pad_input, whatever the padding mask (none is
# given in pre-training: all ones).  unpad_input gathers the kept rows
# (IndexFirstAxis: torch.gather, read and write 2 bytes an element); pad_input
# allocates zeros and scatters the rows into them (IndexPutFirstAxis: write 2,
# then read 2 and write 2).  Backward, pad_input's gradient is a gather (4 bytes)
# and each unpad_input's is zeros and a scatter_ (6 bytes).  Bytes per element
# of the q, k, v widths gathered and of the output width padded, forward
# (backward): gathered 4 (6), padded 6 (4).  Kernels: forward the 3 gathers,
# the zeros and the index_put, the all-ones mask (torch.ones_like) and in each
# of the 3 unpad_input calls its sum, nonzero, max().item(), cumsum and F.pad:
# 5 + 1 + 15 = 21; backward the gather and 3 zeros-and-scatter pairs: 7.
# Each unpad_input waits for the GPU twice (nonzero's count and max().item()),
# which drains the queue: from the first wait to the attention kernel the host
# cannot run ahead, and the 3 calls' sum, nonzero, max, cumsum, F.pad and gather
# (18 kernels) reach the GPU at the host's pace (host_kernel_us each, as after a
# dropless MoE layer's sync: moe.host_paced_seconds); the pad after the
# attention kernel and the backward (no sync) are queued ahead as usual.
_UNPAD_GATHERED_BYTES = (4.0, 6.0)
_UNPAD_PADDED_BYTES = (6.0, 4.0)
_UNPAD_KERNELS = (21.0, 7.0)
_UNPAD_PACED_KERNELS = 18.0
# Norms per layer (before attention and before the MLP), recomputed with
# norm_recompute (Megatron-Core --recompute-modules layernorm).
_NORMS_PER_LAYER = 2.0
#   [s b a s] attention scores: fused scale-mask-softmax (read 2, write 2) +
#   dropout (read 2, write 2, mask 1)                       =  9 bytes.
SCORE_BYTES = 9.0
#   FP8 attention (fp8_attention): Transformer Engine casts the attention's bf16
#   inputs Q, K, V to FP8 and its FP8 output O back to bf16 in the forward pass,
#   the output gradient dO to FP8 and the FP8 dQ, dK, dV back in the backward:
#   each element read at one width and written at the other, 2 + 1 = 3 bytes.
DPA_CAST_BYTES = 3.0
#   [s b f] feed-forward activation: read the (mlp_weight_matrices - 1) inputs,
#   write one: 2 x mlp_weight_matrices bytes (bias-GeLU 4, SwiGLU 6).
#   [s b V] logits, fused softmax cross-entropy, forward and backward: read
#   bf16 logits, write fp32 probabilities, read them, write bf16 gradients.
_LOGIT_BYTES = 12.0
#   Unfused (Megatron-Core's vocab_parallel_cross_entropy as PyTorch ops, per
#   logit): fp32 copy 6, max 4, subtract 8, exp 8, sum 4, divide 8 forward;
#   scale the saved softmax 8 and cast to bf16 6 backward = 52 bytes.
_LOGIT_UNFUSED_BYTES = 52.0
#   PyTorch's F.cross_entropy on fp32 logits (cross_entropy_fusion 3,
#   torchtitan), each kernel reading its inputs and writing its output once:
#   cast to fp32 6, log_softmax 8, forward; nll_loss_backward's zeros 4,
#   _log_softmax_backward_data 12, cast back to bf16 6, backward = 36 bytes.
#   Under loss parallelism (t > 1) DTensor's decomposition (torch/distributed/
#   tensor/parallel/loss.py): cast 6, amax 4, subtract 8, exp 8, sum 4, subtract
#   8 forward; zeros 4, exp 8, add 12, multiply 8, cast back 6 backward = 76.
_LOGIT_TORCH_BYTES = 36.0
_LOGIT_TORCH_PARALLEL_BYTES = 76.0
#   The same compiled by torch.compile (cross_entropy_fusion 4; torchtitan's
#   build_cross_entropy_loss wraps its loss in torch.compile under
#   --training.compile, torchtitan/components/loss.py of 2025): Inductor fuses
#   the fp32 upcast, log_softmax and nll_loss into one reduction over the bf16
#   logits, a single read with its online softmax (torch._inductor.config
#   online_softmax, on by default) 2, and the backward into one kernel that
#   reads them and writes the bf16 gradient, 2 + 2 = 6 bytes.  Under loss
#   parallelism the same kernels run on the vocabulary shard (the all-reduces
#   move a few values a token).
_LOGIT_COMPILED_BYTES = 6.0
# Kernels per layer and micro-batch, forward and backward (Megatron-Core with
# Transformer Engine: norms, 4 GEMMs + 8 gradient GEMMs, attention, bias,
# activation and dropout-add kernels, TP/SP collectives, casts and copies).
_LAYER_KERNELS = 60.0
# CUDA graphs (cuda_graphs).  A graph replays its kernels without the host's
# launch: NVIDIA's "Getting Started with CUDA Graphs" (A. Gray, 2019) times 20
# short kernels of 2.9 us at 3.8 us each launched from a stream and 3.4 us
# each from a graph, so a captured kernel keeps a gap of 0.5 us on the GPU
# (when kernel_overhead_us is smaller, that).  Per layer (1, Transformer
# Engine's make_graphed_callables over the scopes the MoE recipes set: attn,
# moe_router, moe_preprocess): the attention half of the layer's kernels (norm
# and QKV, RoPE, attention core, projection, bias-dropout-add and their
# gradients, 30 of 60) and the MoE router and dispatch preprocessing (the
# router's kernels forward and backward and the dispatcher's token counts:
# moe.graph_scope_kernels); the expert GEMMs, dispatch and combine stay eager.
# Full iteration (2): every kernel.
# In a dropless MoE layer the per-layer graphs leave the host's pace
# (moe.host_paced_seconds) where it was: the token-count sync stays in every
# MoE layer, so the host still sets the layer's pace and a replayed kernel
# saves only its launch gap.  Megatron-Bridge measured exactly that
# (skills/mbridge-perf-cuda-graphs/SKILL.md, pitfall 13: Qwen3-30B-A3B, H100
# BF16, all-to-all dispatcher, attn + moe_router + moe_preprocess graphs:
# 42.00 s an iteration against 41.36 s eager, no gain).  The full-iteration
# graph (2) needs static shapes, which dropless MoE gets by sizing each
# rank's dispatch and grouped-expert buffers to a fixed capacity (Megatron-
# Bridge's full-iteration recipes: moe_expert_rank_capacity_factor 1.5, paged
# stashing; Megatron-LM docs/user-guide/features/paged_stash.md, "sync-free
# expert execution": no per-step device query of the token counts): the
# graph covers the experts too, no count reaches the host, no host pace.
GRAPH_KERNEL_GAP_US = 0.5
_ATTN_SCOPE_KERNELS = 30.0
# Gradient-buffer traffic (grad_buffer_traffic 1), Megatron-Core DDP with
# gradient accumulation fusion:
# * each weight-gradient GEMM accumulates into the buffer (D = A B + C in the
#   buffer's precision): its epilogue reads and writes grad_buffer_bytes per
#   weight instead of writing the bf16 output the shape model counts, every
#   micro-batch: 2 g - 2 bytes more per weight (g = grad_buffer_bytes);
# * the input embedding's weight gradient is a dense [V, h] bf16 tensor
#   (PyTorch's embedding backward: zero-filled, 2 bytes, then the tokens' rows
#   added) that the DDP hook adds to the buffer (main_grad.add_: read 2 + g,
#   write g): 4 + 2 g bytes per embedding weight, every micro-batch.
# (The once-a-step passes over the buffer: jaxmodel.models.refined.data.)
_EMBEDDING_GRAD_BYTES = 4.0


class LayerTimes(NamedTuple):
    """One layer and the output layer, one micro-batch, one GPU (seconds, bytes).

    Attributes:
      gemm_fwd_s, gemm_dgrad_s, gemm_wgrad_s: the layer's weight GEMMs forward,
        input gradient and weight gradient.
      attn_fwd_s, attn_bwd_s: the attention core forward and backward.
      score_bytes: memory-bound bytes of the attention scores (0 with Flash).
      fwd_bytes, bwd_bytes, recompute_bytes: memory-bound bytes of the forward,
        backward and recompute passes.
      accum_layer_bytes: gradient-buffer accumulation bytes of the layer.
      moe_layer_again: 1 where the whole MoE layer is recomputed.
      layer_f, layer_recompute, layer_w, layer_s: forward, recompute, weight-
        gradient and total seconds of the layer (the backward, with recompute
        and kernel overheads, is ``layer_s - layer_f - layer_w``).
      logit_fwd_s, logit_s: the output layer's forward and total seconds.
      logit_bytes, accum_logit_bytes: its cross-entropy and accumulation bytes.
      embed_grad_s: the input embedding's gradient added to the buffer.
      qw: the attention width ``a x head_dim`` (or ``h``).
      ep_partners: one MoE layer's attention forward and backward and MLP block
        forward, input and weight gradient (``moe.paired_hidden_seconds``).
      dense_gemms: a dense layer's forward, input- and weight-gradient seconds
        of each weight GEMM of ``layer_gemm_shapes`` (three 4-tuples).
    """

    gemm_fwd_s: object
    gemm_dgrad_s: object
    gemm_wgrad_s: object
    attn_fwd_s: object
    attn_bwd_s: object
    score_bytes: object
    fwd_bytes: object
    bwd_bytes: object
    recompute_bytes: object
    accum_layer_bytes: object
    moe_layer_again: object
    layer_f: object
    layer_recompute: object
    layer_w: object
    layer_s: object
    logit_fwd_s: object
    logit_s: object
    logit_bytes: object
    accum_logit_bytes: object
    embed_grad_s: object
    qw: object
    ep_partners: object
    dense_gemms: object


def attention_width(x):
    """Width of the queries and the attention output: ``a x head_dim``, or ``h``."""
    return jnp.where(x.head_dim > 0.5, x.num_heads * x.head_dim, x.hidden_dim)


# The fused kernels' tile of keys (and of queries) under a causal or local mask:
# FlashAttention-3's forward at head dim 128 runs 128 x 128 tiles when causal or
# local, 176 keys otherwise (hopper/tile_size.h, tile_size_fwd_sm90).
ATTENTION_KEY_BLOCK = 128.0


def masked_tile_keys(band, s):
    """Keys a query runs, on average, when a fused kernel computes every tile a causal
    band of ``band`` keys touches (``band`` = ``s``: the causal square).

    Query tile ``i`` (of ``n = s / B``, ``B`` = ``ATTENTION_KEY_BLOCK``) runs the
    key tiles from the one holding key ``i B - band + 1`` to its own diagonal
    tile, ``k = 1 + ceil((band - 1) / B)`` of them (fewer near the start: ``i +
    1``), whole, the masked part of the edge tiles included: the mean over the
    ``n`` query tiles is ``B (k - k (k - 1) / (2 n))`` with ``k`` at most ``n``,
    ``s / 2 + B / 2`` for the causal square and ``2 B - B / n`` for a band of ``B``.
    """
    n = s / ATTENTION_KEY_BLOCK
    k = jnp.minimum(1.0 + jnp.ceil((band - 1.0) / ATTENTION_KEY_BLOCK), n)
    return ATTENTION_KEY_BLOCK * (k - k * (k - 1.0) / (2.0 * n))


def attention_keys(x):
    """Keys per query in the average layer's attention core: ``(counted, executed)``.

    Counted (model FLOPs and MFU): ``s`` in a full-attention layer (the whole
    square, as Megatron-LM and SC21 count it) and ``m = min(s, w)`` in a
    sliding-window layer (``w`` = ``sliding_window``).  Executed (the fused
    kernel's time): with a causal mask the kernel skips the tiles the mask
    empties and runs the rest whole (``masked_tile_keys``), so a full layer runs
    ``s / 2 + B / 2`` keys per query and a windowed one about ``k B`` (``k``
    tiles span the band and the diagonal: 256 keys for GPT-OSS's window of 128,
    which sees 128); without the mask ``s`` and ``m``.
    ``sliding_window_share`` of the layers are windowed (GPT-OSS: every
    other layer, ``w`` = 128); none when ``sliding_window`` is 0.
    """
    s = x.seq_length
    on = x.sliding_window > 0.5
    windowed = jnp.where(on, x.sliding_window_share, 0.0)
    m = jnp.minimum(s, jnp.where(on, x.sliding_window, s))
    counted = (1.0 - windowed) * s + windowed * m
    causal = (1.0 - windowed) * masked_tile_keys(s, s) + windowed * masked_tile_keys(m, s)
    return counted, jnp.where(x.causal_mask > 0.5, causal, counted)


def layer_weight_params(x):
    """Weight-matrix parameters of one transformer layer.

    Q and output projections ``2 h q`` (``q = h`` unless ``head_dim`` says
    otherwise), K and V ``2 h q kv / a`` (grouped-query attention), feed-forward
    ``mlp_weight_matrices x h f``; for GPT (``kv = a``, ``f = 4 h``, two
    matrices) ``12 h^2`` (Narayanan et al. eq. 2, whose biases and layer norms,
    13 h, are left out as < 0.1%).
    """
    h = x.hidden_dim
    return (2.0 * h * attention_width(x) * (1.0 + x.num_kv_heads / x.num_heads)
            + x.mlp_weight_matrices * h * x.ffn_hidden_dim)


def model_params(x):
    """All parameters: ``L`` layers plus one (tied) or two vocabulary embeddings."""
    return (x.num_layers * layer_weight_params(x)
            + (2.0 - x.tied_embeddings) * x.vocab_size * x.hidden_dim)


def layer_gemm_shapes(x):
    """``(n, k)`` of each weight GEMM of a layer on one GPU (``[tokens, k] x [k, n]``).

    Megatron-LM's tensor-parallel split: QKV (column-parallel, ``h (1 + 2 kv / a)
    / t`` outputs), the attention output projection (row-parallel, ``h / t``
    inputs), the first feed-forward GEMM (``(mlp_weight_matrices - 1) f / t``
    outputs: up, and gate for SwiGLU) and the second (``f / t`` inputs).  Their
    ``n k`` sum to ``layer_weight_params / t``.
    """
    h, t, f = x.hidden_dim, x.tensor_parallel, x.ffn_hidden_dim
    q = attention_width(x)
    return (
        (q * (1.0 + 2.0 * x.num_kv_heads / x.num_heads) / t, h),
        (h, q / t),
        ((x.mlp_weight_matrices - 1.0) * f / t, h),
        (h, f / t),
    )


def op_sac_recomputed_shapes(x):
    """``(n, k)`` of the GEMMs per-op selective recompute (``recompute`` 3) runs again.

    torchtitan's op policy keeps the output of every other matmul of the
    block's forward pass (``memory.op_sac_activation_bytes``), so the second,
    fourth and sixth run again in the backward pass: wk (``h -> kv d_h / t``),
    wo (``a d_h / t -> h``) and w3 (SwiGLU's up, ``h -> f / t``; with two
    matrices w2, ``f / t -> h``: the same FLOPs).  An MoE layer's are counted
    as its dense FFN's (the policy is torchtitan's for dense Llama blocks).
    """
    h, t, f = x.hidden_dim, x.tensor_parallel, x.ffn_hidden_dim
    q = attention_width(x)
    swiglu = x.mlp_weight_matrices > 2.5
    return (
        (q * x.num_kv_heads / x.num_heads / t, h),
        (h, q / t),
        (jnp.where(swiglu, f / t, h), jnp.where(swiglu, h, f / t)),
    )


def op_sac_recomputed_params(x):
    """Weight-matrix parameters whose forward GEMM per-op recompute runs again."""
    return sum(n_ * k_ for n_, k_ in op_sac_recomputed_shapes(x)) * x.tensor_parallel


def eager_elementwise(x, g):
    """Extra bytes and kernels of one dense layer's eager PyTorch elementwise ops.

    ``(fwd_bytes, bwd_bytes, fwd_kernels, bwd_kernels)`` per micro-batch and
    GPU, each the eager count (``_EAGER_*`` above, torchtitan's Llama code op
    by op) less the fused count the layer already charges (``_HIDDEN_BYTES``
    on ``[s b h]``, the activation's ``2 x mlp_weight_matrices`` bytes on
    ``[s b f]``, backward twice the forward; ``_FUSED_ELEMENTWISE_KERNELS``),
    with a fused QKV projection's split and the bias gradients where the layer
    has them (``fused_qkv``, ``linear_bias``).  Zero with ``elementwise_fusion``
    1 and for MoE and hybrid layers (their own kernels are counted as fused).
    """
    t, h, a, kv, f, tok, rep_split = g.t, g.h, g.a, g.kv, g.f, g.tok, g.rep_split
    eager = jnp.where(g.plain, 1.0 - x.elementwise_fusion, 0.0)
    q = attention_width(x) / t
    qk = q * (1.0 + kv / a)
    repeat = jnp.where(kv < a, 1.0, 0.0)
    gates = x.mlp_weight_matrices - 2.0
    # torchtitan's op-by-op fp32 RMSNorm (norm_kernel 1) or one kernel a norm (0);
    # the rotary embedding's ops only where the model has one.
    op_norm = jnp.where(x.norm_kernel >= 0.5, 1.0, 0.0)
    rope = jnp.where(x.rotary_embedding >= 0.5, 1.0, 0.0)
    hidden = tuple(op_norm * e + (1.0 - op_norm) * o
                   for e, o in zip(_EAGER_HIDDEN_BYTES, _EAGER_ONE_KERNEL_NORM_BYTES,
                                   strict=True))
    norm_k = tuple(op_norm * e + (1.0 - op_norm) * o
                   for e, o in zip(*_EAGER_NORM_KERNELS, strict=True))
    act, gate = _EAGER_ACT_BYTES, _EAGER_GATE_BYTES
    attn = (rope * _EAGER_ROPE_BYTES + repeat * _EAGER_REPEAT_KV_BYTES) * qk
    fused = _HIDDEN_BYTES * h / rep_split + 2.0 * x.mlp_weight_matrices * f / t
    fwd = tok * (hidden[0] * h / rep_split + attn + (act[0] + gates * gate[0]) * f / t
                 - fused)
    bwd = tok * (hidden[1] * h / rep_split + attn + (act[1] + gates * gate[1]) * f / t
                 - 2.0 * fused)
    # (the eager counts less the op-by-op norms and the RoPE, then what this layer has)
    other_fwd = _EAGER_FWD_KERNELS - _EAGER_NORM_KERNELS[0][0] - _EAGER_ROPE_KERNELS
    other_bwd = _EAGER_BWD_KERNELS - _EAGER_NORM_KERNELS[0][1] - _EAGER_ROPE_KERNELS
    fwd_k = other_fwd + norm_k[0] + rope * _EAGER_ROPE_KERNELS + gates \
        + repeat * _EAGER_REPEAT_KV_KERNELS - _FUSED_ELEMENTWISE_KERNELS
    bwd_k = other_bwd + norm_k[1] + rope * _EAGER_ROPE_KERNELS + 2.0 * gates \
        + repeat * _EAGER_REPEAT_KV_KERNELS - _FUSED_ELEMENTWISE_KERNELS
    # A fused QKV projection's split (its gradients concatenated) and the linear
    # layers' bias gradients (each a reduction of its output gradient), backward.
    fused_qkv = jnp.where(x.fused_qkv >= 0.5, 1.0, 0.0)
    bias = jnp.where(x.linear_bias >= 0.5, 1.0, 0.0)
    qkv = q * (1.0 + 2.0 * kv / a)
    outputs = qkv + 2.0 * h / rep_split + (x.mlp_weight_matrices - 1.0) * f / t
    bwd = bwd + tok * (fused_qkv * _EAGER_QKV_CAT_BYTES * qkv
                       + bias * _EAGER_BIAS_GRAD_BYTES * outputs)
    linears = (3.0 - 2.0 * fused_qkv) + 1.0 + x.mlp_weight_matrices
    bwd_k = bwd_k + fused_qkv + bias * linears
    return eager * fwd, eager * bwd, eager * fwd_k, eager * bwd_k


def _unpadded(x, g):
    """1 for a dense layer with ``unpadded_attention`` 1, else 0."""
    return jnp.where(g.plain, jnp.where(x.unpadded_attention >= 0.5, 1.0, 0.0), 0.0)


def unpadded_attention_elementwise(x, g):
    """Bytes and kernels of the unpad and pad copies around one dense layer's attention.

    ``(fwd_bytes, bwd_bytes, fwd_kernels, bwd_kernels)`` per micro-batch and GPU
    with ``unpadded_attention`` 1 (``_UNPAD_*`` above: flash-attn's bert_padding as
    LLM Foundry calls it), whatever ``elementwise_fusion`` (they are index ops
    around the attention call, not fusable elementwise ones); zero otherwise and
    for MoE and hybrid layers.
    """
    t, a, kv, tok = g.t, g.a, g.kv, g.tok
    on = _unpadded(x, g)
    q = attention_width(x) / t
    gathered = q * (1.0 + 2.0 * kv / a)
    fwd, bwd = (tok * (gb * gathered + pb * q)
                for gb, pb in zip(_UNPAD_GATHERED_BYTES, _UNPAD_PADDED_BYTES, strict=True))
    return on * fwd, on * bwd, on * _UNPAD_KERNELS[0], on * _UNPAD_KERNELS[1]


def unpadded_attention_paced_seconds(x, g, launch_s):
    """Extra seconds of one dense layer's forward pass where unpad_input's waits leave
    its kernels at the host's pace: ``_UNPAD_PACED_KERNELS`` at the pace after a
    wait (``moe.host_pace_per_kernel``, as a dropless MoE layer's kernels)."""
    return _unpadded(x, g) * _UNPAD_PACED_KERNELS * moe.host_pace_per_kernel(x, launch_s)


def layer_times(x, g) -> LayerTimes:
    """Seconds of one layer and of the output layer (``g``: ``Derived``)."""
    full, selective, flash, op_sac = g.full, g.selective, g.flash, g.op_sac
    t, c, b, s, h = g.t, g.c, g.b, g.s, g.h
    V, a, kv, f = g.V, g.a, g.kv, g.f
    peak, hbm_rate, rep_split, tok, plain = g.peak, g.hbm_rate, g.rep_split, g.tok, g.plain
    one_stage = g.one_stage

    # Each layer GEMM [tok, k] x [k, n] forward, its input gradient [tok, n] x
    # [n, k] and its weight gradient [k, tok] x [tok, n], at its shape's rate.
    # The average layer of an MoE / MLA model: its attention GEMMs, the dense
    # FFN or the router, shared and routed experts (grouped GEMMs of the
    # busiest rank), weighted by the share of MoE layers.
    # Without FlashAttention the two batched GEMMs (QK^T, attention x V) of
    # each head run at their shape's efficiency; the output layer's logits
    # GEMM runs in bf16.  Each GEMM is its own elementwise expression: in a
    # sweep that fixes the switches, XLA drops the GEMMs of the branches they
    # turn off (a dense model's MoE, FlashAttention's unfused path).  Stacking
    # them into one vectorised call instead (as this model once did) compiles
    # faster but evaluates every GEMM for every row, dead ones included, and
    # materialises the stack: 1.6x slower in a sweep of the default inputs.
    qw = attention_width(x)
    head_dim = jnp.where(plain, qw / a, moe.head_dim(x))
    rows = b * (a / t) * s / c

    # Each GEMM's rates are computed once (g.gemm) and each GEMM is evaluated
    # once: the dense shapes' passes are kept for the TP overlap pairing
    # (tensor.dense_overlap_seconds), the routed experts' for the host pace.
    # A layer GEMM of the average layer: the share of layers kept in BF16
    # (bf16_layers) runs it at the bf16 peak and ceiling, scaled from its time at
    # the low precision by the two rates' ratio (one factor per configuration,
    # not a second GEMM each: exact without the shape model, and with it the
    # BF16 share keeps the low precision's tile, wave and operand-byte terms).
    low_peak, low_ceiling, _ = g.gemm.low
    bf16_peak, bf16_ceiling, _ = g.gemm.bf16
    share = g.bf16_share
    kept = (1.0 - share) + share * (low_peak * low_ceiling) / (bf16_peak * bf16_ceiling)

    def gemm(m_, n_, k_, low=True):
        seconds = gemm_seconds(g.gemm, m_, n_, k_, low)
        return seconds * kept if low else seconds

    shapes = layer_gemm_shapes(x)
    dense_gemms = (tuple(gemm(tok, n_, k_) for n_, k_ in shapes),
                   tuple(gemm(tok, k_, n_) for n_, k_ in shapes),
                   tuple(gemm(k_, n_, tok) for n_, k_ in shapes))
    gemm_fwd_s, gemm_dgrad_s, gemm_wgrad_s = (sum(passes) for passes in dense_gemms)
    routed = moe.routed_passes(x, tok, gemm, hbm_rate)
    moe_gemm = moe.layer_gemm_seconds(
        x, tok, gemm, hbm_rate,
        mixer=lambda att, passes: mamba.mixer(
            x, att, sum(passes(n_, k_) for n_, k_ in mamba.gemm_shapes(x))),
        ffn_share=mamba.ffn_share(x), routed=routed)
    unfused_s = gemm(rows, s, head_dim, False) + gemm(rows, head_dim, s, False)
    logit_gemms = (gemm(tok, V / t, h, False), gemm(tok, h, V / t, False),
                   gemm(h, V / t, tok, False))
    expert_kernel_s = moe.expert_gemm_kernel_seconds(x, routed)
    gemm_fwd_s = jnp.where(plain, gemm_fwd_s, moe_gemm[0])
    gemm_dgrad_s = jnp.where(plain, gemm_dgrad_s, moe_gemm[1])
    gemm_wgrad_s = jnp.where(plain, gemm_wgrad_s, moe_gemm[2])

    # Attention core, 4 b s^2 h per sequence counted in full (as MFU counts it);
    # FlashAttention executes only the unmasked half of a causal square (and
    # only the band of a sliding window: attention_keys) and recomputes QK^T
    # in its backward (backward 2.5 x forward).  Without it the two batched
    # GEMMs of the whole square (unfused_s above), backward 2 x forward.
    # The kernel's fixed work per query tile and call (rates.kernel_keys), once per
    # call a query takes (context.attention_calls: one per ring step).
    _, executed_keys = attention_keys(x)
    executed_keys = kernel_keys(x, executed_keys, context.attention_calls(x, c))
    attn_fwd_flops = 4.0 * b * s * executed_keys * qw / (t * c)
    attn_fwd_flops = jnp.where(plain, attn_fwd_flops,
                               b * s * executed_keys
                               * mamba.mixer(x, moe.attention_core_flops(x), 0.0) / (t * c))
    flash_s = flash_attention_seconds(x, attn_fwd_flops, peak,
                                      jnp.where(plain, qw / a, moe.score_head_width(x)))
    attn_fwd_s = jnp.where(flash > 0.5, flash_s, unfused_s)
    attn_bwd_s = 2.0 * attn_fwd_s
    # Selective recompute checkpoints the core attention: its forward runs again
    # in the backward pass, FlashAttention's too (Megatron-Core's
    # checkpoint_core_attention); FlashAttention's own backward recomputes QK^T.
    attn_recompute_s = (full + selective + 0.5 * flash) * attn_fwd_s
    # A hybrid model's SSD scan (mamba.scan_flops_per_token) in its share of the
    # layers, at the SSD kernels' measured rate (mamba.SSD_PEAK_FRACTION);
    # backward twice the forward, again in full recompute.
    hybrid = mamba.hybrid(x)
    scan_fwd_s = mamba.mamba_share(x) * mamba.scan_seconds(
        tok * mamba.scan_flops_per_token(x) / t, peak)

    # Memory-bound bytes of one layer's forward pass per GPU (backward twice).
    hidden_bytes = _HIDDEN_BYTES * tok * h / rep_split
    # A hybrid model's layer has one norm and one residual add.
    hidden_bytes = jnp.where(hybrid, mamba.HALF * hidden_bytes, hidden_bytes)
    mlp_bytes = 2.0 * x.mlp_weight_matrices * tok * f / t
    # MoE: the FFN activation at the layer's width, and token permutation.
    mlp_bytes = jnp.where(plain, mlp_bytes,
                          2.0 * x.mlp_weight_matrices * tok * jnp.where(
                              hybrid, mamba.ffn_width(x), moe.ffn_width(x)) / t
                          + moe.permute_bytes(x, tok / t))
    # ... and its Mamba-2 mixers' conv1d, gated norm and scan traffic.
    mlp_bytes = jnp.where(hybrid, mlp_bytes + mamba.mamba_share(x) * tok / t
                          * mamba.forward_bytes_per_token(x), mlp_bytes)
    score_bytes = (1.0 - flash) * SCORE_BYTES * a * s * tok / t
    score_bytes = jnp.where(hybrid, mamba.attention_share(x) * score_bytes, score_bytes)
    # Low precision: each GEMM input is quantised in the forward pass, each
    # output gradient in the backward pass, at the precision's bytes per
    # element (derived.CAST_BYTES_PER_ELEMENT: amax, cast, transpose, scales).
    qkv_n = qw * (1.0 + 2.0 * kv / a) / t
    cast_fwd = tok * (2.0 * h / rep_split + qw / t + f / t)
    cast_bwd = tok * (qkv_n + 2.0 * h / rep_split + (x.mlp_weight_matrices - 1.0) * f / t)
    # MoE: the FFN block's casts are those of its shared and routed experts'
    # GEMMs, the routed ones on every routed copy (moe.ffn_cast_elements).
    moe_fwd, moe_bwd = moe.ffn_cast_elements(x, t, rep_split)
    cast_fwd = jnp.where(plain, cast_fwd, tok * (h / rep_split + qw / t + moe_fwd))
    cast_bwd = jnp.where(plain, cast_bwd, tok * (qkv_n + h / rep_split + moe_bwd))
    # Hybrid: each layer's pre-norm output and its second GEMM's input (the
    # attention output, the Mamba-2 gated norm output, the FFN activation);
    # the output gradients of its first GEMM (QKV, in-projection, FC1) and of
    # its second (h).
    fwd_in = mamba.mixer(x, qw / t, mamba.inner_width(x) / t) + mamba.ffn_share(x) * f / t
    bwd_out = (mamba.mixer(x, qkv_n, mamba.in_proj_width(x) / t)
               + mamba.ffn_share(x) * (x.mlp_weight_matrices - 1.0) * f / t)
    # A hybrid with MoE FFN layers: the mixer layers' own, the FFN layers'
    # from their blocks (moe.ffn_cast_elements over the FFN layers' share).
    fs = mamba.ffn_share(x)
    hyb_fwd, hyb_bwd = moe.ffn_cast_elements(x, t, rep_split, fs)
    mixer_in = (1.0 - fs) * h / rep_split
    moe_hybrid = moe.moe_fraction(x) > 0.0
    fwd_in = jnp.where(moe_hybrid, mixer_in + mamba.mixer(x, qw / t, mamba.inner_width(x) / t)
                       + hyb_fwd - h / rep_split, fwd_in)
    bwd_out = jnp.where(moe_hybrid, mixer_in + mamba.mixer(x, qkv_n, mamba.in_proj_width(x) / t)
                        + hyb_bwd - h / rep_split, bwd_out)
    cast_fwd = jnp.where(hybrid, tok * (h / rep_split + fwd_in), cast_fwd)
    cast_bwd = jnp.where(hybrid, tok * (h / rep_split + bwd_out), cast_bwd)
    # Eager PyTorch's unfused elementwise ops (elementwise_fusion 0) and the unpad
    # and pad copies around the attention (unpadded_attention 1) add theirs,
    # and so do the routed experts' eager clamp and bias ops (moe.eager_expert_bytes).
    eager_fwd, eager_bwd, eager_fwd_k, eager_bwd_k = (
        e + u for e, u in zip(eager_elementwise(x, g), unpadded_attention_elementwise(x, g),
                              strict=True))
    expert_fwd, expert_bwd, _, _ = moe.eager_expert_bytes(x, tok / t)
    eager_fwd = jnp.where(plain, eager_fwd, eager_fwd + expert_fwd)
    eager_bwd = jnp.where(plain, eager_bwd, eager_bwd + expert_bwd)
    # FP8 attention's casts: Q, K, V and O forward, dO and dQ, dK, dV backward, the
    # same elements each way (the fused kernel only; a hybrid's attention layers).
    dpa_fp8 = (x.fp8_attention > 0.5) & (flash > 0.5) & (whole(x.attention_kernel) == 0)
    dpa_bytes = jnp.where(dpa_fp8, DPA_CAST_BYTES * tok * (qkv_n + qw / t), 0.0)
    dpa_bytes = jnp.where(hybrid, mamba.attention_share(x) * dpa_bytes, dpa_bytes)
    fwd_bytes = (hidden_bytes + mlp_bytes + score_bytes + g.cast_bytes * cast_fwd + eager_fwd
                 + dpa_bytes)
    bwd_bytes = (2.0 * (hidden_bytes + mlp_bytes + score_bytes)
                 + g.cast_bytes * cast_bwd + eager_bwd + dpa_bytes)
    # Full and per-op recompute run every memory-bound kernel of the forward
    # pass again (per-op keeps only matmul and attention outputs).
    recompute_bytes = (full + op_sac) * (hidden_bytes + mlp_bytes + g.cast_bytes * cast_fwd
                                         + eager_fwd) \
        + (full + selective) * (score_bytes + dpa_bytes)
    # Norm recompute (norm_recompute, without full recompute): both norms'
    # forward again, each reading and writing [s b h] in bf16.
    recompute_bytes = recompute_bytes + (1.0 - full) * x.norm_recompute * (
        jnp.where(hybrid, 1.0, _NORMS_PER_LAYER) * 2.0 * BF16 * tok * h / rep_split)
    # MoE fine-grained recompute (moe_recompute): the expert activation, or the
    # whole MoE layer's forward (its GEMMs, memory traffic and all-to-alls).
    moe_act_again, moe_layer_again = moe.recompute_flags(x)
    recompute_bytes = jnp.where(plain, recompute_bytes,
                                recompute_bytes + moe.recompute_bytes(x, tok / t))

    layer_f = gemm_fwd_s + attn_fwd_s + fwd_bytes / hbm_rate
    layer_recompute = (full * gemm_fwd_s + op_sac * sum(
        gemm(tok, n_, k_) for n_, k_ in op_sac_recomputed_shapes(x))
        + attn_recompute_s + recompute_bytes / hbm_rate)
    layer_recompute = jnp.where(plain, layer_recompute,
                                layer_recompute + moe_layer_again * moe_gemm[3])
    layer_f = jnp.where(hybrid, layer_f + scan_fwd_s, layer_f)
    layer_recompute = jnp.where(hybrid, layer_recompute + full * scan_fwd_s, layer_recompute)
    layer_b = gemm_dgrad_s + attn_bwd_s + bwd_bytes / hbm_rate + layer_recompute
    layer_b = jnp.where(hybrid, layer_b + 2.0 * scan_fwd_s, layer_b)
    # Gradient accumulation into the buffer (grad_buffer_traffic): the weight-
    # gradient GEMMs' epilogue reads and writes grad_buffer_bytes per weight of
    # the layer on this GPU instead of the bf16 output counted in gemm_wgrad_s.
    # (The routed experts' share is in their grouped GEMMs' weight-gradient
    # pass, moe.layer_gemm_seconds, at the rows each expert sees.)
    gb_traffic = x.grad_buffer_traffic
    accum_bytes = gb_traffic * (2.0 * x.grad_buffer_bytes - BF16)
    grad_layer_params = jnp.where(plain, layer_weight_params(x) / t,
                                  jnp.where(hybrid, mamba.layer_resident_params(x),
                                            moe.layer_resident_params(x)) / t)
    accum_layer_bytes = accum_bytes * grad_layer_params
    layer_w = gemm_wgrad_s + accum_layer_bytes / hbm_rate
    # Fixed cost per kernel (launch and ramp, not hidden when kernels are short):
    # _LAYER_KERNELS a layer and micro-batch, a third of them again with full
    # recompute; the kernels a CUDA graph replays at the graph's gap instead.
    launch_s = x.kernel_overhead_us * 1e-6
    graphed_s = jnp.minimum(x.kernel_overhead_us, GRAPH_KERNEL_GAP_US) * 1e-6
    graphs = whole(x.cuda_graphs)
    # A hybrid model's average layer: each block's half of a transformer
    # layer's kernels in its share of the layers, the Mamba-2 layer's own; a
    # per-layer graph captures the mixers (attention and mamba scopes).
    layer_graphed = jnp.where(graphs == 2, _LAYER_KERNELS,
                              jnp.where(graphs == 1, _ATTN_SCOPE_KERNELS, 0.0))
    layer_kernel_s = (layer_graphed * graphed_s + (_LAYER_KERNELS - layer_graphed) * launch_s)
    mixer_kernels = mamba.mixer(x, _ATTN_SCOPE_KERNELS, mamba.MAMBA_LAYER_KERNELS)
    hybrid_kernels = mixer_kernels + mamba.ffn_share(x) * (_LAYER_KERNELS - _ATTN_SCOPE_KERNELS)
    hybrid_graphed = jnp.where(graphs == 2, hybrid_kernels,
                               jnp.where(graphs == 1, mixer_kernels, 0.0))
    layer_kernel_s = jnp.where(hybrid, hybrid_graphed * graphed_s
                               + (hybrid_kernels - hybrid_graphed) * launch_s, layer_kernel_s)
    layer_b = layer_b + layer_kernel_s * (1.0 + (full + op_sac) / 3.0)
    # Eager's own kernels, launched (never graph-captured), the forward ones
    # again with full or per-op recompute.
    layer_b = layer_b + (eager_fwd_k * (1.0 + full + op_sac) + eager_bwd_k) * launch_s
    # The unpad copies' kernels at the host's pace (unpadded_attention), each
    # forward pass (again with full recompute).
    layer_b = layer_b + (1.0 + full) * unpadded_attention_paced_seconds(x, g, launch_s)
    # MoE: the router, dispatch and permutation kernels and one GEMM per local
    # expert and pass (moe.layer_extra_kernels) and the routed experts' eager
    # clamp and bias kernels (moe.eager_expert_kernels), a third again with
    # full recompute.
    moe_kernels = moe.layer_extra_kernels(x) + moe.eager_expert_kernels(x)
    moe_graphed = jnp.where(graphs == 2, moe_kernels,
                            jnp.where(graphs == 1, moe.graph_scope_kernels(x), 0.0))
    moe_again = 1.0 + (full + moe_layer_again) / 3.0
    # The kernels at the host's pace in a dropless layer: all of them unless
    # the whole iteration is one graph (per-layer graphs keep the sync, see
    # GRAPH_KERNEL_GAP_US above).
    # The expert GEMMs hide the host's pace under their own GPU time.
    unsynced = jnp.where(graphs == 2, 0.0, 1.0)
    paced_layer = jnp.where(hybrid, hybrid_kernels, _LAYER_KERNELS) * (1.0 + full / 3.0)
    # ... in the layers from the first sync on: a hybrid's mixer layers too.
    paced_share = jnp.where(hybrid, mamba.paced_layer_share(x), moe.paced_layer_share(x))
    layer_b = jnp.where(plain, layer_b, layer_b
                        + (moe_graphed * graphed_s + (moe_kernels - moe_graphed) * launch_s)
                        * moe_again
                        + moe.host_seconds(x, full + moe_layer_again)
                        + unsynced * moe.host_paced_seconds(
                            x, paced_layer, moe_kernels * moe_again, launch_s,
                            expert_kernel_s, full + moe_layer_again, paced_share))
    layer_s = layer_f + layer_b + layer_w
    # Combined 1F1B's partners of the all-to-alls: the MoE block's GEMMs (the
    # MLP node), the rest of the average layer (the attention node: norms,
    # attention, router, permutation, recompute and launches).
    frac = moe.moe_fraction(x)
    block_f, block_d, block_w = moe_gemm[4], moe_gemm[5], moe_gemm[6]
    ep_partners = (layer_f - frac * block_f,
                   layer_b + layer_w - frac * (block_d + block_w),
                   block_f, block_d, block_w)

    # Output layer and loss (last stage): logits GEMM in bf16, fused softmax
    # cross-entropy memory-bound.
    ce_kind = whole(x.cross_entropy_fusion)
    ce_bytes = jnp.where(
        ce_kind == 4, _LOGIT_COMPILED_BYTES,
        jnp.where(ce_kind == 3,
                  jnp.where(t > 1.5, _LOGIT_TORCH_PARALLEL_BYTES, _LOGIT_TORCH_BYTES),
                  jnp.where(ce_kind >= 1, _LOGIT_BYTES, _LOGIT_UNFUSED_BYTES)))
    logit_bytes = ce_bytes * tok * V / t
    logit_fwd_s = logit_gemms[0]
    # The output layer's weight gradient accumulates into the buffer as well.
    accum_logit_bytes = accum_bytes * V * h / t
    logit_s = (logit_gemms[0] + logit_gemms[1] + logit_gemms[2]
               + (logit_bytes + accum_logit_bytes) / hbm_rate)
    # The input embedding's dense gradient added to the buffer (first stage;
    # timed where it is also the last, p = 1).
    embed_grad_bytes = gb_traffic * (_EMBEDDING_GRAD_BYTES + 2.0 * x.grad_buffer_bytes) \
        * V * h / t
    embed_grad_s = one_stage * embed_grad_bytes / hbm_rate
    return LayerTimes(
        gemm_fwd_s=gemm_fwd_s, gemm_dgrad_s=gemm_dgrad_s, gemm_wgrad_s=gemm_wgrad_s,
        attn_fwd_s=attn_fwd_s, attn_bwd_s=attn_bwd_s, score_bytes=score_bytes,
        fwd_bytes=fwd_bytes, bwd_bytes=bwd_bytes, recompute_bytes=recompute_bytes,
        accum_layer_bytes=accum_layer_bytes, moe_layer_again=moe_layer_again,
        layer_f=layer_f, layer_recompute=layer_recompute, layer_w=layer_w, layer_s=layer_s,
        logit_fwd_s=logit_fwd_s, logit_s=logit_s, logit_bytes=logit_bytes,
        accum_logit_bytes=accum_logit_bytes, embed_grad_s=embed_grad_s, qw=qw,
        ep_partners=ep_partners, dense_gemms=dense_gemms,
    )


def layer_flops(x, g, moe_layer_again):
    """FLOPs of one micro-batch through a whole layer (all ``t c`` ranks).

    Returns ``(active_w, attn_core, layer_hw_flops)``: the weights one token
    uses, the attention core's forward FLOPs (the full square, or the band of
    the sliding-window layers: ``attention_keys``), and the
    hardware FLOPs of forward, backward and recompute.
    """
    full, selective, flash, plain, b, s = g.full, g.selective, g.flash, g.plain, g.b, g.s
    op_sac = g.op_sac
    hybrid = mamba.hybrid(x)
    active_w = jnp.where(plain, layer_weight_params(x), jnp.where(
        hybrid, mamba.layer_active_params(x), moe.layer_active_params(x)))
    keys, _ = attention_keys(x)
    attn_core = jnp.where(plain, 4.0 * b * s * keys * attention_width(x),
                          b * s * keys * mamba.mixer(x, moe.attention_core_flops(x), 0.0))
    # A hybrid model's SSD scan: model FLOPs beside the attention core, three
    # passes and full recompute's fourth.
    scan_core = b * s * mamba.mamba_share(x) * mamba.scan_flops_per_token(x)
    # FLOPs of one micro-batch through a whole layer (all t c ranks), counted as
    # Megatron-LM and SC21 count them: the full attention square (a causal
    # kernel's skipped half is a saving in time, not in counted FLOPs; a
    # sliding window's band is all a windowed layer computes); the hardware
    # count adds recompute.
    # Per-op recompute runs the forward GEMMs of op_sac_recomputed_params again.
    gemm_passes = 3.0 + full + op_sac * op_sac_recomputed_params(x) / layer_weight_params(x)
    attn_passes = 3.0 + full + selective + 0.5 * flash
    layer_hw_flops = (gemm_passes * 2.0 * b * s * active_w + attn_passes * attn_core)
    layer_hw_flops = jnp.where(hybrid, layer_hw_flops + (3.0 + full) * scan_core,
                               layer_hw_flops)
    attn_core = jnp.where(hybrid, attn_core + scan_core, attn_core)
    # The MoE recompute runs the MoE block's forward GEMMs again.
    layer_hw_flops = jnp.where(plain, layer_hw_flops, layer_hw_flops + moe_layer_again * 2.0
                               * b * s * moe.moe_fraction(x) * moe.moe_block_active_params(x))
    return active_w, attn_core, layer_hw_flops
