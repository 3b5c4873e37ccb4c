"""``jaxmodel docs``: write the manual's generated pages, or check that they are fresh.

The pages are ``docs/reference/models.md``, ``presets.md`` and ``physics.md``
(from :mod:`jaxmodel.manual`) and ``cli.md``, the command-line reference read from the
typer application itself: every command, its arguments and its options with their
defaults and help.  ``make docs`` runs it; ``--check`` writes nothing and exits 1
naming the stale pages.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from jaxmodel.manual import GENERATED, models_page, physics_page, presets_page

# Options a command takes for every model input: listed once, in models.md.
_INPUT_PANEL = "Inputs of "


# typer builds click-style commands (its own copy of click in recent versions), so
# the commands and parameters are read by their attributes, not by class.


def _is_argument(param: Any) -> bool:
    return param.param_type_name == "argument"


def _default(param: Any) -> str:
    d = param.default
    if d is None or callable(d) or (_is_argument(param) and param.required):
        return ""
    if getattr(param, "is_flag", False):
        return "on" if d else "off"
    if isinstance(d, (list, tuple)):
        return ", ".join(str(x) for x in d)
    return str(d)


def _row(param: Any) -> str:
    if _is_argument(param):
        name = param.metavar or param.name.upper()
        help_text = getattr(param, "help", None) or ""
        kind = "argument" + ("" if param.required else ", optional")
    else:
        opts = list(param.opts) + list(param.secondary_opts)
        name = " / ".join(opts)
        help_text = getattr(param, "help", None) or ""
        kind = "flag" if getattr(param, "is_flag", False) else (param.metavar or "value")
        if getattr(param, "multiple", False):
            kind += ", repeatable"
    default = _default(param)
    cells = [f"`{name}`", kind, f"`{default}`" if default else "", help_text]
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def _command(path: str, cmd: Any, ctx: Any) -> list[str]:
    own = cmd.context_class(cmd, info_name=path.split()[-1], parent=ctx)
    if hasattr(cmd, "list_commands"):  # a group: e.g. plot
        out = []
        for name in cmd.list_commands(own):
            out += _command(f"{path} {name}", cmd.get_command(own, name), own)
        return out
    usage = " ".join(cmd.collect_usage_pieces(own))
    params = [p for p in cmd.params if not getattr(p, "hidden", False)
              and p.name != "help"]
    shown = [p for p in params
             if not (getattr(p, "rich_help_panel", None) or "").startswith(_INPUT_PANEL)]
    lines = [f"## `{path}`", "", (cmd.help or "").strip().split("\n\n")[0].replace("\n", " "),
             "", "```text", f"{path} {usage}", "```", ""]
    if shown:
        lines += ["| argument or option | kind | default | meaning |", "|---|---|---|---|"]
        lines += [_row(p) for p in shown]
        lines.append("")
    if len(shown) < len(params):
        lines += ["And every model input as an option (`--num-gpus N`, ...): see "
                  "[models.md](models.md).", ""]
    return lines


def cli_page(group: Any) -> str:
    """``docs/reference/cli.md``: every command of ``group`` (the ``jaxmodel``
    application as click sees it, ``typer.main.get_command(app)``) with its
    arguments and options."""
    ctx = group.context_class(group, info_name="jaxmodel")
    lines = [GENERATED, "", "# Command-line reference", "",
             (group.help or "").strip(), "",
             "Every command prints `--help`. Errors are one line on stderr and exit code 2.",
             ""]
    for name in group.list_commands(ctx):
        lines += _command(f"jaxmodel {name}", group.get_command(ctx, name), ctx)
    return "\n".join(lines).rstrip() + "\n"


def pages(group: Any) -> dict[str, Callable[[], str]]:
    """The generated pages, ``{file name under docs/reference: its text}``, lazily."""
    return {"models.md": models_page, "presets.md": presets_page, "physics.md": physics_page,
            "cli.md": lambda: cli_page(group)}


def stale_pages(group: Any, directory: Path) -> list[str]:
    """The generated pages under ``directory`` that differ from what the code gives
    now (or are missing)."""
    out = []
    for name, make in pages(group).items():
        path = directory / name
        if not path.exists() or path.read_text() != make():
            out.append(name)
    return out


def docs_command(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Argument(help="where the generated pages go")] = Path(
        "docs/reference"),
    check: Annotated[bool, typer.Option(
        "--check", help="write nothing; exit 1 naming the stale pages")] = False,
) -> None:
    """Write the manual's generated pages (model inputs and outputs, presets, this
    reference) from the code."""
    group = ctx.find_root().command
    if check:
        stale = stale_pages(group, directory)
        if stale:
            typer.echo(f"error: stale in {directory}: {', '.join(stale)}; run `make docs`",
                       err=True)
            raise typer.Exit(1)
        typer.echo(f"{directory}: fresh")
        return
    texts = {name: make() for name, make in pages(group).items()}  # all, before any write
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        tmp = directory / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(directory / name)
        typer.echo(f"wrote {directory / name}")
