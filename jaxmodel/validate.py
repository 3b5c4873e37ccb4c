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
latencies) keeps the refined model's defaults.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jaxmodel.api import evaluate
from jaxmodel.errors import InputError
from jaxmodel.models import get_model
from jaxmodel.presets import apply_presets

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


def validate(runs: Sequence[Run] | None = None, *, x64: bool = True,
             overrides: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """Predicted against measured, one row per run, in one batched evaluation.

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


def calibrate_runs(runs: Sequence[Run] | None = None, fit=None, *,
                   overrides: Mapping[str, float] | None = None, bootstrap: int = 200,
                   seed: int = 0):
    """Fit the refined model's cluster parameters to the runs' measured TFLOP/s.

    The inputs every run shares (the settings, ``overrides``) are the fit's
    fixed values and the rest are per-run columns, so ``fit`` may name any
    shared continuous input.  Returns a ``jaxmodel.calibrate.Calibration``;
    its ``errors["leave_one_out"]`` is the honest figure.
    """
    from jaxmodel.calibrate import calibrate

    runs = sc21_runs() if runs is None else list(runs)
    inputs = [r.inputs(overrides) for r in runs]
    shared = {k: v for k, v in inputs[0].items() if all(row[k] == v for row in inputs)}
    table = {k: np.array([row[k] for row in inputs]) for k in inputs[0] if k not in shared}
    table["run"] = np.array([f"{r.params_b:g}B" for r in runs])
    table["measured_hardware_tflops_per_gpu"] = np.array([r.measured_tflops for r in runs])
    return calibrate(table, fit, model="refined", bootstrap=bootstrap, seed=seed, suggest=0,
                     **shared)
