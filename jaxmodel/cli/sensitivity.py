"""``jaxmodel sensitivity``: which knob matters most, as JSON or a ranked table."""


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
from jaxmodel.documents import (
    invalid_sensitivity_text,
    sensitivity_document,
    sensitivity_table,
)
from jaxmodel.report import to_json
from jaxmodel.sensitivity import answer_sensitivities


def _names(values: list[str] | None) -> list[str] | None:
    """Repeated options, each possibly comma-separated, flattened."""
    if not values:
        return None
    return [n.strip() for v in values for n in v.split(",") if n.strip()]


@with_input_options
@reports_errors
def sensitivity_command(
    inputs: dict,
    model: ModelOption = None,
    config: ConfigOption = None,
    of: Annotated[
        list[str] | None,
        typer.Option("--of", help="output to differentiate (repeat or comma-separate; "
                     "default: step_time_ms, mfu_percent, throughput_tokens_s)",
                     metavar="OUTPUT"),
    ] = None,
    wrt: Annotated[
        list[str] | None,
        typer.Option("--wrt", help="input to differentiate by (repeat or comma-separate; "
                     "default: every continuous input the configuration uses)", metavar="INPUT"),
    ] = None,
    kind: Annotated[
        Literal["gradient", "elasticity", "both"],
        typer.Option("--kind", help="gradient (output units per input unit), elasticity "
                     "(d ln out / d ln in) or both"),
    ] = "both",
    output_format: Annotated[
        Literal["json", "table"], typer.Option("--format", help="json or a ranked table")
    ] = "json",
    x64: X64Option = False,
) -> None:
    """Sensitivities of outputs to inputs at one configuration, by autodiff."""
    m, values = gather_inputs(model, config, inputs)
    table = output_format == "table"
    asked = _names(wrt)
    # By default every continuous input this configuration uses (a dense model
    # lists no MoE inputs).
    names = asked or list(m.used(m.continuous, values))
    s = answer_sensitivities(values, of=_names(of), wrt=names,
                             kind="both" if table else kind, model=m, x64=x64)
    if table and not bool(s.valid):
        typer.echo(invalid_sensitivity_text(m, values, x64=x64))
    elif table:
        typer.echo(sensitivity_table(m, values, s, wrt_asked=asked is not None))
    else:
        typer.echo(to_json(sensitivity_document(m, values, s)))
