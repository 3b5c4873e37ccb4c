"""``jaxmodel validate``: the refined model against published training runs."""


import json
from typing import Annotated, Literal

import typer

from jaxmodel.cli.common import ConfigOption, reports_errors
from jaxmodel.config import load_config
from jaxmodel.documents import (
    all_validation_text,
    evaluation_document,
    moe_validation_text,
    row_validation_text,
    validation_document,
    validation_markdown,
    validation_text,
)
from jaxmodel.errors import SpecError
from jaxmodel.models import get_model
from jaxmodel.models.validation import (
    SETS,
    builtin_table,
    read_table,
    table_runs,
    table_summary,
    validate_table,
)
from jaxmodel.models.validation_moe import MOE_SET, read_moe_runs, summary_moe, validate_moe


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
        Literal["table", "json", "markdown"],
        typer.Option("--format", help="table (Markdown) or json; with --all also markdown "
                     "(the docs/validation.md page)")
    ] = "table",
    config: ConfigOption = None,
    calibrate: Annotated[bool, typer.Option(
        "--calibrate", help="also fit the cluster parameters to these runs and print the "
        "leave-one-out error beside the uncalibrated one (TFLOP/s sets)")] = False,
    fit: Annotated[str | None, typer.Option(
        "--fit", metavar="NAME[,NAME...]", help="with --calibrate: the inputs to fit "
        "(default: those of the refined model's cluster parameters the runs can tell "
        "apart)")] = None,
    bootstrap: Annotated[int, typer.Option(
        "--bootstrap", metavar="N", help="with --calibrate: bootstrap resamples")] = 200,
    every_set: Annotated[bool, typer.Option(
        "--all", help="every validation set in one table, out of the box (and with the "
        "existing sets' documented settings): rows, expressible, does not fit, |error|")] = False,
    calibrated: Annotated[bool, typer.Option(
        "--calibrated", help="with --all: add k-fold calibrated errors (per GPU, k = 5; "
        "minutes)")] = False,
    row: Annotated[str | None, typer.Option(
        "--row", metavar="LABEL", help="one published run of --all's sets (its label: "
        "mb0039, mg0005, ...; with --set where a label is in several sets), out of the "
        "box: measured against predicted, the approximations, the step-time terms; "
        "--format json writes an eval document whose inputs --config reads")] = None,
    output: Annotated[str | None, typer.Option(
        "-o", "--output", metavar="FILE", help="with --all or --row: write the result to "
        "FILE instead of printing it")] = None,
) -> None:
    """Predicted against measured: SC21 Table 1 (TFLOP/s and step time), Megatron-LM H100 (MFU);
    --all: every set in one table (docs/validation.md)."""
    if row is not None:
        _validate_row(row, every_set, data, set_name, config, calibrate or fit is not None,
                      calibrated, output_format, output)
        return
    if every_set:
        _validate_all(data, set_name, config, calibrate or fit is not None, calibrated,
                      output_format, output)
        return
    for flag, given in (("--calibrated", calibrated), ("--output", output),
                        ("--format markdown", output_format == "markdown")):
        if given:
            raise SpecError(f"{flag}: allowed only with --all"
                            + (" or --row" if flag == "--output" else ""))
    if set_name == MOE_SET and (config or calibrate):
        raise SpecError(f"--set: got {MOE_SET!r} with --config/--calibrate; allowed: "
                        "sc21, megatron-h100 or a --data file")
    from jaxmodel.profile import answer as evaluate  # on the host, no compile (issue 26)

    if set_name == MOE_SET:
        rows = validate_moe(read_moe_runs(data) if data else None, evaluate=evaluate)
        stats = summary_moe(rows)
        if output_format == "json":
            typer.echo(json.dumps({"set": MOE_SET, "runs": rows, "summary": stats}))
        else:
            typer.echo(moe_validation_text(rows, stats))
        return
    table = read_table(data, set_name) if data else builtin_table(set_name or "sc21")
    overrides = load_config(config, get_model("refined")) if config else None
    rows = validate_table(table, evaluate=evaluate, overrides=overrides)
    stats = table_summary(rows)
    cal = None
    if calibrate:
        if "tflops_error_percent" not in rows[0]:
            raise SpecError(f"--calibrate: got the {table.set_name!r} set; allowed: runs with "
                            "SC21 Table 1 columns (measured TFLOP/s)")
        from jaxmodel.calibration import calibrate_runs  # jax and optimistix, when asked

        cal = calibrate_runs(table_runs(table), fit, overrides=overrides, bootstrap=bootstrap)
    if output_format == "json":
        typer.echo(json.dumps(validation_document(table, rows, stats, cal)))
    else:
        typer.echo(validation_text(table, rows, cal))


def _validate_row(row, every_set, data, set_name, config, calibrate, calibrated,
                  output_format, output) -> None:
    from jaxmodel.models.validation_all import MODEL, find_row, judge_row, row_inputs
    from jaxmodel.profile import answer as evaluate  # on the host, no compile (issue 26)
    from jaxmodel.report import table

    for flag, given in (("--all", every_set), ("--data", data), ("--config", config),
                        ("--calibrate/--fit", calibrate), ("--calibrated", calibrated),
                        ("--format markdown", output_format == "markdown")):
        if given:
            raise SpecError(f"{flag}: not with --row (it judges one published run, out of "
                            "the box; write it with --format json and evaluate that file "
                            "with --config to change it)")
    s, case = find_row(row, set_name)
    run = judge_row(s, case, evaluate)
    model = get_model(MODEL)
    doc = evaluation_document(model, row_inputs(case), x64=True, profile=False)
    if output_format == "json":
        text = json.dumps({**doc, "validation": run})
    else:
        text = row_validation_text(run) + "\n\n" + table(doc, model)
    _write_or_echo(text, output)


def _write_or_echo(text: str, output: str | None) -> None:
    if output:
        from jaxmodel.calibration import write_atomic

        write_atomic(output, text if text.endswith("\n") else text + "\n")
    else:
        typer.echo(text)


def _validate_all(data, set_name, config, calibrate, calibrated, output_format, output) -> None:
    from jaxmodel.models.validation_all import validate_all
    from jaxmodel.profile import answer as evaluate  # on the host, no compile (issue 26)

    for flag, given in (("--data", data), ("--set", set_name), ("--config", config),
                        ("--calibrate/--fit", calibrate)):
        if given:
            raise SpecError(f"{flag}: not with --all (it runs every set, out of the box; "
                            "use --calibrated for the k-fold calibrated column)")
    cross_validate = None
    if calibrated:
        from jaxmodel.calibration import cross_validate  # jax and optimistix, when asked
    doc = validate_all(evaluate, cross_validate=cross_validate)
    if output_format == "json":
        text = json.dumps(doc)
    elif output_format == "markdown":
        text = validation_markdown(doc)
    else:
        text = all_validation_text(doc)
    _write_or_echo(text, output)
