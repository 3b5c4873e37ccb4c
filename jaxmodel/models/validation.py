"""Validation of the refined model against published training runs.

Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM" (SC21), Table 1: ten GPT models from 1.7B to 1T
parameters on Selene (DGX A100 80 GB nodes), with the measured per-GPU
throughput in TFLOP/s.  Those TFLOP/s count the FLOPs of their eq. 3,
``F = 96 B s l h^2 (1 + s / 6h + V / 16 l h)`` per iteration (full activation
recompute), so the measured iteration time is derived as
``F / (GPUs x TFLOP/s)``; the table does not print it.

One set of settings serves every row (``SC21_SETTINGS``): the A100 80 GB SXM
hardware preset (312 TFLOP/s dense peak, 2.039 TB/s, NVLink within 8-GPU nodes,
8 x 200 Gb/s HDR InfiniBand per node = 25 GB/s per GPU) and what the runs did
(sec. 5.1 and Table 1): full activation recompute, no sequence parallelism (not
yet invented), no FlashAttention (not yet invented), no ZeRO, gradients
all-reduced after the backward pass (Megatron-LM of 2021 did not overlap it),
tied embeddings, sequence length 2048, vocabulary 51,200, and the interleaved
schedule with ``v = 3, 2, 2, 3`` model chunks for the 76B, 145B, 310B and 530B
rows.  Everything else (the achievable fraction of peak, bandwidth efficiencies,
latencies) keeps the refined model's defaults and the A100 preset (its
``matmul_efficiency`` is the measured large-GEMM ceiling, see
``jaxmodel.presets``).  Also of that Megatron-LM: gradients reduced in fp16
(``grad_buffer_bytes`` 2; fp32 accumulation was optional then) and the
vocabulary-parallel cross-entropy as unfused PyTorch operations.  Its
gradient buffer was zeroed and pre-scaled by ``1 / d`` every step as today's
(``grad_buffer_traffic`` 1, the default; the NaN-check norm it did not yet
have is < 0.01% of these steps), and with the all-reduce after the backward
pass (``dp_overlap`` 0) the bucket size changes nothing.

A second set, ``megatron-h100`` (``MEGATRON_H100``): Megatron-LM's README weak
scaling table (GPT 1.7B-462B on 48-6,144 H100 GPUs, MFU 41-49%), one set of
settings for every row, documented in ``MEGATRON_H100_SETTINGS``.

Validation files (``--data FILE``) name their GPU and settings: either in
columns (``gpu``, a GPU preset, and any refined-model input by name, per row),
or in a header line ``# jaxmodel-validate: set=NAME, gpu=NAME, input=value, ...``
(for every row), or with ``--set NAME``.  A file that names none of them is
read with the built-in set of its columns' kind (``sc21`` for measured TFLOP/s,
``megatron-h100`` for MFU), and the command says so in its output.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from jaxmodel.errors import InputError
from jaxmodel.models import get_model
from jaxmodel.models.presets import GPUS, apply_presets

# Table 1 of Narayanan et al. 2021: params (B), heads, hidden, layers, t, p,
# GPUs, global batch, micro-batch, measured TFLOP/s per GPU; d = GPUs / (t p).
SC21_COLUMNS = ("params_b", "heads", "hidden", "layers", "tensor_parallel",
                "pipeline_parallel", "data_parallel", "gpus", "batch", "micro_batch",
                "measured_tflops")
SC21_TABLE1: tuple[tuple[float, ...], ...] = (
    (1.7, 24, 2304, 24, 1, 1, 32, 32, 512, 16, 137),
    (3.6, 32, 3072, 30, 2, 1, 32, 64, 512, 16, 138),
    (7.5, 32, 4096, 36, 4, 1, 32, 128, 512, 16, 142),
    (18.4, 48, 6144, 40, 8, 1, 32, 256, 1024, 8, 135),
    (39.1, 64, 8192, 48, 8, 2, 32, 512, 1536, 4, 138),
    (76.1, 80, 10240, 60, 8, 4, 32, 1024, 1792, 2, 140),
    (145.6, 96, 12288, 80, 8, 8, 24, 1536, 2304, 2, 148),
    (310.1, 128, 16384, 96, 8, 16, 15, 1920, 2160, 1, 155),
    (529.6, 128, 20480, 105, 8, 35, 9, 2520, 2520, 1, 163),
    (1008.0, 160, 25600, 128, 8, 64, 6, 3072, 3072, 1, 163),
)
# Interleaved-schedule chunks per GPU, by params_b (the rows that used it).
SC21_VIRTUAL_STAGES = {76.1: 3, 145.6: 2, 310.1: 2, 529.6: 3}
SC21_SEQ_LENGTH = 2048
SC21_VOCAB = 51200
SC21_GPU = "a100-80gb-sxm"
SC21_SETTINGS: dict[str, float] = {
    "seq_length": SC21_SEQ_LENGTH,
    "vocab_size": SC21_VOCAB,
    "tied_embeddings": 1,
    "mlp_weight_matrices": 2,
    "recompute": 2,
    "sequence_parallel": 0,
    "flash_attention": 0,
    "zero_stage": 0,
    "dp_overlap": 0.0,
    "grad_buffer_bytes": 2,
    "cross_entropy_fusion": 0,
    # GPT of 2021 trained with dropout 0.1 (Megatron-LM's default): masks stored.
    "dropout": 1,
    # The interleaved schedule of 2021 waited for each transfer (batched isend /
    # irecv, then wait); the steady-state overlap came in 2023 (NVIDIA/apex PR
    # 1616, "p2p communication overlap at interleaved pipelining", then
    # Megatron-Core's overlap_p2p_comm).
    "pp_overlap": 0,
}


@dataclass(frozen=True)
class Run:
    """One published run: its layout and measured per-GPU TFLOP/s."""

    params_b: float
    heads: int
    hidden: int
    layers: int
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    gpus: int
    batch: int
    micro_batch: int
    measured_tflops: float

    @property
    def eq3_flops(self) -> float:
        """FLOPs per iteration, Narayanan et al. 2021 eq. 3 (full recompute)."""
        s, h, L, V = SC21_SEQ_LENGTH, self.hidden, self.layers, SC21_VOCAB
        return 96.0 * self.batch * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))

    @property
    def measured_step_ms(self) -> float:
        """Iteration time implied by the measured TFLOP/s and eq. 3."""
        return self.eq3_flops / (self.gpus * self.measured_tflops * 1e12) * 1e3

    def inputs(self, overrides: Mapping[str, float] | None = None) -> dict[str, float]:
        """The refined model's inputs for this run (hardware and software settings
        from ``SC21_SETTINGS`` and the A100 preset, then ``overrides``, e.g. a
        calibrated config; the run's own layout and architecture last)."""
        d = self.gpus // (self.tensor_parallel * self.pipeline_parallel)
        return {
            **apply_presets(get_model("refined"), gpu=SC21_GPU),
            **SC21_SETTINGS,
            **(overrides or {}),
            "num_gpus": self.gpus,
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "virtual_stages": SC21_VIRTUAL_STAGES.get(self.params_b, 1),
            "micro_batch": self.micro_batch,
            "gradient_accum_steps": self.batch // (self.micro_batch * d),
            "hidden_dim": self.hidden,
            "num_layers": self.layers,
            "num_heads": self.heads,
            "num_kv_heads": self.heads,
            "ffn_hidden_dim": 4 * self.hidden,
        }


