"""``jaxmodel plot``: pictures of one configuration or of a sweep's dataset (PNG or SVG)."""


from pathlib import Path
from typing import Annotated, Literal

import typer

from jaxmodel import plot as plots
from jaxmodel.cli.common import (
    Command,
    ConfigOption,
    Group,
    ModelOption,
    X64Option,
    gather_inputs,
    reports_errors,
    with_input_options,
)
from jaxmodel.errors import InputError, closest

plot_app = typer.Typer(
    help="Pictures (PNG or SVG, by the output's extension): profile curves, step-time "
    "breakdowns, sweep heatmaps and regime maps, sensitivity tornado charts. "
    "Needs the plot extra: pip install 'jaxmodel\\[plot]'.",
    no_args_is_help=True,
    cls=Group,
)

OutputOption = Annotated[
    Path, typer.Option("-o", "--output", help="file to write: .png or .svg", metavar="PATH")
]
WidthOption = Annotated[int, typer.Option("--width", help="width in pixels (100 dpi)")]
HeightOption = Annotated[int, typer.Option("--height", help="height in pixels (100 dpi)")]
DatasetArgument = Annotated[Path, typer.Argument(help="a sweep's Parquet dataset directory",
                                                 metavar="DATASET")]
XOption = Annotated[str, typer.Option("--x", help="column along the x axis", metavar="COLUMN")]
YOption = Annotated[str, typer.Option("--y", help="column along the y axis", metavar="COLUMN")]
WhereOption = Annotated[
    str | None,
    typer.Option("--where", help='filter rows first, e.g. "valid_layout and compute_tflops == 989"'
                 , metavar="EXPR"),
]
W, H = plots.DEFAULT_SIZE


def _start(output: Path, width: int, height: int) -> tuple[int, int]:
    """Check the output, the size and matplotlib before any work."""
    plots.check_output(output)
    size = plots.check_size(width, height)
    plots.require_matplotlib()
    return size


def _wrote(output: Path, data) -> None:
    typer.echo(f"wrote {output} ({plots.describe(data)})")


@with_input_options
@reports_errors
def profile_command(
    inputs: dict,
    output: OutputOption,
    model: ModelOption = None,
    config: ConfigOption = None,
    width: WidthOption = W,
    height: HeightOption = H,
    x64: X64Option = False,
) -> None:
    """MFU against GPU count and against link bandwidth, the configuration marked."""
    size = _start(output, width, height)
    m, values = gather_inputs(model, config, inputs)
    _wrote(output, plots.plot_profile(m, values, output, size=size, x64=x64))


