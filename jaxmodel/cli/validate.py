"""``jaxmodel validate``: the refined model against published training runs."""


import json
from typing import Annotated, Literal

import typer

from jaxmodel.cli.common import ConfigOption, reports_errors
from jaxmodel.config import load_config
from jaxmodel.errors import SpecError
from jaxmodel.models import get_model
from jaxmodel.validate import (
    SETS,
    builtin_table,
    calibrate_runs,
    read_table,
    summary,
    table_runs,
    table_summary,
    validate_table,
)
from jaxmodel.validate_moe import MOE_SET, read_moe_runs, summary_moe, validate_moe


def render(rows, stats) -> str:
    """The SC21 validation table as Markdown (the README carries the same)."""
    lines = [
        "| params (B) | GPUs | layout | measured TFLOP/s | predicted TFLOP/s | error "
        "| measured step (s) | predicted step (s) | memory (GB) |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['params_b']:g} | {r['gpus']} | {r['layout']} | {r['measured_tflops']:.0f} "
            f"| {r['predicted_tflops']:.1f} | {r['tflops_error_percent']:+.1f}% "
            f"| {r['measured_step_s']:.2f} | {r['predicted_step_s']:.2f} "
            f"| {r['memory_gb_per_gpu']:.1f} |"
        )
    lines.append("")
    lines.append(f"mean absolute error {stats['mean_abs_error_percent']:.1f}%, "
                 f"max {stats['max_abs_error_percent']:.1f}% over {stats['runs']} runs "
                 "(per-GPU TFLOP/s; measured step = eq. 3 FLOPs / (GPUs x measured TFLOP/s))")
    return "\n".join(lines)


def render_table(rows, stats, what: str) -> str:
    """Any validation table as Markdown: measured and predicted ``what`` per run."""
    lines = [f"| params (B) | GPUs | layout | measured {what} | predicted {what} | error "
             "| memory (GB) |", "|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['params_b']:g} | {r['gpus']} | {r['layout']} | {r['measured']:.1f} "
                     f"| {r['predicted']:.1f} | {r['error_percent']:+.1f}% "
                     f"| {r['memory_gb_per_gpu']:.1f} |")
    lines.append("")
    lines.append(f"mean absolute error {stats['mean_abs_error_percent']:.1f}%, "
                 f"max {stats['max_abs_error_percent']:.1f}% over {stats['runs']} runs ({what})")
    return "\n".join(lines)


