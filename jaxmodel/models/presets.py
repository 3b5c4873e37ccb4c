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


# Large-GEMM ceilings (matmul_efficiency): the Maximum Achievable Matmul FLOPS
# (MAMF) over peak measured with mamf-finder.py, S. Bekman, "Machine Learning
# Engineering", compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS
# comparison table" (bf16, no sparsity): A100 SXM 267.9 / 312 = 85.9%, H100
# SXM 792.1 / 989 = 80.1%, MI300X 781.9 / 1300 = 60.1%.  GPUs the table does
# not list take their sibling's value (H200, H800: the H100 die) or, for
# Blackwell, an assumed 75% below H100's (the table's trend: newer, faster
# GPUs sustain a smaller fraction of their datasheet peak); MI355X takes
# MI300X's.  Blackwell and MI355X values are assumptions, not measurements.
_MAMF = {"a100": 0.859, "h100": 0.801, "mi300x": 0.601, "blackwell": 0.75}


def _datasheet_memory_gb(gib: float) -> float:
    """GPU memory in GB (1e9 bytes) from the datasheet's "GB", which are GiB.

    HBM is built of binary-sized stacks, and the datasheet figure is the memory
    in GiB: an "80 GB" H100 or A100 has 80 GiB (nvidia-smi: 81,559 MiB on H100
    SXM, 81,920 MiB on A100 80 GB), 85.9e9 bytes, not 80e9; a "180 GB" B200
    shows 183,359 MiB (179 GiB).  What the driver and CUDA take of it is in
    ``reserved_memory_gb``.  The one place where a preset's capacity is converted.
    """
    return gib * 2.0**30 / 1e9


def _gpu(name, description, source, *, tflops, fp8_tflops, sms, mamf, memory_gb, hbm_tb_s,
         nvlink_gb_s, network_gb_s, per_node):
    return Preset(name, description, source, {
        "compute_tflops": tflops,
        "fp8_tflops": fp8_tflops,
        "num_sms": sms,
        "matmul_efficiency": mamf,
        "gpu_memory_gb": _datasheet_memory_gb(memory_gb),
        "hbm_bandwidth_tb_s": hbm_tb_s,
        "link_bandwidth_gb_s": nvlink_gb_s,
        "network_bandwidth_gb_s": network_gb_s,
        "gpus_per_node": per_node,
    })


