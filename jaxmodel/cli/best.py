"""``jaxmodel best``: the best layouts of a model on a cluster, for a global batch."""


from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from jaxmodel.cli.common import (
    ConfigOption,
    ModelOption,
    SensitivityWrtOption,
    X64Option,
    gather_inputs,
    parse_shard,
    reports_errors,
    with_input_options,
)
from jaxmodel.documents import plural
from jaxmodel.errors import SpecError
from jaxmodel.models import Model
from jaxmodel.report import to_json

if TYPE_CHECKING:
    from jaxmodel.searching import SearchResult

_HEADLINE = ("step_time_ms", "mfu_percent", "hfu_percent", "throughput_tokens_s",
             "per_gpu_tokens_s", "bottleneck",
             "memory_gb_per_gpu", "model_state_gb_per_gpu", "activation_gb_per_gpu")
# Short headers where the output's name is long.
_SHORT_HEADERS = {"memory_gb_per_gpu": "mem_gb", "model_state_gb_per_gpu": "state_gb",
                  "activation_gb_per_gpu": "act_gb"}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:,.3f}"


def _table(model: Model, rows: list[dict[str, Any]], first: list[str],
           title: str) -> list[str]:
    """Rank, the layout, the ``first`` columns, then the headline outputs."""
    hidden_when = model.layout.hidden_when
    cols = [(name, head) for name, head in model.layout.symbols.items()
            if name in rows[0] and (name not in hidden_when
                                    or any(r[name] != hidden_when[name] for r in rows))]
    extra = first + [n for n in _HEADLINE if n in model.output_names and n not in first]
    cols += [(n, _SHORT_HEADERS.get(n, n)) for n in extra if n not in dict(cols)]
    cells = [[str(i + 1)] + [_cell(r[name]) for name, _ in cols] for i, r in enumerate(rows)]
    heads = ["rank"] + [head for _, head in cols]
    widths = [max(len(h), *(len(c[j]) for c in cells)) for j, h in enumerate(heads)]
    lines = [title, "  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return lines


def why_best(model: Model, rows: list[dict[str, Any]], by: str) -> list[str]:
    """Why the first row wins: its verdict, and the step-time terms in which it
    beats the runner-up (largest differences first)."""
    best = rows[0]
    inputs = {f.name: best[f.name] for f in model.inputs}
    lines = [f"why #1 ({model.layout.summary(best)}): {model.verdict(inputs, best)}"]
    have = model.memory_capacity
    if have and "memory_gb_per_gpu" in best and best["memory_gb_per_gpu"] is not None:
        lines.append(f"  it fits: {best['memory_gb_per_gpu']:.1f} GB per GPU of "
                     f"{inputs[have]:g} GB")
    if len(rows) < 2:
        return lines
    second = rows[1]
    diffs = []
    for term in model.terms:
        col = term.output
        if best[col] is not None and second[col] is not None:
            diffs.append((best[col] - second[col], term.name))
    diffs.sort(key=lambda d: -abs(d[0]))
    parts = [f"{term} {delta:+,.0f} ms" for delta, term in diffs if abs(delta) >= 0.5]
    gap = best[by] - second[by] if best[by] is not None and second[by] is not None else 0.0
    lines.append(f"  against #2 ({model.layout.summary(second)}): {by} {gap:+,.4g}; "
                 "step-time terms #1 - #2: " + (", ".join(parts[:4]) if parts else "equal"))
    return lines


def _summary(r: "SearchResult") -> str:
    return (f"{r.candidates:,} candidates evaluated, {r.valid:,} valid, in {r.total_s:.3f} s "
            f"(compile {r.compile_s:.3f} s, run {r.run_s:.3f} s, enumerate "
            f"{r.enumerate_s:.3f} s; {plural(r.chunks, 'chunk')} of {r.chunk:,})")


def _document(model: Model, values: dict[str, float], r: "SearchResult",
              allow_idle: bool) -> dict[str, Any]:
    from jaxmodel.searching import row_dicts

    searched = set(model.layout.axes) | set(model.layout.extra_axes(values))
    fixed = {f.name: (int(values[f.name]) if f.integer else values[f.name])
             for f in model.inputs if f.name not in searched}
    doc: dict[str, Any] = {
        "model": model.name,
        "question": {**fixed, "global_batch": r.global_batch,
                     "global_batch_tokens": r.global_batch * model.layout.sequence_length(values),
                     "allow_idle": allow_idle},
        "by": r.by,
        "maximize": r.maximize,
        "candidates": r.candidates,
        "valid": r.valid,
        "seconds": {"total": r.total_s, "enumerate": r.enumerate_s,
                    "compile": r.compile_s, "run": r.run_s},
        "chunk": r.chunk,
        "chunks": r.chunks,
        "top": row_dicts(model, r.top),
    }
    if doc["top"]:
        doc["why"] = why_best(model, doc["top"], r.by)
    if r.per_group is not None:
        doc["group_by"] = list(r.group_by)
        doc["per_group"] = row_dicts(model, r.per_group)
    if r.pareto is not None:
        x, y, min_x, min_y = r.pareto_of
        doc["pareto_of"] = {"x": x, "y": y, "minimize_x": min_x, "minimize_y": min_y,
                            "overflow": r.pareto_overflow}
        doc["pareto"] = row_dicts(model, r.pareto)
    return doc


def _pareto_option(text: str | None) -> tuple | None:
    """``"min:a,max:b"`` (``min:`` is the default) -> ``(a, b, True, False)``."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts):
        raise SpecError(f"--pareto: got {text!r}; allowed: two columns X,Y "
                        "(each optionally prefixed min: or max:)")
    names, mins = [], []
    for p in parts:
        direction, _, name = p.rpartition(":")
        if direction not in ("", "min", "max"):
            raise SpecError(f"--pareto: got {p!r}; allowed: a column, min:COLUMN or max:COLUMN")
        names.append(name)
        mins.append(direction != "max")
    return (names[0], names[1], mins[0], mins[1])


@with_input_options
@reports_errors
def best_command(
    inputs: dict,
    global_batch: Annotated[int | None, typer.Option(
        "--global-batch", help="sequences per optimizer step, b m d "
        "(default: the configuration's own b m d)")] = None,
    global_batch_tokens: Annotated[int | None, typer.Option(
        "--global-batch-tokens", help="tokens per optimizer step (a multiple of seq_length)")
    ] = None,
    by: Annotated[str | None, typer.Option(
        "--by", help="column to maximize (default: throughput_tokens_s)")] = None,
    minimize: Annotated[str | None, typer.Option(
        "--minimize", help="column to minimize instead (e.g. step_time_ms)")] = None,
    top: Annotated[int, typer.Option("--top", help="layouts to show (1 to 10,000)")] = 10,
    allow_idle: Annotated[bool, typer.Option(
        "--allow-idle", help="allow t p not dividing num_gpus (idle GPUs)")] = False,
    group_by: Annotated[str | None, typer.Option(
        "--group-by", help="also the best layout per value of these comma-separated layout "
        "columns (tensor_parallel, pipeline_parallel, micro_batch, gradient_accum_steps, "
        "data_parallel)")] = None,
    pareto: Annotated[str | None, typer.Option(
        "--pareto", metavar="X,Y", help="also the Pareto front of two columns, each "
        "minimized, or maximized with a max: prefix, e.g. min:used_gpus, "
        "max:throughput_tokens_s (no space between; with --allow-idle)")] = None,
    output_format: Annotated[
        Literal["table", "json"], typer.Option("--format", help="table or json")
    ] = "table",
    chunk: Annotated[int | None, typer.Option(
        "--chunk", "--chunk-size", help="rows per compiled step (default: 65,536 or fewer; "
        "with --resume, the search's own)")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="directory for the reducer states, checkpointed as the search "
        "runs (then --resume continues it after Ctrl-C), and finally the top rows as "
        "Parquet; default: in memory")] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="finish an interrupted search in the --output directory")] = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="replace what the --output directory holds")] = False,
    shard: Annotated[str | None, typer.Option(
        "--shard", metavar="I/N", help="search share I of N (with --output shared by every "
        "share); the last share to finish prints the result")] = None,
    search_axes: Annotated[str | None, typer.Option(
        "--search-axes", metavar="NAMES", help="optional layout axes to search too, "
        "comma-separated (refined: expert_tensor_parallel; expert_parallel is always "
        "searched for an MoE model)")] = None,
    vary: Annotated[list[str] | None, typer.Option(
        "--vary", metavar="NAME[=V1,V2,...]", help="also search over this input (repeatable): "
        "context_parallel (powers of two that split the sequence, or the values given; "
        "d = N / (t c p)), a switch (every allowed value: zero_stage, precision, recompute, ...) "
        "or any input with its values")] = None,
    cross_node_tp: Annotated[bool, typer.Option(
        "--cross-node-tp", help="let tensor parallelism span nodes (default: t <= "
        "gpus_per_node, the NVLink domain, unless --tensor-parallel or --vary sets it)")
    ] = False,
    sensitivity: Annotated[bool, typer.Option(
        "--sensitivity", help="also what each hardware input is worth at the best layout: "
        "d(best objective)/d(input) by the envelope theorem, whether the best layout "
        "changes within +-10% (re-searched), and +10% in dollars")] = False,
    sensitivity_wrt: SensitivityWrtOption = None,
    model: ModelOption = None,
    config: ConfigOption = None,
    x64: X64Option = False,
) -> None:
    """Search every TP x PP x DP x micro-batch x accumulation layout; show the best.

    t divides hidden_dim, p divides num_layers, d = num_gpus / (t p), and
    b m d = the global batch.  Layout options given on the command line
    (--tensor-parallel, --pipeline-parallel, --micro-batch,
    --gradient-accum-steps) pin that axis; the rest of the inputs are as for
    ``eval``.
    """
    if by is not None and minimize is not None:
        raise SpecError("give --by (maximize) or --minimize, not both")
    if chunk is not None and chunk < 1:
        raise SpecError(f"--chunk: got {chunk}; allowed: a whole number >= 1")
    if resume and overwrite:
        raise SpecError("--resume: use either --resume or --overwrite, not both")
    for flag, given in (("--resume", resume), ("--overwrite", overwrite),
                        ("--shard", shard is not None)):
        if given and output is None:
            raise SpecError(f"{flag}: needs --output DIR (the directory the search "
                            "checkpoints into)")
    process, processes = parse_shard(shard) if shard is not None else (0, 1)
    if sensitivity and (allow_idle or processes > 1):
        raise SpecError("--sensitivity: not with --allow-idle or --shard (the optimum is "
                        "weighed on the GPUs it uses, in one process)")
    m, values = gather_inputs(model, config, inputs)
    if m.layout is None:
        raise SpecError(f"model {m.name!r} declares no layout space to search")
    space = m.layout
    wrt = [w.strip() for w in sensitivity_wrt.split(",") if w.strip()] \
        if sensitivity_wrt else None
    if sensitivity or sensitivity_wrt:  # (a bad name is refused before the search runs)
        from jaxmodel.codesign import check_wrt

        check_wrt(m, wrt, minimize or by or "throughput_tokens_s")
    also = tuple(a.strip() for a in search_axes.split(",") if a.strip()) if search_axes else ()
    extra = tuple(space.extra_axes(values, also))
    for a in also:
        if a not in extra:
            raise SpecError(f"--search-axes: got {a!r}; allowed: "
                            + (", ".join(extra) or f"none for model {m.name!r}"))
    # (a fractional axis, such as moe_overlap 0.5, keeps its value)
    pinned = {k: int(values[k]) if m.input_field(k).integer else float(values[k])
              for k in space.axes + extra if inputs.get(k) is not None}
    batch = space.global_batch(values, global_batch, global_batch_tokens)
    groups = tuple(g.strip() for g in group_by.split(",") if g.strip()) if group_by else ()
    varied = {}
    for item in vary or ():
        name, _, listed = item.partition("=")
        given = [v.strip() for v in listed.split(",") if v.strip()] if listed else None
        try:
            numbers = [float(v) for v in given] if given else None
        except ValueError:
            raise SpecError(f"--vary: got {item!r}; allowed: NAME or NAME=V1,V2,... with "
                            "numbers") from None
        varied[name.strip()] = space.vary_values(m, name.strip(), numbers, values)
    # jax is imported only now, once the command line has been checked (issue 26).
    from jaxmodel.engine import SweepInterrupted
    from jaxmodel.searching import explain_no_valid, search

    try:
        result = search(m, values, global_batch=batch,
                        by=minimize or by or "throughput_tokens_s", maximize=minimize is None,
                        top=top, allow_idle=allow_idle, pinned=pinned, group_by=groups,
                        pareto=_pareto_option(pareto), x64=x64, chunk=chunk, vary=varied,
                        also=also, cross_node_tp=cross_node_tp, out=output, resume=resume,
                        overwrite=overwrite,
                        process=process, processes=processes, quiet=False)
    except SweepInterrupted as e:
        r = e.args[0]
        typer.echo(f"interrupted after {r.chunks} chunk(s); the finished ones are saved in "
                   f"{output}; rerun the same command with --resume to continue", err=True)
        raise typer.Exit(130) from None
    if not result.complete:
        _share_done(result, process, processes, output_format)
        return
    doc = _document(m, values, result, allow_idle)
    if output is not None:
        doc["output"] = str(output)
    why = None
    if result.valid == 0:
        why = explain_no_valid(m, values, global_batch=batch, allow_idle=allow_idle, pinned=pinned,
                               x64=x64, contexts=space.varied_contexts(varied))
        doc["why_no_valid"] = why.document()
    notes = _notes(m, values, bool(doc["top"]))
    doc["notes"] = notes
    weights = None
    if (sensitivity or sensitivity_wrt) and doc["top"]:
        from jaxmodel.codesign import weigh

        cand = space.candidates(values, batch, pinned=pinned, vary=varied, also=also,
                                cross_node_tp=cross_node_tp)
        columns = {k: v for k, v in cand.items() if k in m.input_names}
        weights = weigh(m, values, columns, doc["top"][:1], by=result.by,
                        maximize=result.maximize, wrt=wrt, x64=x64)[0]
        doc["sensitivity"] = [w.document() for w in weights.values()]
    if output_format == "json":
        typer.echo(to_json(doc))
        return
    q = doc["question"]
    direction = "max" if result.maximize else "min"
    lines = [f"model {m.name}: {q[space.gpus]:,} GPUs, global batch {batch:,} sequences "
             f"({q['global_batch_tokens']:,} tokens); ranked by {result.by} ({direction})"]
    if doc["top"]:
        shown = [result.by] + [n for n in varied if n not in space.symbols]
        lines += [""] + _table(m, doc["top"], shown, f"best {plural(len(doc['top']), 'layout')}:")
        lines += [""] + doc["why"]
    else:
        lines += [""] + why.lines()
    if doc.get("per_group"):
        lines += [""] + _table(m, doc["per_group"], [result.by],
                               f"best per {', '.join(result.group_by)}:")
    if result.pareto is not None:
        x, y, min_x, min_y = result.pareto_of
        title = (f"Pareto front of {x} ({'min' if min_x else 'max'}) and {y} "
                 f"({'min' if min_y else 'max'}): {plural(len(doc['pareto']), 'layout')}"
                 + (" (truncated: the front outgrew its buffer)" if result.pareto_overflow
                    else ""))
        lines += [""] + (_table(m, doc["pareto"], [x, y], title) if doc["pareto"] else [title])
    if weights:
        from jaxmodel.codesign import FACTORS
        from jaxmodel.codesign import lines as weight_lines

        lines += ["", f"what each input is worth at #1 (envelope gradient; the best layout "
                  f"re-searched at {', '.join(f'{f:g}x' for f in FACTORS)}):"]
        lines += weight_lines(weights, result.by, m)
    lines += [""] + notes if notes else []
    lines += ["", _summary(result)]
    typer.echo("\n".join(lines))


def _share_done(r: "SearchResult", process: int, processes: int, output_format: str) -> None:
    """What a process of several that finished before the others says."""
    if output_format == "json":
        typer.echo(to_json({"complete": False, "process": process, "processes": processes,
                            "output": str(r.path), "candidates": r.candidates,
                            "valid_in_share": r.valid}))
        return
    typer.echo(f"share {process}/{processes} done: {r.valid:,} valid layouts of its part of "
               f"{r.candidates:,} candidates, state saved in {r.path}; the last share to "
               "finish prints the result (or rerun with --resume once all have finished)")


def _notes(model: Model, values: dict[str, float], found: bool) -> list[str]:
    """What a reader must know to trust the ranking: the memory columns, or
    that the model has no memory limit at all."""
    have = model.memory_capacity
    if have and "memory_gb_per_gpu" in model.output_names:
        return [] if not found else [
            f"mem_gb: memory per GPU of the fullest stage (state_gb weights, gradients "
            f"and optimizer + act_gb activations), against {have} = "
            f"{values[have]:g} GB; every layout listed fits."]
    return [f"note: model {model.name!r} has no memory limit, so every layout fits and the "
            "smallest t and p win; for layout questions use --model refined (memory, "
            "recompute, a two-level network)."]
