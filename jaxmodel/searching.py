"""Layout search: every TP x PP x DP x micro-batch x accumulation layout, ranked.

Given a model, a cluster of ``N`` GPUs and a global batch of ``G`` sequences,
the candidates are every

* ``t`` dividing ``hidden_dim`` and ``p`` dividing ``num_layers`` (the seed
  model's validity rule) with ``t p <= N``;
* ``d = N / (t p)``, which must be whole (with ``allow_idle``: every ``d``
  from 1 to ``floor(N / (t p))`` that divides ``G``, leaving ``N - d t p``
  GPUs idle; such a row is evaluated on the ``d t p`` GPUs it uses and
  reported with ``num_gpus = N`` and ``idle_gpus = N - d t p``);
* ``b`` dividing ``G / d`` and ``m = G / (d b)``, so that ``b m d = G``;
* crossed with the model's own layout axes, if it declares any
  (``Model.extra_layout_axes``: the refined model's expert parallelism ``e``,
  and ``expert_tensor_parallel`` when asked).

Their global index ``config_id`` follows that order: ``t`` ascending, then
``p``, then ``d`` (with ``allow_idle``), then ``b``, then the model's axes.
The enumeration runs on the host in numpy: it is a ragged
product of divisor lists (a few int64 operations per candidate, about 1 s
per 10^8), and the candidate table (4 integers a row) is tiny next to what
the model computes per row.  The model runs on the device: ``vmap(apply)``
over fixed-shape chunks (the last one padded and masked, so one compile
serves every chunk), folded into a top-k (and optionally a best-per-group)
state by ``jaxmodel.reduce`` inside the same jitted step, so only ``k`` rows
come back.  The model's ``valid_layout`` output, where it has one, masks
rows out; rows whose metric is NaN never win.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxmodel.errors import InputError, SpecError, closest
from jaxmodel.models import Model, get_model
from jaxmodel.precision import computing, float_dtype
from jaxmodel.reduce import CONFIG_ID, GroupBest, Pareto, TopK

LAYOUT_AXES = ("tensor_parallel", "pipeline_parallel", "micro_batch", "gradient_accum_steps")
REQUIRED_INPUTS = LAYOUT_AXES + ("num_gpus", "hidden_dim", "num_layers", "seq_length")
# Candidate columns known before evaluation (usable for ``group_by``).
CANDIDATE_COLUMNS = LAYOUT_AXES + ("data_parallel",)
MAX_TOP = 10_000
DEFAULT_CHUNK = 1 << 16
# b m d is handed to the model as counts, which are exact in float32 up to
# 2**24 (the count inputs' own upper bound); the divisor enumeration is then
# at most 4,096 candidate divisors' worth of work.
MAX_GLOBAL_BATCH = 2**24


def divisors(n: int) -> np.ndarray:
    """Every positive divisor of ``n``, ascending, as int64."""
    if n < 1:
        return np.zeros(0, np.int64)
    small = np.arange(1, math.isqrt(n) + 1, dtype=np.int64)
    small = small[n % small == 0]
    return np.unique(np.concatenate([small, n // small]))


def enumerate_layouts(num_gpus: int, hidden_dim: int, num_layers: int, global_batch: int,
                      *, allow_idle: bool = False,
                      pinned: Mapping[str, int] | None = None,
                      contexts: Sequence[int] | None = None) -> dict[str, np.ndarray]:
    """The candidate layouts, in ``config_id`` order (module docstring).

    Args:
      pinned: layout axes held at one value (e.g. ``{"tensor_parallel": 8}``).
      contexts: context-parallel degrees to try (each splits every sequence over
        c ranks, so ``d = N / (t c p)``); ``None``: no context parallelism and no
        ``context_parallel`` column.

    Returns:
      int64 columns ``tensor_parallel``, ``pipeline_parallel``,
      ``micro_batch``, ``gradient_accum_steps`` and ``data_parallel`` (and
      ``context_parallel``, after ``tensor_parallel`` in the order, when asked).
    """
    pinned = dict(pinned or {})
    ts = divisors(hidden_dim)
    ps = divisors(num_layers)
    cs = np.asarray(sorted(set(contexts or (1,))), np.int64)
    t, c, p = (a.ravel() for a in np.meshgrid(ts, cs, ps, indexing="ij"))
    tp = t * c * p
    keep = tp <= num_gpus
    if not allow_idle:
        keep &= num_gpus % tp == 0
    for name, col in (("tensor_parallel", t), ("pipeline_parallel", p)):
        if name in pinned:
            keep &= col == pinned[name]
    t, c, p = t[keep], c[keep], p[keep]
    if allow_idle:
        # Every replica count d <= floor(N / (t c p)) that divides the batch,
        # ascending: fewer replicas can win (a whole batch at a deeper pipeline).
        ds = divisors(global_batch)
        fit = ds[None, :] <= (num_gpus // (t * c * p))[:, None]
        row, col = np.nonzero(fit)
        t, c, p, d = t[row], c[row], p[row], ds[col]
    else:
        d = num_gpus // (t * c * p)
        whole = global_batch % d == 0
        t, c, p, d = t[whole], c[whole], p[whole], d[whole]
    # b runs over the divisors of G that divide G / d: one boolean matrix of
    # (layout, divisor), read row by row, keeps the order t, p, b.
    bs = divisors(global_batch)
    fits = (global_batch // d)[:, None] % bs[None, :] == 0
    if "micro_batch" in pinned:
        fits &= bs[None, :] == pinned["micro_batch"]
    row, col = np.nonzero(fits)
    b = bs[col]
    m = global_batch // (d[row] * b)
    out = {"tensor_parallel": t[row], "pipeline_parallel": p[row], "micro_batch": b,
           "gradient_accum_steps": m, "data_parallel": d[row]}
    if contexts is not None:
        out["context_parallel"] = c[row]
    if "gradient_accum_steps" in pinned:
        sel = m == pinned["gradient_accum_steps"]
        out = {k: v[sel] for k, v in out.items()}
    return out


def cross_extra_axes(cand: dict[str, np.ndarray], extra: Mapping[str, np.ndarray],
                     pinned: Mapping[str, int]) -> dict[str, np.ndarray]:
    """``cand`` crossed with each extra axis (the last one fastest); a pinned
    axis keeps only its pinned value."""
    out = dict(cand)
    for name, values in extra.items():
        values = np.asarray(values, np.int64)
        if name in pinned:
            values = np.array([pinned[name]], np.int64)
        rows, k = len(next(iter(out.values()))), len(values)
        out = {c: np.repeat(v, k) for c, v in out.items()}
        out[name] = np.tile(values, rows)
    return out


def vary_values(model: Model, name: str, values: Sequence[float] | None,
                num_gpus: int, seq_length: int) -> list[float]:
    """The values ``--vary NAME[=v1,v2,...]`` searches over.

    Given values are checked against the input's domain.  Without values: a
    switch (an integer input with at most four allowed values) takes every
    allowed value; ``context_parallel`` takes the powers of two up to 64 (and
    ``num_gpus``) whose 2 c chunks split the sequence (the causal balance).

    Raises:
      SpecError: an unknown input, or one that needs explicit values.
    """
    if name not in model.input_names:
        raise SpecError(f"--vary: {name!r} is not an input of model {model.name!r}"
                        + closest(name, model.input_names))
    field = model.input_field(name)
    if values:
        return [field.check_scalar(v) for v in values]
    if name == "context_parallel":
        return [float(c) for c in (1, 2, 4, 8, 16, 32, 64)
                if c <= num_gpus and seq_length % (2 * c) == 0 or c == 1]
    if field.integer and field.high is not None and field.high - field.low < 4:
        return [float(v) for v in range(int(field.low), int(field.high) + 1)]
    raise SpecError(f"--vary: {name} is not a switch; give its values, e.g. {name}=1,2,4")


def _layout_error(num_gpus: int, hidden_dim: int, num_layers: int, global_batch: int,
                  allow_idle: bool, pinned: Mapping[str, int]) -> SpecError:
    what = f"a global batch of {global_batch} sequences on {num_gpus} GPUs"
    if pinned:
        what += " with " + ", ".join(f"{k}={v}" for k, v in pinned.items())
    rule = ("d <= floor(N / (t p)) must divide the global batch" if allow_idle
            else "d = N / (t p) must be whole and divide the global batch (or --allow-idle)")
    counts = ", ".join(f"{n:,} {why}" for why, n in
                       _pair_counts(num_gpus, hidden_dim, num_layers, global_batch,
                                    allow_idle, pinned).items() if n)
    nearest = nearest_batches(num_gpus, hidden_dim, num_layers, global_batch, allow_idle,
                              pinned)
    hint = f"; nearest global batches with layouts: {nearest}" if nearest else ""
    return SpecError(f"no layout fits {what}: t | hidden_dim, p | num_layers, {rule} "
                     f"({counts}){hint}")


def _pair_counts(num_gpus: int, hidden_dim: int, num_layers: int, global_batch: int,
                 allow_idle: bool, pinned: Mapping[str, int]) -> dict[str, int]:
    """(t, p) pairs with t | hidden_dim, p | num_layers, counted by why they give
    no candidate (or that they give some)."""
    t, p = (a.ravel() for a in np.meshgrid(divisors(hidden_dim), divisors(num_layers),
                                           indexing="ij"))
    for name, col in (("tensor_parallel", t), ("pipeline_parallel", p)):
        if name in pinned:
            sel = col == pinned[name]
            t, p = t[sel], p[sel]
    tp = t * p
    big = tp > num_gpus
    idle = ~big & (num_gpus % tp != 0) & (not allow_idle)
    ok = ~big & ~idle
    d = num_gpus // np.where(ok, tp, 1)
    if allow_idle:  # some d <= floor(N / (t p)) divides G: the smallest, 1, always does
        batch = np.zeros_like(ok)
    else:
        batch = ok & (global_batch % d != 0)
    return {"need more than num_gpus (t p > N)": int(big.sum()),
            "leave GPUs idle (t p does not divide num_gpus)": int(idle.sum()),
            "have d = N / (t p) not dividing the global batch": int(batch.sum()),
            "give candidates": int((ok & ~batch).sum())}


def nearest_batches(num_gpus: int, hidden_dim: int, num_layers: int, global_batch: int,
                    allow_idle: bool, pinned: Mapping[str, int], limit: int = 4096) -> str:
    """The global batches nearest ``global_batch`` (below and above) with layouts."""
    found = []
    for step in (-1, 1):
        g = global_batch + step
        while 1 <= g <= global_batch + limit:
            if len(enumerate_layouts(num_gpus, hidden_dim, num_layers, g,
                                     allow_idle=allow_idle, pinned=pinned)["micro_batch"]):
                found.append(f"{g:,}")
                break
            g += step
    return " or ".join(found)


@dataclass
class NoValid:
    """Why a search found no valid layout (``explain_no_valid``).

    Attributes:
      pairs: why -> (t, p) pairs (t | hidden_dim, p | num_layers) that give
        no candidate, and how many give some.
      counts: why -> evaluated candidates, by the first problem the model's
        rule finds.
      examples: why -> one problem sentence of that kind, with its figures.
      closest: the candidate closest to fitting in memory (row dict) or None,
        with ``memory_over_gb``.
      changes: single changes that would give a valid layout, as text.
    """

    pairs: dict[str, int]
    counts: dict[str, int]
    examples: dict[str, str]
    closest: dict[str, Any] | None
    changes: list[str]

    def lines(self) -> list[str]:
        out = ["no valid layout.", "(t, p) pairs with t | hidden_dim and p | num_layers:"]
        width = max(len(f"{n:,}") for n in (*self.counts.values(), *self.pairs.values()))
        out += [f"  {n:>{width},}  {why}" for why, n in self.pairs.items()]
        out.append(f"candidates evaluated ({sum(self.counts.values()):,}), by reason:")
        for why, n in self.counts.items():
            example = self.examples.get(why)
            out.append(f"  {n:>{width},}  " + (f"like: {example}" if example else why))
        if self.closest is not None:
            c = self.closest
            out.append(f"closest to fitting: t{c['tensor_parallel']} p{c['pipeline_parallel']} "
                       f"d{c['data_parallel']} b{c['micro_batch']} m{c['gradient_accum_steps']}"
                       f" needs {c['memory_gb_per_gpu']:,.1f} GB per GPU, "
                       f"{c['memory_over_gb']:,.1f} GB over {c['gpu_memory_gb']:g} GB")
        out += [f"nearest change: {c}" for c in self.changes]
        return out

    def document(self) -> dict[str, Any]:
        return {"counts": self.counts, "examples": self.examples, "closest": self.closest,
                "changes": self.changes}


def explain_no_valid(model: str | Model, values: Mapping[str, float], *, global_batch: int,
                     allow_idle: bool = False, pinned: Mapping[str, int] | None = None,
                     x64: bool = False) -> NoValid:
    """Count a search's candidates by why they are invalid; find the nearest fix.

    The candidates are evaluated again on the host side of the API (this runs
    only when a search found nothing).  Memory (a model with
    ``memory_gb_per_gpu`` and ``fits_in_memory``): the candidate that misses by
    the least, and the GPU memory that would make it fit.  Other rules: the
    model's ``layout_reasons``, grouped by kind.  The enumeration's own
    rejections ((t, p) pairs leaving GPUs idle or not dividing the batch) and,
    without ``allow_idle``, how many candidates ``--allow-idle`` would add.
    """
    import re

    from jaxmodel.api import evaluate

    model = get_model(model)
    pinned = dict(pinned or {})
    n_gpus, h, L = (int(values[k]) for k in ("num_gpus", "hidden_dim", "num_layers"))
    counts: dict[str, int] = {}
    examples: dict[str, str] = {}
    pairs = _pair_counts(n_gpus, h, L, global_batch, allow_idle, pinned)
    cand = enumerate_layouts(n_gpus, h, L, global_batch, allow_idle=allow_idle, pinned=pinned)
    layout = {k: cand[k].astype(float) for k in LAYOUT_AXES}
    layout["num_gpus"] = (cand["data_parallel"] * cand["tensor_parallel"]
                          * cand["pipeline_parallel"]).astype(float)
    out = evaluate(model, x64=x64, **{**values, **layout})
    valid = np.asarray(getattr(out, "valid_layout", np.ones(len(layout["num_gpus"]), bool)))
    closest, changes = None, []
    memory = getattr(out, "memory_gb_per_gpu", None)
    fits = getattr(out, "fits_in_memory", None)
    rule_rows = ~valid
    if memory is not None and fits is not None:
        over_mem = ~valid & np.isfinite(memory) & ~fits
        rule_rows &= ~over_mem
        if over_mem.any():
            why = "do not fit in memory"
            counts[why] = int(over_mem.sum())
            excess = np.where(over_mem, memory - values["gpu_memory_gb"], np.inf)
            i = int(np.argmin(excess))
            closest = {**{k: int(cand[k][i]) for k in (*LAYOUT_AXES, "data_parallel")},
                       "memory_gb_per_gpu": float(memory[i]),
                       "gpu_memory_gb": float(values["gpu_memory_gb"]),
                       "memory_over_gb": float(excess[i])}
            need = math.ceil(float(memory[i]) * 10) / 10
            changes.append(f"gpu_memory_gb >= {need:g} (the closest layout then fits)")
    if rule_rows.any() and model.layout_reasons is not None:
        seen: dict[tuple, str] = {}
        for i in np.flatnonzero(rule_rows):
            key = tuple(int(cand[k][i]) for k in (*LAYOUT_AXES, "data_parallel"))
            if key not in seen:
                row_in = {**values, **{k: float(v[i]) for k, v in layout.items()}}
                row_out = {f: np.asarray(getattr(out, f))[i] for f in model.output_names}
                reasons = model.layout_reasons(row_in, row_out)
                seen[key] = reasons[0][0] if reasons else "invalid"
            problem = seen[key]
            kind = re.sub(r"\d[\d,.]*", "#", problem)
            counts[kind] = counts.get(kind, 0) + 1
            examples.setdefault(kind, problem)
    elif rule_rows.any():
        counts["break the model's layout rule"] = int(rule_rows.sum())
    if not allow_idle:
        more = len(enumerate_layouts(n_gpus, h, L, global_batch, allow_idle=True,
                                     pinned=pinned)["micro_batch"]) - len(cand["micro_batch"])
        if more:
            changes.append(f"--allow-idle adds {more:,} candidates with idle GPUs")
    return NoValid(pairs={k: v for k, v in pairs.items() if v}, counts=counts,
                   examples={k: v for k, v in examples.items() if k != v},
                   closest=closest, changes=changes)


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


def global_batch_of(values: Mapping[str, float], global_batch: int | None,
                    global_batch_tokens: int | None) -> int:
    """Global batch in sequences: given, from tokens, or the configuration's own b m d.

    Raises:
      SpecError: both given, or tokens not a multiple of ``seq_length``.
    """
    if global_batch is not None and global_batch_tokens is not None:
        raise SpecError("give --global-batch or --global-batch-tokens, not both")
    if global_batch_tokens is not None:
        s = int(values["seq_length"])
        if not 1 <= global_batch_tokens <= MAX_GLOBAL_BATCH * s or global_batch_tokens % s:
            raise InputError("global_batch_tokens", global_batch_tokens,
                             f"a positive multiple of seq_length ({s}) and <= "
                             f"{MAX_GLOBAL_BATCH * s} ({MAX_GLOBAL_BATCH} sequences)")
        return global_batch_tokens // s
    if global_batch is not None:
        check_global_batch(global_batch)
        return global_batch
    d = int(values["num_gpus"]) // int(values["tensor_parallel"] * values["pipeline_parallel"])
    return max(d, 1) * int(values["micro_batch"] * values["gradient_accum_steps"])


def check_global_batch(global_batch: int) -> None:
    """Refuse a global batch outside ``[1, MAX_GLOBAL_BATCH]`` (one line)."""
    if (isinstance(global_batch, bool) or not isinstance(global_batch, (int, np.integer))
            or not 1 <= global_batch <= MAX_GLOBAL_BATCH):
        raise InputError("global_batch", global_batch,
                         f"a whole number >= 1 and <= {MAX_GLOBAL_BATCH}")


def _check_model(model: Model) -> None:
    missing = [n for n in REQUIRED_INPUTS if n not in model.input_names]
    if missing:
        raise SpecError(f"model {model.name!r} has no input {missing[0]!r}: layout search "
                        "needs " + ", ".join(REQUIRED_INPUTS))


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
    has_valid = "valid_layout" in model.output_names

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
        if "num_gpus" in cand and "used_gpus" in cols:
            # Rows with fewer replicas than fit ran on the d t p GPUs they use;
            # the rest of the job's num_gpus are idle (the shared idle_gpus).
            job = jnp.broadcast_to(fixed["num_gpus"].astype(dtype), (n,))
            cols["num_gpus"] = job
            cols["idle_gpus"] = jnp.round(job).astype(jnp.int64) - cols["used_gpus"]
        kept = mask & outputs.valid_layout if has_valid else mask
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
      group_by: candidate columns (``CANDIDATE_COLUMNS``); if given, also the
        best row per distinct value of them.
      pareto: ``(x, y, minimize_x, minimize_y)``: also the Pareto front of
        columns x and y (4,096 points at most).
      chunk: rows per compiled step (default: 65,536, or less for small searches).
      also: optional model layout axes to search too (``Model.extra_layout_axes``).
      vary: other inputs to search over, ``{name: values}`` (see ``vary_values``):
        ``context_parallel`` enters the layout (``d = N / (t c p)``), any other
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
    extra = (model.extra_layout_axes(values, frozenset(also))
             if model.extra_layout_axes is not None else {})
    columns = CANDIDATE_COLUMNS + tuple(extra)
    for g in group_by:
        if g not in columns:
            raise SpecError(f"--group-by: {g!r} is not a layout column"
                            f"{closest(g, columns)}; one of " + ", ".join(columns))
    if pareto is not None:
        for name in pareto[:2]:
            _check_column(model, name, "--pareto")
    pinned = dict(pinned or {})
    for name, value in pinned.items():
        if name not in LAYOUT_AXES:
            raise SpecError(f"pinned: {name!r} is not a layout axis{closest(name, LAYOUT_AXES)}"
                            f"; allowed: {', '.join(LAYOUT_AXES)}")
        model.input_field(name).check_scalar(value)
    missing = [n for n in model.input_names if n not in values]
    if missing:
        raise SpecError(f"values: no value for {missing[0]!r} (give every input of model "
                        f"{model.name!r}, e.g. from gather_inputs)")
    for f in model.inputs:
        f.check_scalar(values[f.name])  # NaN, out of domain: one line, not an empty result
    check_global_batch(global_batch)
    n_gpus = int(values["num_gpus"])

    start = time.perf_counter()
    vary = dict(vary or {})
    for name in vary:
        if name not in model.input_names or name in LAYOUT_AXES:
            raise SpecError(f"--vary: {name!r} is not an input of model {model.name!r} "
                            "outside the layout axes" + closest(name, model.input_names))
    cand = enumerate_layouts(n_gpus, int(values["hidden_dim"]), int(values["num_layers"]),
                             global_batch, allow_idle=allow_idle, pinned=pinned,
                             contexts=[int(v) for v in vary.pop("context_parallel")]
                             if "context_parallel" in vary else None)
    for name, vals in vary.items():
        k = len(vals)
        cand = {key: np.repeat(col, k) for key, col in cand.items()}
        cand[name] = np.tile(np.asarray(vals, np.float64), len(cand[name]) // k
                             if name in cand else len(cand["tensor_parallel"]) // k)
    n = len(cand["tensor_parallel"])
    if n == 0:
        raise _layout_error(n_gpus, int(values["hidden_dim"]), int(values["num_layers"]),
                            global_batch, allow_idle, pinned)
    # (an axis the user varies explicitly is not crossed twice)
    cand = cross_extra_axes(cand, {k: v for k, v in extra.items() if k not in cand}, pinned)
    n = len(cand["tensor_parallel"])
    group_ids, group_keys = None, None
    if group_by:
        stacked = np.stack([cand[g] for g in group_by], axis=1)
        group_keys, group_ids = np.unique(stacked, axis=0, return_inverse=True)
        group_ids = group_ids.reshape(-1).astype(np.int64)
    enumerate_s = time.perf_counter() - start

    layout = {k: v for k, v in cand.items() if k != "data_parallel"}
    if allow_idle:
        layout["num_gpus"] = (cand["data_parallel"] * cand["tensor_parallel"]
                              * cand.get("context_parallel", 1) * cand["pipeline_parallel"])
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
    fixed = {k: np.asarray(v, dtype) for k, v in values.items()
             if k not in layout or k == "num_gpus"}

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


__all__ = ["CANDIDATE_COLUMNS", "LAYOUT_AXES", "EngineRun", "NoValid", "SearchResult",
           "divisors", "enumerate_layouts", "evaluate_and_reduce", "explain_no_valid",
           "global_batch_of", "nearest_batches", "row_dicts", "search", "vary_values"]
