"""Data parallelism and ZeRO: gradient reduction, weight gathers, the optimizer step.

* **Reduction**: an all-reduce of the gradients of the GPU's shard (in
  ``grad_buffer_bytes`` per gradient) over the ``d c`` data x context ranks,
  or ZeRO (Rajbhandari et al. 2020) over ``z`` of them (``zero_shard_degree``,
  default all; hybrid sharding replicates the shard over the other ``d c /
  z``): stages 1 and 2 reduce-scatter the gradients and all-gather the
  updated bf16 weights once a step; stage 3 (FSDP) gathers each layer's
  weights for the forward pass and again for the backward pass and
  reduce-scatters its gradients, every micro-batch, one collective per layer
  (once a step with ``fsdp_keep_gathered``: weights stay gathered across the
  micro-batches); the stage's other weights (embeddings, output layer) are
  the root unit, gathered once and reduce-scattered once, both exposed (the
  first collective of the forward pass and the last of the backward pass);
  FP8 primary weights (``fp8_param_gather``) are gathered as FP8.  Not
  told apart: Megatron-Core gathers MXFP8 primary weights in bf16 and
  quantizes them after the gather (``_ParamAndGradBuffer``: "For MXFP8 param:
  Create a shared buffer for param AG and grad RS ... only half of the buffer
  is used to store params in bf16"; Megatron-Bridge's ``bf16_with_mxfp8_mixed``
  sets ``reuse_grad_buf_for_mxfp8_param_ag``), while Hopper's blockwise FP8
  weights go through Transformer Engine's ``cast_master_weights_to_fp8`` as
  FP8; ``precision`` 2 names both, so both are charged 1 byte.  PyTorch's
  FSDP2 (``fsdp_copies``) also copies each gather's output into the parameters
  and the gradients into the reduce-scatter input, on the compute stream.
  The data x context group has stride ``t``: ``G / t`` of it share a node.
* **Overlap**: gradients are final only during the backward pass of the last
  micro-batch, so a fraction ``dp_overlap`` of that window hides the
  all-reduce (or the reduce-scatter); ``param_gather_overlap`` of a forward
  pass hides the ZeRO weight all-gather (Megatron-LM ``--overlap-grad-reduce``,
  ``--overlap-param-gather``).  Under interleaved 1F1B each of the ``v``
  model chunks reduces its gradients once its own last backward pass is done
  and gathers its weights before its own first forward pass (Megatron-Core's
  ``forward_backward_pipelining_with_interleaving`` calls ``grad_sync_func``
  and ``param_sync_func`` per chunk), ``p`` chunk passes apart, so the
  collective is a queue of ``v`` parts behind ``(v - 1) p + 1`` chunk passes
  (``staggered``).  The bucket that holds the input embedding
  (``dp_bucket_params``; Megatron-Core's default ``max(40M, 1M x d)``
  parameters) reduces only after the backward pass ends and is gathered before
  the forward pass: it cannot hide.
* **Contention**: compute that a collective hides runs slower, NCCL's kernels
  holding SMs and HBM bandwidth beside it (``overlap_slowdown``).
* **Experts**: the routed experts' gradients are reduced over the ``edp``
  replicas of each expert shard (``jaxmodel.models.refined.moe``) in the same
  window.
* **Optimizer step**: memory-bound mixed-precision Adam over the GPU's shard
  (ZeRO divides it by ``z``): one fused pass, or PyTorch's foreach AdamW and
  gradient-norm clipping, a pass per ``_foreach`` op (``foreach_optimizer``);
  under Muon (``optimizer`` 1) the weight matrices' step moves 20 bytes a
  parameter, not 28, and its Newton-Schulz GEMMs are
  ``jaxmodel.models.refined.muon``'s; the once-a-step passes over the gradient
  buffer and the FP8 weight casts.
"""

from __future__ import annotations

from jaxmodel.collectives import all_gather, all_reduce, contention_growth, reduce_scatter
from jaxmodel.deferred import jnp
from jaxmodel.models.refined import moe, muon
from jaxmodel.models.refined.derived import optimizer_shards
from jaxmodel.models.refined.rates import BF16
from jaxmodel.numerics import positive_part

