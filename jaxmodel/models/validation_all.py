"""``jaxmodel validate --all``: every validation set, one table, one rule.

A row per set (and per variant): how many runs, how many the model can express
(with the reason for each one it cannot), how many it calls "does not fit" although
they ran, and the |error| of the throughput (mean, median, max) and of the memory
where it was measured.

Variants.  Every set is run **out of the box**: what each row and its source
document, the GPU preset for the cluster, the model's defaults for the rest
(``jaxmodel.models.validation_sets``).  The existing sets whose settings include
values their rows do not document (``OUT_OF_THE_BOX``: a tuned attention efficiency,
a host overhead read from the table, an assumed micro-batch) are shown a second
time with those **documented settings**, as ``jaxmodel validate --set`` runs them.
SC21's settings are all what the paper documents, so it is shown once.

Judging a row.  Every expressible run is evaluated twice in the same batch: with
its GPU's memory (does the model say it fits?) and with the memory limit lifted,
so that the step time is predicted whatever the memory model says (a run that ran
has a time).  The throughput error is ``predicted / measured - 1`` in the set's own
unit: tokens/s or TFLOP/s per GPU by the source's FLOP count (``work / step``), or
the model's MFU for the Megatron-LM H100 set (as ``validate --set`` does).  Rows the
model calls invalid for another reason than memory are counted apart ("invalid").

Repeats (``repeats``).  A configuration measured more than once (the same inputs in
several releases) sets a floor under the error of any model of the rows' inputs
where its measurements differ; the table names the widest and the floors.

GPU against GPU (``gpu_pairs``).  Where a source publishes one workload (model,
precision, release, GPU count) on several GPUs, each on its own published layout,
the measured speed ratio of each pair of GPUs is set beside the predicted one:
what a user choosing hardware reads, and what a per-GPU offset cannot fake.

Calibrated (``--calibrated``): per GPU preset, over the out-of-the-box runs of all
sets on it, k-fold cross-validation (k = 5, leave-one-out with fewer than 5 runs;
run i is in fold i mod k, in table order): each fold is calibrated on the other
folds' step times as ``jaxmodel calibrate`` calibrates by default
(``cross_validate``, handed in: the calibration machinery), and the held-out fold
is predicted.  The candidates are the model's cluster set and the other achieved
rates of the GPU's preset that its runs use (``RATES``: the FP8 GEMM ceiling, the
attention fractions, the host's time per kernel); each fold chooses among them by
forward selection on its own training runs (a parameter joins while the fits
converge inside its physical range and the runs can tell it from the others),
so a GPU with few runs fits few parameters.  A GPU with one run gets no
calibrated figure.

Evaluation is handed in (``evaluate``: ``jaxmodel.api.evaluate``'s signature), so
that this module does not depend on the public API; all the runs of all the sets
are one batched call (one compile).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jaxmodel.errors import InputError, closest
from jaxmodel.models import get_model
from jaxmodel.models.presets import GPUS
from jaxmodel.models.validation import (
    MEGATRON_H100_SETTINGS,
    SC21_GPU,
    _inputs_for,
    builtin_table,
    sc21_runs,
)
from jaxmodel.models.validation_moe import GPUS as MOE_GPUS
from jaxmodel.models.validation_moe import MOE_SET, ZOO_COMMANDS, read_moe_runs
from jaxmodel.models.validation_sets import (
    MODEL,
    NEW_SETS,
    Case,
    read_set,
)

DOCUMENTED = "documented settings"
OUT_OF_BOX = "out of the box"
FOLDS = 5
# The settings of each existing set that its rows do not document (tuned to the
# set, or assumed where the table is silent): the out-of-the-box variant resets
# them to the model's defaults (qwen3-235b's all-to-all overlap to the one rule,
# ep_overlap 1 where a row overlaps).  SC21's settings are what the paper documents.
# megatron-h100 keeps the distributed optimizer (zero_stage 1): the table's "DP
# communication overlap on" includes --overlap-param-gather, which Megatron-LM
# allows only with --use-distributed-optimizer.
OUT_OF_THE_BOX: dict[str, tuple[str, ...]] = {
    "sc21": (),
    "megatron-h100": ("attention_efficiency", "recompute", "sequence_parallel",
                      "flash_attention", "micro_batch", "virtual_stages",
                      "grad_buffer_bytes", "cross_entropy_fusion"),
    MOE_SET: ("moe_host_overhead_us", "moe_overlap", "host_kernel_us"),
}
LIFTED_MEMORY_GB = 1e9


def _preset_memory(gpu: str) -> float:
    return float(GPUS[gpu].values[get_model(MODEL).memory_capacity])


def _out_of_box(name: str, gpu: str, defaults) -> float:
    """An input reset out of the box: the GPU preset's value (a cluster parameter),
    else the model's default."""
    return float(GPUS[gpu].values.get(name, defaults[name]))


