"""The 2026 public record as validation sets: each row as the refined model's inputs.

Nine sets, each a CSV in ``jaxmodel/data/`` with its source in its header:

* ``megatron-bridge`` (``megatron_bridge_h100_b200.csv``): NVIDIA Megatron-Bridge's
  performance summaries 25.09-26.08, pre-training on DGX-H100 and DGX-B200.
  Measured: tokens/s per GPU.
* ``megatron-bridge-gb`` (``megatron_bridge_gb200_gb300_b300.csv``): the same
  summaries' rows on DGX-GB200, DGX-GB300 and DGX-B300, read the same way
  (``BRIDGE_GB``); the recipes of 26.02 on, from the newest stored version of each
  recipe chain (each row names the commit read).
* ``megatron-lm-moe`` (``megatron_lm_moe_recipes_h100_b200.csv``): Megatron-LM's MoE
  recipes.  Measured: model TFLOP/s per GPU by Megatron-LM's own FLOP count
  (:func:`megatron_flops`, ``num_floating_point_operations`` of
  ``megatron/training/training.py``), so the prediction is put in the same unit:
  ``F / (GPUs x predicted step)``.
* ``torchtitan`` (``torchtitan_llama3_h100.csv``): torchtitan's Llama 3.1 benchmarks on
  H100.  Measured: tokens/s per GPU and the peak memory PyTorch's allocator reserved
  (``max_reserved``, GiB), against the model's ``memory_gb_per_gpu``.
* ``torchtitan-2024`` (``torchtitan_2024_performance.csv``): the same page in its
  earlier version: Llama 3.1 405B on 128 of the same H100s and Llama 3 8B and 70B on
  64 A100 80 GB, read with the ``torchtitan`` table (``TORCHTITAN_2024``).
  Measured: tokens/s per GPU (no memory).
* ``torchtitan-2025`` (``torchtitan_2025_h200.csv``): torchtitan's 2025 benchmark on
  H200, the Trainy team's Llama 3.1 8B with FSDP, torch.compile and Float8 on 32 and
  64 GPUs, its command printed whole (``TORCHTITAN_2025``).  Measured: tokens/s per
  GPU and peak reserved memory, as ``torchtitan``.  Another GPU and a year's newer
  torchtitan, whose compiled loss the 2024 pages did not run.
* ``deepseek-v3-gb200`` (``megatron_lm_deepseek_v3_gb200_history.csv``): Megatron-LM's
  DeepSeek-V3 on 256 GB200 optimization history, one documented change a row, in
  Megatron-LM's TFLOP/s per GPU.  Every row is predicted from its documented inputs;
  a row whose changes (its own or an earlier row's) have no model input names them
  among its approximations (the model's rates are those of the tuned software).
* ``llm-foundry`` (``llm_foundry_mpt_benchmarks.csv``): LLM Foundry's MPT throughput
  benchmarks, 125M-70B with Composer and PyTorch FSDP on 8-128 A100 40 GB, A100 80 GB
  and H100, in BF16 and FP8 (``LLM_FOUNDRY``; each size's architecture in
  ``MPT_ARCHITECTURES``, checked against the tables' parameter counts).  Measured:
  tokens/s per GPU.  Another framework and the A100s, beside the Megatron sets.
* ``mlperf-llama31-8b`` (``mlperf_training_llama31_8b.csv``): MLPerf Training's
  Llama 3.1 8B on one 8-GPU node, rounds v5.1 and v6.0, AMD's MI355X and MI350X
  systems and NVIDIA's recipe on Blackwell (``MLPERF_8B``), each row's settings from
  its submission's configuration.  Measured: the result log's samples/s or seconds
  per step, as tokens/s per GPU.  Another vendor, beside the NVIDIA sets.

**The rule: out of the box.**  A row uses only what the row and its source document;
every other input keeps the refined model's default, and the cluster parameters
come from the GPU preset alone.  What each source column means in model inputs is
declared in ONE table per set (``BRIDGE`` and ``BRIDGE_GB``, ``MOE_RECIPES``,
``TORCHTITAN``, ``TORCHTITAN_2024`` and ``TORCHTITAN_2025``, ``GB200_HISTORY``,
``LLM_FOUNDRY``, ``MLPERF_8B``: source column -> input name, or source value ->
:class:`Way` s), so that a new model input changes only that table.  A :class:`Way`
names the inputs that express a value; a value may list several, best first, and
the first whose inputs the model has is used.  A way with a note is an
approximation, and every approximation a row uses is listed with it.  Where no way
fits (the model has no such input, or no preset for the architecture), the row is
not expressible, with a one-line reason.

Decisions where the sources are silent or the model is coarser (each one listed
beside the rows that use it):

* GPUs: ``DGX-H100`` -> ``h100-sxm``, ``DGX-B200`` -> ``b200``, ``DGX-GB200`` ->
  ``gb200-nvl72``, ``DGX-GB300`` -> ``gb300-nvl72``, ``DGX-B300`` -> ``b300``.  torchtitan's H100s
  are the 96 GB HBM2e part at a 500 W power limit: the ``h100-96gb-500w`` preset
  (the source's 96 GB and 2.4 TB/s; the tensor-core peak at 500 W derived in
  ``jaxmodel.models.presets``).
* LLMs: the presets of ``jaxmodel.presets``, by the name the source prints.
  GPT-OSS's alternating sliding-window attention is the preset's (window 128 in
  every other layer).  Its attention runs the fused kernel (``flash_attention`` 1,
  ``attention_kernel`` 0, the defaults): Megatron-Bridge's ``GPTOSSProvider``
  (src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py, ``provide``) keeps the
  default backend with Transformer Engine >= 2.8 and falls back to Megatron-Core's
  unfused "local" sink attention only below it; the 120B perf configs set no
  backend.  TE disables FlashAttention for a non-vanilla ``softmax_type`` and runs
  the learnable sink in cuDNN's fused attention from cuDNN 9.13.1 (sbhd/bshd; THD
  only from 9.18, TransformerEngine issue #2483); the NeMo container has cuDNN
  9.13.1 and runs Bridge's GPT-OSS on FusedAttention (NVIDIA-NeMo/RL issue #1685).
  The unfused path would store the ``2 a s^2`` bytes of probabilities per layer
  and micro-batch (77 GB more on an H100 row): it does not fit, so these rows did
  not run it.  The kernel is taken to skip the key blocks outside the window (not
  documented; without the skip the rows run 2-3% slower).  Its YaRN RoPE is fused
  (the perf recipes' ``_benchmark_common``: ``apply_rope_fusion = True``, one read
  and one write of q and k: not costed).  Its experts' clamped GLU and biases are the
  preset's (``glu_clamp``, ``expert_bias``): Megatron-Bridge's ``GPTOSSBridge``
  sets ``activation_func_clamp_value`` 7.0 and ``add_bias_linear``, and
  Megatron-Core runs the clamps and the FC2 bias as eager ops on every routed copy
  (``jaxmodel.models.refined.moe``, ``eager_expert_bytes``).  Nemotron-3 Nano is the
  ``nemotron3-nano`` preset (its Mamba-2, attention and MoE layers:
  ``jaxmodel.models.refined.mamba``); Nemotron-3 Super the ``nemotron3-super``
  preset (its LatentMoE: ``moe_latent_size``, ``jaxmodel.models.refined.moe``).
* Precision: BF16 -> ``precision`` 0; FP8 with per-tensor (current or delayed)
  scaling -> ``precision`` 1; block-scaled FP8 (MXFP8, 1x128/128x128 blockwise) ->
  ``precision`` 2; NVFP4 -> ``precision`` 3.  Megatron-Bridge 25.09 states no
  precision; its section notes say
  the numbers in parentheses use "different quantization granularities", so a
  primary figure is read as per-tensor FP8 and a parenthetical one as blockwise FP8
  (listed, an interpretation).
* Recompute (Megatron-Core): no granularity -> ``recompute`` 0; ``full``
  (``uniform``: every layer) -> 2; ``selective`` -> its modules (default
  ``core_attn``): ``core_attn`` -> ``recompute`` 1, ``moe_act`` -> ``moe_recompute``
  1, ``moe`` -> ``moe_recompute`` 2, ``layernorm`` -> ``norm_recompute`` 1,
  ``mla_up_proj`` -> ``mla_recompute`` 1; ``mlp`` (the dense layers' MLP) is not
  counted (listed); a full recompute of only N layers a chunk (``block``) ->
  ``recompute_layers`` N.  torchtitan: ``full`` -> 2;
  its ``selective`` is its own per-op policy (keep the outputs of attention and of
  every other matmul), not Megatron-LM's: ``recompute`` 3.
* CUDA graphs: none -> ``cuda_graphs`` 0 (or nothing: the model launches every
  kernel); per layer (Transformer Engine or local, any scope) -> 1, listed where
  the scope is part of a layer; full iteration -> 2.
* MoE: forced-balanced routing (Megatron-Bridge's, the recipes' ``force_balance``)
  is ``moe_imbalance`` 1, the default; token-drop rows -> ``capacity_factor`` 1
  (the table gives none; listed); the dispatcher ``alltoall`` -> ``moe_dispatcher``
  0, ``flex`` (DeepEP or HybridEP) -> 1; EP all-to-all overlap on ->
  ``ep_overlap`` 1 (Combined 1F1B: the steady phase hides the all-to-all);
  multi-token prediction -> ``mtp_layers``, else not
  expressible.
* A custom pipeline layout (the MoE recipes' ``yaml_pp_layout``; Megatron-Bridge's
  CSV documents none, but 25.09's scripts name one, ``BRIDGE_2509``, and
  DeepSeek-V3's recipe sets one for the row's pp and vp in every release,
  ``deepseek_v3_layout``): chunk ``i`` on stage ``i mod p``; where the embedding
  sits on the first stage, the loss and the MTP modules on the last, and the other
  stages hold what the last one's layer count leaves them (``last_stage_layers``),
  that count, exactly; otherwise even chunks with the embedding, loss and an
  ``m`` counted as layers (``pipeline_split_embedding`` 1,
  ``mtp_in_pipeline_split`` 1, listed).
* Megatron-Bridge 25.09: the CSV reads no recipe for it; its settings (recompute, CUDA
  graphs, dispatcher, TP and EP overlap, FSDP, offload, MTP, pipeline layout) come from
  the 25.09-era performance scripts, ``BRIDGE_2509`` (the source and how it is dated
  there), fed to the same readers as the later releases' recipe columns: the DGX-H100
  and DGX-B200 rows, and the DGX-GB200 ones (keyed by the figure, primary or in
  parentheses, where the script branches on the FP8 recipe).
* Megatron-Bridge 25.11: the r0.2.0 performance scripts' presets (``BRIDGE_2511``, by
  row id: the sources and how they are dated there), where one has the row's layout
  (or differs only in its micro-batch or global batch, listed); the Blackwell rows
  whose layout no stored preset has are not expressed (``BRIDGE_2511_UNMATCHED``).
* Megatron-Bridge rows whose recipe columns the CSV read from a later recipe than the
  one their release ran: DeepSeek-V3 on B200 at t1 p16 e8 and Qwen3-235B on B200 at t1
  p8 e8 before 26.06, the MXFP8 rows of DeepSeek-V3, Qwen3-30B-A3B and Qwen3-235B-A22B
  on GB300, GB200 and B300 in 26.02-26.04.01 (whose newest recipes run the
  full-iteration graphs of 26.06), Qwen3-30B-A3B on B200 and H100 in 26.02.01-26.04.01
  (whose newest recipes overlap the all-to-all, or graph the attention, where their
  releases' presets did not), and the rows of 26.02-26.06 whose newest recipe has
  another layout than the published one, are read at the presets of their own era
  (``BRIDGE_DEEPSEEK_B200_P16``, ``BRIDGE_QWEN3_235B_B200_PRE_2606``,
  ``BRIDGE_PRE_2606``, ``BRIDGE_ERA``: the sources and how they are dated there).
* Megatron-Bridge layouts that cannot have run: two rows print a layout whose weights,
  gradients and least activations exceed the GPU's memory by plain arithmetic, and the
  recipe of the same row sets one that fits; they are read at the recipe's layout
  (``BRIDGE_UNRUNNABLE``, ``_bridge_read_row``: Llama 3 70B on 64 GB300 in 26.02.01,
  printed t1 p1 MBS 2 without FSDP and t1 p4 MBS 2 without recompute, read at the
  recipes' t1 p4 v5 MBS 1, where the releases before and after print them).
* Megatron-Bridge batch cells that contradict each other: a row whose published
  gradient-accumulation count is not GBS / (MBS x DP) (the CSV's ``note``, "stated GA
  g != GBS/(MBS*DP) = m") has a wrong batch cell; where the recipe for its layout
  gives another micro-batch (``recipe_parallel_mismatch``, "micro_batch: table=X
  recipe=Y") the row is read at the recipe's micro-batch, its GBS kept and the
  accumulation derived (listed, ``_bridge_read_row``).  One row: 25.11's H100 GPT-OSS
  120B (mb0263) prints GBS 512, MBS 4, GA 2 -- the B200 and GB200 rows' cells, which
  hold only at DP 64 = 64 / (t1 p1) (512 / (4 x 64) = 2), beside p 4 (DP 16: GA 8 at
  MBS 4).  The H100 preset leaves the base micro-batch 1 where the Blackwell presets
  set 4, in the file the CSV reads for 25.11 (scripts/performance/configs/gpt_oss/
  gpt_oss_workload_base_configs.py: ``GPT_OSS_120B_H100_BF16_BASE_CONFIG =
  replace(BASE_GPT_OSS_120B_CONFIG, pipeline_model_parallel_size=4,
  recompute_modules=["layernorm", "moe_act"])``, the base ``micro_batch_size=1``) and
  in every later version (``..._H100_BF16_V1``/``_V2``); the 26.x rows of the same
  layout print MBS 1 (5810-5993 tokens/s against this row's 5630); and at MBS 4 the
  run needs 102.5 GB of the H100's 80: the first stage holds 4 micro-batches of its 9
  layers, each layer 408 MB per sample of 4096 tokens (the norm inputs the layernorm
  recompute keeps, q, k, v and the attention output, the dispatched tokens and the
  FC1 output that ``moe_act`` recompute keeps), beside 39.7 GB of weights, bf16
  gradients and optimizer state (tests/models/test_validation_sets.py, by hand).
  Read: MBS 1, the printed GBS 512 (the CSV reads 1280 from the release branch's
  preset; a 25.11-era version of the same file sets 512: the printed cell is kept),
  GA 512 / (1 x 16) = 32.
* Megatron (both Megatron sets, every row): the distributed optimizer
  (``zero_stage`` 1; NVIDIA's recipes and the MoE recipes' YAMLs use it);
  Megatron-FSDP or an ``fsdp`` group -> ``zero_stage`` 3; TP communication overlap
  -> ``tp_overlap`` 1 where TP > 1 (Megatron-Bridge turns it off at run time
  otherwise, as the column says); no dropout (``dropout`` 0, or listed where the
  model has no such input: the recipes' models train without dropout); the
  interleaved schedule's asynchronous pipeline transfers (``pp_overlap`` 1,
  Megatron-Core's default) and Megatron-LM's CUDA_DEVICE_MAX_CONNECTIONS
  (``serial_streams`` 2: one hardware queue on H100 with TP or CP > 1 and no
  all-to-all overlap; ``refined.pipeline.serial_streams``), the model's defaults.
  Megatron-Bridge (every row): its perf recipes reduce gradients in bf16
  (``grad_buffer_bytes`` 2) and use Transformer Engine's in-place cross entropy
  (``cross_entropy_fusion`` 2), both read from the recipes' source (``BRIDGE_RECIPES``).
* torchtitan (every row): FSDP2 shards over the data x context ranks and
  prefetches the next all-gather (``zero_stage`` 3, ``param_gather_overlap`` 1);
  TP with sequence-parallel norms (``sequence_parallel`` 1), PyTorch DTensor's
  (``tp_overlap_kind`` 1: it keeps each gathered GEMM input for the backward
  pass); AsyncTP -> ``tp_overlap`` 1 (PyTorch's micro-pipelined TP, not
  Transformer Engine's userbuffers); Float8 (torchao, tensor-wise scaling) -> ``precision`` 1;
  context parallelism, PyTorch's experimental context_parallel with its default
  all-gather rotation, on the repeat_kv'd K, V of torchtitan's Llama -> ``cp_comm`` 3;
  its loss, PyTorch's F.cross_entropy on fp32 logits -> ``cross_entropy_fusion`` 3;
  ``torch.compile`` -> the model's fused elementwise kernels (listed), eager ->
  ``elementwise_fusion`` 0; with PP, torchtitan's default (Dec 2024) of as many
  micro-batches as pipeline ranks, interleaved or not, and 2 stages per rank for the
  interleaved schedule (listed), and torch.distributed.pipelining's buffers of Dec
  2024 (``pp_stage_buffers`` 2); a blank
  sequence length -> 8192, torchtitan's Llama 3 default (listed, as the file's
  note asks).

The existing sets (``sc21``, ``megatron-h100``, ``qwen3-235b``) come from
``jaxmodel.models.validation`` and ``validation_moe``; their own settings are the
"documented settings" variant, and :data:`OUT_OF_THE_BOX` names the settings each
set chose that its rows do not document (tuned or assumed), which the "out of the
box" variant resets to the model's defaults.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from jaxmodel.errors import InputError
from jaxmodel.models import get_model
from jaxmodel.models.presets import apply_presets

DATA = Path(__file__).resolve().parent.parent / "data"
MODEL = "refined"
GIB = 2**30 / 1e9  # GB per GiB
# torchtitan's Llama 3 training sequence length where the file states none.
TORCHTITAN_SEQ = 8192


# --- ways to express a documented value ----------------------------------------------------


@dataclass(frozen=True)
class Way:
    """One way to express a documented setting: model inputs (and presets), and what
    is approximate about it ("" for exact)."""

    inputs: Mapping[str, float] = field(default_factory=dict)
    note: str = ""
    gpu: str | None = None
    llm: str | None = None


@dataclass(frozen=True)
class Missing:
    """A documented setting the model cannot express: the one-line reason."""

    reason: str


# Ways, best first; a Missing after them says why none fits when the model has
# none of their inputs.
Cell = tuple[Way | Missing, ...] | Missing


def exact(**inputs: float) -> tuple[Way, ...]:
    return (Way(inputs),)


def approx(note: str, **inputs: float) -> tuple[Way, ...]:
    return (Way(inputs, note),)


def gpu(name: str) -> tuple[Way, ...]:
    """The GPU preset ``name``."""
    return (Way(gpu=name),)


def llm(name: str, note: str = "") -> tuple[Way, ...]:
    return (Way({}, note, llm=name),)


NOTHING: tuple[Way, ...] = (Way(),)


def precision(level: int) -> Cell:
    """``precision`` ``level`` (0 BF16, 1 FP8 per-tensor, 2 block-scaled FP8, 3 NVFP4)."""
    return exact(precision=level)


NO_DROPOUT: tuple[Way, ...] = (
    Way({"dropout": 0}),
    Way({}, "dropout masks counted: the model has no dropout input (these models train "
        "without dropout)"),
)


def graphs(level: int, note: str = "") -> Cell:
    """``cuda_graphs`` ``level`` (0 none, 1 per layer, 2 full iteration)."""
    return (Way({"cuda_graphs": level}, note),)


def multi_token_prediction(layers: int) -> Cell:
    """``mtp_layers`` multi-token-prediction modules (DeepSeek-V3); without that input,
    none is what the model does and any is not expressible."""
    if layers == 0:
        return (Way({"mtp_layers": 0}), Way())
    return (Way({"mtp_layers": layers}),
            Missing(f"multi-token prediction ({layers} layer{'s' * (layers > 1)}): the model "
                    "has no input mtp_layers"))


# --- reading a row -------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One published run, as the model's inputs (or why it cannot be).

    Attributes:
      set: the set's name; label: the row's id in its source.
      gpu: the GPU: its preset's name, or the variant of it the source ran on
        (the group a calibration is per).
      inputs: every input the row sets (presets first), or None: not expressible.
      reason: why not ("" when expressible).
      notes: the approximations the row's inputs make.
      measured: the measured throughput (tokens/s or TFLOP/s per GPU, or MFU %).
      work: the measured quantity times the step in seconds (tokens or TFLOP per GPU
        per step), so that a predicted step gives ``work / step``; None where the
        quantity is a model output (``metric``) instead.
      metric: the model output compared with ``measured`` when ``work`` is None.
      memory_gb: the GPU's memory (its fit is judged against it).
      measured_memory_gb: the measured peak memory, GB, or NaN.
      layout: a short description of the layout.
      workload: what the run trained, apart from its GPU and layout (model,
        precision, release, GPU count), where the source publishes the same
        workload on several GPUs; "" otherwise (``validation_all.gpu_pairs``).
    """

    set: str
    label: str
    gpu: str
    inputs: dict[str, float] | None
    reason: str = ""
    notes: tuple[str, ...] = ()
    measured: float = math.nan
    work: float | None = None
    metric: str = ""
    memory_gb: float = math.nan
    measured_memory_gb: float = math.nan
    layout: str = ""
    workload: str = ""