# Mixed-precision Adam update per parameter: read fp32 master, momentum,
# variance and the bf16 gradient, write the three fp32 states and bf16 weights.
_ADAM_BYTES = 28.0
# PyTorch's foreach AdamW (foreach_optimizer 1; torch/optim/adam.py
# _multi_tensor_adam, AdamW's decoupled weight decay, capturable False), over
# fp32 parameters p, gradients g and states m, v (FSDP2's sharded parameters
# and gradients are fp32 under torchtitan's MixedPrecisionPolicy), each
# _foreach op its own pass over HBM, in bytes per parameter:
#   _foreach_mul_(p, 1 - lr wd)               read p, write p          8
#   _foreach_lerp_(m, g, 1 - beta1)           read m, g, write m      12
#   _foreach_mul_(v, beta2)                   read v, write v          8
#   _foreach_addcmul_(v, g, g, 1 - beta2)     read v, g, write v      12
#   sq = _foreach_sqrt(v)                     read v, write sq         8
#   _foreach_div_(sq, sqrt(bias_corr2))       read sq, write sq        8
#   _foreach_add_(sq, eps)                    read sq, write sq        8
#   _foreach_addcdiv_(p, m, sq, step_size)    read p, m, sq, write p  16
# = 80; then torch.nn.utils.clip_grad_norm_(foreach=True) (torchtitan clips by
# the total norm every step, max_norm 1.0): _foreach_norm(g) reads g (4) and
# clip_grads_with_norm_'s _foreach_mul_(g, coef) reads and writes it (8): 92.
# (The norm's all-reduce is one scalar: latency only, left out.)
_FOREACH_ADAMW_BYTES = 80.0
_FOREACH_CLIP_BYTES = 12.0
# Once a step over the whole gradient buffer (grad_buffer_traffic 1,
# Megatron-Core DDP): zero_grad_buffer (write g), the
# --check-for-nan-in-loss-and-grad norm before each bucket's reduction (read
# g; Megatron-LM's default) and the 1/d pre-scaling grad_data *=
# gradient_scaling_factor (read and write g): 4 g bytes per weight.
_GRAD_PASSES = 4.0
# Megatron-Core's default bucket: max(40M, 1M x d) parameters
# (DistributedDataParallelConfig.bucket_size: "larger DP sizes need larger
# buckets to ensure collectives do not become latency-bound").
_BUCKET_PARAMS_PER_RANK = 1e6


def staggered(comm, chunks, p, hidden):
    """Exposed seconds of a once-a-step collective of ``comm`` seconds split over
    ``chunks`` model chunks whose windows open one after another, ``p`` chunk
    passes apart, each pass hiding ``hidden`` seconds of it: one queue on the
    link, so what shows is the larger of the last chunk's share beyond its own
    pass and the whole beyond all the passes, ``max(comm / v - w, comm - ((v - 1)
    p + 1) w)``; one chunk (v = 1): ``comm - w``."""
    return positive_part(jnp.maximum(comm / chunks - hidden,
                                     comm - ((chunks - 1.0) * p + 1.0) * hidden))


