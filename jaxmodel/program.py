"""The device program of a sweep: decode -> model -> extras -> filter -> reduce or compact.

A :class:`Plan` holds everything compiled for one spec: the columns, the
filter, the jitted step over one chunk of configurations (chunk ``k`` is
``k C + arange(C)``, decoded on the device by :mod:`jaxmodel.space`), the
reducer's fold, the 1-D device mesh each chunk is sharded over, and the fetch
of the kept rows to the host.  It knows nothing of files or of the loop that
drives it (:mod:`jaxmodel.engine`).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, is_dataclass
from importlib.metadata import version
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxmodel.api import program_key
from jaxmodel.errors import SpecError, closest
from jaxmodel.expr import parse
from jaxmodel.precision import computing, float_dtype
from jaxmodel.program_cache import CachedProgram, program_dir
from jaxmodel.reduce import CONFIG_ID
from jaxmodel.sink import Column, input_column, output_column
from jaxmodel.space import IndexSpace, batch_axes
from jaxmodel.spec import DEFAULT_CHUNK, MAX_CHUNK, SweepSpec
from jaxmodel.xla_options import QUICK_ROWS, compiler_options


@dataclass(frozen=True)
class Extra:
    """Extra per-row columns computed on the device with the model.

    ``kernel(inputs) -> dict[name, scalar]`` for one configuration (vmapped by
    the engine); ``columns`` describes them.
    """

    kernel: Callable[[Any], dict[str, Any]]
    columns: tuple[Column, ...]


def _compact(out: dict[str, jax.Array], keep: jax.Array):
    """One device's shard: its kept rows first (in order), and how many (shape [1])."""
    (idx,) = jnp.nonzero(keep, size=keep.shape[0], fill_value=0)
    return {k: v[idx] for k, v in out.items()}, jnp.sum(keep, dtype=jnp.int64)[None]


def _in_order(v: jax.Array) -> list:
    """A sharded array's shards on this process, in order along the rows."""
    return sorted(v.addressable_shards, key=lambda s: s.index[0].start or 0)


def local_mesh(devices: Sequence | None = None) -> Mesh:
    """A 1-D mesh (axis ``rows``) over this process's devices."""
    devs = list(devices) if devices is not None else jax.local_devices()
    return Mesh(np.array(devs), ("rows",))