def _number(text: str, default: float | None = None) -> float:
    text = (text or "").strip()
    if not text:
        if default is None:
            raise ValueError("blank")
        return default
    return float(text.replace(",", ""))


def _read_csv(path: Path) -> list[dict[str, str]]:
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(line for line in f if not line.startswith("#")))
    except OSError as e:
        raise InputError("data", str(path), f"a readable CSV file ({e.strerror})") from None


@dataclass(frozen=True)
class SetTable:
    """A set's declared mapping: source columns -> model inputs.

    Attributes:
      name, description, file: the set, what it is, its CSV in ``jaxmodel/data``.
      every_row: cells that hold for every row (the source's framework).
      columns: source column -> an input name (the cell's number; blank cells
        keep the ``blank`` default below), a ``{value: Cell}`` dict, or a
        function of the whole row returning a Cell (settings spread over several
        columns, or derived: the micro-batch count).
      blank: source column -> the value a blank numeric cell means.
      measure: the row -> (measured, work per GPU per step, measured memory GB).
      label: the row's id.
      layout: the short description of a row's layout, from its inputs.
      workload: the row's workload apart from its GPU (``Case.workload``), or None.
      reread: the row as read where the source's own cells are shown wrong or
        leave out what the others give (each change noted by one of
        ``columns``), from the row and every row of its file, or None: every row
        as printed.
    """

    name: str
    description: str
    file: str
    every_row: tuple[Cell, ...]
    columns: Mapping[str, str | Mapping[str, Cell] | Callable[[Mapping[str, str]], Cell]]
    blank: Mapping[str, float]
    measure: Callable[[Mapping[str, str], Mapping[str, float]], tuple[float, float, float]]
    label: Callable[[Mapping[str, str]], str]
    layout: Callable[[Mapping[str, float]], str]
    workload: Callable[[Mapping[str, str]], str] | None = None
    reread: Callable[[Mapping[str, str], Sequence[Mapping[str, str]]],
                     Mapping[str, str]] | None = None


def _choose(cell: Cell, model_inputs: set[str], where: str) -> Way | Missing:
    if isinstance(cell, Missing):
        return cell
    for way in cell:
        if isinstance(way, Missing):
            return way
        if set(way.inputs) <= model_inputs:
            return way
    names = sorted(set().union(*(set(w.inputs) - model_inputs for w in cell)))
    return Missing(f"{where}: the model has no input {' or '.join(names)}")


def express(table: SetTable, row: Mapping[str, str], path: str = "",
            rows: Sequence[Mapping[str, str]] = ()) -> Case:
    """The row as the refined model's inputs, through ``table`` (module doc);
    ``rows``: every row of its file (``SetTable.reread`` reads across them).

    Raises:
      InputError: a value the table does not know, or a malformed number (naming
        the file, the row and the column).
    """
    model = get_model(MODEL)
    names = set(model.input_names)
    label = table.label(row)
    if table.reread is not None:
        row = table.reread(row, rows)
    ways: list[Way] = []
    numbers: dict[str, float] = {}
    reasons: list[str] = []

    def take(cell: Cell, where: str) -> None:
        chosen = _choose(cell, names, where)
        if isinstance(chosen, Missing):
            reasons.append(chosen.reason)
        else:
            ways.append(chosen)

    for cell in table.every_row:
        take(cell, "every row")
    for column, spec in table.columns.items():
        value = (row.get(column) or "").strip()
        where = f"{column}={value}" if value else f"{column} (blank)"
        at = f"{path}: {label} "
        try:
            if isinstance(spec, str):
                numbers[spec] = _number(value, table.blank.get(column))
            elif callable(spec):
                take(spec(row), where)
            elif value in spec:
                take(spec[value], where)
            else:
                raise InputError(column, value, "one of " + ", ".join(repr(k) for k in spec))
        except InputError as e:
            raise InputError(at + e.field, e.value, e.allowed) from None
        except ValueError as e:
            allowed = "a number" if isinstance(spec, str) else str(e)
            raise InputError(at + column, value, allowed) from None
    gpu_name = next((w.gpu for w in ways if w.gpu), "")
    llm_name = next((w.llm for w in ways if w.llm), None)
    inputs = {**apply_presets(model, gpu=gpu_name or None, llm=llm_name)}
    for w in ways:
        inputs.update(w.inputs)
    inputs.update(numbers)
    try:
        measured, work, memory = table.measure(row, inputs)
    except ValueError as e:
        reasons.insert(0, str(e))  # nothing to compare comes before why not
        measured, work, memory = math.nan, None, math.nan
    notes = tuple(dict.fromkeys(w.note for w in ways if w.note))
    capacity = inputs.get(model.memory_capacity, math.nan) if model.memory_capacity else math.nan
    if reasons:
        return Case(table.name, label, gpu_name, None, reasons[0], notes,
                    memory_gb=capacity)
    return Case(table.name, label, gpu_name, inputs, "", notes, measured, work,
                memory_gb=capacity, measured_memory_gb=memory, layout=table.layout(inputs),
                workload=table.workload(row) if table.workload else "")


def read_set(table: SetTable, path: str | Path | None = None) -> list[Case]:
    """Every row of the set's CSV (default: the copy in ``jaxmodel/data``)."""
    path = Path(path) if path is not None else DATA / table.file
    rows = _read_csv(path)
    return [express(table, row, path.name, rows) for row in rows]


def _layout(x: Mapping[str, float]) -> str:
    parts = [f"t{int(x.get('tensor_parallel', 1))}", f"p{int(x.get('pipeline_parallel', 1))}",
             f"v{int(x.get('virtual_stages', 1))}"]
    for key, tag in (("context_parallel", "c"), ("expert_parallel", "e")):
        if x.get(key, 1) > 1:
            parts.append(f"{tag}{int(x[key])}")
    parts.append(f"b{int(x.get('micro_batch', 1))}")
    return " ".join(parts)


def _replicas(row: Mapping[str, str], gpus: str) -> int:
    """Data-parallel ranks ``N / (t c p)``; every set names t, c and p tp, cp and pp."""
    n, tt, cc, pp = (int(_number(row.get(k, ""), 1)) for k in (gpus, "tp", "cp", "pp"))
    if n % (tt * cc * pp):
        raise InputError(f"{gpus}", n, f"a multiple of t x c x p = {tt * cc * pp}")
    return n // (tt * cc * pp)


def _accumulation(row: Mapping[str, str], gpus: str, global_batch: str, micro_batch: str
                  ) -> Cell:
    """``gradient_accum_steps`` = global batch / (micro-batch x data-parallel ranks), the
    columns named as the source names them."""
    replicas = _replicas(row, gpus)
    gbs, mbs = _number(row[global_batch]), _number(row[micro_batch])
    m = gbs / (mbs * replicas)
    if m < 1 or m != int(m):
        return Missing(f"global batch {gbs:g} is not a multiple of micro-batch x "
                       f"data-parallel ranks ({mbs:g} x {replicas})")
    return exact(gradient_accum_steps=m)


# --- Megatron-Core recompute, shared by the two Megatron sets -------------------------------

# --recompute-modules -> inputs; None: a norm forward the model does not count.
RECOMPUTE_MODULES: dict[str, Cell | None] = {
    "core_attn": exact(recompute=1),
    "moe_act": exact(moe_recompute=1),
    "moe": exact(moe_recompute=2),
    "layernorm": exact(norm_recompute=1),
    "mla_up_proj": exact(mla_recompute=1),
    "mlp": None,
}
MLP_NOTE = ("the dense layers' MLP recompute (mlp) is not counted (their MLP activations stay "
            "in the activation count)")


def megatron_recompute(granularity: str, method: str, num_layers: str, modules: str) -> Cell:
    """Megatron-Core's ``recompute_granularity`` / ``_method`` / ``_num_layers`` /
    ``_modules`` as inputs (module doc)."""
    granularity = granularity.strip().strip('"').lower()
    if granularity in ("", "none", "unset"):
        return exact(recompute=0, moe_recompute=0)
    if granularity == "full":
        # "uniform" recomputes every layer (in groups of recompute_num_layers);
        # "block" only the first recompute_num_layers layers of each chunk.
        if method.strip() == "block" and num_layers.strip() not in ("", "None", "unset"):
            return exact(recompute=2, recompute_layers=float(num_layers), moe_recompute=0)
        return exact(recompute=2, moe_recompute=0)
    if granularity != "selective":
        raise ValueError(f"recompute granularity {granularity!r}: none, full or selective")
    # An explicitly empty list recomputes nothing: Megatron-Core's TransformerConfig
    # puts core_attn in only when recompute_modules is None, and checks the
    # selective modules only "if len(self.recompute_modules) > 0".
    if modules.strip().replace(" ", "") == "[]":
        return exact(recompute=0, moe_recompute=0)
    names = [n.strip().strip('"').strip("'") for n in
             modules.replace("[", "").replace("]", "").replace(";", ",").replace(" ", ",")
             .split(",")]
    # Megatron-Core's default --recompute-modules is core_attn.
    names = [n for n in names if n and n not in ("None", "unset")] or ["core_attn"]
    inputs = {"recompute": 0.0, "moe_recompute": 0.0, "norm_recompute": 0.0,
              "mla_recompute": 0.0}
    notes = []
    for name in names:
        if name not in RECOMPUTE_MODULES:
            return Missing(f"recompute module {name} has no input")
        cell = RECOMPUTE_MODULES[name]
        if cell is None:
            notes.append(MLP_NOTE)
            continue
        if isinstance(cell, Missing):
            return cell
        for key, level in cell[0].inputs.items():
            inputs[key] = max(inputs[key], float(level))
    return (Way(inputs, "; ".join(notes)),)


# --- Megatron-Bridge -------------------------------------------------------------------------

# The router fusion (``router_fusion``) the performance scripts set: Megatron-Bridge's
# scripts/performance/configs set cfg.model.moe_router_fusion = True in
# set_qwen3_common_configs (qwen/qwen3_llm_pretrain.py; set_qwen3_specific_overrides in
# the 25.09 era's qwen3 scripts), set_deepseek_v3_common_configs and
# set_gpt_oss_common_configs.  The Nemotron-3 scripts (nemotronh/nemotron_3_llm_pretrain.py)
# set none and their recipes none (Super) or False (Nano, src/megatron/bridge/recipes/
# nemotronh/nemotron_3_nano.py "Kernel Selections"): Megatron-Core's default, unfused.
_FUSED_ROUTER = {"router_fusion": 1.0}


def _fused_router(name: str) -> Cell:
    return (Way(dict(_FUSED_ROUTER), llm=name),)


def _token_drop(name: str) -> Cell:
    return (Way({"capacity_factor": 1.0, **_FUSED_ROUTER}, "token drop at capacity factor 1 "
                "(the table gives no factor)", llm=name),)


BRIDGE_LLMS: dict[str, Cell] = {
    "LLAMA3_8B": llm("llama3-8b"),
    "LLAMA3_70B": llm("llama3-70b"),
    "LLAMA3.1_405B": llm("llama3.1-405b"),
    "DeepSeekV3": _fused_router("deepseek-v3"),
    "DeepSeekV3 (dropless)": _fused_router("deepseek-v3"),
    "DeepSeekV3 (w/ MTP)": _fused_router("deepseek-v3"),
    "DeepSeekV3 (tokendrop)": _token_drop("deepseek-v3"),
    "Qwen3_30B_a3B": _fused_router("qwen3-30b-a3b"),
    "Qwen3_30B_a3B (tokendrop)": _token_drop("qwen3-30b-a3b"),
    "Qwen3_235B_a22B": _fused_router("qwen3-235b-a22b"),
    "Qwen3_235B_a22B (tokendrop)": _token_drop("qwen3-235b-a22b"),
    "GPT OSS 120B": _fused_router("gpt-oss-120b"),
    "Nemotron_3_Nano": llm("nemotron3-nano"),
    "Nemotron_3_Super": llm("nemotron3-super"),
}
RECIPE_NOT_READ = ("25.09: no recipe read (its configs are not parsed); the recipe's settings "
                   "at the model's defaults")
RECIPE_NOT_NAMED = ("no recipe read (the source names none for the row); the recipe's settings "
                    "at the model's defaults")


def _not_read(row: Mapping[str, str]) -> Cell:
    """A recipe setting the row's recipe does not give: 25.09's configs are not
    parsed, and some rows name no recipe (Kimi K2's)."""
    if row["release"].strip() == "25.09":
        return approx(RECIPE_NOT_READ)
    return approx(RECIPE_NOT_NAMED)


# Megatron-Bridge 25.09's recipe settings, read from the per-model performance scripts of
# that era (NVIDIA-NeMo/Megatron-Bridge at commit 27dfb3df3c2cba55e54ec67016061048d4ce03c1,
# scripts/performance/configs/<family>/<model>_llm_pretrain.py, one function per GPU
# and precision; scripts/performance/utils/helpers.py for the overrides they call).
# Dated by content, as the commit's date is not in the index: those functions set
# exactly the layouts 25.09 publishes (DeepSeek-V3 H100 t2 p8 v4 e64 GBS 8192 and B200
# t1 p16 e8; Llama 3.1 405B t8 p8 c2 v8 and t4 p8 c2 v8; Qwen3 235B t2 p8 v4 e32 and
# t1 p8 v2 e8; Llama 3 70B H100 FP8 t4 p8 v5), and they predate the 25.11 layout
# (``*_workload_base_configs.py``, functions named by GPU count); the same commit's
# perf_matrix YAMLs (configs/deepseek/deepseek_v3_llm_pretrain.yaml: H100 v2, B200 t2)
# do not match the table, so they are not what ran.  Keyed by (model, system): 25.09
# states no precision, and its two figures (parentheses) share one config.
#
# Column -> value as the later releases' recipe_* columns write them (the same readers
# below).  A column left out keeps RECIPE_NOT_READ.  Per script:
#  * llama3/llama3_8b_llm_pretrain.py: llama3_8b_b200_fp8_config calls
#    set_cuda_graph_overrides(cuda_graphs=True), which sets model.enable_cuda_graph
#    (Megatron-Core's per-layer graphs, helpers.py); llama3_8b_h100_fp8_config with
#    fp8_recipe "cs" calls set_megatron_fsdp_overrides(use_megatron_fsdp=True) and no
#    CUDA graphs.  No recompute set (the base recipe's: none, as read for 25.11).
#  * llama3/llama3_70b_llm_pretrain.py, llama31/llama31_405b_llm_pretrain.py: the
#    H100/B200 FP8 functions set cfg.comm_overlap.tp_comm_overlap_cfg (userbuffers) on
#    the recipe's CommOverlapConfig(tp_comm_overlap=True), no CUDA graphs, no
#    recompute (the recipes' _llama3_common sets none), no FSDP, no offload.
#  * deepseek/deepseek_v3_llm_pretrain.py: recompute_granularity "selective";
#    deepseek_v3_h100_bf16_config: recompute_modules ["mla_up_proj", "mlp"], DeepEP
#    (enable_deepep=True), moe_a2a_1f1b_overrides (overlap_moe_expert_parallel_comm),
#    layout "Et|(tt|)*30mL", dropless; deepseek_v3_b200_bf16_config: ["mla_up_proj"],
#    token drop, no DeepEP, no a2a overlap, layout None (the recipe's (16, 1) map:
#    embedding + 4 | 4 x 14 | 1 + MTP + loss).  These are the functions whose defaults
#    are the rows' variants (H100 "dropless", B200 "tokendrop"); the same file's *_fp8_
#    functions pass get_precision_config("bf16") and flip those defaults, so they are
#    not read.  No CUDA graphs; no comm_overlap_config, so the recipe's
#    CommOverlapConfig(tp_comm_overlap=False) (src/megatron/bridge/recipes/deepseek/
#    deepseek_v3.py at 05d003fb8985ccde5cc8c33a72f750e38c1e76ff, _deepseek_v3_common,
#    which also sets mtp_num_layers = 1 and the (pp, vp) -> layout map).
#  * qwen3/qwen3_235b_a22b_llm_pretrain.py: set_qwen3_235b_a22b_specific_overrides
#    (recompute None, token drop); CommOverlapConfig(tp_comm_overlap=True); no CUDA
#    graphs (H100, B200); no a2a overlap, no DeepEP.
#  * qwen3/qwen3_30b_a3b_llm_pretrain.py: not stored at that commit; read in the
#    index's version of the same era (the same helpers.py calls; the search index's
#    file id 45585163543, its commit not named): set_qwen3_specific_overrides
#    (recompute None, token drop), CommOverlapConfig(tp_comm_overlap=True), no a2a
#    overlap; qwen3_30b_a3b_b200_fp8_config calls set_cuda_graph_overrides(
#    cuda_graphs=True) (per layer), the H100 function none.  Its H100 function has v12
#    where the table has v24 (listed as a mismatch).  (The later **kwargs versions,
#    e.g. 58fa56a3eabd488eb04c36b3d13812a958c9f82e, graph the full iteration on B200:
#    not 25.09's.)
# MoE dispatcher where no DeepEP: the scripts set none, so Megatron-Core's alltoall or
# allgather (both ``moe_dispatcher`` 0).
_LLAMA_2509 = {"recipe_recompute_granularity": "None", "recipe_cuda_graph_impl": "none",
               "recipe_moe_token_dispatcher": "alltoall", "recipe_tp_comm_overlap": "True",
               "recipe_ep_a2a_overlap": "False", "recipe_megatron_fsdp": "False",
               "recipe_mtp_num_layers": "0", "recipe_parallel_mismatch": "none"}
