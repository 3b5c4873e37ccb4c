"""The result documents of ``eval``, ``sensitivity``, ``solve``, ``sweep``, ``presets``,
``calibrate`` and ``validate``.

Each command's JSON document (a dict ready for :func:`jaxmodel.report.to_json`)
and its text for a person are built here, in the core, so that the CLI is only
typer wiring and a dashboard or a notebook gets the same documents without
importing ``jaxmodel.cli``::

    from jaxmodel.documents import sensitivity_document
    s = jaxmodel.sensitivities(values, kind="both")
    doc = sensitivity_document(model, values, s)

(``best``'s document lives beside its search, ``jaxmodel.cli.best``, for now.)
Non-finite floats are JSON ``null`` (an invalid layout); in a ``solve``
document an infinite limit is the string ``"infinity"``.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxmodel.api import as_dicts
from jaxmodel.models import Model
from jaxmodel.models.presets import GPU_COLUMNS, GPUS, LLM_COLUMNS, LLMS, Preset
from jaxmodel.models.validation import SETS, Table, summary, table_summary
from jaxmodel.profile import answer, evaluate_with_profile
from jaxmodel.report import printed_inputs, seed_document
from jaxmodel.sensitivity import Sensitivities, gradient_unit, stepped_inputs
from jaxmodel.solving import Solution, describe

if TYPE_CHECKING:
    from jaxmodel.calibration import Calibration
    from jaxmodel.engine import Plan, SweepResult


# -- eval ------------------------------------------------------------------------------------


def evaluation_document(model: Model, values: Mapping[str, float], *, x64: bool = False,
                        profile: bool = True) -> dict[str, Any]:
    """``jaxmodel eval``'s seed-format document of one configuration: the outputs,
    the verdict, the two profile curves (unless ``profile`` is false), this
    host's name and the wall time of the evaluation (``compute_ms``).

    ``jaxmodel.report.table(doc, model)`` is its text for a person.
    """
    start = time.perf_counter()
    if profile:
        point, curves = evaluate_with_profile(model, values, x64=x64)
    else:
        point, curves = answer(model, x64=x64, **values), None
    outputs = as_dicts(model, point)
    wall_ms = (time.perf_counter() - start) * 1e3
    return seed_document(model, values, outputs, model.verdict(values, outputs), curves=curves,
                         node=socket.gethostname(), wall_ms=wall_ms)


def plural(n: int, word: str) -> str:
    """``1 chunk``, ``2 chunks``, ``1,024 layouts``: a count and its noun, agreed."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


# -- sensitivity -----------------------------------------------------------------------------


def _finite(v: Any) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def sensitivity_document(model: Model, values: Mapping[str, float],
                         s: Sensitivities) -> dict[str, Any]:
    """``jaxmodel sensitivity``'s document: the inputs, the outputs' values, and the
    sensitivities nested output -> input (``gradient`` with ``gradient_units``,
    ``elasticity``, or both), with the step taken for each stepped input."""
    doc: dict[str, Any] = {
        "model": model.name,
        "inputs": printed_inputs(model, values),
        "valid": bool(s.valid),
        "outputs": {o: _finite(s.values[o]) for o in s.of},
    }
    kinds = ["gradient", "elasticity"] if s.kind == "both" else [s.kind]
    for kind in kinds:
        get = s.gradient if kind == "gradient" else s.elasticity
        doc[kind] = {o: {w: _finite(get(o, w)) for w in s.wrt} for o in s.of}
    if "gradient" in kinds:
        doc["gradient_units"] = {o: {w: gradient_unit(model, o, w) for w in s.wrt} for o in s.of}
    if s.stepped_to:
        doc["stepped"] = {w: {"from": values[w], "to": float(v), "note": (
            "discrete difference to the next value that changes the layout")}
            for w, v in s.stepped_to.items()}
    return doc


def _pct(v: float) -> str:
    return "n/a" if not math.isfinite(v) else f"{round(v, 3) + 0.0:+.3f}%"