def sc21_cases() -> list[Case]:
    """SC21 Table 1 with its (documented) settings."""
    cases = []
    for r in sc21_runs():
        x = r.inputs()
        cases.append(Case("sc21", f"{r.params_b:g}B", SC21_GPU, x, measured=r.measured_tflops,
                          work=r.eq3_flops / r.gpus / 1e12, memory_gb=_preset_memory(SC21_GPU),
                          layout=f"t{r.tensor_parallel} p{r.pipeline_parallel} "
                                 f"v{int(x['virtual_stages'])} b{r.micro_batch}"))
    return cases


def megatron_h100_cases(variant: str) -> list[Case]:
    """The Megatron-LM README weak-scaling rows (MFU), in either variant."""
    table = builtin_table("megatron-h100")
    defaults = get_model(MODEL).defaults
    gpu = "h100-sxm"
    cases = []
    for row in table.rows:
        x = _inputs_for(row, table, "mfu")
        if variant == OUT_OF_BOX:
            x.update({k: _out_of_box(k, gpu, defaults) for k in OUT_OF_THE_BOX["megatron-h100"]
                      if k in MEGATRON_H100_SETTINGS})
            d = int(row["gpus"]) // int(row["tensor_parallel"] * row["pipeline_parallel"])
            x["gradient_accum_steps"] = int(row["global_batch"]) // (x["micro_batch"] * d)
        cases.append(Case("megatron-h100", f"{row['params_b']:g}B", gpu, x,
                          measured=float(row["mfu_percent"]), metric="mfu_percent",
                          memory_gb=_preset_memory(gpu),
                          layout=f"t{int(x['tensor_parallel'])} p{int(x['pipeline_parallel'])} "
                                 f"v{int(x['virtual_stages'])} b{int(x['micro_batch'])}"))
    return cases


def qwen3_cases(variant: str) -> list[Case]:
    """The Qwen3-235B-A22B Megatron-Core rows (TFLOP/s by Megatron's count)."""
    defaults = get_model(MODEL).defaults
    cases = []
    for i, r in enumerate(read_moe_runs(), start=1):
        gpu = MOE_GPUS[r.gpu]
        label = f"{r.gpu} {r.precision} {r.seq_length // 1024}K #{i}"
        x, notes, reason = r.inputs(), [], ""
        if variant == DOCUMENTED:
            if r.gpu != "h100":
                reason = "the set's documented settings score the H100 rows only"
        else:
            x.update({k: _out_of_box(k, gpu, defaults) for k in OUT_OF_THE_BOX[MOE_SET]})
            if "overlap" in r.notes:
                x["ep_overlap"] = 1.0
            # The GB200 rows' launch commands are in r.inputs() (ZOO_COMMANDS).
            command = ZOO_COMMANDS.get((r.gpu, r.precision, r.seq_length))
            if command is not None and command.note:
                notes.append(command.note)
            if command is None and "offload" in r.notes:
                reason = "activation offload: neither the row nor its command says what " \
                         "is offloaded"
        cases.append(Case(MOE_SET, label, gpu, None if reason else x, reason, tuple(notes),
                          measured=r.measured_tflops,
                          work=r.megatron_flops() / r.gpus / 1e12,
                          memory_gb=_preset_memory(gpu),
                          layout=f"t{r.tensor_parallel} p{r.pipeline_parallel} "
                                 f"v{r.virtual_stages} c{r.context_parallel} "
                                 f"e{r.expert_parallel} b{r.micro_batch}"))
    return cases


@dataclass(frozen=True)
class SetRun:
    """One line of the table: a set in one variant, and its runs."""

    name: str
    variant: str
    cases: list[Case]
    description: str = ""


