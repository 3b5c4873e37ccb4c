"""``jaxmodel sensitivity``: which knob matters most, as JSON or a ranked table."""


import math
from typing import Annotated, Any, Literal

import typer

from jaxmodel.cli.common import (
    ConfigOption,
    ModelOption,
    X64Option,
    gather_inputs,
    reports_errors,
    with_input_options,
)
from jaxmodel.models import Model
from jaxmodel.report import printed_inputs, to_json
from jaxmodel.sensitivity import (
    Sensitivities,
    gradient_unit,
    sensitivities,
    stepped_inputs,
)


def _names(values: list[str] | None) -> list[str] | None:
    """Repeated options, each possibly comma-separated, flattened."""
    if not values:
        return None
    return [n.strip() for v in values for n in v.split(",") if n.strip()]


def _num(v: Any) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def document(model: Model, values: dict[str, float], s: Sensitivities) -> dict[str, Any]:
    """The JSON document: inputs, the outputs' values, sensitivities nested output -> input."""
    doc: dict[str, Any] = {
        "model": model.name,
        "inputs": printed_inputs(model, values),
        "valid": bool(s.valid),
        "outputs": {o: _num(s.values[o]) for o in s.of},
    }
    kinds = ["gradient", "elasticity"] if s.kind == "both" else [s.kind]
    for kind in kinds:
        get = s.gradient if kind == "gradient" else s.elasticity
        doc[kind] = {o: {w: _num(get(o, w)) for w in s.wrt} for o in s.of}
    if "gradient" in kinds:
        doc["gradient_units"] = {o: {w: gradient_unit(model, o, w) for w in s.wrt} for o in s.of}
    if s.stepped_to:
        doc["stepped"] = {w: {"from": values[w], "to": float(v), "note": (
            "discrete difference to the next value that changes the layout")}
            for w, v in s.stepped_to.items()}
    return doc


def _pct(v: float) -> str:
    return "n/a" if not math.isfinite(v) else f"{round(v, 3) + 0.0:+.3f}%"


def ranked_table(model: Model, values: dict[str, float], s: Sensitivities) -> str:
    """Per output, the inputs ranked by |elasticity|: "+1% of X -> y% of the output"."""
    lines = [f"sensitivities ({model.name} model): +1% of an input -> % change of the output",
             ""]
    width = max(len(w) for w in s.wrt) + 2
    for o in s.of:
        field = model.output_field(o)
        value = float(s.values[o])
        shown = "undefined (invalid layout)" if not math.isfinite(value) else (
            f"{value:,.6g} {field.unit}".rstrip())
        lines.append(f"{o} = {shown}")

        def key(w, o=o):
            e = float(s.elasticity(o, w))
            return -abs(e) if math.isfinite(e) else math.inf

        for w in sorted(s.wrt, key=key):
            e, g = float(s.elasticity(o, w)), float(s.gradient(o, w))
            grad = "" if not math.isfinite(g) else f"({g:+.4g} {gradient_unit(model, o, w)})"
            if w in s.stepped_to:
                x0, x1 = values[w], float(s.stepped_to[w])
                change = g * (x1 - x0) / value * 100.0 if value else math.nan
                lines.append(f"  {w:<{width}}{x0:g} -> {x1:g} (next step) -> "
                             f"{_pct(change)}  {grad}".rstrip())
            else:
                lines.append(f"  {w:<{width}}+1% -> {_pct(e):<10} {grad}".rstrip())
        lines.append("")
    if not bool(s.valid):
        lines.append("the layout is invalid: sensitivities are undefined (see jaxmodel eval)")
    unasked = [w for w in stepped_inputs(model) if w not in s.wrt]
    if unasked:
        lines.append(f"({', '.join(unasked)}: stepped, not shown; ask with --wrt "
                     f"{unasked[0]} for the effect of its next value)")
    return "\n".join(lines).rstrip()


@with_input_options
@reports_errors
def sensitivity_command(
    inputs: dict,
    model: ModelOption = "seed",
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
                     "default: every continuous input)", metavar="INPUT"),
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
    s = sensitivities(values, of=_names(of), wrt=_names(wrt),
                      kind="both" if table else kind, model=m, x64=x64)
    if table:
        typer.echo(ranked_table(m, values, s))
    else:
        typer.echo(to_json(document(m, values, s)))