def plain_number(v: float, *, sign: bool = False) -> str:
    """One number format for a document: thousands separators from 10,000 up
    (``1,360,420``), 4 significant digits below, an exponent only under 0.001."""
    a, plus = abs(v), "+" if sign else ""
    if not math.isfinite(v):
        return "n/a"
    if a >= 1e4 or a == 0:
        return f"{v:{plus},.0f}"
    return f"{v:{plus}.4g}" if a >= 1e-3 else f"{v:{plus}.3e}"


def zero_step(model: Model, name: str) -> float:
    """The step that ranks an input sitting at 0, where an elasticity is 0 whatever
    the slope: one for a whole-number input (one more layer, module, expert: the
    smallest change it can make; 1% of a count's nominal top, 2^24, would rank
    ``mtp_layers`` at 0 by 167,772 modules), else 1% of its range, or 0.01 of its
    unit when it has no top."""
    f = model.input_field(name)
    if f.integer:
        return 1.0
    return 0.01 * (f.high - f.low) if f.high is not None else 0.01


def sensitivity_table(model: Model, values: Mapping[str, float], s: Sensitivities, *,
                      wrt_asked: bool = False) -> str:
    """Per output, the inputs ranked by |elasticity|: "+1% of X -> y% of the output"
    (``s`` of kind ``both``).  An input at 0 is ranked by the effect of
    :func:`zero_step` instead, and says so; the trailer names the stepped inputs
    not shown unless the caller asked for inputs by name (``wrt_asked``)."""
    lines = [f"sensitivities ({model.name} model): +1% of an input -> % change of the output",
             ""]
    width = max(len(w) for w in s.wrt) + 2
    at_zero = [w for w in s.wrt if w not in s.stepped_to and values[w] == 0]
    for o in s.of:
        field = model.output_field(o)
        value = float(s.values[o])
        lines.append(f"{o} = {plain_number(value)} {field.unit}".rstrip())

        def effect(w, o=o, value=value):
            """% change of the output: per +1% of the input, or per zero_step at 0."""
            if w in at_zero:
                g = float(s.gradient(o, w))
                return g * zero_step(model, w) / value * 100.0 if value else math.nan
            return float(s.elasticity(o, w))

        def key(w):
            e = effect(w)
            return -abs(e) if math.isfinite(e) else math.inf

        for w in sorted(s.wrt, key=key):
            e, g = effect(w), float(s.gradient(o, w))
            grad = "" if not math.isfinite(g) else \
                f"({plain_number(g, sign=True)} {gradient_unit(model, o, w)})"
            if w in s.stepped_to:
                x0, x1 = values[w], float(s.stepped_to[w])
                change = g * (x1 - x0) / value * 100.0 if value else math.nan
                lines.append(f"  {w:<{width}}{x0:g} -> {x1:g} (next step) -> "
                             f"{_pct(change)}  {grad}".rstrip())
            elif w in at_zero:
                step = f"at 0: +{zero_step(model, w):g} ->"
                lines.append(f"  {w:<{width}}{step} {_pct(e):<10} {grad}".rstrip())
            else:
                lines.append(f"  {w:<{width}}+1% -> {_pct(e):<10} {grad}".rstrip())
        lines.append("")
    if at_zero:
        lines.append(f"({', '.join(at_zero)}: at 0, where an elasticity is 0 whatever the "
                     "slope; ranked by the effect of +1 for a whole number, else of +1% of the "
                     "range, or +0.01 of the unit when unbounded)")
    unasked = [w for w in model.used(tuple(stepped_inputs(model)), values) if w not in s.wrt]
    if unasked and not wrt_asked:
        lines.append(f"({', '.join(unasked)}: stepped, not shown; ask with --wrt "
                     f"{unasked[0]} for the effect of its next value)")
    return "\n".join(lines).rstrip()


def invalid_sensitivity_text(model: Model, values: Mapping[str, float], *,
                             x64: bool = False) -> str:
    """One line for a configuration whose layout is invalid (its sensitivities are
    undefined): what is wrong with it, as its verdict says."""
    outputs = as_dicts(model, answer(model, x64=x64, **values))
    reasons = model.layout_reasons(values, outputs) if model.layout_reasons else []
    why = "; ".join(r for r, _ in reasons) or model.verdict(values, outputs)
    return f"sensitivities ({model.name} model): undefined, the layout is invalid: {why}"