def all_sets() -> list[SetRun]:
    """Every set, in table order (the new sets, then the existing ones)."""
    runs = [SetRun(t.name, OUT_OF_BOX, read_set(t), t.description) for t in NEW_SETS.values()]
    runs.append(SetRun("sc21", DOCUMENTED + " = " + OUT_OF_BOX, sc21_cases(),
                       "Narayanan et al. 2021 (SC21) Table 1, A100 80 GB (TFLOP/s per GPU)"))
    what = "Megatron-LM README weak scaling, H100 (MFU)"
    runs += [SetRun("megatron-h100", v, megatron_h100_cases(v), what)
             for v in (DOCUMENTED, OUT_OF_BOX)]
    what = "Qwen3-235B-A22B with Megatron-Core, H100 and GB200 (TFLOP/s per GPU)"
    runs += [SetRun(MOE_SET, v, qwen3_cases(v), what) for v in (DOCUMENTED, OUT_OF_BOX)]
    return runs


# --- evaluation ------------------------------------------------------------------------------


@dataclass
class Judged:
    """A case with what the model says of it (NaN where not evaluated)."""

    case: Case
    predicted: float = math.nan
    error_percent: float = math.nan
    memory_gb: float = math.nan
    memory_error_percent: float = math.nan
    fits: bool | None = None
    well_formed: bool | None = None
    verdict: str = ""
    step_s: float = math.nan
    calibrated: float = math.nan
    calibrated_error_percent: float = math.nan
    extra: dict[str, Any] = field(default_factory=dict)


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    v = np.abs(np.asarray([x for x in values if math.isfinite(x)], dtype=float))
    if not v.size:
        return {"mean": None, "median": None, "max": None, "n": 0}
    return {"mean": float(np.mean(v)), "median": float(np.median(v)), "max": float(np.max(v)),
            "n": int(v.size)}


def judge(sets: Sequence[SetRun], evaluate: Callable[..., Any], *, x64: bool = True
          ) -> list[list[Judged]]:
    """Evaluate every expressible run of every set in one batched call (module doc)."""
    model = get_model(MODEL)
    judged = [[Judged(c) for c in s.cases] for s in sets]
    flat = [j for js in judged for j in js if j.case.inputs is not None]
    if not flat:
        return judged
    rows = [row_inputs(j.case, lifted=lifted) for lifted in (False, True) for j in flat]
    batch = {k: np.array([r[k] for r in rows], dtype=np.float64) for k in model.input_names}
    out = evaluate(model, x64=x64, **batch)
    n = len(flat)
    valid = np.asarray(getattr(out, model.validity))
    step_ms = np.asarray(out.step_time_ms)
    memory = np.asarray(out.memory_gb_per_gpu)
    for i, j in enumerate(flat):
        k = n + i
        c = j.case
        j.fits = bool(valid[i])
        j.well_formed = bool(valid[k])
        j.memory_gb = float(memory[k])
        j.step_s = float(step_ms[k]) / 1e3
        if not j.well_formed:
            outs = {f.name: np.asarray(getattr(out, f.name))[k].item() for f in model.outputs}
            j.verdict = model.verdict(rows[k], outs).split(" -- ", 1)[-1]
            continue
        if c.work is not None:
            j.predicted = c.work / j.step_s
        else:
            j.predicted = float(np.asarray(getattr(out, c.metric))[k])
        if math.isfinite(c.measured) and c.measured > 0:
            j.error_percent = 100.0 * (j.predicted / c.measured - 1.0)
        if math.isfinite(c.measured_memory_gb):
            j.memory_error_percent = 100.0 * (j.memory_gb / c.measured_memory_gb - 1.0)
    return judged


# Beyond the model's cluster set (what ``jaxmodel calibrate`` fits by default),
# the other achieved rates every GPU preset sets: the FP8 GEMM ceiling (most of
# Megatron-Bridge's rows train in FP8, so the bf16 ceiling alone cannot move
# them), the fused-attention fractions, the host's time per kernel and the
# hierarchical expert dispatcher's share of NVLink.  A GPU's fit takes those its
# runs use (``used_rates``).
RATES = ("fp8_matmul_efficiency", "attention_efficiency", "fa2_attention_efficiency",
         "host_kernel_us", "deepep_link_efficiency", "hybridep_link_efficiency")
