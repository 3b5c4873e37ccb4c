"""``jaxmodel solve``: the input value at which an output reaches a target."""


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
from jaxmodel.documents import solve_document
from jaxmodel.report import to_json
from jaxmodel.solving import answer_solve, describe, parse_target


@with_input_options
@reports_errors
def solve_command(
    inputs: dict,
    target: Annotated[
        str, typer.Option("--target", help="OUTPUT=VALUE to reach, e.g. mfu_percent=60",
                          metavar="OUTPUT=VALUE"),
    ],
    vary: Annotated[
        str, typer.Option("--vary", help="the continuous input to change, e.g. "
                          "link_bandwidth_gb_s", metavar="INPUT"),
    ],
    model: ModelOption = None,
    config: ConfigOption = None,
    output_format: Annotated[
        Literal["json", "text"], typer.Option("--format", help="json (with the answer as a "
                                              "sentence) or the sentence alone")
    ] = "json",
    x64: X64Option = False,
) -> None:
    """Solve an inverse question: which value of one input reaches a target output."""
    m, values = gather_inputs(model, config, inputs)
    s = answer_solve(values, parse_target(target), vary, model=m, x64=x64)
    if output_format == "text":
        typer.echo(describe(s, m, inputs=values))
    else:
        typer.echo(to_json(solve_document(m, values, s, x64=x64)))