# -- solve -----------------------------------------------------------------------------------


def _signed(v: Any) -> float | str | None:
    """A float for JSON: NaN as null, infinities spelt out (a limit "at infinity")."""
    v = float(v)
    if math.isnan(v):
        return None
    return v if math.isfinite(v) else ("infinity" if v > 0 else "-infinity")


def solve_document(model: Model, values: Mapping[str, float], s: Solution, *,
                   x64: bool = False) -> dict[str, Any]:
    """``jaxmodel solve``'s document for one configuration: the question, the start,
    the answer (with the output evaluated again at a continuous answer), the
    limit in the target's direction, and the answer as a sentence (``answer``,
    :func:`jaxmodel.solving.describe`)."""
    doc: dict[str, Any] = {
        "model": model.name,
        "inputs": printed_inputs(model, values),
        "target": {"output": s.output, "value": s.target},
        "vary": s.vary,
        "start": {s.vary: _signed(s.start), s.output: _signed(s.start_value)},
        "reached": bool(s.reached),
        "solved": {s.vary: _signed(s.solved)},
        "limit": {s.output: _signed(s.limit), s.vary: _signed(s.limit_at)},
        "blocked_by_invalid_layouts": bool(s.blocked),
    }
    if s.reached and not model.input_field(s.vary).integer:
        check = as_dicts(model, answer(model, x64=x64, **{**values, s.vary: float(s.solved)}))
        doc["solved"][s.output] = _signed(check[s.output])
    doc["answer"] = describe(s, model, inputs=values)
    return doc


# -- sweep -----------------------------------------------------------------------------------


