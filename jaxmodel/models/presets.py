"""Named hardware and model presets: input values for ``--gpu`` / ``--llm`` and specs.

A preset is a set of input values under input names; applying one to a model
keeps the names that model has (the seed model takes ``compute_tflops`` and
``link_bandwidth_gb_s`` from a GPU, ``model_params_b``, ``hidden_dim``,
``num_layers`` and ``seq_length`` from an LLM; the refined model takes all).
Layering everywhere: model defaults < presets < config file < command line.

The presets are the models' domain knowledge (which published figure sets
which input), so they live beside the models; ``jaxmodel.presets`` re-exports
them.

Units as in the input names: peak dense (no sparsity) bf16 TFLOP/s; memory in
GB (1e9 bytes), converted from the datasheet's figure, which counts binary
gigabytes (``_datasheet_memory_gb``); bandwidths per GPU and per direction,
GB/s (NVLink "600 GB/s" total bidirectional is 300 per direction; a 200 Gb/s
HDR NIC is 25 GB/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from jaxmodel.errors import InputError, closest
from jaxmodel.models import Model, get_model


@dataclass(frozen=True)
class Published:
    """A model's parameter counts as its publisher prints them (billions).

    ``*_digits``: the figure's precision, as the half-width of its last printed
    digit (``"37B"``: 0.5; ``"5.13B"``: 0.005), so that a check allows the
    rounding as well as 1%.  ``active_counts_input_embedding``: whether the
    publisher's active count includes the input embedding (Mistral, Qwen: yes;
    OpenAI, DeepSeek and Moonshot: no, a lookup does no matrix work).
    """

    total_params_b: float
    total_half_unit: float
    active_params_b: float
    active_half_unit: float
    active_counts_input_embedding: bool


@dataclass(frozen=True)
class Preset:
    """A named set of input values with the source they come from."""

    name: str
    description: str
    source: str
    values: dict[str, float] = field(default_factory=dict)
    published: Published | None = None


def by_name(presets: tuple[Preset, ...]) -> dict[str, Preset]:
    """The presets keyed by name; a name given twice is a mistake, not an override
    (a dict built from them would keep the last one without a word)."""
    table: dict[str, Preset] = {}
    for preset in presets:
        if preset.name in table:
            raise ValueError(f"preset {preset.name!r} is defined twice")
        table[preset.name] = preset
    return table


# --- GPUs ------------------------------------------------------------------
#
# A GPU preset holds two kinds of figures: the datasheet's (peaks, memory,
# bandwidths, the NVLink domain) and the achievable fractions of them, which
# the refined model takes as inputs (matmul_efficiency, attention_efficiency,
# hbm_efficiency, intra_/inter_node_efficiency and the per-step latencies).
# Each fraction is a public measurement, named in the preset's source under
# "Measured", or, where none is published for that GPU, an assumption named
# under "Assumed" with the sibling it is taken from.  None is fitted to a
# validation row.  The measurements, and the arithmetic that turns them into
# fractions:
#
# Large-GEMM ceiling (matmul_efficiency): the Maximum Achievable Matmul FLOPS
# (MAMF) over the dense bf16 peak, measured with mamf-finder.py; S. Bekman,
# "Machine Learning Engineering", compute/accelerator/README.md, "Maximum
# Achievable Matmul FLOPS comparison table", BF16 (the v2 table, cache reset
# between iterations): H100 SXM 794.5 / 989 (torch 2.7.0+cu126; "H200 is the
# same"), B200 1745.0 / 2250 (2.7.1+cu128), B300 1769.0 / 2250 (2.9.1+cu130),
# GB200 1822.0 / 2500 (2.10.0.dev+cu130), MI355X 1565.0 (2.8.0+rocm7.0.2; the
# table's "Theory" 2300 is the MI350X's 2.2 GHz peak, the MI355X's datasheet
# peak at 2.4 GHz is 2516.6), MI300X 668.4 / 1307.4 (2.5.1+rocm6.3, TunableOp;
# the older v1 table without the cache reset had 781.9).  The ceilings of other
# precisions, and the sustained ones, are in MATMUL_CEILINGS below.
#
# Fused attention (attention_efficiency): the refined model runs the attention
# core at one efficiency for its forward pass (F FLOPs) and its backward pass
# (2.5 F, FlashAttention's count), so the input is the harmonic combination
# 3.5 / (1 / e_fwd + 2.5 / e_bwd) of the two kernels' measured fractions, at
# head dimension 128 and sequence 8K, without a mask (the refined model adds the
# kernel's fixed work per query tile and its causal tiles:
# jaxmodel.models.refined.rates.kernel_keys, layer.masked_tile_keys).
# NVIDIA's own cuDNN benchmark runs the same harness and cuDNN release on each
# of its GPUs (NVIDIA/cudnn-frontend, benchmark/sdpa_benchmark_training/results/
# {h200,gb200,gb300}_919_only_cudnn/llama3.1_2026022*.csv: cuDNN 9.19.1, bf16,
# Llama 3.1's 64 query and 8 key/value heads of 128, batch 1, sequence 8192, no
# mask, forward and backward in TFLOP/s, FLOPs 4 B N^2 H D and 2.5 times that),
# which the presets take, so that GPUs compare on one software release (9.19,
# February 2026: the middle of the public record's releases, 25.09-26.08):
# - Hopper: H200 forward 691, backward 594 -> 0.626 of 989, which the H100 and
#   H800 share (the same GH100 SMs and tensor clock at 700 W; attention is
#   compute-bound, so the H200's faster HBM does not enter).  The FlashAttention-3
#   paper's cuDNN of mid-2024 on an H100 (Shah et al. 2024, arXiv 2407.08608:
#   600 / 518 at head dim 128, 8K) gives 0.545: the kernel's releases since, not
#   the silicon, are the difference (listed, not used);
# - Blackwell: GB200 forward 1709, backward 1409 -> 0.593 of 2500, which the
#   B200 shares (the same die and kernels, at its own lower-clocked peak).  The
#   same harness on a B200 with cuDNN 9.13 (its artifacts/
#   sdpa_bf16_benchmark_results_NVIDIA_B200.csv, PyTorch 25.09's container,
#   causal, 128 query heads) measured 1171 / 943 at 8K, 0.47 of 2250 by the
#   same reading: the 25.09-25.11 releases ran slower kernels (listed, not
#   modelled: a release is not an input);
# - Blackwell Ultra: GB300 forward 1930, backward 1501 -> 0.641 of 2500, which
#   the B300 shares.  Its doubled exponential rate moves bf16 attention at head
#   dim 128 by 1.08x over GB200 (1.13x forward, 1.07x backward), not by the
#   1.27x the softmax part d0 alone would give (the model's mma_per_exponential):
#   the kernels balance the exponentials across the FMA units (FlashAttention-4's
#   emulated exp2), so the measured pair is taken, not derived.
# - MI300X: FlashAttention-2 forward+backward 328.6 TFLOP/s (head dim 64,
#   batch 2, sequence 8192; Azure/AI-benchmarking-guide,
#   Azure_Results/ND_MI300X_v5_results.md) -> 0.251.  (The same harness on H100
#   gives 327.9, FlashAttention-2's 0.33, not cuDNN's: a measured kernel
#   generation, not a ceiling.)
# - MI355X: AITER's assembly flash attention ("AITER (ASM)", aiter.flash_attn_func;
#   what Transformer Engine's fused attention runs on ROCm with its CK v3 kernels,
#   NVTE_CK_USES_FWD_V3 / _BWD_V3, which Primus and AMD's MLPerf configurations set)
#   forward 1256.8 and backward 1168.5 TFLOP/s at head dim 128, batch 16, 16 heads,
#   sequence 8192, no mask (HipKittens, Hu et al. 2025, arXiv 2511.08083: its
#   benchmark results analysis/attn/{fwd,bkwd}/benchmark/mi355x_mha_*_non_causal.json,
#   copied in the forks thebard85kigz/hipkittens@94850d9 and ruanjm/HipKittens@0fdbf08;
#   FLOPs 4 B N^2 H D forward, 2.5 times that backward, as the model counts) -> 0.474.
#   The same files measure HipKittens' own kernels at 1278.2 / 1090.8 (within 7%).
#   Their grouped-query backward through AITER's Python entry point ran at 384
#   TFLOP/s, a third of the multi-head one; HipKittens' GQA backward kernel ran
#   1155.5, so it is not the hardware: the preset keeps the multi-head pair, as
#   H100's does (listed, not modelled).  MI300X has no such measurement in text
#   (HipKittens plots it only): it keeps the Azure figure above.
#
# FlashAttention-2 (fa2_attention_efficiency, for attention_kernel 1: PyTorch
# SDPA's flash backend, which torchtitan runs): on H100 forward 333 and
# backward 318 TFLOP/s (the same FlashAttention-3 figures, FlashAttention-2's
# bars, head dim 128, seqlen 8k) -> 0.326.  The forward is the paper's causal
# panel (Fig. 5, "with causal mask", head dim 128: 319, 333, 335 at 4k, 8k,
# 16k; without the mask 368, 370, 370): a causal LM runs the causal kernel,
# whose rate counts the executed half of the square as the model does
# (layer.attention_keys), and it is flat from 8k on, so it holds for the long
# rows too.  The backward figure (Fig. 6) is published without the mask only.
# (The Azure harness's non-causal fwd+bwd 327.9 / 989 = 0.332.)  cuDNN's
# causal forward is lower too (529 at 8k against 600) but still climbing with
# the sequence (518, 529, 539 at 4k, 8k, 16k), so its 8k figure would not
# hold for the 16K-128K rows: attention_efficiency keeps the unmasked one.
# MI300X's attention_efficiency above is already FlashAttention-2's.
# Blackwell: the same Azure harness on a GB200 (ND_GB200_v6_results.md, head
# dim 128, batch 2, sequence 8192, fwd + bwd) gives 373.9 TFLOP/s, 0.150 of its
# 2,500: FlashAttention-2 runs Ampere's mma.sync path, not Blackwell's tcgen05
# tensor cores, so it is barely faster than on H100 (327.9).  GB300 has its own
# (ND_GB300_v6_results.md, the same run): 399.7 TFLOP/s, 0.160 of 2,500.  B200
# and B300 take GB200's fraction (the same kernel on the same kind of SM; assumed).
# MI355X's FlashAttention-2 speed (PyTorch SDPA's flash backend, AOTriton on ROCm)
# is published only in HipKittens' plot scripts, whose two versions disagree (821.8
# and 33 TFLOP/s forward at the shape above): its preset keeps MI300X's Azure figure,
# 0.251 (assumed).
#
# HBM (hbm_efficiency): the mean of the four STREAM kernels Copy, Scale (Mul),
# Add and Triad (Dot is a reduction) over the datasheet bandwidth;
# Azure/AI-benchmarking-guide, Azure_Results/ND_H100_v5_results.md (2.90, 2.90,
# 2.97, 2.97 TB/s of 3.35), ND_H200_v5_results.md (4.01, 4.00, 4.15, 4.15 of
# 4.8), ND_MI300X_v5_results.md (4.11, 4.26, 4.14, 4.09 of 5.3).
_HBM_H100 = 0.876
_HBM_H200 = 0.849
_HBM_MI300X = 0.783
# Blackwell Ultra (GB300, and the B300 on the same die and HBM3e): a GB300's
# "measured BF16 STREAM-like roof: 7.140 TB/s (triad, BLOCK=2048, warps=8)", a
# Triton triad over a 1-2 GB buffer (meta-pytorch/KernelAgent
# oink/benchmarks/README.md at 5d195d6, "Roofline reporting"; torch 2.11, CUDA
# 13.0).  Only the triad is published; the mean of the four kernels is taken at
# the H200's measured mean / triad ratio (4.0775 / 4.15, the same HBM3e: H100's
# is 0.988), 0.8925 x 0.9825 = 0.877.
_HBM_H200_MEAN_OVER_TRIAD = (4.01 + 4.00 + 4.15 + 4.15) / 4 / 4.15
_HBM_ULTRA = round(7.140 / 8.0 * _HBM_H200_MEAN_OVER_TRIAD, 3)
#
# NVLink / xGMI (intra_node_efficiency): NCCL bus bandwidth of a ring
# collective over the per-direction line rate:
# - NVLink 4 (H100, H200): 370 of 450 GB/s, "with the protocol overhead (~20%)
#   NCCL can get an effective NVLink bandwidth of 370GB/s, which you can observe
#   as BusBw when running non-allreduce operations, or ... NCCL_ALGO=RING"
#   (S. Jeaugey, NCCL, NVIDIA/nccl-tests issue 212); NCCL's own topology model
#   says the same: SM90_NVLINK_BW 20.6 GB/s x 18 links = 370.8
#   (NVIDIA/nccl src/graph/topo.h).  (All-reduce with NVLink SHARP reaches a
#   bus bandwidth of ~480 GB/s, above the line rate: the switch reduces.)
# - NVLink 4 on H800 (8 links): 160 of 200 GB/s measured one way by DeepSeek
#   (deepseek-ai/DeepSeek-V3 issue 28: "160GB/s 是我们的单向实测", our measured one-way figure).
# - NVLink 5 (B200, B300, GB200, GB300): 679.6 of 900 GB/s, nccl-tests
#   all_reduce_perf ring bus bandwidth at 8 GB on the 4 GPUs of an ND GB200 v6
#   VM (NCCL 2.25.1; Azure/AI-benchmarking-guide ND_GB200_v6_results.md).
#   NCCL's topology model allows 40.1 x 18 = 721.8 (0.80, topo.h
#   SM100_NVLINK_BW).
# - xGMI (MI300X): RCCL all-reduce bus bandwidth 316.8 of 7 x 64 = 448 GB/s at
#   8 GB (ND_MI300X_v5_results.md); AMD puts the usable rate of a 64 GB/s link
#   at ~48 (75%, ROCm blog "Understanding RCCL Bandwidth and xGMI Performance on
#   AMD Instinct MI300X", 2025).
# - xGMI (MI355X): RCCL all-reduce bus bandwidth 406.76 of 538 GB/s (7 links of
#   153.6 GB/s both ways) at 8 and 16 GiB on one 8-GPU node (rccl-tests
#   all_reduce_perf -g 8, RCCL 2.26.6; Oracle's MI355X quick start,
#   oci-ai-incubations/oci-gpu-quickstarts@3fd1cb5 amd/MI355X/README.md).
# The same fraction carries NCCL's all-to-all over NVLink (refined.moe's flat
# dispatcher, collectives.all_to_all), checked where it was measured: nccl-tests
# alltoall_perf at its largest printed size (OCI GPU quick starts,
# oracle-quickstart/oci-gpu-quickstarts, out of place / in place), GB300 NVL72 at
# 16 GiB a rank (NCCL 2.28.7): 20,527 / 18,929 us on the 4 GPUs of one host,
# 21,943 / 22,211 on 8 over two hosts of one rack, 25,357 / 25,565 on 64 over 16
# hosts (bus bandwidth 666.9, 0.741 of 900); GB200 NVL72, 64 ranks of one rack at
# 8 GiB, 13,574 / 13,560 us; one B300 node (8 GPUs, NCCL 2.28.9) at 8 GiB, 11,126 /
# 11,206 us (bus bandwidth 675.6).  The preset's 0.755 gives 18.96, 22.12, 24.95,
# 12.51 and 11.06 ms (tests/models/test_presets.py).  Across two racks the same
# test (128 GB300, 16 GiB a rank: 357.6 ms, bus bandwidth 47.7 GB/s) sends each
# GPU's off-rack half at 24 GB/s, a quarter of its ConnectX-8 and a quarter of
# what the model gives (91 ms); over two B300 nodes the NIC reaches 96.5 GB/s
# (below), so that is OCI's cross-rack fabric, not the NIC, and not modelled.  At a
# micro-batch's dispatch size (512 MiB a rank) NCCL's bandwidth has not finished
# ramping on few ranks: 64 measure within 2% of the model, 8 ranks 12% and 4 ranks
# 24% slower (the model has only the per-step latency below its ring fraction).
_NVLINK4 = 0.822
_NVLINK5 = 0.755
_XGMI_MI300X = 0.707
_XGMI_MI355X = round(406.76 / 538, 3)
#
# NVLink in the hierarchical expert dispatch and combine (deepep_link_efficiency,
# moe_dispatcher 1; hybridep_link_efficiency, 2): the dispatchers' kernels run
# on a few SMs (Megatron-Core's TransformerConfig: moe_deepep_num_sms 20;
# moe_hybridep_num_sms 16, "In pure NVL scenarios, 16 SMs can generally achieve
# good bandwidth") and reach less of the link than NCCL's ring.  Their
# benchmarks count "algorithm bandwidth": the bytes of the tokens a rank
# receives (one copy per token and receiving rank, its own among them:
# recv_x.numel() x 2) over the time; of g ranks in the domain, (g - 1) / g of
# those bytes cross NVLink.  NVIDIA's tables (deepseek-ai/DeepEP
# Hybrid-EP_Implementation.md; 4,096 tokens of 7,168, top 8, uniform routing,
# through the torch API), dispatch (BF16) and combine, GB/s:
# - B200, 8 ranks: HybridEP at 16 SMs 535.94 and 530.86 -> 7/8 of their mean
#   over 900 = 0.519; DeepEP at 16 SMs 348 and 302, at 24 SMs 494 and 420 ->
#   at its 20, halfway, 421 and 361 -> 0.380.
# - GB200, one NVL72 domain: HybridEP on 32 ranks at 16 SMs 485.50 and 423.19
#   (8 ranks 550.10 / 538.44, 36 ranks 469.96 / 418.27) -> 31/32 of the mean
#   over 900 = 0.489; DeepEP on 24 ranks (its widest) at 16 SMs 324.64 and
#   126.53, at 24 SMs 450.22 and 163.62 -> at 20, 387.43 and 145.08 -> 23/24 of
#   the mean over 900 = 0.284 (on 8 ranks it reached 0.39: its combine falls
#   away across the rack).
#   GB300 and B300 keep their Blackwell neighbours' (none is published).
# - NVLink 4 (H100, H200): DeepEP's intranode test on 8 H20 (NVLink 4, 18
#   links, 450 GB/s a direction): "the max bandwidth is 337.35 GB/s"
#   (deepseek-ai/DeepEP issue 16); 7/8 of it over 450 = 0.656.  HybridEP's
#   Hopper table is over InfiniBand only: DeepEP's fraction is taken for it.
#   That table checks the network leg instead: the RDMA bytes a rank sends
#   over the time, 47.36 GB/s on 4 nodes and 41.24 on 8 (BF16 dispatch, 16
#   SMs), against the NIC at inter_node_efficiency's 47 (tests/models/
#   test_moe.py, test_hybridep_across_h100_nodes_is_its_measured_rdma_rate).
# - NVLink 4 on H800 (8 links, 200 GB/s): DeepEP's README (docs/legacy.md), 8
#   ranks: combine (BF16) 158 GB/s, dispatch (FP8) 153; 7/8 x 158 / 200 =
#   0.691; HybridEP alike.
# No EP dispatcher benchmark is published for A100 or the AMD parts (whose
# MoE dispatch runs other kernels): their ring fraction is assumed.
_HYBRIDEP_B200 = round(7 / 8 * (535.94 + 530.86) / 2 / 900, 3)
_HYBRIDEP_NVL72 = round(31 / 32 * (485.50 + 423.19) / 2 / 900, 3)
_DEEPEP_B200 = round(7 / 8 * ((348 + 494) / 2 + (302 + 420) / 2) / 2 / 900, 3)
_DEEPEP_NVL72 = round(23 / 24 * ((324.64 + 450.22) / 2 + (126.53 + 163.62) / 2) / 2 / 900, 3)
_DEEPEP_NVLINK4 = round(7 / 8 * 337.35 / 450, 3)
_DEEPEP_H800 = round(7 / 8 * 158 / 200, 3)
_EP_HOPPER_SOURCE = ("; DeepEP intranode 337.35 GB/s on 8 H20 (NVLink 4; "
                     "github.com/deepseek-ai/DeepEP/issues/16; HybridEP's taken alike)")
_EP_B200_SOURCE = ("; HybridEP dispatch 535.94 and combine 530.86 GB/s on 8 B200 at 16 "
                   "SMs, DeepEP 348 / 302 at 16 and 494 / 420 at 24 (DeepEP "
                   "Hybrid-EP_Implementation.md)")
_EP_GB200_SOURCE = ("; HybridEP dispatch 485.50 and combine 423.19 GB/s on 32 GB200 ranks "
                    "at 16 SMs, DeepEP on 24 ranks 324.64 / 126.53 at 16 and 450.22 / 163.62 "
                    "at 24 (DeepEP Hybrid-EP_Implementation.md)")
#
# Network (inter_node_efficiency): "For NDR @ 400Gbps you should see 46-48GB/s
# per NIC" (NVIDIA NCCL team, NVIDIA/nccl-tests issue 290), 47 of 50 GB/s.
# The same fraction is taken for ConnectX-8 (800 Gb/s) and AMD Pollara (400
# Gb/s), which have no per-NIC figure; ConnectX-8's is checked on a whole
# collective: nccl-tests alltoall_perf over two 8-GPU B300 nodes (16 ranks, 2 x
# 400 Gb/s RoCE a GPU, NCCL 2.28.9; OCI's B300 quick start) moves 8 GiB a rank
# in 44,498 us (out of place) and 44,500 (in place), so each GPU's half of the
# buffer bound for the other node leaves at 96.5 GB/s; the model's 94 gives
# 45.7 ms (tests/models/test_presets.py).
_NDR = 0.94
#
# Collective latencies per step (intra_node_latency_us, inter_node_latency_us):
# NCCL's own cost model (NVIDIA/nccl src/graph/tuning.cc, hwLat, ring):
# 0.47 us (LL), 1.9 us (LL128), 3.4 us (Simple) per step over NVLink, 2.7, 4.0
# and 9.6 us over the network, plus a base of 3.6-8.4 us a collective.  The
# presets take 1 us and 5 us, inside those ranges: which protocol a training
# step's collectives use is not published (an assumption, the same for every
# GPU; RCCL is NCCL's fork and keeps its model).
_LATENCY_US = {"intra_node_latency_us": 1.0, "inter_node_latency_us": 5.0}
#
# Host time per eager kernel (host_kernel_us), where the host sets the pace (a
# dropless MoE layer's device-to-host sync): Megatron-LM's DeepSeek-V3 on 256
# GB200 (docs/discussions/deepseek-v3-gb200-optimization, TP1 PP8 VPP4 EP32,
# micro-batch 1, global batch 2048, sequence 4096, dropless) went from 529.55
# to 540.00 TFLOP/s per GPU when router fusion cut the router's kernels from 72
# to 31, nothing else changed.  Megatron's count for that model is 249.8
# GFLOP per token (validation_sets.megatron_flops), so a step is 15.458 s at
# 529.55 and 0.299 s shorter at 540.00; over the 64 micro-batches x 58 / 8 MoE
# layers of a pipeline rank that is 645 us per MoE layer pass for 41 kernels:
# 15.7 us per kernel -> 16.  The 72 and 31 are forward and backward together
# (Megatron-Core's unfused router reads as 74 kernels both ways, fewer than 40
# forward alone), the pair the refined model's router count uses
# (refined.moe.ROUTER_KERNELS_UNFUSED / _FUSED), so the model's own saving from
# router fusion is these 41 kernels at this rate.  Measured on Grace (GB200); the x86 hosts of the
# DGX/HGX and AMD nodes are assumed alike (no per-host figure is published).
_HOST_KERNEL_US = {"host_kernel_us": 16.0}


def _combined(forward: float, backward: float) -> float:
    """Forward and backward fractions of peak combined by the model's FLOP ratio
    1 : 2.5 (the comment above)."""
    return 3.5 / (1.0 / forward + 2.5 / backward)


def _attention(forward: float, backward: float) -> float:
    """The attention_efficiency of a kernel pair, rounded."""
    return round(_combined(forward, backward), 3)


_ATTN_H100 = _attention(691 / 989, 594 / 989)
_ATTN_BLACKWELL = _attention(1709 / 2500, 1409 / 2500)
_ATTN_ULTRA = _attention(1930 / 2500, 1501 / 2500)
# FP8 fused attention (fp8_attention_efficiency, Transformer Engine's
# fp8_dot_product_attention): the same benchmark's FP8 runs (cuDNN 9.19.1, e4m3,
# head dim 128, 8K), with the causal mask training runs, carried to the reference
# (no mask) by the refined model's own causal tiles and fixed work per query tile
# (rates.kernel_keys: a causal 8K query tile runs (64 + 1) / 2 + 4 tiles' time for
# its 32 counted, the reference 64 + 4 for 64, so x 73 / 68).  H200 forward 964,
# backward 430 -> 0.555 of 989; GB200 1987 / 1478 -> 0.685 of 2500; GB300 2780 /
# 1590 -> 0.778; the B200, B300, H100 and H800 take their sibling's.  The bf16
# pairs read this way give 0.616, 0.593 and 0.644, within 2% of the unmasked
# ones above, but Hopper's FP8 backward with the mask runs at 430 against 636
# without it (Blackwell's: 1478 against 1630): FP8 attention is no faster than
# bf16 on Hopper in a causal LM, and the preset says so.  No FP8 attention rate
# is published for AMD's kernels: MI300X and MI355X take their bf16 fraction
# (assumed); the A100 has no FP8.
def _causal_8k(forward: float, backward: float) -> float:
    """An FP8 attention fraction from the causal 8K pair (the comment above)."""
    return round(_combined(forward, backward) * 73 / 68, 3)


_FP8_ATTN_H100 = _causal_8k(964 / 989, 430 / 989)
_FP8_ATTN_BLACKWELL = _causal_8k(1987 / 2500, 1478 / 2500)
_FP8_ATTN_ULTRA = _causal_8k(2780 / 2500, 1590 / 2500)
_ATTN_MI300X = round(328.6 / 1307.4, 3)
_ATTN_MI355X = _attention(1256.8 / 2516.6, 1168.5 / 2516.6)
_FA2_H100 = _attention(333 / 989, 318 / 989)
_FA2_BLACKWELL = round(373.9 / 2500, 3)
_FA2_GB300 = round(399.7 / 2500, 3)

# Tensor-core FLOPs per exponential (mma_per_exponential): a fused attention
# kernel's softmax costs each score element an exponential on the SM's
# special-function units (MUFU.EX2) beside the 4 d FLOPs of its two products,
# and the refined model counts that cost in tensor-core FLOPs
# (jaxmodel.models.refined.rates.softmax_d0: fitted on H100), so it scales with
# each architecture's dense bf16 FLOPs over exponentials, per SM and clock:
# - A100: 2,048 / 16 = 128 (A100 architecture whitepaper: 1,024 dense bf16 FMA
#   a clock an SM, 16 special-function units an SM);
# - Hopper (H100, H800, H200): 4,096 / 16 = 256 (FlashAttention-3 paper, sec. 3:
#   "989 TFLOPS of FP16 matmul but only 3.9 TFLOPS of special functions");
# - Blackwell (B200, GB200): 8,192 / 16 = 512 (FlashAttention-4, Zadouri et al.
#   2026, and Together AI's post on it: bf16 tensor-core throughput 1 -> 2.25
#   PFLOP/s from H100 to B200, the exponential unit "at 16 operations per clock
#   per SM", unchanged);
# - Blackwell Ultra (B300, GB300): 8,192 / 32 = 256 (NVIDIA technical blog,
#   "Making Softmax More Efficient with NVIDIA Blackwell Ultra", 2026: twice
#   Blackwell's SFU throughput for MUFU.EX2).
# AMD's CDNA 3 and 4 keep the model's default, Hopper's ratio: no figure for
# their transcendental rate was found.
MMA_PER_EXPONENTIAL: dict[str, float] = {
    "a100-40gb-sxm": 128.0, "a100-80gb-sxm": 128.0, "h100-sxm": 256.0,
    "h100-96gb-500w": 256.0, "h800": 256.0, "h200": 256.0, "b200": 512.0, "b300": 256.0,
    "gb200-nvl72": 512.0, "gb300-nvl72": 256.0,
}




def _datasheet_memory_gb(gib: float) -> float:
    """GPU memory in GB (1e9 bytes) from the datasheet's "GB", which are GiB.

    HBM is built of binary-sized stacks, and the datasheet figure is the memory
    in GiB: an "80 GB" H100 or A100 has 80 GiB (nvidia-smi: 81,559 MiB on H100
    SXM, 81,920 MiB on A100 80 GB), 85.9e9 bytes, not 80e9; a "180 GB" B200
    shows 183,359 MiB (179 GiB).  What the driver and CUDA take of it is in
    ``reserved_memory_gb``.  The one place where a preset's capacity is converted.
    """
    return gib * 2.0**30 / 1e9


def _gpu(name, description, source, *, tflops, sms, mamf, memory_gb, hbm_tb_s,
         nvlink_gb_s, network_gb_s, per_node, host, rates=None):
    """A GPU preset; ``rates``: the achievable fractions and latencies beyond
    the GEMM ceiling (input name -> value), where they are set; ``host``: the
    measured GPU-host copy rate, the slower direction, and its source."""
    return Preset(name, description, f"{source}. Host link: {host[1]}", {
        "compute_tflops": tflops,
        "num_sms": sms,
        "matmul_efficiency": mamf,
        "gpu_memory_gb": _datasheet_memory_gb(memory_gb),
        "hbm_bandwidth_tb_s": hbm_tb_s,
        "link_bandwidth_gb_s": nvlink_gb_s,
        "network_bandwidth_gb_s": network_gb_s,
        "gpus_per_node": per_node,
        "host_link_gb_s": host[0],
        **(rates or {}),
    })


# GPU-host copy bandwidth per GPU, one direction (host_link_gb_s: what activation
# offload moves over), measured with the copy engines on pinned host memory, one
# GPU at a time; the slower of host-to-device and device-to-host.  PCIe Gen5 x16
# (63 GB/s a direction) gives 55-57 GB/s on every system measured; Grace's
# NVLink-C2C (450 GB/s a direction on the datasheet) gave Azure 193-211.
# (value GB/s, source)
_HOST_A100 = (25.7, "25.7 (H2D) and 25.8 (D2H) GB/s, CUDA bandwidthTest on a DGX A100 "
              "(A100-SXM4-80GB, pinned; PCIe Gen4 x16)")
_HOST_H100 = (55.2, "55.2-55.3 (D2H) and 55.3-55.4 (H2D) GB/s, nvbandwidth 0.10 "
              "device_to_host_memcpy_ce / host_to_device_memcpy_ce on 8 x H100 80GB HBM3 "
              "(Azure AI-benchmarking-guide, ND H100 v5: 52 and 51)")
_HOST_H800 = (55.1, "55.1 (D2H) and 55.3 (H2D) GB/s, nvbandwidth memcpy_ce on 8 x H800")
_HOST_H200 = (52.0, "52 and 52 GB/s (H2D, D2H), nvbandwidth (Azure AI-benchmarking-guide, "
              "ND H200 v5)")
_HOST_B300 = (55.6, "55.6 (H2D) and 56.9-57.3 (D2H) GB/s, nvbandwidth 0.10 memcpy_ce on a "
              "Dell PowerEdge XE9780 (B300 SXM6 AC)")
_HOST_GRACE = (193.0, "193 (D2H) and 201 (H2D) GB/s over NVLink-C2C, nvbandwidth (Azure "
               "AI-benchmarking-guide, ND GB200 v6; ND GB300 v6: 193 and 211)")
_HOST_MI300X = (55.0, "55 (H2D) and 56 (D2H) GB/s, TransferBench (Azure AI-benchmarking-"
                "guide, ND MI300X v5)")
# Parts with no published measurement take a PCIe Gen5 x16 neighbour's.
_HOST_H100_500W = (_HOST_H100[0], _HOST_H100[1] + "; the same PCIe Gen5 x16 assumed")
_HOST_B200 = (_HOST_B300[0], _HOST_B300[1] + "; none is published for B200: B300's "
              "PCIe Gen5 x16 figure assumed")
_HOST_MI355X = (_HOST_MI300X[0], _HOST_MI300X[1] + "; none is published for MI355X: "
                "MI300X's PCIe Gen5 x16 figure assumed")


def _rates(*, attention, hbm, intra, inter=_NDR, fa2=None, fp8_attention=None, deepep=None,
           hybridep=None):
    return {"attention_efficiency": attention,
            "fa2_attention_efficiency": attention if fa2 is None else fa2,
            "fp8_attention_efficiency": attention if fp8_attention is None else fp8_attention,
            "hbm_efficiency": hbm,
            "intra_node_efficiency": intra, "inter_node_efficiency": inter,
            "deepep_link_efficiency": intra if deepep is None else deepep,
            "hybridep_link_efficiency": intra if hybridep is None else hybridep, **_LATENCY_US,
            **_HOST_KERNEL_US}


# The A100 presets keep the v1 MAMF table's 267.9 / 312 (the sustained bf16
# ceiling below).  Their other rates are the same Azure harness's on an ND A100
# v4 (A100-SXM4-80GB; Azure/AI-benchmarking-guide, Azure_Results/
# ND_A100_v4_results.md): FlashAttention-2 forward+backward 179.5 TFLOP/s (head
# dim 64, batch 2, sequence 8192, as for MI300X and Blackwell above) -> 0.575,
# for the fused attention too (Ampere's fused kernels are FlashAttention-2's
# algorithm, as MI300X's); STREAM Copy, Mul, Add, Triad 1.61, 1.61, 1.70, 1.70
# TB/s of 2.039 -> 0.812; NCCL all-reduce bus bandwidth 231.6 of 300 GB/s at 8 GB
# -> 0.772.  The network keeps NDR's NIC fraction (HDR's is not published:
# assumed).  The 40 GB A100 has none of its own and takes these (the same GA100).
_MAMF_A100 = 0.859
_ATTN_A100 = round(179.5 / 312, 3)
_HBM_A100 = round((1.61 + 1.61 + 1.70 + 1.70) / 4 / 2.039, 3)
_NVLINK3 = round(231.6 / 300, 3)
_A100_MEASURED = ("FlashAttention-2 fwd+bwd 179.5 TFLOP/s, STREAM 1.61-1.70 TB/s, NCCL "
                  "all-reduce bus bandwidth 231.6 of 300 GB/s (Azure AI-benchmarking-guide, "
                  "ND A100 v4)")
# B300 (Blackwell Ultra): MAMF bf16 1769.0 of 2250 (Bekman, MAMF table), which
# GB300 shares: the same die and kernels at a higher power limit.
_MAMF_B300 = 0.786

_HOPPER_MEASURED = ("MAMF bf16 794.5 of 989 (Bekman, MAMF table); cuDNN 9.19 attention fwd 691 / "
                    "bwd 594 TFLOP/s on an H200 (NVIDIA cudnn-frontend SDPA training "
                    "benchmark, head dim 128, 8K, no mask; FP8 964 / 430 causal); NCCL ring bus "
                    "bandwidth 370 of 450 GB/s (nccl-tests issue 212, NCCL topo.h); 46-48 "
                    "of 50 GB/s per NDR NIC (nccl-tests issue 290)")

# H100 under a board power limit below its 700 W TDP (h100-96gb-500w, the
# HBM2e H100 of Meta's Grand Teton hosts at their default 500 W limit; pytorch/
# torchtitan benchmarks/llama3_h100_202412_torchtitan.md, "Hardware": 96GB
# HBM2e, 2.4 TB/sec, 500W, and its footnote 2: "the actual peak TFLOPs number
# is between SXM and NVL").  No throughput of this part at 500 W is published.
# NVIDIA's ratings cannot give it: the H100 NVL (350-400 W) and the H200 NVL
# (up to 600 W) are both rated 1,671 TFLOP/s sparse bf16 (835.5 dense; H100 and
# H200 NVL datasheets), the same figure at limits 200 W apart, so a rating is
# not a clock the limit sets.  What is measured is the same die's sustained rate
# at two lower limits: NVIDIA's Cosmos-Predict2 performance guide times one
# compute-bound workload (Video2World 2B and 14B, 720p at 16 and 10 fps, dense
# attention; nvidia-cosmos/cosmos-predict2 documentations/performance.md at
# 02586399) on H100 SXM and H100 NVL, and on H200 SXM and H200 NVL, boards of
# one die each (132 SMs) that differ in their power limit: 700 W, and 400 W
# (H100 NVL) or 600 W (H200 NVL).  The SXM is 1.56x the H100 NVL's speed
# (0.630-0.656 of its time) and 1.20x the H200 NVL's (0.830-0.841).  A sustained
# clock set by the power limit, clock ~ P^k with the SXM's 700 W as the
# reference, fits the eight ratios with k = 0.822 (least squares through 700 W,
# log-log; each pair alone gives 0.795 and 1.18: the H100 NVL's faster HBM3
# flatters it).  At 500 W: (500 / 700)^0.822 = 0.758 of the SXM's rate.  The
# preset keeps the die's rated peaks (989 TFLOP/s bf16, 1,979 FP8: the SXM's,
# against which torchtitan computes its own MFU) and runs every tensor-core
# fraction of peak at 0.758 of the SXM's measured one (MAMF and FP8 sustained
# GEMMs, attention: the same kernels on the same SMs at a lower clock;
# POWER_LIMITED below), as the Blackwell presets carry their power-limited
# clocks in their fractions.  torchtitan's footnote holds at the boards'
# measured rates: 0.641 (the NVL's) < 0.758 < 1 of the SXM's.
_SXM_POWER_W = 700.0
# (SXM seconds, NVL seconds): Video2World 2B and 14B at 720p, 16 fps then 10 fps.
_SAME_DIE_TIMES: dict[float, tuple[tuple[float, float], ...]] = {
    400.0: ((228.8, 355.7), (856.9, 1348.6), (115.1, 175.5), (447.9, 711.5)),  # H100 NVL
    600.0: ((221.7, 267.2), (836.9, 1006.7), (111.1, 133.1), (436.7, 519.3)),  # H200 NVL
}


def _clock_power_exponent(times: dict[float, tuple[tuple[float, float], ...]]) -> float:
    """k in rate ~ P^k: least squares through (700 W, 1) of ln(SXM time / NVL time)
    on ln(NVL limit / 700 W) over every timed pair in ``times``."""
    points = [(math.log(watts / _SXM_POWER_W), math.log(sxm / nvl))
              for watts, pairs in times.items() for sxm, nvl in pairs]
    return sum(x * y for x, y in points) / sum(x * x for x, _ in points)


_CLOCK_POWER_EXPONENT = _clock_power_exponent(_SAME_DIE_TIMES)


def _same_die_range(watts: float) -> str:
    """The SXM's time over the board's at ``watts``, lowest to highest, as "a-b"."""
    ratios = [sxm / nvl for sxm, nvl in _SAME_DIE_TIMES[watts]]
    return f"{min(ratios):.3f}-{max(ratios):.3f}"


# AMD Instinct MI350X: the MI355X's die (256 CUs, 288 GB HBM3E at 8 TB/s) on an
# air-cooled board at 1,000 W TBP against the MI355X's 1,400 W (AMD Instinct
# MI350 series datasheet), rated 2.3 PFLOP/s bf16 dense at its 2.2 GHz top clock
# (256 x 4,096 FLOP/clk x 2.2 GHz = 2,306.9; FP8 and MXFP4 2x and 4x that).  As
# the NVL ratings above show, a rating is not the clock a limit holds under
# load, and no sustained rate of either board is published, so the MI350X runs
# the MI355X's measured rates taken to 1,000 W by the same-die law above,
# measured on Hopper and assumed for CDNA 4 (the same f V^2 physics; no AMD pair
# is timed): (1,000 / 1,400)^0.822 = 0.758 of the MI355X's TFLOP/s, 0.827 of
# each of its fractions of peak against the MI350X's lower rating
# (POWER_LIMITED).  A check the law was not built on: MLPerf Training v5.1's
# Llama 3.1 8B, FP8 on 8 GPUs, ran at 25.01 samples/s on MI350X and 30.69 on
# MI355X (0.815); the refined model gives 0.821, and 0.941 at AMD's ratings with
# the MI355X's fractions (+14% on that row, +23% on v6.0's).
_MI350X_BF16 = round(256 * 4096 * 2.2e9 / 1e12, 1)

GPUS: dict[str, Preset] = by_name((
    _gpu("a100-40gb-sxm", "NVIDIA A100 40 GB SXM4, DGX A100 node (8 x HDR 200 Gb/s)",
         "NVIDIA A100 Tensor Core GPU datasheet (2020): 312 TFLOP/s bf16 dense, 1,555 GB/s, "
         "NVLink 600 GB/s, 108 SMs (A100 architecture whitepaper), no FP8 tensor cores "
         "(fp8_peak_tflops 0); DGX A100 datasheet: 8 GPUs, 8 x 200 Gb/s ConnectX-6. "
         "Measured: MAMF bf16 267.9 of 312 (Bekman, MAMF table v1). Assumed: the 80 GB "
         "part's " + _A100_MEASURED,
         tflops=312, sms=108, mamf=_MAMF_A100, memory_gb=40,
         hbm_tb_s=1.555, nvlink_gb_s=300, network_gb_s=25, per_node=8, host=_HOST_A100,
         rates=_rates(attention=_ATTN_A100, hbm=_HBM_A100, intra=_NVLINK3)),
    _gpu("a100-80gb-sxm", "NVIDIA A100 80 GB SXM4, DGX A100 node (8 x HDR 200 Gb/s)",
         "NVIDIA A100 80GB datasheet (2021): 312 TFLOP/s bf16 dense, 2,039 GB/s, NVLink "
         "600 GB/s, 108 SMs, no FP8 tensor cores (fp8_peak_tflops 0); DGX A100 "
         "datasheet: 8 GPUs, 8 x 200 Gb/s ConnectX-6. Measured: MAMF bf16 267.9 of 312 "
         "(Bekman, MAMF table v1); " + _A100_MEASURED,
         tflops=312, sms=108, mamf=_MAMF_A100, memory_gb=80,
         hbm_tb_s=2.039, nvlink_gb_s=300, network_gb_s=25, per_node=8, host=_HOST_A100,
         rates=_rates(attention=_ATTN_A100, hbm=_HBM_A100, intra=_NVLINK3)),
    _gpu("h100-sxm", "NVIDIA H100 80 GB SXM5, DGX H100 node (8 x NDR 400 Gb/s)",
         "NVIDIA H100 datasheet (2023): 989 TFLOP/s bf16 dense (1,979 with sparsity), "
         "1,979 TFLOP/s FP8 dense, 3.35 TB/s, NVLink 900 GB/s, 132 SMs (H100 architecture "
         "whitepaper); DGX H100: 8 GPUs, 8 x 400 Gb/s ConnectX-7. Measured: "
         + _HOPPER_MEASURED + "; STREAM 2.90-2.97 of 3.35 TB/s (Azure AI-benchmarking-"
         "guide, ND H100 v5)" + _EP_HOPPER_SOURCE + ". Assumed: collective latencies within "
         "NCCL's cost model (tuning.cc)",
         tflops=989, sms=132, mamf=0.803, memory_gb=80,
         hbm_tb_s=3.35, nvlink_gb_s=450, network_gb_s=50, per_node=8, host=_HOST_H100,
         rates=_rates(attention=_ATTN_H100, hbm=_HBM_H100, intra=_NVLINK4, fa2=_FA2_H100,
                      fp8_attention=_FP8_ATTN_H100, deepep=_DEEPEP_NVLINK4,
                      hybridep=_DEEPEP_NVLINK4)),
    _gpu("h100-96gb-500w", "NVIDIA H100 SXM 96 GB HBM2e at a 500 W power limit (Meta Grand "
         "Teton host: 8 GPUs, NVLink, 400 Gb/s RDMA per GPU)",
         "torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Hardware): 96GB HBM2e, "
         "2.4 TB/sec peak, 8 NVLink-connected GPUs a host, 400 Gb/s backend RDMA per "
         "GPU, default 500W power limit; its footnote 2: the peak lies 'between SXM and "
         "NVL'. Derived: the tensor-core rates at 500 W from the same die's sustained "
         "rate at other limits, NVIDIA's Cosmos-Predict2 performance guide (nvidia-"
         "cosmos/cosmos-predict2 documentations/performance.md, Video2World 720p): "
         f"H100 NVL (400 W) {_same_die_range(400.0)} and H200 NVL (600 W) "
         f"{_same_die_range(600.0)} of the SXM's (700 W) speed, rate ~ "
         f"P^{_CLOCK_POWER_EXPONENT:.3f}: (500/700)^{_CLOCK_POWER_EXPONENT:.3f} = "
         f"{(500 / 700) ** _CLOCK_POWER_EXPONENT:.3f} of each of the SXM's fractions of "
         "its peak (989 TFLOP/s bf16, 1,979 FP8: the same die's rating). Measured (H100 "
         "SXM, as fractions of the peak): " + _HOPPER_MEASURED +
         "; STREAM 2.90-2.97 of 3.35 TB/s (Azure AI-benchmarking-guide, ND H100 v5)"
         + _EP_HOPPER_SOURCE + ". "
         "Assumed: the same-die law's ratio for every tensor-core fraction (same kernels, "
         "same SMs, lower clock), the SXM's STREAM fraction for HBM2e, DGX H100's "
         "non-GPU power, latencies within NCCL's cost model",
         tflops=989, sms=132, mamf=0.803, memory_gb=96,
         hbm_tb_s=2.4, nvlink_gb_s=450, network_gb_s=50, per_node=8, host=_HOST_H100_500W,
         rates=_rates(attention=_ATTN_H100, hbm=_HBM_H100, intra=_NVLINK4, fa2=_FA2_H100,
                      fp8_attention=_FP8_ATTN_H100, deepep=_DEEPEP_NVLINK4,
                      hybridep=_DEEPEP_NVLINK4)),
    _gpu("h800", "NVIDIA H800 80 GB SXM5 (export H100: NVLink 400 GB/s), 8-GPU node, "
         "8 x 400 Gb/s",
         "NVIDIA H800 datasheet: the H100 SXM5 compute (989 TFLOP/s bf16, 1,979 FP8 dense, "
         "3.35 TB/s, 132 SMs) with NVLink 400 GB/s total (200 per direction); DeepSeek-AI "
         "2024 (DeepSeek-V3 technical report, sec. 3.2): 8 GPUs a node, InfiniBand 50 GB/s "
         "per GPU. Measured: NVLink 160 of 200 GB/s one way (DeepSeek-V3 issue 28); DeepEP "
         "intranode combine 158 GB/s on 8 H800 (DeepEP README). "
         "Assumed: the H100's GEMM, attention, HBM and network fractions (the same die "
         "and NICs), latencies within NCCL's cost model",
         tflops=989, sms=132, mamf=0.803, memory_gb=80,
         hbm_tb_s=3.35, nvlink_gb_s=200, network_gb_s=50, per_node=8, host=_HOST_H800,
         rates=_rates(attention=_ATTN_H100, hbm=_HBM_H100, intra=0.80, fa2=_FA2_H100,
                      fp8_attention=_FP8_ATTN_H100, deepep=_DEEPEP_H800, hybridep=_DEEPEP_H800)),
    _gpu("h200", "NVIDIA H200 141 GB SXM, HGX H200 node (8 x NDR 400 Gb/s)",
         "NVIDIA H200 datasheet (2024): 989 TFLOP/s bf16 dense, 1,979 FP8 dense, 141 GB "
         "HBM3e, 4.8 TB/s, NVLink 900 GB/s, 132 SMs (the H100 die); HGX H200: 8 GPUs, "
         "400 Gb/s per GPU. Measured: " + _HOPPER_MEASURED + " (the MAMF table: 'H200 is "
         "the same'); STREAM 4.00-4.15 of 4.8 TB/s (Azure AI-benchmarking-guide, ND H200 "
         "v5)" + _EP_HOPPER_SOURCE + ". Assumed: the H100's attention kernels (same SMs), "
         "latencies within NCCL's cost model",
         tflops=989, sms=132, mamf=0.803, memory_gb=141,
         hbm_tb_s=4.8, nvlink_gb_s=450, network_gb_s=50, per_node=8, host=_HOST_H200,
         rates=_rates(attention=_ATTN_H100, hbm=_HBM_H200, intra=_NVLINK4, fa2=_FA2_H100,
                      fp8_attention=_FP8_ATTN_H100, deepep=_DEEPEP_NVLINK4,
                      hybridep=_DEEPEP_NVLINK4)),
    _gpu("b200", "NVIDIA B200 180 GB, DGX B200 node (8 x 400 Gb/s)",
         "NVIDIA HGX B200 datasheet (2024): per GPU 2.25 PFLOP/s bf16 and 4.5 FP8 dense "
         "(9 PFLOP/s FP4; twice each with sparsity), 180 GB HBM3e, "
         "7.7 TB/s (62 TB/s for 8; the driver reports a 7,680-bit bus at 3,996 MHz = "
         "7.67 TB/s, pytorch/ao PR 4002), NVLink 5 1.8 TB/s, 148 SMs (Blackwell "
         "architecture technical brief); DGX B200: 8 x 400 Gb/s ConnectX-7. Measured: MAMF "
         "bf16 1745.0 of 2250 (Bekman, MAMF table); NVLink 5 ring bus "
         "bandwidth 679.6 of 900 GB/s (Azure AI-benchmarking-guide, ND GB200 v6); 46-48 of "
         "50 GB/s per NDR NIC (nccl-tests issue 290)" + _EP_B200_SOURCE
         + ". Assumed: GB200's measured cuDNN 9.19 "
         "attention fractions (bf16 0.593, FP8 0.685; the same die and kernels); "
         "FlashAttention-2 at GB200's 373.9 of 2500 TFLOP/s (Azure, ND GB200 v6); HBM at "
         "the H200's measured HBM3e fraction (no B200 STREAM figure is published; "
         "ProjectPhysX OpenCL-Benchmark's coalesced read 6.67 and write 6.50 TB/s on a "
         "B200, 0.87 and 0.84 of 7.7, bracket it); latencies within NCCL's cost model",
         tflops=2250, sms=148, mamf=0.776, memory_gb=180,
         hbm_tb_s=7.7, nvlink_gb_s=900, network_gb_s=50, per_node=8, host=_HOST_B200,
         rates=_rates(attention=_ATTN_BLACKWELL, hbm=_HBM_H200, intra=_NVLINK5,
                      deepep=_DEEPEP_B200, hybridep=_HYBRIDEP_B200,
                      fp8_attention=_FP8_ATTN_BLACKWELL,
                      fa2=_FA2_BLACKWELL)),
    _gpu("b300", "NVIDIA B300 (Blackwell Ultra) 288 GB, HGX B300 node (8 x 800 Gb/s)",
         "NVIDIA HGX B300 datasheet (2025): 8 GPUs, 2.3 TB HBM3e (288 GB each), 8 TB/s per "
         "GPU, 72 PFLOP/s FP8 training for 8 GPUs (sparse: 4.5 dense per GPU), bf16 2.25 "
         "PFLOP/s dense per GPU, NVLink 5 1.8 TB/s, ConnectX-8 800 Gb/s per GPU; 160 SMs "
         "(NVIDIA technical blog 'Inside NVIDIA Blackwell Ultra', 2025). Measured: MAMF "
         "bf16 1769.0 of 2250 (Bekman, MAMF table); NVLink 5 ring bus bandwidth 679.6 of "
         "900 GB/s (Azure, ND GB200 v6); ConnectX-8 at 96.5 of 100 GB/s (nccl-tests "
         "alltoall_perf over two B300 nodes, 8 GiB a rank in 44.5 ms; OCI GPU quick "
         "starts, BM.GPU.B300.8), within 3% of the NDR per-NIC fraction it keeps. "
         "Assumed: B200's DeepEP and HybridEP NVLink fractions (none is published for "
         "B300), GB300's measured cuDNN 9.19 attention "
         "fractions (bf16 0.641, FP8 0.778; the same die and kernels), GB300's "
         "measured HBM fraction (0.877: the same die and HBM3e), GB200's "
         "FlashAttention-2 fraction (0.150), "
         "latencies within NCCL's cost model",
         tflops=2250, sms=160, mamf=_MAMF_B300, memory_gb=288,
         hbm_tb_s=8.0, nvlink_gb_s=900, network_gb_s=100, per_node=8, host=_HOST_B300,
         rates=_rates(attention=_ATTN_ULTRA, hbm=_HBM_ULTRA, intra=_NVLINK5,
                      deepep=_DEEPEP_B200, hybridep=_HYBRIDEP_B200,
                      fp8_attention=_FP8_ATTN_ULTRA,
                      fa2=_FA2_BLACKWELL)),
    _gpu("gb200-nvl72", "NVIDIA GB200 NVL72: 72 Blackwell GPUs in one NVLink domain",
         "NVIDIA GB200 NVL72 datasheet (2024): 72 GPUs, 360 PFLOP/s bf16 and 720 PFLOP/s "
         "FP8 with sparsity (2.5 and 5 PFLOP/s dense per GPU), 13.4 TB HBM3e (186 GB per "
         "GPU), 576 TB/s (8 TB/s per GPU), NVLink 130 TB/s (1.8 TB/s per GPU), one "
         "400 Gb/s ConnectX-7 per GPU; gpus_per_node is the NVLink domain (72); 148 SMs. "
         "Measured: MAMF bf16 1822.0 of 2500 (Bekman, MAMF table); NVLink 5 ring bus "
         "bandwidth 679.6 of 900 GB/s (Azure AI-benchmarking-guide, ND GB200 v6); 46-48 "
         "of 50 GB/s per NDR NIC (nccl-tests issue 290); FlashAttention-2 fwd + bwd 373.9 "
         "TFLOP/s (Azure, ND GB200 v6, head dim 128, 8K); cuDNN 9.19 attention fwd 1709 / "
         "bwd 1409 TFLOP/s (NVIDIA cudnn-frontend SDPA training benchmark, head dim 128, "
         "8K, no mask; FP8 1987 / 1478 causal)" + _EP_GB200_SOURCE
         + ". Assumed: the B200's HBM fraction, "
         "latencies within NCCL's cost model",
         tflops=2500, sms=148, mamf=0.729, memory_gb=186,
         hbm_tb_s=8.0, nvlink_gb_s=900, network_gb_s=50, per_node=72, host=_HOST_GRACE,
         rates=_rates(attention=_ATTN_BLACKWELL, hbm=_HBM_H200, intra=_NVLINK5,
                      deepep=_DEEPEP_NVL72, hybridep=_HYBRIDEP_NVL72,
                      fp8_attention=_FP8_ATTN_BLACKWELL,
                      fa2=_FA2_BLACKWELL)),
    _gpu("gb300-nvl72", "NVIDIA GB300 NVL72: 72 Blackwell Ultra GPUs in one NVLink domain",
         "NVIDIA GB300 NVL72 datasheet (2025): 72 GPUs, 360 PFLOP/s bf16 and 720 PFLOP/s "
         "FP8 with sparsity (2.5 and 5 dense per GPU), up to 21 TB HBM3e (288 GB per "
         "GPU), 8 TB/s per GPU, NVLink 130 TB/s (1.8 TB/s per GPU), ConnectX-8 800 Gb/s "
         "per GPU; gpus_per_node is the NVLink domain (72); 160 SMs. Measured: NVLink 5 "
         "ring bus bandwidth 679.6 of 900 GB/s (Azure, ND GB200 v6; ND GB300 v6 measures "
         "680.5); FlashAttention-2 fwd + bwd 399.7 TFLOP/s (Azure, ND GB300 v6, head dim "
         "128, 8K); cuDNN 9.19 attention fwd 1930 / bwd 1501 TFLOP/s (NVIDIA cudnn-frontend "
         "SDPA training benchmark, head dim 128, 8K, no mask; FP8 2780 / 1590 causal); "
         "a STREAM-like triad of 7.140 of 8 TB/s (meta-pytorch/KernelAgent, oink "
         "benchmarks), taken to the four-kernel mean at the H200's ratio (0.877). "
         "Assumed: GB200's DeepEP and HybridEP NVLink fractions (none is published for "
         "GB300), the B300's "
         "MAMF fractions (bf16 0.786, FP8 0.745: the same Blackwell Ultra die and kernels; "
         "no GB300 MAMF is published), the NDR "
         "per-NIC fraction for ConnectX-8 (measured on the B300's, within 3%), latencies "
         "within NCCL's cost model",
         tflops=2500, sms=160, mamf=_MAMF_B300, memory_gb=288,
         hbm_tb_s=8.0, nvlink_gb_s=900, network_gb_s=100, per_node=72, host=_HOST_GRACE,
         rates=_rates(attention=_ATTN_ULTRA, hbm=_HBM_ULTRA, intra=_NVLINK5,
                      deepep=_DEEPEP_NVL72, hybridep=_HYBRIDEP_NVL72,
                      fp8_attention=_FP8_ATTN_ULTRA,
                      fa2=_FA2_GB300)),
    _gpu("mi300x", "AMD Instinct MI300X 192 GB, 8-GPU platform (400 Gb/s per GPU)",
         "AMD Instinct MI300X datasheet (2023): 1,307.4 TFLOP/s bf16 dense, 2,614.9 FP8 "
         "dense, 192 GB HBM3, 5.3 TB/s, 304 compute units, Infinity Fabric 7 x 64 GB/s "
         "per direction (896 GB/s aggregate peer bandwidth); 8-GPU OAM platform with one "
         "400 Gb/s NIC per GPU. Measured: MAMF bf16 668.4 of 1307.4 (Bekman, MAMF table, "
         "ROCm 6.3); FlashAttention-2 fwd+bwd 328.6 TFLOP/s, STREAM 4.09-4.26 of 5.3 TB/s, "
         "RCCL all-reduce bus bandwidth 316.8 of 448 GB/s (Azure AI-benchmarking-guide, "
         "ND MI300X v5). Assumed: FP8 attention at the bf16 fraction (no figure is "
         "published), the NDR per-NIC fraction, latencies within NCCL's cost "
         "model (RCCL is its fork)",
         tflops=1307.4, sms=304, mamf=0.511, memory_gb=192,
         hbm_tb_s=5.3, nvlink_gb_s=448, network_gb_s=50, per_node=8, host=_HOST_MI300X,
         rates=_rates(attention=_ATTN_MI300X, hbm=_HBM_MI300X, intra=_XGMI_MI300X)),
    _gpu("mi355x", "AMD Instinct MI355X 288 GB, 8-GPU platform (400 Gb/s per GPU)",
         "AMD Instinct MI355X datasheet (2025): 256 compute units at 2.4 GHz, 2.5 PFLOP/s "
         "bf16 dense (256 x 4,096 FLOP/clk x 2.4 GHz = 2,516.6 TFLOP/s; FP8 8,192 FLOP/clk "
         "per CU, AMD at ISSCC 2026), 5.0 PFLOP/s FP8 dense, 288 GB HBM3E, 8 TB/s, "
         "Infinity Fabric 7 x 153.6 GB/s (1,075 GB/s aggregate, 538 per direction), "
         "1,400 W; one 400 Gb/s Pollara NIC per GPU. Measured: MAMF bf16 1565.0 of 2516.6 "
         "(Bekman, MAMF table); FP8 GEMM 3130.21 of 5033.2 at 8192 cubed (hipBLASLt, ROCm "
         "blog 'FP8 GEMM Optimization on AMD CDNA4 Architecture', 2026); AITER's assembly "
         "flash attention fwd 1256.8 / bwd 1168.5 TFLOP/s at head dim 128, sequence 8192 "
         "(HipKittens' benchmark results, arXiv 2511.08083); RCCL all-reduce bus bandwidth "
         "406.76 of 538 GB/s on 8 GPUs (rccl-tests; Oracle's MI355X quick start). Assumed: "
         "the MI300X's FlashAttention-2 and STREAM fractions (no MI355X figure is "
         "published), FP8 attention at the bf16 fraction (none published), the NDR "
         "per-NIC fraction, latencies within NCCL's cost model",
         tflops=2516.6, sms=256, mamf=0.622, memory_gb=288,
         hbm_tb_s=8.0, nvlink_gb_s=538, network_gb_s=50, per_node=8, host=_HOST_MI355X,
         rates=_rates(attention=_ATTN_MI355X, hbm=_HBM_MI300X, intra=_XGMI_MI355X,
                      fa2=_ATTN_MI300X)),
    _gpu("mi350x", "AMD Instinct MI350X 288 GB, air-cooled 8-GPU platform at 1,000 W "
         "(400 Gb/s per GPU)",
         "AMD Instinct MI350 series datasheet (2025): the MI355X's 256 compute units, "
         "288 GB HBM3E at 8 TB/s and Infinity Fabric at 1,000 W TBP (MI355X 1,400 W); "
         "rated 2.3 PFLOP/s bf16 dense at its 2.2 GHz top clock "
         f"({_MI350X_BF16:,}; FP8 {2 * _MI350X_BF16:,.1f}, MXFP4 {4 * _MI350X_BF16:,.1f}). "
         "Derived: the MI355X's measured rates at 1,000 W by the same-"
         "die law measured on Hopper (NVIDIA's Cosmos-Predict2 performance guide: H100 "
         f"NVL and H200 NVL against the SXM), rate ~ P^{_CLOCK_POWER_EXPONENT:.3f}: "
         f"(1000/1400)^{_CLOCK_POWER_EXPONENT:.3f} of its TFLOP/s, each of its fractions "
         "of peak times that and 2,516.6 / 2,306.9. Assumed: that law for CDNA 4 (no "
         "AMD pair is timed), and the MI355X's measured fractions (MAMF, FP8 GEMM, AITER "
         "attention, RCCL) and assumed ones (STREAM, FlashAttention-2, the NIC), "
         "latencies within NCCL's cost model",
         tflops=_MI350X_BF16, sms=256, mamf=0.622, memory_gb=288,
         hbm_tb_s=8.0, nvlink_gb_s=538, network_gb_s=50, per_node=8, host=_HOST_MI355X,
         rates=_rates(attention=_ATTN_MI355X, hbm=_HBM_MI300X, intra=_XGMI_MI355X,
                      fa2=_ATTN_MI300X)),
))


# --- Per-precision figures -------------------------------------------------
#
# The refined model's input precision (0 bf16, 1 FP8 per-tensor, 2
# block-scaled FP8, 3 FP4) runs the layer GEMMs at that precision's peak
# (compute_tflops, fp8_peak_tflops, mxfp8_peak_tflops, fp4_peak_tflops) and
# large-GEMM ceiling (matmul_efficiency, fp8_matmul_efficiency,
# fp4_matmul_efficiency).  Each GPU preset takes them from the tables below
# (_precision_columns).

PRECISIONS: tuple[str, ...] = ("bf16", "fp8", "mxfp8", "fp4")

# Peak dense tensor-core TFLOP/s per precision (None: no tensor-core support).
# "mxfp8" is block-scaled FP8: MXFP8 (32-element blocks, E8M0 scales) on
# Blackwell and CDNA 4, which run it at the FP8 rate; Hopper has no
# block-scaled MMA, and runs 1x128 / 128x128 blockwise FP8 (DeepSeek-V3
# technical report, sec. 3.3) on its FP8 tensor cores with the scales applied
# outside the MMA, so its peak is the FP8 peak.  "fp4" is NVFP4 (16-element
# blocks, E4M3 scales) on Blackwell and MXFP4 on CDNA 4, the 4-bit format each
# has.  Sources: the datasheets of the GPU presets above, and for FP4 the NVIDIA
# HGX B200 / GB200 NVL72 datasheets (144 / 1,440 PFLOP/s sparse, 72 / 720
# dense), HGX B300 (105 PFLOP/s dense FP4 for 8 GPUs: 13.1 per GPU; G. Lockwood,
# "B300", glennklockwood.com, from NVIDIA's HGX page), GB300 NVL72 (1,080
# PFLOP/s dense FP4 for 72), AMD MI355X (MXFP4 10.1 PFLOP/s dense, 20.1 with
# sparsity; Tom's Hardware and The Register on AMD's launch, June 2025).
PRECISION_PEAKS: dict[str, dict[str, float | None]] = {
    "a100-40gb-sxm": {"bf16": 312, "fp8": None, "mxfp8": None, "fp4": None},
    "a100-80gb-sxm": {"bf16": 312, "fp8": None, "mxfp8": None, "fp4": None},
    "h100-sxm": {"bf16": 989, "fp8": 1979, "mxfp8": 1979, "fp4": None},
    "h100-96gb-500w": {"bf16": 989, "fp8": 1979, "mxfp8": 1979, "fp4": None},
    "h800": {"bf16": 989, "fp8": 1979, "mxfp8": 1979, "fp4": None},
    "h200": {"bf16": 989, "fp8": 1979, "mxfp8": 1979, "fp4": None},
    "b200": {"bf16": 2250, "fp8": 4500, "mxfp8": 4500, "fp4": 9000},
    "b300": {"bf16": 2250, "fp8": 4500, "mxfp8": 4500, "fp4": 13125},
    "gb200-nvl72": {"bf16": 2500, "fp8": 5000, "mxfp8": 5000, "fp4": 10000},
    "gb300-nvl72": {"bf16": 2500, "fp8": 5000, "mxfp8": 5000, "fp4": 15000},
    "mi300x": {"bf16": 1307.4, "fp8": 2614.9, "mxfp8": None, "fp4": None},
    "mi355x": {"bf16": 2516.6, "fp8": 5033.2, "mxfp8": 5033.2, "fp4": 10066.3},
    "mi350x": {"bf16": _MI350X_BF16, "fp8": 2 * _MI350X_BF16, "mxfp8": 2 * _MI350X_BF16,
               "fp4": 4 * _MI350X_BF16},
}

# Large-GEMM ceilings per precision: measured TFLOP/s over that precision's
# peak.  "burst" is mamf-finder.py's mean of 100 iterations after 50 warm-ups
# (Bekman's MAMF table, FP8 float8_e4m3fn: H100 1402.6, H200 1453.4, B200
# 3432.5, B300 3353.3, GB200 3615.6); "sustained" is cuBLASLt / hipBLASLt with
# random data after 10,000 warm-up iterations (Azure/AI-benchmarking-guide,
# the best size of each table: ND H100 v5 FP8 1382.2, ND H200 v5 FP8 1366.3,
# ND GB200 v6 FP8 2906.9 and FP4 7627.6, ND MI300X v5 FP8 1159.5).  A training
# step is sustained load.  The two harnesses differ (library, shapes, warm-up),
# so the gap between them is not isolated, but it is large only on Blackwell:
# GB200 holds 58% of the FP8 peak sustained against 72% in a burst, where
# Hopper loses 1-6%, which is what a power-limited clock would do.  The bf16
# burst ceilings are the presets' matmul_efficiency.
#
# With FP8 GEMMs at the bf16 ceiling, as the refined model ran them before it
# had a precision input, it predicted what issue 24 saw for Llama 3 8B FP8 on 8
# GPUs (Megatron-Bridge 25.11).  B200 (30,624 tokens/s per GPU measured): +20%
# with these presets, +2% with GB200's sustained FP8 ceiling 0.581 in place of
# 0.776 (B200's own sustained figure is not published).  H100 (14,451): the
# recipe recomputes 5 of 32 layers (recompute_num_layers 5), which the model
# can only express as none (+15%) or all (-11%); at 5 / 32 of the difference
# it is +10%, and +2% with H100's FP8 ceiling 0.698.  The rates are not fitted
# to these rows; the rows only show which rates matter.
#
# A100's sustained ceiling is measured in 16-bit: 256.5 of 312 TFLOP/s (Azure
# guide, ND A100 v4, FP16 cuBLASLt at 16,384 cubed after 10,000 warm-ups; FP16
# and BF16 run at the same tensor-core rate on A100), against MAMF's 267.9 burst.
MATMUL_CEILINGS: dict[str, dict[str, float]] = {
    "a100-80gb-sxm": {"bf16_burst": _MAMF_A100, "bf16_sustained": round(256.5 / 312, 3)},
    "h100-sxm": {"bf16_burst": 0.803, "fp8_burst": 0.709, "fp8_sustained": 0.698},
    "h200": {"bf16_burst": 0.803, "fp8_burst": 0.734, "fp8_sustained": 0.690},
    "b200": {"bf16_burst": 0.776, "fp8_burst": 0.763},
    "b300": {"bf16_burst": 0.786, "fp8_burst": 0.745},
    "gb200-nvl72": {"bf16_burst": 0.729, "fp8_burst": 0.723, "fp8_sustained": 0.581,
                    "fp4_sustained": 0.763},
    "mi300x": {"bf16_burst": 0.511, "fp8_sustained": 0.443},
    "mi355x": {"bf16_burst": 0.622, "fp8_burst": round(3130.21 / 5033.2, 3)},
}

# Board power per GPU, W (the datasheets' maximum TDP / TBP): A100 SXM 400;
# H100 SXM, H800 and H200 SXM "up to 700W"; HGX B200 "configurable up to
# 1,000W"; HGX B300 1,100 W (Verda / DataCrunch, "NVIDIA B200 & B300: GPU
# Architecture and Software Stack", datacrunch-research/blogs); GB200 NVL72
# "configurable up to 1,200W" per GPU; GB300 1,400 W (G. Lockwood, "B300");
# MI300X 750 W; MI355X 1,400 W TBP (AMD at Hot Chips 2025), MI350X 1,000 W (the
# MI350 series datasheet); the Grand Teton
# H100 at its 500 W limit (torchtitan's benchmark, above).
BOARD_POWER_W: dict[str, float] = {
    "a100-40gb-sxm": 400, "a100-80gb-sxm": 400, "h100-sxm": 700, "h100-96gb-500w": 500,
    "h800": 700, "h200": 700,
    "b200": 1000, "b300": 1100, "gb200-nvl72": 1200, "gb300-nvl72": 1400, "mi300x": 750,
    "mi355x": 1400, "mi350x": 1000,
}

# Power of everything else per GPU (W): the system's rated maximum less its
# GPUs' board power (BOARD_POWER_W), per GPU: CPUs, memory, NICs, NVSwitches,
# fans; it also stands in for the network switches the rating leaves out.
# A100: DGX A100 6.5 kW max (DGX A100 datasheet), (6,500 - 8 x 400) / 8.
# H100 / H800 / H200: DGX H100 and DGX H200 10.2 kW max (datasheets),
#   (10,200 - 8 x 700) / 8; Latif et al. 2025 (IEEE Access 13, 61740) measured
#   an HGX H100 node training at up to 8.4 kW of the 10.2 kW rating.
# B200: DGX B200 14.3 kW max (DGX B200 datasheet), (14,300 - 8 x 1,000) / 8.
# B300: DGX B300 about 14 kW, (14,000 - 8 x 1,100) / 8.
# GB200 NVL72: about 120 kW a rack (NVIDIA GB200 NVL72 product brief),
#   (120,000 - 72 x 1,200) / 72, Grace CPUs and NVLink switches included.
# GB300 NVL72: about 135 kW a rack, (135,000 - 72 x 1,400) / 72.
# MI300X, MI355X, MI350X: AMD publishes no system rating; taken as DGX H100's (an
#   8-GPU OAM platform with two CPUs and eight 400 Gb/s NICs, as DGX H100).
# Grand Teton (h100-96gb-500w): Meta publishes no rating; taken as DGX H100's
#   (8 GPUs, two CPUs, one 400 Gb/s NIC a GPU).
NODE_POWER_W: dict[str, float] = {
    "a100-40gb-sxm": 412.5, "a100-80gb-sxm": 412.5, "h100-sxm": 575.0,
    "h100-96gb-500w": 575.0, "h800": 575.0,
    "h200": 575.0, "b200": 787.5, "b300": 650.0, "gb200-nvl72": 466.7,
    "gb300-nvl72": 475.0, "mi300x": 575.0, "mi355x": 575.0, "mi350x": 575.0,
}
# Compute capability, major version, as torch.cuda.get_device_capability()
# reports it (compute_capability_major; Megatron-LM's get_device_arch_version, which
# decides CUDA_DEVICE_MAX_CONNECTIONS: refined.pipeline.serial_streams): NVIDIA's
# CUDA GPUs table, A100 8.0, H100 / H800 / H200 9.0, B200 / GB200 10.0, B300 /
# GB300 10.3; under ROCm, torch reports the gfx target's major and minor, gfx942
# (MI300X) 9.4 and gfx950 (MI350X, MI355X) 9.5 (AMD's LLVM AMDGPU processor table).
COMPUTE_CAPABILITY_MAJOR: dict[str, float] = {
    "a100-40gb-sxm": 8, "a100-80gb-sxm": 8, "h100-sxm": 9, "h100-96gb-500w": 9,
    "h800": 9, "h200": 9, "b200": 10, "b300": 10, "gb200-nvl72": 10, "gb300-nvl72": 10,
    "mi300x": 9, "mi355x": 9, "mi350x": 9,
}
# The refined model's run inputs (jaxmodel.models.run) from the two tables.
for _name, _preset in GPUS.items():
    _preset.values.update(gpu_power_w=float(BOARD_POWER_W[_name]),
                          node_power_w=NODE_POWER_W[_name],
                          compute_capability_major=float(COMPUTE_CAPABILITY_MAJOR[_name]))
    if _name in MMA_PER_EXPONENTIAL:
        _preset.values["mma_per_exponential"] = MMA_PER_EXPONENTIAL[_name]

# Blackwell's sustained GEMM rate by SM count and board power.  Only GB200's is
# measured (Azure, above: 2906.9 TFLOP/s FP8 at its 1,200 W).  Under sustained
# load a Blackwell board runs at its power limit (GB200 keeps 0.80 of its burst
# rate, Hopper 0.94-0.98), so its clock is the one at which its N SMs draw the
# board's P watts: clock ~ (P / N)^k, and the GEMM rate, N x clock, goes as
# N^(1 - k) P^k.  The exponent comes from NVIDIA's ratings of the one die at two
# limits with the same 148 SMs (Hopper's, _CLOCK_POWER_EXPONENT, from measured
# times instead: its NVL ratings do not follow the limit; these are checked by
# GB300's measurement below): B200 at
# 1,000 W and GB200 at 1,200 W are rated 4.5 and 5 PFLOP/s dense FP8 (HGX B200
# and GB200 NVL72 datasheets; bf16 and FP4 in the same ratio), k = ln(5000 /
# 4500) / ln(1200 / 1000) = 0.578.  So B200 runs at GB200's measured fraction of
# its own peak, and Blackwell Ultra's 160 SMs at B300's 1,100 W and GB300's
# 1,400 W (BOARD_POWER_W) at 0.983 and 1.130 x GB200's TFLOP/s.  Each
# precision's MAMF burst ceiling stays the cap (no board sustains more than its
# burst rate).  A check the law was not built on: the same Azure guide's ND GB300
# v6 results (Azure_Results/ND_GB300_v6_results.md, cuBLASLt, random data, 10,000
# warm-ups, best size) measure GB300 at 3308.5 TFLOP/s FP8 and 8640.3 FP4; the law
# gives 2906.9 x 1.130 = 3285 (-0.7%) and 7627.6 x 1.130 = 8619 (-0.2%).  And whole
# training steps: MLPerf Training's Llama 3.1 8B in NVIDIA's NVFP4 recipe on one
# 8-GPU board of each (the seconds per step of the result logs, one round each)
# runs GB200 1.167 x GB300's time (v5.1), B200 1.250 x and B300 1.136 x (v6.0);
# the refined model, the same recipe on each preset, 1.171, 1.271 and 1.088
# (tests/models/test_presets.py, test_blackwell_boards_against_one_another_in_mlperf).
BLACKWELL_ANCHOR = "gb200-nvl72"
BLACKWELL_CLOCK_POWER_EXPONENT = (
    math.log(PRECISION_PEAKS[BLACKWELL_ANCHOR]["fp8"] / PRECISION_PEAKS["b200"]["fp8"])
    / math.log(BOARD_POWER_W[BLACKWELL_ANCHOR] / BOARD_POWER_W["b200"]))
POWER_LIMITED_BLACKWELL: tuple[str, ...] = ("b200", "b300", "gb300-nvl72")


def blackwell_sustained_scale(name: str) -> float:
    """GPU ``name``'s sustained GEMM TFLOP/s over GB200's: ``(N / N_GB200)^(1 - k)
    (P / P_GB200)^k`` (the comment above)."""
    k = BLACKWELL_CLOCK_POWER_EXPONENT
    sms = GPUS[name].values["num_sms"] / GPUS[BLACKWELL_ANCHOR].values["num_sms"]
    power = BOARD_POWER_W[name] / BOARD_POWER_W[BLACKWELL_ANCHOR]
    return sms ** (1.0 - k) * power ** k


def _blackwell_sustained(name: str, precision: str, anchor_fraction: float,
                         burst: float) -> float:
    """GPU ``name``'s sustained ceiling in ``precision`` (a fraction of its peak):
    GB200's sustained TFLOP/s (``anchor_fraction`` of its peak) scaled by
    ``blackwell_sustained_scale``, at most ``burst``."""
    tflops = (anchor_fraction * PRECISION_PEAKS[BLACKWELL_ANCHOR][precision]
              * blackwell_sustained_scale(name))
    return round(min(tflops / PRECISION_PEAKS[name][precision], burst), 3)


# The low-precision ceilings the presets run (fp8_ / fp4_matmul_efficiency):
# the sustained ones, since a training step is sustained load and Blackwell
# loses 20% of its FP8 burst rate under it (GB200 0.723 -> 0.581, above).
# Where a GPU's sustained figure is not published it is assumed from its
# sibling, each named: H800 and h100-96gb-500w are H100's die (0.698); B200,
# B300 and GB300 GB200's by SM count and board power (above: 0.581, 0.634,
# 0.656);
# MI355X its measured burst, as its bf16 ceiling is (no sustained figure of
# either is published): hipBLASLt's 3130.21 TFLOP/s at 8192 cubed, FP8 E4M3 in,
# bf16 out (hipblaslt-bench, 1,000 cold and 1,000 timed iterations on a rotating
# 512 MiB buffer, ROCm 7.1.0; ROCm blog "FP8 GEMM Optimization on AMD CDNA4
# Architecture", 2026-03-10, ROCm/rocm-blogs@c9ef806
# blogs/software-tools-optimization/cdna4-gemm-kernels/README.md) -> 0.622 of
# 5,033.2, where MI300X's FP8-sustained / bf16 ratio had given 0.539.
# Block-scaled FP8 runs at the FP8 ceiling times mxfp8_matmul_ratio
# (MXFP8_RATIO, below).  FP4: each GPU's FP8 sustained ceiling times the share
# of it that FP4's faster tensor cores keep at layer shapes (fp4_over_fp8,
# below).  A GPU without the precision (peak None above: A100 FP8, Hopper
# FP4) has a peak of 0, which makes a layout asking for it invalid, and its
# ceiling is left at the bf16 one.
# A GPU with no MAMF measurement of its own takes the burst ceilings of the same
# die: GB300 B300's (its preset's mamf is _MAMF_B300 for the same reason).
BURST_SIBLING: dict[str, str] = {"gb300-nvl72": "b300"}
_GB200_FP8_SUSTAINED = MATMUL_CEILINGS[BLACKWELL_ANCHOR]["fp8_sustained"]
_GB200_FP8_BURST = MATMUL_CEILINGS[BLACKWELL_ANCHOR]["fp8_burst"]
FP8_SUSTAINED: dict[str, float] = {
    "h100-sxm": MATMUL_CEILINGS["h100-sxm"]["fp8_sustained"],
    "h100-96gb-500w": MATMUL_CEILINGS["h100-sxm"]["fp8_sustained"],
    "h800": MATMUL_CEILINGS["h100-sxm"]["fp8_sustained"],
    "h200": MATMUL_CEILINGS["h200"]["fp8_sustained"],
    **{name: _blackwell_sustained(
        name, "fp8", _GB200_FP8_SUSTAINED,
        MATMUL_CEILINGS[BURST_SIBLING.get(name, name)]["fp8_burst"])
       for name in POWER_LIMITED_BLACKWELL},
    "gb200-nvl72": _GB200_FP8_SUSTAINED,
    "mi300x": MATMUL_CEILINGS["mi300x"]["fp8_sustained"],
    "mi355x": MATMUL_CEILINGS["mi355x"]["fp8_burst"],
    "mi350x": MATMUL_CEILINGS["mi355x"]["fp8_burst"],
}

# The bf16 ceiling the presets run (matmul_efficiency) is the sustained one as
# well: the power limit that takes GB200's FP8 GEMMs from 72% of their peak in a
# burst to 58% sustained sets the clock of every tensor-core GEMM, bf16 ones
# too.  (At their burst ceiling the presets' bf16 GEMMs ran GPT-OSS in bf16
# 22-49% faster on every Blackwell than Megatron-Bridge measured, against +4-13%
# for the same model in MXFP8: the rows showed the gap; the values below come
# from the microbenchmarks alone.)  A100's sustained bf16 figure is
# measured (above); elsewhere a GPU's bf16 burst ceiling (MAMF) takes the
# sustained / burst ratio measured for its FP8 GEMMs, or its sibling's, named
# as for FP8_SUSTAINED: H100 0.698 / 0.709 (H800 and h100-96gb-500w: its die),
# H200 0.690 / 0.734, GB200 0.581 / 0.723; B200, B300 and GB300 then take
# GB200's sustained bf16 TFLOP/s by SM count and board power, as for FP8; the
# boards run below their sibling's power (h100-96gb-500w, mi350x) then take
# POWER_LIMITED's factor on every tensor-core fraction (below).
# MI300X and MI355X have no burst and sustained pair measured in one precision
# and keep their MAMF figure.
_SUSTAINED_OVER_BURST: dict[str, str] = {
    "a100-40gb-sxm": "a100-80gb-sxm", "a100-80gb-sxm": "a100-80gb-sxm",
    "h100-sxm": "h100-sxm", "h100-96gb-500w": "h100-sxm", "h800": "h100-sxm",
    "h200": "h200", "gb200-nvl72": "gb200-nvl72",
}


BF16_SUSTAINED_SOURCE = (
    "The bf16 GEMM ceiling the GPU presets run (`matmul_efficiency`) is the sustained "
    "one, as for FP8: A100's measured 256.5 of 312 TFLOP/s (Azure AI-benchmarking-guide, "
    "ND A100 v4, FP16 cuBLASLt, 10,000 warm-ups); elsewhere the MAMF burst ceiling times "
    "the FP8 sustained / burst ratio of the same die (H100 0.698 / 0.709 for H100, H800 "
    "and the 500 W part; H200 0.690 / 0.734; GB200 0.581 / 0.723): a power-limited clock "
    "slows every tensor-core GEMM. B200, B300 and GB300 run GB200's sustained TFLOP/s "
    "(bf16 and FP8) scaled by SM count and board power, N^(1-k) P^k with k = "
    f"{BLACKWELL_CLOCK_POWER_EXPONENT:.3f} from NVIDIA's ratings of B200 (1,000 W) and "
    "GB200 (1,200 W), the same 148-SM die (`blackwell_sustained_scale`: B200 "
    f"{blackwell_sustained_scale('b200'):.3f}, B300 {blackwell_sustained_scale('b300'):.3f}, "
    f"GB300 {blackwell_sustained_scale('gb300-nvl72'):.3f}). MI300X and MI355X keep "
    "their MAMF figure (no burst and sustained pair is measured).")


def _bf16_sustained(name: str, burst: float) -> float:
    """The bf16 ceiling a training step runs at on GPU ``name`` (the comment above):
    its bf16 burst ceiling ``burst`` (MAMF) times the sustained / burst ratio its
    sibling measured, in bf16 where measured, else in FP8; a power-limited
    Blackwell GB200's sustained rate scaled by ``blackwell_sustained_scale``."""
    if name in POWER_LIMITED_BLACKWELL:
        anchor = (MATMUL_CEILINGS[BLACKWELL_ANCHOR]["bf16_burst"]
                  * _GB200_FP8_SUSTAINED / _GB200_FP8_BURST)
        return _blackwell_sustained(name, "bf16", anchor, burst)
    sibling = _SUSTAINED_OVER_BURST.get(name)
    if sibling is None:
        return burst
    ceilings = MATMUL_CEILINGS[sibling]
    kind = "bf16" if "bf16_sustained" in ceilings else "fp8"
    return round(burst * ceilings[f"{kind}_sustained"] / ceilings[f"{kind}_burst"], 3)

