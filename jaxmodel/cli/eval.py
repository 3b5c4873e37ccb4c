"""``jaxmodel eval``: one configuration, as the seed-format JSON or a table."""


import socket
import time
from typing import Annotated, Literal

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
from jaxmodel.profile import profile_curves
from jaxmodel.report import seed_document, table, to_json


@with_input_options
@reports_errors
def eval_command(
    inputs: dict,
    model: ModelOption = "seed",
    config: ConfigOption = None,
    output_format: Annotated[
        Literal["json", "table"], typer.Option("--format", help="json (seed format) or table")
    ] = "json",
    no_profile: Annotated[bool, typer.Option("--no-profile", help="skip the two curves")] = False,
    x64: X64Option = False,
) -> None:
    """Evaluate one configuration (defaults: the seed example)."""
    m, values = gather_inputs(model, config, inputs)
    start = time.perf_counter()
    outputs = as_dicts(m, evaluate(m, x64=x64, **values))
    curves = None if no_profile else profile_curves(m, values, x64=x64)
    wall_ms = (time.perf_counter() - start) * 1e3
    doc = seed_document(m, values, outputs, m.verdict(values, outputs), curves=curves,
                        node=socket.gethostname(), wall_ms=wall_ms)
    typer.echo(to_json(doc) if output_format == "json" else table(doc, m))