def dp_seconds(x, g, params, stage, layer_hw_flops, active_w, attn_core):
    """``(z, edp, dp_raw, dp)``: the ZeRO shard and expert replica counts, and the
    data-parallel seconds a step before and after overlap (``params``:
    ``memory.StageParams``, ``stage``: ``pipeline.Stage``)."""
    fdt, d, c, t, G, net, zero_i = g.fdt, g.d, g.c, g.t, g.G, g.net, g.zero_i
    V, h, b, s, m, has_experts, e, etp = g.V, g.h, g.b, g.s, g.m, g.has_experts, g.e, g.etp
    params_gpu, expert_layer_params = params.params_gpu, params.expert_layer_params
    micro_compute, stage_f, stage_layers = (stage.micro_compute, stage.stage_f,
                                            stage.stage_layers)
    # The data x context group has stride t: G / t of it share a node.  ZeRO
    # shards over z of them (zero_shard_degree, default all), replicated over
    # the other d c / z (hybrid sharding): a reduce-scatter among the z, an
    # all-reduce of the shard among the replicas, an all-gather of the weights.
    dc = d * c
    z = jnp.where(x.zero_shard_degree < 0.5, dc, x.zero_shard_degree)
    replicas = dc / z
    per_node = G / t
    grad_bytes = x.grad_buffer_bytes * params_gpu
    # FP8 primary weights (fp8_param_gather: Megatron-Core --fp8-param-gather,
    # torchtitan/torchao's FSDP float8 all-gather) are gathered as FP8, 1 byte
    # per layer weight of the stage; the embeddings stay bf16.
    fp8_gathered = g.fp8 * x.fp8_param_gather * stage_layers * params.layer_params
    weight_bytes = BF16 * params_gpu - (BF16 - 1.0) * fp8_gathered
    sharded = (zero_i >= 1).astype(fdt)
    fsdp = (zero_i == 3).astype(fdt)
    all_reduced = all_reduce(grad_bytes, dc, per_node, net)
    # Bucket granularity (dp_bucket_params > 0): buckets fill in backward order,
    # so the last one holds the first stage's input embedding (one tensor, never
    # split: V h / t parameters) and reduces only after the backward pass ends;
    # the forward pass needs it first, so its all-gather is dispatched before
    # any compute can hide it.  Taken as the larger of the embedding and one
    # bucket, at most the GPU's parameters; 0 keeps the continuous overlap.
    bucketed = (x.dp_bucket_params > 0.5).astype(fdt)
    bucket = jnp.maximum(x.dp_bucket_params, _BUCKET_PARAMS_PER_RANK * dc)
    tail_params = jnp.minimum(jnp.maximum(bucket, V * h / t), params_gpu)
    tail_reduced = bucketed * all_reduce(x.grad_buffer_bytes * tail_params, dc, per_node, net)
    tail_scattered = bucketed * reduce_scatter(x.grad_buffer_bytes * tail_params, z, per_node,
                                               net)
    tail_gathered = bucketed * all_gather(BF16 * tail_params, z, per_node, net)
    shard_sync = all_reduce(grad_bytes / z, replicas, per_node / z, net)
    scattered = reduce_scatter(grad_bytes, z, per_node, net) + shard_sync
    gathered = all_gather(weight_bytes, z, per_node, net)
    # The backward share of a layer's FLOPs (recompute counts as backward).
    fwd_hw = 2.0 * b * s * active_w + attn_core
    backward_share = 1.0 - fwd_hw / layer_hw_flops
    window = x.dp_overlap * backward_share * micro_compute
    # Interleaved 1F1B: each of the v model chunks reduces its own gradients
    # once its last micro-batch's backward pass is done, p chunk-passes after the
    # chunk before it, and gathers its weights p chunk-passes before its first
    # forward pass (staggered).
    chunks = jnp.where(g.schedule == 0, jnp.maximum(g.v, 1.0), 1.0)
    chunk_b = backward_share * micro_compute / chunks
    chunk_f = stage_f / chunks
    # ZeRO-3 / FSDP: every micro-batch gathers each layer's weights for the
    # forward pass and again for the backward pass and reduce-scatters its
    # gradients, one collective per layer (latency per layer); the next
    # layer's gather is prefetched behind the current layer's compute
    # (dp_overlap of the pass), the first one never is.
    # The stage's weights outside its decoder layers (input embedding, final
    # norm, output layer) are one more unit, the root (torchtitan's
    # parallelize_llama.apply_fsdp: fully_shard on each block, then on the whole
    # model), in bf16 (Float8 converts the blocks' linears only).  It is
    # gathered first, before any compute of the forward pass can hide it, and
    # kept for the backward pass (fully_shard: "The root FSDP state has its
    # value specially set to False as a heuristic since its parameters would
    # typically be immediately all-gathered for backward"); its gradients are
    # final only when the input embedding's is, the last of the backward pass,
    # so its reduce-scatter has nothing left to hide behind.  Both are exposed.
    n_coll = jnp.maximum(stage_layers, 1.0)
    root_params = positive_part(params_gpu - stage_layers * params.layer_params)
    root_gather = all_gather(BF16 * root_params, z, per_node, net)
    root_scatter = reduce_scatter(x.grad_buffer_bytes * root_params, z, per_node, net)
    block_bytes = positive_part(weight_bytes - BF16 * root_params)
    block_grads = positive_part(grad_bytes - x.grad_buffer_bytes * root_params)
    layer_gather = n_coll * all_gather(block_bytes / n_coll, z, per_node, net)
    layer_scatter = n_coll * reduce_scatter(block_grads / n_coll, z, per_node, net)
    edges = root_gather + layer_gather / n_coll + root_scatter
    fsdp_micro = (positive_part(layer_gather - x.dp_overlap * stage_f)
                  + positive_part(layer_gather + layer_scatter
                                  - x.dp_overlap * (micro_compute - stage_f))
                  + edges)
    fsdp_raw = m * (2.0 * layer_gather + layer_scatter + root_gather + root_scatter) \
        + shard_sync
    fsdp_exposed = m * fsdp_micro + positive_part(shard_sync - window)
    # Weights kept gathered across micro-batches (fsdp_keep_gathered): each
    # layer gathered once, in the first micro-batch's forward pass, and its
    # gradients reduce-scattered once, in the last one's backward pass.
    keep = x.fsdp_keep_gathered
    kept_raw = layer_gather + layer_scatter + root_gather + root_scatter + shard_sync
    kept_exposed = (positive_part(layer_gather - x.dp_overlap * stage_f)
                    + positive_part(layer_scatter - x.dp_overlap * (micro_compute - stage_f))
                    + edges + positive_part(shard_sync - window))
    fsdp_raw = keep * kept_raw + (1.0 - keep) * fsdp_raw
    fsdp_exposed = keep * kept_exposed + (1.0 - keep) * fsdp_exposed
    # Expert gradients: reduced over the edp replicas of each expert shard
    # (the expert-data-parallel group has stride etp e), in the same window.
    # Without a distributed optimizer (ZeRO 0), and under ZeRO-3 (whose
    # per-layer expert gathers are not modelled), an all-reduce: under ZeRO 0 it
    # joins the other gradients' all-reduce in one queue behind the backward
    # passes (one window, one NIC: Megatron-Core's expert and dense gradient
    # buffers both start their bucket all-reduces as the backward pass fills
    # them), as the distributed optimizer's reduce-scatters do below.  With the
    # distributed optimizer (ZeRO 1/2) Megatron-Core shards the experts' main
    # weights and optimizer state over the expert-data-parallel group like the
    # others (megatron/core/distributed/distributed_data_parallel.py: the
    # expert_parallel_buffers' data-parallel group is the expert-data-parallel
    # group; param_and_grad_buffer.py _ParamAndGradBucketGroup.
    # start_grad_sync: reduce_scatter_tensor under use_distributed_optimizer,
    # all_reduce otherwise; start_param_sync: all_gather_into_tensor), as
    # optimizer_seconds charges its step (edp shards): the gradients are
    # reduce-scattered in the backward window and the updated weights (FP8
    # with fp8_param_gather) all-gathered in the forward window, once a step,
    # half the gradient traffic of the all-reduce.  The expert and the other
    # gradients share one window (and the GPU's NIC), as do the two gathers.
    edp = jnp.maximum(moe.expert_data_parallel(x, d), 1.0)
    edp_per_node = G / (etp * e)
    expert_params = stage_layers * expert_layer_params
    expert_grad_bytes = x.grad_buffer_bytes * expert_params
    expert_weight_bytes = (BF16 - (BF16 - 1.0) * g.fp8 * x.fp8_param_gather) * expert_params
    expert_reduced = all_reduce(expert_grad_bytes, edp, edp_per_node, net)
    expert_scattered = reduce_scatter(expert_grad_bytes, edp, edp_per_node, net)
    expert_gathered = all_gather(expert_weight_bytes, edp, edp_per_node, net)
    # Each expert collective joins the queue of its kind (none without experts).
    queued_reduced = all_reduced + jnp.where(has_experts, expert_reduced, 0.0)
    queued_scattered = scattered + jnp.where(has_experts, expert_scattered, 0.0)
    queued_gathered = gathered + jnp.where(has_experts, expert_gathered, 0.0)
    zero12_raw = queued_scattered + queued_gathered
    zero12_exposed = (jnp.maximum(staggered(queued_scattered, chunks, g.p,
                                            x.dp_overlap * chunk_b), tail_scattered)
                      + jnp.maximum(staggered(queued_gathered, chunks, g.p,
                                              x.param_gather_overlap * chunk_f),
                                    tail_gathered))
    zero0_exposed = jnp.maximum(staggered(queued_reduced, chunks, g.p, x.dp_overlap * chunk_b),
                                tail_reduced)
    # ZeRO-3: the expert all-reduce behind the backward window on its own.
    fsdp_raw = fsdp_raw + jnp.where(has_experts, expert_reduced, 0.0)
    fsdp_exposed = fsdp_exposed + jnp.where(has_experts,
                                            positive_part(expert_reduced - window), 0.0)
    dp_raw = jnp.where(fsdp > 0.5, fsdp_raw,
                       jnp.where(sharded > 0.5, zero12_raw, queued_reduced))
    dp = jnp.where(fsdp > 0.5, fsdp_exposed,
                   jnp.where(sharded > 0.5, zero12_exposed, zero0_exposed))
    return z, edp, dp_raw, dp


