"""``jaxmodel eval``: one configuration, as the seed-format JSON or a table."""


from typing import Annotated, Literal

import typer

from jaxmodel.cli.common import (
    ConfigOption,
    ModelOption,
    X64Option,
    gather_inputs,
    reports_errors,
    with_input_options,
)
from jaxmodel.documents import evaluation_document
from jaxmodel.report import table, to_json


@with_input_options
@reports_errors
def eval_command(
    inputs: dict,
    model: ModelOption = None,
    config: ConfigOption = None,
    output_format: Annotated[
        Literal["json", "table"], typer.Option("--format", help="json (seed format) or table")
    ] = "json",
    no_profile: Annotated[bool, typer.Option("--no-profile", help="skip the two curves")] = False,
    x64: X64Option = False,
) -> None:
    """Evaluate one configuration (default: the refined model; --model seed: the seed example)."""
    m, values = gather_inputs(model, config, inputs)
    doc = evaluation_document(m, values, x64=x64, profile=not no_profile)
    typer.echo(to_json(doc) if output_format == "json" else table(doc, m))
