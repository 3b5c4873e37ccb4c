"""``jaxmodel validate``: the refined model against the Megatron-LM SC21 runs."""


import json
from typing import Annotated, Literal

import typer

from jaxmodel.cli.common import reports_errors
from jaxmodel.validate import read_runs, summary, validate


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
) -> None:
    """Predicted against measured per-GPU TFLOP/s and step time, SC21 Table 1."""
    rows = validate(read_runs(data) if data else None)
    stats = summary(rows)
    if output_format == "json":
        typer.echo(json.dumps({"runs": rows, "summary": stats}))
    else:
        typer.echo(render(rows, stats))