def sc21_runs() -> list[Run]:
    """The ten rows of Table 1."""
    return [_run(row) for row in SC21_TABLE1]


def _run(row: Sequence[float]) -> Run:
    values = dict(zip(SC21_COLUMNS, row, strict=True))
    ints = {k: int(v) for k, v in values.items() if k not in ("params_b", "measured_tflops")}
    return Run(params_b=float(values["params_b"]),
               measured_tflops=float(values["measured_tflops"]), **ints)


def read_runs(path: str | Path) -> list[Run]:
    """Runs from a CSV file with the ``SC21_COLUMNS`` header.

    Raises:
      InputError: unreadable file or a malformed row.
    """
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise InputError("data", str(path), f"a readable CSV file ({e.strerror})") from None
    runs = []
    for i, row in enumerate(rows, start=2):
        try:
            runs.append(_run([float(row[c]) for c in SC21_COLUMNS]))
        except (KeyError, TypeError, ValueError):
            raise InputError("data", f"{path}:{i}",
                             "rows with numeric columns " + ", ".join(SC21_COLUMNS)) from None
    return runs


def validate(runs: Sequence[Run] | None = None, *, evaluate: Callable[..., Any],
             x64: bool = True, overrides: Mapping[str, float] | None = None
             ) -> list[dict[str, Any]]:
    """Predicted against measured, one row per run, in one batched evaluation.

    ``evaluate``: ``jaxmodel.api.evaluate`` (or any function of its
    signature), handed in: a model module does not import the API above it.
    ``overrides``: input values over the shared settings (``Run.inputs``), e.g.
    a ``calibrated.toml`` read by ``jaxmodel.config.load_config``.

    Returns:
      Dicts with the run's size and layout, ``measured_tflops``,
      ``predicted_tflops`` (hardware FLOP/s per GPU, as the paper counts),
      ``tflops_error_percent`` ((predicted - measured) / measured),
      ``measured_step_s``, ``predicted_step_s``, ``step_error_percent``,
      ``memory_gb_per_gpu`` and ``valid_layout``.
    """
    runs = sc21_runs() if runs is None else list(runs)
    inputs = [r.inputs(overrides) for r in runs]
    batch = {k: np.array([row[k] for row in inputs], dtype=np.float64) for k in inputs[0]}
    out = evaluate("refined", x64=x64, **batch)
    rows = []
    for i, r in enumerate(runs):
        pred = float(out.hardware_tflops_per_gpu[i])
        step = float(out.step_time_ms[i]) / 1e3
        rows.append({
            "params_b": r.params_b,
            "gpus": r.gpus,
            "layout": f"t{r.tensor_parallel} p{r.pipeline_parallel} "
                      f"d{r.data_parallel} v{int(inputs[i]['virtual_stages'])}",
            "measured_tflops": r.measured_tflops,
            "predicted_tflops": pred,
            "tflops_error_percent": 100.0 * (pred - r.measured_tflops) / r.measured_tflops,
            "measured_step_s": r.measured_step_ms / 1e3,
            "predicted_step_s": step,
            "step_error_percent": 100.0 * (step * 1e3 - r.measured_step_ms) / r.measured_step_ms,
            "memory_gb_per_gpu": float(out.memory_gb_per_gpu[i]),
            "valid_layout": bool(out.valid_layout[i]),
        })
    return rows


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean and max absolute error of the per-GPU TFLOP/s, in percent."""
    errors = np.abs([r["tflops_error_percent"] for r in rows])
    return {"mean_abs_error_percent": float(np.mean(errors)),
            "max_abs_error_percent": float(np.max(errors)),
            "runs": len(rows)}


# --- the Megatron-LM H100 weak-scaling set -------------------------------------

MEGATRON_H100_CSV = Path(__file__).parent.parent / "data" / "megatron_lm_h100_weak_scaling.csv"
MEGATRON_H100_GPU = "h100-sxm"
# What a 2024 Megatron-Core user runs (the list and the table's note
# "DP/TP/PP communication overlap on"), the same for every row:
#   recompute 1 (selective), sequence_parallel 1, flash_attention 1, micro_batch
#   1, virtual_stages 1 (the table gives no interleaving; none is guessed),
#   zero_stage 1 (the distributed optimizer), dp_overlap 1 and
#   param_gather_overlap 1 (--overlap-grad-reduce, --overlap-param-gather),
#   tp_overlap 1 (--tp-comm-overlap; the model still exposes one of t chunks);
#   the GPT models of the table: GeLU MLP of 4 h (2 matrices), one KV head per
#   head, untied embeddings (the parameter counts 1.7B-462B need the output
#   layer counted separately);
#   grad_buffer_bytes 2: NVIDIA's performance recipes reduce gradients in bf16
#   (NeMo's performance scripts set grad_reduce_in_fp32 = False);
#   cross_entropy_fusion 0: Megatron-Core's default then (no
#   --cross-entropy-loss-fusion);
#   attention_efficiency 0.35: FlashAttention-2 reaches about 35% of the H100's
#   peak (Shah et al. 2024, FlashAttention-3, sec. 1), the kernel generation of
#   Transformer Engine in 2024.
#   the gradient buffer's traffic and Megatron-Core's 40M-parameter buckets
#   (grad_buffer_traffic 1, dp_bucket_params 40e6) are the refined model's
#   defaults: what Megatron-Core's DDP does, the same for every row.
# Everything else: the refined model's defaults and the h100-sxm preset.
MEGATRON_H100_SETTINGS: dict[str, float] = {
    "recompute": 1,
    "sequence_parallel": 1,
    "flash_attention": 1,
    "micro_batch": 1,
    "virtual_stages": 1,
    "zero_stage": 1,
    "dp_overlap": 1.0,
    "param_gather_overlap": 1.0,
    "tp_overlap": 1.0,
    "mlp_weight_matrices": 2,
    "tied_embeddings": 0,
    "grad_buffer_bytes": 2,
    "cross_entropy_fusion": 0,
    "attention_efficiency": 0.35,
    # Megatron-LM's GPT defaults: hidden and attention dropout 0.1, masks stored.
    "dropout": 1,
}
MFU_COLUMNS = ("params_b", "heads", "hidden", "layers", "tensor_parallel",
               "pipeline_parallel", "data_parallel", "gpus", "global_batch", "seq_length",
               "vocab_size", "mfu_percent")


@dataclass(frozen=True)
class ValidationSet:
    """A named set of settings for validation files: the GPU preset and the inputs."""

    name: str
    description: str
    gpu: str
    settings: dict[str, float] = field(default_factory=dict)


SETS: dict[str, ValidationSet] = {s.name: s for s in (
    ValidationSet("sc21", "Narayanan et al. 2021 (SC21) Table 1: GPT 1.7B-1T on Selene "
                  "(A100 80 GB)", SC21_GPU, dict(SC21_SETTINGS)),
    ValidationSet("megatron-h100", "Megatron-LM README weak scaling: GPT 1.7B-462B on "
                  "H100 (BF16)", MEGATRON_H100_GPU, dict(MEGATRON_H100_SETTINGS)),
)}
_HEADER = "# jaxmodel-validate:"


@dataclass(frozen=True)
class Table:
    """Rows of a validation file, with what it names and what was assumed.

    Attributes:
      kind: ``"tflops"`` (measured hardware TFLOP/s, the SC21 columns) or
        ``"mfu"`` (measured MFU, the Megatron-LM README columns).
      rows: the CSV rows, numbers as floats and ``gpu`` as a string.
      set_name: the validation set whose settings apply.
      header: settings from the file's header line (every row).
      assumed: the sentence saying what was assumed, or "" when the file (or
        ``--set``) named its GPU and settings.
    """

    kind: str
    rows: list[dict[str, Any]]
    set_name: str
    header: dict[str, Any]
    assumed: str
    source: str


def _set(name: str) -> ValidationSet:
    try:
        return SETS[name]
    except KeyError:
        raise InputError("set", name, "one of " + ", ".join(SETS)) from None


def _header_settings(lines: list[str], path) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    model = get_model("refined")
    for line in lines:
        if not line.startswith(_HEADER):
            continue
        for item in filter(None, (p.strip() for p in line[len(_HEADER):].split(","))):
            key, sep, value = (q.strip() for q in item.partition("="))
            if not sep:
                raise InputError("data", f"{path}: {item!r}", "key=value items in the "
                                 f"'{_HEADER}' line")
            if key in ("set", "gpu"):
                settings[key] = value
            elif key in model.input_names:
                try:
                    settings[key] = float(value)
                except ValueError:
                    raise InputError("data", f"{path}: {key}={value}", "a number") from None
            else:
                raise InputError("data", f"{path}: {key}", "set, gpu or a refined-model "
                                 "input name")
    return settings


def read_table(path: str | Path, set_name: str | None = None) -> Table:
    """A validation file: its rows, its kind and the settings it names (module doc).

    Raises:
      InputError: unreadable file, unknown columns' kind, a malformed row, an
        unknown set or GPU preset.
    """
    try:
        with open(path, newline="") as f:
            text = f.read().splitlines()
    except OSError as e:
        raise InputError("data", str(path), f"a readable CSV file ({e.strerror})") from None
    header = _header_settings([ln for ln in text if ln.startswith("#")], path)
    body = [ln for ln in text if not ln.startswith("#")]
    reader = csv.DictReader(body)
    columns = set(reader.fieldnames or ())
    if set(SC21_COLUMNS) <= columns:
        kind, need, default = "tflops", SC21_COLUMNS, "sc21"
    elif set(MFU_COLUMNS) <= columns:
        kind, need, default = "mfu", MFU_COLUMNS, "megatron-h100"
    else:
        raise InputError("data", str(path), "a CSV with the columns " + ", ".join(SC21_COLUMNS)
                         + " (measured TFLOP/s) or " + ", ".join(MFU_COLUMNS) + " (MFU)")
    model = get_model("refined")
    rows = []
    for i, row in enumerate(reader, start=2):
        try:
            values: dict[str, Any] = {c: float(row[c]) for c in need}
            values.update({c: float(row[c]) for c in columns
                           if c in model.input_names and c not in need and row[c] != ""})
        except (KeyError, TypeError, ValueError):
            raise InputError("data", f"{path}:{i}",
                             "rows with numeric columns " + ", ".join(need)) from None
        if "gpu" in columns and row["gpu"]:
            values["gpu"] = row["gpu"].strip()
        rows.append(values)
    named = set_name or header.get("set")
    gpu_named = "gpu" in header or ("gpu" in columns and all("gpu" in r for r in rows))
    chosen = _set(named or default)
    assumed = ""
    if not named and not gpu_named:
        assumed = (f"{path} names no GPU or settings; assumed the '{chosen.name}' set "
                   f"({chosen.gpu}; " + ", ".join(f"{k}={v:g}" for k, v in
                                                   chosen.settings.items())
                   + f"). Name them with a '{_HEADER} gpu=..., input=value' line, a gpu "
                   "column or --set")
    for r in rows:
        gpu = r.get("gpu", header.get("gpu", chosen.gpu))
        if gpu not in GPUS:
            raise InputError("gpu", gpu, "one of " + ", ".join(GPUS))
    return Table(kind, rows, chosen.name, header, assumed, str(path))


def _inputs_for(row: Mapping[str, Any], table: Table, kind: str,
                overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    chosen = SETS[table.set_name]
    model = get_model("refined")
    header = {k: v for k, v in table.header.items() if k in model.input_names}
    gpu = row.get("gpu", table.header.get("gpu", chosen.gpu))
    per_row = {k: v for k, v in row.items() if k in model.input_names}
    t, p = int(row["tensor_parallel"]), int(row["pipeline_parallel"])
    c = int(per_row.get("context_parallel", header.get("context_parallel", 1)))
    values = {**apply_presets(model, gpu=gpu), **chosen.settings, **header, **(overrides or {})}
    d = int(row["gpus"]) // (t * c * p)
    if kind == "tflops":
        b = int(row["micro_batch"])
        values.update({"micro_batch": b, "gradient_accum_steps": int(row["batch"]) // (b * d),
                       "virtual_stages": SC21_VIRTUAL_STAGES.get(float(row["params_b"]), 1)
                       if table.set_name == "sc21" else values.get("virtual_stages", 1),
                       "num_kv_heads": int(row["heads"])})
    else:
        b = int(values.get("micro_batch", 1))
        values.update({"seq_length": row["seq_length"], "vocab_size": row["vocab_size"],
                       "gradient_accum_steps": int(row["global_batch"]) // (b * d),
                       "num_kv_heads": int(row["heads"])})
    values.update({
        "num_gpus": row["gpus"], "tensor_parallel": t, "pipeline_parallel": p,
        "hidden_dim": row["hidden"], "num_layers": row["layers"], "num_heads": row["heads"],
        "ffn_hidden_dim": 4 * int(row["hidden"]),
    })
    values.update(per_row)
    return {k: float(v) for k, v in values.items()}


def table_runs(table: Table) -> list[Run]:
    """The runs of a table in SC21 Table 1's columns."""
    return [_run([r[c] for c in SC21_COLUMNS]) for r in table.rows]