# NVFP4 at layer shapes, from NVIDIA's own measurement of Transformer Engine's
# kernels on a B300 (docs/examples/gemm_profiling/gemm_profiling.rst,
# --pre-quantize: GEMM kernels only) at the 12 GEMM shapes of a layer of hidden
# 4,096, FFN 16,384, 15,872 tokens: per-tensor FP8 6.812 ms, NVFP4 3.764 ms a
# layer.  The shape model (jaxmodel.collectives.gemm_efficiency, operands at 1
# and 0.5 bytes, the BF16 output at 2) on the b300 preset reaches those times at
# ceilings of 0.722 (FP8: MAMF's B300 FP8 burst is 0.745, the two harnesses
# agree) and 0.468 (NVFP4): FP4's tensor cores, 2.92x FP8's peak on B300, make
# the layer's GEMMs only 1.81x faster.  (The shape model's memory term runs at
# the preset's HBM rate: with the H200's fraction in place of GB300's measured
# one the same times gave 0.725 and 0.470.)
#
# What an MMA rate does not shorten is each output tile's fixed work (the
# prologue that fills the operand pipeline, the block scales, the epilogue that
# writes the tile).  A kernel that reaches a fraction f of its MMA peak spends
# x = 1 / f - 1 of its MMA time on that work, so at FP8's 0.722 x = 0.385; on
# tensor cores r times faster the MMA time shrinks r-fold and the fixed work
# stays, so FP4 keeps (1 + x) / (1 + r x) of FP8's fraction (fp4_over_fp8).  On
# B300 (r = 13,125 / 4,500 = 2.92) that is 0.652: an FP4 ceiling of 0.471 from
# the FP8 measurement alone, against the 0.468 measured
# (tests/models/test_moe_fidelity.py solves both again).  The fixed work is a
# property of the Blackwell SM and its kernels, not of the FP4 rate, so every
# FP4 GPU takes the same law at its own r: B200 and GB200 (r = 2) keep 0.782 of
# their FP8 sustained ceiling (0.581 -> 0.455), B300 0.652 (0.634 -> 0.414),
# GB300 (r = 3) 0.643 (0.656 -> 0.422), and MI355X (r = 2, no kernel-level
# FP4 measurement of its own) 0.782 (0.622 -> 0.487).
#
# GB200's cuBLASLt does reach 0.763 of its FP4 peak at the best size of Azure's
# sweep (above), beside 0.581 in FP8: at that size FP4 would be 2.6x FP8, more
# than the 2x of their peaks.  A layer's GEMMs are not that size: run at that
# ceiling, Megatron-Bridge's Llama 3 70B on 64 GB200 (t2 p4 v5) was 1.53x
# faster in NVFP4 than in MXFP8 by the model, against 1.19-1.28 measured; at
# the law's 0.455 it is 1.22-1.27.  The law is not fitted to those rows; they
# only show which ceiling a training step runs at.
TE_B300_LAYER_CEILINGS = {"fp8": 0.722, "fp4": 0.468}
FP4_TILE_WORK = round(1.0 / TE_B300_LAYER_CEILINGS["fp8"] - 1.0, 3)


