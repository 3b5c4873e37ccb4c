"""The index space of a sweep, decoded into input values on the device.

The cartesian product is never built on the host.  A chunk of the sweep is a
start index plus ``arange(C)``; each device turns its share of indices into
mixed-radix digits (one digit per grid dimension, the last dimension fastest)
and looks the digits up in small per-axis value tables.  Indices are int64, so
sweeps far beyond 2**31 configurations decode exactly (float32 runs still use
64-bit integers; see ``jaxmodel.precision``).

In ``[sample]`` mode the index is a draw number: every configuration's random
values come from ``fold_in(key(seed), index)``, so a row's inputs depend only
on its index, never on the chunking, the device count or the process.

With an explicit candidate table (``SweepSpec.table``, as ``jaxmodel best``
builds) the index is a row number: the table's columns are put on the device
once, with the rest of the tables, and each row's inputs are looked up there,
so a chunk is an index range as in a grid.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxmodel.spec import SweepSpec

# The candidate table's group ids, beside its input columns in ``tables``.
GROUP_KEY = "group:ids"
# (a crossed table's: each layout's row and each combination's column of them)
GROUP_LAYOUT, GROUP_COMBO = "group:layout", "group:combo"
# A crossed candidate table's index (``CandidateTable.crossed``), beside its
# columns: per layout its first and past-last index and where its admitted
# combinations start in the flat table of them.
CROSS_STARTS, CROSS_ENDS, CROSS_FIRST, CROSS_COMBOS = (
    "cross:starts", "cross:ends", "cross:first", "cross:combos")


def mixed_radix_digits(ids, radices: Sequence[int]) -> list:
    """Mixed-radix digits of integer ``ids`` (jax or numpy), one array per radix,
    the last radix fastest."""
    out = []
    rem = ids
    for radix in reversed(radices):
        out.append(rem % radix)
        rem = rem // radix
    return out[::-1]


def batch_axes(x):
    """``vmap`` in-axes for decoded inputs: 0 for a column, None for a scalar."""
    return type(x)(*(0 if jnp.ndim(v) else None for v in x))


class IndexSpace:
    """Decodes configuration indices into model inputs (one spec, one dtype).

    Attributes:
      size: number of configurations.
      tables: the per-axis value tables, a pytree of numpy arrays to pass to
        :meth:`decode` as a jit argument (keeps them out of the compiled code).
    """

    def __init__(self, spec: SweepSpec, dtype):
        self.spec = spec
        self.model = spec.model
        self.dtype = np.dtype(dtype)
        self.size = spec.size
        self.radices = tuple(d.size for d in spec.dims)
        self.tables = {
            name: np.asarray(values, dtype=self.dtype)
            for d in spec.dims for name, values in zip(d.names, d.values, strict=True)
        }
        if spec.sample is not None:
            self.tables = {
                f"choice:{dist.name}": np.asarray(dist.values, dtype=self.dtype)
                for dist in spec.sample.distributions if dist.kind == "choice"
            }
        self.table = spec.table
        if self.table is not None:
            self.tables = {name: np.asarray(col, dtype=self.dtype)
                           for name, col in self.table.columns.items()}
            crossed = self.table.crossed
            if crossed is not None:
                self.tables.update({name: np.asarray(v, dtype=self.dtype)
                                    for name, v in crossed.axes.items()})
                width = crossed.combos.shape[1]
                self.tables.update({
                    CROSS_STARTS: np.asarray(crossed.starts, np.int64),
                    CROSS_ENDS: np.asarray(crossed.ends, np.int64),
                    CROSS_FIRST: (np.asarray(crossed.pattern, np.int64) * width).astype(np.int32),
                    CROSS_COMBOS: np.asarray(crossed.combos, np.int32).reshape(-1)})
            if self.table.group_ids is not None and self.table.crossed is not None:
                of_layout, of_combo, ids = self.table.group_ids
                self.tables.update({
                    GROUP_LAYOUT: np.asarray(of_layout, np.int64) * ids.shape[1],
                    GROUP_COMBO: np.asarray(of_combo, np.int64),
                    GROUP_KEY: np.asarray(ids, np.int64).reshape(-1)})
            elif self.table.group_ids is not None:
                self.tables[GROUP_KEY] = np.asarray(self.table.group_ids, dtype=np.int64)
        self._dim_of = {name: i for i, d in enumerate(spec.dims) for name in d.names}

    def _rows(self, ids: jax.Array) -> jax.Array:
        """Table rows of ``ids``; padding ids past the end read the last row
        (their results are masked out)."""
        return jnp.clip(ids, 0, max(self.size - 1, 0))

    def table_group_ids(self, ids: jax.Array, tables) -> jax.Array:
        """Each row's group index from the candidate table (zeros without groups)."""
        if GROUP_KEY not in tables:
            return jnp.zeros(ids.shape, dtype=jnp.int64)
        if self.table.crossed is not None:
            layout, combo = self._crossed_index(self._rows(ids), tables)
            at = (jnp.take(tables[GROUP_LAYOUT], layout, mode="clip")
                  + jnp.take(tables[GROUP_COMBO], combo, mode="clip"))
            return jnp.take(tables[GROUP_KEY], at, mode="clip")
        return jnp.take(tables[GROUP_KEY], self._rows(ids), mode="clip")

    def report(self, cols: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """A chunk's columns as reported (the candidate table's ``report``, else as is)."""
        if self.table is None or self.table.report is None:
            return cols
        return self.table.report(cols)

    def digits(self, ids: jax.Array) -> list[jax.Array]:
        """Mixed-radix digits of any int64 ``ids``, one array per grid dimension."""
        return mixed_radix_digits(ids, self.radices)

    def crossed_rows(self, rows: jax.Array, tables) -> tuple[jax.Array, list[jax.Array]]:
        """A crossed candidate table's configurations ``rows`` (in range) as their
        layouts' rows and the digits of their axes' values: the layout whose
        index range holds the row (a binary search over a few hundred
        layouts), then the row's admitted combination of the axes, decoded as
        a grid's index is (:func:`mixed_radix_digits`)."""
        layout, combo = self._crossed_index(rows, tables)
        return layout, mixed_radix_digits(combo, self.table.crossed.radices)

    def _crossed_index(self, rows: jax.Array, tables) -> tuple[jax.Array, jax.Array]:
        """The layout and the combination (a flat index) of each of ``rows``."""
        layout = jnp.searchsorted(tables[CROSS_ENDS], rows, side="right")
        offset = (rows - jnp.take(tables[CROSS_STARTS], layout, mode="clip")).astype(jnp.int32)
        combo = jnp.take(tables[CROSS_COMBOS],
                         jnp.take(tables[CROSS_FIRST], layout, mode="clip") + offset,
                         mode="clip")
        return layout, combo

    def start_digits(self, start: int) -> np.ndarray:
        """Digits of a chunk's first index, on the host (exact Python ints)."""
        out = []
        for radix in reversed(self.radices):
            start, digit = divmod(int(start), radix)
            out.append(digit)
        return np.array(out[::-1], dtype=np.int32)

    def chunk_digits(self, start_digits: jax.Array, offsets: jax.Array) -> list[jax.Array]:
        """Digits of ``start + offsets`` by carry-adding int32 ``offsets`` to the
        start's digits: 32-bit arithmetic only (64-bit division is slow on
        CPUs and emulated on GPUs), exact for any sweep size because each
        digit stays below its radix (< 2**27) and offsets below 2**30.

        Unsigned, with ``lax.div``/``lax.rem`` by the constant radices: LLVM
        turns each into a multiply and a shift.  (jnp's ``//`` and ``%`` add
        sign fix-ups for floor semantics, and XLA copies such cheap integer
        work into every fused consumer of the digits: in the refined model
        over the default sweep's axes that was over half of the program.)
        """
        out = []
        carry = offsets.astype(jnp.uint32)
        start_digits = start_digits.astype(jnp.uint32)
        for i in reversed(range(len(self.radices))):
            v = start_digits[i] + carry
            radix = np.uint32(self.radices[i])
            out.append(jax.lax.rem(v, radix))
            carry = jax.lax.div(v, radix)
        return out[::-1]

    def group_ids(self, digits: Sequence[jax.Array], names: Sequence[str]) -> tuple[jax.Array, int]:
        """Group index over the grid dimensions of ``names`` and the group count."""
        dims = sorted({self._dim_of[n] for n in names})
        gid = jnp.zeros(digits[0].shape, dtype=jnp.int64)
        count = 1
        for i in dims:
            gid = gid * self.radices[i] + digits[i]
            count *= self.radices[i]
        return gid, count

    def _held_batch(self, values: list, xp) -> list:
        """``values`` (in input order) with ``gradient_accum_steps`` derived from
        the spec's ``global_batch_tokens``, when it has one."""
        tokens = self.spec.global_batch_tokens
        if tokens is None:
            return values
        names = self.model.input_names
        named = dict(zip(names, values, strict=True))
        m = self.model.layout.accumulation_for(named, tokens, xp)
        values = list(values)
        values[names.index("gradient_accum_steps")] = m.astype(self.dtype)
        return values

    def constant(self, name: str) -> jax.Array:
        """An input fixed for the whole sweep: one scalar, not a column."""
        return jnp.asarray(self.spec.base[name], dtype=self.dtype)

    def decode(self, ids: jax.Array, tables, digits: Sequence[jax.Array] | None = None) -> tuple:
        """Model inputs (``model.inputs_type``): arrays shaped like ``ids`` for
        the inputs the sweep varies, 0-d scalars for those it fixes.

        The fixed ones stay scalars so that the model, vmapped with
        :func:`batch_axes`, computes what depends on them once per chunk rather
        than once per row, and XLA folds the branches they switch off (a dense
        model's MoE terms, a switch's other cases).  ``digits`` (from
        :meth:`chunk_digits`) saves recomputing them from ids.
        """
        if self.spec.sample is not None:
            return self._sample(ids, tables)
        if self.table is not None:
            rows = self._rows(ids)
            at = {name: rows for name in self.table.columns}
            if self.table.crossed is not None:
                rows, axis_digits = self.crossed_rows(rows, tables)
                at = {name: rows for name in self.table.columns}
                at.update(zip(self.table.crossed.axes, axis_digits, strict=True))
            return self.model.inputs_type(*(
                jnp.take(tables[f.name], at[f.name], mode="clip") if f.name in at
                else self.constant(f.name)
                for f in self.model.inputs))
        if digits is None:
            digits = self.digits(ids)
        values = []
        for f in self.model.inputs:
            if f.name in self._dim_of:
                # Digits are always in range: "clip" is a plain gather, where the
                # default "fill" adds a bounds test to every use of the value.
                values.append(jnp.take(tables[f.name], digits[self._dim_of[f.name]],
                                       mode="clip"))
            else:
                values.append(self.constant(f.name))
        return self.model.inputs_type(*self._held_batch(values, jnp))

    def _sample(self, ids: jax.Array, tables) -> tuple:
        sample = self.spec.sample
        base_key = jax.random.PRNGKey(sample.seed)

        def draw_row(i):
            lo = (i & 0xFFFFFFFF).astype(jnp.uint32)
            hi = (i >> 32).astype(jnp.uint32)
            key = jax.random.fold_in(jax.random.fold_in(base_key, hi), lo)
            keys = jax.random.split(key, len(sample.distributions))
            # float64 whatever the sweep's precision: a float32 uniform is
            # made from other random bits than a float64 one, so the two
            # precisions drew different configurations for the same index.
            return jnp.stack([jax.random.uniform(k, dtype=jnp.float64) for k in keys])

        # (C, n_dists), uniform in [0, 1); every value below is drawn in float64
        # and only then cast, so float32 and x64 sweeps hold the same
        # configurations row for row (integers and choices identical).
        u = jax.vmap(draw_row)(ids)
        drawn = {}
        for j, dist in enumerate(sample.distributions):
            uj = u[:, j]
            if dist.kind == "choice":
                table = tables[f"choice:{dist.name}"]
                idx = jnp.minimum((uj * table.shape[0]).astype(jnp.int64), table.shape[0] - 1)
                v = jnp.take(table, idx, mode="clip")
            elif dist.kind == "uniform":
                if dist.integer:
                    span = dist.high - dist.low + 1.0
                    v = jnp.minimum(jnp.floor(dist.low + uj * span), dist.high)
                else:
                    v = dist.low + uj * (dist.high - dist.low)
            else:
                log_lo, log_hi = np.log(dist.low), np.log(dist.high)
                v = jnp.exp(log_lo + uj * (log_hi - log_lo))
                if dist.integer:
                    v = jnp.clip(jnp.round(v), dist.low, dist.high)
                else:
                    v = jnp.clip(v, dist.low, dist.high)
            drawn[dist.name] = v.astype(self.dtype)
        values = [
            drawn[f.name] if f.name in drawn else self.constant(f.name)
            for f in self.model.inputs
        ]
        return self.model.inputs_type(*self._held_batch(values, jnp))

    def host_inputs(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Inputs of ``ids`` computed on the host with numpy (grid and table
        modes): an independent path used by tests and ``--dry-run`` previews."""
        if self.spec.sample is not None:
            raise ValueError("host_inputs decodes grid sweeps only")
        ids = np.asarray(ids, dtype=np.int64)
        if self.table is not None:
            if self.table.crossed is not None:
                rows = self.table.crossed.rows(ids)
                return {f.name: np.asarray(rows[f.name], self.dtype) if f.name in self.table.names
                        else np.full(ids.shape, self.spec.base[f.name], dtype=self.dtype)
                        for f in self.model.inputs}
            return {f.name: self.tables[f.name][ids] if f.name in self.table.columns
                    else np.full(ids.shape, self.spec.base[f.name], dtype=self.dtype)
                    for f in self.model.inputs}
        digits = np.unravel_index(ids, self.radices) if self.radices else ()
        out = {}
        for f in self.model.inputs:
            if f.name in self._dim_of:
                out[f.name] = self.tables[f.name][digits[self._dim_of[f.name]]]
            else:
                out[f.name] = np.full(ids.shape, self.spec.base[f.name], dtype=self.dtype)
        values = self._held_batch([out[n] for n in self.model.input_names], np)
        return dict(zip(self.model.input_names, values, strict=True))