class Plan:
    """Everything compiled for one spec: columns, the jitted step, the space.

    Args:
      spec: the validated spec.
      x64: compute floats in float64.
      chunk_size: configurations per chunk (the last chunk is padded).
      devices: local devices to shard each chunk over (default: all local).
      extras: extra per-row kernels (sensitivities, solves).
    """

    # A narrowed search of more rows than this runs its filter first
    # (``filter_first``); a smaller one compiles the model once instead.
    FILTER_FIRST_ROWS = QUICK_ROWS

    def __init__(self, spec: SweepSpec, *, x64: bool = False, chunk_size: int = DEFAULT_CHUNK,
                 devices: Sequence | None = None, extras: Sequence[Extra] = (),
                 reducer=None):
        if not 1 <= chunk_size <= MAX_CHUNK:
            raise SpecError(f"--chunk-size: got {chunk_size}; allowed: a whole number "
                            f"from 1 to {MAX_CHUNK} (2**30)")
        self.spec = spec
        self.model = spec.model
        self.x64 = x64
        self.dtype = float_dtype(x64)
        self.space = IndexSpace(spec, self.dtype)
        self.size = spec.size
        self.chunk_size = int(min(chunk_size, max(self.size, 1)))
        self.mesh = local_mesh(devices)
        ndev = self.mesh.devices.size
        self.padded = -(-self.chunk_size // ndev) * ndev
        self.num_chunks = -(-self.size // self.chunk_size)
        self.extras = tuple(extras)
        float_type = pa.float64() if x64 else pa.float32()

        all_columns = [Column(CONFIG_ID, pa.int64(), "", "index of the configuration in the sweep")]
        all_columns += [input_column(f, float_type) for f in self.model.inputs]
        all_columns += [output_column(f, float_type) for f in self.model.outputs]
        for extra in self.extras:
            all_columns += list(extra.columns)
        self.all_columns = {c.name: c for c in all_columns}
        self.categories = {c.name: c.categories for c in all_columns if c.categories}

        self.filter = None
        if spec.filter is not None:
            self.filter = parse(spec.filter.text, set(self.all_columns))
            booleans = {c.name for c in all_columns if pa.types.is_boolean(c.type)}
            self.filter.check_condition(booleans, self.categories)
            # Evaluate once on the host, so that every error (an unknown
            # category name, ...) shows before anything is written.
            self.filter.evaluate_numpy({c.name: np.zeros(1) for c in all_columns},
                                       self.categories)
        out = spec.output
        wanted = list(out.columns) if out.columns else list(self.all_columns)
        for name in list(wanted) + list(out.partition_by):
            if name not in self.all_columns:
                raise SpecError(f"output: unknown column {name!r}"
                                f"{closest(name, self.all_columns)}")
        for name in out.partition_by:
            if name not in wanted:
                wanted.append(name)
            c = self.all_columns[name]
            # Readers (pyarrow, DuckDB, Polars, jaxmodel plot) infer a hive key's
            # type from the directory name: integers and text come back as
            # such, but a float or a flag would come back as text (sorted as
            # text, refused by numeric filters).
            if name == CONFIG_ID:
                raise SpecError("output.partition_by: 'config_id' would make one directory "
                                "per row; partition by an integer input or a category")
            if pa.types.is_floating(c.type) or pa.types.is_boolean(c.type):
                kind = "a float" if pa.types.is_floating(c.type) else "a true/false flag"
                raise SpecError(f"output.partition_by: {name!r} is {kind}, which readers "
                                "would read back from directory names as text; partition "
                                "by an integer input (e.g. tensor_parallel) or a category "
                                "(bottleneck, regime), or filter on it when reading")
        self.reducer = reducer
        self.num_groups = 1
        if reducer is not None:
            if out.partition_by:
                raise SpecError("output.partition_by: not with [reduce] (one reduced table)")
            metrics = [getattr(reducer, a) for a in ("by", "x", "y") if hasattr(reducer, a)]
            needed = metrics + list(getattr(reducer, "group_by", ()))
            for name in needed:
                if name not in self.all_columns:
                    raise SpecError(f"reduce: unknown column {name!r}"
                                    f"{closest(name, self.all_columns)}")
            for name in metrics:
                kind = self.all_columns[name].type
                if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                    raise SpecError(f"reduce: {name!r} is not a number to rank by; allowed: "
                                    "an integer or float column such as mfu_percent")
                if name not in wanted:
                    wanted.append(name)
            self._check_groups(getattr(reducer, "group_by", ()))
        if CONFIG_ID not in wanted:
            wanted.insert(0, CONFIG_ID)
        self.columns = [self.all_columns[n] for n in wanted]
        # A search over a candidate table (best, plan, co-design) folds only
        # what its reducer ranks and groups by; the winners' other columns are
        # computed afterwards from their config ids (widen).  XLA then cuts
        # every output the ranking and the filter do not need (with
        # filter_first, the DeepSeek-V3 search of issue 26 compiled in 3.6 s
        # instead of 11.5 and ran in 1.7 s instead of 15.6: bench/README.md).
        self.state_columns = self.columns
        if reducer is not None and spec.table is not None and not self.extras:
            ranked = {CONFIG_ID}
            for member in (reducer, *getattr(reducer, "reducers", ())):
                ranked |= {getattr(member, a) for a in ("by", "x", "y") if hasattr(member, a)}
                ranked |= set(getattr(member, "group_by", ()))
            self.state_columns = [c for c in self.columns if c.name in ranked]
        # Inputs fixed for the whole sweep ([base] or a model default) are
        # still columns (dashboards group by them), but the device neither
        # computes nor sends them: the host fills them in (see fetch), and the
        # writer dictionary-encodes them.
        varied = set(spec.varied)
        dtypes = self.state_dtypes(self.columns)
        self.constant = {
            f.name: dtypes[f.name].type(round(spec.base[f.name]) if f.integer
                                        else spec.base[f.name])
            for f in self.model.inputs if f.name in wanted and f.name not in varied}
        self.traces = 0
        # A small search or sweep runs for less than XLA's default optimisation
        # costs to compile (jaxmodel.xla_options); a large one keeps the defaults.
        options = compiler_options(self.num_chunks * self.padded)
        self._options = options
        self._reduce_step = jax.jit(self._reduce_fn, donate_argnums=0,
                                    compiler_options=options)
        self._kept_step: tuple | None = None  # (arguments' tree, CachedProgram, state's tree)
        self._kept_key: tuple | None = None  # (program_key(),), found once: every chunk asks
        self._step = jax.jit(self._step_fn, compiler_options=options)
        self._slices: dict[int, Callable] = {}
        self._rows_program: Callable | None = None
        self._constants: dict[str, np.ndarray] | None = None
        with computing():
            self.offsets = jax.device_put(
                np.arange(self.padded, dtype=np.int32),
                NamedSharding(self.mesh, PartitionSpec("rows")),
            )
            self.tables = jax.device_put(
                self.space.tables, NamedSharding(self.mesh, PartitionSpec()))

    def _check_groups(self, group_by: Sequence[str]) -> None:
        """Group columns must be grid inputs or category outputs (known group counts),
        or, over a candidate table, the columns its group ids stand for."""
        if self.spec.table is not None:
            if tuple(group_by) not in ((), self.spec.table.group_by):
                raise SpecError(f"reduce.group_by: {list(group_by)!r} are not the columns the "
                                f"candidate table groups by ({list(self.spec.table.group_by)!r})")
            self.num_groups = self.spec.table.num_groups
            return
        grid = {n for d in self.spec.dims for n in d.names}
        for name in group_by:
            if name not in grid and name not in self.categories:
                raise SpecError(
                    f"reduce.group_by: {name!r} is neither an input varied in [axes]/[[zip]] "
                    f"nor a category ({', '.join(self.categories)})")
        in_grid = [n for n in group_by if n in grid]
        count = 1
        for d in self.spec.dims:
            if any(n in d.names for n in in_grid):
                count *= d.size
        for name in group_by:
            if name in self.categories:
                count *= len(self.categories[name])
        self.num_groups = count

    def group_ids(self, cols, digits, tables=None):
        """Group index of each row: grid digits, then category codes (mixed radix);
        over a candidate table, its group ids."""
        if self.spec.table is not None:
            return self.space.table_group_ids(cols[CONFIG_ID], tables)
        group_by = getattr(self.reducer, "group_by", ())
        in_grid = [n for n in group_by if n not in self.categories]
        if in_grid:
            gid, _ = self.space.group_ids(digits, in_grid)
        else:
            gid = jnp.zeros(cols[CONFIG_ID].shape, dtype=jnp.int64)
        for name in group_by:
            if name in self.categories:
                gid = gid * len(self.categories[name]) + cols[name].astype(jnp.int64)
        return gid

    def state_dtypes(self, columns: Sequence[Column] | None = None) -> dict[str, np.dtype]:
        """Device dtypes of the kept columns (categories are int32 codes there);
        of ``columns`` if given, else of those the reducer's state holds."""
        out = {}
        for c in self.state_columns if columns is None else columns:
            if c.categories:
                out[c.name] = np.dtype(np.int32)
            else:
                out[c.name] = np.dtype(c.type.to_pandas_dtype())
        return out

    @property
    def narrowed(self) -> bool:
        """Whether the reducer's state holds fewer columns than are reported."""
        return len(self.state_columns) != len(self.columns)

    def widen(self, state):
        """A reducer state (device or host) with every reported column: the rows
        it holds evaluated again from their config ids (host NumPy arrays).

        Only a narrowed plan's state changes; empty slots are evaluated too
        (as config id 0) and stay marked empty.
        """
        state = jax.tree_util.tree_map(np.asarray, jax.device_get(state))
        if not self.narrowed:
            return state

        def fill(node):
            if not isinstance(node, dict):
                return node
            if isinstance(node.get("rows"), dict) and CONFIG_ID in node["rows"]:
                return {**node, "rows": self._every_column(node["rows"])}
            return {k: fill(v) for k, v in node.items()}

        return fill(state)

    def _every_column(self, held: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every reported column of the rows ``held`` (which keep their own values:
        they are what the reducer ranked)."""
        ids = np.asarray(held[CONFIG_ID], dtype=np.int64)
        if self.model.on_host:
            from jaxmodel.api import evaluate_on_host

            x = self.space.host_inputs(ids)
            y = evaluate_on_host(self.model, **x)
            with computing():  # (a report may name int64 columns)
                cols = self._columns(ids, [x[n] for n in self.model.input_names], y, np)
        else:
            if self._rows_program is None:
                self._rows_program = jax.jit(self.evaluate_rows)
            with computing():
                cols = jax.device_get(self._rows_program(jnp.asarray(ids), self.tables))
        dtypes = self.state_dtypes(self.columns)
        return {name: (held[name] if name in held else np.asarray(cols[name]))
                .astype(dtype, copy=False) for name, dtype in dtypes.items()}

    # -- device side -------------------------------------------------------
    def evaluate_rows(self, ids, tables, digits=None) -> dict[str, jax.Array]:
        """Every column for the configurations ``ids`` (on the device)."""
        x = self.space.decode(ids, tables, digits)
        rows = ids.shape[0]
        y = self.model.apply_rows(x, rows)
        cols = self._columns(ids, x, y, jnp)
        for extra in self.extras:
            cols.update(jax.vmap(extra.kernel, in_axes=(batch_axes(x),), axis_size=rows)(x))
        return cols

    def _columns(self, ids, x, y, xp) -> dict[str, Any]:
        """The reported columns of rows ``ids`` from their inputs ``x`` (in the
        model's order) and outputs ``y``, with array module ``xp``: integer
        inputs rounded, the candidate table's report applied."""
        cols: dict[str, Any] = {CONFIG_ID: ids}
        for f, v in zip(self.model.inputs, x, strict=True):
            v = xp.broadcast_to(v, ids.shape)
            cols[f.name] = xp.round(v).astype(xp.int64) if f.integer else v
        cols.update(y._asdict())
        return self.space.report(cols)

    def _chunk(self, start, start_digits, offsets, tables):
        """Every column of one chunk, the kept-row mask, its counts and the digits."""
        self.traces += 1  # runs at trace time only: counts compilations
        ids = start + offsets
        real = (offsets < self.chunk_size) & (ids < self.size)
        digits = self.space.chunk_digits(start_digits, offsets) if self.space.radices else None
        cols = self.evaluate_rows(ids, tables, digits)
        keep = real
        if self.filter is not None:
            keep = keep & self.filter.evaluate_jax(cols, self.categories)
        count = jnp.sum(keep, dtype=jnp.int64)
        valid = jnp.sum(keep & cols[self.model.validity], dtype=jnp.int64)
        return cols, keep, count, valid, digits

    def _step_fn(self, start, start_digits, offsets, tables):
        cols, keep, count, valid, _ = self._chunk(start, start_digits, offsets, tables)
        out = {c.name: cols[c.name] for c in self.columns if c.name not in self.constant}
        if self.filter is None:
            return out, count, valid
        # Each device moves its shard's kept rows to the front of the shard and
        # counts them (fetch reads each shard's front).  A compaction over the
        # whole sharded chunk made XLA gather the chunk onto every device.
        out, counts = self._per_shard(_compact)(out, keep)
        return out, counts, valid

    @property
    def filter_first(self) -> int:
        """Rows per block of a chunk's kept rows when the filter runs first, else 0.

        A narrowed search on one device whose filter keeps few rows (the
        DeepSeek-V3 search of issue 26 keeps 3.5%: most layouts do not fit)
        evaluates the filter for the whole chunk, then the ranked columns for
        the kept rows only, a block at a time: XLA cuts the filter's program to
        the memory terms, so the step-time terms run for kept rows alone.

        It traces and compiles the model twice (the chunk's filter, the kept
        blocks), which costs more than it saves in a search of few rows: one
        of at most ``FILTER_FIRST_ROWS`` (``QUICK_ROWS``, the rows up to which a
        program counts as short) runs the plain step.  Measured on the refined
        model's DeepSeek-V3 search with ``--vary recompute`` (172,224 rows, 4.6%
        kept; bench/README.md): compile 13.2 -> 8.7 s, run 0.36 -> 0.59 s.
        """
        if (not self.narrowed or self.filter is None or self.mesh.devices.size != 1
                or self.space.radices or self.num_chunks * self.padded <= self.FILTER_FIRST_ROWS):
            return 0
        return max(1, self.padded // 16)

    def _reduce_fn(self, state, start, start_digits, offsets, tables):
        block = self.filter_first
        if block:
            return self._reduce_kept(state, start, offsets, tables, block)
        cols, keep, count, valid, digits = self._chunk(start, start_digits, offsets, tables)
        gid = self.group_ids(cols, digits, tables) if hasattr(self.reducer, "group_by") else None
        out = {c.name: cols[c.name] for c in self.state_columns}
        if self.mesh.devices.size > 1 and hasattr(self.reducer, "candidates"):
            # Each device cuts its own shard to the reducer's candidates first.
            # Selecting over the whole sharded chunk (top_k, nonzero) made XLA
            # gather the chunk onto every device: two CPU devices ran 6x slower
            # than one (bench/README.md, issue 15).
            out, keep = self._per_shard(self.reducer.candidates)(out, keep)
        return self.reducer.update(state, out, keep, gid), count, valid

    def _reduce_kept(self, state, start, offsets, tables, block: int):
        """:meth:`_reduce_fn` with the filter first (:attr:`filter_first`)."""
        cols, keep, count, valid, _ = self._chunk(start, None, offsets, tables)
        (kept,) = jnp.nonzero(keep, size=self.padded, fill_value=0)
        # (whole blocks: the padding after the last kept row is masked out)
        ids = cols[CONFIG_ID]
        kept = jnp.concatenate([ids[kept], jnp.zeros((block,), ids.dtype)])
        grouped = hasattr(self.reducer, "group_by")

        def fold(j, state):
            at = j * block
            some = lax.dynamic_slice(kept, (at,), (block,))
            mask = at + jnp.arange(block) < count
            rows = self.evaluate_rows(some, tables)
            gid = self.group_ids(rows, None, tables) if grouped else None
            out = {c.name: rows[c.name] for c in self.state_columns}
            return self.reducer.update(state, out, mask, gid)

        blocks = ((count + block - 1) // block).astype(jnp.int32)
        return lax.fori_loop(0, blocks, fold, state), count, valid

    def _per_shard(self, fn: Callable) -> Callable:
        """``fn(columns, mask) -> (columns, mask-like)`` run on each device's shard of
        a chunk alone (its results stay sharded along the rows)."""
        rows = PartitionSpec("rows")
        return jax.shard_map(fn, mesh=self.mesh, in_specs=(rows, rows),
                             out_specs=(rows, rows), check_vma=False)

    def reduce_step(self, state, chunk: int):
        """Fold chunk ``chunk`` into the reducer state (asynchronously)."""
        start = chunk * self.chunk_size
        args = (state, np.int64(start), self.space.start_digits(start), self.offsets,
                self.tables)
        if program_dir() is None:
            return self._reduce_step(*args)
        if self._kept_key is None:
            self._kept_key = (self.program_key(),)
        key = self._kept_key[0]
        if key is None:
            return self._reduce_step(*args)
        return self._kept_reduce_step(key, args)

    def program_key(self) -> dict[str, Any] | None:
        """What fixes the reduce step beside the jaxmodel package, for
        :class:`jaxmodel.program_cache.CachedProgram`; None where that is not
        known, so the step is traced every time.

        Only a search's candidate table (``best``, ``plan``, co-design) on one
        device: its spec's text holds the model, the question (hence the
        reducer), every fixed input's value and a SHA-256 of the candidate
        rows.  A sweep's text may name files its program depends on, extras
        close over callers' kernels, and several devices shard the program.
        """
        model = program_key(self.model)
        if (model is None or self.spec.table is None or self.reducer is None or self.extras
                or not is_dataclass(self.reducer) or self.mesh.devices.size != 1):
            return None
        return {**model, "spec": self.spec.text, "reducer": repr(self.reducer),
                "chunk_size": self.chunk_size, "padded": self.padded,
                "num_groups": self.num_groups, "x64": self.x64,
                "filter_first": self.filter_first,
                "columns": [c.name for c in self.state_columns],
                "constant": sorted(self.constant)}

    def _kept_reduce_step(self, key: dict[str, Any], args: tuple):
        """The reduce step as a :class:`~jaxmodel.program_cache.CachedProgram`: its
        arguments' leaves in, the new state's leaves and the two counts out (the
        state keeps its tree).  The state is not donated: an exported program
        has no donation, and a search's state is a few thousand rows."""
        leaves, tree = jax.tree_util.tree_flatten(args)
        if self._kept_step is None or self._kept_step[0] != tree:
            state_tree = jax.tree_util.tree_structure(args[0])

            def reduce_step(*xs):
                state, count, valid = self._reduce_fn(*jax.tree_util.tree_unflatten(tree, xs))
                out, out_tree = jax.tree_util.tree_flatten(state)
                if out_tree != state_tree:
                    raise TypeError(f"reduce step: state {out_tree} out, {state_tree} in")
                return (*out, count, valid)

            program = CachedProgram("program.reduce_step", reduce_step,
                                    {**key, "arguments": str(tree)}, self._options)
            self._kept_step = (tree, program, state_tree)
        _, program, state_tree = self._kept_step
        *out, count, valid = program(*leaves)
        return jax.tree_util.tree_unflatten(state_tree, out), count, valid

    def init_state(self, loaded=None):
        """A fresh reducer state (or ``loaded``, a checkpoint's), replicated on the mesh
        exactly as the step returns it, so that the step compiles once."""
        with computing():
            state = self.reducer.init(self.state_dtypes(), self.num_groups)
            if loaded is not None:
                state = jax.tree_util.tree_map(
                    lambda ref, v: np.asarray(v, dtype=ref.dtype), state, loaded)
            return jax.device_put(state, NamedSharding(self.mesh, PartitionSpec()))

    def chunk_length(self, chunk: int) -> int:
        """Configurations in chunk ``chunk`` (the last one may be short)."""
        return min(self.chunk_size, self.size - chunk * self.chunk_size)

    def step(self, chunk: int):
        """Dispatch chunk ``chunk`` (asynchronously); returns device values."""
        start = chunk * self.chunk_size
        return self._step(np.int64(start), self.space.start_digits(start), self.offsets,
                          self.tables)

    def fetch(self, result) -> tuple[dict[str, np.ndarray], int, int]:
        """Bring a dispatched chunk's kept rows to the host (with a filter: the
        front of each device's shard, as many rows as it kept, in shard order,
        which is config order)."""
        out, count, valid = result
        if self.filter is None:
            n = int(count)
            host = {k: np.asarray(v)[:n] for k, v in jax.device_get(out).items()} if n else {}
        else:
            counts = np.asarray(jax.device_get(count)).reshape(-1)
            n = int(counts.sum())
            host = {}
            if n:
                pieces = [self._front(shards, int(c)) for shards, c in
                          zip(zip(*(_in_order(v) for v in out.values()), strict=True), counts,
                              strict=True)]
                host = {k: np.concatenate([p[i] for p in pieces if p is not None])
                        for i, k in enumerate(out)}
        host.update({name: column[:n] for name, column in self._constant_rows().items()})
        return host, n, int(valid)

    def _front(self, shards, c: int) -> list[np.ndarray] | None:
        """The first ``c`` rows of one device's shard of every column, on the
        host (sliced on the device to a power-of-two bucket first, so that few
        rows travel and few slice programs compile)."""
        if c == 0:
            return None
        length = shards[0].data.shape[0]
        bucket = min(length, 1 << max(c - 1, 0).bit_length())
        if bucket not in self._slices:
            self._slices[bucket] = jax.jit(lambda vs, b=bucket: [v[:b] for v in vs])
        return [np.asarray(v)[:c] for v in
                jax.device_get(self._slices[bucket]([s.data for s in shards]))]

    def _constant_rows(self) -> dict[str, np.ndarray]:
        """The fixed inputs' columns, made once (read-only) and sliced per chunk:
        filling fresh arrays every chunk cost the main thread about 1 s of a
        24M-row sweep's 10 s, most of it in page faults."""
        if self._constants is None:
            self._constants = {}
            for name, value in self.constant.items():
                column = np.full(self.chunk_size, value, dtype=np.asarray(value).dtype)
                column.flags.writeable = False
                self._constants[name] = column
        return self._constants

    def rows_for(self, chunk: int) -> tuple[dict[str, np.ndarray], int, int]:
        """Compute and fetch one chunk synchronously (tests, dry runs)."""
        with computing():
            return self.fetch(self.step(chunk))


# How a [sample] sweep draws its configurations: "float64" since the draws
# stopped depending on the sweep's precision (issue 29); datasets drawn before
# have no "draws" (in their metadata and sweep key) and are another sweep.
SAMPLE_DRAWS = "float64"


def _versions() -> dict[str, str]:
    return {"jaxmodel_version": version("jaxmodel"), "jax_version": jax.__version__}


def dataset_metadata(plan: Plan) -> dict[str, Any]:
    """What a dataset written from ``plan`` is (its ``_jaxmodel.json``, read back by
    ``jaxmodel.dataset.read_metadata``): the spec, the model, the versions, the size."""
    spec = plan.spec
    return {
        "format": "jaxmodel-dataset/1",
        "spec": spec.text,
        "spec_name": spec.name,
        "model": plan.model.name,
        "model_description": plan.model.description,
        **_versions(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "configurations": plan.size,
        "chunk_size": plan.chunk_size,
        "x64": plan.x64,
        "filter": spec.filter.text if spec.filter else None,
        "columns": [c.name for c in plan.columns],
        # (a narrowed search's checkpoints hold fewer columns: another state)
        **({"state_columns": [c.name for c in plan.state_columns]} if plan.narrowed else {}),
        **({"draws": SAMPLE_DRAWS} if spec.sample is not None else {}),
    }