def human_bytes(n: float) -> str:
    """``1234567`` -> ``"1.2 MB"`` (powers of 1000)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} TB"


def dry_run_summary(plan: Plan, estimate: Mapping[str, Any], directory: str | Path) -> str:
    """``jaxmodel sweep --dry-run``'s text: the size, chunks, expected rows and bytes
    (or the reduction's), the expected time and the output directory, from
    :func:`jaxmodel.sweeping.estimate`."""
    est = estimate
    rows = ("expected rows: " + (f"{plan.size:,}" if plan.filter is None else
                                 f"~{est['rows']:,.0f} (filter keeps "
                                 f"{100 * est['keep_fraction']:.3g}% of a probe of "
                                 f"{est['probe']:,})"))
    size = f"expected bytes: ~{human_bytes(est['bytes'])}"
    if plan.reducer is not None:
        r = plan.reducer
        most = getattr(r, "k", None) or getattr(r, "capacity", None) or plan.num_groups
        rows = rows.replace("expected rows", "rows reaching the reduction")
        size = f"reduced rows: at most {most:,} (a few KB)"
    return "\n".join([
        f"configurations: {plan.size:,}",
        f"chunks: {plan.num_chunks:,} of {plan.chunk_size:,}",
        rows,
        size,
        f"expected time: ~{est['seconds']:,.1f} s + ~{est['compile_seconds']:.1f} s compile "
        f"with {est['writers']} writer{'s' * (est['writers'] > 1)} (the probe: "
        f"{est['rate']:,.0f} configurations/s evaluated, {est['write_rate']:,.0f} rows/s "
        "written per writer)",
        f"output: {directory}",
    ])


def sweep_summary(plan: Plan, result: SweepResult, directory: str | Path, *,
                  process: int = 0, processes: int = 1) -> str:
    """The line ``jaxmodel sweep`` prints when a run (or this process's share)
    finishes: what was written or reduced, how fast, and where."""
    if plan.reducer is not None and result.chunks == 0 and result.reduced is not None:
        return f"merged the finished reducer states into {result.rows:,} rows -> {directory}"
    if result.chunks == 0 and result.skipped_chunks:
        return f"nothing to do: {directory} is complete ({plural(result.skipped_chunks, 'chunk')})"
    share = f" (process {process} of {processes})" if processes > 1 else ""
    if plan.reducer is not None:
        kept = result.extra["kept_rows"]
        head = (f"reduced {result.configurations_done:,} configurations{share} "
                f"({kept:,} kept by the filter, {result.valid_rows:,} valid) ")
        tail = (f"to {result.rows:,} rows -> {directory}" if result.reduced is not None else
                "; the reduced rows are written by the last process to finish")
        return (head + f"in {result.seconds:.2f} s ({result.rate:,.0f} configurations/s, "
                f"compile {result.compile_seconds:.2f} s) " + tail)
    total = ""
    if result.skipped_chunks and processes == 1:
        # A resumed run wrote only the rest: say what the dataset holds in all.
        from jaxmodel.dataset import dataset_rows

        rows, parts = dataset_rows(Path(directory))
        total = (f"; the dataset holds {rows:,} row{'s' * (rows != 1)} in {parts:,} "
                 f"part{'s' * (parts != 1)} ({result.skipped_chunks:,} "
                 f"chunk{'s' * (result.skipped_chunks != 1)} from before)")
    return (
        f"wrote {result.rows:,} rows ({result.valid_rows:,} valid) of "
        f"{result.configurations_done:,} configurations{share} in {result.seconds:.2f} s "
        f"({result.rate:,.0f} configurations/s, compile {result.compile_seconds:.2f} s), "
        f"{human_bytes(result.bytes)} in {result.parts} part{'s' * (result.parts != 1)} -> "
        f"{directory}" + (os.sep if not str(directory).endswith(os.sep) else "") + total
    )


# -- presets ---------------------------------------------------------------------------------


def presets_document() -> dict[str, Any]:
    """``jaxmodel presets --format json``: every preset's description, source and values,
    under ``gpu`` and ``llm``."""
    return {kind: {p.name: {"description": p.description, "source": p.source,
                            "values": p.values} for p in table.values()}
            for kind, table in (("gpu", GPUS), ("llm", LLMS))}


def _preset_rows(title: str, presets: Mapping[str, Preset],
                 columns: tuple[tuple[str, str], ...]) -> list[str]:
    def shown(v: float) -> str:
        return f"{int(v)}" if float(v).is_integer() else f"{v:g}"

    # A preset without a column's input (a dense LLM's experts) shows 1.
    rows = [[p.name] + [shown(p.values.get(k, 1)) for k, _ in columns] for p in presets.values()]
    header = ["name"] + [label for _, label in columns]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    line = "  ".join(f"{{:<{widths[0]}}}" if i == 0 else f"{{:>{w}}}"
                     for i, w in enumerate(widths))
    out = [title, line.format(*header)]
    out += [line.format(*r) for r in rows]
    out.append("sources:")
    out += [f"  {p.name}: {p.source}" for p in presets.values()]
    return out


def presets_table() -> str:
    """``jaxmodel presets``: the GPU and LLM presets as two tables, with sources."""
    return "\n".join([
        *_preset_rows("GPUs (--gpu NAME): peak dense bf16, per-GPU bandwidth per direction",
                      GPUS, GPU_COLUMNS),
        "",
        *_preset_rows("LLMs (--llm NAME)", LLMS, LLM_COLUMNS),
    ])


# -- calibrate -------------------------------------------------------------------------------


def calibration_text(cal: Calibration) -> str:
    """``jaxmodel calibrate``'s text: the fitted parameters with their intervals, each
    run's errors before, after and left out, warnings, and the layouts to measure next
    (``Calibration.to_dict()`` is its JSON document)."""
    from jaxmodel.calibration import HELD_REASON

    pct = int(round(cal.confidence * 100))
    b = cal.bootstrap
    lines = [
        f"Calibrated {len(cal.fit)} parameter{'s' if len(cal.fit) > 1 else ''} of model "
        f"{cal.model!r} on {len(cal.runs)} runs ({cal.source}), measured "
        f"{', '.join(cal.outputs)}; {b['resamples']} bootstrap resamples "
        f"({b['converged']} converged within the step limit), {cal.fit_s:.1f} s",
        "",
        f"{'parameter':<26}{'start':>12}{'fitted':>12}   {pct}% interval",
    ]
    for name in cal.fit:
        lo, hi = cal.intervals[name]
        lines.append(f"{name:<26}{cal.start[name]:>12.4g}{cal.values[name]:>12.4g}   "
                     f"{lo:.4g} .. {hi:.4g}")
    if cal.held:
        lines.append(f"held at their starting values ({HELD_REASON}): "
                     + ", ".join(cal.held))
    lines.append("")
    width = max(12, *(len(r["label"]) + 2 for r in cal.runs))
    for o in cal.outputs:
        lines.append(f"{'run':<{width}}{'measured ' + o:>28}{'before':>10}{'after':>10}"
                     f"{'left out':>10}")
        for r in cal.runs:
            meas = r["measured_" + o]
            if meas != meas:  # not measured in this run
                continue
            errs = "".join(f"{r[f'{k}_{o}_error_percent']:>+9.1f}%"
                           for k in ("before", "after", "leave_one_out"))
            lines.append(f"{r['label']:<{width}}{meas:>28.6g}{errs}")
        lines.append("")
    e = cal.errors
    lines.append("error, mean / max |%|: " + ", ".join(
        f"{label} {e[k]['mean_abs_percent']:.2f} / {e[k]['max_abs_percent']:.2f}"
        for k, label in (("before", "before"), ("after", "after"),
                         ("leave_one_out", "leave-one-out (the honest figure)"))))
    for w in cal.warnings:
        lines.append(f"warning: {w}")
    if cal.suggestions:
        lines.append("")
        lines.append("Measure next (where the fitted parameters' uncertainty moves the "
                     "prediction most):")
        for s in cal.suggestions:
            preds = ", ".join(
                f"{o} {plain_number(s['predicted_' + o])} ({pct}% "
                f"{plain_number(s['low_' + o])} .. {plain_number(s['high_' + o])})"
                for o in cal.outputs)
            lines.append(f"  {s['run']}: {preds}")
    return "\n".join(lines)


# -- validate --------------------------------------------------------------------------------


def sc21_validation_text(rows, stats) -> str:
    """The SC21 validation table as Markdown (the README carries the same)."""
    lines = [
        "| params (B) | GPUs | layout | measured TFLOP/s | predicted TFLOP/s | error "
        "| measured step (s) | predicted step (s) | memory (GB) |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['params_b']:g} | {r['gpus']} | {r['layout']} | {r['measured_tflops']:.0f} "
            f"| {r['predicted_tflops']:.1f} | {r['tflops_error_percent']:+.1f}% "
            f"| {r['measured_step_s']:.2f} | {r['predicted_step_s']:.2f} "
            f"| {r['memory_gb_per_gpu']:.1f} |"
        )
    lines.append("")
    lines.append(f"mean absolute error {stats['mean_abs_error_percent']:.1f}%, "
                 f"max {stats['max_abs_error_percent']:.1f}% over {stats['runs']} runs "
                 "(per-GPU TFLOP/s; measured step = eq. 3 FLOPs / (GPUs x measured TFLOP/s))")
    return "\n".join(lines)


def validation_table_text(rows, stats, what: str) -> str:
    """Any validation table as Markdown: measured and predicted ``what`` per run."""
    lines = [f"| params (B) | GPUs | layout | measured {what} | predicted {what} | error "
             "| memory (GB) |", "|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['params_b']:g} | {r['gpus']} | {r['layout']} | {r['measured']:.1f} "
                     f"| {r['predicted']:.1f} | {r['error_percent']:+.1f}% "
                     f"| {r['memory_gb_per_gpu']:.1f} |")
    lines.append("")
    lines.append(f"mean absolute error {stats['mean_abs_error_percent']:.1f}%, "
                 f"max {stats['max_abs_error_percent']:.1f}% over {stats['runs']} runs ({what})")
    return "\n".join(lines)


def validation_calibration_text(cal, stats) -> str:
    """The fit on the validation runs: values, per-run errors, both mean errors."""
    pct = int(round(cal.confidence * 100))
    lines = ["Calibrated on these runs (" + ", ".join(cal.fit) + "):", ""]
    lines.append(f"| parameter | default | fitted | {pct}% interval |")
    lines.append("|---|---:|---:|---|")
    for name in cal.fit:
        lo, hi = cal.intervals[name]
        lines.append(f"| {name} | {cal.start[name]:.4g} | {cal.values[name]:.4g} "
                     f"| {lo:.4g} .. {hi:.4g} |")
    lines.append("")
    lines.append("| run | uncalibrated | calibrated | left out |")
    lines.append("|---|---:|---:|---:|")
    o = cal.outputs[0]
    for r in cal.runs:
        lines.append(f"| {r['label']} | {r[f'before_{o}_error_percent']:+.1f}% "
                     f"| {r[f'after_{o}_error_percent']:+.1f}% "
                     f"| {r[f'leave_one_out_{o}_error_percent']:+.1f}% |")
    e = cal.errors
    lines.append("")
    lines.append(
        f"mean absolute error: uncalibrated {stats['mean_abs_error_percent']:.1f}% "
        f"(max {stats['max_abs_error_percent']:.1f}%), calibrated leave-one-out "
        f"{e['leave_one_out']['mean_abs_percent']:.1f}% "
        f"(max {e['leave_one_out']['max_abs_percent']:.1f}%), calibrated in-sample "
        f"{e['after']['mean_abs_percent']:.1f}%")
    for w in cal.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def moe_validation_text(rows, stats) -> str:
    """The Qwen3-235B MoE validation table as Markdown."""
    lines = [
        "| GPU | precision | seq | layout | dispatcher | measured TFLOP/s | predicted TFLOP/s "
        "| error | measured step (s) | predicted step (s) | exposed a2a (s) | memory (GB) |",
        "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        mark = "" if r["scored"] else " (beside)"
        lines.append(
            f"| {r['gpu']}{mark} | {r['precision']} | {r['seq_length']} | {r['layout']} "
            f"| {r['dispatcher']} | {r['measured_tflops']:.0f} | {r['predicted_tflops']:.1f} "
            f"| {r['tflops_error_percent']:+.1f}% | {r['measured_step_s']:.2f} "
            f"| {r['predicted_step_s']:.2f} | {r['moe_comm_s']:.2f} "
            f"| {r['memory_gb_per_gpu']:.0f} |")
    lines.append("")
    lines.append(f"H100 rows: mean absolute error {stats['mean_abs_error_percent']:.1f}%, max "
                 f"{stats['max_abs_error_percent']:.1f}% over {stats['runs']} runs (per-GPU "
                 "TFLOP/s as Megatron-LM counts them); GB200 rows shown beside, not scored")
    return "\n".join(lines)


def validation_document(table: Table, rows, stats, cal: Calibration | None = None
                        ) -> dict[str, Any]:
    """``jaxmodel validate --format json``: the set, its GPU and settings (with what
    the file's header assumed), every run's measured and predicted figures, the
    summary, and the calibration on these runs if one was made."""
    chosen = SETS[table.set_name]
    doc = {"set": chosen.name, "gpu": table.header.get("gpu", chosen.gpu),
           "settings": {**chosen.settings, **{k: v for k, v in table.header.items()
                                              if k not in ("set", "gpu")}},
           "assumed": table.assumed or None, "runs": rows, "summary": stats}
    if cal is not None:
        doc["calibration"] = cal.to_dict()
    return doc


def validation_text(table: Table, rows, cal: Calibration | None = None) -> str:
    """``jaxmodel validate``'s Markdown: the set, then the runs' table (SC21 columns:
    TFLOP/s and step time; others: the measured figure), then the calibration."""
    chosen = SETS[table.set_name]
    lines = [f"set: {chosen.name} ({chosen.description}); GPU "
             f"{table.header.get('gpu', chosen.gpu)}"]
    if table.assumed:
        lines.append(f"assumed: {table.assumed}")
    if table.kind == "tflops" and "tflops_error_percent" in rows[0]:
        lines.append(sc21_validation_text(rows, summary(rows)))
    else:
        what = "TFLOP/s" if table.kind == "tflops" else "MFU %"
        lines.append(validation_table_text(rows, table_summary(rows), what))
    if cal is not None:
        lines += ["", validation_calibration_text(cal, summary(rows))]
    return "\n".join(lines)


def _percent_triple(stats: dict[str, Any]) -> str:
    if not stats.get("n"):
        return "--"
    return f"{stats['mean']:.1f} / {stats['median']:.1f} / {stats['max']:.1f}"


def _rows_text(labels: list[str], limit: int = 8) -> str:
    shown = ", ".join(labels[:limit])
    return shown + (f" and {len(labels) - limit} more" if len(labels) > limit else "")


def row_validation_text(run: dict[str, Any]) -> str:
    """``jaxmodel validate --row``'s heading: the published run, what it measured, what
    the model predicts of it out of the box, and how its inputs approximate it (the
    evaluation's table follows it)."""
    def num(v):
        return "-" if v is None else f"{v:,.4g}"

    def err(v):
        return "-" if v is None else f"{v:+.1f}%"

    lines = [f"{run['set']} {run['row']} ({run['variant']}): {run['source']}",
             f"GPU {run['gpu']}, layout {run['layout']}",
             f"measured {num(run['measured'])}, predicted {num(run['predicted'])} "
             f"({err(run['error_percent'])})"]
    memory = (f"memory {num(run['memory_gb'])} GB of {num(run['gpu_memory_gb'])}"
              f" ({'fits' if run['fits'] else 'does not fit'})")
    if run["measured_memory_gb"] is not None:
        memory += (f"; measured {num(run['measured_memory_gb'])} GB "
                   f"({err(run['memory_error_percent'])})")
    lines.append(memory)
    lines += [f"approximation: {note}" for note in run["approximations"]]
    return "\n".join(lines)


def all_validation_text(doc: dict[str, Any]) -> str:
    """``jaxmodel validate --all``'s Markdown (and ``docs/validation.md``): a line per set
    and variant, then what could not be expressed, what was approximated, and which
    runs the model says do not fit although they ran."""
    calibrated = doc["calibrated"]
    head = ("| set | variant | rows | expressible | does not fit | invalid "
            "| throughput \\|error\\| % mean / median / max "
            "| memory \\|error\\| % mean / median / max |")
    rule = "|---|---|---:|---:|---:|---:|---:|---:|"
    if calibrated:
        head += " calibrated (k-fold) \\|error\\| % mean / median / max |"
        rule += "---:|"
    lines = [f"Rule: {doc['rule']}.", "", head, rule]
    for s in doc["sets"]:
        line = (f"| {s['set']} | {s['variant']} | {s['rows']} | {s['expressible']} "
                f"| {s['does_not_fit']} | {len(s['invalid'])} "
                f"| {_percent_triple(s['error_percent'])} "
                f"| {_percent_triple(s['memory_error_percent'])} |")
        if calibrated:
            line += f" {_percent_triple(s['calibrated_error_percent'])} |"
        lines.append(line)
    lines += ["", "Sets (measured quantity):", ""]
    seen = set()
    for s in doc["sets"]:
        if s["set"] not in seen:
            seen.add(s["set"])
            lines.append(f"- {s['set']}: {s['description']}")
    lines += ["", "Not expressible (reason: rows):", ""]
    for s in doc["sets"]:
        by_reason: dict[str, list[str]] = {}
        for r in s["not_expressible"]:
            by_reason.setdefault(r["reason"], []).append(r["row"])
        for reason, rows in by_reason.items():
            lines.append(f"- {s['set']} ({s['variant']}), {len(rows)}: {reason}: "
                         f"{_rows_text(rows)}")
        for r in s["invalid"]:
            lines.append(f"- {s['set']} ({s['variant']}), invalid layout: {r['row']}: "
                         f"{r['verdict']}")
    lines += ["", "Approximations (rows that use each):", ""]
    for s in doc["sets"]:
        for note, count in s["approximations"].items():
            lines.append(f"- {s['set']} ({s['variant']}), {count}: {note}")
    lines += ["", "Called \"does not fit\" although they ran (model GB / GPU GB):", ""]
    by_set: dict[tuple[str, str], list[str]] = {}
    for r in doc["runs"]:
        if r["expressible"] and r["fits"] is False and r["memory_gb"] is not None:
            by_set.setdefault((r["set"], r["variant"]), []).append(
                f"{r['row']} {r['memory_gb']:.0f}/{r['gpu_memory_gb']:.0f}")
    for (name, variant), rows in by_set.items():
        lines.append(f"- {name} ({variant}), {len(rows)}: {_rows_text(rows, 12)}")
    if doc.get("gpu_pairs"):
        lines += ["", "GPU against GPU: one workload (model, precision, release, GPU count) "
                  "published on both, each on its own layout; the second GPU's speed over the "
                  "first's, measured and predicted (medians), and the predicted ratio's "
                  "\\|error\\|:", "",
                  "| GPUs | workloads (same layout) | measured ratio | predicted ratio "
                  "| ratio \\|error\\| % mean / median / max |",
                  "|---|---:|---:|---:|---:|"]
        for r in doc["gpu_pairs"]:
            a, b = r["gpus"]
            lines.append(f"| {b} / {a} | {r['workloads']} ({r['same_layout']}) "
                         f"| {r['measured_ratio_median']:.2f} "
                         f"| {r['predicted_ratio_median']:.2f} "
                         f"| {_percent_triple(r['ratio_error_percent'])} |")
    lines += ["", "Measured more than once (identical inputs): the least |error| any model of "
              "the rows' inputs can reach, max and mean over the set; the widest spread:", ""]
    for s in doc["sets"]:
        r = s.get("repeats") or {}
        if not r.get("groups"):
            continue
        widest = r["widest"][0]
        values = " / ".join(f"{v:.4g}" for v in widest["measured"])
        lines.append(f"- {s['set']} ({s['variant']}): {r['groups']} configurations, "
                     f"{r['rows']} rows; floor {r['floor_max_percent']:.1f} max, "
                     f"{r['floor_mean_percent']:.1f} mean; widest "
                     f"{', '.join(widest['rows'])}: {values} "
                     f"({widest['spread_percent']:.0f}% apart)")
    if calibrated and doc["calibration_skipped"]:
        lines += ["", "No calibrated figure:", ""]
        for gpu, why in doc["calibration_skipped"].items():
            lines.append(f"- {gpu}: {why}")
    return "\n".join(lines)


VALIDATION_DOC_HEAD = """# Validation: the model against the public record

Generated by `jaxmodel validate --all --format markdown -o docs/validation.md` (a test
fails when this file is stale). Each set is a CSV with its source in its header
(`jaxmodel/data/`, `tests/data/`); how each source column becomes the model's inputs is
declared in one table per set (`jaxmodel/models/validation_sets.py`), the existing sets'
own settings in `jaxmodel/models/validation.py` and `validation_moe.py`. Errors are
`predicted / measured - 1` of the set's measured quantity, over the expressible rows; the
step time is predicted whatever the memory model says (every row ran), and "does not
fit" counts the rows the model calls too big for their GPU. `jaxmodel validate --all
--calibrated` adds the k-fold calibrated column (per GPU; slow: minutes).

"""


def _cell(value, fmt: str) -> str:
    return "--" if value is None else format(value, fmt)


def validation_runs_text(doc: dict[str, Any]) -> str:
    """Every expressible run of the out-of-the-box variants, measured against predicted."""
    lines = ["| set | row | GPU | layout | measured | predicted | error | memory GB "
             "(GPU GB) | measured memory GB |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for r in doc["runs"]:
        if not r["expressible"] or not r["variant"].endswith("out of the box"):
            continue
        error = "--" if r["error_percent"] is None else f"{r['error_percent']:+.1f}%"
        lines.append(f"| {r['set']} | {r['row']} | {r['gpu']} | {r['layout']} "
                     f"| {_cell(r['measured'], '.4g')} | {_cell(r['predicted'], '.4g')} "
                     f"| {error} | {_cell(r['memory_gb'], '.1f')} "
                     f"({_cell(r['gpu_memory_gb'], '.0f')}) "
                     f"| {_cell(r['measured_memory_gb'], '.1f')} |")
    return "\n".join(lines)


def validation_markdown(doc: dict[str, Any]) -> str:
    """``docs/validation.md``: a heading, how it is made, the ``--all`` table, then
    every expressible run out of the box."""
    return (VALIDATION_DOC_HEAD + all_validation_text(doc)
            + "\n\n## Every expressible run, out of the box\n\n"
            + "Measured and predicted in the set's unit (tokens/s or TFLOP/s per GPU, MFU "
              "%); memory in GB (1e9 bytes).\n\n"
            + validation_runs_text(doc) + "\n")
