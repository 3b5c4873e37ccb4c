"""Layout search: every layout of a model's layout space, ranked.

The candidates are the model's (``Model.layout``, e.g.
:class:`jaxmodel.models.layout.LayoutSpace`: every TP x PP x DP x micro-batch
x accumulation layout of a GPU count and global batch, crossed with the
model's own axes), in ``config_id`` order.  The model runs on the device:
``vmap(apply)`` over fixed-shape chunks (the last one padded and masked, so
one compile serves every chunk), folded into a top-k (and optionally a
best-per-group) state by ``jaxmodel.reduce`` inside the same jitted step, so
only ``k`` rows come back.  The model's validity output (``Model.validity``)
masks rows out; rows whose metric is NaN never win.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxmodel.errors import InputError, SpecError, closest
from jaxmodel.models import Model, get_model
from jaxmodel.models.layout import (
    CANDIDATE_COLUMNS,
    LAYOUT_AXES,
    MAX_GLOBAL_BATCH,
    NoValid,
    check_global_batch,
    divisors,
    enumerate_layouts,
    explain_no_valid,
    global_batch_of,
    nearest_batches,
    vary_values,
)
from jaxmodel.precision import computing, float_dtype
from jaxmodel.reduce import CONFIG_ID, GroupBest, Pareto, TopK

MAX_TOP = 10_000
DEFAULT_CHUNK = 1 << 16


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
      enumerate_s, compile_s, run_s: wall seconds of each phase; ``run_s``
        covers the transfers, every chunk and the reduction.
      chunk: rows per compiled step; chunks: steps run.
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


def _step_function(model: Model, reducers: tuple, dtype: np.dtype):
    """``step(carry, cand, config_id, mask, fixed, group_ids) -> carry``, jit-able.

    ``carry`` is ``(states, valid_count)``; ``cand`` maps the layout axes to
    int64 chunk columns, ``fixed`` the other inputs to float scalars.
    """
    gpus = model.layout.gpus if model.layout is not None else None

    def step(carry, cand, config_id, mask, fixed, group_ids):
        states, valid_count = carry
        n = config_id.shape[0]
        inputs = model.inputs_type(*(
            cand[name].astype(dtype) if name in cand
            else jnp.broadcast_to(fixed[name].astype(dtype), (n,))
            for name in model.input_names
        ))
        outputs = jax.vmap(model.apply)(inputs)
        cols = {CONFIG_ID: config_id, **inputs._asdict(), **outputs._asdict()}
        if gpus in cand and "used_gpus" in cols:
            # Rows with fewer replicas than fit ran on the d t p GPUs they use;
            # the rest of the job's GPUs are idle (the shared idle_gpus).
            job = jnp.broadcast_to(fixed[gpus].astype(dtype), (n,))
            cols[gpus] = job
            cols["idle_gpus"] = jnp.round(job).astype(jnp.int64) - cols["used_gpus"]
        kept = mask & getattr(outputs, model.validity)
        states = tuple(r.update(s, cols, kept, group_ids) for r, s in zip(reducers, states,
                                                                          strict=True))
        return states, valid_count + jnp.sum(kept, dtype=jnp.int64)

    return step


def _columns(model: Model, dtype: np.dtype) -> dict[str, np.dtype]:
    """Dtypes of every column a step produces (config_id, inputs, outputs)."""
    x = model.inputs_type(*(jax.ShapeDtypeStruct((), dtype) for _ in model.inputs))
    out = jax.eval_shape(model.apply, x)
    return {CONFIG_ID: np.dtype(np.int64), **{n: np.dtype(dtype) for n in model.input_names},
            **{n: np.dtype(v.dtype) for n, v in zip(model.output_names, out, strict=True)}}


def search(model: str | Model, values: Mapping[str, float], *, global_batch: int,
           by: str = "throughput_tokens_s", maximize: bool = True, top: int = 10,
           allow_idle: bool = False, pinned: Mapping[str, int] | None = None,
           group_by: Sequence[str] = (), pareto: tuple | None = None, x64: bool = False,
           chunk: int | None = None,
           vary: Mapping[str, Sequence[float]] | None = None,
           also: Sequence[str] = ()) -> SearchResult:
    """Evaluate every layout of ``values``' model and cluster; keep the best.

    Args:
      values: one configuration of every input (``gather_inputs``); the layout
        axes in it are ignored unless ``pinned``.
      global_batch: sequences per optimizer step, ``b m d``.
      by, maximize: the ranking column (any input or output) and direction.
      top: rows kept, 1 to 10,000.
      allow_idle: allow ``t p`` not dividing ``num_gpus`` (idle GPUs).
      pinned: layout axes held at one value.
      group_by: candidate columns (``model.layout.columns`` and the model's own
        axes); if given, also the
        best row per distinct value of them.
      pareto: ``(x, y, minimize_x, minimize_y)``: also the Pareto front of
        columns x and y (4,096 points at most).
      chunk: rows per compiled step (default: 65,536, or less for small searches).
      also: optional model layout axes to search too (``LayoutSpace.extra``).
      vary: other inputs to search over, ``{name: values}`` (see ``vary_values``):
        the context degree enters the layout (``d = N / (t c p)``), any other
        input multiplies every layout by its values.

    Raises:
      SpecError: unknown column, or no layout fits the global batch.
    """
    model = get_model(model)
    _check_model(model)
    _check_column(model, by, "--by")
    if not 1 <= top <= MAX_TOP:
        raise InputError("top", top, f"a whole number from 1 to {MAX_TOP}")
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
    for name, value in pinned.items():
        if name not in space.axes:
            raise SpecError(f"pinned: {name!r} is not a layout axis{closest(name, space.axes)}"
                            f"; allowed: {', '.join(space.axes)}")
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
        if name not in model.input_names or name in space.axes:
            raise SpecError(f"--vary: {name!r} is not an input of model {model.name!r} "
                            "outside the layout axes" + closest(name, model.input_names))
    cand = space.candidates(values, global_batch, allow_idle=allow_idle,
                            pinned=pinned, vary=vary, also=also)
    n = len(next(iter(cand.values())))
    if n == 0:
        raise space.no_layout_error(values, global_batch, allow_idle=allow_idle, pinned=pinned)
    group_ids, group_keys = None, None
    if group_by:
        stacked = np.stack([cand[g] for g in group_by], axis=1)
        group_keys, group_ids = np.unique(stacked, axis=0, return_inverse=True)
        group_ids = group_ids.reshape(-1).astype(np.int64)
    enumerate_s = time.perf_counter() - start

    # (the replica count is an output, known ahead only to group by)
    layout = {k: v for k, v in cand.items() if k in model.input_names}
    reducers: tuple = (TopK(by, top, maximize),)
    if group_by:
        reducers += (GroupBest(by, group_by, maximize),)
    if pareto is not None:
        reducers += (Pareto(*pareto),)
    run = evaluate_and_reduce(model, values, layout, reducers, x64=x64, chunk=chunk,
                              group_ids=group_ids,
                              num_groups=1 if group_keys is None else len(group_keys))
    front = None
    if pareto is not None:
        front = reducers[-1].rows(run.states[-1])
        overflow = reducers[-1].overflowed(run.states[-1])
    return SearchResult(
        top=reducers[0].rows(run.states[0]),
        per_group=reducers[1].rows(run.states[1]) if group_by else None,
        pareto=front, pareto_of=tuple(pareto) if pareto else None,
        pareto_overflow=bool(pareto) and overflow,
        candidates=n, valid=run.valid, enumerate_s=enumerate_s, compile_s=run.compile_s,
        run_s=run.run_s, chunk=run.chunk, chunks=run.chunks, global_batch=global_batch,
        by=by, maximize=maximize, group_by=group_by,
    )


@dataclass
class EngineRun:
    """Final reducer states and the cost of getting them (see ``evaluate_and_reduce``)."""

    states: tuple
    valid: int
    compile_s: float
    run_s: float
    chunk: int
    chunks: int


def evaluate_and_reduce(model: Model, values: Mapping[str, float],
                        layout: Mapping[str, np.ndarray], reducers: tuple, *,
                        x64: bool = False, chunk: int | None = None,
                        group_ids: np.ndarray | None = None,
                        num_groups: int = 1) -> EngineRun:
    """The engine of ``search``: rows ``layout`` (equal-length columns of some
    inputs) with every other input from ``values``, evaluated in fixed-shape
    chunks and folded into ``reducers`` on the device; ``config_id`` is the
    row index.  ``compile_s`` is the one compile; ``run_s`` the transfers,
    every chunk and the wait for the result."""
    n = len(next(iter(layout.values())))
    chunk = chunk or min(DEFAULT_CHUNK, max(256, 1 << (n - 1).bit_length()))
    dtype = float_dtype(x64)
    gpus = model.layout.gpus if model.layout is not None else None
    fixed = {k: np.asarray(v, dtype) for k, v in values.items()
             if k not in layout or k == gpus}

    start = time.perf_counter()
    with computing():
        columns = _columns(model, dtype)
        states = tuple(r.init(columns, num_groups) for r in reducers)
        carry = (states, jnp.zeros((), jnp.int64))
        step = jax.jit(_step_function(model, reducers, dtype))

        def chunk_args(lo: int):
            hi = min(lo + chunk, n)
            pad = chunk - (hi - lo)
            cols = {k: np.pad(v[lo:hi], (0, pad), mode="edge") for k, v in layout.items()}
            ids = np.arange(lo, lo + chunk, dtype=np.int64)
            mask = np.arange(chunk) < hi - lo
            g = None if group_ids is None else np.pad(group_ids[lo:hi], (0, pad))
            return cols, ids, mask, fixed, g

        compiled = step.lower(carry, *chunk_args(0)).compile()
        compile_s = time.perf_counter() - start

        start = time.perf_counter()
        for lo in range(0, n, chunk):
            carry = compiled(carry, *chunk_args(lo))
        states, valid = jax.block_until_ready(carry)
        run_s = time.perf_counter() - start
    return EngineRun(states=states, valid=int(valid), compile_s=compile_s, run_s=run_s,
                     chunk=chunk, chunks=-(-n // chunk))


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
__all__ = ["CANDIDATE_COLUMNS", "LAYOUT_AXES", "MAX_GLOBAL_BATCH", "EngineRun", "NoValid",
           "SearchResult", "check_global_batch", "divisors", "enumerate_layouts",
           "evaluate_and_reduce", "explain_no_valid", "global_batch_of", "nearest_batches",
           "row_dicts", "search", "vary_values"]
