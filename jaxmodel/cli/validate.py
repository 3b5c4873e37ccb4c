"""``jaxmodel validate``: the refined model against the Megatron-LM SC21 runs."""


import json
from typing import Annotated, Literal

import typer

from jaxmodel.cli.common import reports_errors
from jaxmodel.errors import InputError
from jaxmodel.validate import read_runs, summary, validate
from jaxmodel.validate_moe import read_moe_runs, summary_moe, validate_moe

SETS = ("sc21", "qwen3-235b")


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
                     help="CSV of runs (columns as tests/data/sc21_table1.csv); "
                          "default: the SC21 Table 1 rows built in"),
    ] = None,
    output_format: Annotated[
        Literal["table", "json"], typer.Option("--format", help="table (Markdown) or json")
    ] = "table",
    run_set: Annotated[
        str, typer.Option("--set", help="the published runs: sc21 (Megatron-LM SC21 Table 1) "
                          "or qwen3-235b (Qwen3-235B-A22B MoE with Megatron-Core)")
    ] = "sc21",
) -> None:
    """Predicted against measured per-GPU TFLOP/s and step time of published runs."""
    if run_set not in SETS:
        raise InputError("set", run_set, "one of " + ", ".join(SETS))
    if run_set == "qwen3-235b":
        rows = validate_moe(read_moe_runs(data) if data else None)
        stats = summary_moe(rows)
        if output_format == "json":
            typer.echo(json.dumps({"runs": rows, "summary": stats}))
        else:
            typer.echo(render_moe(rows, stats))
        return
    rows = validate(read_runs(data) if data else None)
    stats = summary(rows)
    if output_format == "json":
        typer.echo(json.dumps({"runs": rows, "summary": stats}))
    else:
        typer.echo(render(rows, stats))
