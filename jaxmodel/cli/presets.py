"""``jaxmodel presets``: the named GPUs and LLMs for ``--gpu`` / ``--llm`` and specs."""


import json
from typing import Annotated, Literal

import typer

from jaxmodel.cli.common import reports_errors
from jaxmodel.documents import presets_document, presets_table


@reports_errors
def presets_command(
    output_format: Annotated[
        Literal["table", "json"], typer.Option("--format", help="table or json")
    ] = "table",
) -> None:
    """List the hardware (--gpu) and model (--llm) presets, with their sources."""
    typer.echo(json.dumps(presets_document()) if output_format == "json" else presets_table())