# llama31_405b_pretrain_config (src/megatron/bridge/recipes/llama/llama3.py, the
# _llama3_common era: the search index's file id 2525890528) sets
# account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split;
# the perf script keeps them.
_LLAMA_405B_2509 = {**_LLAMA_2509, "pipeline_split_embedding": "True"}
_QWEN_2509 = _LLAMA_2509
_DEEPSEEK_2509 = {**_LLAMA_2509, "recipe_recompute_granularity": "selective",
                  "recipe_tp_comm_overlap": "False", "recipe_mtp_num_layers": "1"}
BRIDGE_2509_COMMIT = "27dfb3df3c2cba55e54ec67016061048d4ce03c1"
# The DGX-GB200 rows (megatron-bridge-gb), read the same way: every model file at that
# commit has <model>_gb200_bf16_config and <model>_gb200_fp8_config(fp8_recipe="cs"), and
# the table's figure in parentheses is the other quantisation granularity (the later
# summary's footnote: "In case of GB200 and B200 systems, 32x32 for both weights and
# activations"), so the primary figure is fp8_recipe "cs" and the parenthesised one "mx"
# of the fp8 function; where that function branches on the recipe (Llama 3 70B, Llama
# 3.1 405B) the two figures ran two configs, keyed here by the row's variant:
#  * llama3_8b_gb200_fp8_config: t1 p1, MBS 2, GBS 128, set_cuda_graph_overrides
#    (per-layer graphs), no recompute, no FSDP, the 8B recipe's comm_overlap None;
#  * llama3_70b_gb200_fp8_config, "cs": t1 p1, MBS 2, set_megatron_fsdp_overrides,
#    set_recompute_overrides(cpu_offloading_num_layers 40) (cpu_offloading True,
#    cpu_offloading_weights False), no CUDA graphs, no recompute; the recipe's TP
#    overlap, off at t1.  "mx": t2 p4 v5 and MBS 1 (the table prints 2, and GA 16,
#    which holds at MBS 1: recipe_parallel_mismatch), no FSDP, no offload, TP overlap
#    (userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192);
#  * llama31_405b_gb200_fp8_config, "cs": t2 p1, Megatron-FSDP,
#    cpu_offloading_num_layers 95, TP overlap; "mx": t4 p8 c2 v8, no FSDP, no offload,
#    TP overlap; both with the recipe's embedding and loss in the pipeline split;
#  * deepseek_v3_gb200_fp8_config: t1 p4 v4 e64, GBS 2048, selective recompute of
#    ["mla_up_proj"] under token drop, Megatron-Core's alltoall dispatcher (no DeepEP),
#    moe_router_fusion, no a2a overlap, no CUDA graphs, the recipe's one MTP module and
#    its (4, 4) layout map.  The parenthesised figure's t1 p8 v2 is set by no function
#    stored (listed as a mismatch; the recipe's (8, 2) map is the (4, 4) one's 16 chunks);
#  * qwen3_30b_a3b_gb200_fp8_config (the same-era copy, the search index's file id
#    45585163543): t1 p1 e8, MBS 4, GBS 512, per-layer graphs, recompute None, token drop;
#  * Qwen3-235B: the function at this commit sets t1 p8 e8, not the table's t2 p1 e64;
#    the era's perf_matrix YAML that does (scripts/performance/configs/qwen3/
#    qwen3_235b_a22b_llm_pretrain.yaml at 60ecd1d9371b518994c148d102cbed998d1c9711,
#    gb200 num_gpus_64: tp 2, pp 1, ep 64, MBS 1, GBS 1024, cuda_graphs true, recompute
#    null, moe_router_fusion true) is read for it; its graphs go through the same
#    set_cuda_graph_overrides (per layer), its TP overlap is the recipe's (t2: on).
_GB200_2509_OFFLOAD = ("cpu_offloading=True; cpu_offloading_weights=False; "
                       "cpu_offloading_num_layers={}")
_PER_LAYER_GRAPHS = {"recipe_cuda_graph_impl": "local", "recipe_cuda_graph_scope": "full"}
BRIDGE_2509: dict[tuple[str, ...], dict[str, str]] = {
    ("LLAMA3_8B", "DGX-B200"): {**_LLAMA_2509, "recipe_cuda_graph_impl": "local",
                                "recipe_cuda_graph_scope": "full",
                                "recipe_tp_comm_overlap": "False"},
    ("LLAMA3_8B", "DGX-H100"): {**_LLAMA_2509, "recipe_tp_comm_overlap": "False",
                                "recipe_megatron_fsdp": "True"},
    ("LLAMA3_70B", "DGX-H100"): _LLAMA_2509,
    ("LLAMA3.1_405B", "DGX-B200"): _LLAMA_405B_2509,
    ("LLAMA3.1_405B", "DGX-H100"): _LLAMA_405B_2509,
    ("DeepSeekV3 (dropless)", "DGX-H100"): {
        **_DEEPSEEK_2509, "recipe_recompute_modules": '["mla_up_proj", "mlp"]',
        "recipe_moe_token_dispatcher": "flex (DeepEP)", "recipe_ep_a2a_overlap": "True",
        "pipeline_layout": "Et|(tt|)*30mL"},
    ("DeepSeekV3 (tokendrop)", "DGX-B200"): {
        **_DEEPSEEK_2509, "recipe_recompute_modules": '["mla_up_proj"]',
        # The recipe's layout_map[(16, 1)] as a layout string.
        "pipeline_layout": "Et*4|(t*4|)*14tmL"},
    ("Qwen3_30B_a3B (tokendrop)", "DGX-B200"): {
        **_QWEN_2509, "recipe_cuda_graph_impl": "local", "recipe_cuda_graph_scope": "full"},
    ("Qwen3_30B_a3B (tokendrop)", "DGX-H100"): {
        **_QWEN_2509, "recipe_parallel_mismatch": "vp: table=24 recipe=12"},
    ("Qwen3_235B_a22B (tokendrop)", "DGX-B200"): _QWEN_2509,
    ("Qwen3_235B_a22B (tokendrop)", "DGX-H100"): _QWEN_2509,
    ("LLAMA3_8B", "DGX-GB200"): {**_LLAMA_2509, **_PER_LAYER_GRAPHS,
                                 "recipe_tp_comm_overlap": "False"},
    ("LLAMA3_70B", "DGX-GB200", "primary"): {
        **_LLAMA_2509, "recipe_megatron_fsdp": "True",
        "recipe_activation_offload": _GB200_2509_OFFLOAD.format(40)},
    ("LLAMA3_70B", "DGX-GB200", "parenthetical"): {
        **_LLAMA_2509, "recipe_parallel_mismatch": "micro_batch: table=2 recipe=1"},
    ("LLAMA3.1_405B", "DGX-GB200", "primary"): {
        **_LLAMA_405B_2509, "recipe_megatron_fsdp": "True",
        "recipe_activation_offload": _GB200_2509_OFFLOAD.format(95)},
    ("LLAMA3.1_405B", "DGX-GB200", "parenthetical"): _LLAMA_405B_2509,
    ("DeepSeekV3 (tokendrop)", "DGX-GB200", "primary"): {
        **_DEEPSEEK_2509, "recipe_recompute_modules": '["mla_up_proj"]'},
    ("DeepSeekV3 (tokendrop)", "DGX-GB200", "parenthetical"): {
        **_DEEPSEEK_2509, "recipe_recompute_modules": '["mla_up_proj"]',
        "recipe_parallel_mismatch": "pp: table=8 recipe=4; vp: table=2 recipe=4"},
    ("Qwen3_30B_a3B (tokendrop)", "DGX-GB200"): {**_QWEN_2509, **_PER_LAYER_GRAPHS},
    ("Qwen3_235B_a22B (tokendrop)", "DGX-GB200"): {**_QWEN_2509, **_PER_LAYER_GRAPHS},
}


# Megatron-Bridge 25.11's recipe settings.  The CSV read the H100 and B200 rows' recipe
# columns from the newest perf recipes (it names each row's 25.11 preset in
# recipe_preset_match but did not read it) and none for the Blackwell rows.  25.11 ran
# the r0.2.0 form of the performance scripts: presets <MODEL>_<SIZE>_<GPU>_<DTYPE>_BASE_CONFIG
# in scripts/performance/configs/{llama3,llama31,deepseek,qwen3,gpt_oss}/
# workload_base_configs.py with the drivers <family>_llm_pretrain.py and utils/helpers.py
# (set_cuda_graph_overrides, set_megatron_fsdp_overrides, set_recompute_overrides,
# set_moe_a2a_overlap_overrides).  A helper session read them at llama3 750df3db and
# 0fa501ac, llama31 b3b90e4f and 1420e3fa (forks), deepseek d19cb73c, qwen3 767255d2 and
# e8bd8608, gpt_oss 6b296ac1, helpers 767255d2, and dated them by content: every one has
# WorkloadBaseConfig presets with num_gpus (PR 1224, on r0.2.0 2025-11-07), list-type
# graph scopes, moe_flex_dispatcher_backend and moe_a2a_overlap (PR 1348, on r0.2.0
# 2025-11-21), DeepSeek-V3's GB200 fix and B200 "no a2a overlap" (PR 1476, on r0.2.0
# 2025-11-24), and none has the _V1 / _V2 names of 26.02; the DeepSeek-V3 GB300 preset
# (pp 2, vp 4, ep 32, GBS 4096, no MTP) matches the table's "w/o MTP" row where main's
# later V1 does not.  Per row (by row id), the settings of the preset whose layout is the
# row's, or differs from it only in the micro-batch or global batch (then listed as a
# mismatch):
#  * Llama 3 8B: B200 and GB200 MXFP8 and GB300 cuda_graph_impl "local" of
#    ["full_iteration"]; GB200 FP8-CS none (NVIDIA's versions of the file; later forks
#    graph the full iteration: listed); H100 Megatron-FSDP, no graphs, no recompute (the
#    CSV's newest recipe recomputes 5 layers and shards nothing); GB300 MBS 4 against
#    the table's 2.  No recompute, and the TP overlap of a TP-1 layout, off.
#  * Llama 3 70B: H100 t4 p8 v5 with userbuffers TP overlap; GB300 and GB200
#    Megatron-FSDP with cpu_offloading_num_layers 20 and 40, no graphs, GBS 128 against
#    the table's 256.  Llama 3.1 405B B200 t4 p8 c2 v8 and H100 t8 p8 c2 v8: TP overlap,
#    no graphs, no recompute.
#  * DeepSeek-V3 (driver: selective recompute, router fusion, forced balance): GB300
#    Transformer Engine graphs of ["attn", "moe_router", "moe_preprocess"], the flex
#    dispatcher with HybridEP, no a2a overlap, recompute_modules [] and no MTP, the
#    driver's layout "Et*3|(t*4|)*14ttL" (16 chunks: not the row's p2 v4, which is used
#    and listed); GB200 graphs of ["moe_router", "moe_preprocess"], HybridEP, no
#    overlap, ["mla_up_proj"], no MTP.  (B200: BRIDGE_DEEPSEEK_B200_P16.)
#  * Qwen3 (driver: recompute None, router fusion, forced balance; the provider's
#    alltoall dispatcher, the presets of these rows setting no flex backend): B200 30B
#    and GB200 / GB300 30B graphs of ["attn", "moe_router", "moe_preprocess"], no
#    overlap (GB300 MBS 8 against the table's 4); B200 235B p8 v2 e8 and H100 235B t2 p8
#    v4 e32 no graphs, the a2a overlap; H100 30B p2 v12 e8 (the table's v24: listed), no
#    graphs, the a2a overlap.  The H100 235B TP overlap: on in the driver at 767255d2,
#    off at e8bd8608, which holds Qwen3-Next (PR 1451, on r0.2.0 2025-11-21): off, listed.
#  * GPT-OSS 120B (driver: router fusion, forced balance, sequence 8192; alltoall): GB200
#    e64 MBS 1 GBS 1280, recompute_modules ["layernorm", "moe_act"], no graphs; GB300 e64
#    graphs of ["attn", "moe_router", "moe_preprocess"], no recompute, MBS 4 against the
#    table's 2.
# FP8 parameters: the drivers' get_precision_config takes Megatron-Bridge's
# bf16_with_fp8_current_scaling_mixed (FP8-CS) and bf16_with_mxfp8_mixed (MXFP8), which
# set fp8_param_gather=True (the MXFP8 one since PRs 450 and 638, before 25.11).
# Rows whose layout no stored 25.11 preset has are not read here (BRIDGE_2511_UNMATCHED).
_2511 = {"recipe_recompute_granularity": "None", "recipe_recompute_method": "None",
         "recipe_recompute_num_layers": "None", "recipe_recompute_modules": "None",
         "recipe_activation_offload": "fine_grained_activation_offloading=False",
         "recipe_cuda_graph_impl": "none", "recipe_cuda_graph_scope": "[]",
         "recipe_moe_token_dispatcher": "alltoall", "recipe_moe_flex_backend": "",
         "recipe_tp_comm_overlap": "False", "recipe_ep_a2a_overlap": "False",
         "recipe_megatron_fsdp": "False", "recipe_mtp_num_layers": "0",
         "recipe_precision_recipe": "get_precision_config", "recipe_parallel_mismatch": "none"}
_FULL_ITERATION_2511 = {**_2511, "recipe_cuda_graph_impl": "local",
                        "recipe_cuda_graph_scope": '["full_iteration"]'}
_TE_GRAPHS = '["attn", "moe_router", "moe_preprocess"]'
_FSDP_2511 = {**_2511, "recipe_megatron_fsdp": "True"}
_DSV3_2511 = {**_2511, "recipe_recompute_granularity": "selective",
              "recipe_cuda_graph_impl": "transformer_engine",
              "recipe_moe_token_dispatcher": "flex", "recipe_moe_flex_backend": "hybridep"}
_DSV3_GB300_2511 = {**_DSV3_2511, "recipe_cuda_graph_scope": _TE_GRAPHS,
                    "recipe_recompute_modules": "[]",
                    "pipeline_layout": "Et*3|(t*4|)*14ttL"}
_QWEN3_30B_2511 = {**_2511, "recipe_cuda_graph_impl": "transformer_engine",
                   "recipe_cuda_graph_scope": _TE_GRAPHS}
_QWEN3_OVERLAP_2511 = {**_2511, "recipe_ep_a2a_overlap": "True"}
BRIDGE_2511: dict[str, dict[str, str]] = {
    "mb0252": _FULL_ITERATION_2511, "mb0253": _FULL_ITERATION_2511,
    "mg0161": {**_FULL_ITERATION_2511, "recipe_parallel_mismatch": "micro_batch: table=2 recipe=4"},
    "mg0162": {**_FULL_ITERATION_2511, "recipe_parallel_mismatch": "micro_batch: table=2 recipe=4"},
    "mg0170": _2511, "mg0171": _FULL_ITERATION_2511,
    "mb0260": _FSDP_2511,
    "mb0261": {**_2511, "recipe_tp_comm_overlap": "True"},
    "mg0163": {**_FSDP_2511, "recipe_activation_offload": _GB200_2509_OFFLOAD.format(20),
               "recipe_parallel_mismatch": "global_batch: table=256 recipe=128"},
    "mg0172": {**_FSDP_2511, "recipe_activation_offload": _GB200_2509_OFFLOAD.format(40),
               "recipe_parallel_mismatch": "global_batch: table=256 recipe=128"},
    "mb0254": {**_2511, "recipe_tp_comm_overlap": "True"},
    "mb0255": {**_2511, "recipe_tp_comm_overlap": "True"},
    "mb0262": {**_2511, "recipe_tp_comm_overlap": "True"},
    "mg0165": _DSV3_GB300_2511, "mg0166": _DSV3_GB300_2511,
    "mg0174": {**_DSV3_2511, "recipe_cuda_graph_scope": '["moe_router", "moe_preprocess"]',
               "recipe_recompute_modules": '["mla_up_proj"]'},
    "mb0258": _QWEN3_30B_2511, "mg0177": _QWEN3_30B_2511,
    "mg0168": {**_QWEN3_30B_2511, "recipe_parallel_mismatch": "micro_batch: table=4 recipe=8"},
    "mb0259": _QWEN3_OVERLAP_2511, "mb0265": _QWEN3_OVERLAP_2511,
    "mb0264": {**_QWEN3_OVERLAP_2511, "recipe_parallel_mismatch": "vp: table=24 recipe=12"},
    "mg0176": {**_2511, "recipe_recompute_granularity": "selective",
               "recipe_recompute_modules": '["layernorm", "moe_act"]'},
    "mg0167": {**_2511, "recipe_cuda_graph_impl": "transformer_engine",
               "recipe_cuda_graph_scope": _TE_GRAPHS,
               "recipe_parallel_mismatch": "micro_batch: table=2 recipe=4"},
}
# What the 25.11 reading leaves open, listed with the row.
BRIDGE_2511_NOTES: dict[str, str] = {
    "mg0170": "no CUDA graphs, as NVIDIA's 25.11-era preset sets (later forks of the file "
              "graph the full iteration)",
    "mb0260": "the driver's NCCL user buffers and unfused gradient accumulation are not "
              "counted",
    "mb0265": "the TP overlap off, as the driver with Qwen3-Next sets it for H100 235B (an "
              "earlier driver of the era left it on)",
}
# 25.11 rows whose layout no stored 25.11-era preset has (the presets: Llama 3.1 405B on
# 128 GB200 / GB300 at t2 with Megatron-FSDP, CPU offload and GBS 64; Qwen3-235B on 64 at
# GBS 1024; DeepSeek-V3 GB200 p4 v4 e64): launched with the layout given on the command
# line, whose other settings are not documented.
BRIDGE_2511_UNMATCHED = ("mg0164", "mg0173", "mg0169", "mg0178", "mg0175")


