"""``jaxmodel plan``: what it takes to train an LLM on T tokens, every GPU compared."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from jaxmodel.cli.common import X64Option, reports_errors
from jaxmodel.errors import InputError, SpecError

HEADS = (("gpu", "gpu"), ("num_gpus", "GPUs"), ("layout", "layout"), ("train_days", "days"),
         ("gpu_hours", "GPU-hours"), ("cost_usd", "cost USD"), ("energy_mwh", "MWh"),
         ("power_mw", "MW"), ("mfu_percent", "MFU %"))


def _pairs(items: list[str] | None, flag: str) -> dict[str, float]:
    out = {}
    for item in items or ():
        name, _, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise InputError(flag, item, "NAME=NUMBER") from None
    return out


def _cell(name: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    if name in ("num_gpus",):
        return f"{value:,}"
    if name in ("gpu_hours", "cost_usd"):
        return f"{value:,.3g}" if value < 1e4 else f"{value:,.0f}"
    return f"{value:,.1f}"


def _table(rows: list[dict[str, Any]], title: str) -> list[str]:
    cells = [[_cell(k, r[k]) for k, _ in HEADS] for r in rows]
    heads = [h for _, h in HEADS]
    widths = [max(len(h), *(len(c[j]) for c in cells)) for j, h in enumerate(heads)]
    lines = [title, "  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return lines


def _write(rows: list[dict[str, Any]], output: Path) -> list[Path]:
    """``plan.parquet`` and ``plan.png`` in ``output``, each written whole
    (a temporary name, then renamed), so no partial file looks complete."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jaxmodel.plot import plot_plan

    try:
        output.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(rows)
        parquet = output / "plan.parquet"
        tmp = output / ".plan.parquet.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, parquet)
    except OSError as e:
        raise SpecError(f"--output {str(output)!r}: cannot write ({e.strerror})") from None
    picture = output / "plan.png"
    tmp_png = output / ".plan.tmp.png"
    plot_plan(rows, tmp_png)
    os.replace(tmp_png, picture)
    return [parquet, picture]


@reports_errors
def plan_command(
    llm: Annotated[str, typer.Option("--llm", help="LLM preset (jaxmodel presets)")],
    train_tokens: Annotated[float, typer.Option(
        "--train-tokens", help="tokens the run trains on (e.g. 15.6e12)")],
    gpu: Annotated[str | None, typer.Option(
        "--gpu", help="GPU presets, comma-separated (default: every one)")] = None,
    num_gpus: Annotated[str, typer.Option(
        "--num-gpus", help="cluster sizes: N, LO-HI (powers of two) or LO-HI:STEP, "
        "comma-separated")] = "4096-32768",
    global_batch_tokens: Annotated[int, typer.Option(
        "--global-batch-tokens", help="tokens per optimizer step (a multiple of the "
        "sequence length)")] = 2**24,
    deadline_days: Annotated[float | None, typer.Option(
        "--deadline-days", help="name the cheapest plan that finishes within this")] = None,
    budget_usd: Annotated[float | None, typer.Option(
        "--budget-usd", help="name the fastest plan that costs at most this")] = None,
    max_power_mw: Annotated[float | None, typer.Option(
        "--max-power-mw", help="drop plans whose facility power exceeds this")] = None,
    price: Annotated[list[str] | None, typer.Option(
        "--price", metavar="GPU=USD", help="USD per GPU-hour of one GPU preset (repeatable; "
        "default: gpu_hour_usd's default for every GPU)")] = None,
    setting: Annotated[list[str] | None, typer.Option(
        "--set", metavar="NAME=VALUE", help="any other input, for every GPU (repeatable): "
        "zero_stage=1, pue=1.2, ...")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="directory for plan.parquet and plan.png")] = None,
    output_format: Annotated[Literal["table", "json"], typer.Option(
        "--format", help="table or json")] = "table",
    model: Annotated[str, typer.Option("--model", help="cost model")] = "refined",
    x64: X64Option = False,
) -> None:
    """For every GPU and cluster size: the fastest layout, and the days, GPU-hours,
    dollars and energy of the whole run; the Pareto front of time and cost."""
    from jaxmodel.planning import choose, pareto_front, parse_gpu_counts, plan
    from jaxmodel.report import to_json

    for flag, v in (("--deadline-days", deadline_days), ("--budget-usd", budget_usd),
                    ("--max-power-mw", max_power_mw)):
        if v is not None and not v > 0:
            raise InputError(flag, v, "a number > 0")
    if not train_tokens > 0:
        raise InputError("--train-tokens", train_tokens, "a number of tokens > 0")
    gpus = [g.strip() for g in gpu.split(",") if g.strip()] if gpu else None
    result = plan(llm, train_tokens, gpus=gpus, num_gpus=parse_gpu_counts(num_gpus),
                  global_batch_tokens=global_batch_tokens, model=model,
                  overrides=_pairs(setting, "--set"), prices=_pairs(price, "--price"), x64=x64)
    from jaxmodel.models import get_model

    space = get_model(model).layout
    for r in result.rows:
        r["layout"] = space.summary(r)
    choice = choose(result.rows, train_tokens, deadline_days=deadline_days,
                    budget_usd=budget_usd, max_power_mw=max_power_mw)
    front = pareto_front(result.rows)
    written = _write(result.rows, output) if output is not None and result.rows else []
    timing = (f"{result.candidates:,} layouts evaluated in one program: compile "
              f"{result.compile_s:.2f} s, run {result.run_s:.2f} s, enumerate "
              f"{result.enumerate_s:.2f} s")
    if output_format == "json":
        typer.echo(to_json({"plans": result.rows, "pareto": front,
                            "cheapest_within_deadline": choice.cheapest,
                            "fastest_within_budget": choice.fastest,
                            "problems": choice.problems,
                            "missing": [{"gpu": g, "num_gpus": n, "why": w}
                                        for g, n, w in result.missing],
                            "files": [str(p) for p in written], "timing": timing}))
        return
    lines = [f"plan: {llm}, {train_tokens:.4g} tokens, {global_batch_tokens:,} tokens a step"]
    if result.rows:
        lines += [""] + _table(result.rows, "fastest layout per GPU and size:")
        lines += [""] + _table(front, "Pareto front of time and cost (energy beside):")
    for label, row in (("cheapest within the deadline", choice.cheapest),
                       ("fastest within the budget", choice.fastest)):
        if row is not None and (deadline_days if "deadline" in label else budget_usd):
            lines.append(f"{label}: {row['gpu']} x {row['num_gpus']:,} ({row['layout']}), "
                         f"{row['train_days']:,.1f} days, ${row['cost_usd']:,.0f}, "
                         f"{row['energy_mwh']:,.0f} MWh")
    lines += [f"constraint: {p}" for p in choice.problems]
    lines += [f"no plan for {g} x {n:,}: {w}" for g, n, w in result.missing]
    lines += [f"wrote {p}" for p in written]
    lines += ["", timing]
    typer.echo("\n".join(lines))