GPUS: dict[str, Preset] = {p.name: p for p in (
    _gpu("a100-40gb-sxm", "NVIDIA A100 40 GB SXM4, DGX A100 node (8 x HDR 200 Gb/s)",
         "NVIDIA A100 Tensor Core GPU datasheet (2020): 312 TFLOP/s bf16 dense, 1,555 GB/s, "
         "NVLink 600 GB/s, 108 SMs (A100 architecture whitepaper), no FP8 tensor cores "
         "(fp8_tflops = the bf16 peak); DGX A100 datasheet: 8 GPUs, 8 x 200 Gb/s ConnectX-6",
         tflops=312, fp8_tflops=312, sms=108, mamf=_MAMF["a100"], memory_gb=40,
         hbm_tb_s=1.555, nvlink_gb_s=300, network_gb_s=25, per_node=8),
    _gpu("a100-80gb-sxm", "NVIDIA A100 80 GB SXM4, DGX A100 node (8 x HDR 200 Gb/s)",
         "NVIDIA A100 80GB datasheet (2021): 312 TFLOP/s bf16 dense, 2,039 GB/s, NVLink "
         "600 GB/s, 108 SMs, no FP8 tensor cores (fp8_tflops = the bf16 peak); DGX A100 "
         "datasheet: 8 GPUs, 8 x 200 Gb/s ConnectX-6",
         tflops=312, fp8_tflops=312, sms=108, mamf=_MAMF["a100"], memory_gb=80,
         hbm_tb_s=2.039, nvlink_gb_s=300, network_gb_s=25, per_node=8),
    _gpu("h100-sxm", "NVIDIA H100 80 GB SXM5, DGX H100 node (8 x NDR 400 Gb/s)",
         "NVIDIA H100 datasheet (2023): 989 TFLOP/s bf16 dense (1,979 with sparsity), "
         "1,979 TFLOP/s FP8 dense, 3.35 TB/s, NVLink 900 GB/s, 132 SMs (H100 architecture "
         "whitepaper); DGX H100: 8 GPUs, 8 x 400 Gb/s ConnectX-7",
         tflops=989, fp8_tflops=1979, sms=132, mamf=_MAMF["h100"], memory_gb=80,
         hbm_tb_s=3.35, nvlink_gb_s=450, network_gb_s=50, per_node=8),
    _gpu("h800", "NVIDIA H800 80 GB SXM5 (export H100: NVLink 400 GB/s), 8-GPU node, "
         "8 x 400 Gb/s",
         "NVIDIA H800 datasheet: the H100 SXM5 compute (989 TFLOP/s bf16, 1,979 FP8 dense, "
         "3.35 TB/s, 132 SMs) with NVLink 400 GB/s total (200 per direction); DeepSeek-AI "
         "2024 (DeepSeek-V3 technical report, sec. 3.2): 8 GPUs a node, InfiniBand 50 GB/s "
         "per GPU",
         tflops=989, fp8_tflops=1979, sms=132, mamf=_MAMF["h100"], memory_gb=80,
         hbm_tb_s=3.35, nvlink_gb_s=200, network_gb_s=50, per_node=8),
    _gpu("h200", "NVIDIA H200 141 GB SXM, HGX H200 node (8 x NDR 400 Gb/s)",
         "NVIDIA H200 datasheet (2024): 989 TFLOP/s bf16 dense, 1,979 FP8 dense, 141 GB "
         "HBM3e, 4.8 TB/s, NVLink 900 GB/s, 132 SMs (the H100 die); HGX H200: 8 GPUs, "
         "400 Gb/s per GPU",
         tflops=989, fp8_tflops=1979, sms=132, mamf=_MAMF["h100"], memory_gb=141,
         hbm_tb_s=4.8, nvlink_gb_s=450, network_gb_s=50, per_node=8),
    _gpu("b200", "NVIDIA B200 180 GB, DGX B200 node (8 x 400 Gb/s)",
         "NVIDIA DGX B200 datasheet (2024): 8 GPUs, 1,440 GB HBM3e, 64 TB/s, 72 PFLOP/s "
         "FP8 training (sparse; 4.5 PFLOP/s FP8 and 2.25 PFLOP/s bf16 dense per GPU), "
         "NVLink 5 1.8 TB/s per GPU, 8 x 400 Gb/s ConnectX-7; 148 SMs (Blackwell "
         "architecture technical brief)",
         tflops=2250, fp8_tflops=4500, sms=148, mamf=_MAMF["blackwell"], memory_gb=180,
         hbm_tb_s=8.0, nvlink_gb_s=900, network_gb_s=50, per_node=8),
    _gpu("b300", "NVIDIA B300 (Blackwell Ultra) 288 GB, HGX B300 node (8 x 800 Gb/s)",
         "NVIDIA HGX B300 datasheet (2025): 8 GPUs, 2.3 TB HBM3e (288 GB each), 8 TB/s per "
         "GPU, 72 PFLOP/s FP8 training for 8 GPUs (sparse: 4.5 dense per GPU), bf16 2.25 "
         "PFLOP/s dense per GPU, NVLink 5 1.8 TB/s, ConnectX-8 800 Gb/s per GPU; 160 SMs "
         "(NVIDIA technical blog 'Inside NVIDIA Blackwell Ultra', 2025)",
         tflops=2250, fp8_tflops=4500, sms=160, mamf=_MAMF["blackwell"], memory_gb=288,
         hbm_tb_s=8.0, nvlink_gb_s=900, network_gb_s=100, per_node=8),
    _gpu("gb200-nvl72", "NVIDIA GB200 NVL72: 72 Blackwell GPUs in one NVLink domain",
         "NVIDIA GB200 NVL72 datasheet (2024): 72 GPUs, 360 PFLOP/s bf16 and 720 PFLOP/s "
         "FP8 with sparsity (2.5 and 5 PFLOP/s dense per GPU), 13.4 TB HBM3e (186 GB per "
         "GPU), 576 TB/s (8 TB/s per GPU), NVLink 130 TB/s (1.8 TB/s per GPU), one "
         "400 Gb/s ConnectX-7 per GPU; gpus_per_node is the NVLink domain (72); 148 SMs",
         tflops=2500, fp8_tflops=5000, sms=148, mamf=_MAMF["blackwell"], memory_gb=186,
         hbm_tb_s=8.0, nvlink_gb_s=900, network_gb_s=50, per_node=72),
    _gpu("gb300-nvl72", "NVIDIA GB300 NVL72: 72 Blackwell Ultra GPUs in one NVLink domain",
         "NVIDIA GB300 NVL72 datasheet (2025): 72 GPUs, 360 PFLOP/s bf16 and 720 PFLOP/s "
         "FP8 with sparsity (2.5 and 5 dense per GPU), up to 21 TB HBM3e (288 GB per "
         "GPU), 8 TB/s per GPU, NVLink 130 TB/s (1.8 TB/s per GPU), ConnectX-8 800 Gb/s "
         "per GPU; gpus_per_node is the NVLink domain (72); 160 SMs",
         tflops=2500, fp8_tflops=5000, sms=160, mamf=_MAMF["blackwell"], memory_gb=288,
         hbm_tb_s=8.0, nvlink_gb_s=900, network_gb_s=100, per_node=72),
    _gpu("mi300x", "AMD Instinct MI300X 192 GB, 8-GPU platform (400 Gb/s per GPU)",
         "AMD Instinct MI300X datasheet (2023): 1,307.4 TFLOP/s bf16 dense, 2,614.9 FP8 "
         "dense, 192 GB HBM3, 5.3 TB/s, 304 compute units, Infinity Fabric 896 GB/s "
         "aggregate peer bandwidth; 8-GPU OAM platform with one 400 Gb/s NIC per GPU",
         tflops=1307.4, fp8_tflops=2614.9, sms=304, mamf=_MAMF["mi300x"], memory_gb=192,
         hbm_tb_s=5.3, nvlink_gb_s=448, network_gb_s=50, per_node=8),
    _gpu("mi355x", "AMD Instinct MI355X 288 GB, 8-GPU platform (400 Gb/s per GPU)",
         "AMD Instinct MI355X datasheet (2025): 2.5 PFLOP/s bf16 dense (5.0 sparse), 5.0 "
         "PFLOP/s FP8 dense, 288 GB HBM3E, 8 TB/s, 256 compute units, Infinity Fabric "
         "7 x 153.6 GB/s (1,075 GB/s aggregate, 538 per direction); one 400 Gb/s "
         "Pollara NIC per GPU",
         tflops=2500, fp8_tflops=5000, sms=256, mamf=_MAMF["mi300x"], memory_gb=288,
         hbm_tb_s=8.0, nvlink_gb_s=538, network_gb_s=50, per_node=8),
)}


