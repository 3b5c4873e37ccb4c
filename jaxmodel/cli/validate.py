"""``jaxmodel validate``: the refined model against the Megatron-LM SC21 runs."""


import json
from typing import Annotated, Literal

import typer

from jaxmodel.cli.common import ConfigOption, reports_errors
from jaxmodel.config import load_config
from jaxmodel.models import get_model
from jaxmodel.validate import calibrate_runs, read_runs, summary, validate


def render(rows, stats) -> str:
    """The validation table as Markdown (the README carries the same)."""
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


@reports_errors
def validate_command(
    data: Annotated[
        str | None,
        typer.Option("--data", metavar="FILE",
                     help="CSV of runs (columns as tests/data/sc21_table1.csv); "
                          "default: the SC21 Table 1 rows built in"),
    ] = None,
    output_format: Annotated[
        Literal["table", "json"], typer.Option("--format", help="table (Markdown) or json")
    ] = "table",
    config: ConfigOption = None,
    calibrate: Annotated[bool, typer.Option(
        "--calibrate", help="also fit the cluster parameters to these runs and print the "
        "leave-one-out error beside the uncalibrated one")] = False,
    fit: Annotated[str | None, typer.Option(
        "--fit", metavar="NAME[,NAME...]", help="with --calibrate: the inputs to fit "
        "(default: the refined model's cluster parameters)")] = None,
    bootstrap: Annotated[int, typer.Option(
        "--bootstrap", metavar="N", help="with --calibrate: bootstrap resamples")] = 200,
) -> None:
    """Predicted against measured per-GPU TFLOP/s and step time, SC21 Table 1."""
    overrides = load_config(config, get_model("refined")) if config else None
    runs = read_runs(data) if data else None
    rows = validate(runs, overrides=overrides)
    stats = summary(rows)
    cal = calibrate_runs(runs, fit, overrides=overrides, bootstrap=bootstrap) if calibrate \
        else None
    if output_format == "json":
        doc = {"runs": rows, "summary": stats}
        if cal is not None:
            doc["calibration"] = cal.to_dict()
        typer.echo(json.dumps(doc))
    else:
        typer.echo(render(rows, stats))
        if cal is not None:
            typer.echo("")
            typer.echo(render_calibration(cal, stats))