def validate_table(table: Table, *, evaluate: Callable[..., Any], x64: bool = True,
                   overrides: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """Predicted against measured for every row of ``table``, one batched evaluation.

    Rows carry ``measured``, ``predicted`` and ``error_percent`` of the table's
    metric (hardware TFLOP/s per GPU, or MFU in percent), the layout, the
    predicted memory and validity; TFLOP/s tables also the ``tflops_*`` and step
    fields of :func:`validate`.
    """
    if table.kind == "tflops" and table.set_name == "sc21" and not table.header \
            and all(set(r) <= set(SC21_COLUMNS) for r in table.rows):
        rows = validate(table_runs(table), evaluate=evaluate, x64=x64, overrides=overrides)
        for r in rows:
            r.update(measured=r["measured_tflops"], predicted=r["predicted_tflops"],
                     error_percent=r["tflops_error_percent"])
        return rows
    inputs = [_inputs_for(r, table, table.kind, overrides) for r in table.rows]
    names = sorted(set().union(*inputs))
    batch = {k: np.array([row.get(k, get_model("refined").defaults[k]) for row in inputs])
             for k in names}
    out = evaluate("refined", x64=x64, **batch)
    metric = out.hardware_tflops_per_gpu if table.kind == "tflops" else out.mfu_percent
    key = "measured_tflops" if table.kind == "tflops" else "mfu_percent"
    rows = []
    for i, (r, x) in enumerate(zip(table.rows, inputs, strict=True)):
        pred, meas = float(metric[i]), float(r[key])
        rows.append({
            "params_b": float(r["params_b"]),
            "gpus": int(r["gpus"]),
            "layout": f"t{int(x['tensor_parallel'])} p{int(x['pipeline_parallel'])} "
                      f"d{int(out.data_parallel[i])} v{int(x['virtual_stages'])}"
                      + (f" c{int(x['context_parallel'])}" if x.get("context_parallel", 1) > 1
                         else ""),
            "measured": meas,
            "predicted": pred,
            "error_percent": 100.0 * (pred - meas) / meas,
            "memory_gb_per_gpu": float(out.memory_gb_per_gpu[i]),
            "valid_layout": bool(out.valid_layout[i]),
        })
    return rows


def builtin_table(name: str) -> Table:
    """The rows of a built-in validation set (``sc21``: Table 1; ``megatron-h100``: the CSV)."""
    chosen = _set(name)
    if name == "sc21":
        rows = [dict(zip(SC21_COLUMNS, map(float, row), strict=True)) for row in SC21_TABLE1]
        return Table("tflops", rows, "sc21", {}, "", "Narayanan et al. 2021, Table 1")
    table = read_table(MEGATRON_H100_CSV, chosen.name)
    return Table(table.kind, table.rows, chosen.name, {}, "", str(MEGATRON_H100_CSV.name))


def table_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean and max absolute error of the table's metric, in percent."""
    errors = np.abs([r["error_percent"] for r in rows])
    return {"mean_abs_error_percent": float(np.mean(errors)),
            "max_abs_error_percent": float(np.max(errors)),
            "runs": len(rows)}