def overlap_seconds(x, g, dp_raw, dp):
    """Seconds the compute loses a step to the data-parallel collectives it hides.

    NCCL runs each collective as a kernel with a CTA per channel on the SMs and
    streams its data through HBM; compute overlapped by it on NVLink runs ``1 +
    overlap_slowdown`` times slower ("NCCL collectives use SMs, which makes
    matmuls that are overlapped by them 30-40% slower", pytorch/pytorch PR
    179937: FSDP2 on one node of 8 H100).  Over the network the collective
    streams at the NIC's rate with as few channels, and slows the compute in
    proportion (``collectives.contention_growth``).  During the ``dp_raw - dp``
    seconds the collectives are hidden the compute does only ``1 / (1 + s)`` of
    its work.  (The exposed part slows nothing: no compute runs beside it.)
    Weighted by the data x context group's levels (G / t of it to a node); the
    expert-data-parallel group's are taken as the same.
    """
    growth = contention_growth(x.overlap_slowdown, g.d * g.c, g.G / g.t, g.net)
    return growth * positive_part(dp_raw - dp)


def fsdp_copy_seconds(x, g, params, stage_layers, z):
    """Seconds a step of PyTorch FSDP2's copies (``fsdp_copies`` 1, ZeRO-3 over
    ``z`` > 1 ranks), memory-bound on the compute stream.

    torch.distributed.fsdp fully_shard (_fsdp_collectives.py): after each
    all-gather, ``foreach_all_gather_copy_out`` waits for it on the current
    stream and copies the flat output into every parameter's unsharded tensor
    (``split_with_sizes_copy``: read and write the gathered weights, 2 bytes
    each in bf16, 1 in FP8 with ``fp8_param_gather``); before each
    reduce-scatter, ``foreach_reduce`` copies the unsharded bf16 gradients
    into the reduce-scatter input in the reduce dtype (``_chunk_cat``, on the
    current stream too: read 2, write ``grad_buffer_bytes``; torchtitan reduces
    in fp32, 4).  The layers are gathered twice a micro-batch (forward, and
    again for backward), the root unit (the stage's other weights, bf16) once,
    and every gradient copied in once; kept gathered (``fsdp_keep_gathered``),
    each once a step.  The shard's own copy-in before the all-gather (1 / z of
    the weights, on a side stream) is left out, and so are routed experts'
    weights (held apart, ``expert_layer_params``; no FSDP2 MoE run is modelled).
    """
    layer_params = stage_layers * params.layer_params
    root_params = positive_part(params.params_gpu - layer_params)
    element = BF16 - (BF16 - 1.0) * g.fp8 * x.fp8_param_gather
    keep = x.fsdp_keep_gathered
    copy_out = 2.0 * (element * layer_params * (2.0 - keep) + BF16 * root_params)
    copy_in = (BF16 + x.grad_buffer_bytes) * (layer_params + root_params)
    passes = keep + (1.0 - keep) * g.m
    on = (g.zero_i == 3) & (z > 1.5) & (x.fsdp_copies > 0.5)
    return jnp.where(on, passes * (copy_out + copy_in) / g.hbm_rate, 0.0)