# Rows of 26.02-26.06 whose CSV recipe columns came from the newest perf recipe although
# that recipe's layout is not the row's (the CSV's recipe_parallel_mismatch): read at
# the legacy preset of the row's era whose layout is the row's (a helper session read
# scripts/performance/configs/*_workload_base_configs.py, their drivers and
# utils/overrides.py in upstream and fork versions, dated by the PRs that changed them):
#  * Nemotron-3 Nano on 16 H100, ep 8 (the newest recipe's ep 16 came with PR 4628,
#    2026-07-02): 26.02.01 (mb0199) _NEMOTRON_3_NANO_PRETRAIN_CONFIG_H100 from PR 2510
#    (on r0.3.0 as PR 2560) with PR 2617 "nemotron3_nano_h100_fix_260201": no graphs,
#    recompute_modules ["moe", "layernorm"], HybridEP; 26.04-26.06 (mb0155, mb0112,
#    mb0057) H100_FP8_CS_V1: Transformer Engine graphs of ["mamba"], recompute_modules
#    ["moe", "layernorm", "core_attn", "moe_act"], HybridEP, no a2a overlap.
#  * Qwen3-30B-A3B on 16 H100 (mb0228, mb0191): H100_FP8_CS_V1 before PR 2477 (EP 16
#    and HybridEP, merged 2026-02-22, its r0.3.0 cherry-pick PR 2500 closed unmerged):
#    pp 2, vp 12, ep 8, moe_a2a_overlap True, no graphs, no flex backend (alltoall),
#    GBS 1024 from PR 2280 (2026-02-09).  On 8 B200 (mb0227): B200_FP8_MX_V1 =
#    B200_FP8_CS_V1, MBS 1, graphs of ["moe_router", "moe_preprocess"], alltoall (PR 2499,
#    2026-02-23, replaced it with MBS 4 and HybridEP: the newest recipe).
#  * GPT-OSS 120B BF16 at ep 64 (26.02; PR 2915, 2026-03-20, moved both to ep 8):
#    B200_BF16_V2 (mb0222) recompute_modules ["layernorm", "moe_act"], no graphs; B300
#    (mg0154) graphs of ["attn", "moe_router", "moe_preprocess"], no recompute; both
#    alltoall, no overlap.
#  * DeepSeek-V3 MXFP8: B300 26.04.01 (mg0055, radixark d063066b) B300_FP8_MX_V2 = pp 8,
#    no vp, ep 8, MBS 2, graphs of ["attn", "moe_router", "moe_preprocess"], HybridEP, no
#    overlap, ["mla_up_proj"]; GB300 26.06 at GBS 15360 (mg0026) the GB300_FP8_MX_GBS15360
#    variant (PR 4330), the V2 preset the newest recipe holds at GBS 15360: its other
#    columns stand.
#  * Llama 3.1 405B 26.02.01, before PRs 2065 and 2175 (2026-01-26, 02-02): GB200 NVFP4
#    (mg0116) tp 4, pp 16, vp 4, a local full-iteration graph, no TP overlap under NVFP4
#    (the driver); GB300 FP8 (mg0119) tp 2, pp 8, cp 2, vp 4, no FSDP, no offload, no
#    graphs, TP overlap on.
# Llama 3 70B on GB300 in 26.02.01 (mg0109, mg0111): no stored preset has the printed
# layouts (every version: t1 p4 v5 MBS 1 for MXFP8 and NVFP4; PR 3284, proposing FSDP at
# MBS 2, was closed unmerged), and neither printed layout can have run: they are read at
# the recipe's (BRIDGE_UNRUNNABLE).
_NANO_H100 = {**_2511, "recipe_moe_token_dispatcher": "flex",
              "recipe_moe_flex_backend": "hybridep",
              "recipe_recompute_granularity": "selective"}
BRIDGE_ERA: dict[str, dict[str, str]] = {
    "mb0199": {**_NANO_H100, "recipe_recompute_modules": '["moe", "layernorm"]'},
    **{row: {**_NANO_H100, "recipe_cuda_graph_impl": "transformer_engine",
             "recipe_cuda_graph_scope": '["mamba"]',
             "recipe_recompute_modules": '["moe", "layernorm", "core_attn", "moe_act"]'}
       for row in ("mb0155", "mb0112", "mb0057")},
    "mb0228": _QWEN3_OVERLAP_2511, "mb0191": _QWEN3_OVERLAP_2511,
    "mb0227": {**_2511, "recipe_cuda_graph_impl": "transformer_engine",
               "recipe_cuda_graph_scope": '["moe_router", "moe_preprocess"]'},
    "mb0222": {**_2511, "recipe_recompute_granularity": "selective",
               "recipe_recompute_modules": '["layernorm", "moe_act"]'},
    "mg0154": {**_2511, "recipe_cuda_graph_impl": "transformer_engine",
               "recipe_cuda_graph_scope": _TE_GRAPHS},
    "mg0055": {**_DSV3_2511, "recipe_cuda_graph_scope": _TE_GRAPHS,
               "recipe_recompute_modules": '["mla_up_proj"]', "recipe_mtp_num_layers": "1"},
    "mg0026": {"recipe_parallel_mismatch": "none"},
    "mg0116": _FULL_ITERATION_2511,
    "mg0119": {**_2511, "recipe_tp_comm_overlap": "True"},
}
# What the era reading reconstructs from a PR rather than one stored file, with the row.
BRIDGE_ERA_NOTES: dict[str, str] = {
    "mb0199": "the preset rebuilt from PRs 2510 and 2617 (no stored file holds both)",
    "mb0228": "the preset's pp 2 vp 12 with PR 2280's GBS 1024 (no stored file holds both)",
    "mb0191": "the preset's pp 2 vp 12 with PR 2280's GBS 1024 (no stored file holds both)",
}


# DeepSeek-V3 on DGX-B200 at t1 p16 e8 (25.11, 26.02, 26.02.01, 26.04): the CSV read these
# rows' recipe columns from the MXFP8 preset of the tagged release, which by then ran
# t1 p8 v2 e32 with DeepEP, the a2a overlap, Transformer Engine graphs and the mlp
# recompute (its recipe_parallel_mismatch: "pp: table=16 recipe=8; vp: table=n/a
# recipe=2; ep: table=8 recipe=32").  The rows' own layout is a preset of the same files
# in the era that published it, whose settings are read here instead:
#  * 26.02-26.04 (GBS 4096): scripts/performance/configs/deepseek/
#    deepseek_workload_base_configs.py (the search index's file id 52245127557):
#    DEEPSEEK_V3_PRETRAIN_CONFIG_B200_V1 = pp 16, ep 8, recompute_modules
#    ["mla_up_proj"], moe_flex_dispatcher_backend "hybridep", moe_a2a_overlap False, no
#    cuda_graph_impl (WorkloadBaseConfig's None: the recipe's "none"); B200_V2 = V1 with
#    GBS 4096, and B200_FP8_MX_V2 = B200_FP8_CS_V2 = B200_V2: the table's MXFP8 t1 p16 e8
#    GBS 4096 exactly.
#  * 25.11 (GBS 2048): scripts/performance/configs/deepseek/workload_base_configs.py
#    (commit 0fa501acee1ebfe3d1ab8088b638e2089d800df6): DEEPSEEK_V3_B200_FP8_MX_BASE_CONFIG
#    = DEEPSEEK_V3_B200_FP8_CS_BASE_CONFIG = pp 16, ep 8, GBS 2048, recompute_modules
#    ["mla_up_proj"], no CUDA graphs; deepseek_llm_pretrain.py's deepseek_v3_b200_config
#    (the index's file id 33719534942) builds it with enable_deepep=False and no a2a
#    overlap: Megatron-Core's alltoall dispatcher.
_DEEPSEEK_B200_P16 = {"recipe_recompute_granularity": "selective",
                      "recipe_recompute_modules": '["mla_up_proj"]',
                      "recipe_cuda_graph_impl": "none", "recipe_cuda_graph_scope": "unset",
                      "recipe_moe_token_dispatcher": "flex (HybridEP)",
                      "recipe_ep_a2a_overlap": "False", "recipe_parallel_mismatch": "none"}
BRIDGE_DEEPSEEK_B200_P16: dict[str, dict[str, str]] = {
    "25.11": {**_DEEPSEEK_B200_P16, "recipe_moe_token_dispatcher": "alltoall"},
    "26.02": _DEEPSEEK_B200_P16,
    "26.02.01": _DEEPSEEK_B200_P16,
    "26.04": _DEEPSEEK_B200_P16,
}


# Qwen3-235B-A22B on 256 DGX-B200 at t1 p8 e8, MXFP8 (26.02 mb0232, 26.04.01 mb0105):
# the CSV read these rows' recipe columns after Megatron-Bridge PR 4606 ("perf(qwen):
# enable full iteration cg for b200 b300 fp8 mx", 2026-06-30, on the r0.5.0 branch,
# 26.06), which set exactly what they show for the Qwen3 235B B200 FP8-MX V2 preset:
# moe_a2a_overlap, full-iteration CUDA graphs (cuda_graph_scope []), VP 3 and the
# HybridEP flex dispatcher.  Full-iteration graphs of a dropless MoE model reached
# Megatron-Bridge only in 26.06 (issue 3393, "enable full-iteration cudagraph",
# needing Megatron-Core PR 4247; enabled 2026-06-07 by PR 3983).  The rows' own
# releases ran the preset as it was before PR 4606: scripts/performance/configs/qwen/
# qwen3_workload_base_configs.py (commit 01b2977e518f0a58ec870daba2fb2c04d76a91b2):
# QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_FP8_MX_V2 = B200_FP8_CS_V2 = B200_FP8_CS_V1 at
# 256 GPUs and GBS 8192: pp 8, ep 8, no virtual stages (the table's blank),
# moe_a2a_overlap False, moe_token_dispatcher_type "alltoall", no cuda_graph_impl
# (WorkloadBaseConfig's None: the recipe's "none").
BRIDGE_QWEN3_235B_B200_PRE_2606: dict[str, str] = {
    "recipe_cuda_graph_impl": "none", "recipe_cuda_graph_scope": "unset",
    "recipe_moe_token_dispatcher": "alltoall",
    "recipe_ep_a2a_overlap": "False", "recipe_parallel_mismatch": "none"}
BRIDGE_QWEN3_235B_B200_RELEASES: tuple[str, ...] = ("26.02", "26.04.01")


# The Blackwell MXFP8 rows of DeepSeek-V3, Qwen3-30B-A3B and Qwen3-235B-A22B on DGX-GB300,
# DGX-GB200 and DGX-B300, releases 26.02-26.04.01.  The CSV read their recipe columns from
# the newest perf recipes, which run full-iteration CUDA graphs: a dropless MoE model
# reached those only in 26.06 (issue 3393, PR 3983; PR 4226 for DeepSeek-V3 on GB200).
# These releases ran the legacy presets, scripts/performance/configs/<family>/
# <family>_workload_base_configs.py with their drivers (<family>_llm_pretrain.py) and
# overrides (a preset's cuda_graph_impl None keeps the recipe's "none"; moe_a2a_overlap
# sets overlap_moe_expert_parallel_comm; the drivers set recompute_granularity None for
# Qwen3 and "selective" for DeepSeek-V3).  Each version is dated by its content against
# the PRs that changed it and the release tables' own layouts:
# * DeepSeek-V3, DEEPSEEK_V3_PRETRAIN_CONFIG_{GB300,GB200}_FP8_MX_V2 (= V1 at GBS 4096),
#   at f0e2c37e (no full-iteration setting, no VR200 presets): GB300 micro_batch_size=2,
#   pp 2, vp 8, pp_layout "Et*4|(t*4|)*14tmL", ep 32, moe_flex_dispatcher_backend
#   "hybridep", moe_a2a_overlap=False, cuda_graph_scope=[] (no graphs),
#   recompute_modules ["mla_up_proj"]; GB200 pp 4, vp 4, ep 64, the same dispatcher and
#   overlap, cuda_graph_impl "transformer_engine" of ["attn", "moe_router",
#   "moe_preprocess"], recompute_modules ["mla_up_proj"] in 26.02 and 26.02.01 and
#   ["mlp"] from PR 3031 (2026-03-30, "verified ... in 26.04 RC3 container") on.  The
#   recipe turns the hybridep backend into the flex dispatcher on Blackwell
#   (apply_flex_dispatcher_backend).
# * Qwen3-30B-A3B, QWEN3_30B_A3B_PRETRAIN_CONFIG_{GB300,GB200,B300}_FP8_MX_V1, the same
#   in every stored version (f29a269f, 01b2977e and later): micro-batch 8, 4, 8, ep 8,
#   moe_flex_dispatcher_backend "hybridep", cuda_graph_impl "transformer_engine" of
#   ["moe_router", "moe_preprocess"], no a2a overlap.
# * Qwen3-235B-A22B, QWEN3_235B_A22B_PRETRAIN_CONFIG_{GPU}_FP8_MX_V2: at f29a269f (PR
#   2209, 2026-02-04, "use no VP mapping that resolves NaN grad", on r0.3.0 as PR 2210:
#   26.02, 26.02.01) GB300 = FP8_CS_V2, pp 4, no vp, ep 32, graphs of ["attn",
#   "moe_router", "moe_preprocess"]; GB200 pp 8, no vp, ep 32, the same graphs; B300 pp
#   8, vp 4, ep 8, moe_a2a_overlap=True, no graphs and no flex backend (the recipe's
#   alltoall).  From PR 2850 (2026-03-17, "re-enable VP": 26.04, 26.04.01) GB300 vp 12
#   and GB200 vp 3; B300 loses vp and the overlap (PR 2669), takes micro-batch 2 (PR
#   3252, 2026-04-09) and the driver's explicit "alltoall" (01b2977e) in 26.04, and the
#   hybridep flex dispatcher in 26.04.01 (PR 3490, cherry-picked as PR 3675, 2026-05-05;
#   issue 3399 is labelled 26.04.01).
# * Qwen3-30B-A3B on 8 B200 and 16 H100 (the H100 / B200 set), whose CSV columns come
#   from the newest perf recipe (perf_recipes/qwen/b200/qwen3_moe.py: overlap_moe_expert_
#   parallel_comm on for B200; TE graphs of ["attn", "moe_router", "moe_preprocess"] for
#   H100): the same file at 01b2977e (after PR 2499, 2026-02-23, which gave B200 its
#   micro-batch 4 and HybridEP: 26.02.01's row prints micro-batch 4, so it ran it; 26.02's
#   micro-batch 1 row is BRIDGE_ERA's) has B200_FP8_MX_V1 = B200_BF16_V1, micro-batch 4,
#   moe_flex_dispatcher_backend "hybridep", graphs of ["attn", "moe_router",
#   "moe_preprocess"] and no moe_a2a_overlap (WorkloadBaseConfig's default, False);
#   H100_FP8_CS_V1 ep 16, HybridEP, moe_a2a_overlap=False and no graphs (f29a269f's is
#   the same).  26.02.01's H100 row, at another layout, is BRIDGE_ERA's.
# Every layout above is the row's own (the published pp, vp, ep and micro-batch).  Where
# a setting is not pinned to a release by a stored file it is listed with the row
# (BRIDGE_PRE_2606_NOTES).
_PRE_2606: dict[str, str] = {
    "recipe_recompute_granularity": "None", "recipe_recompute_method": "None",
    "recipe_recompute_num_layers": "None", "recipe_recompute_modules": "None",
    "recipe_cuda_graph_impl": "transformer_engine",
    "recipe_cuda_graph_scope": '["attn", "moe_router", "moe_preprocess"]',
    "recipe_moe_token_dispatcher": "flex", "recipe_moe_flex_backend": "hybridep",
    "recipe_ep_a2a_overlap": "False", "recipe_parallel_mismatch": "none"}
_DSV3_PRE_2606 = {**_PRE_2606, "recipe_recompute_granularity": "selective",
                  "recipe_recompute_modules": '["mla_up_proj"]'}
_DSV3_GB300_PRE_2606 = {**_DSV3_PRE_2606, "recipe_cuda_graph_impl": "none",
                        "recipe_cuda_graph_scope": "[]",
                        "pipeline_layout": "Et*4|(t*4|)*14tmL"}
_QWEN3_30B_PRE_2606 = {**_PRE_2606, "recipe_cuda_graph_scope": '["moe_router", "moe_preprocess"]'}
_QWEN3_235B_B300_2602 = {**_PRE_2606, "recipe_cuda_graph_impl": "none",
                         "recipe_cuda_graph_scope": "[]", "recipe_moe_token_dispatcher": "alltoall",
                         "recipe_moe_flex_backend": "", "recipe_ep_a2a_overlap": "True"}
_EARLY = ("26.02", "26.02.01")
_LATE = ("26.04", "26.04.01")
BRIDGE_PRE_2606: dict[tuple[str, str, str], dict[str, str]] = {
    **{("DeepSeekV3", "DGX-GB300", r): _DSV3_GB300_PRE_2606 for r in _EARLY + _LATE},
    **{("DeepSeekV3", "DGX-GB200", r): _DSV3_PRE_2606 for r in _EARLY},
    **{("DeepSeekV3", "DGX-GB200", r): {**_DSV3_PRE_2606, "recipe_recompute_modules": '["mlp"]'}
       for r in _LATE},
    **{("Qwen3_30B_a3B", system, r): _QWEN3_30B_PRE_2606
       for system in ("DGX-GB300", "DGX-GB200", "DGX-B300") for r in _EARLY + _LATE},
    **{("Qwen3_235B_a22B", system, r): _PRE_2606
       for system in ("DGX-GB300", "DGX-GB200") for r in _EARLY + _LATE},
    **{("Qwen3_235B_a22B", "DGX-B300", r): _QWEN3_235B_B300_2602 for r in _EARLY},
    ("Qwen3_235B_a22B", "DGX-B300", "26.04"): {
        **_QWEN3_235B_B300_2602, "recipe_ep_a2a_overlap": "False"},
    ("Qwen3_235B_a22B", "DGX-B300", "26.04.01"): _PRE_2606 | {
        "recipe_cuda_graph_impl": "none", "recipe_cuda_graph_scope": "[]"},
    **{("Qwen3_30B_a3B", "DGX-B200", r): _PRE_2606 for r in ("26.02.01", *_LATE)},
    **{("Qwen3_30B_a3B", "DGX-H100", r): _PRE_2606 | {
        "recipe_cuda_graph_impl": "none", "recipe_cuda_graph_scope": "[]"} for r in _LATE},
}
# What each pre-26.06 reading leaves open, listed with the rows it applies to.
_FLEX_2602 = ("the flex dispatcher for 26.02's hybridep backend (its driver sets the backend; "
              "that the dispatcher type followed is not dated)")
BRIDGE_PRE_2606_NOTES: dict[tuple[str, str, str], str] = {
    **{("Qwen3_30B_a3B", system, r): _FLEX_2602
       for system in ("DGX-GB300", "DGX-GB200", "DGX-B300") for r in _EARLY},
    **{("Qwen3_235B_a22B", system, r): _FLEX_2602
       for system in ("DGX-GB300", "DGX-GB200") for r in _EARLY},
    **{("Qwen3_235B_a22B", "DGX-B300", r): "the recipe's alltoall dispatcher where the "
       "preset sets no flex backend (not read from the release's recipe)" for r in _EARLY},
    ("Qwen3_235B_a22B", "DGX-B300", "26.04"): "no stored preset is 26.04's: 01b2977e's "
    "(alltoall, no overlap, no graphs) with PR 3252's micro-batch 2, as the row prints",
    **{("Qwen3_30B_a3B", "DGX-B200", r): "no all-to-all overlap (the newest recipe's came "
       "later)" for r in ("26.02.01", *_LATE)},
    **{("Qwen3_30B_a3B", "DGX-H100", r): "no CUDA graphs (the newest recipe's came later)"
       for r in _LATE},
}


