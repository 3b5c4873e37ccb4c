"""The refined model's fields: its inputs, outputs, terms and cluster parameters.

Everything a user or the engine sees of the model is declared here: every input
with its unit, domain and default (hardware defaults an H100 SXM node, sources
in ``jaxmodel.presets`` and beside the defaults below; model defaults
Llama-2-70B, Touvron et al. 2023, Table 1), every output with its unit and
meaning, the step-time terms in stacking order, and the cluster parameters a
calibration fits.  ``RefinedInputs`` and ``RefinedOutputs`` are the pytrees
built from them.  A new layer kind or precision mode adds its switches and
outputs here, and its physics in one module beside this one.

Numeric-coded switches (so that sweeps, sensitivities and searches range over
them like any input; values are checked whole numbers in a range):
``recompute`` 0 none / 1 selective / 2 full / 3 per-op selective, ``sequence_parallel`` 0/1,
``zero_stage`` 0..3, ``flash_attention`` 0/1, ``tied_embeddings`` 0/1, and
``virtual_stages`` (1 = plain 1F1B).  They select terms by ``jnp.where`` and
arithmetic, so one compiled program serves every value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from jaxmodel.fields import InputField, OutputField
from jaxmodel.models.common import MAX_COUNT, count, positive, switch
from jaxmodel.models.outputs import SHARED_OUTPUTS
from jaxmodel.models.run import RUN_INPUTS, RUN_OUTPUTS
from jaxmodel.models.terms import (
    COMPUTE,
    DP_ALLREDUCE,
    MOE_COMM,
    PIPELINE_BUBBLE,
    PP_COMM,
    TP_COMM,
    Term,
    bottleneck_output,
)

DESCRIPTION = (
    "refined 3D-parallelism (TP x PP x DP) model -- architecture FLOPs with recompute, "
    "memory-bound kernels, two-level alpha-beta network, interleaved 1F1B, ZeRO-1, "
    "per-GPU memory (Narayanan et al. 2021; Korthikanti et al. 2022); context "
    "parallelism, ZeRO-3, FP8, shape-aware GEMMs, zero-bubble schedules"
)


INPUTS: tuple[InputField, ...] = (
    # Layout and batch.  Ranks are ordered tensor, context, (expert), data,
    # pipeline, as Megatron-LM places them.
    count("num_gpus", "GPUs", "GPUs available to the job (N)", 64),
    count("tensor_parallel", "ways", "tensor-parallel degree t", 8),
    count("context_parallel", "ways", "context-parallel degree c: each sequence split over "
           "c ranks", 1),
    count("pipeline_parallel", "stages", "pipeline-parallel stages p", 4),
    count("virtual_stages", "chunks per GPU",
           "model chunks per GPU v (1 = plain 1F1B; interleaved 1F1B when > 1; 2 for ZB-V)", 1),
    count("micro_batch", "sequences", "sequences per micro-batch b", 1),
    count("gradient_accum_steps", "micro-batches", "micro-batches per step m", 16),
    # Architecture (defaults: Llama-2-70B, Touvron et al. 2023, Table 1 / config).
    count("seq_length", "tokens", "sequence length s", 4096),
    count("hidden_dim", "", "hidden size h", 8192),
    count("num_layers", "", "transformer layers L", 80),
    count("num_heads", "", "attention heads a", 64),
    count("num_kv_heads", "", "key/value heads (grouped-query attention; = a for MHA)", 8),
    count("head_dim", "", "width of one attention head (0: h / a, as in GPT and Llama; "
           "Qwen3 uses 128 with a x 128 != h)", 0, low=0.0),
    count("ffn_hidden_dim", "", "feed-forward hidden size f (4 h for GPT)", 28672),
    count("mlp_weight_matrices", "", "feed-forward weight matrices (2 GeLU, 3 SwiGLU)", 3,
           high=3.0, low=2.0),
    count("vocab_size", "tokens", "vocabulary size V", 32000),
    switch("tied_embeddings", "input and output embeddings shared (1) or not (0)", 0),
    switch("rotary_embedding", "rotary position embedding of queries and keys in every "
            "layer (1: Llama and most models since 2023), or none (0: learned or ALiBi "
            "positions, GPT-3, MPT); its elementwise ops count under eager PyTorch", 1),
    switch("causal_mask", "causal (decoder) attention (1): FlashAttention skips the masked "
            "half of the score blocks; without FlashAttention the full square is computed", 1),
    # Sliding-window attention (the layer module's attention_keys): GPT-OSS
    # (openai/gpt-oss-120b config.json: "sliding_window": 128, "layer_types"
    # alternating sliding_attention / full_attention), Mistral 7B (every layer,
    # 4096), Gemma 3 (5 of every 6 layers, 1024).
    count("sliding_window", "tokens", "keys a query attends to in the sliding-window layers "
           "(query i sees tokens i - w + 1 .. i); 0 = no sliding window", 0, low=0.0),
    InputField("sliding_window_share", "fraction", "share of the layers with sliding-window "
               "attention (GPT-OSS 0.5: every other layer); the others attend to the whole "
               "sequence; unused when sliding_window is 0", False, 0.0, True, 1.0, 1.0),
    # Training software.  Defaults: current Megatron-LM practice for a model of
    # this size (Korthikanti et al. 2022: selective recompute with sequence
    # parallelism; FlashAttention; gradient reduction overlapped with the
    # backward pass, as PyTorch DDP and Megatron-LM --overlap-grad-reduce do).
    switch("recompute", "activation recompute: 0 none, 1 selective (Megatron-LM: the "
            "attention core), 2 full, 3 per-op selective (torchtitan's op policy: keep the "
            "attention output and every other matmul's output, recompute the rest)", 1,
            high=3.0),
    count("recompute_layers", "layers", "with full recompute, the layers of each pipeline "
           "chunk recomputed (Megatron-LM --recompute-method block --recompute-num-layers k: "
           "the first k; the others store their activations, as without recompute); "
           "0 = every layer", 0, low=0.0),
    switch("sequence_parallel", "sequence parallelism with TP (1) or not (0)", 1),
    switch("zero_stage", "sharding over data x context ranks: 0 none, 1 optimizer states "
            "(Megatron distributed optimizer), 2 + gradients, 3 + weights (FSDP)", 0,
            high=3.0),
    InputField("zero_shard_degree", "ranks", "ranks that shard the ZeRO states (hybrid "
               "sharding, replicated across the rest); 0 = all data x context ranks", True,
               0.0, True, 0.0, MAX_COUNT),
    switch("flash_attention", "FlashAttention (1): no s^2 score tensors in memory", 1),
    switch("cp_comm", "context-parallel K/V exchange: 0 ring of point-to-point sends "
            "overlapped with attention (Megatron-LM), 1 all-gather (Llama 3), 2 all-to-all "
            "of Q, K, V and the output (DeepSpeed-Ulysses; Megatron --cp-comm-type a2a), 3 "
            "PyTorch's context_parallel (torchtitan): blockwise SDPA, K, V at the query heads "
            "all-gathered, fp32 dK, dV ring", 0,
            high=3.0),
    switch("cross_entropy_fusion", "softmax cross-entropy: 0 unfused PyTorch ops "
            "(Megatron-Core without --cross-entropy-loss-fusion), 1 a fused kernel that keeps "
            "an fp32 softmax (10 bytes a logit in memory), 2 Transformer Engine's, which "
            "writes the gradient into the bf16 logits in place (2 bytes a logit; "
            "--cross-entropy-fusion-impl te), 3 PyTorch's F.cross_entropy on fp32 logits "
            "(torchtitan: log_softmax and nll_loss, 12 bytes a logit, 16 under loss "
            "parallelism), 4 the same compiled by torch.compile (torchtitan's loss under "
            "--training.compile, 2025): the bf16 logits and one fused backward kernel "
            "writing a bf16 gradient, 4 bytes a logit", 1, high=4.0),
    switch("elementwise_fusion", "elementwise ops: 0 eager PyTorch, one kernel an op "
            "(torchtitan without torch.compile: fp32 RMSNorm, RoPE, SwiGLU, residual adds, "
            "repeat_kv), 1 fused kernels (Megatron-Core / Transformer Engine, torch.compile)",
            1),
    switch("norm_kernel", "layer norms under eager PyTorch (elementwise_fusion 0): 1 op by "
            "op in fp32 (torchtitan's Llama RMSNorm: 8 kernels forward, 16 backward), 0 one "
            "kernel a norm and pass (PyTorch's F.layer_norm: Composer's MPT)", 1),
    switch("fused_qkv", "one projection makes q, k and v and its output is split (MPT's "
            "Wqkv, GPT-2's c_attn; 0: three projections, torchtitan's Llama): under eager "
            "PyTorch the split's backward concatenates their gradients (torch.cat)", 0),
    switch("linear_bias", "the attention and feed-forward linear layers carry biases (MPT, "
            "GPT-2, OPT; 0: none, Llama): under eager PyTorch each bias gradient is a "
            "reduction over the layer's output gradient; the bias parameters are not counted",
            0),
    switch("unpadded_attention", "the attention's queries, keys and values gathered to drop "
            "padding and its output scattered back around the kernel (1: flash-attn's "
            "bert_padding unpad_input / pad_input, as LLM Foundry runs flash-attn 1.x's "
            "varlen interface; 0: the kernel reads the padded batch)", 0),
    switch("pipeline_schedule", "0 1F1B (interleaved when v > 1), 1 ZB-H1 (v = 1), 2 ZB-V "
            "(v = 2); Qi et al. 2023", 0, high=2.0),
    switch("pp_overlap", "the interleaved schedule's steady-state pipeline sends and "
            "receives run asynchronously under the chunk passes (1: Megatron-Core's "
            "overlap_p2p_comm, its default with v > 1; the warm-up and flush ones stay "
            "exposed); 0 every transfer exposed", 1),
    switch("serial_streams", "1: one hardware queue for every CUDA stream "
            "(CUDA_DEVICE_MAX_CONNECTIONS=1): kernels run in the order the host issued "
            "them, and the pipeline's asynchronous sends and receives do not run under the "
            "chunk passes (pp_overlap has no effect); 0: several queues (the CUDA default, "
            "8); 2: as Megatron-LM sets it, 1 where compute_capability_major < 10 with TP "
            "or CP > 1, unless ZeRO-3 / FSDP or ep_overlap, else 0", 2, high=2.0),
    switch("pipeline_split_embedding", "count the input embedding and the output layer + "
            "loss as one layer each in the pipeline split (Megatron-LM's account-for-embedding- "
            "and -loss-in-pipeline-split flags)", 0),
    switch("precision", "the layers' GEMM precision: 0 BF16, 1 FP8 with per-tensor "
            "(current or delayed) scaling, 2 block-scaled FP8 (MXFP8 on Blackwell, 1x128 / "
            "128x128 blockwise on Hopper), 3 NVFP4; the output layer, attention, norms and "
            "optimizer stay BF16/FP32", 0, high=3.0),
    count("bf16_layers", "layers", "layers that keep BF16 GEMMs under a low precision "
           "(Megatron-Core first_last_layers_bf16 with num_layers_at_start_in_bf16 + "
           "num_layers_at_end_in_bf16): their GEMMs run at the bf16 peak and ceiling and "
           "cast nothing", 0, low=0.0),
    count("grad_buffer_bytes", "bytes", "bytes per gradient in the accumulation buffer "
           "and on the wire (4: Megatron-LM's fp32 main_grad with bf16; 2: bf16)", 4,
           high=4.0),
    InputField("dp_overlap", "fraction", "share of the last micro-batch's backward pass that "
               "hides the gradient reduction (0 none, 1 all)", False, 0.0, True, 1.0, 1.0),
    # NCCL's collectives run as kernels on the SMs (a CTA per channel) and move
    # their data through HBM, so the compute they overlap runs slower: "NCCL
    # collectives use SMs, which makes matmuls that are overlapped by them
    # 30-40% slower" (pytorch/pytorch PR 179937, 8 x H100, Llama 3 8B FSDP2,
    # whose copy-engine collectives gained 2.4% tokens/s at TP 1, batch 2).
    # 0.35, the middle of that range, on NVLink; a collective over the network
    # streams at the NIC's rate with as few channels (NCCL issue 689) and slows
    # the compute in proportion (collectives.contention_growth).  The same for
    # every GPU (no other is published).  refined/data.py: overlap_seconds.
    InputField("overlap_slowdown", "fraction", "how much slower compute runs while an "
               "overlapped data-parallel NCCL collective shares its SMs and HBM, on NVLink "
               "(0.35: 30-40% on H100, PyTorch PR 179937; over the network in proportion "
               "to its rate); 0 none", False, 0.0, True, 0.35, 1.0),
    InputField("param_gather_overlap", "fraction", "share of a micro-batch's forward pass that "
               "hides the ZeRO weight all-gather (Megatron-LM --overlap-param-gather)",
               False, 0.0, True, 0.0, 1.0),
    switch("fsdp_keep_gathered", "with ZeRO-3 / FSDP, a stage's weights stay gathered and its "
            "gradients unsharded across the micro-batches of a step (1: FSDP2 under "
            "torchtitan's pipeline schedules, reshard_after_forward False and gradient "
            "sync on the last micro-batch only): one all-gather and one reduce-scatter a "
            "step, but the whole stage's weights (bf16, FP8 with fp8_param_gather) and "
            "gradients (grad_buffer_bytes) are held; 0 gathers each layer again every "
            "micro-batch", 0),
    switch("pp_stage_buffers", "what a pipeline stage keeps per micro-batch besides its "
            "layers' activations: 0 nothing (Megatron-Core frees each output once sent); 1 "
            "torch.distributed.pipelining: a receive buffer per micro-batch for the "
            "activations and one for the gradients, and the last stage's output (the "
            "logits) of every micro-batch until the step ends; 2 as 1, and every stage's "
            "output of every micro-batch (PyTorch before May 2025, PR 153383)", 0,
            high=2.0),
    switch("fsdp_copies", "with ZeRO-3 / FSDP, PyTorch FSDP2's copies on the compute stream "
            "(1): each all-gather's output copied out into the parameters and the gradients "
            "copied into the reduce-scatter input in grad_buffer_bytes; 0: the collectives "
            "work in place (Megatron-FSDP's buffers)", 0),
    switch("foreach_optimizer", "the optimizer step's kernels: 0 one fused Adam pass (Apex / "
            "Transformer Engine FusedAdam, torch fused=True); 1 PyTorch's foreach AdamW "
            "(torch.optim.AdamW foreach=True, 8 passes over fp32 states) and "
            "clip_grad_norm_(foreach=True) over the fp32 gradients (torchtitan)", 0),
    switch("optimizer", "the weight matrices' optimizer: 0 Adam; 1 Muon (Megatron-Core's "
            "TensorParallelMuon: 5 Newton-Schulz steps a matrix, fp32 master and momentum; "
            "layer-wise distributed with ZeRO; embeddings and 1-D parameters on Adam)", 0),
    InputField("tp_overlap", "fraction", "share of the tensor-parallel collectives hidden "
               "behind the GEMMs they feed (Megatron-Core --tp-comm-overlap)", False, 0.0,
               True, 0.0, 1.0),
    # tensor.py: which implementation runs (and overlaps) the TP collectives:
    # 0 Transformer Engine / Megatron-Core (re-gathers each sequence-parallel
    # GEMM input in backward; --tp-comm-overlap: userbuffers), 1 PyTorch DTensor
    # (keeps the gathered input; overlap: async TP).  Their physics differ in
    # the backward pass and in the reduce-scatter's last step.
    switch("tp_overlap_kind", "TP: 0 TE/MCore, 1 DTensor", 0),
    # Megatron-Core's gradient buffer and its buckets (distributed/
    # param_and_grad_buffer.py, distributed_data_parallel_config.py).
    switch("grad_buffer_traffic", "count the gradient buffer's own memory traffic (1): "
            "weight-gradient GEMMs accumulating into it every micro-batch, the input "
            "embedding's dense gradient added to it, and the once-a-step passes over it "
            "(zeroing, NaN-check norm, 1/d pre-scaling), as Megatron-Core's DDP does; 0 "
            "leaves it out", 1),
    InputField("dp_bucket_params", "parameters", "parameters per data-parallel gradient "
               "bucket (Megatron-Core: max(40M, 1M x data-parallel ranks)); the last bucket "
               "of the backward pass and the first all-gather of the forward pass hold the "
               "input embedding and cannot be overlapped; 0 = infinitely fine buckets "
               "(everything can hide)", False, 0.0, True, 40e6, None),
    # Hardware (defaults: H100 SXM, see jaxmodel.presets for sources).
    # matmul_efficiency 0.7: a round value at the low end of what cuBLAS sustains
    # on transformer-sized bf16 GEMMs on A100 and H100 (70-80% of dense peak);
    # not fitted to the validation table (README: 0.65-0.72 all meet its target).
    # It is the large-GEMM ceiling; gemm_shape_model derates each GEMM from it.
    # hbm_efficiency 0.8: streaming kernels reach 80-90% of datasheet bandwidth.
    # intra_node_efficiency 0.8: NCCL all-reduce bus bandwidth on DGX A100 is
    # about 230-240 GB/s of NVLink's 300 (nccl-tests); inter_node_efficiency 0.9:
    # large NCCL transfers over InfiniBand run at about 90% of line rate.
    # Latencies: a small all-reduce on 8 NVLink GPUs takes 10-15 us over 14 ring
    # steps (about 1 us a step); an InfiniBand hop with NCCL's proxy about 5 us.
    positive("compute_tflops", "TFLOP/s (1 T = 1e12)", "peak dense bf16 FLOP/s per GPU", 989),
    # Peaks and GEMM ceilings of the low precisions (presets: PRECISION_PEAKS,
    # MATMUL_CEILINGS); a peak of 0 is a precision the GPU has no tensor cores
    # for, and a layout asking for it is invalid.
    InputField("fp8_peak_tflops", "TFLOP/s (1 T = 1e12)", "peak dense FP8 FLOP/s per GPU "
               "(per-tensor scaling; 0: no FP8 tensor cores)", False, 0.0, True, 1979, None),
    InputField("mxfp8_peak_tflops", "TFLOP/s (1 T = 1e12)", "peak dense block-scaled FP8 "
               "FLOP/s per GPU (0: not supported)", False, 0.0, True, 1979, None),
    InputField("fp4_peak_tflops", "TFLOP/s (1 T = 1e12)", "peak dense FP4 FLOP/s per GPU "
               "(0: no FP4 tensor cores)", False, 0.0, True, 0.0, None),
    count("num_sms", "SMs", "streaming multiprocessors (compute units) per GPU", 132,
           high=4096.0),
    count("compute_capability_major", "version", "the GPU's compute capability, major "
           "version, as torch.cuda.get_device_capability() reports it (what Megatron-LM's "
           "get_device_arch_version tests): 8 Ampere, 9 Hopper (and CDNA 3 / 4 under "
           "ROCm: gfx942 and gfx950 report 9), 10 Blackwell", 9, high=99.0),
    InputField("matmul_efficiency", "fraction", "achievable fraction of peak for large "
               "matrix multiplies (the ceiling of the shape model)", False, 0.0, False, 0.7,
               1.0),
    InputField("fp8_matmul_efficiency", "fraction", "achievable fraction of the FP8 peak for "
               "large matrix multiplies under sustained load (per-tensor scaling)",
               False, 0.0, False, 0.698, 1.0),
    InputField("mxfp8_matmul_ratio", "fraction", "a block-scaled FP8 GEMM's rate over a "
               "per-tensor FP8 GEMM's of the same shape (precision 2 runs at "
               "fp8_matmul_efficiency x this)", False, 0.0, False, 1.0, 1.0),
    InputField("fp4_matmul_efficiency", "fraction", "achievable fraction of the FP4 peak for "
               "large matrix multiplies under sustained load", False, 0.0, False, 0.763, 1.0),
    switch("gemm_shape_model", "each GEMM's efficiency from its shape: tile and wave "
            "quantization and arithmetic intensity (1), or matmul_efficiency for all (0)", 1),
    InputField("attention_efficiency", "fraction", "achievable fraction of the bf16 peak in "
               "the fused (Flash) attention kernels, forward and backward", False, 0.0, False,
               0.55, 1.0),
    InputField("fa2_attention_efficiency", "fraction", "achievable fraction of the bf16 peak "
               "in FlashAttention-2's kernels, forward and backward (attention_kernel 1)",
               False, 0.0, False, 0.326, 1.0),
    InputField("attention_tile_keys", "keys", "a fused attention kernel's fixed work per "
               "query tile and call (loading its queries, filling the pipeline, the last "
               "rescale and stores, a wave's tail) in keys of its main loop: a query runs "
               "its keys plus this many; the presets' attention_efficiency, measured at "
               "8,192 keys without a mask, holds 8,192 / (8,192 + this) of it (cuDNN 9.19 on "
               "H200, GB200 and GB300: 512); 0 leaves it out", False, 0.0, True, 512.0, None),
    switch("fp8_attention", "the attention core in FP8 (Transformer Engine's "
            "fp8_dot_product_attention: cuDNN's FP8 fused attention at "
            "fp8_attention_efficiency, its inputs and output gradient cast to FP8 and its "
            "outputs back); needs FP8 tensor cores and the fused kernel (attention_kernel 0)",
            0),
    InputField("fp8_attention_efficiency", "fraction", "achievable fraction of the bf16 peak "
               "in the FP8 fused attention kernels, forward and backward, at 8,192 keys "
               "without a mask (fp8_attention 1)", False, 0.0, False, 0.555, 2.0),
    InputField("mma_per_exponential", "FLOP/exp", "the GPU's tensor-core bf16 FLOPs per "
               "exponential of its special-function units, per SM and clock (Hopper 4,096 / "
               "16 = 256): a fused attention kernel's softmax cost per score element in "
               "units of its matrix products", False, 0.0, False, 256.0, None),
    switch("attention_kernel", "fused attention kernel: 0 the GPU's fastest (cuDNN / "
            "FlashAttention-3, Transformer Engine's; attention_efficiency), 1 "
            "FlashAttention-2 (PyTorch SDPA's flash backend; fa2_attention_efficiency), "
            "2 the first FlashAttention (flash-attn 1.x; half FlashAttention-2's rate), "
            "3 FlashAttention in Triton (flash-attn's Triton kernel; 0.547 of "
            "FlashAttention-2's rate)", 0, high=3.0),
    switch("cuda_graphs", "CUDA graphs: 0 none, 1 per layer (Transformer Engine graphs of the "
            "attention and the MoE router and preprocessing: Megatron --cuda-graph-impl "
            "transformer_engine), 2 the full iteration (--cuda-graph-impl local/full_iteration)",
            0, high=2.0),
    InputField("kernel_overhead_us", "us", "fixed cost per kernel launch not hidden by "
               "the previous kernel (CUDA launch and ramp)", False, 0.0, True, 4.0, None),
    positive("hbm_bandwidth_tb_s", "TB/s (1 TB = 1e12 bytes)", "GPU memory bandwidth", 3.35),
    InputField("hbm_efficiency", "fraction", "achievable fraction of memory bandwidth",
               False, 0.0, False, 0.8, 1.0),
    # gpu_memory_gb: H100's "80 GB" are 80 GiB (jaxmodel.models.presets).
    positive("gpu_memory_gb", "GB (1 GB = 1e9 bytes)", "memory per GPU", 80 * 2**30 / 1e9),
    InputField("reserved_memory_gb", "GB (1 GB = 1e9 bytes)", "memory the model cannot use: "
               "CUDA context, NCCL buffers, library workspaces, allocator fragmentation",
               False, 0.0, True, 4.0, None),
    count("gpus_per_node", "GPUs", "GPUs sharing the intra-node fabric (the NVLink domain)",
           8),
    positive("link_bandwidth_gb_s", "GB/s (1 GB = 1e9 bytes)",
              "intra-node (NVLink) bandwidth per GPU, one direction", 450),
    positive("network_bandwidth_gb_s", "GB/s (1 GB = 1e9 bytes)",
              "inter-node network bandwidth per GPU, one direction", 50),
    # H100 SXM's PCIe Gen5 x16 to the host: 55.2 GB/s device to host and 55.3 host
    # to device measured (nvbandwidth's copy-engine memcpy; jaxmodel.models.presets).
    positive("host_link_gb_s", "GB/s (1 GB = 1e9 bytes)",
              "achieved GPU-host copy bandwidth per GPU, one direction (PCIe, or "
              "NVLink-C2C on Grace): what activation offload moves over", 55.2),
    InputField("intra_node_efficiency", "fraction", "achieved fraction of intra-node "
               "bandwidth in collectives", False, 0.0, False, 0.8, 1.0),
    InputField("inter_node_efficiency", "fraction", "achieved fraction of network "
               "bandwidth in collectives", False, 0.0, False, 0.9, 1.0),
    # The hierarchical expert dispatchers' kernels move tokens with a few SMs
    # (Megatron-Core's moe_deepep_num_sms 20, moe_hybridep_num_sms 16) and reach
    # less of NVLink than NCCL's ring does (jaxmodel.models.presets).
    InputField("deepep_link_efficiency", "fraction", "achieved fraction of intra-node "
               "bandwidth in DeepEP's expert dispatch and combine (moe_dispatcher 1)",
               False, 0.0, False, 0.65, 1.0),
    InputField("hybridep_link_efficiency", "fraction", "achieved fraction of intra-node "
               "bandwidth in HybridEP's expert dispatch and combine (moe_dispatcher 2)",
               False, 0.0, False, 0.65, 1.0),
    InputField("intra_node_latency_us", "us", "latency per collective step in a node",
               False, 0.0, True, 1.0, None),
    InputField("inter_node_latency_us", "us", "latency per collective step across nodes",
               False, 0.0, True, 5.0, None),
    # Mixture of experts and attention variants (formulas in jaxmodel.models.refined.moe).
    # num_experts = 1 is a dense model: every input below but head_dim is unused.
    count("num_experts", "experts", "routed experts per MoE layer E (1 = dense)", 1),
    count("experts_per_token", "experts", "routed experts per token k (top-k)", 1),
    count("moe_ffn_hidden_dim", "", "feed-forward hidden size of one expert f_e", 2048),
    count("shared_experts", "experts", "always-active experts of size f_e per MoE layer", 0,
           low=0.0),
    count("moe_latent_size", "", "LatentMoE: routed experts work in a latent space of this "
           "width l, projected h -> l before the dispatch and back after the combine "
           "(Megatron-Core moe_latent_size; 0 = none, experts on h)", 0, low=0.0),
    count("dense_layers", "layers", "leading layers with a dense FFN of ffn_hidden_dim", 0,
           low=0.0),
    count("moe_layer_interval", "layers", "every n-th layer after the dense ones is MoE "
           "(1 = all)", 1),
    switch("attention", "attention: 0 multi-head / grouped-query, 1 multi-head latent (MLA)", 0),
    # GPT-OSS's routed experts (the moe module's eager_expert_bytes): their
    # GLU input clamped (config.json swiglu_limit), their projections biased.
    switch("glu_clamp", "GLU input clamp (swiglu_limit)", 0),
    switch("expert_bias", "routed experts carry biases", 0),
    # Hybrid Mamba-2 models (formulas in jaxmodel.models.refined.mamba).
    count("mamba_layers", "layers", "Mamba-2 layers of a hybrid model (Nemotron-H: M); "
           "then num_layers counts every layer of the pattern, each a Mamba-2, attention "
           "or FFN layer; 0 = none, every layer attention and FFN", 0, low=0.0),
    count("attention_layers", "layers", "attention layers of a hybrid model (*), the rest "
           "FFN layers (E or -); used with mamba_layers only", 0, low=0.0),
    count("mamba_heads", "heads", "Mamba-2 heads H", 128),
    count("mamba_head_dim", "", "Mamba-2 head dimension P (inner width H P)", 64),
    count("mamba_state_dim", "", "Mamba-2 state size N", 128),
    count("mamba_groups", "groups", "Mamba-2 groups of B and C", 8),
    count("mamba_conv_kernel", "", "Mamba-2 causal conv1d width", 4),
    count("mamba_chunk_size", "tokens", "Mamba-2 SSD chunk length Q", 128),
    # Multi-token prediction (formulas in jaxmodel.models.refined.mtp).
    count("mtp_layers", "modules", "multi-token-prediction modules on the last pipeline stage "
           "(DeepSeek-V3 sec. 2.2; Megatron-Core --mtp-num-layers): each one more layer of "
           "the last layer's kind, a 2h -> h projection and the output layer and loss again; "
           "0 = none", 0, low=0.0),
    switch("mtp_in_pipeline_split", "the multi-token-prediction modules in the pipeline "
            "split: 0 on the last stage beside its share of the layers (Megatron-Core's "
            "default), 1 one unit of the split each, in place of a layer (a custom "
            "Megatron pipeline layout with m, as its DeepSeek-V3 recipes run)", 0),
    count("last_stage_layers", "layers", "layers on the last PP stage", 0, low=0.0),
    count("q_lora_rank", "", "MLA query compression rank (0 = uncompressed queries)", 0,
           low=0.0),
    count("kv_lora_rank", "", "MLA key/value compression rank", 512, low=0.0),
    count("qk_rope_dim", "", "MLA rotary dimension of queries and keys per head", 64,
           low=0.0),
    count("expert_parallel", "ways", "expert-parallel degree e (divides num_experts)", 1),
    count("expert_tensor_parallel", "ways", "tensor parallelism inside each expert", 1),
    switch("moe_dispatcher", "token dispatcher: 0 flat all-to-all (NCCL); hierarchical, "
            "a token once per node over the network, then once per GPU over NVLink: "
            "1 DeepEP, 2 HybridEP", 0, high=2.0),
    # Megatron-Core --moe-router-fusion (TransformerConfig.moe_router_fusion,
    # default False): the router's kernels (refined.moe.router_kernels).
    switch("router_fusion", "fused MoE router (TE)", 0),
    count("max_nodes_per_token", "nodes", "node-limited routing: nodes a token may reach "
           "(0 = no limit)", 0, low=0.0),
    switch("moe_recompute", "fine-grained recompute of the MoE layers (Megatron-Core "
            "--recompute-modules): 0 none, 1 the expert activation (moe_act), 2 the whole "
            "MoE layer: router, dispatch, experts, combine (moe)", 0, high=2.0),
    InputField("moe_host_overhead_us", "us", "host time per MoE layer forward pass that the "
               "GPU waits for: the dropless dispatch's device-to-host sync of the token counts "
               "drains the GPU queue, and the router and preprocessing kernels after it run at "
               "the CPU's launch pace (0: sync-free dispatch or CUDA-graphed router)", False,
               0.0, True, 0.0, None),
    InputField("host_kernel_us", "us", "host (CPU) time to issue one eager kernel: PyTorch "
               "and Transformer Engine dispatch and the CUDA launch.  It paces a dropless MoE "
               "layer, whose device-to-host sync of the token counts keeps the host from "
               "running ahead of the GPU (host_paced_seconds in the refined model's moe module)",
               False, 0.0, True, 16.0, None),
    switch("ep_overlap", "Combined 1F1B expert all-to-all overlap (Megatron-Core's "
            "flag to overlap MoE expert-parallel comm): the steady-phase share of the chunk "
            "passes hides its dispatch and combine under another micro-batch's compute", 0),
    InputField("moe_overlap", "fraction", "share of the expert all-to-all hidden by compute "
               "(1F1B all-to-all overlap, DualPipe)", False, 0.0, True, 0.0, 1.0),
    InputField("moe_imbalance", "ratio", "tokens of the busiest expert over the mean (>= 1)",
               False, 1.0, True, 1.0, None),
    InputField("capacity_factor", "ratio", "expert capacity over the mean load; tokens beyond "
               "are dropped (0 = dropless)", False, 0.0, True, 0.0, None),
    # Memory of 2026 training (formulas in jaxmodel.models.refined.memory).
    switch("dropout", "dropout in the layers (1): its masks are stored for the backward "
            "pass (GPT-3, Megatron-LM 2021-22); 0: probability 0, as every modern "
            "pre-training recipe sets it, and PyTorch stores no mask", 0),
    switch("fp8_param_gather", "FP8 primary weights (Megatron-Core --fp8-param-gather): the "
            "layers' weights are kept and gathered in FP8 with their transpose, in place of "
            "bf16 weights plus an FP8 copy; only with fp8", 0),
    count("offload_layers", "layers", "layers per pipeline stage whose stored activations "
           "are offloaded to host memory during the forward pass and reloaded for the "
           "backward (Megatron-Core --cpu-offloading-num-layers)", 0, low=0.0),
    switch("moe_offload", "MoE activations kept in host memory from the forward pass to "
            "the backward (Megatron-Core's fine-grained activation offloading): 0 none, 1 the "
            "routed experts' FC1 output, the expert activation's input (--offload-modules "
            "moe_act), 2 also the FC1 input, the routed token copies (expert_fc1 moe_act)", 0,
            high=2.0),
    switch("mla_recompute", "recompute the MLA up-projections (Megatron-Core "
            "--recompute-modules mla_up_proj): queries, keys and values are rebuilt from "
            "the compressed latents, so they are not stored", 0),
    switch("norm_recompute", "recompute the norms (Megatron-Core --recompute-modules "
            "layernorm): their outputs, the QKV and FC1 inputs, are freed once used and "
            "recomputed from the norm inputs for the backward pass", 0),
)
# The whole run: tokens, price, power, PUE, grid (jaxmodel.models.run).
INPUTS += RUN_INPUTS

# What a cluster's own measurements pin down (``jaxmodel calibrate``'s default
# ``--fit``): the achieved fractions of the datasheet rates and the per-step
# latencies.  They differ between clusters of the same hardware (NCCL version,
# NIC firmware, kernels); the datasheet figures and the job do not.
# Inputs this model no longer takes, and what replaced them (issue 24).
RETIRED: dict[str, str] = {
    "fp8": "use precision (0 BF16, 1 FP8 per-tensor, 2 block-scaled FP8, 3 NVFP4); "
           "fp8 1 is precision 1",
    "fp8_tflops": "use fp8_peak_tflops (and mxfp8_peak_tflops, fp4_peak_tflops)",
}

CLUSTER: tuple[str, ...] = (
    "matmul_efficiency", "hbm_efficiency", "intra_node_efficiency",
    "inter_node_efficiency", "intra_node_latency_us", "inter_node_latency_us",
)
# What each can physically be (calibrate's bounds; sources in the comments on
# the inputs above and in jaxmodel.models.presets): no bf16 GEMM sustains over
# 90% of dense peak (the best Maximum Achievable Matmul FLOPS in Bekman's table
# is A100's 85.9%; H100's 80.1%), streaming kernels reach at most ~95% of HBM, NCCL's bus
# bandwidth ~95% of NVLink and ~97% of InfiniBand line rate; a collective step
# costs at least ~0.5 us on NVLink and ~1 us across nodes, at most tens of us.
# The other achieved rates a fit may take (``--fit``, ``validate --all
# --calibrated``): an FP8 GEMM's ceiling in the bf16 one's range; fused attention
# from 15% of peak (below FlashAttention-2's backward on H100, ~32%) to 90%; a
# host's time per eager kernel from 1 us to 100 us (wide bounds around the
# presets' 16 us, derived in jaxmodel.models.presets).
FIT_RANGES = {"matmul_efficiency": (0.3, 0.9), "hbm_efficiency": (0.4, 0.95),
              "intra_node_efficiency": (0.3, 0.95), "inter_node_efficiency": (0.3, 0.97),
              "intra_node_latency_us": (0.5, 50.0), "inter_node_latency_us": (1.0, 100.0),
              "deepep_link_efficiency": (0.2, 0.95), "hybridep_link_efficiency": (0.2, 0.95),
              "fp8_matmul_efficiency": (0.3, 0.9), "attention_efficiency": (0.15, 0.9),
              "fa2_attention_efficiency": (0.15, 0.9), "host_kernel_us": (1.0, 100.0)}

# What a buyer or designer of the hardware can change, for ``--sensitivity`` of
# ``best`` and ``plan``: the datasheet rates and capacity and the achieved GEMM
# fraction (the memory capacity acts only by which layouts fit: it is weighed
# by re-searching, not by a derivative).
HARDWARE: tuple[str, ...] = (
    "compute_tflops", "fp8_peak_tflops", "matmul_efficiency", "hbm_bandwidth_tb_s",
    "link_bandwidth_gb_s", "network_bandwidth_gb_s", "host_link_gb_s", "gpu_memory_gb",
)


def _offload_lever(inputs: Mapping[str, float], outputs: Mapping[str, Any]) -> str:
    # The copies grow with the offloaded bytes and shrink with the host link;
    # a pass's compute hides them.
    layers = int(inputs.get("offload_layers", 0))
    return (f"Offload less (offload_layers = {layers}, moe_offload = "
            f"{int(inputs.get('moe_offload', 0))}) or recompute instead; the host link "
            f"({inputs.get('host_link_gb_s', 0):g} GB/s a direction) cannot hide it")


# The activation offload's host copies (memory.offload_seconds): the refined
# model's own term, after the shared ones.
OFFLOAD = Term("offload", "offload_ms", "exposed offload copies", "#DA8BC3", "communication",
               "exposed activation offload", "the activation offload's host-link traffic",
               _offload_lever)
# The step-time terms, in stacking and tie-break order.  Context-parallel
# traffic (cp_comm_ms) competes for the bottleneck within the tensor-parallel
# term (both are model-parallel collectives inside each layer).
TERMS = (COMPUTE, TP_COMM, PP_COMM, PIPELINE_BUBBLE, DP_ALLREDUCE, MOE_COMM, OFFLOAD)

OUTPUTS: tuple[OutputField, ...] = (
    SHARED_OUTPUTS["data_parallel"],
    SHARED_OUTPUTS["used_gpus"],
    SHARED_OUTPUTS["idle_gpus"],
    OutputField("valid_layout", "", "well-formed layout that fits in memory", "bool"),
    OutputField("fits_in_memory", "", "memory_gb_per_gpu <= gpu_memory_gb", "bool"),
    SHARED_OUTPUTS["tokens_per_step"],
    OutputField("model_params_b", "billions of parameters", "parameters from the "
                "architecture", "float"),
    OutputField("total_params_b", "billions of parameters", "every parameter, all experts "
                "(and the multi-token-prediction modules)", "float"),
    OutputField("active_params_b", "billions of parameters", "parameters one token uses "
                "(model FLOPs and MFU count these)", "float"),
    OutputField("expert_data_parallel", "replicas", "edp = t c d / (etp e), replicas of each "
                "expert shard", "int"),
    OutputField("compute_time_ms", "ms", "kernels of the slowest stage: matrix work, "
                "memory-bound kernels, recompute, optimizer step", "float"),
    OutputField("recompute_ms", "ms", "part of compute spent recomputing activations",
                "float"),
    OutputField("memory_bound_ms", "ms", "part of compute in memory-bound kernels", "float"),
    OutputField("tp_comm_ms", "ms", "exposed tensor-parallel collectives of the busiest "
                "stage", "float"),
    OutputField("cp_comm_ms", "ms", "exposed context-parallel K/V exchange of the busiest "
                "stage", "float"),
    OutputField("pp_comm_ms", "ms", "pipeline point-to-point transfers", "float"),
    OutputField("pipeline_bubble_ms", "ms", "pipeline fill and drain: (p - 1) / (v m) of "
                "the busiest stage's time for 1F1B, less for the zero-bubble schedules",
                "float"),
    OutputField("dp_allreduce_ms", "ms", "exposed data-parallel traffic: gradient "
                "reduction, ZeRO weight gathers", "float"),
    OutputField("dp_allreduce_raw_ms", "ms", "data-parallel traffic before overlap", "float"),
    OutputField("moe_comm_ms", "ms", "exposed expert all-to-all (dispatch and combine), with "
                "its share of the pipeline bubble and the compute its hidden part slows "
                "(the SMs it holds)", "float"),
    OutputField("moe_comm_raw_ms", "ms", "expert all-to-all before overlap", "float"),
    OutputField("offload_ms", "ms", "exposed activation offload: the busiest stage's "
                "copies to host memory (forward) and back (backward) that outlast their "
                "pass", "float"),
    SHARED_OUTPUTS["step_time_ms"],
    SHARED_OUTPUTS["comm_fraction_percent"],
    SHARED_OUTPUTS["bubble_fraction_percent"],
    OutputField("scaling_efficiency_percent", "%", "compute / step", "float"),
    OutputField("mfu_percent", "%", "model FLOPs (no recompute) / (step x bf16 peak); "
                "against the BF16 peak at every precision, as MFU is reported", "float"),
    OutputField("hfu_percent", "%", "hardware FLOPs (with recompute) / (step x bf16 peak)",
                "float"),
    OutputField("achieved_tflops_per_gpu", "TFLOP/s", "model FLOP/s per GPU", "float"),
    OutputField("hardware_tflops_per_gpu", "TFLOP/s", "hardware FLOP/s per GPU (with "
                "recompute; what Narayanan et al. 2021 report)", "float"),
    SHARED_OUTPUTS["throughput_tokens_s"],
    SHARED_OUTPUTS["per_gpu_tokens_s"],
    OutputField("memory_gb_per_gpu", "GB", "weights, gradients, optimizer, activations, "
                "workspaces and reserve of the fullest stage", "float"),
    OutputField("model_state_gb_per_gpu", "GB", "weights, gradients and optimizer states",
                "float"),
    OutputField("activation_gb_per_gpu", "GB", "stored activations (with logits and "
                "transient buffers) of the fullest stage", "float"),
    OutputField("other_memory_gb_per_gpu", "GB", "kernel workspaces and reserved_memory_gb",
                "float"),
    bottleneck_output(TERMS),
    SHARED_OUTPUTS["regime"],
)
# Time, GPU-hours, cost, energy and CO2 of the whole run (jaxmodel.models.run).
OUTPUTS += RUN_OUTPUTS


RefinedInputs = NamedTuple(  # noqa: UP014 -- fields generated from INPUTS
    "RefinedInputs", [(f.name, Any) for f in INPUTS]
)
RefinedInputs.__doc__ = "One configuration (scalars; vmap for batches).  Units as in the names."


RefinedOutputs = NamedTuple(  # noqa: UP014 -- fields generated from OUTPUTS
    "RefinedOutputs", [(f.name, Any) for f in OUTPUTS]
)
RefinedOutputs.__doc__ = "Outputs of one configuration.  Integers int64, floats in the input dtype."
