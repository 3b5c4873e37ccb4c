"""Named hardware and model presets: input values for ``--gpu`` / ``--llm`` and specs.

A preset is a set of input values under input names; applying one to a model
keeps the names that model has (the seed model takes ``compute_tflops`` and
``link_bandwidth_gb_s`` from a GPU, ``model_params_b``, ``hidden_dim``,
``num_layers`` and ``seq_length`` from an LLM; the refined model takes all).
Layering everywhere: model defaults < presets < config file < command line.

Units as in the input names: peak dense (no sparsity) bf16 TFLOP/s; memory in
GB (1e9 bytes) as the datasheet prints it (for A100 and H100 "80 GB" is 80 GiB,
so the preset is conservative by 7%); bandwidths per GPU and per direction,
GB/s (NVLink "600 GB/s" total bidirectional is 300 per direction; a 200 Gb/s
HDR NIC is 25 GB/s).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jaxmodel.errors import InputError, closest
from jaxmodel.models import Model, get_model


@dataclass(frozen=True)
class Preset:
    """A named set of input values with the source they come from."""

    name: str
    description: str
    source: str
    values: dict[str, float] = field(default_factory=dict)


def _gpu(name, description, source, *, tflops, memory_gb, hbm_tb_s, nvlink_gb_s,
         network_gb_s, per_node):
    return Preset(name, description, source, {
        "compute_tflops": tflops,
        "gpu_memory_gb": memory_gb,
        "hbm_bandwidth_tb_s": hbm_tb_s,
        "link_bandwidth_gb_s": nvlink_gb_s,
        "network_bandwidth_gb_s": network_gb_s,
        "gpus_per_node": per_node,
    })


GPUS: dict[str, Preset] = {p.name: p for p in (
    _gpu("a100-40gb-sxm", "NVIDIA A100 40 GB SXM4, DGX A100 node (8 x HDR 200 Gb/s)",
         "NVIDIA A100 Tensor Core GPU datasheet (2020): 312 TFLOP/s bf16 dense, 1,555 GB/s, "
         "NVLink 600 GB/s; DGX A100 datasheet: 8 GPUs, 8 x 200 Gb/s ConnectX-6",
         tflops=312, memory_gb=40, hbm_tb_s=1.555, nvlink_gb_s=300, network_gb_s=25,
         per_node=8),
    _gpu("a100-80gb-sxm", "NVIDIA A100 80 GB SXM4, DGX A100 node (8 x HDR 200 Gb/s)",
         "NVIDIA A100 80GB datasheet (2021): 312 TFLOP/s bf16 dense, 2,039 GB/s, NVLink "
         "600 GB/s; DGX A100 datasheet: 8 GPUs, 8 x 200 Gb/s ConnectX-6",
         tflops=312, memory_gb=80, hbm_tb_s=2.039, nvlink_gb_s=300, network_gb_s=25,
         per_node=8),
    _gpu("h100-sxm", "NVIDIA H100 80 GB SXM5, DGX H100 node (8 x NDR 400 Gb/s)",
         "NVIDIA H100 datasheet (2023): 989 TFLOP/s bf16 dense (1,979 with sparsity), "
         "3.35 TB/s, NVLink 900 GB/s; DGX H100: 8 GPUs, 8 x 400 Gb/s ConnectX-7",
         tflops=989, memory_gb=80, hbm_tb_s=3.35, nvlink_gb_s=450, network_gb_s=50,
         per_node=8),
    _gpu("h200", "NVIDIA H200 141 GB SXM, HGX H200 node (8 x NDR 400 Gb/s)",
         "NVIDIA H200 datasheet (2024): 989 TFLOP/s bf16 dense, 141 GB HBM3e, 4.8 TB/s, "
         "NVLink 900 GB/s; HGX H200: 8 GPUs, 400 Gb/s per GPU",
         tflops=989, memory_gb=141, hbm_tb_s=4.8, nvlink_gb_s=450, network_gb_s=50,
         per_node=8),
    _gpu("b200", "NVIDIA B200 180 GB, DGX B200 node (8 x 400 Gb/s)",
         "NVIDIA DGX B200 datasheet (2024): 8 GPUs, 1,440 GB HBM3e, 64 TB/s, 72 PFLOP/s "
         "FP8 training (2.25 PFLOP/s bf16 dense per GPU), NVLink 5 1.8 TB/s per GPU, "
         "8 x 400 Gb/s ConnectX-7",
         tflops=2250, memory_gb=180, hbm_tb_s=8.0, nvlink_gb_s=900, network_gb_s=50,
         per_node=8),
    _gpu("mi300x", "AMD Instinct MI300X 192 GB, 8-GPU platform (400 Gb/s per GPU)",
         "AMD Instinct MI300X datasheet (2023): 1,307.4 TFLOP/s bf16 dense, 192 GB HBM3, "
         "5.3 TB/s, Infinity Fabric 896 GB/s aggregate peer bandwidth; 8-GPU OAM platform "
         "with one 400 Gb/s NIC per GPU",
         tflops=1307.4, memory_gb=192, hbm_tb_s=5.3, nvlink_gb_s=448, network_gb_s=50,
         per_node=8),
)}


def _llm(name, description, source, *, params_b, hidden, layers, heads, kv_heads, ffn, mlp,
         vocab, seq, tied):
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