def _recipe(row: Mapping[str, str]) -> Mapping[str, str]:
    """The row with 25.09's recipe settings (``BRIDGE_2509``) filled in, those of the
    DeepSeek-V3 B200 t1 p16 e8 preset (``BRIDGE_DEEPSEEK_B200_P16``) for its rows, those
    of the Qwen3-235B B200 preset before 26.06 (``BRIDGE_QWEN3_235B_B200_PRE_2606``) for
    its rows, those of the GB300, GB200 and B300 MoE presets and of Qwen3-30B-A3B's B200
    and H100 presets before 26.06 (``BRIDGE_PRE_2606``) for theirs, and by row id those
    of 25.11's presets
    (``BRIDGE_2511``) and of other eras' (``BRIDGE_ERA``)."""
    release = row["release"].strip()
    layout = (row["tp"].strip(), row["pp"].strip(), row["ep"].strip())
    if (row["model"].strip().startswith("DeepSeekV3") and row["system"].strip() == "DGX-B200"
            and layout == ("1", "16", "8") and release in BRIDGE_DEEPSEEK_B200_P16):
        return {**row, **BRIDGE_DEEPSEEK_B200_P16[release]}
    if (row["model"].strip() == "Qwen3_235B_a22B" and row["system"].strip() == "DGX-B200"
            and layout == ("1", "8", "8") and release in BRIDGE_QWEN3_235B_B200_RELEASES):
        return {**row, **BRIDGE_QWEN3_235B_B200_PRE_2606}
    era = BRIDGE_PRE_2606.get(_era_key(row))
    if era is not None:
        return {**row, **era}
    label = row.get("row_id", "")
    if release == "25.11" and label in BRIDGE_2511:
        return {**row, **BRIDGE_2511[label]}
    if label in BRIDGE_ERA:
        return {**row, **BRIDGE_ERA[label]}
    if release != "25.09":
        return row
    key = (row["model"].strip(), row["system"].strip())
    return {**row, **BRIDGE_2509.get((*key, row["variant"].strip()), BRIDGE_2509.get(key, {}))}


def _unread(row: Mapping[str, str], column: str) -> bool:
    return not _recipe(row).get(column, "").strip()


# Precision recipes that keep layers' GEMMs in BF16 (Megatron-Bridge
# src/megatron/bridge/training/mixed_precision.py, the search index's file id
# 71126281837): nemotron_3_super_bf16_with_nvfp4_mixed sets first_last_layers_bf16 and
# num_layers_at_end_in_bf16 = 14, MixedPrecisionConfig's num_layers_at_start_in_bf16
# default is 0, and the Nemotron 3 Super perf recipes' _nemotron_3_super_nvfp4_precision
# returns it (with fp4_param_gather off).  _perf_precision("fp8_cs") turns
# first_last_layers_bf16 off, so the FP8-CS rows keep none.
BRIDGE_BF16_LAYERS: dict[str, int] = {"_nemotron_3_super_nvfp4_precision()": 14}


def _bridge_precision(row: Mapping[str, str]) -> Cell:
    text = row["precision"].strip()
    if not text:
        # The 25.09 scripts' get_precision_config: "cs" is Megatron-Bridge's
        # bf16_with_fp8_current_scaling_mixed, which sets fp8_param_gather=True in
        # every stored version; "mx" is bf16_with_mxfp8_mixed, stored in two versions
        # (fp8_param_gather False, and True with reuse_grad_buf_for_mxfp8_param_ag) that
        # the index does not date, so the model's default (none) is kept and listed.
        per_tensor = row["variant"] == "primary"
        note = ("25.09 states no precision: FP8 read from its note on quantisation "
                "granularities, " + ("per-tensor for the primary figure" if per_tensor
                                     else "blockwise for the figure in parentheses (whether "
                                          "its FP8 parameters were gathered is not dated: "
                                          "not counted)"))
        return tuple(Way({**w.inputs, "fp8_param_gather": int(per_tensor)},
                         "; ".join(filter(None, (note, w.note))))
                     for w in precision(1 if per_tensor else 2))
    levels = {"BF16": 0, "FP8": 1, "FP8-CS": 1, "MXFP8": 2, "FP8-MX": 2, "NVFP4": 3}
    if text not in levels:
        raise InputError("precision", text, "one of " + ", ".join(levels))
    level = levels[text]
    # Megatron-Bridge's FP8 current-scaling and MXFP8 mixed-precision recipes
    # (training/mixed_precision.py: bf16_with_fp8_current_scaling_mixed,
    # bf16_with_mxfp8_mixed) set fp8_param_gather=True: FP8 primary weights.
    # NVFP4 parameters are not supported there (fp4_param_gather raises).
    recipe = _recipe(row)["recipe_precision_recipe"].strip()
    gather = 1 if level in (1, 2) and recipe else 0
    kept = BRIDGE_BF16_LAYERS.get(recipe, 0)
    if kept:
        return exact(precision=level, fp8_param_gather=gather, bf16_layers=kept)
    return exact(precision=level, fp8_param_gather=gather)


def _bridge_recompute(row: Mapping[str, str]) -> Cell:
    row = _recipe(row)
    if _unread(row, "recipe_recompute_granularity"):
        return _not_read(row)
    return megatron_recompute(row["recipe_recompute_granularity"],
                              row["recipe_recompute_method"],
                              row["recipe_recompute_num_layers"],
                              row["recipe_recompute_modules"])


def _release(row: Mapping[str, str]) -> tuple[int, ...]:
    return tuple(int(part) for part in row["release"].strip().split("."))


def _dropless_moe(row: Mapping[str, str]) -> bool:
    """A row of an MoE model that drops no tokens: every model of these sets but the
    dense Llamas, and but the rows named "(tokendrop)" (the source's note: MoE rows
    are token-dropless from 25.11 on)."""
    model = row["model"].strip()
    return not model.startswith("LLAMA") and "tokendrop" not in model


def _bridge_graphs(row: Mapping[str, str]) -> Cell:
    row = _recipe(row)
    impl = row["recipe_cuda_graph_impl"].strip()
    scope = row["recipe_cuda_graph_scope"].strip()
    if _unread(row, "recipe_cuda_graph_impl"):
        return _not_read(row)
    if impl == "none":
        return graphs(0)
    if impl == "full_iteration" or "full_iteration" in scope:
        if _dropless_moe(row) and _release(row) < (26, 6):
            return Missing("the recipe read runs full-iteration CUDA graphs, which a "
                           "dropless MoE model reached only in 26.06 (Megatron-Bridge "
                           "issue 3393, PR 3983): this release's own settings are not read")
        return graphs(2)
    if impl in ("transformer_engine", "local"):
        if scope in ("full", "unset", "[]", ""):
            return graphs(1)
        return graphs(1, f"CUDA graphs of part of each layer ({scope}) as per-layer graphs")
    raise InputError("recipe_cuda_graph_impl", impl, "none, transformer_engine, local or "
                     "full_iteration")


# The flex dispatcher's backends (Megatron-Core moe_flex_dispatcher_backend):
# DeepEP 1, HybridEP 2 (refined.moe: the same bytes, each its measured NVLink rate).
FLEX_BACKENDS = {"deepep": 1.0, "hybridep": 2.0}
# NCCL's EP kernels (the recipes' "ncclep" backend) have no published benchmark.
NCCLEP = ("NCCL EP's dispatch (the ncclep backend) as HybridEP's, at its NVLink rate "
          "(no benchmark of NCCL EP is published)")


def _flex_backend(text: str, backend: str) -> Cell:
    """``moe_dispatcher`` of a flex dispatcher: the backend the dispatcher column
    names in parentheses (the era readings' "flex (DeepEP)"), else the backend
    column's."""
    named = text.partition("(")[2].partition(")")[0].strip().lower()
    name = named if named in FLEX_BACKENDS else backend.strip().lower()
    if name in FLEX_BACKENDS:
        return exact(moe_dispatcher=FLEX_BACKENDS[name])
    if name == "ncclep":
        return approx(NCCLEP, moe_dispatcher=FLEX_BACKENDS["hybridep"])
    raise InputError("recipe_moe_flex_backend", backend, "deepep, hybridep or ncclep with the "
                     "flex dispatcher")


def _bridge_dispatcher(row: Mapping[str, str]) -> Cell:
    row = _recipe(row)
    text = row["recipe_moe_token_dispatcher"]
    if _unread(row, "recipe_moe_token_dispatcher"):
        return _not_read(row)
    if "flex" in text:
        return _flex_backend(text, row["recipe_moe_flex_backend"])
    # "unset": Megatron-Core's own default, TransformerConfig.moe_token_dispatcher_type
    # "allgather" (the dense Llama 3 recipes on GB200/GB300 set none).
    if text.strip() in ("alltoall", "allgather", "unset"):
        return exact(moe_dispatcher=0)
    raise InputError("recipe_moe_token_dispatcher", text, "alltoall, allgather, flex or unset")


def _bridge_tp_overlap(row: Mapping[str, str]) -> Cell:
    row = _recipe(row)
    text = row["recipe_tp_comm_overlap"].strip()
    if _unread(row, "recipe_tp_comm_overlap"):
        return _not_read(row)
    on = text == "True" and _number(row["tp"], 1) > 1
    return exact(tp_overlap=1.0 if on else 0.0)


def _bridge_ep_overlap(row: Mapping[str, str]) -> Cell:
    row = _recipe(row)
    if _unread(row, "recipe_ep_a2a_overlap"):
        return _not_read(row)
    if row["recipe_ep_a2a_overlap"].strip() == "True":
        return exact(ep_overlap=1.0)
    return exact(ep_overlap=0.0)


def _bridge_ep(row: Mapping[str, str]) -> Cell:
    """The row's expert parallelism; not expressible where a figure in parentheses
    prints a layout of its own (its p, v) but no EP, and the primary figure's EP, which
    the CSV carries over by interpretation, divides no stage's GPUs (Megatron-Core
    carves the expert-parallel groups out of the t x c x d GPUs of a stage): 25.09's
    DeepSeek-V3 on 256 GB200 in parentheses, p8 v2 beside the primary p4 v4 e64."""
    e = _number(row["ep"], 1)
    stage = _number(row["num_gpus"]) / _number(row["pp"], 1)
    shared = "other config columns taken as shared with the primary value" in row["note"]
    printed = re.search(r"in the source cell\(s\): ([\w,]+)", row["note"])
    own = printed.group(1).split(",") if printed else []
    if shared and "ep" not in own and stage % e:
        layout = ", ".join(c for c in own if c in ("tp", "pp", "cp", "vp", "fsdp"))
        return Missing(f"the figure in parentheses prints a layout of its own ({layout}) but "
                       f"no EP, and the primary's e{e:g} divides no stage's {stage:g} GPUs")
    return exact(expert_parallel=e)


def _bridge_vp(row: Mapping[str, str]) -> Cell:
    return exact(virtual_stages=_number(row["vp"], 1))


def _bridge_fsdp(row: Mapping[str, str]) -> Cell:
    row = _recipe(row)
    group = _number(row["fsdp"], 0)
    megatron_fsdp = row["recipe_megatron_fsdp"].strip() == "True"
    if group > 0 or megatron_fsdp:
        d_c = _replicas(row, "num_gpus") * _number(row["cp"], 1)
        shard = 0 if group in (0, d_c) else group
        return exact(zero_stage=3, zero_shard_degree=shard)
    return NOTHING


def _bridge_offload(row: Mapping[str, str]) -> Cell:
    text = _recipe(row)["recipe_activation_offload"]
    if "fine_grained_activation_offloading=True" in text:
        # Megatron-Core's fine-grained offload of the expert activation's input, the
        # FC1 output (offload_modules ["moe_act"]), and of FC1's input too
        # (["expert_fc1", "moe_act"]), which moe_offload 1 and 2 model.
        # Nemotron 3 Ultra's recipes name the CuteDSL fused grouped MLP
        # ("fused_group_mlp") with a min_offloaded_tensor_size that "approximates
        # offloading the moe_act input" (their comment): its FC1 output is the one
        # tensor of that module over the floor.
        modules = re.search(r"offload_modules=(\[[^\]]*\])", text)
        named = sorted(re.findall(r'"(\w+)"', modules.group(1))) if modules else []
        if named == ["moe_act"]:
            return exact(moe_offload=1)
        if named == ["expert_fc1", "moe_act"]:
            return exact(moe_offload=2)
        if named == ["fused_group_mlp"]:
            return approx("the fused grouped MLP's offload as its FC1 output's (the recipe's "
                          "size floor selects it)", moe_offload=1)
        return Missing("activation offload: the recipe offloads modules other than the "
                       "expert activation's input, which no input expresses")
    # Megatron-Core's layer offload (the Llama 3 70B FP8 recipes with Megatron-FSDP on
    # GB200/GB300: cpu_offloading=True, cpu_offloading_weights=False,
    # cpu_offloading_num_layers=N), which offload_layers models.
    layers = re.search(r"cpu_offloading=True;.*cpu_offloading_num_layers=(\d+)", text)
    if layers and "cpu_offloading_weights=False" in text:
        return exact(offload_layers=float(layers.group(1)))
    return (Way({"offload_layers": 0}), Way())


def _mtp_by_name(row: Mapping[str, str]) -> int:
    """The MTP modules a row's model name states where its recipe says none: one for
    "DeepSeekV3 (w/ MTP)", none for "DeepSeekV3 (w/o MTP)" or no mention."""
    return int("w/ MTP" in row["model"])


def _bridge_mtp(row: Mapping[str, str]) -> Cell:
    row = _recipe(row)
    text = row["recipe_mtp_num_layers"].strip()
    return multi_token_prediction(int(text) if text.isdigit() else _mtp_by_name(row))


# Rows whose printed layout cannot have run, and which the recipe of the same row
# (model, GPU, precision, GPU count, GBS) puts at a layout that can: they are read at
# the recipe's layout (``_bridge_read_row``), each with the arithmetic that rules the
# printed one out, in bytes that need no memory model (tests/models/
# test_validation_sets.py repeats it).  Llama 3 70B (70.55 B weights, 80 layers of
# 855.6 M, h 8192, FFN 28,672, 8 KV heads of 128) on 64 GB300 of 288 GiB = 309.2 GB,
# sequence 8192, in 26.02.01.  Both recipes (llama3_70b_pretrain_64gpu_gb300_{nvfp4,
# fp8mx}_config, every stored version) set t1 p4 v5 MBS 1, and both measured figures sit
# with that layout's rows of the next and the previous release (NVFP4 7,002 tokens/s
# between 6,798 and 7,296; MXFP8 4,798 beside 4,596 and 4,736), far above the FSDP rows
# at t1 p1 MBS 2 (FP8 5,003-5,376).
BRIDGE_UNRUNNABLE: dict[str, str] = {
    "mg0109": "at t1 p1 and MBS 2 without FSDP every GPU keeps all 70.55 B weights and their "
              "bf16 gradients (282.2 GB) and the optimizer's 12 bytes a weight "
              "over 64 ranks (13.2 GB): 295.4 GB of 309.2 before the 21.5 GB of one bf16 "
              "input a layer and token that even full recompute keeps",
    "mg0111": "at t1 p4 without interleaving, MBS 2 and no recompute, the first stage holds 4 "
              "micro-batches of 20 layers, each layer 237,568 bytes a "
              "token at the least (the two norm inputs, q, k, v and the attention output "
              "for the fused attention's backward, FC1's output for SwiGLU's, the four GEMM "
              "inputs in FP8): 311.4 GB beside 86.3 GB of weights, gradients and optimizer "
              "state, of 309.2",
}
# The layout cells a recipe_parallel_mismatch names ("pp: table=1 recipe=4").
_LAYOUT_CELLS = ("tp", "pp", "cp", "vp", "ep", "micro_batch")


def _bridge_read_row(row: Mapping[str, str], rows: Sequence[Mapping[str, str]] = ()
                     ) -> Mapping[str, str]:
    """The row as read where its own cells are shown wrong or leave out what its
    primary gives, with ``read_as`` saying why.

    * Batch cells that contradict each other: the CSV's ``note`` records a published
      gradient-accumulation count that is not GBS / (MBS x DP) as "stated GA g !=
      GBS/(MBS*DP) = m"; one of the three batch cells is then wrong, and where
      ``recipe_parallel_mismatch`` names the recipe's micro-batch ("micro_batch:
      table=X recipe=Y") for the row's layout, that is the one read (module doc: 25.11's
      H100 GPT-OSS row, the Blackwell rows' cells beside p 4).  The GBS is kept, and the
      accumulation derived from it.
    * A printed layout that cannot have run (``BRIDGE_UNRUNNABLE``): every layout cell
      the ``recipe_parallel_mismatch`` names is read at the recipe's value, and the
      mismatch is then none.
    * A figure in parentheses that gives only the source's Model TFLOP/s
      (``_bridge_tokens_from_tflops``): its tokens/s at the tokens per TFLOP of
      its primary figure, the same workload by the source's own FLOP count.

    Every other row is returned as is.
    """
    row = _bridge_tokens_from_tflops(row, rows)
    mismatch = _recipe(row).get("recipe_parallel_mismatch", "")
    label = row.get("row_id", "")
    if label in BRIDGE_UNRUNNABLE:
        cells = dict(re.findall(r"(\w+): table=[^ ;]+ recipe=(\d+)", mismatch))
        read = {k: v for k, v in cells.items() if k in _LAYOUT_CELLS}
        printed = ", ".join(f"{k} {row[k].strip() or '-'}" for k in read)
        wanted = ", ".join(f"{k} {v}" for k, v in read.items())
        return _read_as({**row, **read,
                         "recipe_parallel_mismatch": "none (read at the recipe's layout)"},
                        f"the recipe's layout ({wanted}) for the printed {printed}, which "
                        f"cannot have run: {BRIDGE_UNRUNNABLE[label]}")
    stated = re.search(r"stated GA (\d+) != GBS/\(MBS\*DP\)", row.get("note", ""))
    recipe = re.search(r"micro_batch: table=(\d+) recipe=(\d+)", mismatch)
    if not stated or not recipe or recipe.group(1) != row["micro_batch"].strip():
        return row
    mbs = recipe.group(2)
    return _read_as({**row, "micro_batch": mbs},
                    f"micro-batch {mbs}, the recipe's, for the printed "
                    f"{row['micro_batch'].strip()}: the row's {row['note'].strip()} (its "
                    "batch cells are another layout's)")


# The cells that name one measured workload: a figure in parentheses shares them
# with its primary (the CSV's note: "other config columns taken as shared with the
# primary value").
_WORKLOAD_CELLS = ("release", "system", "model", "num_gpus", "global_batch", "micro_batch",
                   "seq_length", "tp", "pp", "cp", "vp", "ep")


def _bridge_tokens_from_tflops(row: Mapping[str, str], rows: Sequence[Mapping[str, str]]
                               ) -> Mapping[str, str]:
    """A parenthetical row with Model TFLOP/s but no tokens/s, given its tokens/s.

    The source's TFLOP/s is its own FLOP count per token times tokens/s; the
    primary figure of the same cell (same release, system, model, GPUs, batch and
    layout) gives both, so its tokens per TFLOP is that count's inverse, and the
    parenthetical's tokens/s is its TFLOP/s times it.  25.09's DeepSeek-V3 on
    1,024 H100 (mb0291: 330 TFLOP/s, blockwise FP8) beside its primary (mb0290:
    1,297 tokens/s at 338 TFLOP/s): 330 x 1,297 / 338 = 1,266.3 tokens/s.  Other
    rows are returned as they are.
    """
    if (row.get("variant", "").strip() != "parenthetical"
            or row["tokens_per_s_per_gpu"].strip() or not row["model_tflops_per_gpu"].strip()):
        return row
    key = tuple(row[c].strip() for c in _WORKLOAD_CELLS)
    primary = [r for r in rows if r.get("variant", "").strip() == "primary"
               and tuple(r[c].strip() for c in _WORKLOAD_CELLS) == key
               and r["tokens_per_s_per_gpu"].strip() and r["model_tflops_per_gpu"].strip()]
    if len(primary) != 1:
        return row
    (p,) = primary
    tokens, tflops = _number(p["tokens_per_s_per_gpu"]), _number(p["model_tflops_per_gpu"])
    value = _number(row["model_tflops_per_gpu"]) * tokens / tflops
    return _read_as({**row, "tokens_per_s_per_gpu": f"{value:.6g}"},
                    f"tokens/s {value:.1f} from the figure's {row['model_tflops_per_gpu']} "
                    f"TFLOP/s at its primary's {p['row_id']} {p['tokens_per_s_per_gpu']} "
                    f"tokens/s per {p['model_tflops_per_gpu']} TFLOP/s (the source gives "
                    "no tokens/s in parentheses)")