# The relative change of a step that counts as a run using a rate, when the rate
# moves by RATE_PROBE.
RATE_PROBE = 1.1
USED = 1e-4


def used_rates(rows: Sequence[dict[str, float]], evaluate: Callable[..., Any]
               ) -> tuple[str, ...]:
    """The ``RATES`` that move some run's step: each scaled by ``RATE_PROBE`` in
    turn, all in one batched evaluation."""
    model = get_model(MODEL)
    probes = [dict(r) for r in rows]
    for name in RATES:
        probes += [{**r, name: r[name] * RATE_PROBE} for r in rows]
    batch = {k: np.array([r[k] for r in probes], dtype=np.float64) for k in model.input_names}
    step = np.asarray(evaluate(model, x64=True, **batch).step_time_ms).reshape(
        len(RATES) + 1, len(rows))
    change = np.abs(step[1:] / step[0] - 1.0)
    return tuple(n for n, c in zip(RATES, change, strict=True) if np.nanmax(c) > USED)


def calibrate_folds(sets: Sequence[SetRun], judged: list[list[Judged]],
                    cross_validate: Callable[..., np.ndarray], *, folds: int = FOLDS,
                    evaluate: Callable[..., Any] | None = None) -> dict[str, str]:
    """Fill ``calibrated`` of the out-of-the-box runs by k-fold per GPU (module doc).

    The fitted parameters are the model's cluster set, and with ``evaluate`` also
    the ``RATES`` that the GPU's runs use (``used_rates``).

    Returns a note per GPU that got no calibrated figure, and why.
    """
    model = get_model(MODEL)
    by_gpu: dict[str, list[Judged]] = {}
    for s, js in zip(sets, judged, strict=True):
        if s.variant.startswith(DOCUMENTED) and not s.variant.endswith(OUT_OF_BOX):
            continue
        for j in js:
            if math.isfinite(j.error_percent):
                by_gpu.setdefault(j.case.gpu, []).append(j)
    if not by_gpu:
        return {}
    size = max(len(js) for js in by_gpu.values())
    skipped = {}
    for gpu, js in by_gpu.items():
        rows = [row_inputs(j.case, lifted=True) for j in js]
        fit = tuple(model.cluster) + (used_rates(rows, evaluate) if evaluate else ())
        n = len(js)
        if n < 2:
            skipped[gpu] = "1 run: no other run to calibrate on"
            continue
        k = min(folds, n)
        assignment = np.arange(n) % k
        inputs = {name: np.array([r[name] for r in rows], dtype=np.float64)
                  for name in model.input_names}
        # A throughput scales as 1 / step: the measured step is the predicted one
        # times predicted / measured throughput.
        measured_ms = np.array([1e3 * j.step_s * j.predicted / j.case.measured for j in js])
        step_ms = cross_validate(inputs, measured_ms, assignment, "step_time_ms", fit,
                                 model=model, rows=size, num_folds=folds, select=True)
        for j, s_ms in zip(js, step_ms, strict=True):
            j.calibrated = j.predicted * (1e3 * j.step_s) / float(s_ms)
            j.calibrated_error_percent = 100.0 * (j.calibrated / j.case.measured - 1.0)
    return skipped


def repeats(js: Sequence[Judged]) -> dict[str, Any]:
    """The runs whose inputs are identical: one configuration measured more than once.

    Several sources list the same configuration in several releases; where those
    measurements differ, no model of the rows' inputs can match them all.  Per
    group of identical inputs (``m`` the lowest and ``M`` the highest measurement),
    one prediction ``p`` for the group misses some run by at least
    ``(M - m) / (M + m)`` (at ``p = 2 m M / (m + M)``), and the group's least summed
    |error| is ``min_p sum_i |p / m_i - 1|``, reached at one of the ``m_i`` (the sum
    is piecewise linear in ``p``).  The floors are these over the set: the largest
    group floor (``floor_max_percent``) and the least summed |error| over all of the
    set's scored runs (``floor_mean_percent``; a run measured once can be matched).
    """
    scored = [j for j in js if j.case.inputs is not None and math.isfinite(j.error_percent)]
    groups: dict[tuple, list[Judged]] = {}
    for j in scored:
        groups.setdefault(tuple(sorted(j.case.inputs.items())), []).append(j)
    found = []
    for g in groups.values():
        measured = np.array([j.case.measured for j in g], dtype=float)
        if len(g) < 2 or not np.all(measured > 0):
            continue
        low, high = float(measured.min()), float(measured.max())
        least = min(float(np.sum(np.abs(p / measured - 1.0))) for p in measured)
        found.append({"rows": [j.case.label for j in g], "measured": measured.tolist(),
                      "spread_percent": 100.0 * (high / low - 1.0),
                      "floor_percent": 100.0 * (high - low) / (high + low), "least_sum": least})
    found.sort(key=lambda r: -r["spread_percent"])
    return {
        "groups": len(found),
        "rows": sum(len(r["rows"]) for r in found),
        "floor_max_percent": max((r["floor_percent"] for r in found), default=0.0),
        "floor_mean_percent": (100.0 * sum(r["least_sum"] for r in found) / len(scored)
                               if scored else 0.0),
        "widest": [{k: v for k, v in r.items() if k != "least_sum"} for r in found[:3]],
    }


