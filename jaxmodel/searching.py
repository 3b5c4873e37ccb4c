"""Layout search: every layout of a model's layout space, ranked.

The candidates are the model's (``Model.layout``, e.g.
:class:`jaxmodel.models.layout.LayoutSpace`: every TP x PP x DP x micro-batch
x accumulation layout of a GPU count and global batch, crossed with the
model's own axes), in ``config_id`` order.  They run through the sweep
engine (:mod:`jaxmodel.engine`) as an explicit candidate table
(``SweepSpec.table``): put on the device once and looked up by row inside
the jitted step.  The table is crossed (``LayoutSpace.crossed``): its rows
are the layouts (a few hundred), and per layout the combinations of the
searched axes the layout rules admit; the device decodes candidate ``i``
into its layout and its axes' values (``IndexSpace.crossed_rows``), so the
host never builds the crossed table (10.8M rows of 14 columns for the
DeepSeek-V3 search of issue 26; with ``group_by`` it still does, to number
the groups).  Then the model is ``vmap``-ed over fixed-shape chunks sharded over
the local devices (the last chunk padded and masked, so one compile serves
every chunk), folded into a top-k (and optionally a best-per-group and a
Pareto) state by ``jaxmodel.reduce`` inside the same step, so only ``k`` rows
come back.  Like a ``[reduce]`` sweep, a search can checkpoint into a
directory, resume after Ctrl-C, and be split over processes.  The model's
validity output (``Model.validity``) is the filter; rows whose metric is NaN
never win.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxmodel.api import evaluate, program_key
from jaxmodel.engine import Plan, merged_state, read_metadata, run_reduce
from jaxmodel.errors import InputError, SpecError, closest
from jaxmodel.expr import parse
from jaxmodel.models import Model, get_model
from jaxmodel.models.layout import (
    CANDIDATE_COLUMNS,
    LAYOUT_AXES,
    MAX_GLOBAL_BATCH,
    NoValid,
    check_global_batch,
    divisors,
    enumerate_layouts,
    global_batch_of,
    nearest_batches,
    vary_values,
)
from jaxmodel.models.layout import explain_no_valid as explain_layouts
from jaxmodel.precision import computing, float_dtype
from jaxmodel.reduce import CONFIG_ID, Combined, GroupBest, Pareto, TopK
from jaxmodel.sink import METADATA_FILE
from jaxmodel.spec import CandidateTable, SweepSpec

MAX_TOP = 10_000
DEFAULT_CHUNK = 1 << 16
# A search without group_by hands the device its layouts and the admitted
# combinations of the searched axes (``LayoutSpace.crossed``), not the crossed
# table (tests set this False to compare with the table).
CROSSED = True


@dataclass
class SearchResult:
    """What a search found and what it cost.

    Attributes:
      top: the best rows, best first (metric, then ``config_id`` ascending):
        ``config_id`` and every input and output column, numpy arrays.
      per_group: the best row per group (``group_by``), ascending group, or None.
      pareto: the Pareto front of ``pareto_of`` (x best first), or None;
        pareto_overflow: the front outgrew the buffer (then truncated).
      candidates: layouts evaluated; valid: of those, the valid ones.
      enumerate_s, compile_s, run_s: wall seconds of each phase; ``compile_s``
        is the first chunk (its compile and run), ``run_s`` every other
        chunk, the transfers and the reduction.
      chunk: rows per compiled step; chunks: chunks in the search.
      complete: False for a process of several that finished before the
        others (then the rows are empty and ``valid`` counts its share).
      path: the output directory, or None (in memory).
      skipped_chunks: chunks found done in ``path`` (a resumed search).
    """

    top: dict[str, np.ndarray]
    per_group: dict[str, np.ndarray] | None
    candidates: int
    valid: int
    enumerate_s: float
    compile_s: float
    run_s: float
    chunk: int
    chunks: int
    global_batch: int
    by: str
    maximize: bool
    group_by: tuple[str, ...] = field(default_factory=tuple)
    pareto: dict[str, np.ndarray] | None = None
    pareto_of: tuple | None = None
    pareto_overflow: bool = False
    complete: bool = True
    path: Path | None = None
    skipped_chunks: int = 0

    @property
    def total_s(self) -> float:
        return self.enumerate_s + self.compile_s + self.run_s


def _check_model(model: Model) -> None:
    if model.layout is None:
        raise SpecError(f"model {model.name!r} declares no layout space to search")


def _check_column(model: Model, name: str, what: str) -> None:
    names = (CONFIG_ID, *model.input_names, *model.output_names)
    if not isinstance(name, str) or name not in names:
        shown = closest(name, names) if isinstance(name, str) else ""
        raise SpecError(f"{what}: no column {name!r}{shown}; "
                        f"columns of model {model.name!r}: inputs and outputs")
    if name in model.output_names and model.output_field(name).kind in ("category", "bool"):
        raise SpecError(f"{what}: {name!r} is not a number to rank by (it is a "
                        f"{model.output_field(name).kind}); allowed: an integer or float "
                        "column such as throughput_tokens_s")


def search(model: str | Model, values: Mapping[str, float], *, global_batch: int,
           by: str = "throughput_tokens_s", maximize: bool = True, top: int = 10,
           allow_idle: bool = False, pinned: Mapping[str, int] | None = None,
           group_by: Sequence[str] = (), pareto: tuple | None = None, x64: bool = False,
           chunk: int | None = None,
           vary: Mapping[str, Sequence[float]] | None = None,
           also: Sequence[str] = (), cross_node_tp: bool = False,
           out: str | Path | None = None, resume: bool = False,
           overwrite: bool = False, process: int = 0, processes: int = 1,
           devices: Sequence | None = None, quiet: bool = True,
           progress_stream=None) -> SearchResult:
    """Evaluate every layout of ``values``' model and cluster; keep the best.

    The candidates run through the sweep engine (:mod:`jaxmodel.engine`) as an
    explicit candidate table: sharded over the local devices, optionally split
    over processes and checkpointed in ``out``.

    Args:
      values: one configuration of every input (``gather_inputs``); the layout
        axes in it are ignored unless ``pinned``.
      global_batch: sequences per optimizer step, ``b m d``.
      by, maximize: the ranking column (any input or output) and direction.
      top: rows kept, 1 to 10,000.
      allow_idle: allow ``t p`` not dividing ``num_gpus`` (idle GPUs).
      pinned: layout axes (and the model's own axes) held at one value.
      group_by: candidate columns (``model.layout.columns`` and the model's own
        axes); if given, also the
        best row per distinct value of them.
      pareto: ``(x, y, minimize_x, minimize_y)``: also the Pareto front of
        columns x and y (4,096 points at most).
      chunk: rows per compiled step (default: 65,536, or less for small
        searches; resuming, the one the search was started with).
      also: optional model layout axes to search too (``LayoutSpace.extra``).
      vary: other inputs to search over, ``{name: values}`` (see ``vary_values``):
        a layout axis takes only those values, the context degree enters the
        layout (``d = N / (t c p)``), any other input multiplies every layout
        by its values.
      cross_node_tp: let tensor parallelism span nodes (default: ``t`` within
        the NVLink domain, as practised, unless ``t`` is pinned or varied).
      out: a directory for the reducer states (and, once every process is
        done, the top rows as a Parquet dataset), so that an interrupted
        search resumes (``resume``) or is replaced (``overwrite``), and
        ``processes`` processes can share it (this one is ``process``, 0 to
        ``processes - 1``), as ``jaxmodel sweep --shard`` does.  None: in
        memory, one process.
      devices: local devices to shard each chunk over (default: all local).

    Returns:
      The result; with several processes, ``complete`` is False (and the rows
      empty) for a process that finished before the others: the last one to
      finish, or any later run with ``resume``, returns the whole result.

    Raises:
      SpecError: unknown column, or no layout fits the global batch.
      SweepInterrupted: Ctrl-C with ``out``: the finished chunks are saved,
        ``resume`` continues.
    """
    model = get_model(model)
    _check_model(model)
    _check_column(model, by, "--by")
    if not 1 <= top <= MAX_TOP:
        raise InputError("top", top, f"a whole number from 1 to {MAX_TOP}")
    check_processes(process, processes, out)
    group_by = tuple(group_by)
    space = model.layout
    extra = space.extra_axes(values, also)
    columns = space.columns + tuple(extra)
    for g in group_by:
        if g not in columns:
            raise SpecError(f"--group-by: {g!r} is not a layout column"
                            f"{closest(g, columns)}; one of " + ", ".join(columns))
    if pareto is not None:
        for name in pareto[:2]:
            _check_column(model, name, "--pareto")
    pinned = dict(pinned or {})
    pinnable = space.axes + tuple(extra)
    for name, value in pinned.items():
        if name not in pinnable:
            raise SpecError(f"pinned: {name!r} is not a layout axis{closest(name, pinnable)}"
                            f"; allowed: {', '.join(pinnable)}")
        model.input_field(name).check_scalar(value)
    missing = [n for n in model.input_names if n not in values]
    if missing:
        raise SpecError(f"values: no value for {missing[0]!r} (give every input of model "
                        f"{model.name!r}, e.g. from gather_inputs)")
    for f in model.inputs:
        f.check_scalar(values[f.name])  # NaN, out of domain: one line, not an empty result
    check_global_batch(global_batch)

    start = time.perf_counter()
    vary = dict(vary or {})
    for name in vary:
        if name not in model.input_names:
            raise SpecError(f"--vary: {name!r} is not an input of model {model.name!r}"
                            + closest(name, model.input_names))
        if name in pinned:
            raise SpecError(f"--vary: {name!r} is also pinned to {pinned[name]}; give one")
    crossed, group_ids, num_groups = None, None, 1
    if CROSSED:
        # The layouts, and per layout the admitted combinations of the searched
        # axes: the device decodes each candidate from its index (issue 26).
        crossed = space.crossed(values, global_batch, allow_idle=allow_idle, pinned=pinned,
                                vary=vary, also=also, cross_node_tp=cross_node_tp)
        cand, n = crossed.layouts, crossed.size
        if group_by and n:
            groups = crossed.groups(group_by)
            if groups is None:  # (too many groups to number without the table)
                crossed = None
            else:
                *group_ids, num_groups = groups
                group_ids = tuple(group_ids)
    if crossed is None:
        cand = space.candidates(values, global_batch, allow_idle=allow_idle,
                                pinned=pinned, vary=vary, also=also,
                                cross_node_tp=cross_node_tp)
        n = len(next(iter(cand.values())))
    if n == 0:
        raise space.no_layout_error(values, global_batch, allow_idle=allow_idle, pinned=pinned,
                                    vary=vary)
    if group_by and crossed is None:
        stacked = np.stack([cand[g] for g in group_by], axis=1)
        group_keys, group_ids = np.unique(stacked, axis=0, return_inverse=True)
        group_ids = group_ids.reshape(-1).astype(np.int64)
        num_groups = len(group_keys)
    enumerate_s = time.perf_counter() - start

    # (the replica count is an output, known ahead only to group by)
    layout = {k: v for k, v in cand.items() if k in model.input_names}
    reducers: tuple = (TopK(by, top, maximize),)
    if group_by:
        reducers += (GroupBest(by, group_by, maximize),)
    if pareto is not None:
        reducers += (Pareto(*pareto),)
    question = {"search": {"global_batch": global_batch, "allow_idle": allow_idle,
                           "pinned": pinned, "vary": {k: [float(v) for v in vs]
                                                      for k, vs in vary.items()},
                           "also": list(also), "cross_node_tp": cross_node_tp, "by": by,
                           "maximize": maximize, "top": top,
                           "group_by": list(group_by),
                           "pareto": list(pareto) if pareto else None}}
    report = idle_report(model, values) if space.gpus in layout else None
    run = reduce_table(model, values, layout, Combined(reducers), question=question, x64=x64,
                       chunk=chunk, group_by=group_by, group_ids=group_ids,
                       num_groups=num_groups, report=report, out=out, resume=resume,
                       overwrite=overwrite, process=process, processes=processes,
                       devices=devices, quiet=quiet, progress_stream=progress_stream,
                       crossed=crossed)
    parts = run.reducer.parts(run.state)
    front = parts[-1] if pareto is not None else None
    return SearchResult(
        top=parts[0],
        per_group=parts[1] if group_by else None,
        pareto=front, pareto_of=tuple(pareto) if pareto else None,
        pareto_overflow=bool(pareto) and run.complete and reducers[-1].overflowed(
            run.state[str(len(reducers) - 1)]),
        candidates=n, valid=run.valid, enumerate_s=enumerate_s, compile_s=run.compile_s,
        run_s=run.run_s, chunk=run.chunk, chunks=run.chunks, global_batch=global_batch,
        by=by, maximize=maximize, group_by=group_by, complete=run.complete, path=run.path,
        skipped_chunks=run.skipped,
    )


def idle_report(model: Model, values: Mapping[str, float]):
    """Rows with fewer replicas than fit run on the d t p GPUs they use (the
    candidate table's ``num_gpus``) and are reported with the job's GPUs, the
    rest of them idle (the shared ``idle_gpus`` output)."""
    gpus = model.layout.gpus
    job = int(round(float(values[gpus])))

    def report(cols):
        if "used_gpus" not in cols:
            return cols
        cols = dict(cols)
        cols[gpus] = jnp.full(cols[CONFIG_ID].shape, job, jnp.int64)
        cols["idle_gpus"] = cols[gpus] - cols["used_gpus"]
        return cols

    return report


def check_outputs(model: Model, dtype, *, force: bool = False) -> None:
    """The model's outputs for one configuration against the kinds it declares
    (one abstract trace, nothing computed): the reducers hold the declared
    column types, into which a mismatched output would be cast silently.

    A registered model (``jaxmodel.api.program_key``) is fixed by the package's
    files and checked by its tests (tests/test_best_engine.py), so it is not
    traced again here: that trace was a second of every warm ``best`` (issue 26).

    Raises:
      SpecError: an output that is not a scalar of its declared kind.
    """
    if program_key(model) is not None and not force:
        return
    x = model.inputs_type(*(jax.ShapeDtypeStruct((), dtype) for _ in model.inputs))
    with computing():
        out = jax.eval_shape(model.apply, x)
    for f, v in zip(model.outputs, out, strict=True):
        got = np.dtype(v.dtype)
        ok = {"float": np.issubdtype(got, np.floating),
              "int": np.issubdtype(got, np.integer),
              "category": np.issubdtype(got, np.integer),
              "bool": got == np.bool_}[f.kind]
        if not ok or tuple(v.shape) != ():
            raise SpecError(f"model {model.name!r}: output {f.name!r} is {got} of shape "
                            f"{tuple(v.shape)}; allowed: a scalar of its declared kind "
                            f"({f.kind})")


def check_processes(process: int, processes: int, out) -> None:
    """``process`` of ``processes``: 0 <= process < processes, and several need ``out``."""
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise InputError("processes", processes, "a whole number >= 1")
    if isinstance(process, bool) or not isinstance(process, int) or not 0 <= process < processes:
        raise InputError("process", process, f"a whole number from 0 to {processes - 1}")
    if processes > 1 and out is None:
        raise SpecError(f"processes: got {processes}; several processes need an output "
                        "directory (--output) to share their states")


@dataclass
class TableRun:
    """The reduction of a candidate table (see :func:`reduce_table`).

    Attributes:
      state: the reducer state over every row (merged over processes), or,
        when ``complete`` is False (another process has not finished), a
        fresh empty state.
      valid: rows kept as valid (every process's when complete, else this one's).
      compile_s: the first chunk (its compile and run); run_s: the rest of the
        loop (and the merge).  chunk, chunks: rows per chunk, chunks in the table.
      skipped: chunks found done (a resumed run).
    """

    reducer: Any
    state: dict
    valid: int
    compile_s: float
    run_s: float
    chunk: int
    chunks: int
    complete: bool = True
    skipped: int = 0
    path: Path | None = None


def table_spec(model: Model, values: Mapping[str, float], columns: Mapping[str, np.ndarray],
               *, question: Mapping[str, Any], group_by: Sequence[str] = (),
               group_ids: np.ndarray | None = None, num_groups: int = 1,
               report=None, crossed=None) -> SweepSpec:
    """A sweep spec over explicit candidate rows: ``columns`` (equal-length, some
    inputs), every other input from ``values``; only valid rows are kept.

    ``question`` (JSON-able: what the rows answer) and a digest of the table
    are the spec's text: the identity a resumed run is checked against.
    """
    digest = hashlib.sha256()
    for name, col in sorted(columns.items()):
        digest.update(name.encode() + np.ascontiguousarray(col).tobytes())
    if group_ids is not None:
        for ids in (group_ids if isinstance(group_ids, tuple) else (group_ids,)):
            digest.update(np.ascontiguousarray(ids).tobytes())
    table = CandidateTable(columns={k: np.asarray(v) for k, v in columns.items()},
                           group_by=tuple(group_by), group_ids=group_ids,
                           num_groups=num_groups, report=report, crossed=crossed)
    described = {"rows": table.size, "columns": sorted(columns), "group_by": list(group_by)}
    if crossed is not None:
        for name, col in crossed.axes.items():
            digest.update(name.encode() + np.ascontiguousarray(col).tobytes())
        for col in (crossed.pattern, crossed.combos, crossed.starts, crossed.ends):
            digest.update(np.ascontiguousarray(col).tobytes())
        described.update(layouts=len(crossed.ends), axes=list(crossed.axes))
    text = json.dumps({"model": model.name, "question": question,
                       "values": {f.name: float(values[f.name]) for f in model.inputs},
                       "table": {**described, "sha256": digest.hexdigest()}}, sort_keys=True)
    return SweepSpec(text=text, name="best", model=model,
                     base={f.name: float(values[f.name]) for f in model.inputs},
                     filter=parse(model.validity), table=table)


def reduce_table(model: Model, values: Mapping[str, float], columns: Mapping[str, np.ndarray],
                 reducer, *, question: Mapping[str, Any] | None = None, x64: bool = False,
                 chunk: int | None = None, group_by: Sequence[str] = (),
                 group_ids: np.ndarray | None = None, num_groups: int = 1, report=None,
                 out: str | Path | None = None, resume: bool = False, overwrite: bool = False,
                 process: int = 0, processes: int = 1, devices: Sequence | None = None,
                 quiet: bool = True, progress_stream=None, crossed=None) -> TableRun:
    """Fold explicit candidate rows into ``reducer`` with the sweep engine.

    ``columns`` are equal-length columns of some inputs (row ``i`` is
    ``config_id`` ``i``), every other input comes from ``values``; the rows
    are decoded on the device, evaluated in fixed-shape chunks sharded over
    the local devices and folded into ``reducer`` (a :mod:`jaxmodel.reduce`
    reducer; its ``group_by`` groups are ``group_ids``), keeping valid rows
    only.  With ``out`` the run checkpoints there and may be one of
    ``processes`` (see :func:`search`); without, it runs in memory.
    ``crossed`` (a :class:`~jaxmodel.models.layout.CrossedCandidates`):
    ``columns`` are its layouts' and the rows are its candidates.
    """
    check_processes(process, processes, out)
    n = crossed.size if crossed is not None else len(next(iter(columns.values())))
    directory = None if out is None else Path(out)
    if chunk is None and resume and directory is not None \
            and (directory / METADATA_FILE).exists():
        chunk = read_metadata(directory / METADATA_FILE)["chunk_size"]
    chunk = chunk or min(DEFAULT_CHUNK, max(256, 1 << (n - 1).bit_length()))
    spec = table_spec(model, values, columns, question=question or {}, group_by=group_by,
                      group_ids=group_ids, num_groups=num_groups, report=report,
                      crossed=crossed)
    check_outputs(model, float_dtype(x64))
    plan = Plan(spec, x64=x64, chunk_size=chunk, devices=devices, reducer=reducer)
    swept = run_reduce(plan, directory, resume=resume, overwrite=overwrite, process=process,
                       processes=processes, quiet=quiet, progress_stream=progress_stream)
    start = time.perf_counter()
    complete = True
    if directory is None:
        state, valid = swept.extra["state"], swept.valid_rows
    else:
        merged = merged_state(plan, directory)
        if merged is None:
            complete = False
            state, valid = plan.widen(plan.init_state()), swept.valid_rows
        else:
            state, counts = merged
            valid = counts["valid"]
    run_s = max(swept.seconds - swept.compile_seconds, 0.0) + time.perf_counter() - start
    return TableRun(reducer=reducer, state=state, valid=int(valid),
                    compile_s=swept.compile_seconds, run_s=run_s, chunk=plan.chunk_size,
                    chunks=plan.num_chunks, complete=complete, skipped=swept.skipped_chunks,
                    path=directory)
def row_dicts(model: Model, rows: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """Result rows as plain Python values: integers as int, categories as names."""
    out = []
    for i in range(len(rows[CONFIG_ID])):
        row: dict[str, Any] = {CONFIG_ID: int(rows[CONFIG_ID][i])}
        for f in model.inputs:
            v = float(rows[f.name][i])
            row[f.name] = int(v) if f.integer else v
        for f in model.outputs:
            v = rows[f.name][i]
            if f.kind == "category":
                row[f.name] = f.categories[int(v)]
            elif f.kind == "bool":
                row[f.name] = bool(v)
            elif f.kind == "int":
                row[f.name] = int(v)
            else:
                row[f.name] = None if np.isnan(v) else float(v)
        out.append(row)
    return out


# (the layout space's names, re-exported: they were defined here before it
# moved into the models)
def explain_no_valid(model: str | Model, values: Mapping[str, float], *, global_batch: int,
                     allow_idle: bool = False, pinned: Mapping[str, int] | None = None,
                     x64: bool = False, contexts: Sequence[int] | None = None) -> NoValid:
    """Why a search found no valid layout (``jaxmodel.models.layout.explain_no_valid``),
    its candidates evaluated again by the API's ``evaluate``; ``contexts``: the
    context-parallel degrees the search varied."""
    model = get_model(model)
    return explain_layouts(model, values, evaluate=evaluate,
                           global_batch=global_batch, allow_idle=allow_idle, pinned=pinned,
                           x64=x64, uneven=model.layout.uneven_pipeline, contexts=contexts)


__all__ = ["CANDIDATE_COLUMNS", "LAYOUT_AXES", "MAX_GLOBAL_BATCH", "NoValid", "SearchResult",
           "TableRun", "check_global_batch", "divisors", "enumerate_layouts",
           "explain_no_valid", "global_batch_of", "nearest_batches", "reduce_table",
           "row_dicts", "search", "table_spec", "vary_values"]