def _read_as(row: Mapping[str, str], why: str) -> Mapping[str, str]:
    """``row`` with ``why`` added to its ``read_as`` note (``_bridge_read_row``)."""
    return {**row, "read_as": "; ".join(n for n in (row.get("read_as", ""), why) if n)}


def _bridge_read_as(row: Mapping[str, str]) -> Cell:
    """The note of a row read other than printed (``_bridge_read_row``)."""
    return approx(row["read_as"]) if row.get("read_as") else NOTHING


def _bridge_mismatch(row: Mapping[str, str]) -> Cell:
    row = _recipe(row)
    text = row["recipe_parallel_mismatch"].strip()
    if not text or text.startswith("none"):
        return NOTHING
    return approx("recipe settings read from a recipe of another layout (the row's "
                  "recipe_parallel_mismatch; the row's own layout is used)")


def _bridge_release(row: Mapping[str, str]) -> Cell:
    """Where a row's settings were read when not from its CSV columns: a 25.11 preset
    (``BRIDGE_2511``), another era's (``BRIDGE_ERA``) or the legacy presets of the
    row's era (``BRIDGE_PRE_2606``); else nothing (the H100 / B200 set's other rows:
    their recipe columns as the CSV read them)."""
    label = row["row_id"]
    if row["release"].strip() == "25.11" and label in BRIDGE_2511:
        return approx("; ".join(filter(None, (
            "recipe settings read from the 25.11-era presets (scripts/performance/configs/"
            "*/workload_base_configs.py, dated by their content), not from the release "
            "branch", BRIDGE_2511_NOTES.get(label)))))
    if label in BRIDGE_ERA:
        return approx("; ".join(filter(None, (
            "recipe settings read from the legacy preset of the row's era with the row's "
            "layout (scripts/performance/configs, dated by the PRs that changed it), not "
            "from the release branch", BRIDGE_ERA_NOTES.get(label)))))
    if _era_key(row) in BRIDGE_PRE_2606:
        return _pre_2606_note(row)
    return NOTHING


def _era_key(row: Mapping[str, str]) -> tuple[str, str, str]:
    """The key of ``BRIDGE_PRE_2606``: model, system and release as the CSV spells them."""
    return row["model"].strip(), row["system"].strip(), row["release"].strip()


def _pre_2606_note(row: Mapping[str, str]) -> Cell:
    """The approximation of a row read at its era's legacy presets (``BRIDGE_PRE_2606``)."""
    return approx("; ".join(filter(None, (
        "recipe settings read from the legacy presets of the row's era (scripts/"
        "performance/configs, dated by their content), not from the release branch",
        BRIDGE_PRE_2606_NOTES.get(_era_key(row))))))


# The pipeline layout Megatron-Bridge's DeepSeek-V3 recipe sets for every (pp, vp) it
# knows, every release: ``set_deepseek_v3_pipeline_model_parallel_layout``
# (src/megatron/bridge/recipes/deepseek/deepseek_v3.py, the search index's file id
# 19324893737), called by ``deepseek_v3_pretrain_config`` and again by the perf configs
# after they set the row's pp and vp (25.11: scripts/performance/configs/deepseek/
# deepseek_llm_pretrain.py passes them to the recipe with ``layout=None``; 26.x: "if
# base_cfg.pp_layout: ... else: # Recompute layout based on updated PP/VP sizes
# set_deepseek_v3_pipeline_model_parallel_layout(cfg.model)"; the flat perf_recipes/
# deepseek/b200/deepseek_v3.py calls it in every B200 recipe).  Its map, per stage
# (``last_layer = ["mtp"] * mtp_num_layers + ["loss"]``): (16, 1), (8, 2) and (4, 4):
# embedding + 4 decoder layers, 14 x 4, 1 + last_layer; (8, 1) and (4, 2): embedding + 8,
# 6 x 8, 5 + last_layer; (4, 1): embedding + 16, 16, 16, 13 + last_layer.  Key: decoder
# layers of the first chunk, of each middle chunk, middle chunks, of the last chunk.
DEEPSEEK_V3_LAYOUT_MAP: dict[tuple[int, int], tuple[int, int, int, int]] = {
    (16, 1): (4, 4, 14, 1), (8, 2): (4, 4, 14, 1), (4, 4): (4, 4, 14, 1),
    (8, 1): (8, 8, 6, 5), (4, 2): (8, 8, 6, 5), (4, 1): (16, 16, 2, 13),
}


def deepseek_v3_layout(pp: int, vp: int, mtp_layers: int) -> str:
    """The recipe's DeepSeek-V3 layout (``DEEPSEEK_V3_LAYOUT_MAP``) as a Megatron layout
    string, or "" where the map has no (pp, vp) (the recipe then sets none)."""
    if (pp, vp) not in DEEPSEEK_V3_LAYOUT_MAP:
        return ""
    first, mid, chunks, last = DEEPSEEK_V3_LAYOUT_MAP[(pp, vp)]
    return (f"Et*{first}|(t*{mid}|)*{chunks}" + (f"t*{last}" if last > 1 else "t")
            + "m" * mtp_layers + "L")


# Models whose base recipe counts the embedding and the loss as layers of the pipeline
# split in every release: llama31_405b_pretrain_config sets
# account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split (True)
# in the _llama3_common era (src/megatron/bridge/recipes/llama/llama3.py, the search
# index's file id 2525890528) and in the _pretrain_common era (file id 19643091699), and
# the perf recipes of every GPU start from it (perf_recipes/llama/gb300/llama31.py:
# ``cfg = llama31_405b_pretrain_config()``, file id 54876210123) without resetting them.
BRIDGE_SPLIT_EMBEDDING = frozenset({"LLAMA3.1_405B"})


def _bridge_layout(row: Mapping[str, str]) -> Cell:
    """A custom pipeline layout (``BRIDGE_2509``, or the DeepSeek-V3 recipe's map,
    ``deepseek_v3_layout``) as even chunks: the row's p x v chunks, with the embedding,
    the loss and an MTP module counted as layers of the split; or Megatron's
    account_for_embedding/loss_in_pipeline_split alone."""
    row = _recipe(row)
    layout = row.get("pipeline_layout", "").strip()
    if not layout and row["model"].strip().startswith("DeepSeekV3"):
        mtp = row["recipe_mtp_num_layers"].strip()
        layout = deepseek_v3_layout(int(_number(row["pp"], 1)), int(_number(row["vp"], 1)),
                                    int(mtp) if mtp.isdigit() else _mtp_by_name(row))
    if not layout:
        if (row.get("pipeline_split_embedding", "").strip() == "True"
                or row["model"].strip() in BRIDGE_SPLIT_EMBEDDING):
            return exact(pipeline_split_embedding=1)
        return NOTHING
    stages = _pipeline_stages(layout)
    chunks = int(_number(row["pp"], 1) * _number(row["vp"], 1))
    if stages != chunks:
        return approx(f"recipe pipeline layout {layout} ({stages} chunks) not the row's "
                      f"p x v = {chunks}: the row's own layout is used")
    return _layout_way(layout, int(_number(row["pp"], 1)), int(_number(row["vp"], 1)))


def _bridge_measure(row: Mapping[str, str], x: Mapping[str, float]
                    ) -> tuple[float, float, float]:
    if not row["tokens_per_s_per_gpu"].strip():
        raise ValueError("no tokens/s per GPU in the source (only its TFLOP/s)")
    tokens = _number(row["global_batch"]) * _number(row["seq_length"])
    return (_number(row["tokens_per_s_per_gpu"]), tokens / _number(row["num_gpus"]),
            math.nan)


# What every Megatron-Bridge perf recipe sets, read from its source (NVIDIA-NeMo/
# Megatron-Bridge): gradients accumulated and reduced in bf16 (scripts/performance/
# configs/*/*_llm_pretrain.py, set_<model>_common_configs:
# ``cfg.ddp.grad_reduce_in_fp32 = False``, so the main_grad buffer is bf16:
# ``grad_buffer_bytes`` 2); Transformer Engine's cross entropy
# (``cross_entropy_loss_fusion=True``, ``cross_entropy_fusion_impl="te"`` in the
# recipes' kernel selections, as the resolved config scripts/performance/
# dryrun_configs/gpt_oss/gpt_oss_120b_pretrain_b200_fp8_mx_v2.yaml shows:
# ``cross_entropy_fusion`` 2).
BRIDGE_RECIPES = exact(grad_buffer_bytes=2, cross_entropy_fusion=2)

BRIDGE = SetTable(
    name="megatron-bridge",
    description="Megatron-Bridge performance summaries 25.09-26.08, DGX-H100 and DGX-B200 "
                "(tokens/s per GPU)",
    file="megatron_bridge_h100_b200.csv",
    every_row=(exact(zero_stage=1), NO_DROPOUT, BRIDGE_RECIPES),
    columns={
        "system": {"DGX-H100": gpu("h100-sxm"), "DGX-B200": gpu("b200")},
        "model": BRIDGE_LLMS,
        "num_gpus": "num_gpus",
        "tp": "tensor_parallel",
        "pp": "pipeline_parallel",
        "cp": "context_parallel",
        "vp": _bridge_vp,
        "ep": _bridge_ep,
        "micro_batch": "micro_batch",
        "read_as": _bridge_read_as,
        "seq_length": "seq_length",
        "global_batch": lambda row: _accumulation(row, "num_gpus", "global_batch",
                                                  "micro_batch"),
        "precision": _bridge_precision,
        "fsdp": _bridge_fsdp,
        "recipe_recompute_granularity": _bridge_recompute,
        "recipe_cuda_graph_impl": _bridge_graphs,
        "recipe_moe_token_dispatcher": _bridge_dispatcher,
        "recipe_tp_comm_overlap": _bridge_tp_overlap,
        "recipe_ep_a2a_overlap": _bridge_ep_overlap,
        "recipe_activation_offload": _bridge_offload,
        "recipe_mtp_num_layers": _bridge_mtp,
        "recipe_parallel_mismatch": _bridge_mismatch,
        "pipeline_layout": _bridge_layout,
        "release": _bridge_release,
    },
    blank={"cp": 1, "vp": 1, "ep": 1, "tp": 1, "pp": 1, "micro_batch": 1},
    measure=_bridge_measure,
    reread=_bridge_read_row,
    label=lambda row: row["row_id"],
    layout=_layout,
    # The summaries publish one workload on several systems, each with its own
    # layout: the speed ratio between GPUs (validation_all.gpu_pairs).
    workload=lambda row: " ".join(
        (row["model"], row["precision"] or "(no precision)", row["release"],
         f"{row['num_gpus']} GPUs", row["variant"])),
)


# The same summaries' rows on the other Blackwell systems, read the same way
# (``megatron_bridge_gb200_gb300_b300.csv``; its header names the versions read).  The
# models of those rows without a preset say so; Kimi K2's rows train with Muon.
BRIDGE_GB_LLMS: dict[str, Cell] = {
    **BRIDGE_LLMS,
    "DeepSeekV3 (w/o MTP)": _fused_router("deepseek-v3"),
    # "Muon optimizer was used for pre-training Kimi-K2" (the rows' note): the
    # benchmark trains the matrices with Muon (optimizer 1, the refined model's
    # muon module), the router fused as DeepSeek-V3's (Kimi K2 is its architecture).
    "Kimi_K2": (Way({**_FUSED_ROUTER, "optimizer": 1}, llm="kimi-k2"),
                Missing("the Muon optimizer (the source's note): the model has no input "
                        "optimizer")),
    # Nano's architecture (presets.NANO_ARCHITECTURE); the recipe's two MTP depths come
    # from recipe_mtp_num_layers, the rest of its recipe is Nano's.
    "Nemotron_3_5_Lightning": llm(
        "nemotron3.5-lightning",
        "its MTP depths as the model's MTP modules: each one average layer where the "
        "recipe runs an attention and an MoE layer (pattern \"*E\"), with weights of its "
        "own where the recipe shares one block's (mtp_use_repeated_layer), in the layers' "
        "precision where the recipe keeps them in BF16 (keep_mtp_spec_in_bf16)"),
    # The rows' recipes (perf_recipes/nemotronh/gb{200,300}/nemotronh.py at 020041f)
    # compute the loss with Megatron-Core's native fused cross entropy
    # (_benchmark_common(cfg, cross_entropy_impl="native") in
    # _apply_nemotron_3_ultra_perf_defaults), which keeps an fp32 softmax:
    # cross_entropy_fusion 1.  Their Megatron-FSDP is hybrid (sharded within 64
    # GPUs, the optimizer state also across the 4 groups); recipe_megatron_fsdp
    # reads it as sharded across all.
    "Nemotron_3_Ultra": (Way(
        {"cross_entropy_fusion": 1},
        "its MTP depths as the model's MTP modules, as Nemotron 3.5 Lightning's; "
        "Megatron-FSDP's hybrid sharding (weights and gradients within 64 GPUs) as "
        "sharding across every data-parallel rank", llm="nemotron3-ultra"),),
    # Its recipe (perf_recipes/deepseek/gb200/deepseek_v4.py, index id 61441154787,
    # deepseek_v4_flash_pretrain_128gpu_gb200_fp8mx_config) trains sparse attention:
    # apply_dsa_kernel_fusion, dsa_indexer_loss_coeff, csa_compress_rotary_base.
    "DeepSeekV4 Flash": Missing("no preset for DeepSeekV4 Flash's architecture, and no "
                                "input for its sparse attention (the recipe's DSA indexer "
                                "and compressed attention)"),
}


def _bridge_gb_release(row: Mapping[str, str]) -> Cell:
    """Where a row's settings were read.  26.02 on: the newest stored version of each
    recipe chain, not the release branch (the search index holds no branches), or, for
    the MoE rows whose newest recipe runs full-iteration graphs their release did not
    have, the legacy presets of their era (``BRIDGE_PRE_2606``).  25.09:
    the performance scripts of that era (``BRIDGE_2509``, the DGX-GB200 entries).  25.11
    ran presets that live on its release branch: not read, so not expressed (the
    index's stored presets without a version suffix match 5 of its 18 Blackwell rows'
    layouts, and none of them is dated)."""
    release = _release(row)
    if release == (25, 9):
        return approx("recipe settings read from the 25.09-era performance scripts "
                      f"(Megatron-Bridge {BRIDGE_2509_COMMIT[:8]}), not from the release "
                      "branch")
    if release == (25, 11) and row["row_id"] in BRIDGE_2511:
        return _bridge_release(row)
    if release == (25, 11) and row["row_id"] in BRIDGE_2511_UNMATCHED:
        return Missing("25.11: no stored preset of the release has the row's layout (it "
                       "ran the layout given on the command line, with settings not "
                       "documented)")
    if release < (26, 2):
        return Missing(f"{row['release'].strip()}: the release's recipe was not read (its "
                       "configs live on a release branch the search index does not hold)")
    if row["row_id"] in BRIDGE_ERA:
        return _bridge_release(row)
    if _era_key(row) in BRIDGE_PRE_2606:
        return _pre_2606_note(row)
    return approx("recipe settings read from the newest stored version of each recipe "
                  "chain, not from the row's release branch (the search index holds no "
                  "branches)")


BRIDGE_GB = replace(
    BRIDGE,
    name="megatron-bridge-gb",
    description="Megatron-Bridge performance summaries 25.09-26.08, DGX-GB200, DGX-GB300 "
                "and DGX-B300 (tokens/s per GPU)",
    file="megatron_bridge_gb200_gb300_b300.csv",
    columns={**BRIDGE.columns,
             "system": {"DGX-GB200": gpu("gb200-nvl72"), "DGX-GB300": gpu("gb300-nvl72"),
                        "DGX-B300": gpu("b300")},
             "model": BRIDGE_GB_LLMS,
             "release": _bridge_gb_release},
)


# --- Megatron-LM's FLOP count ----------------------------------------------------------------


def megatron_flops(x: Mapping[str, float], global_batch: float, seq: float,
                   mtp_layers: int = 0) -> float:
    """FLOPs of one step as Megatron-LM counts them (``num_floating_point_operations``,
    ``transformer_flops``, megatron/training/training.py on the dev branch of the MoE
    recipes): every GEMM three times (forward, weight and data gradients), the causal
    half of the attention square, active experts only, no recompute, the logits of the
    output layer and of each multi-token-prediction module.

    ``x``: the architecture as the refined model's inputs (a preset); the vocabulary
    as given (Megatron pads it to a multiple of 128 x t, a change below 0.1% of the
    logits for these models).
    """
    h, layers = x["hidden_dim"], int(x["num_layers"])
    a, groups = x["num_heads"], x["num_kv_heads"]
    kv_channels = x.get("head_dim", 0) or h / a
    ffn_factor = 3 if x["mlp_weight_matrices"] == 3 else 2
    if x.get("num_experts", 1) <= 1:
        moe, dense, routed, last_moe = 0, layers, 0.0, 0
    else:
        first, every = int(x.get("dense_layers", 0)), int(x.get("moe_layer_interval", 1))
        pattern = [int(i >= first and (i - first) % every == 0) for i in range(layers)]
        moe, dense, routed, last_moe = sum(pattern), layers - sum(pattern), \
            x["experts_per_token"], pattern[-1]
    moe += last_moe * mtp_layers
    dense += (1 - last_moe) * mtp_layers
    expert_ffn = x.get("moe_ffn_hidden_dim", 0)
    shared_ffn = x.get("shared_experts", 0) * expert_ffn
    if x.get("attention", 0) == 1:
        qk, rope, v = kv_channels, x["qk_rope_dim"], kv_channels
        q_rank, kv_rank = x["q_lora_rank"], x["kv_lora_rank"]
        q_term = h * a * (qk + rope) if q_rank == 0 else q_rank * (h + a * (qk + rope) + 1)
        attention = 6 * (q_term + kv_rank * (h + a * (qk + v) + 1) + h * rope + a * v * h
                         + seq * a * (qk + rope) / 2 + seq * a * v / 2)
    else:
        q, kv = kv_channels * a, kv_channels * groups
        attention = 6 * (h * (q + 2 * kv) + q * seq / 2 * 2 + q * h)
    per_token = (6 * h * (x["ffn_hidden_dim"] * ffn_factor * dense
                          + expert_ffn * routed * ffn_factor * moe
                          + shared_ffn * ffn_factor * moe)
                 + attention * (layers + mtp_layers)
                 + 6 * mtp_layers * (3 * h + 2 * h * h)
                 + 6 * h * x["vocab_size"] * (mtp_layers + 1))
    return global_batch * seq * per_token


# --- Megatron-LM MoE recipes -----------------------------------------------------------------


def _settings(text: str) -> dict[str, str]:
    """``a=1;b=x y`` -> ``{"a": "1", "b": "x y"}``."""
    pairs = (p.partition("=") for p in text.split(";") if p.strip())
    return {k.strip(): v.strip() for k, _, v in pairs}