def summarise(s: SetRun, js: Sequence[Judged]) -> dict[str, Any]:
    """The table's line for one set and variant."""
    expressed = [j for j in js if j.case.inputs is not None]
    return {
        "set": s.name,
        "variant": s.variant,
        "description": s.description,
        "rows": len(js),
        "expressible": len(expressed),
        "not_expressible": [{"row": j.case.label, "reason": j.case.reason}
                            for j in js if j.case.inputs is None],
        "does_not_fit": sum(1 for j in expressed if j.well_formed and not j.fits),
        "invalid": [{"row": j.case.label, "verdict": j.verdict}
                    for j in expressed if j.well_formed is False],
        "approximations": dict(Counter(n for j in expressed for n in j.case.notes)),
        "error_percent": _stats([j.error_percent for j in expressed]),
        "memory_error_percent": _stats([j.memory_error_percent for j in expressed]),
        "calibrated_error_percent": _stats([j.calibrated_error_percent for j in expressed]),
        "repeats": repeats(js),
    }


def gpu_pairs(sets: Sequence[SetRun], judged: Sequence[Sequence[Judged]]
              ) -> list[dict[str, Any]]:
    """Per pair of GPUs, the workloads published on both (``Case.workload``; the
    out-of-the-box runs of every set): the measured speed ratio of the second GPU
    over the first against the predicted one, ``predicted ratio / measured ratio -
    1`` as the ratio's error.  A workload listed twice on one GPU counts its first
    row.  GPUs in preset order; ``same_layout`` counts the workloads the two ran
    on one layout."""
    runs: dict[str, dict[str, Judged]] = {}
    for s, js in zip(sets, judged, strict=True):
        if not s.variant.endswith(OUT_OF_BOX):
            continue
        for j in js:
            if j.case.workload and math.isfinite(j.error_percent):
                runs.setdefault(j.case.workload, {}).setdefault(j.case.gpu, j)
    order = {name: i for i, name in enumerate(GPUS)}

    def rank(name: str) -> tuple[int, str]:
        return order.get(name, len(order)), name

    found: dict[tuple[str, str], list[tuple[float, float, bool]]] = {}
    for on in runs.values():
        names = sorted(on, key=rank)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                ja, jb = on[a], on[b]
                found.setdefault((a, b), []).append(
                    (jb.case.measured / ja.case.measured, jb.predicted / ja.predicted,
                     ja.case.layout == jb.case.layout))
    pairs = []
    for (a, b), ratios in found.items():
        measured = np.array([r[0] for r in ratios])
        predicted = np.array([r[1] for r in ratios])
        pairs.append({"gpus": [a, b], "workloads": len(ratios),
                      "same_layout": sum(r[2] for r in ratios),
                      "measured_ratio_median": float(np.median(measured)),
                      "predicted_ratio_median": float(np.median(predicted)),
                      "ratio_error_percent": _stats(100.0 * (predicted / measured - 1.0))})
    pairs.sort(key=lambda r: (rank(r["gpus"][0]), rank(r["gpus"][1])))
    return pairs


