"""``jaxmodel calibrate``: fit a model's cluster parameters to measured runs."""


import json
import os
from typing import Annotated, Literal

import typer

from jaxmodel.calibration import DEFAULT_BOOTSTRAP, DEFAULT_SUGGEST, Calibration, calibrate
from jaxmodel.cli.common import (
    PRESET_OPTIONS,
    ConfigOption,
    ModelOption,
    gather_inputs,
    reports_errors,
    with_input_options,
)
from jaxmodel.errors import InputError


def render(cal: Calibration) -> str:
    """The calibration for a person: parameters, runs, errors, warnings, suggestions."""
    pct = int(round(cal.confidence * 100))
    b = cal.bootstrap
    lines = [
        f"Calibrated {len(cal.fit)} parameter{'s' if len(cal.fit) > 1 else ''} of model "
        f"{cal.model!r} on {len(cal.runs)} runs ({cal.source}), measured "
        f"{', '.join(cal.outputs)}; {b['resamples']} bootstrap resamples "
        f"({b['converged']} converged within the step limit), {cal.fit_s:.1f} s",
        "",
        f"{'parameter':<26}{'start':>12}{'fitted':>12}   {pct}% interval",
    ]
    for name in cal.fit:
        lo, hi = cal.intervals[name]
        lines.append(f"{name:<26}{cal.start[name]:>12.4g}{cal.values[name]:>12.4g}   "
                     f"{lo:.4g} .. {hi:.4g}")
    lines.append("")
    width = max(12, *(len(r["label"]) + 2 for r in cal.runs))
    for o in cal.outputs:
        lines.append(f"{'run':<{width}}{'measured ' + o:>28}{'before':>10}{'after':>10}"
                     f"{'left out':>10}")
        for r in cal.runs:
            meas = r["measured_" + o]
            if meas != meas:  # not measured in this run
                continue
            errs = "".join(f"{r[f'{k}_{o}_error_percent']:>+9.1f}%"
                           for k in ("before", "after", "leave_one_out"))
            lines.append(f"{r['label']:<{width}}{meas:>28.6g}{errs}")
        lines.append("")
    e = cal.errors
    lines.append("error, mean / max |%|: " + ", ".join(
        f"{label} {e[k]['mean_abs_percent']:.2f} / {e[k]['max_abs_percent']:.2f}"
        for k, label in (("before", "before"), ("after", "after"),
                         ("leave_one_out", "leave-one-out (the honest figure)"))))
    for w in cal.warnings:
        lines.append(f"warning: {w}")
    if cal.suggestions:
        lines.append("")
        lines.append("Measure next (where the fitted parameters' uncertainty moves the "
                     "prediction most):")
        for s in cal.suggestions:
            preds = ", ".join(
                f"{o} {s['predicted_' + o]:.4g} ({pct}% {s['low_' + o]:.4g} .. "
                f"{s['high_' + o]:.4g})" for o in cal.outputs)
            lines.append(f"  {s['run']}: {preds}")
    return "\n".join(lines)


@with_input_options
@reports_errors
def calibrate_command(
    inputs: dict,
    runs: Annotated[str, typer.Argument(
        metavar="RUNS", help="CSV or Parquet file, one row per measured run: input columns "
        "and measured_<output> columns (e.g. measured_step_time_ms)")],
    fit: Annotated[str | None, typer.Option(
        "--fit", metavar="NAME[,NAME...]",
        help="continuous inputs to fit (default: the model's cluster parameters)")] = None,
    model: ModelOption = "seed",
    config: ConfigOption = None,
    output: Annotated[str | None, typer.Option(
        "-o", "--output", metavar="FILE",
        help="write the fitted values as a config file (calibrated.toml) for --config "
             "and a sweep spec's base table (config = FILE)")] = None,
    output_format: Annotated[
        Literal["table", "json"], typer.Option("--format", help="table or json")] = "table",
    bootstrap: Annotated[int, typer.Option(
        "--bootstrap", metavar="N", help="bootstrap resamples for the intervals")
    ] = DEFAULT_BOOTSTRAP,
    seed: Annotated[int, typer.Option("--seed", help="random seed of the resamples")] = 0,
    suggest: Annotated[int, typer.Option(
        "--suggest", metavar="N", help="layouts to suggest measuring next")] = DEFAULT_SUGGEST,
) -> None:
    """Fit cluster parameters (efficiencies, latencies) to measured runs, with intervals."""
    m, values = gather_inputs(model, config, inputs)
    if output and not os.access(os.path.dirname(os.path.abspath(output)), os.W_OK):
        raise InputError("--output", output, "a file in an existing, writable folder")
    typed = {k: values[k] for k, v in inputs.items() if v is not None and k not in PRESET_OPTIONS}
    cal = calibrate(runs, fit, model=m, gpu=inputs.get("gpu"), llm=inputs.get("llm"),
                    config=config, bootstrap=bootstrap, seed=seed, suggest=suggest, **typed)
    if output:
        cal.write(output)
    if output_format == "json":
        doc = cal.to_dict()
        doc["written"] = output
        typer.echo(json.dumps(doc))
    else:
        typer.echo(render(cal))
        if output:
            typer.echo(f"\nwrote {output}")