def fp4_over_fp8(name: str) -> float:
    """The share of its FP8 ceiling GPU ``name``'s FP4 GEMMs keep at layer shapes:
    ``(1 + x) / (1 + r x)``, ``r`` its FP4 / FP8 peak, ``x`` = ``FP4_TILE_WORK``
    (the comment above)."""
    r = PRECISION_PEAKS[name]["fp4"] / PRECISION_PEAKS[name]["fp8"]
    return (1.0 + FP4_TILE_WORK) / (1.0 + r * FP4_TILE_WORK)


def _fp4_ceiling(name: str) -> float:
    """The FP4 ceiling of an FP4 GPU: its FP8 sustained ceiling times ``fp4_over_fp8``."""
    return round(FP8_SUSTAINED[name] * fp4_over_fp8(name), 3)

# A block-scaled FP8 GEMM's rate over a per-tensor FP8 GEMM's of the same shape
# (mxfp8_matmul_ratio).  Blackwell's MMA reads an E8M0 scale per 32 elements of
# each operand (tcgen05.mma's block-scaled kind), which TE first swizzles into
# the layout the kernel wants.  Measured by NVIDIA with Transformer Engine's
# benchmarks/gemm/benchmark_gemm.py on a B300 (docs/examples/gemm_profiling/
# gemm_profiling.rst, "--pre-quantize": kernels only, the inputs already
# quantised): the 12 GEMMs of a layer of hidden 4,096, FFN 16,384 at 15,872
# tokens take 6.812 ms per-tensor FP8 (FP8 CurrentScaling) and 7.161 ms MXFP8,
# a ratio of 0.951 (fprop 0.912, dgrad 0.972, wgrad 0.969).  Every Blackwell
# preset shares that tensor core (B200, B300, GB200, GB300).  Hopper has no
# block-scaled MMA (its 1x128 / 128x128 blockwise FP8 applies the scales
# outside it), and neither it nor CDNA has a published kernel-only
# measurement, so they keep 1.
MXFP8_RATIO = round(6.812 / 7.161, 3)
BLACKWELL: tuple[str, ...] = ("b200", "b300", "gb200-nvl72", "gb300-nvl72")
MXFP8_RATIO_SOURCE = (
    "A block-scaled FP8 GEMM's rate over a per-tensor FP8 GEMM's (`mxfp8_matmul_ratio`, "
    f"`MXFP8_RATIO`): {MXFP8_RATIO} on the Blackwell presets ({', '.join(BLACKWELL)}), "
    "1 on the others: "
    "NVIDIA's Transformer Engine GEMM tutorial (docs/examples/gemm_profiling/"
    "gemm_profiling.rst), B300, kernels only (--pre-quantize): the 12 GEMMs of a layer of "
    "hidden 4,096 and FFN 16,384 at 15,872 tokens take 6.812 ms per-tensor FP8 and "
    "7.161 ms MXFP8. Hopper and CDNA have no kernel-only measurement.")


