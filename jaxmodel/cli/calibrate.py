"""``jaxmodel calibrate``: fit a model's cluster parameters to measured runs."""


import json
import os
from typing import Annotated, Literal

import typer

from jaxmodel.cli.common import (
    PRESET_OPTIONS,
    ConfigOption,
    ModelOption,
    gather_inputs,
    reports_errors,
    with_input_options,
)
from jaxmodel.documents import calibration_text
from jaxmodel.errors import InputError
from jaxmodel.spec_tables import DEFAULT_BOOTSTRAP, DEFAULT_SUGGEST


@with_input_options
@reports_errors
def calibrate_command(
    inputs: dict,
    runs: Annotated[str, typer.Argument(
        metavar="RUNS", help="CSV or Parquet file, one row per measured run: input columns "
        "and measured_<output> columns (e.g. measured_step_time_ms)")],
    fit: Annotated[str | None, typer.Option(
        "--fit", metavar="NAME[,NAME...]",
        help="continuous inputs to fit (default: those of the model's cluster parameters "
             "the runs can tell apart)")] = None,
    model: ModelOption = None,
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
    from jaxmodel.calibration import calibrate  # jax, once the command line is checked

    cal = calibrate(runs, fit, model=m, gpu=inputs.get("gpu"), llm=inputs.get("llm"),
                    config=config, bootstrap=bootstrap, seed=seed, suggest=suggest, **typed)
    if output:
        cal.write(output)
    if output_format == "json":
        doc = cal.to_dict()
        doc["written"] = output
        typer.echo(json.dumps(doc))
    else:
        typer.echo(calibration_text(cal))
        if output:
            typer.echo(f"\nwrote {output}")
