"""The layout space of the 3D-parallel models: its axes and its candidates.

A model owns the layouts a search ranges over (``Model.layout``), as Calculon's
model owns its parallelism enumeration; search, ``jaxmodel best``, the
``--layouts`` breakdown and sensitivities ask it and never name its inputs.

Given a model, a cluster of ``N`` GPUs and a global batch of ``G`` sequences,
the candidates (:meth:`LayoutSpace.candidates`) are every

* ``t`` dividing ``hidden_dim`` and ``p`` dividing ``num_layers`` (the seed
  model's validity rule; a model whose busiest stage sets the pace,
  ``LayoutSpace.uneven_pipeline``, takes every ``p`` up to ``num_layers``)
  with ``t p <= N``, and ``t`` within the NVLink domain (``gpus_per_node``)
  unless asked otherwise;
* ``d = N / (t p)``, which must be whole (with ``allow_idle``: every ``d``
  from 1 to ``floor(N / (t p))`` that divides ``G``, leaving ``N - d t p``
  GPUs idle; such a row is evaluated on the ``d t p`` GPUs it uses and
  reported with ``num_gpus = N`` and ``idle_gpus = N - d t p``);
* ``b`` dividing ``G / d`` and ``m = G / (d b)``, so that ``b m d = G``;
* crossed with the model's own layout axes, if it declares any
  (``LayoutSpace.extra``: the refined model's expert parallelism ``e``,
  and ``expert_tensor_parallel`` when asked).

Their global index ``config_id`` follows that order: ``t`` ascending, then
``p``, then ``d`` (with ``allow_idle``), then ``b``, then the model's axes.
The enumeration runs on the host in numpy: it is a ragged product of divisor
lists (a few int64 operations per candidate, about 1 s per 10^8), and the
candidate table (4 integers a row) is tiny next to what the model computes
per row.  Crossed with the searched axes it is not (a DeepSeek-V3 search:
384 layouts x 55,296 combinations, cut to 10.8M rows of 14 columns), so a
search takes :meth:`LayoutSpace.crossed`: the layouts and, per layout, the
combinations the rules admit, which the device decodes from the index.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxmodel.deferred import jnp
from jaxmodel.errors import InputError, SpecError, closest

if TYPE_CHECKING:
    from jaxmodel.models.base import Model

# The inputs the 3D-parallel layout space is made of.
GPUS = "num_gpus"
TENSOR = "tensor_parallel"
PIPELINE = "pipeline_parallel"
CONTEXT = "context_parallel"
MICRO_BATCH = "micro_batch"
ACCUMULATION = "gradient_accum_steps"
HIDDEN = "hidden_dim"
LAYERS = "num_layers"
SEQUENCE = "seq_length"
NODE = "gpus_per_node"
# (an output: replicas of the model; a column of every candidate table)
DATA = "data_parallel"
# The bandwidth of the seed's profile curve (MFU against GPUs and bandwidth).
BANDWIDTH = "link_bandwidth_gb_s"

LAYOUT_AXES = (TENSOR, PIPELINE, MICRO_BATCH, ACCUMULATION)
REQUIRED_INPUTS = LAYOUT_AXES + (GPUS, HIDDEN, LAYERS, SEQUENCE)
# Candidate columns known before evaluation (usable for ``group_by``).
CANDIDATE_COLUMNS = LAYOUT_AXES + (DATA,)
# b m d is handed to the model as counts, which are exact in float32 up to
# 2**24 (the count inputs' own upper bound); the divisor enumeration is then
# at most 4,096 candidate divisors' worth of work.
MAX_GLOBAL_BATCH = 2**24
# Short names of layout columns (tables, labels), in table order.
SYMBOLS: dict[str, str] = {TENSOR: "t", CONTEXT: "c", PIPELINE: "p", "virtual_stages": "v",
                           DATA: "d", "expert_parallel": "e", "expert_tensor_parallel": "etp",
                           MICRO_BATCH: "b", ACCUMULATION: "m", "moe_overlap": "ovl",
                           "max_nodes_per_token": "nodes", "moe_dispatcher": "disp",
                           "idle_gpus": "idle"}
# Short names of inputs in plot labels (``t=8 p=4``); others keep their names.
LABELS: dict[str, str] = {TENSOR: "t", PIPELINE: "p", MICRO_BATCH: "b", ACCUMULATION: "m",
                          GPUS: "N", BANDWIDTH: "B", "compute_tflops": "F", DATA: "d"}
# A configuration's title in plots: (symbol, input), shown where the input exists.
TITLE: tuple[tuple[str, str], ...] = (("P", "model_params_b"), ("t", TENSOR), ("p", PIPELINE),
                                      ("b", MICRO_BATCH), ("m", ACCUMULATION))
# Layout columns shown only where some row differs from this value.
HIDDEN_WHEN: dict[str, int] = {"idle_gpus": 0, "expert_parallel": 1,
                               "expert_tensor_parallel": 1, CONTEXT: 1, "virtual_stages": 1,
                               "moe_overlap": 0, "max_nodes_per_token": 0,
                               "moe_dispatcher": 0}


def replica_step(axes: Sequence[str]) -> Callable[[Any], Any]:
    """``Model.steps`` rule for ``num_gpus``: N' = (floor(N / q) + 1) q, the next
    GPU count that adds a replica of ``q`` GPUs, ``q`` the product of ``axes``
    (``t p``, or ``t p c`` with context parallelism).

    ``N`` acts only through ``d = floor(N / q)``, so its derivative at fixed
    ``d`` is 0 and tells a user nothing; sensitivities report the discrete
    difference to ``N'`` instead.
    """

    def next_replica_count(x):
        q = jnp.round(getattr(x, axes[0]))
        for name in axes[1:]:
            q = q * jnp.round(getattr(x, name))
        return (jnp.floor(jnp.round(getattr(x, GPUS)) / q) + 1.0) * q

    return next_replica_count


@dataclass(frozen=True)
class LayoutSpace:
    """The layouts a model can be searched over (``Model.layout``).

    Attributes:
      context: the model has context parallelism (``context_parallel``), which
        ``vary`` may put into the layout (``d = N / (t c p)``).
      extra: the model's own layout axes,
        ``extra(values, also) -> {input name: candidate values}`` for one
        configuration of inputs; ``also`` names optional axes the user asked
        to search (e.g. ``expert_tensor_parallel``).  None: none.
      uneven_pipeline: ``p`` need not divide ``num_layers`` (the model lets
        the busiest stage set the pace), so every ``p`` up to it is a candidate.
      meaningless: ``meaningless(values, candidates) -> {column: bool mask}``:
        the rows where a searched column changes nothing (virtual stages
        without a pipeline, expert levers in a dense model); of those rows
        only the column's smallest searched value is kept, so that no two
        candidates are the same plan.  None: every column always matters.
      admissible: ``admissible(values, candidates) -> {column: bool mask}``:
        the rows where a value the model's own axis offers (``extra``) goes
        with the rest of the candidate (e.g. virtual stages that split each
        stage's layers evenly); the others are dropped, unless the user pinned
        or varied that column.  None: every value goes with every row.
      rule_columns: the layout columns (of ``enumerate_layouts``') that
        ``admissible`` and ``meaningless`` read; :meth:`crossed` evaluates the
        rules once per distinct value of them.  None: any (then once per
        layout).  A rule that reads an undeclared layout column raises.
    """

    context: bool = False
    extra: Callable[[Mapping[str, float], frozenset], dict[str, Any]] | None = None
    uneven_pipeline: bool = False
    meaningless: Callable[[Mapping[str, float], Mapping[str, np.ndarray]],
                          dict[str, np.ndarray]] | None = None
    admissible: Callable[[Mapping[str, float], Mapping[str, np.ndarray]],
                         dict[str, np.ndarray]] | None = None
    rule_columns: tuple[str, ...] | None = None

    axes = LAYOUT_AXES
    required = REQUIRED_INPUTS
    columns = CANDIDATE_COLUMNS
    gpus = GPUS
    symbols = SYMBOLS
    hidden_when = HIDDEN_WHEN

    def check(self, model: Model) -> None:
        """Raise ``ValueError`` if ``model`` lacks an input this space needs."""
        for name in (*self.required, *((CONTEXT,) if self.context else ())):
            if name not in model.input_names:
                raise ValueError(f"model {model.name!r}: its layout space needs input {name!r}")

    def extra_axes(self, values: Mapping[str, float], also=frozenset()) -> dict[str, Any]:
        """The model's own axes for ``values`` (``{}`` without any)."""
        return {} if self.extra is None else self.extra(values, frozenset(also))

    def global_batch(self, values: Mapping[str, float], global_batch: int | None = None,
                     global_batch_tokens: int | None = None) -> int:
        """:func:`global_batch_of` (``d = N / (t p c)`` with the configuration's ``c``)."""
        return global_batch_of(values, global_batch, global_batch_tokens,
                               context=self.fixed_context(values))

    def fixed_context(self, values: Mapping[str, float],
                      vary: Mapping[str, Any] | None = None) -> int:
        """The context-parallel degree every candidate shares: the configuration's
        ``c`` (a sequence split over ``c`` ranks, so ``d = N / (t c p)``), or 1 where
        the model has no context parallelism or the search varies it."""
        if not self.context or CONTEXT in (vary or {}) or CONTEXT not in values:
            return 1
        return max(int(round(float(values[CONTEXT]))), 1)

    def varied_contexts(self, vary: Mapping[str, Any] | None) -> tuple[int, ...] | None:
        """The context-parallel degrees a search varies (``--vary
        context_parallel``), sorted; None where it varies none (every layout then
        shares ``fixed_context``)."""
        if not self.context or CONTEXT not in (vary or {}):
            return None
        return tuple(sorted({int(c) for c in vary[CONTEXT]}))

    def sequence_length(self, values: Mapping[str, float]) -> int:
        return int(values[SEQUENCE])

    def accumulation_for(self, values: Mapping[str, Any], global_batch_tokens: int, xp):
        """The accumulation steps ``m = G / (b s d)`` that hold the global batch at
        ``G`` tokens, with ``d = floor(N / (t p [c]))`` (arrays of ``xp``, numpy
        or jax.numpy; int64 arithmetic, so exact past 2**24).  Floored, and at
        least 1: where ``b s d`` does not divide ``G`` the row misses ``G``
        (a spec's ``global_batch_tokens`` filter drops it)."""
        def whole(name):
            return xp.round(values[name]).astype(xp.int64)

        q = whole(TENSOR) * whole(PIPELINE)
        if self.context:
            q = q * whole(CONTEXT)
        d = xp.maximum(whole(GPUS) // xp.maximum(q, 1), 1)
        per_step = xp.maximum(whole(MICRO_BATCH) * whole(SEQUENCE) * d, 1)
        return xp.clip(global_batch_tokens // per_step, 1, MAX_GLOBAL_BATCH)

    def report_summary(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> str:
        """``t=8 p=4 d=2``: the layout of one evaluated configuration (``jaxmodel
        eval --format table``)."""
        return f"t={inputs[TENSOR]} p={inputs[PIPELINE]} d={outputs[DATA]}"

    def practised(self, values: Mapping[str, float],
                  candidates: Mapping[str, np.ndarray]) -> np.ndarray:
        """Which ``candidates`` (columns as :meth:`candidates` returns) keep tensor
        parallelism within a node, as practised, where the model knows the node
        (``gpus_per_node``); a bool mask."""
        return np.asarray(candidates[TENSOR]) <= values.get(NODE, math.inf)

    def candidates(self, values: Mapping[str, float], global_batch: int, *,
                   allow_idle: bool = False, pinned: Mapping[str, int] | None = None,
                   vary: Mapping[str, Sequence[float]] | None = None,
                   also: Sequence[str] = (), extra: bool = True,
                   cross_node_tp: bool = False) -> dict[str, np.ndarray]:
        """Every candidate layout of ``values`` for ``global_batch``, in ``config_id`` order.

        Args:
          pinned: layout axes (``axes`` or the model's own) held at one value.
          vary: other inputs to search over, ``{name: values}``: a layout axis
            (``axes``) takes only those values, the context degree enters the
            layout (``d = N / (t c p)``), any other input multiplies every
            layout by its values.
          also: optional model axes to search too (``extra``).
          extra: cross with the model's own axes.
          cross_node_tp: let ``t`` exceed the NVLink domain (``gpus_per_node``);
            a pinned or varied ``t`` is always taken as given.

        Returns:
          int64 columns ``axes`` and ``data_parallel`` (int64), the varied and
          the model's own axes; with ``allow_idle`` also ``num_gpus``, the GPUs
          each row runs on (``d t c p``).  Empty columns when no layout fits
          (:meth:`no_layout_error` says why).
        """
        fixed = self.fixed_context(values, vary)
        cand, axes, own, pinned = self._parts(values, global_batch, allow_idle=allow_idle,
                                              pinned=pinned, vary=vary, also=also,
                                              extra=extra, cross_node_tp=cross_node_tp)
        if extra and self.admissible is not None:
            cand = cross_where(cand, axes, lambda block: self._admitted(values, block, own,
                                                                        pinned))
        else:
            cand = cross(cand, axes)
        if self.meaningless is not None and len(cand[TENSOR]):
            cand = _rows(cand, self._meaningful(values, cand))
        if allow_idle:
            cand[GPUS] = (cand[DATA] * cand[TENSOR] * cand.get(CONTEXT, fixed) * cand[PIPELINE])
        return cand

    def crossed(self, values: Mapping[str, float], global_batch: int, *,
                allow_idle: bool = False, pinned: Mapping[str, int] | None = None,
                vary: Mapping[str, Sequence[float]] | None = None,
                also: Sequence[str] = (), cross_node_tp: bool = False) -> CrossedCandidates:
        """:meth:`candidates` (with the model's own axes), not materialised: the
        layouts (``t c p d b m``, a few hundred rows) and, per layout, which
        combinations of the searched axes (varied inputs and the model's own
        axes, tens of thousands) the rules admit (:class:`CrossedCandidates`).

        The rules (``admissible``, ``meaningless``) are evaluated once per
        distinct value of the layout columns they read (``rule_columns``),
        crossed with every combination, not once per candidate: a DeepSeek-V3
        search has 384 layouts but 23 distinct (t, p), and 55,296 combinations,
        so 1.3M rule rows instead of the 21.2M of the whole cross (and of a
        10.8M-row table of 14 columns, 1.2 GB, issue 26).
        """
        fixed = self.fixed_context(values, vary)
        cand, axes, own, pinned = self._parts(values, global_batch, allow_idle=allow_idle,
                                              pinned=pinned, vary=vary, also=also,
                                              extra=True, cross_node_tp=cross_node_tp)
        if allow_idle:
            cand[GPUS] = (cand[DATA] * cand[TENSOR] * cand.get(CONTEXT, fixed) * cand[PIPELINE])
        rows = len(cand[TENSOR])
        combos = math.prod(len(v) for v in axes.values())
        ruled = self.admissible is not None or self.meaningless is not None
        if not rows or not combos or not ruled:
            mask = np.ones((1, combos), bool)
            pattern = np.zeros(rows, np.int64)
        else:
            # (GPUS is added after the rules in candidates(): they never see it)
            names = [k for k in cand if k != GPUS]
            keyed = [k for k in names if self.rule_columns is None or k in self.rule_columns]
            stacked = np.stack([cand[k] for k in keyed], axis=1) if keyed \
                else np.zeros((rows, 0), np.int64)
            keys, key_of = np.unique(stacked, axis=0, return_inverse=True)
            if not keyed:
                keys = np.zeros((1, 0), np.int64)
            table = cross({k: keys[:, i] for i, k in enumerate(keyed)}, axes)
            keep = self._admitted(values, _RuleColumns(table, names), own, pinned)
            if self.meaningless is not None and keep.any():
                kept = table if keep.all() else _rows(table, keep)
                keep[keep] = self._meaningful(values, _RuleColumns(kept, names))
            # (distinct patterns, in order of first appearance)
            seen: dict[bytes, int] = {}
            per_key = keep.reshape(len(keys), combos)
            pattern_of_key = np.array([seen.setdefault(row.tobytes(), len(seen))
                                       for row in per_key], np.int64)
            mask = per_key[[list(pattern_of_key).index(i) for i in range(len(seen))]]
            pattern = pattern_of_key[key_of.reshape(-1)]
        counts = mask.sum(axis=1)[pattern]
        has = counts > 0
        cand = {k: v[has] for k, v in cand.items()}
        pattern, counts = pattern[has], counts[has]
        width = max(int(mask.sum(axis=1).max()) if len(mask) else 0, 1)
        admitted = np.zeros((len(mask), width), np.int32)
        for i, row in enumerate(mask):
            idx = np.flatnonzero(row)
            admitted[i, :len(idx)] = idx
        ends = np.cumsum(counts, dtype=np.int64)
        return CrossedCandidates(layouts=cand, axes=axes, pattern=pattern.astype(np.int32),
                                 combos=admitted, starts=ends - counts, ends=ends)

    def _parts(self, values: Mapping[str, float], global_batch: int, *, allow_idle: bool,
               pinned: Mapping[str, int] | None, vary: Mapping[str, Sequence[float]] | None,
               also: Sequence[str], extra: bool, cross_node_tp: bool):
        """What :meth:`candidates` crosses: the layouts (``enumerate_layouts``),
        the axes crossed with each (the varied inputs, then the model's own
        axes, the last fastest), the model's own axes and the pinned axes."""
        pinned = dict(pinned or {})
        fixed = self.fixed_context(values, vary)
        vary = dict(vary or {})
        for name in self.axes:
            if name in vary:
                pinned[name] = [int(v) for v in vary.pop(name)]
        if not cross_node_tp and TENSOR not in pinned and NODE in values:
            node = int(values[NODE])
            pinned[TENSOR] = [int(t) for t in divisors(int(values[HIDDEN])) if t <= node]
        # A context degree every candidate shares takes c of the GPUs of each
        # replica: the layouts of N GPUs at that c are those of N / c GPUs.
        n_gpus = replica_gpus(int(values[GPUS]), fixed, allow_idle)
        hidden, layers = int(values[HIDDEN]), int(values[LAYERS])
        contexts = ([int(v) for v in vary.pop(CONTEXT)] if self.context and CONTEXT in vary
                    else None)
        cand = enumerate_layouts(n_gpus, hidden, layers, global_batch, allow_idle=allow_idle,
                                 pinned=pinned, contexts=contexts,
                                 uneven=self.uneven_pipeline)
        axes = {name: np.asarray(vals, np.float64) for name, vals in vary.items()}
        own: dict[str, Any] = {}
        if extra:
            # (an axis the user varies explicitly is not crossed twice)
            own = {k: v for k, v in self.extra_axes(values, also).items()
                   if k not in cand and k not in axes}
            axes.update(extra_axis_values(own, pinned))
        return cand, axes, own, pinned

    def _admitted(self, values: Mapping[str, float], block: Mapping[str, np.ndarray],
                  own: Mapping[str, Any], pinned: Mapping[str, Any]) -> np.ndarray:
        """The rows of ``block`` whose model's own axes (not pinned) ``admissible``
        admits (all of them without the rule)."""
        keep = np.ones(len(block[TENSOR]), bool)
        if self.admissible is not None:
            for name, fits in self.admissible(values, block).items():
                if name in own and name not in pinned:
                    keep &= fits
        return keep

    def _meaningful(self, values: Mapping[str, float],
                    cand: Mapping[str, np.ndarray]) -> np.ndarray:
        """The rows of ``cand`` that are not another row's plan: where a column
        means nothing (``meaningless``) only its smallest value in ``cand``."""
        keep = np.ones(len(cand[TENSOR]), bool)
        for name, idle_axis in self.meaningless(values, cand).items():
            if name in cand:
                keep &= ~idle_axis | (cand[name] == cand[name].min())
        return keep

    def no_layout_error(self, values: Mapping[str, float], global_batch: int, *,
                        allow_idle: bool = False,
                        pinned: Mapping[str, int] | None = None,
                        vary: Mapping[str, Sequence[float]] | None = None) -> SpecError:
        """Why no layout fits (one line, with counts of the (t, p) pairs by why
        they give none, and the nearest global batches that have layouts), at the
        configuration's context degree or each one the search varies."""
        contexts = self.varied_contexts(vary) or (self.fixed_context(values),)
        return _layout_error(int(values[GPUS]), int(values[HIDDEN]), int(values[LAYERS]),
                             global_batch, allow_idle, dict(pinned or {}),
                             self.uneven_pipeline, contexts=contexts)

    def vary_values(self, model: Model, name: str, values: Sequence[float] | None,
                    inputs: Mapping[str, float]) -> list[float]:
        """:func:`vary_values` for the configuration ``inputs``."""
        return vary_values(model, name, values, int(inputs[GPUS]), int(inputs[SEQUENCE]))

    def summary(self, row: Mapping[str, Any]) -> str:
        """``t8 p4 d2 b1 m16``: a row's layout columns (those in ``hidden_when``
        only where they differ from its value; ``idle_gpus`` never)."""
        return " ".join(f"{head}{row[name]}" for name, head in self.symbols.items()
                        if name in row and name != "idle_gpus"
                        and (name not in self.hidden_when or row[name] != self.hidden_when[name]))


@dataclass(frozen=True, eq=False)
class CrossedCandidates:
    """A search's candidates as layouts crossed with the searched axes, cut by the
    rules, never materialised (:meth:`LayoutSpace.crossed`).

    Candidate ``i`` (its ``config_id``, as in :meth:`LayoutSpace.candidates`)
    is layout ``r`` with ``starts[r] <= i < ends[r]``, and combination
    ``combos[pattern[r], i - starts[r]]`` of ``axes`` (a mixed-radix number,
    the last axis fastest).

    Attributes:
      layouts: the layout columns (``enumerate_layouts``', and ``num_gpus``
        with ``allow_idle``), only the layouts with some admitted combination.
      axes: the searched axes' values, in crossing order.
      pattern: int32, per layout, its row of ``combos``.
      combos: int32 (patterns, width): each pattern's admitted combinations,
        ascending (zero-padded).
      starts, ends: int64, per layout, its first and past-last ``config_id``.
    """

    layouts: dict[str, np.ndarray]
    axes: dict[str, np.ndarray]
    pattern: np.ndarray
    combos: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    @property
    def size(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    @property
    def radices(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.axes.values())

    def rows(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """The candidates ``ids`` as columns, on the host (in the order and with
        the dtypes of :meth:`LayoutSpace.candidates`)."""
        ids = np.asarray(ids, np.int64)
        r = np.searchsorted(self.ends, ids, side="right")
        combo = self.combos[self.pattern[r], ids - self.starts[r]]
        digits = np.unravel_index(combo, self.radices) if self.axes else ()
        out = {k: v[r] for k, v in self.layouts.items() if k != GPUS}
        out.update({k: v[d] for (k, v), d in zip(self.axes.items(), digits, strict=True)})
        if GPUS in self.layouts:
            out[GPUS] = self.layouts[GPUS][r]
        return out

    def expand(self) -> dict[str, np.ndarray]:
        """Every candidate (:meth:`LayoutSpace.candidates`' table)."""
        return self.rows(np.arange(self.size, dtype=np.int64))

    def groups(self, names: Sequence[str], limit: int = 1 << 22):
        """The candidates' groups by the values of ``names`` (layout columns and
        axes), numbered as ``np.unique`` numbers the table's rows of them (the
        rank of the row's values among those present), without the table.

        Returns ``(of_layout, of_combo, ids, count)``: each layout's key and
        each combination's key (int64), and the group id of every (layout
        key, combination key) pair present (int64, ``ids[of_layout[r],
        of_combo[c]]``); None where that matrix would pass ``limit`` entries.
        """
        inner = [n for n in names if n in self.layouts]
        outer = [n for n in names if n not in self.layouts]
        combos = math.prod(self.radices)

        def keyed(cols, count):
            if not cols:
                return np.zeros((1, 0), np.int64), np.zeros(count, np.int64)
            keys, inverse = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
            return keys, inverse.reshape(-1).astype(np.int64)

        layout_keys, of_layout = keyed([self.layouts[n] for n in inner], len(self.ends))
        digits = dict(zip(self.axes, np.unravel_index(np.arange(combos), self.radices),
                          strict=True)) if self.axes else {}
        combo_keys, of_combo = keyed([self.axes[n][digits[n]] for n in outer], combos)
        if len(layout_keys) * len(combo_keys) > limit:
            return None
        admitted = np.zeros(len(self.combos), np.int64)
        admitted[self.pattern] = self.ends - self.starts
        pairs = np.unique(np.stack([of_layout, self.pattern.astype(np.int64)], axis=1), axis=0)
        at_layout, at_combo = [], []
        for key, pattern in pairs:
            present = np.unique(of_combo[self.combos[pattern, :admitted[pattern]]])
            at_layout.append(np.full(len(present), key))
            at_combo.append(present)
        at_layout, at_combo = np.concatenate(at_layout), np.concatenate(at_combo)
        # each pair's values of ``names``, in the order of ``names``
        values = np.concatenate([layout_keys[at_layout], combo_keys[at_combo]], axis=1)
        values = values[:, [inner.index(n) if n in inner else len(inner) + outer.index(n)
                            for n in names]]
        _, ids = np.unique(values, axis=0, return_inverse=True)
        table = np.zeros((len(layout_keys), len(combo_keys)), np.int64)
        table[at_layout, at_combo] = ids.reshape(-1)
        return of_layout, of_combo, table, int(ids.max()) + 1


class _RuleColumns(Mapping):
    """A table of the rule columns crossed with the axes, shown to the rules as
    the whole candidate table: it has every column name, and reading one it
    lacks (a layout column not in ``rule_columns``) raises."""

    def __init__(self, columns: Mapping[str, np.ndarray], names: Sequence[str]):
        self._columns = dict(columns)
        self._names = list(dict.fromkeys([*names, *columns]))

    def __getitem__(self, name):
        if name in self._columns:
            return self._columns[name]
        if name in self._names:
            raise KeyError(f"a layout rule reads {name!r}, not among the layout space's "
                           "rule_columns; declare it there")
        raise KeyError(name)

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)


def divisors(n: int) -> np.ndarray:
    """Every positive divisor of ``n``, ascending, as int64."""
    if n < 1:
        return np.zeros(0, np.int64)
    small = np.arange(1, math.isqrt(n) + 1, dtype=np.int64)
    small = small[n % small == 0]
    return np.unique(np.concatenate([small, n // small]))


def enumerate_layouts(num_gpus: int, hidden_dim: int, num_layers: int, global_batch: int,
                      *, allow_idle: bool = False,
                      pinned: Mapping[str, int | Sequence[int]] | None = None,
                      contexts: Sequence[int] | None = None,
                      uneven: bool = False) -> dict[str, np.ndarray]:
    """The candidate layouts, in ``config_id`` order (module docstring).

    Args:
      pinned: layout axes held at one value (e.g. ``{"tensor_parallel": 8}``)
        or to a list of values.
      uneven: every ``p`` up to ``num_layers``, not only its divisors.
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
    ps = np.arange(1, num_layers + 1, dtype=np.int64) if uneven else divisors(num_layers)
    cs = np.asarray(sorted(set(contexts or (1,))), np.int64)
    t, c, p = (a.ravel() for a in np.meshgrid(ts, cs, ps, indexing="ij"))
    tp = t * c * p
    keep = tp <= num_gpus
    if not allow_idle:
        keep &= num_gpus % tp == 0
    for name, col in ((TENSOR, t), (PIPELINE, p)):
        if name in pinned:
            keep &= np.isin(col, pinned[name])
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
    if MICRO_BATCH in pinned:
        fits &= np.isin(bs, pinned[MICRO_BATCH])[None, :]
    row, col = np.nonzero(fits)
    b = bs[col]
    m = global_batch // (d[row] * b)
    out = {TENSOR: t[row], PIPELINE: p[row], MICRO_BATCH: b,
           ACCUMULATION: m, DATA: d[row]}
    if contexts is not None:
        out[CONTEXT] = c[row]
    if ACCUMULATION in pinned:
        sel = np.isin(m, pinned[ACCUMULATION])
        out = {k: v[sel] for k, v in out.items()}
    return out


def cross_extra_axes(cand: dict[str, np.ndarray], extra: Mapping[str, np.ndarray],
                     pinned: Mapping[str, int]) -> dict[str, np.ndarray]:
    """``cand`` crossed with each extra axis (the last one fastest); a pinned
    axis keeps only its pinned value."""
    return cross(cand, extra_axis_values(extra, pinned))


def extra_axis_values(extra: Mapping[str, np.ndarray],
                      pinned: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Each extra axis' values (its pinned value if pinned), int64 if whole."""
    axes = {}
    for name, values in extra.items():
        if name in pinned:
            values = np.atleast_1d(pinned[name])
        values = np.asarray(values, np.float64)
        if np.all(values == np.round(values)):
            values = values.astype(np.int64)
        axes[name] = values
    return axes


def cross(cand: dict[str, np.ndarray], axes: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every row of ``cand`` with every combination of ``axes``' values (the
    last axis fastest); an axis already in ``cand`` keeps its place."""
    if not axes:
        return dict(cand)
    # Each column written once, at its final length, by a broadcast: crossing
    # one axis at a time with np.repeat (18x slower than a broadcast for a
    # scalar count) took 5 s of a warm DeepSeek-V3 search (bench/README.md).
    total = math.prod(len(v) for v in axes.values())
    rows = len(next(iter(cand.values())))

    def spread(v, inner, outer):
        # each value ``inner`` times in a row, the whole ``outer`` times
        block = np.broadcast_to(v[:, None], (len(v), inner)).reshape(-1)
        return np.broadcast_to(block, (outer, len(block))).reshape(-1)

    out = {c: None if c in axes else spread(np.asarray(v), total, 1) for c, v in cand.items()}
    inner = total
    for name, values in axes.items():
        if total == 0:
            out[name] = values[:0]
            continue
        inner //= len(values)
        out[name] = spread(values, inner, rows * (total // (inner * len(values))))
    return out


# Rows of a crossed block in cross_where: 2^20 rows of ~14 int64 columns,
# about 100 MB, so a block's columns stay near the caches between its cross and
# its cut.
CROSS_BLOCK_ROWS = 1 << 20


def cross_where(cand: dict[str, np.ndarray], axes: Mapping[str, np.ndarray],
                keep: Callable[[dict[str, np.ndarray]], np.ndarray], *,
                block_rows: int | None = None) -> dict[str, np.ndarray]:
    """``cross(cand, axes)`` cut to the rows where ``keep(crossed)`` holds (a
    row-wise rule), in the same order, a block of ``cand``'s rows at a time.

    The whole cross is never materialised: a DeepSeek-V3 search crosses 21.2M
    rows of which the layout rules keep 10.8M, and writing every column of the
    whole cross, then copying the kept rows out of it, took 10-17 s of the
    search's enumeration (page faults on 2.4 GB; bench/README.md, issue 26).
    ``keep`` must be row-wise: a row's verdict may not depend on other rows.
    """
    rows = len(next(iter(cand.values()))) if cand else 0
    total = math.prod(len(v) for v in axes.values())
    step = max(1, (block_rows or CROSS_BLOCK_ROWS) // max(total, 1))
    if rows <= step:
        whole = cross(cand, axes)
        return _rows(whole, keep(whole)) if rows and total else whole
    parts = []
    for start in range(0, rows, step):
        block = cross({k: np.asarray(v)[start:start + step] for k, v in cand.items()}, axes)
        parts.append(_rows(block, keep(block)))
    return {k: np.concatenate([part[k] for part in parts]) for k in parts[0]}


def _rows(cand: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    """The rows of ``cand`` where ``keep`` (the indices found once for every column)."""
    idx = np.flatnonzero(keep)
    return {k: np.asarray(v).take(idx) for k, v in cand.items()}


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
    if name == CONTEXT:
        return [float(c) for c in (1, 2, 4, 8, 16, 32, 64)
                if c <= num_gpus and seq_length % (2 * c) == 0 or c == 1]
    if field.integer and field.high is not None and field.high - field.low < 4:
        return [float(v) for v in range(int(field.low), int(field.high) + 1)]
    raise SpecError(f"--vary: {name} is not a switch; give its values, e.g. {name}=1,2,4")


def _layout_error(num_gpus: int, hidden_dim: int, num_layers: int, global_batch: int,
                  allow_idle: bool, pinned: Mapping[str, int], uneven: bool = False,
                  contexts: Sequence[int] = (1,)) -> SpecError:
    what = f"a global batch of {global_batch} sequences on {num_gpus} GPUs"
    # A context degree c leaves the (t, p) pairs of N / c GPUs (LayoutSpace._parts):
    # counted, and the nearest batches found, over each c searched.
    gpus = [replica_gpus(num_gpus, c, allow_idle) for c in contexts]
    if contexts != (1,):
        shown = (f"={contexts[0]}" if len(contexts) == 1
                 else " in {" + ",".join(map(str, contexts)) + "}")
        bad = [str(c) for c, n in zip(contexts, gpus, strict=True) if not n]
        what += f" at context_parallel{shown} (t p d on N / c GPUs"
        what += f"; {', '.join(bad)} does not divide {num_gpus})" if bad else ")"
    if pinned:
        what += " with " + ", ".join(
            f"{k}={v}" if np.ndim(v) == 0 else f"{k} in {{{','.join(map(str, v))}}}"
            for k, v in pinned.items())
    rule = ("d <= floor(N / (t p)) must divide the global batch" if allow_idle
            else "d = N / (t p) must be whole and divide the global batch (or --allow-idle)")
    total: Counter = Counter()
    for n in gpus:
        total.update(_pair_counts(n, hidden_dim, num_layers, global_batch, allow_idle, pinned,
                                  uneven))
    counts = ", ".join(f"{n:,} {why}" for why, n in total.items() if n)
    found = {g for n in gpus if n
             for g in _nearest(n, hidden_dim, num_layers, global_batch, allow_idle, pinned,
                               uneven=uneven)}
    nearest = " or ".join(f"{g:,}" for g in sorted(found))
    hint = f"; nearest global batches with layouts: {nearest}" if nearest else ""
    pipeline = "p <= num_layers" if uneven else "p | num_layers"
    counts = f" ({counts})" if counts else " (no (t, p) pair is allowed)"
    return SpecError(f"no layout fits {what}: t | hidden_dim, {pipeline}, {rule}"
                     f"{counts}{hint}")


def _pair_counts(num_gpus: int, hidden_dim: int, num_layers: int, global_batch: int,
                 allow_idle: bool, pinned: Mapping[str, int], uneven: bool = False
                 ) -> dict[str, int]:
    """(t, p) pairs with t | hidden_dim, p | num_layers (p <= num_layers if
    ``uneven``), counted by why they give no candidate (or that they give some)."""
    ps = np.arange(1, num_layers + 1, dtype=np.int64) if uneven else divisors(num_layers)
    t, p = (a.ravel() for a in np.meshgrid(divisors(hidden_dim), ps, indexing="ij"))
    sel = np.ones(t.shape, bool)
    for name, col in ((TENSOR, t), (PIPELINE, p)):
        if name in pinned:
            sel &= np.isin(col, pinned[name])
    t, p = t[sel], p[sel]
    tp = t * p
    big = tp > num_gpus
    idle = ~big & (num_gpus % tp != 0) & (not allow_idle)
    ok = ~big & ~idle
    d = np.maximum(num_gpus // np.where(ok, tp, 1), 1)
    if allow_idle:  # some d <= floor(N / (t p)) divides G: the smallest, 1, always does
        batch = np.zeros_like(ok)
    else:
        batch = ok & (global_batch % d != 0)
    return {"need more than num_gpus (t p > N)": int(big.sum()),
            "leave GPUs idle (t p does not divide num_gpus)": int(idle.sum()),
            "have d = N / (t p) not dividing the global batch": int(batch.sum()),
            "give candidates": int((ok & ~batch).sum())}


def nearest_batches(num_gpus: int, hidden_dim: int, num_layers: int, global_batch: int,
                    allow_idle: bool, pinned: Mapping[str, int], limit: int = 4096,
                    uneven: bool = False) -> str:
    """The global batches nearest ``global_batch`` (below and above) with layouts."""
    return " or ".join(f"{g:,}" for g in _nearest(num_gpus, hidden_dim, num_layers,
                                                   global_batch, allow_idle, pinned, limit,
                                                   uneven))


def _nearest(num_gpus: int, hidden_dim: int, num_layers: int, global_batch: int,
             allow_idle: bool, pinned: Mapping[str, int], limit: int = 4096,
             uneven: bool = False) -> list[int]:
    """:func:`nearest_batches`, as numbers."""
    found = []
    for step in (-1, 1):
        g = global_batch + step
        while 1 <= g <= global_batch + limit:
            if len(enumerate_layouts(num_gpus, hidden_dim, num_layers, g,
                                     allow_idle=allow_idle, pinned=pinned,
                                     uneven=uneven)[MICRO_BATCH]):
                found.append(g)
                break
            g += step
    return found


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
      contexts: the context-parallel degrees searched, where several were (the
        pairs and candidates are counted at each).
    """

    pairs: dict[str, int]
    counts: dict[str, int]
    examples: dict[str, str]
    closest: dict[str, Any] | None
    changes: list[str]
    contexts: tuple[int, ...] = ()

    def lines(self) -> list[str]:
        each = (f", at each context degree searched (c in {{{','.join(map(str, self.contexts))}}})"
                if len(self.contexts) > 1 else "")
        out = ["no valid layout.", f"(t, p) pairs with t | hidden_dim and p | num_layers{each}:"]
        width = max(len(f"{n:,}") for n in (*self.counts.values(), *self.pairs.values()))
        out += [f"  {n:>{width},}  {why}" for why, n in self.pairs.items()]
        out.append(f"candidates evaluated ({sum(self.counts.values()):,}), by reason:")
        for why, n in self.counts.items():
            example = self.examples.get(why)
            out.append(f"  {n:>{width},}  " + (f"like: {example}" if example else why))
        if self.closest is not None:
            c = self.closest
            cp = f" c{c[CONTEXT]}" if c.get(CONTEXT, 1) > 1 else ""
            out.append(f"closest to fitting: t{c['tensor_parallel']}{cp} p{c['pipeline_parallel']} "
                       f"d{c['data_parallel']} b{c['micro_batch']} m{c['gradient_accum_steps']}"
                       f" needs {c['memory_gb_per_gpu']:,.1f} GB per GPU, "
                       f"{c['memory_over_gb']:,.1f} GB over {c['gpu_memory_gb']:g} GB")
        out += [f"nearest change: {c}" for c in self.changes]
        return out

    def document(self) -> dict[str, Any]:
        return {"counts": self.counts, "examples": self.examples, "closest": self.closest,
                "changes": self.changes}


def explain_no_valid(model: Model, values: Mapping[str, float], *,
                     evaluate: Callable[..., Any], global_batch: int,
                     allow_idle: bool = False, pinned: Mapping[str, int] | None = None,
                     x64: bool = False, uneven: bool = False,
                     contexts: Sequence[int] | None = None) -> NoValid:
    """Count a search's candidates by why they are invalid; find the nearest fix.

    The candidates are evaluated again on the host side by ``evaluate``
    (``evaluate(model, x64=..., **inputs) -> outputs``, the caller's: the API's
    ``jaxmodel.api.evaluate``, which sits above the models), only when a
    search found nothing.  Memory (a model with
    ``memory_gb_per_gpu`` and ``fits_in_memory``): the candidate that misses by
    the least, and the GPU memory that would make it fit.  Other rules: the
    model's ``layout_reasons``, grouped by kind.  The enumeration's own
    rejections ((t, p) pairs leaving GPUs idle or not dividing the batch) and,
    without ``allow_idle``, how many candidates ``--allow-idle`` would add.
    ``contexts``: the context-parallel degrees a search varies (``--vary
    context_parallel``); each is explained over its ``N / c`` GPUs, as the
    search enumerated it, and the counts are added (without it, the degree the
    configuration gives every layout).
    """
    contexts = tuple(sorted({int(c) for c in contexts})) if contexts else ()
    degrees = contexts or ((model.layout.fixed_context(values) if model.layout is not None
                            else 1),)
    parts = [_explain_context(model, {**values, CONTEXT: float(c)} if contexts else values, c,
                              evaluate=evaluate, global_batch=global_batch,
                              allow_idle=allow_idle, pinned=pinned, x64=x64, uneven=uneven)
             for c in degrees]
    pairs: dict[str, int] = {}
    counts: dict[str, int] = {}
    examples: dict[str, str] = {}
    for part, _ in parts:
        for mine, theirs in ((pairs, part.pairs), (counts, part.counts)):
            for why, n in theirs.items():
                mine[why] = mine.get(why, 0) + n
        for why, example in part.examples.items():
            examples.setdefault(why, example)
    missed = [part.closest for part, _ in parts if part.closest is not None]
    closest = min(missed, key=lambda c: c["memory_over_gb"]) if missed else None
    changes = []
    if closest is not None:
        need = math.ceil(closest["memory_gb_per_gpu"] * 10) / 10
        changes.append(f"gpu_memory_gb >= {need:g} (the closest layout then fits)")
    more = sum(n for _, n in parts)
    if more:
        changes.append(f"--allow-idle adds {more:,} candidates with idle GPUs")
    return NoValid(pairs={k: v for k, v in pairs.items() if v}, counts=counts,
                   examples={k: v for k, v in examples.items() if k != v},
                   closest=closest, changes=changes, contexts=contexts)


def _explain_context(model: Model, values: Mapping[str, float], context: int, *,
                     evaluate: Callable[..., Any], global_batch: int, allow_idle: bool,
                     pinned: Mapping[str, int] | None, x64: bool, uneven: bool
                     ) -> tuple[NoValid, int]:
    """``explain_no_valid`` at one context degree ``context`` shared by every layout
    (the layouts of ``N / c`` GPUs, as ``LayoutSpace._parts``): the explanation
    without its changes, and how many candidates ``--allow-idle`` would add."""
    import re

    pinned = dict(pinned or {})
    n_gpus, h, L = (int(values[k]) for k in (GPUS, HIDDEN, LAYERS))
    n_gpus = replica_gpus(n_gpus, context, allow_idle)
    counts: dict[str, int] = {}
    examples: dict[str, str] = {}
    pairs = _pair_counts(n_gpus, h, L, global_batch, allow_idle, pinned, uneven)
    cand = enumerate_layouts(n_gpus, h, L, global_batch, allow_idle=allow_idle, pinned=pinned,
                             uneven=uneven)
    layout = {k: cand[k].astype(float) for k in LAYOUT_AXES}
    layout[GPUS] = (cand[DATA] * cand[TENSOR] * context
                    * cand[PIPELINE]).astype(float)
    out = evaluate(model, x64=x64, **{**values, **layout})
    valid = np.asarray(getattr(out, "valid_layout", np.ones(len(layout[GPUS]), bool)))
    closest = None
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
            closest = {**{k: int(cand[k][i]) for k in (*LAYOUT_AXES, DATA)},
                       **({CONTEXT: int(context)} if model.layout is not None
                          and model.layout.context else {}),
                       "memory_gb_per_gpu": float(memory[i]),
                       "gpu_memory_gb": float(values["gpu_memory_gb"]),
                       "memory_over_gb": float(excess[i])}
    if rule_rows.any() and model.layout_reasons is not None:
        seen: dict[tuple, str] = {}
        for i in np.flatnonzero(rule_rows):
            key = tuple(int(cand[k][i]) for k in (*LAYOUT_AXES, DATA))
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
    more = 0
    if not allow_idle:
        whole = replica_gpus(int(values[GPUS]), context, True)
        more = len(enumerate_layouts(whole, h, L, global_batch, allow_idle=True,
                                     pinned=pinned, uneven=uneven)[MICRO_BATCH]
                   ) - len(cand[MICRO_BATCH])
    return NoValid(pairs=pairs, counts=counts, examples=examples, closest=closest,
                   changes=[]), more


def replica_gpus(num_gpus: int, context: int, allow_idle: bool) -> int:
    """The GPUs a layout of ``t p d`` spans when every layout shares context degree
    ``c``: ``N / c`` (floored with ``allow_idle``; none where ``c`` does not divide
    ``N`` without it)."""
    if context > 1 and num_gpus % context and not allow_idle:
        return 0
    return num_gpus // context


def global_batch_of(values: Mapping[str, float], global_batch: int | None,
                    global_batch_tokens: int | None, *, context: int = 1) -> int:
    """Global batch in sequences: given, from tokens, or the configuration's own b m d,
    ``d = N / (t p c)`` with ``context`` ``c`` (the configuration's context degree).

    Raises:
      SpecError: both given, or tokens not a multiple of ``seq_length``.
    """
    if global_batch is not None and global_batch_tokens is not None:
        raise SpecError("give --global-batch or --global-batch-tokens, not both")
    if global_batch_tokens is not None:
        s = int(values[SEQUENCE])
        if not 1 <= global_batch_tokens <= MAX_GLOBAL_BATCH * s or global_batch_tokens % s:
            raise InputError("global_batch_tokens", global_batch_tokens,
                             f"a positive multiple of seq_length ({s}) and <= "
                             f"{MAX_GLOBAL_BATCH * s} ({MAX_GLOBAL_BATCH} sequences)")
        return global_batch_tokens // s
    if global_batch is not None:
        check_global_batch(global_batch)
        return global_batch
    d = int(values[GPUS]) // (int(values[TENSOR] * values[PIPELINE]) * context)
    return max(d, 1) * int(values[MICRO_BATCH] * values[ACCUMULATION])


def check_global_batch(global_batch: int) -> None:
    """Refuse a global batch outside ``[1, MAX_GLOBAL_BATCH]`` (one line)."""
    if (isinstance(global_batch, bool) or not isinstance(global_batch, (int, np.integer))
            or not 1 <= global_batch <= MAX_GLOBAL_BATCH):
        raise InputError("global_batch", global_batch,
                         f"a whole number >= 1 and <= {MAX_GLOBAL_BATCH}")