def _llm(name, description, source, *, params_b, hidden, layers, heads, kv_heads, ffn, mlp,
         vocab, seq, tied, head_dim=0):
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
    })


_SC21 = "Narayanan et al. 2021 (SC21), Table 1; GPT-2 vocabulary padded to 51,200, s = 2048"


def _sc21(name, params_b, heads, hidden, layers):
    return _llm(name, f"GPT {params_b}B of the Megatron-LM SC21 runs", _SC21,
                params_b=params_b, hidden=hidden, layers=layers, heads=heads, kv_heads=heads,
                ffn=4 * hidden, mlp=2, vocab=51200, seq=2048, tied=1)


LLMS: dict[str, Preset] = {p.name: p for p in (
    _llm("gpt3-175b", "GPT-3 175B", "Brown et al. 2020, Table 2.1 (GPT-2 BPE, 50,257 tokens)",
         params_b=175, hidden=12288, layers=96, heads=96, kv_heads=96, ffn=49152, mlp=2,
         vocab=50257, seq=2048, tied=1),
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
)}


def _moe(name, description, source, published, *, hidden, layers, heads, kv_heads, ffn,
         vocab, seq, experts, top_k, expert_ffn, shared=0, dense_layers=0, head_dim=0,
         mla=None, tied=0):
    """An MoE LLM (SwiGLU); ``model_params_b`` is the published total.

    ``mla``: ``(q_lora_rank, kv_lora_rank, qk_rope_dim)`` for DeepSeek-style
    multi-head latent attention (``head_dim`` is then ``qk_nope_head_dim`` =
    ``v_head_dim``)."""
    values = {
        "model_params_b": published.total_params_b,
        "hidden_dim": hidden, "num_layers": layers, "num_heads": heads,
        "num_kv_heads": kv_heads, "ffn_hidden_dim": ffn, "mlp_weight_matrices": 3,
        "vocab_size": vocab, "seq_length": seq, "tied_embeddings": tied,
        "num_experts": experts, "experts_per_token": top_k, "moe_ffn_hidden_dim": expert_ffn,
        "shared_experts": shared, "dense_layers": dense_layers, "moe_layer_interval": 1,
        "head_dim": head_dim, "attention": 0,
    }
    if mla is not None:
        values.update(attention=1, q_lora_rank=mla[0], kv_lora_rank=mla[1], qk_rope_dim=mla[2])
    return Preset(name, description, source, values, published)


# Mixture-of-experts models.  Shapes from each model's Hugging Face
# config.json (the source names the repository); published counts from its
# model card or report.  seq is the pre-training sequence length.
MOE_LLMS: dict[str, Preset] = {p.name: p for p in (
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
         "total, 3.61B active (unembedding counted, embedding not); alternating "
         "sliding-window attention is modelled as full attention",
         Published(20.91, 0.005, 3.61, 0.005, False),
         hidden=2880, layers=24, heads=64, kv_heads=8, ffn=2880, vocab=201088, seq=4096,
         experts=32, top_k=4, expert_ffn=2880, head_dim=64),
    _moe("gpt-oss-120b", "gpt-oss-120b (128 experts, top-4)",
         "openai/gpt-oss-120b config.json; OpenAI 2025 (gpt-oss model card, Table 1): "
         "116.83B total, 5.13B active (unembedding counted, embedding not)",
         Published(116.83, 0.005, 5.13, 0.005, False),
         hidden=2880, layers=36, heads=64, kv_heads=8, ffn=2880, vocab=201088, seq=4096,
         experts=128, top_k=4, expert_ffn=2880, head_dim=64),
    _moe("kimi-k2", "Kimi K2 (MLA, 384 routed + 1 shared expert, top-8)",
         "moonshotai/Kimi-K2-Instruct config.json and model card: 1T total, 32B activated",
         Published(1000, 50, 32, 0.5, False),
         hidden=7168, layers=61, heads=64, kv_heads=64, ffn=18432, vocab=163840, seq=4096,
         experts=384, top_k=8, expert_ffn=2048, shared=1, dense_layers=1, head_dim=128,
         mla=(1536, 512, 64)),
)}
LLMS.update(MOE_LLMS)


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
