"""One evaluation as the seed-format JSON document or a table for a person.

Rounding follows ``SEED_MODEL.md``: ms to 3 decimals, percentages to 1,
TFLOP/s and per-GPU tokens/s to 1, throughput to 0 (printed as a float),
integers as integers, profile efficiencies to 2 and profile bandwidths to 1.
NaN (an invalid layout) is written as JSON ``null``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from jaxmodel.models import Model

_DECIMALS_BY_NAME = {"throughput_tokens_s": 0, "per_gpu_tokens_s": 1}
_DECIMALS_BY_UNIT = {"ms": 3, "%": 1, "TFLOP/s": 1, "GB": 2}


def _round(value: float, decimals: int) -> float | None:
    return None if not math.isfinite(value) else round(value, decimals) + 0.0


def printed_outputs(model: Model, outputs: Mapping[str, Any]) -> dict[str, Any]:
    """Output values rounded as the seed file prints them (only the seed's keys
    and the model's other printable outputs; ``regime`` is carried by the verdict)."""
    row: dict[str, Any] = {}
    for f in model.outputs:
        if f.name == "regime":
            continue
        v = outputs[f.name]
        if f.kind == "int":
            row[f.name] = int(v)
        elif f.kind == "bool":
            row[f.name] = bool(v)
        elif f.kind == "category":
            row[f.name] = v if isinstance(v, str) else f.categories[int(v)]
        else:
            decimals = _DECIMALS_BY_NAME.get(f.name, _DECIMALS_BY_UNIT.get(f.unit, 3))
            row[f.name] = _round(float(v), decimals)
    return row


def printed_inputs(model: Model, inputs: Mapping[str, float]) -> dict[str, Any]:
    return {f.name: int(inputs[f.name]) if f.integer else float(inputs[f.name])
            for f in model.inputs}


def seed_document(
    model: Model,
    inputs: Mapping[str, float],
    outputs: Mapping[str, Any],
    verdict: str,
    *,
    curves: Mapping[str, tuple] | None,
    node: str,
    wall_ms: float,
) -> dict[str, Any]:
    """The seed-format document: model, inputs, outputs, profile, steps, node, wall_ms.

    The seed file's top-level ``compute_ms`` (this evaluation's wall time) is
    ``wall_ms`` here, apart from ``profile.compute_ms`` (the model's compute term).
    """
    out = printed_outputs(model, outputs)
    out["verdict"] = verdict
    doc: dict[str, Any] = {
        "model": model.description,
        "inputs": printed_inputs(model, inputs),
        "outputs": out,
    }
    steps = 0
    if curves is not None:
        gpus, eff_g = curves["eff_vs_gpus"]
        bws, eff_b = curves["eff_vs_bw"]
        steps = len(gpus) + len(bws)
        # The GPU counts are rounded to whole replicas, so neighbours can repeat
        # (the seed file lists [32, 50.84] eight times): each point once.
        points = [[int(g), _round(float(e), 2)] for g, e in zip(gpus, eff_g, strict=True)]
        doc["profile"] = {
            "eff_vs_gpus": [pt for i, pt in enumerate(points) if i == 0 or pt != points[i - 1]],
            "eff_vs_bw": [[_round(float(b), 1), _round(float(e), 2)]
                          for b, e in zip(bws, eff_b, strict=True)],
            "compute_ms": _round(float(outputs["compute_time_ms"]), 3),
            "tp_ms": _round(float(outputs["tp_comm_ms"]), 3),
            "pp_ms": _round(float(outputs["pp_comm_ms"]), 3),
            "bubble_ms": _round(float(outputs["pipeline_bubble_ms"]), 3),
            "dp_ms": _round(float(outputs["dp_allreduce_ms"]), 3),
            "step_ms": _round(float(outputs["step_time_ms"]), 3),
            **curves["at"],
            "mfu_percent": _round(float(outputs["mfu_percent"]), 1),
        }
    doc["steps"] = steps
    doc["node"] = node
    doc["wall_ms"] = round(wall_ms, 1)
    return doc


def json_safe(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float replaced by ``None`` (JSON null):
    an invalid layout, or a value past float32's range."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def to_json(doc: Mapping[str, Any]) -> str:
    """One line of JSON, as the seed file is written (non-finite values as null)."""
    return json.dumps(json_safe(doc), allow_nan=False)


def table(doc: Mapping[str, Any], model: Model) -> str:
    """The document for a person: the model's step-time terms, headline rates, verdict."""
    out = doc["outputs"]
    breakdown = [(t.title or t.label, t.output) for t in model.used_terms(doc["inputs"])]
    lines = [doc["model"], ""]
    inputs = "  ".join(f"{k}={v}" for k, v in doc["inputs"].items())
    lines += [f"inputs: {inputs}", ""]
    step = out["step_time_ms"]
    width = max(len(label) for label, _ in breakdown)
    lines.append(f"{'step-time term':<{width}}  {'ms':>12}  {'share':>6}")
    for label, key in breakdown:
        v = out[key]
        if v is None:
            lines.append(f"{label:<{width}}  {'-':>12}  {'-':>6}")
        else:
            lines.append(f"{label:<{width}}  {v:>12,.3f}  {100.0 * v / step:>5.1f}%")
    total = "-" if step is None else f"{step:,.3f}"
    lines.append(f"{'step time':<{width}}  {total:>12}  {'100.0%' if step else '-':>6}")
    lines.append("")
    shape = "" if model.layout is None else model.layout.report_summary(doc["inputs"], out) + " "
    lines.append(f"layout: {shape}"
                 f"({out['used_gpus']} GPUs used, {out['idle_gpus']} idle, "
                 f"valid: {'yes' if out[model.validity] else 'no'})")
    lines.append(f"bottleneck: {out['bottleneck']}")
    if step is not None:
        hfu = f"   HFU: {out['hfu_percent']}%" if out.get("hfu_percent") is not None else ""
        lines.append(f"MFU: {out['mfu_percent']}%{hfu}   achieved: "
                     f"{out['achieved_tflops_per_gpu']} TFLOP/s per GPU   throughput: "
                     f"{out['throughput_tokens_s']:,.0f} tokens/s "
                     f"({out['per_gpu_tokens_s']:,.0f} per GPU)")
    lines += memory_lines(model, doc["inputs"], out)
    lines += ["", f"verdict: {out['verdict']}"]
    return "\n".join(lines)


# Memory outputs a model may have (the refined model has all of them), as
# (label, output) of the breakdown under the total.
_MEMORY_PARTS = (
    ("weights, gradients, optimizer", "model_state_gb_per_gpu"),
    ("activations", "activation_gb_per_gpu"),
    ("workspaces and reserved", "other_memory_gb_per_gpu"),
)


def memory_lines(model: Model, inputs: Mapping[str, Any], out: Mapping[str, Any]) -> list[str]:
    """Memory per GPU against the GPU's (``Model.memory_capacity``), whether it
    fits, and its breakdown.

    Empty for a model without ``memory_gb_per_gpu`` (the seed has no memory
    limit; ``jaxmodel best`` says so).  A layout that is not well formed has no
    memory figure (null) and says so.
    """
    if "memory_gb_per_gpu" not in out:
        return []
    need = out["memory_gb_per_gpu"]
    have = None if model.memory_capacity is None else inputs.get(model.memory_capacity)
    if need is None:
        return ["", "memory per GPU: - (the layout is not well formed)"]
    of = "" if have is None else f" of {have:g} GB"
    fits = out.get("fits_in_memory")
    verdict = ""
    if fits is not None and have is not None:
        verdict = (f" (fits: yes, {have - need:,.2f} GB free)" if fits
                   else f" (fits: no, {need - have:,.2f} GB over)")
    lines = ["", f"memory per GPU: {need:,.2f} GB{of}{verdict}"]
    parts = [(label, out[key]) for label, key in _MEMORY_PARTS if out.get(key) is not None]
    width = max((len(label) for label, _ in parts), default=0)
    lines += [f"  {label:<{width}}  {v:>10,.2f} GB" for label, v in parts]
    return lines