def _pipeline_stages(layout: str) -> int:
    """Stages of a Megatron ``--pipeline-model-parallel-layout`` (``|`` separates them;
    ``(X)*n`` and ``t*n`` repeat)."""
    return len(_layout_chunks(layout))


def _layout_chunks(layout: str) -> list[str]:
    """A Megatron layout's chunks, repeats expanded (``(X)*n``, ``t*n``, ``m*n``)."""
    import re

    text = layout
    while "(" in text:
        text = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"([tmEL])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    return text.split("|")


def last_stage_layers(layout: str, p: int) -> int | None:
    """The ``last_stage_layers`` that reads a Megatron layout exactly, or None.

    Megatron-Core assigns chunk ``i`` of the ``p v`` to stage ``i mod p``
    (``pipeline_parallel_layer_layout.py``).  The layout is exact as the last stage's
    decoder layers ``Z`` when the embedding is on the first stage, the loss and every
    MTP module on the last, and the other stages hold what ``Z`` gives them
    (``jaxmodel.models.refined.pipeline``: ``ceil((L - Z) / (p - 1))`` each, the first
    the remainder).
    """
    chunks = _layout_chunks(layout)
    if p < 2 or len(chunks) % p:
        return None
    stages = [sum(c.count("t") for c in chunks[i::p]) for i in range(p)]
    held = ["".join(chunks[i::p]) for i in range(p)]
    if ("E" not in held[0] or "L" not in held[-1]
            or any("m" in h or "L" in h for h in held[:-1])
            or any("E" in h for h in held[1:])):
        return None
    layers, z = sum(stages), stages[-1]
    if z < 1:
        return None
    per = -(-(layers - z) // (p - 1))
    want = [layers - z - (p - 2) * per] + [per] * (p - 2) + [z]
    return z if stages == want else None


def _layout_way(layout: str, p: int, v: int) -> Cell:
    """A custom pipeline layout as inputs: exactly as ``last_stage_layers`` where
    it reads so (the embedding and loss beside the layers of the first and last
    stages, uncounted, as the layout places them), else as even chunks with the
    embedding, loss and MTP module counted as layers."""
    z = last_stage_layers(layout, p)
    if z is not None:
        return exact(last_stage_layers=z, pipeline_split_embedding=0, mtp_in_pipeline_split=0)
    mtp = {"mtp_in_pipeline_split": 1} if "m" in layout else {}
    return approx(f"custom pipeline layout {layout} as even chunks, embedding, loss"
                  + (" and MTP module" if mtp else "") + " counted as layers",
                  pipeline_split_embedding=1, **mtp)


def _recipe_layers(row: Mapping[str, str]) -> Cell:
    p = _number(row["pp"], 1)
    layout = row["yaml_pp_layout"].strip()
    if layout:
        stages = _pipeline_stages(layout)
        # An m in the layout (Megatron-Core's pipeline_parallel_layer_layout.py:
        # the multi-token-prediction module) gives the module a unit of the split.
        if last_stage_layers(layout, int(p)) is not None:
            (way,) = _layout_way(layout, int(p), stages // int(p))
            return (Way({**way.inputs, "virtual_stages": stages // int(p)}, way.note),)
        if "m" in layout:
            return approx(f"custom pipeline layout {layout} as {stages // int(p)} even "
                          "chunks per stage, embedding, loss and MTP module counted as "
                          "layers", virtual_stages=stages // int(p),
                          pipeline_split_embedding=1, mtp_in_pipeline_split=1)
        return approx(f"custom pipeline layout {layout} as {stages // int(p)} even chunks per "
                      "stage, embedding and loss counted as layers",
                      virtual_stages=stages // int(p), pipeline_split_embedding=1)
    vp = _settings(row["yaml_vp"]).get("layers_per_vstage")
    if vp is None:
        return exact(virtual_stages=1)
    # The embedding and the loss count as one layer each in the split
    # (--account-for-embedding/loss-in-pipeline-split): only then do the
    # recipes' layers divide into p x layers_per_vstage chunks.
    units = _number(row["yaml_num_layers"]) + 2
    v = units / (p * float(vp))
    if v != int(v):
        return Missing(f"layers_per_vstage={vp}: {units:g} layers do not split into "
                       f"{p:g} stages of {vp}-layer chunks")
    return approx("embedding and loss counted as one layer each in the pipeline split "
                  "(what makes the layers divide into the recipe's chunks)",
                  virtual_stages=v, pipeline_split_embedding=1)


def _recipe_precision(row: Mapping[str, str]) -> Cell:
    args = _settings(row["yaml_precision_args"])
    scaling = args.get("fp8_recipe")
    if scaling is None:
        return precision(0)
    levels = {"tensorwise": 1, "delayed": 1, "blockwise": 2, "mxfp8": 2}
    if scaling not in levels:
        raise InputError("yaml_precision_args fp8_recipe", scaling, ", ".join(levels))
    gather = 1 if args.get("fp8_param_gather") == "True" else 0
    return exact(precision=levels[scaling], fp8_param_gather=gather)


def _recipe_recompute(row: Mapping[str, str]) -> Cell:
    return megatron_recompute(row["yaml_recompute_granularity"], row["yaml_recompute_method"],
                              row["yaml_recompute_num_layers"], row["yaml_recompute_modules"])


def _recipe_graphs(row: Mapping[str, str]) -> Cell:
    args = _settings(row["yaml_cuda_graph"])
    impl = args.get("cuda_graph_impl", "none")
    scope = args.get("cuda_graph_scope", "")
    if impl == "none":
        return graphs(0)
    if "full_iteration" in (impl, scope):
        return graphs(2)
    return graphs(1, f"CUDA graphs of part of each layer ({scope}) as per-layer graphs"
                  if scope else "")


def _recipe_dispatcher(row: Mapping[str, str]) -> Cell:
    args = _settings(row["yaml_moe_dispatcher"])
    kind = args.get("moe_token_dispatcher_type", "allgather")
    if kind == "flex":
        # Megatron-Core's moe_flex_dispatcher_backend defaults to DeepEP (so does
        # the older moe_enable_deepep switch).
        return _flex_backend("", args.get("moe_flex_dispatcher_backend", "deepep"))
    if kind in ("alltoall", "allgather"):
        return exact(moe_dispatcher=0)
    raise InputError("yaml_moe_dispatcher", kind, "flex, alltoall or allgather")


def _recipe_overlap(row: Mapping[str, str]) -> Cell:
    args = _settings(row["yaml_overlap"])
    on = {k for k, v in args.items() if v == "True"}
    inputs = {"dp_overlap": float("overlap_grad_reduce" in on),
              "param_gather_overlap": float("overlap_param_gather" in on),
              "sequence_parallel": float("sequence_parallel" in on),
              "ep_overlap": float("overlap_moe_expert_parallel_comm" in on)}
    return (Way(inputs),)


def _recipe_flag(reason: str) -> Mapping[str, Cell]:
    return {"": NOTHING, "False": NOTHING, "True": Missing(reason)}


def _recipe_mtp(row: Mapping[str, str]) -> Cell:
    return multi_token_prediction(int(_number(row["yaml_mtp_num_layers"], 0)))


def _recipe_measure(row: Mapping[str, str], x: Mapping[str, float]
                    ) -> tuple[float, float, float]:
    if not row["tflops_per_gpu"].strip():
        raise ValueError("no TFLOP/s per GPU in the source (blank in its README)")
    mtp = int(_number(row["yaml_mtp_num_layers"], 0))
    flops = megatron_flops(x, _number(row["gbs"]), _number(row["seq"]), mtp)
    return _number(row["tflops_per_gpu"]), flops / _number(row["gpus"]) / 1e12, math.nan


# The layout and batch columns the Megatron-LM sets share.
_MEGATRON_LAYOUT: Mapping[str, str | Callable[[Mapping[str, str]], Cell]] = {
    "gpus": "num_gpus",
    "tp": "tensor_parallel",
    "pp": "pipeline_parallel",
    "ep": "expert_parallel",
    "cp": "context_parallel",
    "etp": "expert_tensor_parallel",
    "mbs": "micro_batch",
    "seq": "seq_length",
    "gbs": lambda row: _accumulation(row, "gpus", "gbs", "mbs"),
    "yaml_vp": _recipe_layers,
}

MOE_RECIPES = SetTable(
    name="megatron-lm-moe",
    description="Megatron-LM MoE recipes, H100 and B200 (TFLOP/s per GPU, Megatron-LM's "
                "FLOP count)",
    file="megatron_lm_moe_recipes_h100_b200.csv",
    # Every recipe YAML sets moe_router_fusion: true (examples/moe_recipes/*/*.yaml,
    # read in qwen3_30b/h100/bf16_32GPU_TP1PP1EP8.yaml and deepseek_v3/b200/
    # mxfp8_256GPU_TP1PP8EP32.yaml, beside moe_permute_fusion: true).
    every_row=(exact(zero_stage=1, router_fusion=1), NO_DROPOUT),
    columns={
        "system": {"H100": gpu("h100-sxm"), "B200": gpu("b200")},
        "model": {"DeepSeek-V3": llm("deepseek-v3"), "Qwen3-235B-A22B": llm("qwen3-235b-a22b"),
                  "Qwen3-30B-A3B": llm("qwen3-30b-a3b")},
        **_MEGATRON_LAYOUT,
        "yaml_precision_args": _recipe_precision,
        "yaml_recompute_granularity": _recipe_recompute,
        "yaml_activation_offload": _recipe_flag("activation offload has no layer count here"),
        "yaml_cuda_graph": _recipe_graphs,
        "yaml_moe_dispatcher": _recipe_dispatcher,
        "yaml_overlap": _recipe_overlap,
        "yaml_moe_paged_stash": _recipe_flag("paged stashing has no input"),
        "yaml_force_balance": {"True": exact(moe_imbalance=1.0),
                               "": Missing("routing not force-balanced: the load is not "
                                           "documented")},
        "yaml_mtp_num_layers": _recipe_mtp,
    },
    blank={"cp": 1, "etp": 1},
    measure=_recipe_measure,
    label=lambda row: f"{row['model']} {row['recipe']}",
    layout=_layout,
)


# --- DeepSeek-V3 on GB200, step by step ---------------------------------------------------------

def _history_recompute(row: Mapping[str, str]) -> Cell:
    # The document's "up_proj" is Megatron-Core's mla_up_proj module (its later name).
    names = {"up_proj": "mla_up_proj"}
    modules = " ".join(names.get(n, n) for n in row["recompute_modules"].split())
    return megatron_recompute("selective", "", "", modules)


def _history_unmodelled(row: Mapping[str, str]) -> Cell:
    # The model runs every row's documented inputs at the presets' rates, which are
    # those of tuned software: it has no input for a kernel, host or dispatcher
    # tuning, whether the row has it (steps 7-13) or lacks it (step 1 lacks the fused
    # allocation and permute kernel, steps 2-6 the later tunings alike), so each row
    # is predicted from its documented inputs and names what it changed that the
    # model cannot see.
    text = row["unmodelled"].strip()
    return approx(f"{text}: no input (the row's software in this, not modelled)") \
        if text else NOTHING


GB200_HISTORY = SetTable(
    name="deepseek-v3-gb200",
    description="Megatron-LM's DeepSeek-V3 on 256 GB200 optimization history, one change a "
                "row (TFLOP/s per GPU, Megatron-LM's FLOP count)",
    file="megatron_lm_deepseek_v3_gb200_history.csv",
    # The reproduce guide's command (the file's header): distributed optimizer,
    # overlapped gradient reduce and parameter gather, sequence parallel, MXFP8 with
    # FP8 parameter gather, forced load balancing; the earlier rows are taken alike.
    every_row=(exact(zero_stage=1, dp_overlap=1.0, param_gather_overlap=1.0,
                     sequence_parallel=1.0, moe_imbalance=1.0, precision=2,
                     fp8_param_gather=1),
               approx("the reproduce guide's settings (distributed optimizer, overlaps, "
                      "forced load balancing) for every row: the history lists only what "
                      "each row changed"),
               NO_DROPOUT, llm("deepseek-v3")),
    columns={
        "system": {"GB200": gpu("gb200-nvl72")},
        **_MEGATRON_LAYOUT,
        "yaml_moe_dispatcher": _recipe_dispatcher,
        "router_fusion": "router_fusion",
        "recompute_modules": _history_recompute,
        "yaml_cuda_graph": _recipe_graphs,
        "unmodelled": _history_unmodelled,
    },
    blank={},
    measure=_recipe_measure,
    label=lambda row: f"step {row['step']}: {row['feature']}",
    layout=_layout,
)


# --- torchtitan ------------------------------------------------------------------------------

TORCHTITAN_GPU = "H100 (Grand Teton, 96GB HBM2e, 500W)"


def _titan_fsdp(row: Mapping[str, str]) -> Cell:
    d = _replicas(row, "num_gpus")
    if int(_number(row["fsdp"])) != d:
        raise InputError("fsdp", row["fsdp"], f"#GPUs / (t c p) = {d}")
    # FSDP2 shards over the data x context ranks and prefetches the next all-gather;
    # it copies each gather's output and the gradients around its collectives.
    return exact(zero_stage=3, zero_shard_degree=0, param_gather_overlap=1.0, fsdp_copies=1)


def _titan_schedule(row: Mapping[str, str]) -> Cell:
    text = row["pp_schedule"].strip()
    if text in ("", "1F1B"):
        return exact(virtual_stages=1)
    if text == "Interleaved 1F1B":
        return approx("interleaved 1F1B with torchtitan's default of 2 stages per rank",
                      virtual_stages=2)
    raise InputError("pp_schedule", text, "1F1B or Interleaved 1F1B")


def _titan_seq(row: Mapping[str, str]) -> Cell:
    if row["seq_length"].strip():
        return exact(seq_length=_number(row["seq_length"]))
    return approx(f"sequence length not stated: {TORCHTITAN_SEQ} (torchtitan's Llama 3 "
                  "default) assumed", seq_length=TORCHTITAN_SEQ)


def _titan_batch(row: Mapping[str, str]) -> Cell:
    local, p = _number(row["local_batch_size"]), _number(row["pp"], 1)
    if p == 1:
        # FSDP2 keeps no gradient buffer (Megatron-Core DDP's, grad_buffer_traffic):
        # each backward's bf16 gradients go straight to the reduce-scatter (its
        # copy-in is fsdp_copies'), the sharded ones are new tensors.
        return exact(micro_batch=local, gradient_accum_steps=1, grad_buffer_traffic=0)
    if local % p:
        return Missing(f"local batch {local:g} does not split into {p:g} micro-batches")
    # Under PP torchtitan's FSDP2 does not reshard after forward
    # (parallelize_llama.py apply_fsdp: "to avoid per-microbatch all-gathers"),
    # and the pipeline stage syncs gradients on the last backward only
    # (torch.distributed.pipelining's backward_maybe_with_nosync).
    # Across the micro-batches autograd accumulates the unsharded gradients
    # (grad += new), which the gradient buffer's accumulation traffic stands for
    # (grad_buffer_traffic left at 1).
    # torch.distributed.pipelining of Dec 2024 (torch 1963fc8, before PR
    # 153383): a receive buffer per micro-batch each way, and every stage's
    # output of every micro-batch kept until the step ends (pp_stage_buffers 2).
    # torchtitan's default number of micro-batches at the benchmark's commit
    # (9dec370, Dec 2024) is the pipeline degree, interleaved or not
    # (pipelining_utils.py, build_pipeline_schedule: n_microbatches =
    # pipeline_parallel_degree; PR 781 of 2025-01-07 made it degree x stages a
    # rank for looped schedules).
    return approx("as many micro-batches as pipeline stages (torchtitan's default)",
                  micro_batch=local / p, gradient_accum_steps=p,
                  fsdp_keep_gathered=1, pp_stage_buffers=2)


def _titan_measure(row: Mapping[str, str], x: Mapping[str, float]
                   ) -> tuple[float, float, float]:
    tokens = _number(row["local_batch_size"]) * _number(row["fsdp"]) * x["seq_length"]
    # A blank memory cell (the 2024 page reports none) is not measured.
    return (_number(row["tokens_per_s_per_gpu"]), tokens / _number(row["num_gpus"]),
            _number(row["memory_gib"], math.nan) * GIB)


# What every torchtitan row runs (the comments in TORCHTITAN below), less its loss.
_TITAN_EVERY_ROW = dict(sequence_parallel=1, cp_comm=3, foreach_optimizer=1, tp_overlap_kind=1,
                        serial_streams=0)
_TITAN_ATTENTION = approx("attention by PyTorch SDPA's flash backend (FlashAttention-2)",
                          attention_kernel=1)

TORCHTITAN = SetTable(
    name="torchtitan",
    description="torchtitan Llama 3.1 8B/70B/405B on H100 96 GB (tokens/s per GPU, peak "
                "reserved memory)",
    file="torchtitan_llama3_h100.csv",
    # torchtitan's Llama attention is F.scaled_dot_product_attention, whose flash
    # backend is FlashAttention-2 (attention_kernel 1).  The loss is eager
    # PyTorch at the benchmark's torchtitan (9dec370, Dec 2024): train.py's
    # loss_fn is F.cross_entropy(pred.flatten(0, 1).float(), ...), and its
    # torch.compile is commented out, its comment saying that compiling the loss
    # function causes CUDA errors; torch.compile wraps the transformer blocks
    # only.  F.cross_entropy on the fp32 logits, loss-parallel under TP, is
    # cross_entropy_fusion 3.
    # Context parallelism is PyTorch's context_parallel (torch.distributed.tensor.
    # experimental), which torchtitan applies to its SDPA call with the all-gather
    # rotation (its default): cp_comm 3.
    # The optimizer step is PyTorch's foreach AdamW (torchtitan optimizer.py
    # build_optimizers: "fused": fused, "foreach": not fused, with
    # --optimizer.fused off by default and in the Llama 3 configs) after
    # train.py's torch.nn.utils.clip_grad_norm_(..., max_norm, foreach=True)
    # every step: foreach_optimizer 1.
    # Its TP is PyTorch DTensor's (parallelize_llama.py apply_tp), which keeps the
    # gathered input of each ColwiseParallel GEMM for the backward pass, AsyncTP
    # or not: tp_overlap_kind 1 on every row (refined/tensor.py, regathers).
    # torchtitan sets no CUDA_DEVICE_MAX_CONNECTIONS: the CUDA default, several
    # hardware queues (serial_streams 0, not Megatron-LM's rule).
    every_row=(exact(**_TITAN_EVERY_ROW, cross_entropy_fusion=3), _TITAN_ATTENTION, NO_DROPOUT),
    columns={
        # The Grand Teton H100 (96 GB HBM2e, 2.4 TB/s, 500 W limit) has its own
        # preset, whose peak at 500 W is derived from NVIDIA's SXM and NVL ratings.
        "system": {TORCHTITAN_GPU: gpu("h100-96gb-500w")},
        "model": {"Llama 3.1 8B": llm("llama3.1-8b"), "Llama 3.1 70B": llm("llama3.1-70b"),
                  "Llama 3.1 405B": llm("llama3.1-405b")},
        "num_gpus": "num_gpus",
        "tp": "tensor_parallel",
        "pp": "pipeline_parallel",
        "cp": "context_parallel",
        "fsdp": _titan_fsdp,
        "pp_schedule": _titan_schedule,
        "seq_length": _titan_seq,
        "local_batch_size": _titan_batch,
        "activation_checkpointing": {
            "full": exact(recompute=2),
            "none": exact(recompute=0),
            # torchtitan's Llama 3 8B config (train_configs/llama3_8b.toml) runs
            # selective AC with selective_ac_option = 'op': its op policy.
            "selective": exact(recompute=3),
        },
        "torch_compile": {
            "yes": approx("torch.compile's fused elementwise kernels as the model's fused "
                          "kernels"),
            # Eager: torchtitan's Llama code op by op (fp32 RMSNorm, RoPE via
            # view_as_complex, SwiGLU, residual adds, repeat_kv), each its own kernel.
            "no": exact(elementwise_fusion=0),
        },
        # Float8 (torchao) with FSDP's float8 all-gather, as torchtitan's
        # docs/float8.md runs it (--float8.enable_fsdp_float8_all_gather): the
        # weights are gathered in FP8 and no FP8 copy is kept.
        "float8": {"yes": approx("Float8 with FSDP's float8 all-gather (torchtitan's "
                                 "recommended flags; the benchmark lists none)",
                                 precision=1, fp8_param_gather=1),
                   "no": precision(0)},
        # AsyncTP: PyTorch's micro-pipelined all-gather -> matmul and matmul ->
        # reduce-scatter (torch.compile's micro_pipeline_tp pass), which cannot
        # fuse the backward reduce-scatter of a sum of input gradients
        # (refined/tensor.py).
        "async_tp": {"yes": exact(tp_overlap=1.0),
                     "no": exact(tp_overlap=0.0)},
    },
    blank={"tp": 1, "pp": 1, "cp": 1},
    measure=_titan_measure,
    label=lambda row: f"{row['table']} {row['layout']} {row['technique']}",
    layout=_layout,
)


# The same torchtitan page in its earlier version (torchtitan_2024_performance.csv):
# the Llama 3.1 405B rows on the same Grand Teton H100s and Llama 3 8B and 70B on
# A100.  What the page leaves unstated is listed per row: the sequence length
# (torchtitan's default), torch.compile (off, the default then) and, for the
# H100s, the power limit (500 W, as the December 2024 page states for those hosts).
TORCHTITAN_2024 = SetTable(
    name="torchtitan-2024",
    description="torchtitan's earlier performance page: Llama 3.1 405B on 128 H100 96 GB "
                "(2D), Llama 3 8B and 70B on 64 A100 80 GB (FSDP) (tokens/s per GPU)",
    file="torchtitan_2024_performance.csv",
    every_row=TORCHTITAN.every_row,
    columns={**TORCHTITAN.columns,
             "system": {
                 "H100 (94GB HBM2e, lower TDP)": (Way(
                     note="the Grand Teton H100 at the 500 W limit the December 2024 "
                          "page states for the same hosts (this page states none)",
                     gpu="h100-96gb-500w"),),
                 "A100 (80GB)": gpu("a100-80gb-sxm")},
             "model": {**TORCHTITAN.columns["model"], "Llama 3 8B": llm("llama3-8b"),
                       "Llama 3 70B": llm("llama3-70b")},
             "torch_compile": {"no": approx("torch.compile not stated: off, torchtitan's "
                                            "default then", elementwise_fusion=0)}},
    blank=TORCHTITAN.blank,
    measure=_titan_measure,
    label=lambda row: f"{row['model']} {row['system'].split(' ')[0]} {row['technique']}",
    layout=_layout,
)

# torchtitan's 2025 benchmark on H200 (torchtitan_2025_h200.csv): the Trainy team's
# Llama 3.1 8B with FSDP, torch.compile and Float8 on 32 and 64 HGX H200, its command
# printed whole, read with the torchtitan table.  What 2025's torchtitan runs
# differently is its loss: build_cross_entropy_loss (torchtitan/components/loss.py,
# the config_manager version of 2025) wraps F.cross_entropy(pred.flatten(0, 1).float(),
# ...) in torch.compile when --training.compile is set, on the model's bf16 output
# (PR 642, Oct 2024, moved the upcast from the model into the loss):
# cross_entropy_fusion 4.  The Float8 flags are the command's: the FP8 all-gather
# (fp8_param_gather 1) and the FP8 weights recomputed in the backward pass, not
# saved (--float8.force_recompute_fp8_weight_in_bwd: no FP8 weight copy, as the
# model counts none under fp8_param_gather).
TORCHTITAN_2025 = SetTable(
    name="torchtitan-2025",
    description="torchtitan's 2025 benchmark on H200 (Trainy): Llama 3.1 8B with FSDP, "
                "torch.compile and Float8 on 32 and 64 GPUs (tokens/s per GPU, peak "
                "reserved memory)",
    file="torchtitan_2025_h200.csv",
    every_row=(exact(**_TITAN_EVERY_ROW, cross_entropy_fusion=4), _TITAN_ATTENTION, NO_DROPOUT),
    columns={**TORCHTITAN.columns,
             # Eight GPUs a host all connected by NVLink: the HGX H200 board.
             "system": {"H200 (HGX, 8 a host, 400 Gb/s CX-7 per GPU)": gpu("h200")},
             "torch_compile": {"yes (2025)": TORCHTITAN.columns["torch_compile"]["yes"]},
             "float8": {"yes (FSDP float8 all-gather)": exact(precision=1,
                                                              fp8_param_gather=1)}},
    blank=TORCHTITAN.blank,
    measure=_titan_measure,
    label=lambda row: f"{row['layout']} {row['technique']}",
    layout=_layout,
)

# LLM Foundry's MPT throughput benchmarks (llm_foundry_mpt_benchmarks.csv, the README of
# mosaicml/llm-foundry scripts/train/benchmarking at 061f2c7): Composer with PyTorch
# FSDP (FULL_SHARD) on 8-128 A100 40 GB, A100 80 GB and H100, MPT 125M-70B.  The
# architecture of each size is its yaml's (scripts/train/yamls/pretrain/mpt-<size>.yaml:
# n_layers, d_model, n_heads, expansion_ratio 4, vocab_size 50368; the same lines in
# every stored version) on MPTConfig's defaults: multi-head attention, a GELU MLP,
# tied embeddings, LayerNorm, no dropout, learned positional embeddings and biases on
# every linear layer -- with those two, the parameter count matches the table's
# NumParams exactly for every size and sequence length (the model counts neither:
# 0.2-4% of the parameters, no GEMM; listed).  Under Composer's eager PyTorch the
# biases' gradients are reductions of their layers' output gradients
# (linear_bias 1), and MPT's one QKV projection (Wqkv, split by qkv.chunk(3)) has
# its three gradients concatenated in the backward (fused_qkv 1).
_MPT = {  # size: (n_layers, d_model, n_heads)
    "125m": (12, 768, 12), "350m": (24, 1024, 16), "760m": (24, 1536, 12),
    "1b": (24, 2048, 16), "3b": (32, 2560, 20), "7b": (32, 4096, 32),
    "13b": (40, 5120, 40), "30b": (48, 7168, 56), "70b": (80, 8192, 64)}
MPT_ARCHITECTURES: dict[str, dict[str, float]] = {
    size: {"num_layers": layers, "hidden_dim": d, "num_heads": heads, "num_kv_heads": heads,
           "head_dim": 0, "ffn_hidden_dim": 4 * d, "mlp_weight_matrices": 2,
           "vocab_size": 50368, "tied_embeddings": 1, "rotary_embedding": 0,
           "fused_qkv": 1, "linear_bias": 1}
    for size, (layers, d, heads) in _MPT.items()}
# The rows come from two generations of the benchmark script (submit_benchmarks.py):
# precision "bf16" with FSDP mixed precision PURE (the A100 40 GB table and the A100
# 80 GB 70b rows: attn_impl "triton", the Triton FlashAttention kernel, PyTorch
# 1.13.1) and "amp_bf16" / "amp_fp8" with DEFAULT (the rest: attn_impl "flash",
# PyTorch 2.0.1; FP8 through Transformer Engine v0.10's linear layers, fc_type "te").
# Which flash-attn the "flash" rows ran is not dated: llm-foundry's releases pinned
# flash-attn 1.0.3 (0.2.0, July 2023; 0.3.0 uses only its API) and 2.3.2 (the
# gpu-flash2 extra from 0.4.0, November 2023), and the H100 FP8 runs installed 2.4.2.
# They are taken as flash-attn 1.x, the first FlashAttention (attention_kernel 2):
# the H100 script of the sweep (scripts/train/benchmarking/h100_benchmarks.sh)
# pins llm-foundry v0.2.0 and the PyTorch 2.0.1 image, whose gpu extra is
# flash-attn 1.0.3; and at 32K tokens, where attention is most of the step, the
# FP8 and BF16 tables run at one speed (MPT-3b 5,856 and 5,873 tokens/s per GPU),
# so both ran one attention kernel, whatever their GEMMs.  The Triton rows run
# flash-attn's Triton kernel (attention_kernel 3).
# PURE reduces the gradients in bf16; DEFAULT leaves reduce_dtype None, which PyTorch
# FSDP takes as the parameter dtype, bf16 (a later Composer set fp32 there: listed).
_FLASH = ("attn_impl flash as flash-attn 1.x (llm-foundry v0.2.0's pin, which the H100 "
          "sweep script names; the runs are not dated)")


def _mpt_precision(row: Mapping[str, str]) -> Cell:
    # attn_impl "flash" runs flash_attn_fn (llmfoundry/models/layers/attention.py),
    # which passes q, k and v through flash-attn's bert_padding.unpad_input and the
    # output through pad_input around flash_attn_unpadded_func (unpadded_attention
    # 1); attn_impl "triton" (triton_flash_attn_fn) only rearranges views.
    text = row["precision"].strip()
    if text == "bf16":  # attn_impl triton: flash-attn's Triton FlashAttention kernel
        return exact(precision=0, attention_kernel=3, unpadded_attention=0)
    if text == "amp_bf16":
        return approx(_FLASH, precision=0, attention_kernel=2, unpadded_attention=1)
    if text == "amp_fp8":
        return approx("Transformer Engine v0.10's FP8 linear layers (delayed per-tensor "
                      "scaling) as FP8 per-tensor; " + _FLASH, precision=1,
                      attention_kernel=2, unpadded_attention=1)
    raise InputError("precision", text, "one of bf16, amp_bf16, amp_fp8")


def _mpt_measure(row: Mapping[str, str], x: Mapping[str, float]
                 ) -> tuple[float, float, float]:
    return (_number(row["throughput_t_per_s_per_gpu"]),
            _number(row["global_batch_size_tokens"]) / _number(row["num_gpus"]), math.nan)


LLM_FOUNDRY = SetTable(
    name="llm-foundry",
    description="LLM Foundry's MPT benchmarks: 125M-70B with PyTorch FSDP on 8-128 A100 40 GB, "
                "A100 80 GB and H100 (tokens/s per GPU)",
    file="llm_foundry_mpt_benchmarks.csv",
    # Composer runs MPT eagerly: LayerNorm (low_precision_layernorm), GELU and the
    # residual adds each their own kernels.  Its norm is one kernel a pass
    # (norm_kernel 0): LPLayerNorm calls F.layer_norm on the bf16 input
    # (llmfoundry/models/layers/norm.py; submit_benchmarks.py sets
    # low_precision_layernorm True), not torchtitan's op-by-op fp32 RMSNorm; and
    # MPT has no rotary embedding (learned positions: MPT_ARCHITECTURES).
    # The loss is llm-foundry's default
    # loss_fn "fused_crossentropy", flash-attn's CrossEntropyLoss (ComposerMPTCausalLM:
    # om_model_config.get('loss_fn', 'fused_crossentropy')): the bf16 logits and an
    # fp32 value per row, taken as Transformer Engine's fused loss (2 bytes a logit).
    # Composer's DecoupledLionW keeps one moment where Adam keeps two.
    # Every row's attention is a FlashAttention kernel of 2023, flash-attn 1.x or its
    # Triton kernel (by precision, above), and its gradients are reduced in bf16.
    every_row=(exact(tensor_parallel=1, pipeline_parallel=1, context_parallel=1,
                     virtual_stages=1, elementwise_fusion=0, norm_kernel=0, dropout=0,
                     grad_buffer_bytes=2),
               approx("flash-attn's fused cross entropy as Transformer Engine's (bf16 logits)",
                      cross_entropy_fusion=2),
               approx("the biases' parameters and the learned positional embeddings not "
                      "counted (the bias gradients' reductions are); Lion's one "
                      "moment as Adam's two")),
    columns={
        "gpu": {"h100_80gb": gpu("h100-sxm"), "a100_80gb": gpu("a100-80gb-sxm"),
                "a100_40gb": gpu("a100-40gb-sxm")},
        "model": {size: exact(**arch) for size, arch in MPT_ARCHITECTURES.items()},
        "num_gpus": "num_gpus",
        "seq_len": "seq_length",
        "micro_batch_size": "micro_batch",
        "grad_accum": "gradient_accum_steps",
        "precision": _mpt_precision,
        "sharding_strategy": {"FULL_SHARD": exact(zero_stage=3)},
        "activation_checkpointing": {"True": exact(recompute=2), "False": exact(recompute=0)},
        "activation_cpu_offload": {"False": exact(offload_layers=0)},
    },
    blank={},
    measure=_mpt_measure,
    label=lambda row: (f"{row['gpu']} MPT-{row['model']} s{row['seq_len']} "
                       f"{row['num_gpus']} GPUs {row['precision']} "
                       f"b{row['micro_batch_size']} m{row['grad_accum']}"),
    layout=_layout,
    workload=lambda row: (f"MPT-{row['model']} s{row['seq_len']} {row['num_gpus']} GPUs "
                          f"{row['precision'].removeprefix('amp_')}"),
)

# MLPerf Training's Llama 3.1 8B on one 8-GPU node (mlperf_training_llama31_8b.csv):
# the same model, sequence and layout (TP 1, PP 1, CP 1, micro-batch 2, every GPU a
# data-parallel rank) on AMD and NVIDIA systems, each row's settings from its
# submission's configuration.  A setting neither the configuration nor the YAML states
# takes Megatron-Core's default (no recompute) or the model's (the optimizer), listed
# with the row.  AMD's runs set Transformer Engine's CK v3
# fused attention (NVTE_CK_USES_FWD_V3 / _BWD_V3): the preset's attention_efficiency
# (attention_kernel 0).  NVIDIA's recipe runs the attention in FP8, which the model
# has no input for: those rows are not expressible, as are those whose configuration
# is not stored.
def _mlperf_precision(row: Mapping[str, str]) -> Cell:
    text = row["precision"].strip()
    if text == "FP8" and not row["config"].strip():
        # v5.1's MI350X: its configuration is not stored; AMD's MI355X configuration
        # of the same round sets FP8_PARAMS=1.
        return approx("FP8 primary weights (FP8_PARAMS=1) as AMD's MI355X configuration "
                      "of the round sets them (this system's is not stored)",
                      precision=1, fp8_param_gather=1)
    if text == "FP8":  # FP8_PARAMS=1: FP8 primary weights
        return exact(precision=1, fp8_param_gather=1)
    if text == "MXFP4":
        return approx("MXFP4 as the model's FP4 (precision 3): the FP4 peak, and the "
                      "quantisation cost measured for NVFP4 (MXFP4's is not published)",
                      precision=3)
    if text == "NVFP4":
        return precision(3)
    raise InputError("precision", text, "one of FP8, MXFP4, NVFP4")


def _mlperf_measure(row: Mapping[str, str], x: Mapping[str, float]
                    ) -> tuple[float, float, float]:
    """Tokens/s per GPU of a training block, its evaluations excluded, from what the log
    prints: samples/s, seconds per step, or a block's start and stop (ms) and samples."""
    gbs, gpus, seq = (_number(row[k]) for k in ("gbs", "num_gpus", "seq"))
    kind = row["measured_as"]
    if kind == "block":
        seconds = (_number(row["block_stop_ms"]) - _number(row["block_start_ms"])) / 1e3
        samples_s = _number(row["block_samples"]) / seconds
    elif kind == "s/step":
        samples_s = gbs / _number(row["measured"])
    elif kind == "samples/s":
        samples_s = _number(row["measured"])
    else:
        raise InputError("measured_as", kind, "one of samples/s, s/step, block")
    return samples_s * seq / gpus, gbs * seq / gpus, math.nan


_NOT_STATED = "not stated by the configuration or the YAML: Megatron-Core's default, "
MLPERF_8B = SetTable(
    name="mlperf-llama31-8b",
    description="MLPerf Training Llama 3.1 8B (sequence 8192) on one 8-GPU node, v5.1 and "
                "v6.0: AMD MI355X and MI350X and NVIDIA Blackwell systems (tokens/s per GPU, "
                "from the result logs)",
    file="mlperf_training_llama31_8b.csv",
    every_row=(llm("llama3.1-8b"), NO_DROPOUT),
    columns={
        "gpu": {"MI355X": gpu("mi355x"),
                "MI350X": gpu("mi350x"),
                "GB300": gpu("gb300-nvl72"), "GB200": gpu("gb200-nvl72"),
                "B300": gpu("b300"), "B200": gpu("b200")},
        "system": lambda row: (approx(
            "the YAML of the v6.0 MI355X run as stored in the MI350X implementation (the "
            "MI355X configuration names the same file, not stored)")
            if row["system"] == "MI355X_EPYC_9575F_primus" else NOTHING),
        "num_gpus": "num_gpus",
        "tp": "tensor_parallel",
        "pp": "pipeline_parallel",
        "cp": "context_parallel",
        "mbs": "micro_batch",
        "seq": "seq_length",
        "gbs": lambda row: _accumulation(row, "num_gpus", "gbs", "mbs"),
        "precision": _mlperf_precision,
        "recompute": {"none": exact(recompute=0), "core_attn": exact(recompute=1),
                      "": approx(_NOT_STATED + "no recompute", recompute=0)},
        "optimizer": {"distributed, overlapped": exact(zero_stage=1, dp_overlap=1.0,
                                                       param_gather_overlap=1.0),
                      "": approx("the optimizer not stated by the configuration: the "
                                 "model's default, the distributed optimizer (ZeRO-1) with "
                                 "the gradient reduction overlapped, the weight gather not",
                                 zero_stage=1, dp_overlap=1.0, param_gather_overlap=0.0)},
        "grad_reduce": {"bf16": exact(grad_buffer_bytes=2), "": NOTHING},
        "cross_entropy": {"te": exact(cross_entropy_fusion=2), "": NOTHING},
        "attention": {"FP8": exact(fp8_attention=1), "": NOTHING},
        "cuda_graphs": {"full iteration": graphs(2), "": NOTHING},
        "unexpressed": lambda row: (Missing(row["unexpressed"].strip())
                                    if row["unexpressed"].strip() else NOTHING),
    },
    blank={},
    measure=_mlperf_measure,
    label=lambda row: f"{row['round']} {row['submitter']} {row['gpu']}",
    layout=_layout,
)

NEW_SETS: dict[str, SetTable] = {s.name: s for s in (BRIDGE, BRIDGE_GB, MOE_RECIPES,
                                                      TORCHTITAN, TORCHTITAN_2024,
                                                      TORCHTITAN_2025,
                                                      GB200_HISTORY, LLM_FOUNDRY,
                                                      MLPERF_8B)}