def run_row(j: Judged) -> dict[str, Any]:
    """One run, for the JSON document."""
    c = j.case

    def num(v):
        return v if isinstance(v, float) and math.isfinite(v) else None

    return {"set": c.set, "row": c.label, "gpu": c.gpu, "layout": c.layout,
            "expressible": c.inputs is not None, "reason": c.reason,
            "approximations": list(c.notes), "measured": num(c.measured),
            "predicted": num(j.predicted), "error_percent": num(j.error_percent),
            "fits": j.fits, "memory_gb": num(j.memory_gb), "gpu_memory_gb": num(c.memory_gb),
            "measured_memory_gb": num(c.measured_memory_gb),
            "memory_error_percent": num(j.memory_error_percent),
            "calibrated": num(j.calibrated),
            "calibrated_error_percent": num(j.calibrated_error_percent)}


def find_row(row: str, set_name: str | None = None) -> tuple[SetRun, Case]:
    """The out-of-the-box run ``row`` (its label in its source: ``mb0039``, ``step 6: CUDA
    Graphs``), in set ``set_name`` where given (a label may repeat across sets).

    Raises:
      InputError: no set of that name, no run of that label, a label in several sets
        without ``set_name``, or a run the model cannot express (with its reason).
    """
    sets = [s for s in all_sets() if s.variant.endswith(OUT_OF_BOX)]
    names = [s.name for s in sets]
    if set_name is not None and set_name not in names:
        raise InputError("--set", set_name, "one of " + ", ".join(names) + closest(set_name, names))
    found = [(s, c) for s in sets if set_name in (None, s.name) for c in s.cases
             if c.label == row]
    if not found:
        labels = [c.label for s in sets if set_name in (None, s.name) for c in s.cases]
        where = f"set {set_name}'s" if set_name else "a validation set's"
        raise InputError("--row", row, f"the label of {where} run, as in `jaxmodel validate "
                         f"--all --format json` (runs[].row){closest(row, labels)}")
    if len(found) > 1:
        raise InputError("--row", row, "with --set, one of " + ", ".join(s.name for s, _ in found)
                         + " (the label is in each)")
    s, c = found[0]
    if c.inputs is None:
        raise InputError("--row", row, f"an expressible run; the model cannot express it: "
                         f"{c.reason}")
    return s, c


def row_inputs(case: Case, *, lifted: bool = False) -> dict[str, float]:
    """Every input of an expressible run: the model's defaults, the row's inputs, and
    its GPU's memory as the capacity it is judged against (``lifted``: no limit, so
    that a step is predicted whatever the memory model says)."""
    model = get_model(MODEL)
    return {**model.defaults, **case.inputs,
            model.memory_capacity: LIFTED_MEMORY_GB if lifted else case.memory_gb}


def judge_row(s: SetRun, case: Case, evaluate: Callable[..., Any], *, x64: bool = True
              ) -> dict[str, Any]:
    """One run as ``validate --all`` judges it (``judge``, ``run_row``)."""
    (j,), = judge([SetRun(s.name, s.variant, [case], s.description)], evaluate, x64=x64)
    return dict(run_row(j), variant=s.variant, source=s.description)


def validate_all(evaluate: Callable[..., Any], *,
                 cross_validate: Callable[..., np.ndarray] | None = None,
                 x64: bool = True) -> dict[str, Any]:
    """Every set, out of the box (and with documented settings where they differ).

    Args:
      evaluate: ``jaxmodel.api.evaluate`` (or any function of its signature).
      cross_validate: ``jaxmodel.calibration.cross_validate`` for the calibrated
        column, or None (no calibration).

    Returns:
      ``{"sets": [one summary per line], "runs": [per run], "calibration": {gpu: why
      not}}``; with ``calibrated`` True when ``cross_validate`` was given.
    """
    sets = all_sets()
    judged = judge(sets, evaluate, x64=x64)
    skipped = (calibrate_folds(sets, judged, cross_validate, evaluate=evaluate)
               if cross_validate else {})
    return {
        "rule": "out of the box: per row only what the row and its source document; the "
                "cluster parameters from the GPU preset",
        "calibrated": cross_validate is not None,
        "sets": [summarise(s, js) for s, js in zip(sets, judged, strict=True)],
        "runs": [dict(run_row(j), variant=s.variant)
                 for s, js in zip(sets, judged, strict=True) for j in js],
        "gpu_pairs": gpu_pairs(sets, judged),
        "calibration_skipped": skipped,
    }