def _precision_columns(name: str, mamf: float) -> dict[str, float]:
    """The GPU preset's low-precision peaks and ceilings (the tables above);
    ``mamf``: its bf16 ceiling, kept where the GPU lacks a precision."""
    peaks = PRECISION_PEAKS[name]
    return {
        "fp8_peak_tflops": peaks["fp8"] or 0.0,
        "mxfp8_peak_tflops": peaks["mxfp8"] or 0.0,
        "fp4_peak_tflops": peaks["fp4"] or 0.0,
        "fp8_matmul_efficiency": FP8_SUSTAINED.get(name, mamf),
        "mxfp8_matmul_ratio": MXFP8_RATIO if name in BLACKWELL else 1.0,
        "fp4_matmul_efficiency": _fp4_ceiling(name) if peaks["fp4"] else mamf,
    }


# The refined model's precision inputs (precision, above) from the same tables,
# and its bf16 ceiling at sustained load (_bf16_sustained) in place of MAMF's burst.
for _name, _preset in GPUS.items():
    _preset.values["matmul_efficiency"] = _bf16_sustained(
        _name, _preset.values["matmul_efficiency"])
    _preset.values.update(_precision_columns(_name, _preset.values["matmul_efficiency"]))

# A board run below the power its sibling's rates were measured at (the comments
# on h100-96gb-500w and mi350x above): every tensor-core rate is the sibling's
# TFLOP/s times (limit / sibling's board power)^k, the same-die law, so each
# fraction of this board's own rated peak is the sibling's fraction times that
# and the ratio of their peaks.  name -> (sibling, this board's limit, W).
POWER_LIMITED: dict[str, tuple[str, float]] = {
    "h100-96gb-500w": ("h100-sxm", 500.0),
    "mi350x": ("mi355x", 1000.0),
}
TENSOR_CORE_RATES: tuple[str, ...] = (
    "matmul_efficiency", "fp8_matmul_efficiency", "fp4_matmul_efficiency",
    "attention_efficiency", "fa2_attention_efficiency", "fp8_attention_efficiency")


