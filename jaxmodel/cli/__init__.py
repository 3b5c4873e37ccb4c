"""The ``jaxmodel`` command line: thin typer layers over the Python API."""

from __future__ import annotations

import sys

import typer

from jaxmodel.cli.best import best_command
from jaxmodel.cli.calibrate import calibrate_command
from jaxmodel.cli.common import Command, Group
from jaxmodel.cli.dashboard import dashboard_command, report_command
from jaxmodel.cli.docs import docs_command
from jaxmodel.cli.eval import eval_command
from jaxmodel.cli.plan import plan_command
from jaxmodel.cli.plot import plot_app
from jaxmodel.cli.presets import presets_command
from jaxmodel.cli.sensitivity import sensitivity_command
from jaxmodel.cli.solve import solve_command
from jaxmodel.cli.sweep import sweep_command
from jaxmodel.cli.validate import validate_command
from jaxmodel.compile_cache import enable_compile_cache, show_compile_status

app = typer.Typer(
    name="jaxmodel",
    help="Cost model of 3D-parallel LLM training: evaluate, sweep, search, explain.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=Group,
)


@app.callback()
def _root() -> None:
    """Cost model of 3D-parallel LLM training: evaluate, sweep, search, explain."""


for _name, _command in (("eval", eval_command), ("best", best_command),
                       ("plan", plan_command), ("presets", presets_command),
                       ("sensitivity", sensitivity_command), ("solve", solve_command),
                       ("sweep", sweep_command), ("validate", validate_command),
                       ("calibrate", calibrate_command), ("dashboard", dashboard_command),
                       ("report", report_command), ("docs", docs_command)):
    app.command(_name, cls=Command)(_command)
app.add_typer(plot_app, name="plot")


def main(argv: list[str] | None = None) -> None:
    """Console entry point: usage errors become one line on stderr, exit code 2."""
    enable_compile_cache()
    show_compile_status()
    try:
        code = app(args=argv, standalone_mode=False, prog_name="jaxmodel")
    except (typer.Abort, KeyboardInterrupt):
        print("error: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except typer.Exit as e:
        raise SystemExit(e.exit_code) from None
    except Exception as e:
        # Usage errors (an unknown option, a missing argument, a bad choice):
        # typer's click-derived exceptions carry format_message and exit_code.
        if not hasattr(e, "format_message"):
            raise
        ctx = getattr(e, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        if e.format_message():  # empty when no arguments asked for the help page
            print(f"error: {e.format_message()}{hint}", file=sys.stderr)
        raise SystemExit(getattr(e, "exit_code", 2)) from None
    raise SystemExit(code if isinstance(code, int) else 0)