def optimizer_seconds(x, g, params, stage_layers, z, edp):
    """Seconds of the optimizer step, the buffer passes and the FP8 weight casts."""
    zero_i, hbm_rate, has_experts = g.zero_i, g.hbm_rate, g.has_experts
    params_gpu, layer_params = params.params_gpu, params.layer_params
    expert_layer_params = params.expert_layer_params
    gb_traffic = x.grad_buffer_traffic
    # Optimizer step (memory-bound Adam over this GPU's shard) and the FP8
    # weight casts (once a step: read bf16, write FP8 and its transpose).
    dense_shards = optimizer_shards(g, z)
    # The once-a-step passes over the gradient buffer (grad_buffer_traffic):
    # the whole buffer, or the shard with ZeRO-3.
    buffer_shards = jnp.where(zero_i == 3, z, jnp.ones_like(z))
    grad_pass_bytes = gb_traffic * _GRAD_PASSES * x.grad_buffer_bytes
    adam_bytes = jnp.where(x.foreach_optimizer > 0.5,
                           _FOREACH_ADAMW_BYTES + _FOREACH_CLIP_BYTES, _ADAM_BYTES)
    # Muon's step over the weight matrices (the embeddings keep Adam's):
    # jaxmodel.models.refined.muon.
    matrix_bytes = jnp.where(muon.on(x) > 0.5, muon.STEP_BYTES, adam_bytes)
    optimizer_s = ((adam_bytes * params_gpu
                    - (adam_bytes - matrix_bytes) * stage_layers * layer_params)
                   / dense_shards
                   + grad_pass_bytes * params_gpu / buffer_shards
                   + g.cast_bytes * stage_layers * layer_params) / hbm_rate
    expert_shards = optimizer_shards(g, edp)
    expert_buffer_shards = jnp.where(zero_i == 3, edp, jnp.ones_like(edp))
    optimizer_s = jnp.where(
        has_experts, optimizer_s + (matrix_bytes / expert_shards
                                    + grad_pass_bytes / expert_buffer_shards
                                    + g.cast_bytes)
        * stage_layers * expert_layer_params / hbm_rate, optimizer_s)
    return optimizer_s