def power_limited_scale(name: str) -> float:
    """The factor on each of ``name``'s sibling's fractions of peak (``POWER_LIMITED``):
    ``(limit / P_sibling)^k x peak_sibling / peak``."""
    sibling, limit = POWER_LIMITED[name]
    law = (limit / BOARD_POWER_W[sibling]) ** _CLOCK_POWER_EXPONENT
    return law * PRECISION_PEAKS[sibling]["bf16"] / PRECISION_PEAKS[name]["bf16"]


for _name, (_sibling, _limit) in POWER_LIMITED.items():
    for _rate in TENSOR_CORE_RATES:
        GPUS[_name].values[_rate] = round(
            GPUS[_sibling].values[_rate] * power_limited_scale(_name), 3)


def _llm(name, description, source, *, params_b, hidden, layers, heads, kv_heads, ffn, mlp,
         vocab, seq, tied, head_dim=0, rotary=1, gpt2_layer=0):
    """An LLM preset; ``rotary`` 0 for learned absolute positions (GPT-2/3 and the
    Megatron-LM GPT models), whose layers apply no rotary embedding; ``gpt2_layer``
    1 for GPT-2's layer (one fused QKV projection, biases on every linear layer:
    openai/gpt-2 model.py ``c_attn``; Megatron-LM's ``query_key_value`` with
    ``add_bias_linear``), which only eager PyTorch pays for."""
    return Preset(name, description, source, {
        "model_params_b": params_b,
        "hidden_dim": hidden,
        "num_layers": layers,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "ffn_hidden_dim": ffn,
        "mlp_weight_matrices": mlp,
        "vocab_size": vocab,
        "seq_length": seq,
        "tied_embeddings": tied,
        "head_dim": head_dim,
        "rotary_embedding": rotary,
        "fused_qkv": gpt2_layer,
        "linear_bias": gpt2_layer,
    })


