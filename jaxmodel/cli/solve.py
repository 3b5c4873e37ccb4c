"""``jaxmodel solve``: the input value at which an output reaches a target."""


import math
from typing import Annotated, Any, Literal

import typer

from jaxmodel.api import as_dicts, evaluate
from jaxmodel.cli.common import (
    ConfigOption,
    ModelOption,
    X64Option,
    gather_inputs,
    reports_errors,
    with_input_options,
)
from jaxmodel.report import printed_inputs, to_json
from jaxmodel.solving import describe, parse_target, solve


def _num(v: Any) -> float | str | None:
    v = float(v)
    if math.isnan(v):
        return None
    return v if math.isfinite(v) else ("infinity" if v > 0 else "-infinity")


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
    model: ModelOption = "seed",
    config: ConfigOption = None,
    output_format: Annotated[
        Literal["json", "text"], typer.Option("--format", help="json (with the answer as a "
                                              "sentence) or the sentence alone")
    ] = "json",
    x64: X64Option = False,
) -> None:
    """Solve an inverse question: which value of one input reaches a target output."""
    m, values = gather_inputs(model, config, inputs)
    output, value = parse_target(target, m)
    s = solve(values, (output, value), vary, model=m, x64=x64)
    answer = describe(s, m, inputs=values)
    if output_format == "text":
        typer.echo(answer)
        return
    doc: dict[str, Any] = {
        "model": m.name,
        "inputs": printed_inputs(m, values),
        "target": {"output": s.output, "value": s.target},
        "vary": s.vary,
        "start": {s.vary: _num(s.start), s.output: _num(s.start_value)},
        "reached": bool(s.reached),
        "solved": {s.vary: _num(s.solved)},
        "limit": {s.output: _num(s.limit), s.vary: _num(s.limit_at)},
        "blocked_by_invalid_layouts": bool(s.blocked),
    }
    if s.reached and not m.input_field(s.vary).integer:
        check = as_dicts(m, evaluate(m, x64=x64, **{**values, s.vary: float(s.solved)}))
        doc["solved"][s.output] = _num(check[s.output])
    doc["answer"] = answer
    typer.echo(to_json(doc))
