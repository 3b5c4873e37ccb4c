"""``jaxmodel dashboard`` and ``jaxmodel report``: browse sweep datasets in a browser."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from jaxmodel.cli.common import X64Option, reports_errors
from jaxmodel.errors import JaxmodelError

INSTALL_HINT = "install the dashboard extra: pip install 'jaxmodel[dashboard]'"


class MissingExtra(JaxmodelError):
    """The dashboard extra is not installed."""


def _require() -> None:
    try:
        import dash  # noqa: F401
        import duckdb  # noqa: F401
        import plotly  # noqa: F401
    except ImportError:
        raise MissingExtra(INSTALL_HINT) from None


@reports_errors
def dashboard_command(
    datasets: Annotated[list[Path], typer.Argument(
        help="sweep dataset directories (jaxmodel sweep's output); the first is shown first",
        metavar="DATASET")],
    port: Annotated[int, typer.Option("--port", help="TCP port", min=1, max=65535)] = 8050,
    host: Annotated[str, typer.Option(
        "--host", help="address to listen on (127.0.0.1: this machine only)")] = "127.0.0.1",
    no_browser: Annotated[bool, typer.Option("--no-browser",
                                             help="do not open a browser tab")] = False,
    no_cube: Annotated[bool, typer.Option(
        "--no-cube", help="do not build the summary cube of datasets over 2x10^7 rows "
        "(one scan at start that makes their heatmaps, lines and counts interactive)")] = False,
    x64: X64Option = False,
) -> None:
    """A local web app over sweep datasets: views, filters, rows, one configuration live
    (or, for a directory jaxmodel plan -o wrote, its plans: time against cost)."""
    _require()
    from jaxmodel.dashboard.data import DashboardError
    from jaxmodel.dashboard.plan import build_plan_app, is_plan
    from jaxmodel.dashboard.serve import serve

    plans = [p for p in datasets if is_plan(p)]
    if plans:
        if len(datasets) > 1:
            raise DashboardError(f"datasets: {str(plans[0])!r} is a plan (plan.parquet); a "
                                 "plan is shown on its own, give it alone")
        app = build_plan_app(plans[0])
        _warn_host(host)
        serve(app.server, host, port, open_browser=not no_browser, names=[plans[0].name])
        return
    from jaxmodel.dashboard.app import build_app
    from jaxmodel.dashboard.data import CUBE_MIN_ROWS, Catalog

    def building(name: str, rows: int) -> None:
        typer.echo(f"jaxmodel dashboard: {name} has {rows:,} rows; summarising it once for "
                   "fast views (about a minute per 10^8 rows; --no-cube skips this)", err=True)

    catalog = Catalog(datasets, cube_min_rows=None if no_cube else CUBE_MIN_ROWS,
                      on_cube=building)
    for src in catalog.sources.values():
        if src.cube is not None:
            typer.echo(f"jaxmodel dashboard: {src.name}: {src.cube.groups:,} groups by "
                       f"{', '.join(src.cube.dims)} in {src.cube.seconds:.0f} s", err=True)
    _warn_host(host)
    app = build_app(catalog, x64=x64)
    serve(app.server, host, port, open_browser=not no_browser,
          names=catalog.names)


def _warn_host(host: str) -> None:
    if host not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(f"warning: --host {host} serves the datasets to every machine that can "
                   "reach this one, without any login", err=True)


@reports_errors
def report_command(
    dataset: Annotated[Path, typer.Argument(help="a sweep dataset directory",
                                            metavar="DATASET")],
    output: Annotated[Path, typer.Option("-o", "--output", help="the .html file to write",
                                         metavar="PATH")],
) -> None:
    """One self-contained HTML file of a dataset's views (opens offline, no server)."""
    _require()
    from jaxmodel.dashboard.report import write_report

    path, size = write_report(dataset, output)
    typer.echo(f"wrote {path} ({size / 1e6:.1f} MB, aggregates only)")
    sys.stdout.flush()