def _compare(texts: list[str], input_names: tuple[str, ...]) -> dict[str, list[float]]:
    """``["tensor_parallel=1,2,4"]`` -> ``{"tensor_parallel": [1, 2, 4]}``."""
    out: dict[str, list[float]] = {}
    for text in texts:
        name, sep, values = text.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not values.strip():
            raise InputError("--compare", text, "NAME=V1,V2,... (an input and its values)")
        if name not in input_names:
            raise InputError("--compare", text, "an input of the model"
                             + closest(name, input_names))
        try:
            out[name] = [float(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise InputError("--compare", text, "comma-separated numbers") from None
    return out


@with_input_options
@reports_errors
def breakdown_command(
    inputs: dict,
    output: OutputOption,
    compare: Annotated[
        list[str] | None,
        typer.Option("--compare", metavar="INPUT=V1,V2,...",
                     help="one bar per value (repeat for every combination), "
                     "e.g. --compare tensor_parallel=1,2,4,8"),
    ] = None,
    layouts: Annotated[
        bool,
        typer.Option("--layouts", help="the fastest valid layouts (t, p, b, m) of this model "
                     "on these GPUs at the same global batch"),
    ] = False,
    top: Annotated[int, typer.Option("--top", help="bars for --layouts", min=1, max=64)] = 12,
    model: ModelOption = None,
    config: ConfigOption = None,
    width: WidthOption = W,
    height: HeightOption = H,
    x64: X64Option = False,
) -> None:
    """Stacked step-time terms of one configuration, or several side by side."""
    size = _start(output, width, height)
    m, values = gather_inputs(model, config, inputs)
    if compare and layouts:
        raise InputError("--layouts", True, "either --layouts or --compare, not both")
    if layouts:
        configs, labels = plots.layout_configs(m, values, x64=x64, top=top)
        title = (f"Step-time breakdown: the {len(configs)} fastest layouts of "
                 f"{values[m.layout.gpus]:g} GPUs ({m.name} model)")
    elif compare:
        asked = _compare(compare, m.input_names)
        for name, vs in asked.items():
            for v in vs:
                m.input_field(name).check_scalar(v, text=True)
        configs, labels = plots.compare_configs(values, asked)
        title = None
    else:
        configs, labels, title = [values], None, None
    data = plots.plot_breakdown(m, configs, output, labels=labels, title=title, size=size,
                                x64=x64)
    _wrote(output, data)


@reports_errors
def heatmap_command(
    dataset: DatasetArgument,
    x: XOption,
    y: YOption,
    value: Annotated[str, typer.Option("--value", help="column to aggregate",
                                       metavar="COLUMN")],
    output: OutputOption,
    agg: Annotated[Literal["max", "mean", "min"],
                   typer.Option("--agg", help="over the other axes")] = "max",
    where: WhereOption = None,
    width: WidthOption = W,
    height: HeightOption = H,
) -> None:
    """A heatmap of a column aggregated over every other axis of a sweep dataset."""
    size = _start(output, width, height)
    data = plots.plot_heatmap(str(dataset), x, y, value, output, agg=agg, where=where, size=size)
    _wrote(output, data)


@reports_errors
def regimes_command(
    dataset: DatasetArgument,
    x: XOption,
    y: YOption,
    output: OutputOption,
    column: Annotated[str, typer.Option("--column", help="category column: bottleneck or "
                                        "regime", metavar="COLUMN")] = "bottleneck",
    rule: Annotated[Literal["best", "most"], typer.Option(
        "--rule", help="best: the category of the row with the highest --by; most: the most "
        "frequent among valid rows")] = "best",
    by: Annotated[str, typer.Option("--by", help="column ranking rows for --rule best",
                                    metavar="COLUMN")] = "mfu_percent",
    where: WhereOption = None,
    width: WidthOption = W,
    height: HeightOption = H,
) -> None:
    """Which term is the bottleneck (or which regime holds) where, as a categorical map."""
    size = _start(output, width, height)
    data = plots.plot_regimes(str(dataset), x, y, output, column=column, rule=rule, by=by,
                              where=where, size=size)
    _wrote(output, data)


@with_input_options
@reports_errors
def tornado_command(
    inputs: dict,
    output: OutputOption,
    of: Annotated[str, typer.Option("--of", help="float output to explain",
                                    metavar="OUTPUT")] = "step_time_ms",
    wrt: Annotated[
        list[str] | None,
        typer.Option("--wrt", help="inputs (repeat or comma-separate; default: every "
                     "continuous input)", metavar="INPUT"),
    ] = None,
    model: ModelOption = None,
    config: ConfigOption = None,
    width: WidthOption = W,
    height: HeightOption = H,
    x64: X64Option = False,
) -> None:
    """Inputs ranked by elasticity of one output (+1% of the input -> % of the output)."""
    size = _start(output, width, height)
    m, values = gather_inputs(model, config, inputs)
    names = [n.strip() for v in wrt or [] for n in v.split(",") if n.strip()] or None
    data = plots.plot_tornado(m, values, output, of=of, wrt=names, size=size, x64=x64)
    _wrote(output, data)


plot_app.command("profile", cls=Command)(profile_command)
plot_app.command("breakdown", cls=Command)(breakdown_command)
plot_app.command("heatmap", cls=Command)(heatmap_command)
plot_app.command("regimes", cls=Command)(regimes_command)
plot_app.command("tornado", cls=Command)(tornado_command)