def render_calibration(cal, stats) -> str:
    """The fit on the validation runs: values, per-run errors, both mean errors."""
    pct = int(round(cal.confidence * 100))
    lines = ["Calibrated on these runs (" + ", ".join(cal.fit) + "):", ""]
    lines.append(f"| parameter | default | fitted | {pct}% interval |")
    lines.append("|---|---:|---:|---|")
    for name in cal.fit:
        lo, hi = cal.intervals[name]
        lines.append(f"| {name} | {cal.start[name]:.4g} | {cal.values[name]:.4g} "
                     f"| {lo:.4g} .. {hi:.4g} |")
    lines.append("")
    lines.append("| run | uncalibrated | calibrated | left out |")
    lines.append("|---|---:|---:|---:|")
    o = cal.outputs[0]
    for r in cal.runs:
        lines.append(f"| {r['label']} | {r[f'before_{o}_error_percent']:+.1f}% "
                     f"| {r[f'after_{o}_error_percent']:+.1f}% "
                     f"| {r[f'leave_one_out_{o}_error_percent']:+.1f}% |")
    e = cal.errors
    lines.append("")
    lines.append(
        f"mean absolute error: uncalibrated {stats['mean_abs_error_percent']:.1f}% "
        f"(max {stats['max_abs_error_percent']:.1f}%), calibrated leave-one-out "
        f"{e['leave_one_out']['mean_abs_percent']:.1f}% "
        f"(max {e['leave_one_out']['max_abs_percent']:.1f}%), calibrated in-sample "
        f"{e['after']['mean_abs_percent']:.1f}%")
    for w in cal.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def render_moe(rows, stats) -> str:
    """The Qwen3-235B MoE validation table as Markdown."""
    lines = [
        "| GPU | precision | seq | layout | dispatcher | measured TFLOP/s | predicted TFLOP/s "
        "| error | measured step (s) | predicted step (s) | exposed a2a (s) | memory (GB) |",
        "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        mark = "" if r["scored"] else " (beside)"
        lines.append(
            f"| {r['gpu']}{mark} | {r['precision']} | {r['seq_length']} | {r['layout']} "
            f"| {r['dispatcher']} | {r['measured_tflops']:.0f} | {r['predicted_tflops']:.1f} "
            f"| {r['tflops_error_percent']:+.1f}% | {r['measured_step_s']:.2f} "
            f"| {r['predicted_step_s']:.2f} | {r['moe_comm_s']:.2f} "
            f"| {r['memory_gb_per_gpu']:.0f} |")
    lines.append("")
    lines.append(f"H100 rows: mean absolute error {stats['mean_abs_error_percent']:.1f}%, max "
                 f"{stats['max_abs_error_percent']:.1f}% over {stats['runs']} runs (per-GPU "
                 "TFLOP/s as Megatron-LM counts them); GB200 rows shown beside, not scored")
    return "\n".join(lines)


@reports_errors
def validate_command(
    data: Annotated[
        str | None,
        typer.Option("--data", metavar="FILE",
                     help="CSV of runs: SC21 columns (as tests/data/sc21_table1.csv, measured "
                          "TFLOP/s) or Megatron-LM README columns (MFU); it names its GPU and "
                          "settings in a 'gpu' column, in a '# jaxmodel-validate: gpu=NAME, "
                          "input=value' line, or with --set"),
    ] = None,
    set_name: Annotated[
        str | None,
        typer.Option("--set", metavar="NAME",
                     help="validation set: " + ", ".join(f"{s.name} ({s.description})"
                                                         for s in SETS.values())
                          + f", {MOE_SET} (Qwen3-235B-A22B MoE with Megatron-Core)"
                          + "; with --data, the settings for the file's rows; default sc21"),
    ] = None,
    output_format: Annotated[
        Literal["table", "json"], typer.Option("--format", help="table (Markdown) or json")
    ] = "table",
    config: ConfigOption = None,
    calibrate: Annotated[bool, typer.Option(
        "--calibrate", help="also fit the cluster parameters to these runs and print the "
        "leave-one-out error beside the uncalibrated one (TFLOP/s sets)")] = False,
    fit: Annotated[str | None, typer.Option(
        "--fit", metavar="NAME[,NAME...]", help="with --calibrate: the inputs to fit "
        "(default: the refined model's cluster parameters)")] = None,
    bootstrap: Annotated[int, typer.Option(
        "--bootstrap", metavar="N", help="with --calibrate: bootstrap resamples")] = 200,
) -> None:
    """Predicted against measured: SC21 Table 1 (TFLOP/s and step time), Megatron-LM H100 (MFU)."""
    if set_name == MOE_SET and (config or calibrate):
        raise SpecError(f"--set: got {MOE_SET!r} with --config/--calibrate; allowed: "
                        "sc21, megatron-h100 or a --data file")
    if set_name == MOE_SET:
        rows = validate_moe(read_moe_runs(data) if data else None)
        stats = summary_moe(rows)
        if output_format == "json":
            typer.echo(json.dumps({"set": MOE_SET, "runs": rows, "summary": stats}))
        else:
            typer.echo(render_moe(rows, stats))
        return
    table = read_table(data, set_name) if data else builtin_table(set_name or "sc21")
    overrides = load_config(config, get_model("refined")) if config else None
    rows = validate_table(table, overrides=overrides)
    stats = table_summary(rows)
    chosen = SETS[table.set_name]
    cal = None
    if calibrate:
        if "tflops_error_percent" not in rows[0]:
            raise SpecError(f"--calibrate: got the {table.set_name!r} set; allowed: runs with "
                            "SC21 Table 1 columns (measured TFLOP/s)")
        cal = calibrate_runs(table_runs(table), fit, overrides=overrides, bootstrap=bootstrap)
    if output_format == "json":
        doc = {"set": chosen.name, "gpu": table.header.get("gpu", chosen.gpu),
               "settings": {**chosen.settings, **{k: v for k, v in table.header.items()
                                                  if k not in ("set", "gpu")}},
               "assumed": table.assumed or None, "runs": rows, "summary": stats}
        if cal is not None:
            doc["calibration"] = cal.to_dict()
        typer.echo(json.dumps(doc))
        return
    lines = [f"set: {chosen.name} ({chosen.description}); GPU "
             f"{table.header.get('gpu', chosen.gpu)}"]
    if table.assumed:
        lines.append(f"assumed: {table.assumed}")
    if table.kind == "tflops" and "tflops_error_percent" in rows[0]:
        lines.append(render(rows, summary(rows)))
    else:
        what = "TFLOP/s" if table.kind == "tflops" else "MFU %"
        lines.append(render_table(rows, stats, what))
    if cal is not None:
        lines += ["", render_calibration(cal, summary(rows))]
    typer.echo("\n".join(lines))