_SC21 = "Narayanan et al. 2021 (SC21), Table 1; GPT-2 vocabulary padded to 51,200, s = 2048"


def _sc21(name, params_b, heads, hidden, layers):
    return _llm(name, f"GPT {params_b}B of the Megatron-LM SC21 runs", _SC21,
                params_b=params_b, hidden=hidden, layers=layers, heads=heads, kv_heads=heads,
                ffn=4 * hidden, mlp=2, vocab=51200, seq=2048, tied=1, rotary=0,
                gpt2_layer=1)


LLMS: dict[str, Preset] = by_name((
    _llm("gpt3-175b", "GPT-3 175B", "Brown et al. 2020, Table 2.1 (GPT-2 BPE, 50,257 tokens)",
         params_b=175, hidden=12288, layers=96, heads=96, kv_heads=96, ffn=49152, mlp=2,
         vocab=50257, seq=2048, tied=1, rotary=0, gpt2_layer=1),
    _llm("llama2-7b", "Llama 2 7B", "Touvron et al. 2023 (Llama 2), Table 1 and model config",
         params_b=6.74, hidden=4096, layers=32, heads=32, kv_heads=32, ffn=11008, mlp=3,
         vocab=32000, seq=4096, tied=0),
    _llm("llama2-13b", "Llama 2 13B", "Touvron et al. 2023 (Llama 2), Table 1 and model config",
         params_b=13.0, hidden=5120, layers=40, heads=40, kv_heads=40, ffn=13824, mlp=3,
         vocab=32000, seq=4096, tied=0),
    _llm("llama2-70b", "Llama 2 70B", "Touvron et al. 2023 (Llama 2), Table 1 and model config",
         params_b=69.0, hidden=8192, layers=80, heads=64, kv_heads=8, ffn=28672, mlp=3,
         vocab=32000, seq=4096, tied=0),
    _llm("llama3-8b", "Llama 3 8B", "Llama Team 2024 (The Llama 3 Herd of Models), Table 3",
         params_b=8.03, hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, mlp=3,
         vocab=128256, seq=8192, tied=0),
    _llm("llama3-70b", "Llama 3 70B", "Llama Team 2024 (The Llama 3 Herd of Models), Table 3",
         params_b=70.6, hidden=8192, layers=80, heads=64, kv_heads=8, ffn=28672, mlp=3,
         vocab=128256, seq=8192, tied=0),
    _llm("llama3-405b", "Llama 3 405B", "Llama Team 2024 (The Llama 3 Herd of Models), "
         "Table 3", params_b=405, hidden=16384, layers=126, heads=128, kv_heads=8,
         ffn=53248, mlp=3, vocab=128256, seq=8192, tied=0),
    _llm("llama3.1-8b", "Llama 3.1 8B (the Llama 3 8B architecture, 128K context)",
         "meta-llama/Llama-3.1-8B config.json (Hugging Face): 32 layers, hidden 4096, "
         "intermediate 14336, 32 heads, 8 KV heads, vocabulary 128256, untied; Llama Team "
         "2024, Table 3 (pre-training at 8K tokens); named as torchtitan's benchmarks name it",
         params_b=8.03, hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, mlp=3,
         vocab=128256, seq=8192, tied=0),
    _llm("llama3.1-70b", "Llama 3.1 70B (the Llama 3 70B architecture, 128K context)",
         "meta-llama/Llama-3.1-70B config.json (Hugging Face): 80 layers, hidden 8192, "
         "intermediate 28672, 64 heads, 8 KV heads, vocabulary 128256, untied; Llama Team "
         "2024, Table 3 (pre-training at 8K tokens); named as torchtitan's benchmarks name it",
         params_b=70.6, hidden=8192, layers=80, heads=64, kv_heads=8, ffn=28672, mlp=3,
         vocab=128256, seq=8192, tied=0),
    _llm("llama3.1-405b", "Llama 3.1 405B", "meta-llama/Llama-3.1-405B config.json "
         "(Hugging Face): 126 layers, hidden 16384, intermediate 53248, 128 heads, 8 KV "
         "heads, vocabulary 128256, untied; Llama Team 2024, Table 3 (pre-training at "
         "8K tokens, 128K in the long-context stage)",
         params_b=405, hidden=16384, layers=126, heads=128, kv_heads=8, ffn=53248, mlp=3,
         vocab=128256, seq=8192, tied=0),
    _llm("nemotron4-340b", "Nemotron-4 340B", "NVIDIA 2024, Nemotron-4 340B Technical "
         "Report, Table 1 (96 layers, hidden 18432, 96 heads, 8 KV heads, sequence 4096, "
         "vocabulary 256,000, squared-ReLU MLP: 2 matrices, FFN 73728, untied)",
         params_b=340, hidden=18432, layers=96, heads=96, kv_heads=8, ffn=73728, mlp=2,
         vocab=256000, seq=4096, tied=0),
    _llm("qwen3-32b", "Qwen3 32B", "Qwen/Qwen3-32B config.json (Hugging Face): 64 layers, "
         "hidden 5120, intermediate 25600, 64 heads, 8 KV heads, vocabulary 151936, "
         "untied, head_dim 128 (Q/O projections 8192 wide, not h); Qwen Team 2025 (Qwen3 "
         "Technical Report): 32K context",
         params_b=32.8, hidden=5120, layers=64, heads=64, kv_heads=8, ffn=25600, mlp=3,
         vocab=151936, seq=32768, tied=0, head_dim=128),
    _sc21("megatron-1.7b", 1.7, 24, 2304, 24),
    _sc21("megatron-3.6b", 3.6, 32, 3072, 30),
    _sc21("megatron-7.5b", 7.5, 32, 4096, 36),
    _sc21("megatron-18b", 18.4, 48, 6144, 40),
    _sc21("megatron-39b", 39.1, 64, 8192, 48),
    _sc21("megatron-76b", 76.1, 80, 10240, 60),
    _sc21("megatron-145b", 145.6, 96, 12288, 80),
    _sc21("megatron-310b", 310.1, 128, 16384, 96),
    _sc21("megatron-530b", 529.6, 128, 20480, 105),
    _sc21("megatron-1t", 1008.0, 160, 25600, 128),
))


