"""On-device reductions of evaluated rows: top-k, best per group, Pareto front.

A sweep or a layout search evaluates rows chunk by chunk; a reducer folds
each chunk into a fixed-shape state on the device, so that what comes back
to the host does not grow with the number of candidates.  Every reducer has
the same four operations::

    state = r.init(columns, num_groups)        # fixed-shape jax arrays (a pytree)
    state = r.update(state, cols, mask, group_ids)   # pure, jit-able
    state = r.merge(a, b)                      # pure; associative and commutative
    rows  = r.rows(state)                      # host numpy columns, documented order

``columns`` maps column names to dtypes; ``cols`` holds 1-D arrays of one
chunk length ``C`` for every column, among them an int64 ``config_id`` (the
global index of the configuration, unique within a sweep).  ``mask`` is True
for rows that are real and kept (padding and filtered rows are False).  A
row whose metric is NaN (an invalid layout) is never kept.  Every column of
the winning rows is kept.

Order and ties.  Rows are compared by the metric (best first: largest when
maximizing, smallest when minimizing), then by ``config_id`` ascending; -0.0
equals 0.0.  With unique config ids this is a total order, so a result is a
function of the set of rows only: it does not depend on how they were cut
into chunks, on the device count, or on the order in which states merge.

``init`` and ``update`` must run where jax's 64-bit types are enabled
(``jaxmodel.precision.computing()``), since ``config_id`` is int64.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxmodel.errors import SpecError, closest
from jaxmodel.precision import computing

CONFIG_ID = "config_id"
GROUP_ID = "group_id"

State = dict[str, Any]

# Chunks up to this length are sorted whole: the top_k pre-selection saves
# little there and costs a second of compile time (XLA:CPU, measured).
_SORT_BELOW = 8192

# The longest row ``lax.top_k`` is given.  XLA:GPU's TopKSplitter rewrites a
# top_k over more than 2**20 elements into batched ones and a sort, and with
# jax 0.11.2 the rewritten program fails XLA's HLO verifier ("Expected
# computation compare-greater-than.1 called from sort.2 to have 4 parameters,
# has 2 ... Failed after topk-splitter": a 16M-row top-k sweep on an H200,
# bench/results/h200_2026-12-04).  Splitting here the way the pass would leaves
# it nothing to split.
_TOP_K_ROW = 1 << 20


def _top_values(x: jax.Array, k: int, row: int = _TOP_K_ROW) -> jax.Array:
    """The ``k`` largest values of the 1-D ``x`` (``lax.top_k(x, k)[0]``), each
    ``lax.top_k`` over at most ``row`` elements: the ``k`` largest of ``x`` are
    among the ``k`` largest of its blocks of ``row`` (the last padded with
    ``-inf``), so the top of the blocks' tops is the top of ``x``."""
    n = x.shape[0]
    if n <= row or k >= row:
        return lax.top_k(x, k)[0]
    blocks = -(-n // row)
    if blocks * row > n:
        x = jnp.concatenate([x, jnp.full((blocks * row - n,), -jnp.inf, x.dtype)])
    tops = lax.top_k(x.reshape(blocks, row), min(k, row))[0]
    return _top_values(tops.reshape(-1), k, row)


def _check_columns(columns: Mapping[str, Any], *names: str) -> None:
    for name in (CONFIG_ID, *names):
        if name not in columns:
            raise SpecError(f"reduce: no column {name!r}{closest(name, columns)}")


def _empty_rows(columns: Mapping[str, Any], n: int) -> dict[str, jax.Array]:
    with computing():
        return {k: jnp.zeros((n,), dtype=np.dtype(v)) for k, v in columns.items()}


def _sort_key(values: jax.Array, mask: jax.Array, best_is_max: bool):
    """``(bad, key)``: rows to drop, and a key whose ascending order is best first.

    NaN metrics count as bad; bad rows get key 0 so they never disturb a
    comparison.  Adding 0.0 turns -0.0 into 0.0 (sorting in jax orders the
    two, numpy's comparisons do not).
    """
    if values.dtype == jnp.bool_:
        values = values.astype(jnp.int32)
    bad = ~mask
    if jnp.issubdtype(values.dtype, jnp.floating):
        nan = jnp.isnan(values)
        bad = bad | nan
        values = jnp.where(nan, jnp.zeros_like(values), values) + 0.0
    key = -values if best_is_max else values
    return bad, key


def _concat(a: Mapping[str, jax.Array], b: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    return {k: jnp.concatenate([a[k], b[k].astype(a[k].dtype)]) for k in a}


def _take(cols: Mapping[str, jax.Array], idx: jax.Array) -> dict[str, jax.Array]:
    return {k: v[idx] for k, v in cols.items()}


def _host(state: State) -> State:
    return jax.tree_util.tree_map(np.asarray, jax.device_get(state))


@dataclass(frozen=True)
class TopK:
    """The ``k`` best rows by column ``by``.

    State: ``{"rows": {column: (k,)}, "empty": (k,) bool}``, kept sorted best
    first; ``empty`` marks slots not yet filled.  ``rows`` returns up to ``k``
    rows, best first (metric, then ``config_id`` ascending).
    """

    by: str
    k: int
    maximize: bool = True

    def __post_init__(self):
        if not 1 <= self.k <= 10_000_000:
            raise SpecError(f"top_k: k must be a whole number >= 1, got {self.k!r}")

    def init(self, columns: Mapping[str, Any], num_groups: int = 1) -> State:
        _check_columns(columns, self.by)
        return {"rows": _empty_rows(columns, self.k), "empty": jnp.ones((self.k,), bool)}

    def _order(self, cols, bad):
        """Row indices in the documented order: valid first, metric, config_id."""
        _, key = _sort_key(cols[self.by], ~bad, self.maximize)
        n = bad.shape[0]
        *_, perm = lax.sort(
            (bad.astype(jnp.int32), key, cols[CONFIG_ID], jnp.arange(n, dtype=jnp.int32)),
            num_keys=3,
        )
        return perm

    def _select(self, cols, bad):
        idx = self._order(cols, bad)[: self.k]
        return {"rows": _take(cols, idx), "empty": bad[idx]}

    def _candidates(self, chunk, bad):
        """``2k`` rows of a long chunk that surely hold its ``k`` best.

        A multi-key sort of the whole chunk is slow; ``lax.top_k`` on float32
        is fast but breaks no ties.  So: ``thr``, the ``k``-th best metric
        rounded to float32 (rounding is monotone, so each of the ``k`` best
        rows has a rounded metric ``>= thr``).  Fewer than ``k`` valid rows
        are above ``thr``; all of them are candidates.  Of the rows at ``thr``
        (often many: layouts that differ only in how b m is split tie
        exactly), all are candidates if few, else -- when their exact metrics
        are equal and their config ids span less than 2**24 (exact in
        float32) -- the ``k`` lowest config ids, by a second ``top_k``.  Only
        if that still leaves more than ``2k`` rows is the chunk sorted whole.
        """
        n = bad.shape[0]
        size = 2 * self.k
        if n <= max(size, _SORT_BELOW):
            return chunk, bad
        _, key = _sort_key(chunk[self.by], ~bad, self.maximize)
        score = jnp.where(bad, -jnp.inf, -key.astype(jnp.float32))
        # min of the k values, not [k - 1]: XLA:CPU turns top_k + slice into
        # a slow sort (measured: 5 against 600 M rows/s).
        thr = jnp.min(_top_values(score, self.k))
        above = ~bad & (score > thr)
        tie = ~bad & (score == thr)

        cid = chunk[CONFIG_ID]
        lo = jnp.min(jnp.where(tie, cid, jnp.iinfo(cid.dtype).max))
        hi = jnp.max(jnp.where(tie, cid, jnp.iinfo(cid.dtype).min))
        key_lo = jnp.min(jnp.where(tie, key, jnp.max(key)))
        key_hi = jnp.max(jnp.where(tie, key, jnp.min(key)))
        rank = jnp.where(tie, -(cid - lo).astype(jnp.float32), -jnp.inf)
        rank_thr = jnp.min(_top_values(rank, self.k))
        by_id = (key_lo == key_hi) & (hi - lo < (1 << 24))
        pick = above | (tie & (~by_id | (rank >= rank_thr)))
        count = jnp.sum(pick)

        def few():
            (idx,) = jnp.nonzero(pick, size=size, fill_value=0)
            return idx.astype(jnp.int32), jnp.arange(size) >= count

        def many():
            idx = self._order(chunk, bad)[:size]
            return idx, bad[idx]

        idx, drop = lax.cond(count <= size, few, many)
        return _take(chunk, idx), drop

    def candidates(self, cols: Mapping[str, jax.Array], mask: jax.Array
                   ) -> tuple[dict[str, jax.Array], jax.Array]:
        """A part of a chunk cut to ``2k`` rows (and their mask) that hold its ``k``
        best, for :meth:`update` to fold with the other parts' (the engine runs it
        on each device's shard of a chunk, so that no device sees the others')."""
        bad, _ = _sort_key(cols[self.by], mask, self.maximize)
        chunk, bad = self._candidates(dict(cols), bad)
        return chunk, ~bad

    def update(self, state: State, cols: Mapping[str, jax.Array], mask: jax.Array,
               group_ids: jax.Array | None = None) -> State:
        chunk = {k: cols[k] for k in state["rows"]}
        bad_chunk, _ = _sort_key(chunk[self.by], mask, self.maximize)
        chunk, bad_chunk = self._candidates(chunk, bad_chunk)
        return self._select(_concat(state["rows"], chunk),
                            jnp.concatenate([state["empty"], bad_chunk]))

    def merge(self, a: State, b: State) -> State:
        return self._select(_concat(a["rows"], b["rows"]),
                            jnp.concatenate([a["empty"], b["empty"]]))

    def rows(self, state: State) -> dict[str, np.ndarray]:
        s = _host(state)
        keep = ~s["empty"]
        return {k: v[keep] for k, v in s["rows"].items()}


@dataclass(frozen=True)
class GroupBest:
    """The best row by ``by`` in each group (e.g. each ``link_bandwidth_gb_s``).

    Group ids, in ``[0, num_groups)``, come from the caller (rows with ids
    outside are dropped); ``group_by`` names the columns they stand for.
    Implemented with segment reductions: the lowest "bad" flag, then the best
    metric, then the lowest ``config_id`` per group, then that row's index.

    State: ``{"rows": {column: (G,)}, "empty": (G,) bool}``, one slot per
    group.  ``rows`` returns one row per group that has a valid row, in
    ascending group id, with the id in an extra int64 column ``group_id``.
    """

    by: str
    group_by: tuple[str, ...]
    maximize: bool = True

    def init(self, columns: Mapping[str, Any], num_groups: int = 1) -> State:
        _check_columns(columns, self.by, *self.group_by)
        if num_groups < 1:
            raise SpecError(f"group_by: need at least one group, got {num_groups}")
        return {"rows": _empty_rows(columns, num_groups),
                "empty": jnp.ones((num_groups,), bool)}

    def _select(self, cols, bad, gid, num_groups):
        _, key = _sort_key(cols[self.by], ~bad, self.maximize)
        n = bad.shape[0]

        def best(values):
            g = jax.ops.segment_min(values, gid, num_segments=num_groups)
            return g, values == jnp.take(g, gid, mode="clip")

        bad_i = bad.astype(jnp.int32)
        g_bad, cand = best(bad_i)
        key_big = (jnp.inf if jnp.issubdtype(key.dtype, jnp.floating)
                   else jnp.iinfo(key.dtype).max)
        _, on_key = best(jnp.where(cand, key, key_big))
        cand = cand & on_key
        cid = cols[CONFIG_ID]
        _, on_id = best(jnp.where(cand, cid, jnp.iinfo(cid.dtype).max))
        cand = cand & on_id
        row = jax.ops.segment_min(jnp.where(cand, jnp.arange(n), n), gid,
                                  num_segments=num_groups)
        row = jnp.minimum(row, n - 1)
        return {"rows": _take(cols, row), "empty": g_bad != 0}

    def update(self, state: State, cols: Mapping[str, jax.Array], mask: jax.Array,
               group_ids: jax.Array | None = None) -> State:
        if group_ids is None:
            raise SpecError("group_by: update needs group_ids")
        num_groups = state["empty"].shape[0]
        chunk = {k: cols[k] for k in state["rows"]}
        bad_chunk, _ = _sort_key(chunk[self.by], mask, self.maximize)
        own = jnp.arange(num_groups, dtype=group_ids.dtype)
        return self._select(_concat(state["rows"], chunk),
                            jnp.concatenate([state["empty"], bad_chunk]),
                            jnp.concatenate([own, group_ids]), num_groups)

    def merge(self, a: State, b: State) -> State:
        num_groups = a["empty"].shape[0]
        own = jnp.arange(num_groups)
        return self._select(_concat(a["rows"], b["rows"]),
                            jnp.concatenate([a["empty"], b["empty"]]),
                            jnp.concatenate([own, own]), num_groups)

    def rows(self, state: State) -> dict[str, np.ndarray]:
        s = _host(state)
        keep = ~s["empty"]
        out = {k: v[keep] for k, v in s["rows"].items()}
        out[GROUP_ID] = np.flatnonzero(keep).astype(np.int64)
        return out


@dataclass(frozen=True)
class Pareto:
    """The Pareto front of two columns ``x`` and ``y``.

    A row dominates another when it is at least as good in both and better
    in one.  The front holds every row no other row dominates; of rows with
    identical ``(x, y)`` only the lowest ``config_id`` is kept.  Per update the
    buffer and the chunk are sorted by ``(x, y, config_id)`` (best first in
    each direction) and a row is kept when its ``y`` beats the running best
    ``y`` of all rows before it.

    State: ``{"rows": {column: (capacity,)}, "empty": (capacity,) bool,
    "overflow": () bool}``.  When the front outgrows ``capacity`` the rows
    with the best ``x`` are kept and ``overflow`` is set for good: the result
    is then truncated and may not be exact; raise ``capacity``.  ``rows``
    returns the front ordered by ``x`` best first (so ``y`` worst first).
    """

    x: str
    y: str
    minimize_x: bool = True
    minimize_y: bool = True
    capacity: int = 4096

    def __post_init__(self):
        if self.capacity < 1:
            raise SpecError(f"pareto: capacity must be >= 1, got {self.capacity!r}")

    def init(self, columns: Mapping[str, Any], num_groups: int = 1) -> State:
        _check_columns(columns, self.x, self.y)
        return {"rows": _empty_rows(columns, self.capacity),
                "empty": jnp.ones((self.capacity,), bool),
                "overflow": jnp.zeros((), bool)}

    def _select(self, cols, bad, overflow):
        bad_x, kx = _sort_key(cols[self.x], ~bad, not self.minimize_x)
        bad_y, ky = _sort_key(cols[self.y], ~bad, not self.minimize_y)
        bad = bad_x | bad_y
        n = bad.shape[0]
        s_bad, _, s_y, _, perm = lax.sort(
            (bad.astype(jnp.int32), kx, ky, cols[CONFIG_ID], jnp.arange(n, dtype=jnp.int32)),
            num_keys=4,
        )
        # Bad rows sort last, so the running best y of the rows before a good
        # row is taken over good rows only.
        best_before = jnp.concatenate([s_y[:1], lax.cummin(s_y)[:-1]])
        keep = (s_bad == 0) & ((jnp.arange(n) == 0) | (s_y < best_before))
        count = jnp.sum(keep)
        (slot,) = jnp.nonzero(keep, size=self.capacity, fill_value=0)
        return {"rows": _take(cols, perm[slot]),
                "empty": jnp.arange(self.capacity) >= count,
                "overflow": overflow | (count > self.capacity)}

    def _undominated(self, state, chunk, bad):
        """Valid chunk rows that no point of the buffer dominates.

        Only these can reach the front (domination is transitive).  The
        buffer is sorted by x with y strictly improving, so of the buffer
        points with x at least as good as a row's, the last one has the best
        y: one ``searchsorted`` per row decides.
        """
        bad_x, kx = _sort_key(chunk[self.x], ~bad, not self.minimize_x)
        bad_y, ky = _sort_key(chunk[self.y], ~bad, not self.minimize_y)
        empty = state["empty"]
        _, bx = _sort_key(state["rows"][self.x], ~empty, not self.minimize_x)
        _, by = _sort_key(state["rows"][self.y], ~empty, not self.minimize_y)
        last = (jnp.inf if jnp.issubdtype(bx.dtype, jnp.floating)
                else jnp.iinfo(bx.dtype).max)
        bx = jnp.where(empty, last, bx)  # empty slots are at the end already
        j = jnp.searchsorted(bx, kx, side="right")
        p = jnp.maximum(j - 1, 0)
        dominated = ((j > 0) & ~empty[p] & (by[p] <= ky)
                     & ((bx[p] < kx) | (by[p] < ky)))
        return ~(bad_x | bad_y | dominated)

    def update(self, state: State, cols: Mapping[str, jax.Array], mask: jax.Array,
               group_ids: jax.Array | None = None) -> State:
        chunk = {k: cols[k].astype(v.dtype) for k, v in state["rows"].items()}
        n = mask.shape[0]
        if n <= max(self.capacity, _SORT_BELOW):
            return self._select(_concat(state["rows"], chunk),
                                jnp.concatenate([state["empty"], ~mask]), state["overflow"])
        # Long chunk: drop the rows the buffer already dominates, then sort
        # only the survivors (if they fit in ``capacity`` rows, as they do once
        # the front has formed) with the buffer.
        keep = self._undominated(state, chunk, ~mask)
        count = jnp.sum(keep)

        def survivors():
            (idx,) = jnp.nonzero(keep, size=self.capacity, fill_value=0)
            drop = jnp.arange(self.capacity) >= count
            return self._select(_concat(state["rows"], _take(chunk, idx)),
                                jnp.concatenate([state["empty"], drop]), state["overflow"])

        def whole():
            return self._select(_concat(state["rows"], chunk),
                                jnp.concatenate([state["empty"], ~keep]), state["overflow"])

        return lax.cond(count <= self.capacity, survivors, whole)

    def merge(self, a: State, b: State) -> State:
        return self._select(_concat(a["rows"], b["rows"]),
                            jnp.concatenate([a["empty"], b["empty"]]),
                            a["overflow"] | b["overflow"])

    def overflowed(self, state: State) -> bool:
        """Whether the front ever outgrew ``capacity`` (the result is truncated)."""
        return bool(np.asarray(jax.device_get(state["overflow"])))

    def rows(self, state: State) -> dict[str, np.ndarray]:
        s = _host(state)
        keep = ~s["empty"]
        return {k: v[keep] for k, v in s["rows"].items()}


@dataclass(frozen=True)
class Combined:
    """Several reducers folded over the same rows in one pass (a search's
    top-k, best per group and Pareto front).

    State: ``{"0": state of reducers[0], "1": ..., ...}``.  ``group_by`` is
    that of the member with groups (at most one), so the caller passes group
    ids; ``rows`` returns the first member's rows and :meth:`parts` every
    member's.
    """

    reducers: tuple

    def __post_init__(self):
        if not self.reducers:
            raise SpecError("reduce: combine at least one reducer")
        if sum(isinstance(r, GroupBest) for r in self.reducers) > 1:
            raise SpecError("reduce: combine at most one group_by reducer")

    @property
    def group_by(self) -> tuple[str, ...]:
        return next((r.group_by for r in self.reducers if isinstance(r, GroupBest)), ())

    def init(self, columns: Mapping[str, Any], num_groups: int = 1) -> State:
        return {str(i): r.init(columns, num_groups) for i, r in enumerate(self.reducers)}

    def update(self, state: State, cols: Mapping[str, jax.Array], mask: jax.Array,
               group_ids: jax.Array | None = None) -> State:
        return {str(i): r.update(state[str(i)], cols, mask, group_ids)
                for i, r in enumerate(self.reducers)}

    def merge(self, a: State, b: State) -> State:
        return {str(i): r.merge(a[str(i)], b[str(i)]) for i, r in enumerate(self.reducers)}

    def overflowed(self, state: State) -> bool:
        """Whether a member's buffer overflowed (a Pareto front was truncated)."""
        return any(isinstance(r, Pareto) and r.overflowed(state[str(i)])
                   for i, r in enumerate(self.reducers))

    def parts(self, state: State) -> list[dict[str, np.ndarray]]:
        """Every member's rows, in ``reducers`` order."""
        return [r.rows(state[str(i)]) for i, r in enumerate(self.reducers)]

    def rows(self, state: State) -> dict[str, np.ndarray]:
        return self.reducers[0].rows(state["0"])


Reducer = TopK | GroupBest | Pareto | Combined


@functools.cache
def jitted(reducer: Reducer, method: str):
    """``jax.jit`` of one of the reducer's pure methods (cached per reducer)."""
    return jax.jit(getattr(reducer, method))


def merge_states(reducer: Reducer, states: Iterable[State]) -> State:
    """Fold states (e.g. gathered from several processes, or as numpy) into one.

    The fold order does not change the result (merge is associative and
    commutative under the documented order).
    """
    states = list(states)
    if not states:
        raise SpecError("merge_states: no states to merge")
    merge = jitted(reducer, "merge")
    with computing():
        out = jax.tree_util.tree_map(jnp.asarray, states[0])
        for s in states[1:]:
            out = merge(out, s)
    return out


def merge_stacked(reducer: Reducer, stacked: State) -> State:
    """Merge states stacked along a leading axis (``process_allgather`` output)."""
    leaves = jax.tree_util.tree_leaves(stacked)
    count = np.shape(leaves[0])[0]
    host = jax.tree_util.tree_map(np.asarray, jax.device_get(stacked))
    return merge_states(
        reducer, [jax.tree_util.tree_map(lambda v, i=i: v[i], host) for i in range(count)]
    )


__all__ = ["CONFIG_ID", "GROUP_ID", "Combined", "GroupBest", "Pareto", "Reducer", "TopK",
           "merge_stacked", "merge_states"]