def _moe(name, description, source, published, *, hidden, layers, heads, kv_heads, ffn,
         vocab, seq, experts, top_k, expert_ffn, shared=0, dense_layers=0, head_dim=0,
         mla=None, tied=0, window=None, clamp_bias=0):
    """An MoE LLM (SwiGLU); ``model_params_b`` is the published total.

    ``mla``: ``(q_lora_rank, kv_lora_rank, qk_rope_dim)`` for DeepSeek-style
    multi-head latent attention (``head_dim`` is then ``qk_nope_head_dim`` =
    ``v_head_dim``).  ``window``: ``(sliding_window, sliding_window_share)``
    for sliding-window attention in that share of the layers.  ``clamp_bias``:
    the routed experts clamp their GLU input and carry biases (GPT-OSS:
    ``glu_clamp`` and ``expert_bias``)."""
    values = {
        "model_params_b": published.total_params_b,
        "hidden_dim": hidden, "num_layers": layers, "num_heads": heads,
        "num_kv_heads": kv_heads, "ffn_hidden_dim": ffn, "mlp_weight_matrices": 3,
        "vocab_size": vocab, "seq_length": seq, "tied_embeddings": tied,
        "num_experts": experts, "experts_per_token": top_k, "moe_ffn_hidden_dim": expert_ffn,
        "shared_experts": shared, "dense_layers": dense_layers, "moe_layer_interval": 1,
        "head_dim": head_dim, "attention": 0,
        "glu_clamp": clamp_bias, "expert_bias": clamp_bias,
    }
    if mla is not None:
        values.update(attention=1, q_lora_rank=mla[0], kv_lora_rank=mla[1], qk_rope_dim=mla[2])
    if window is not None:
        values.update(sliding_window=window[0], sliding_window_share=window[1])
    return Preset(name, description, source, values, published)


# GPT-OSS attends within a 128-token sliding window in every other layer
# (config.json "sliding_window": 128, "layer_types" alternating
# sliding_attention / full_attention; the gpt-oss model card, Architecture:
# attention blocks alternate between banded window and fully dense patterns,
# bandwidth 128 tokens; Megatron-Bridge's GPT OSS page: window 128,
# alternating full/windowed) and adds a learned sink logit per head to the
# softmax's denominator: a few FLOPs per query and head against the core's
# 4 d_h min(s, w) = 32,768 in a windowed layer (below 0.01%: not costed).
# Megatron-Core/Transformer Engine run the sink inside cuDNN's fused attention
# (softmax_type "learnable", cuDNN >= 9.13.1): the fused kernel's rate, no
# s x s scores (jaxmodel.models.validation_sets, the Bridge decisions).
# Its experts' SwiGLU clamps the gate to at most 7 and the linear half to
# [-7, 7] (config.json "swiglu_limit": 7.0) and its expert projections carry
# biases (gate_up_proj_bias, down_proj_bias in the checkpoint): glu_clamp and
# expert_bias, whose eager ops the refined model's moe module costs.
_GPT_OSS_WINDOW = (128, 0.5)
_GPT_OSS_ATTENTION = ("Sliding window 128 in every other layer (config.json sliding_window, "
                      "layer_types); the per-head attention sink logit is not costed")


# Mixture-of-experts models.  Shapes from each model's Hugging Face
# config.json (the source names the repository); published counts from its
# model card or report.  seq is the pre-training sequence length.
MOE_LLMS: dict[str, Preset] = by_name((
    _moe("mixtral-8x7b", "Mixtral 8x7B (8 experts, top-2)",
         "mistralai/Mixtral-8x7B-v0.1 config.json; Jiang et al. 2024 (Mixtral of Experts): "
         "46.7B total, 12.9B active (embeddings included)",
         Published(46.7, 0.05, 12.9, 0.05, True),
         hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=32000, seq=32768,
         experts=8, top_k=2, expert_ffn=14336),
    _moe("mixtral-8x22b", "Mixtral 8x22B (8 experts, top-2)",
         "mistralai/Mixtral-8x22B-v0.1 config.json; Mistral AI announcement (2024): 141B "
         "total, 39B active",
         Published(141, 0.5, 39, 0.5, True),
         hidden=6144, layers=56, heads=48, kv_heads=8, ffn=16384, vocab=32000, seq=65536,
         experts=8, top_k=2, expert_ffn=16384),
    _moe("deepseek-v3", "DeepSeek-V3 (MLA, 256 routed + 1 shared expert, top-8)",
         "deepseek-ai/DeepSeek-V3 config.json (without the multi-token-prediction module); "
         "DeepSeek-AI 2024 (DeepSeek-V3 Technical Report): 671B total, 37B activated",
         Published(671, 0.5, 37, 0.5, False),
         hidden=7168, layers=61, heads=128, kv_heads=128, ffn=18432, vocab=129280, seq=4096,
         experts=256, top_k=8, expert_ffn=2048, shared=1, dense_layers=3, head_dim=128,
         mla=(1536, 512, 64)),
    _moe("qwen3-30b-a3b", "Qwen3-30B-A3B (128 experts, top-8)",
         "Qwen/Qwen3-30B-A3B config.json and model card: 30.5B total, 3.3B activated",
         Published(30.5, 0.05, 3.3, 0.05, True),
         hidden=2048, layers=48, heads=32, kv_heads=4, ffn=6144, vocab=151936, seq=4096,
         experts=128, top_k=8, expert_ffn=768, head_dim=128),
    _moe("qwen3-235b-a22b", "Qwen3-235B-A22B (128 experts, top-8)",
         "Qwen/Qwen3-235B-A22B config.json and model card: 235B total, 22B activated",
         Published(235, 0.5, 22, 0.5, True),
         hidden=4096, layers=94, heads=64, kv_heads=4, ffn=12288, vocab=151936, seq=4096,
         experts=128, top_k=8, expert_ffn=1536, head_dim=128),
    _moe("gpt-oss-20b", "gpt-oss-20b (32 experts, top-4)",
         "openai/gpt-oss-20b config.json; OpenAI 2025 (gpt-oss model card, Table 1): 20.91B "
         "total, 3.61B active (unembedding counted, embedding not). " + _GPT_OSS_ATTENTION,
         Published(20.91, 0.005, 3.61, 0.005, False),
         hidden=2880, layers=24, heads=64, kv_heads=8, ffn=2880, vocab=201088, seq=4096,
         experts=32, top_k=4, expert_ffn=2880, head_dim=64, window=_GPT_OSS_WINDOW,
         clamp_bias=1),
    _moe("gpt-oss-120b", "gpt-oss-120b (128 experts, top-4)",
         "openai/gpt-oss-120b config.json; OpenAI 2025 (gpt-oss model card, Table 1): "
         "116.83B total, 5.13B active (unembedding counted, embedding not). "
         + _GPT_OSS_ATTENTION,
         Published(116.83, 0.005, 5.13, 0.005, False),
         hidden=2880, layers=36, heads=64, kv_heads=8, ffn=2880, vocab=201088, seq=4096,
         experts=128, top_k=4, expert_ffn=2880, head_dim=64, window=_GPT_OSS_WINDOW,
         clamp_bias=1),
    _moe("kimi-k2", "Kimi K2 (MLA, 384 routed + 1 shared expert, top-8)",
         "moonshotai/Kimi-K2-Instruct config.json and model card: 1T total, 32B activated; "
         "trained with the Muon optimizer (MuonClip: optimizer 1)",
         Published(1000, 50, 32, 0.5, False),
         hidden=7168, layers=61, heads=64, kv_heads=64, ffn=18432, vocab=163840, seq=4096,
         experts=384, top_k=8, expert_ffn=2048, shared=1, dense_layers=1, head_dim=128,
         mla=(1536, 512, 64)),
))
LLMS.update(MOE_LLMS)


def _hybrid(name, description, source, published, *, pattern, hidden, heads, kv_heads,
            head_dim, ffn, mlp, vocab, seq, experts, top_k, expert_ffn, shared, mamba,
            latent=0):
    """A hybrid Mamba-2 / attention / MoE LLM (``jaxmodel.models.refined.mamba``).

    ``pattern``: Megatron-Core's ``hybrid_layer_pattern`` (``M`` Mamba-2, ``*``
    attention, ``E`` MoE FFN, ``-`` dense FFN), every character a layer; the
    MoE layers are the FFN layers when ``experts`` > 1.  ``mamba``: ``(heads,
    head_dim, state_dim, groups, conv_kernel, chunk_size)``; ``latent``: the
    LatentMoE width (``moe_latent_size``, 0: none)."""
    ffn_layers = pattern.count("E") + pattern.count("-")
    if len(pattern) != pattern.count("M") + pattern.count("*") + ffn_layers:
        raise ValueError(f"hybrid pattern {pattern!r}: only M, *, E and - are layers")
    if pattern.count("E") and pattern.count("-"):
        raise ValueError(f"hybrid pattern {pattern!r}: mixed E and - layers have no input")
    values = {
        "model_params_b": published.total_params_b,
        "hidden_dim": hidden, "num_layers": len(pattern), "num_heads": heads,
        "num_kv_heads": kv_heads, "head_dim": head_dim, "ffn_hidden_dim": ffn,
        "mlp_weight_matrices": mlp, "vocab_size": vocab, "seq_length": seq,
        "tied_embeddings": 0, "num_experts": experts, "experts_per_token": top_k,
        "moe_ffn_hidden_dim": expert_ffn, "shared_experts": shared, "dense_layers": 0,
        "moe_layer_interval": 1, "attention": 0,
        "mamba_layers": pattern.count("M"), "attention_layers": pattern.count("*"),
        "moe_latent_size": latent,
    }
    values.update(zip(("mamba_heads", "mamba_head_dim", "mamba_state_dim", "mamba_groups",
                       "mamba_conv_kernel", "mamba_chunk_size"), mamba, strict=True))
    return Preset(name, description, source, values, published)


# Hybrid Mamba-2 / MoE models.  Nemotron-3 Nano: Megatron-Bridge's
# Nemotron3NanoProvider (src/megatron/bridge/models/nemotronh/
# nemotron_h_provider.py: hybrid_layer_pattern, hidden 2688, 32 heads, 2 query
# groups of kv_channels 128, 64 Mamba heads of 64, state 128, 128 experts of
# 1856, top-6, a shared expert of 3712 = 2 x 1856, counted as 2 of f_e: the
# same weights and FLOPs) over NemotronHModelProvider (8 Mamba groups,
# squared-ReLU MLP: 2 weight matrices) and MambaModelProvider (untied
# embeddings); the vocabulary (131,072), conv width 4 and chunk 128 from
# nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 config.json (vocab_size,
# conv_kernel, chunk_size).  The published counts: NVIDIA's Nemotron 3
# announcement (research.nvidia.com, "Nemotron 3 Nano is a 3.2B active (3.6B
# with embeddings), 31.6B total parameter model").  seq 8192: Megatron-Bridge's
# Nemotron-3 Nano pre-training performance recipes.
# Nemotron-3 Super: Megatron-Bridge's Nemotron3SuperProvider (the same file:
# hybrid_override_pattern of 88 layers, 40 Mamba-2, 8 attention, 40 MoE;
# hidden 4096, 32 heads, 2 query groups of kv_channels 128, 128 Mamba heads of
# 64, state 128, 512 experts of 2688, top-22, a shared expert of 5376 = 2 x
# 2688, counted as 2 of f_e, moe_latent_size 1024) over NemotronHModelProvider
# (8 Mamba groups, squared ReLU: 2 weight matrices); vocabulary 131,072, conv
# width 4 and chunk 128 from nvidia/NVIDIA-Nemotron-3-Super-120B-A12B's
# config.json (vocab_size, conv_kernel, chunk_size, and n_groups 8,
# moe_latent_size 1024 alike).  Its MTP modules (the provider's mtp_num_layers
# 2, pattern "*E") are left to the runs (mtp_layers), as for DeepSeek-V3: the
# published count leaves them out.  Published: NVIDIA's Nemotron 3 Super
# technical report (abstract: "a 120 billion (active 12 billion) parameter
# hybrid Mamba-Attention Mixture-of-Experts model"; the checkpoint's name
# 120B-A12B); the active count without the input embedding (as Nano's 3.2B).
# seq 8192: the Bridge's Nemotron-3 Super pre-training performance recipes.
# Nemotron 3.5 Lightning: Nemotron-3 Nano's architecture.  Megatron-Bridge's
# Lightning performance recipes (perf_recipes/nemotronh/gb200/nemotronh.py at
# 020041f, nemotron_3_5_lightning_pretrain_8gpu_gb200_{bf16,fp8mx,nvfp4}_config)
# call the Nano recipe of the same GPU and precision and change only the MTP
# settings (mtp_num_layers 2, mtp_hybrid_override_pattern "*E",
# mtp_use_repeated_layer, keep_mtp_spec_in_bf16), the checkpoint and a HybridEP
# SM count; NVIDIA's Nemotron skill for it (NVIDIA-NeMo/Nemotron,
# skills/nemotron-lightning35) calls it "a distilled Nano, not a new pretraining
# run", initialised from Nemotron 3 Nano Base.  So the preset is Nano's, with
# Nano's published counts (NVIDIA's Megatron-Bridge page for Lightning rounds
# them to "30B total parameters and 3B active parameters"); the MTP depths are
# left to the runs, as for Super.
NANO_ARCHITECTURE = dict(
    pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    hidden=2688, heads=32, kv_heads=2, head_dim=128, ffn=1856, mlp=2, vocab=131072,
    seq=8192, experts=128, top_k=6, expert_ffn=1856, shared=2,
    mamba=(64, 64, 128, 8, 4, 128))
NANO_PUBLISHED = Published(31.6, 0.05, 3.6, 0.05, True)
# Nemotron-3 Ultra: its Hugging Face config.json (nvidia/NVIDIA-Nemotron-3-Ultra-
# 550B-A55B-BF16), which Megatron-Bridge's Ultra recipes load through AutoBridge
# (recipes/nemotronh/nemotron_3_ultra.py: "512 experts, top-k 22, sigmoid router,
# latent size 2048, shared expert, ... squared-relu, hybrid Mamba/attention
# pattern ... all come from the HF model definition"), is not in the search
# index; two public transcriptions of it agree: willccbb/miles
# scripts/models/nemotron-3-ultra-550b-a55b.sh at 176722dd (108 layers, hidden
# 8192, 64 heads, 2 KV heads of 128, expert FFN 5120, 512 experts, top-22, one
# shared expert of 10240 = 2 x 5120, counted as 2 of f_e, moe_latent_size 2048,
# 8 Mamba groups, vocabulary 131,072, untied) and flashinfer-ai/flashinfer
# benchmarks/bench_mamba_ssu.py at 147892c1 (256 Mamba heads of 64, state 128,
# 8 groups).  Its layers_block_type: 48 Mamba-2, 48 MoE and 12 attention layers,
# attention at 7, 14, 23, 32, 39, 48, 57, 64, 73, 82, 89 and 98 and Mamba-2 and
# MoE alternating around them from a Mamba-2 layer (a third-party reading of the
# config; the refined model uses the counts).  Conv width 4 and chunk 128 as
# Nano's and Super's configs (Ultra's chunk is not transcribed: assumed).  The
# published counts: NVIDIA's Nemotron 3 Ultra report (arXiv 2606.15007,
# abstract): "550 billion total and 55 billion active"; the active count without
# the input embedding, as Super's.  Its MTP (one "*E" depth, run twice by the
# recipes: mtp_num_layers 2, repeated) is left to the runs.
_ULTRA_ATTENTION = (7, 14, 23, 32, 39, 48, 57, 64, 73, 82, 89, 98)


def _alternating_pattern(layers: int, attention: tuple[int, ...]) -> str:
    """``M`` and ``E`` alternating from ``M``, with ``*`` at the ``attention`` indices."""
    kinds, mamba = [], True
    for index in range(layers):
        if index in attention:
            kinds.append("*")
        else:
            kinds.append("M" if mamba else "E")
            mamba = not mamba
    return "".join(kinds)


ULTRA_PATTERN = _alternating_pattern(108, _ULTRA_ATTENTION)
HYBRID_LLMS: dict[str, Preset] = by_name((
    _hybrid("nemotron3-nano", "Nemotron-3 Nano 30B-A3B (hybrid Mamba-2 / MoE, 128 experts, "
            "top-6)",
            "Megatron-Bridge Nemotron3NanoProvider; nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 "
            "config.json; NVIDIA: 31.6B total, 3.6B active with embeddings",
            NANO_PUBLISHED, **NANO_ARCHITECTURE),
    _hybrid("nemotron3-super", "Nemotron-3 Super 120B-A12B (hybrid Mamba-2 / LatentMoE, "
            "512 experts, top-22, latent 1024)",
            "Megatron-Bridge Nemotron3SuperProvider; nvidia/NVIDIA-Nemotron-3-Super-120B-A12B "
            "config.json; NVIDIA: 120B total, 12B active",
            Published(120.0, 0.5, 12.0, 0.5, False),
            pattern="MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*"
                    "EMEMEMEM*EMEMEMEME",
            hidden=4096, heads=32, kv_heads=2, head_dim=128, ffn=2688, mlp=2, vocab=131072,
            seq=8192, experts=512, top_k=22, expert_ffn=2688, shared=2,
            mamba=(128, 64, 128, 8, 4, 128), latent=1024),
    _hybrid("nemotron3-ultra", "Nemotron-3 Ultra 550B-A55B (hybrid Mamba-2 / LatentMoE, "
            "512 experts, top-22, latent 2048)",
            "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16 config.json as transcribed by "
            "willccbb/miles and flashinfer-ai/flashinfer; NVIDIA (arXiv 2606.15007): 550B "
            "total, 55B active",
            Published(550.0, 0.5, 55.0, 0.5, False),
            pattern=ULTRA_PATTERN, hidden=8192, heads=64, kv_heads=2, head_dim=128,
            ffn=5120, mlp=2, vocab=131072, seq=8192, experts=512, top_k=22,
            expert_ffn=5120, shared=2, mamba=(256, 64, 128, 8, 4, 128), latent=2048),
    _hybrid("nemotron3.5-lightning", "Nemotron 3.5 Lightning 30B-A3B (Nemotron-3 Nano's "
            "backbone; its 2 MTP depths are the runs' mtp_layers)",
            "Megatron-Bridge perf recipes nemotronh/gb200/nemotronh.py "
            "(nemotron_3_5_lightning_pretrain_8gpu_*_config: Nano's config plus MTP); "
            "NVIDIA: a distilled Nano; Nano's published counts",
            NANO_PUBLISHED, **NANO_ARCHITECTURE),
))
LLMS.update(HYBRID_LLMS)


# What ``jaxmodel presets`` shows of each preset: (input, column header).
# Dense LLM presets carry no expert counts: the table shows one expert, one per token.
GPU_COLUMNS: tuple[tuple[str, str], ...] = (
    ("compute_tflops", "TFLOP/s"),
    ("gpu_memory_gb", "GB"),
    ("hbm_bandwidth_tb_s", "HBM TB/s"),
    ("link_bandwidth_gb_s", "NVLink GB/s"),
    ("network_bandwidth_gb_s", "net GB/s"),
    ("gpus_per_node", "per node"),
)
LLM_COLUMNS: tuple[tuple[str, str], ...] = (
    ("model_params_b", "params B"),
    ("hidden_dim", "h"),
    ("num_layers", "L"),
    ("num_heads", "a"),
    ("num_kv_heads", "kv"),
    ("ffn_hidden_dim", "ffn"),
    ("vocab_size", "V"),
    ("seq_length", "s"),
    ("num_experts", "E"),
    ("experts_per_token", "k"),
)


def get_preset(kind: str, name: str) -> Preset:
    """The ``kind`` (``"gpu"`` or ``"llm"``) preset called ``name``.

    Raises:
      InputError: an unknown name (with the closest one and the list).
    """
    table = GPUS if kind == "gpu" else LLMS
    try:
        return table[name]
    except KeyError:
        allowed = "one of " + ", ".join(table) + closest(name, table)
        raise InputError(kind, name, allowed) from None


def apply_presets(model: Model | str, gpu: str | None = None, llm: str | None = None
                  ) -> dict[str, float]:
    """Input values of ``model`` (a ``Model`` or its name) set by the named
    presets (empty for ``None``).

    Values for inputs the model does not have are dropped, so one preset serves
    every model.  The GPU preset is applied first; the two share no names.

    Raises:
      InputError: an unknown preset name.
    """
    model = get_model(model)
    values: dict[str, float] = {}
    for kind, name in (("gpu", gpu), ("llm", llm)):
        if name is None:
            continue
        preset = get_preset(kind, name)
        values.update({k: float(v) for k, v in preset.values.items()
                       if k in model.input_names})
    return values
