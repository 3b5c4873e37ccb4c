"""The sweep engine: a spec -> device-decoded chunks -> the model -> Parquet.

Data flows one way.  For chunk ``k`` (configurations ``[k C, (k + 1) C)``):

1. the device turns ``k C + arange(C)`` into inputs (:mod:`jaxmodel.space`),
2. evaluates the vmapped model and any extra per-row kernels (sensitivities,
   solves), applies the filter and compacts the kept rows to the front,
3. the host fetches only the kept rows (rounded up to a power of two so that
   the slice compiles a bounded number of times) and hands them to a
   background writer (:mod:`jaxmodel.sink`) through a bounded queue.

Chunk ``k + 1`` is dispatched before chunk ``k`` is fetched, so device work
overlaps the host's encoding and writing.  Every chunk has the same shape
(the last is padded and masked), so a sweep compiles once.  Each chunk is
sharded over a 1-D mesh of the local devices.  With several processes
(``jax.distributed`` or ``--shard I/N``) the chunks are split into contiguous
blocks, one per process, and every process writes its own parts.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxmodel.errors import JaxmodelError, SpecError, closest
from jaxmodel.expr import parse
from jaxmodel.precision import computing, float_dtype
from jaxmodel.reduce import CONFIG_ID
from jaxmodel.sink import (
    LOCK_PREFIX,
    MERGE_LOCK,
    METADATA_FILE,
    Column,
    DatasetDamaged,
    FileLock,
    Manifest,
    PartWriter,
    WriterPool,
    check_output_path,
    chunk_runs,
    clean_orphans,
    dataset_files,
    done_chunks,
    foreign_records,
    input_column,
    is_dataset_file,
    locked_slots,
    output_column,
    part_files,
    slot_lock,
    to_table,
)
from jaxmodel.space import IndexSpace
from jaxmodel.spec import SweepSpec

DEFAULT_CHUNK = 1 << 20
MAX_CHUNK = 1 << 30  # offsets are int32 (see IndexSpace.chunk_digits)


class SweepInterrupted(Exception):
    """Ctrl-C: the sweep stopped after a finished chunk; ``--resume`` continues."""


class DatasetExists(SpecError):
    """The output directory already holds a dataset (and no --resume/--overwrite)."""


class WriteFailed(JaxmodelError):
    """Writing the dataset failed (a full disk, a file size limit, an I/O error).

    Every chunk recorded before the failure is safe; ``--resume`` continues
    once the cause is removed.  The message is one line.
    """


@dataclass(frozen=True)
class Extra:
    """Extra per-row columns computed on the device with the model.

    ``kernel(inputs) -> dict[name, scalar]`` for one configuration (vmapped by
    the engine); ``columns`` describes them.
    """

    kernel: Callable[[Any], dict[str, Any]]
    columns: tuple[Column, ...]


@dataclass
class SweepResult:
    """What a sweep (or this process's share of it) did.

    Attributes:
      path: the dataset directory.
      configurations: the sweep's size; ``configurations_done`` those this
        run evaluated (its share, less chunks already on disk).
      rows: rows written (reduced rows for a ``[reduce]`` sweep).
      valid_rows: kept rows with a valid layout.
      seconds: wall time of the loop, ``compile_seconds`` of it the first
        chunk's compile and run.
      bytes, parts: Parquet bytes and part files written.
      chunks, skipped_chunks: chunks evaluated; chunks found done (resume).
      interrupted: stopped by Ctrl-C.
      reduced: the reduced rows, when this process merged them.
      extra: further figures (``kept_rows`` of a reduction).
    """

    path: Path | None
    configurations: int
    configurations_done: int = 0
    rows: int = 0
    valid_rows: int = 0
    seconds: float = 0.0
    compile_seconds: float = 0.0
    bytes: int = 0
    parts: int = 0
    chunks: int = 0
    skipped_chunks: int = 0
    interrupted: bool = False
    reduced: dict[str, np.ndarray] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Configurations per second over the whole loop (compile included)."""
        done = self.configurations_done
        return done / self.seconds if self.seconds > 0 else float("nan")


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
        # Inputs fixed for the whole sweep ([base] or a model default) are
        # still columns (dashboards group by them), but the device neither
        # computes nor sends them: the host fills them in (see fetch), and the
        # writer dictionary-encodes them.
        varied = set(spec.varied)
        dtypes = self.state_dtypes()
        self.constant = {
            f.name: dtypes[f.name].type(round(spec.base[f.name]) if f.integer
                                        else spec.base[f.name])
            for f in self.model.inputs if f.name in wanted and f.name not in varied}
        self.traces = 0
        self._reduce_step = jax.jit(self._reduce_fn, donate_argnums=0)
        self._step = jax.jit(self._step_fn)
        self._slices: dict[int, Callable] = {}
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

    def state_dtypes(self) -> dict[str, np.dtype]:
        """Device dtypes of the kept columns (categories are int32 codes there)."""
        out = {}
        for c in self.columns:
            if c.categories:
                out[c.name] = np.dtype(np.int32)
            else:
                out[c.name] = np.dtype(c.type.to_pandas_dtype())
        return out

    # -- device side -------------------------------------------------------
    def evaluate_rows(self, ids, tables, digits=None) -> dict[str, jax.Array]:
        """Every column for the configurations ``ids`` (on the device)."""
        x = self.space.decode(ids, tables, digits)
        y = jax.vmap(self.model.apply)(x)
        cols: dict[str, jax.Array] = {CONFIG_ID: ids}
        for f, v in zip(self.model.inputs, x, strict=True):
            cols[f.name] = jnp.round(v).astype(jnp.int64) if f.integer else v
        cols.update(y._asdict())
        cols = self.space.report(cols)
        for extra in self.extras:
            cols.update(jax.vmap(extra.kernel)(x))
        return cols

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
        if self.filter is not None:
            (idx,) = jnp.nonzero(keep, size=keep.shape[0], fill_value=0)
            out = {k: v[idx] for k, v in out.items()}
        return out, count, valid

    def _reduce_fn(self, state, start, start_digits, offsets, tables):
        cols, keep, count, valid, digits = self._chunk(start, start_digits, offsets, tables)
        gid = self.group_ids(cols, digits, tables) if hasattr(self.reducer, "group_by") else None
        out = {c.name: cols[c.name] for c in self.columns}
        return self.reducer.update(state, out, keep, gid), count, valid

    def reduce_step(self, state, chunk: int):
        """Fold chunk ``chunk`` into the reducer state (asynchronously)."""
        start = chunk * self.chunk_size
        return self._reduce_step(state, np.int64(start), self.space.start_digits(start),
                                 self.offsets, self.tables)

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
        """Bring a dispatched chunk's kept rows to the host."""
        out, count, valid = result
        n = int(count)
        if self.filter is None or n == 0:
            host = jax.device_get(out) if n else {}
        else:
            bucket = min(self.padded, 1 << max(n - 1, 0).bit_length())
            if bucket not in self._slices:
                self._slices[bucket] = jax.jit(lambda o, b=bucket: {k: v[:b] for k, v in o.items()})
            host = jax.device_get(self._slices[bucket](out))
        host = {k: np.asarray(v)[:n] for k, v in host.items()}
        for name, value in self.constant.items():
            host[name] = np.full(n, value)
        return host, n, int(valid)

    def rows_for(self, chunk: int) -> tuple[dict[str, np.ndarray], int, int]:
        """Compute and fetch one chunk synchronously (tests, dry runs)."""
        with computing():
            return self.fetch(self.step(chunk))


# -- the host loop -----------------------------------------------------------

def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, as in jax)."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


def default_writers(plan: Plan) -> int:
    """Writer threads for ``plan``: the cores not busy feeding the device, within
    a quarter of the machine's memory.

    On an accelerator one core dispatches chunks and fetches rows, and every
    other core writes.  On a CPU host the device *is* those cores, but the
    model costs a few percent of what encoding its rows does
    (bench/sweep_throughput.py), so every core writes and the model's threads
    share them.  Each writer holds a part of ``rows_per_file`` rows (about
    twice its width in memory while encoding), hence the memory cap.
    """
    cores = usable_cores()
    on_cpu = all(d.platform == "cpu" for d in plan.mesh.devices.flat)
    wanted = cores if on_cpu else cores - 1
    row_bytes = sum(max(c.type.bit_width // 8, 1) if pa.types.is_primitive(c.type) else 1
                    for c in plan.columns)
    part_bytes = 2 * row_bytes * min(plan.spec.output.rows_per_file, plan.size)
    try:
        budget = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (ValueError, OSError):
        budget = 1 << 32
    return max(1, min(wanted, budget // max(part_bytes, 1) - 1))


def my_chunks(num_chunks: int, process: int, processes: int) -> range:
    """The contiguous block of chunks that ``process`` of ``processes`` owns."""
    lo = num_chunks * process // processes
    hi = num_chunks * (process + 1) // processes
    return range(lo, hi)


def _versions() -> dict[str, str]:
    from jaxmodel import __version__

    return {"jaxmodel_version": __version__, "jax_version": jax.__version__}


def dataset_metadata(plan: Plan) -> dict[str, Any]:
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
    }


def file_metadata(meta: dict[str, Any]) -> dict[str, str]:
    keys = ("spec", "model", "jaxmodel_version", "jax_version", "created", "filter")
    out = {f"jaxmodel.{k}": "" if meta[k] is None else str(meta[k]) for k in keys}
    out["jaxmodel.sweep"] = sweep_key(meta)
    return out


def sweep_key(meta: dict[str, Any]) -> str:
    """Identity of the computation a dataset holds (spec, model, precision,
    chunk size): written into every manifest record, part and reducer state."""
    import hashlib

    text = json.dumps([meta["spec"], meta["model"], meta["x64"], meta["chunk_size"]])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_metadata(meta_path: Path) -> dict[str, Any]:
    """A dataset's ``_jaxmodel.json``, checked to be what jaxmodel writes.

    Raises:
      DatasetDamaged: unreadable, not JSON, or not of the expected shape.
    """
    try:
        meta = json.loads(meta_path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise DatasetDamaged(f"output: cannot read {str(meta_path)!r} ({e.strerror})") from None
    except ValueError:  # not UTF-8, not JSON
        meta = None
    shape = {"spec": str, "model": str, "x64": bool, "chunk_size": int}
    if not isinstance(meta, dict) or not all(isinstance(meta.get(k), t)
                                             for k, t in shape.items()):
        raise DatasetDamaged(
            f"output: {str(meta_path)!r} is damaged (not the metadata jaxmodel writes); delete "
            "it and rerun with --resume (the manifests carry the sweep's identity, so it is "
            "rebuilt), or use --overwrite")
    return meta


def _process_of(path: Path) -> int | None:
    """The process number in a part, manifest or checkpoint name, else None."""
    name = path.name.lstrip(".")
    for prefix in ("part-p", "_manifest-p", "_reduce-p"):
        if name.startswith(prefix) and name[len(prefix):len(prefix) + 4].isdigit():
            return int(name[len(prefix):len(prefix) + 4])
    return None


def remove_dataset(directory: Path, processes: Iterable[int] | None = None) -> None:
    """Delete a dataset's own files: all of them, or only those of ``processes``
    (and emptied partition directories).  Only the dataset's area is touched
    (see :func:`~jaxmodel.sink.dataset_files`)."""
    keep = None if processes is None else set(processes)

    def order(path: Path) -> int:
        # Manifests first and the metadata last: a kill in between leaves
        # unrecorded parts (orphans, deleted on resume), never a metadata file
        # over rows it does not describe.  Lock files stay: deleting a held
        # lock's file would let a second run lock a new file of the same name.
        return 0 if path.name.startswith("_manifest-p") else 2 if path.name == METADATA_FILE else 1

    for path in sorted(dataset_files(directory), key=order):
        if not is_dataset_file(path) or path.name.startswith(LOCK_PREFIX):
            continue
        owner = _process_of(path)
        if keep is None or owner in keep:
            path.unlink()
    for path in sorted(directory.rglob("*=*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and path.relative_to(directory).parts[0].count("=") and not any(
                path.iterdir()):
            path.rmdir()


def _write_metadata(meta_path: Path, meta: dict[str, Any], process: int, *,
                    replace: bool) -> None:
    tmp = meta_path.with_name(f".{METADATA_FILE}.p{process}.tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    try:
        if replace:
            os.replace(tmp, meta_path)
        else:
            os.link(tmp, meta_path)  # atomic, and the first process wins
    except FileExistsError:
        pass
    finally:
        if tmp.exists():
            tmp.unlink()


def prepare_directory(directory: Path, meta: dict[str, Any], *, process: int, processes: int,
                      resume: bool, overwrite: bool) -> list[FileLock]:
    """Create, check, lock, clean or adopt the output directory.

    The run takes the advisory lock of its process slot (and process 0 those
    of the slots it may clean), so a second run into the same slots is refused
    while the first is alive; the caller releases the returned locks.

    ``--overwrite`` deletes the dataset's own files: all of them in a single
    process run; in a run of several processes each deletes only its own
    (process 0 also those of process numbers the run does not have), so no
    process deletes another's finished work.

    A dataset is adopted (resumed) only if its metadata and every manifest
    record name this computation; a missing metadata file is rebuilt when the
    manifests do.

    Raises:
      DatasetExists: a dataset is there and neither resume nor overwrite was asked.
      DatasetDamaged: the metadata or a manifest cannot be read back.
      SpecError: the directory holds something else, another sweep's dataset,
        or another live run holds it.
    """
    check_output_path(directory)
    meta_path = directory / METADATA_FILE
    if directory.exists() and not directory.is_dir():
        raise SpecError(f"output: {str(directory)!r} exists and is not a directory")
    if directory.exists():
        foreign = [p for p in directory.iterdir()
                   if not (p.is_dir() and "=" in p.name) and not is_dataset_file(p)]
        if foreign and not meta_path.exists():
            raise SpecError(f"output: {str(directory)!r} holds other files "
                            f"(e.g. {foreign[0].name}); choose an empty or new directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        locks = _lock_slots(directory, process, processes)
    except OSError as e:
        raise SpecError(f"output: cannot write to {str(directory)!r} ({e.strerror})") from None
    try:
        _adopt(directory, meta, process=process, processes=processes, resume=resume,
               overwrite=overwrite)
    except BaseException:
        for lock in locks:
            lock.release()
        raise
    return locks


def _lock_slots(directory: Path, process: int, processes: int) -> list[FileLock]:
    """Lock this process's slot, and for process 0 the slots beyond the run's
    processes that it cleans; refuse if a live run holds any of them."""
    slots = [process]
    if process == 0:
        slots += [n for n in locked_slots(directory) if n >= processes]
    locks: list[FileLock] = []
    for n in slots:
        lock = slot_lock(directory, n)
        if not lock.try_acquire():
            for held in locks:
                held.release()
            raise SpecError(
                f"output: {str(directory)!r} is being written by another run ({lock.holder()}"
                f", process slot {n}); wait for it to finish or stop it, then rerun")
        locks.append(lock)
    return locks


def _adopt(directory: Path, meta: dict[str, Any], *, process: int, processes: int,
           resume: bool, overwrite: bool) -> None:
    meta_path = directory / METADATA_FILE
    own_manifest = Manifest(directory, process).path
    if overwrite:
        if processes == 1:
            remove_dataset(directory)
        else:
            others = range(processes, 10_000) if process == 0 else ()
            remove_dataset(directory, [process, *others])
            if process == 0 and (directory / MERGE_LOCK).exists():
                (directory / MERGE_LOCK).unlink()
    else:
        old = read_metadata(meta_path) if meta_path.exists() else None
        if old is not None and not same_sweep(old, meta):
            raise SpecError(
                f"output: {str(directory)!r} holds a dataset of another sweep "
                "(different spec, model or precision); use --overwrite to replace it")
        records = Manifest.read_all(directory)
        # Keyless records (written before records carried keys) are trusted
        # only under a metadata file that names this sweep.
        foreign = foreign_records(records, sweep_key(meta), keyless_ok=old is not None)
        another = SpecError(
            f"output: {str(directory)!r} holds parts of another sweep"
            + ("" if old is not None else f" (and has no {METADATA_FILE})")
            + ": its manifests name another spec, model, precision or chunk size; use "
            "--overwrite to replace them, or choose another directory")
        if foreign and old is None:
            raise another
        if (old is not None or records) and not resume and (
                own_manifest.exists() or processes == 1):
            raise DatasetExists(
                f"output: {str(directory)!r} already holds this sweep's dataset; "
                "use --resume to finish it or --overwrite to replace it")
        if old is not None and old["chunk_size"] != meta["chunk_size"]:
            raise SpecError(
                f"--chunk-size: got {meta['chunk_size']}; this dataset was started with "
                f"{old['chunk_size']} (resume with that, or omit --chunk-size)")
        if foreign:
            raise another
    try:
        replace = False
        if overwrite and meta_path.exists():
            try:
                replace = not same_sweep(read_metadata(meta_path), meta)
            except DatasetDamaged:
                replace = True
        if replace or not meta_path.exists():
            _write_metadata(meta_path, meta, process, replace=replace)
    except OSError as e:
        raise SpecError(f"output: cannot write to {str(directory)!r} ({e.strerror})") from None


def same_sweep(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two dataset metadata describe the same computation."""
    return all(a.get(k) == b.get(k) for k in ("spec", "x64", "model"))


class Progress:
    """A one-line progress display on a terminal (rows, rows/s, ETA)."""

    def __init__(self, total: int, enabled: bool, stream=None):
        self.stream = stream or sys.stderr
        self.total = total
        self.enabled = enabled and getattr(self.stream, "isatty", lambda: False)()
        self.start = time.perf_counter()
        self.last = 0.0

    def update(self, done: int, rows: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last < 0.2 and done < self.total:
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        rate = done / elapsed
        eta = (self.total - done) / rate if rate > 0 else float("inf")
        pct = 100.0 * done / max(self.total, 1)
        self.stream.write(f"\r{done:,}/{self.total:,} configurations ({pct:.1f}%)  "
                          f"{rows:,} rows  {rate:,.0f}/s  ETA {_duration(eta)}   ")
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class _StopFlag:
    """Ctrl-C sets the flag; the loop stops after the chunk in hand."""

    def __init__(self, enabled: bool = True):
        self.set = False
        self.enabled = enabled
        self._old = None

    def __enter__(self):
        if self.enabled and threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.set:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.set = True

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def run_sweep(plan: Plan, directory: Path, *, resume: bool = False, overwrite: bool = False,
              process: int = 0, processes: int = 1, quiet: bool = True,
              progress_stream=None, writers: int | None = None) -> SweepResult:
    """Run the sweep of ``plan`` into ``directory``; see the module docstring.

    ``writers`` threads encode and write parts at once (default:
    :func:`default_writers`); the dataset does not depend on their number.

    Raises:
      DatasetExists / SpecError: directory problems, before any computation.
      SweepInterrupted: Ctrl-C; finished chunks are on disk, ``--resume`` continues.
    """
    if plan.reducer is not None:
        return run_reduce(plan, directory, resume=resume, overwrite=overwrite, process=process,
                          processes=processes, quiet=quiet, progress_stream=progress_stream)
    directory = Path(directory)
    meta = dataset_metadata(plan)
    locks = prepare_directory(directory, meta, process=process, processes=processes,
                              resume=resume, overwrite=overwrite)
    try:
        return _write_rows(plan, directory, process=process, processes=processes, quiet=quiet,
                           progress_stream=progress_stream, writers=writers)
    except OSError as e:
        raise write_failed(directory, e) from None
    finally:
        for lock in locks:
            lock.release()


def write_failed(directory: Path, e: OSError) -> WriteFailed:
    """The one-line error for an OS error while writing the dataset."""
    import errno
    import re

    # pyarrow's writer raises OSError without errno, naming it in the text.
    found = re.search(r"\[errno (\d+)\]", str(e))
    code = e.errno if e.errno is not None else int(found.group(1)) if found else None
    text = (e.strerror or str(e) or type(e).__name__).splitlines()[0]
    why = "the disk is full" if code in (errno.ENOSPC, errno.EDQUOT) else text
    where = f" ({e.filename})" if e.filename else ""
    return WriteFailed(f"output: writing {str(directory)!r} failed: {why}{where}; "
                       "the chunks finished before it are kept")


def _write_rows(plan: Plan, directory: Path, *, process: int, processes: int, quiet: bool,
                progress_stream, writers: int | None) -> SweepResult:
    """The plain sweep's loop, with the directory prepared and locked."""
    Manifest(directory, process).repair()
    stale = [process] + (list(range(processes, 10_000)) if process == 0 else [])
    clean_orphans(directory, stale)
    done = done_chunks(Manifest.read_all(directory, plan.num_chunks))
    todo = Todo(plan, my_chunks(plan.num_chunks, process, processes), done)
    result = SweepResult(directory, plan.size, skipped_chunks=todo.skipped)
    on_disk = read_metadata(directory / METADATA_FILE)
    writer = PartWriter(
        directory, process, plan.columns, file_metadata=file_metadata(on_disk),
        rows_per_file=plan.spec.output.rows_per_file,
        row_group_size=plan.spec.output.row_group_size,
        compression=plan.spec.output.compression,
        partition_by=plan.spec.output.partition_by,
        sweep=sweep_key(on_disk),
        constant=plan.constant,
    )
    progress = Progress(todo.configurations, not quiet, progress_stream)
    writers = writers or default_writers(plan)
    background = WriterPool(writer, writers)
    start = time.perf_counter()
    configs_done = 0
    chunks = iter(todo)
    with computing(), _StopFlag() as stop:
        t0 = time.perf_counter()
        k = next(chunks, None)
        pending = plan.step(k) if k is not None else None
        if pending is not None:
            jax.block_until_ready(pending)
            result.compile_seconds = time.perf_counter() - t0
        try:
            while k is not None:
                # Dispatch the next chunk before fetching this one (overlap).
                k_next = next(chunks, None) if not stop.set else None
                nxt = plan.step(k_next) if k_next is not None else None
                rows, n, valid = plan.fetch(pending)
                background.put(k, rows, n)
                result.rows += n
                result.valid_rows += valid
                result.chunks += 1
                configs_done += plan.chunk_length(k)
                progress.update(configs_done, result.rows)
                k, pending = k_next, nxt
                if stop.set:
                    break
        finally:
            background.close()
            progress.finish()
    result.seconds = time.perf_counter() - start
    result.bytes = writer.bytes_written
    result.parts = writer.parts_written
    result.configurations_done = configs_done
    result.extra["writers"] = writers
    if stop.set and result.chunks < todo.count:
        result.interrupted = True
        raise SweepInterrupted(result)
    return result


class Todo:
    """The chunks a process still has to do, without listing them (a sweep
    may have billions of chunks): its block of chunks less those done."""

    def __init__(self, plan: Plan, owned: range, done: set[int]):
        self.owned = owned
        self.done = done
        done_here = [k for k in done if k in owned]
        self.count = len(owned) - len(done_here)
        self.skipped = len(done_here)
        first, last = owned.start * plan.chunk_size, min(owned.stop * plan.chunk_size, plan.size)
        self.configurations = max(last - first, 0) - sum(plan.chunk_length(k)
                                                         for k in done_here)

    def __iter__(self):
        return (k for k in self.owned if k not in self.done)


def dataset_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in part_files(directory))


# -- reductions ---------------------------------------------------------------

CHECKPOINT_SECONDS = 10.0


def _flatten(state, prefix="") -> dict[str, np.ndarray]:
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}/"))
        else:
            out[prefix + key] = np.asarray(value)
    return out


def _unflatten(flat: dict[str, np.ndarray]) -> dict:
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def save_checkpoint(path: Path, state, info: dict[str, Any]) -> None:
    """A reducer state and what it covers, written atomically (tmp + rename)."""
    flat = _flatten(jax.device_get(state))
    tmp = path.with_name("." + path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.savez(fh, __info__=np.array(json.dumps(info)), **flat)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path, num_chunks: int | None = None) -> tuple[dict, dict[str, Any]]:
    """A reducer state and what it covers.

    Raises:
      DatasetDamaged: the file is not a checkpoint jaxmodel wrote (truncated,
        overwritten), naming it and what to do.
    """
    try:
        with open(path, "rb") as fh, np.load(fh) as data:  # closed even if damaged
            flat = {k: data[k] for k in data.files if k != "__info__"}
            info = json.loads(str(data["__info__"]))
        ok = (isinstance(info, dict) and isinstance(info.get("sweep"), str)
              and isinstance(info.get("complete"), bool)
              and isinstance(info.get("counts"), dict)
              and all(isinstance(info["counts"].get(k), int) for k in ("rows", "valid"))
              and isinstance(info.get("chunks"), list)
              and all(isinstance(c, list) and len(c) == 2 and all(isinstance(v, int) for v in c)
                      and 0 <= c[0] < c[1] <= (num_chunks if num_chunks is not None else c[1])
                      for c in info["chunks"]))
    except Exception:  # np.load raises many kinds on a damaged zip (BadZipFile, ...)
        ok = False
    if not ok:
        raise DatasetDamaged(
            f"output: the reducer state {str(path)!r} is damaged; delete it and rerun with "
            "--resume (its chunks are computed again), or use --overwrite")
    return _unflatten(flat), info


_sweep_key = sweep_key  # reducer states carry the same identity as manifests


def _chunks_of(info: dict[str, Any]) -> set[int]:
    return {c for a, b in info["chunks"] for c in range(a, b)}


def _checkpoint_path(directory: Path, process: int) -> Path:
    return directory / f"_reduce-p{process:04d}.npz"


def run_reduce(plan: Plan, directory: Path | None, *, resume: bool, overwrite: bool,
               process: int, processes: int, quiet: bool, progress_stream=None) -> SweepResult:
    """A sweep whose rows are folded on the device by ``plan.reducer``.

    With ``directory`` None the reduction runs in memory in one process
    (nothing is written, Ctrl-C is a plain ``KeyboardInterrupt``), and the
    result's ``reduced`` holds the rows and ``extra["state"]`` the state.

    Each process checkpoints its state (``_reduce-pNNNN.npz``, atomically)
    every ``CHECKPOINT_SECONDS`` and at the end, so ``--resume`` continues
    from the last checkpoint.  The process that finds every process's final
    state on disk merges them (the reducers' merge is order-free) and writes
    the reduced rows as the dataset's one part; a merge cut short (a kill) is
    redone by the next run that finds every final state.
    """
    if directory is None:
        if processes != 1:
            raise SpecError(f"processes: got {processes}; several processes need an output "
                            "directory to merge their states in")
        return _reduce(plan, None, {}, resume=False, process=0, processes=1, quiet=quiet,
                       progress_stream=progress_stream)
    directory = Path(directory)
    meta = dataset_metadata(plan)
    locks = prepare_directory(directory, meta, process=process, processes=processes,
                              resume=resume, overwrite=overwrite)
    try:
        return _reduce(plan, directory, meta, resume=resume, process=process,
                       processes=processes, quiet=quiet, progress_stream=progress_stream)
    except OSError as e:
        raise write_failed(directory, e) from None
    finally:
        for lock in locks:
            lock.release()


def _reduce(plan: Plan, directory: Path | None, meta: dict[str, Any], *, resume: bool,
            process: int, processes: int, quiet: bool, progress_stream) -> SweepResult:
    in_memory = directory is None
    ckpt = None if in_memory else _checkpoint_path(directory, process)
    key = None if in_memory else sweep_key(meta)
    done: set[int] = set()  # chunks folded into this process's state
    counts = {"rows": 0, "valid": 0}
    state = plan.init_state()
    if not in_memory and ckpt.exists() and resume:
        loaded, info = load_checkpoint(ckpt, plan.num_chunks)
        if info["sweep"] == key:
            state = plan.init_state(loaded)
            done = _chunks_of(info)
            counts = info["counts"]
    # Chunks folded by other processes' states (an earlier split) are skipped,
    # so that no chunk is ever folded twice.
    others = set()
    for path in () if in_memory else directory.glob("_reduce-p*.npz"):
        if path != ckpt:
            _, info = load_checkpoint(path, plan.num_chunks)
            if info["sweep"] == key:
                others |= _chunks_of(info)
    todo = Todo(plan, my_chunks(plan.num_chunks, process, processes), done | others)
    result = SweepResult(directory, plan.size, skipped_chunks=todo.skipped)
    progress = Progress(todo.configurations, not quiet, progress_stream)
    start = time.perf_counter()
    last_save = start
    configs_done = 0
    pending_counts = []

    def checkpoint(complete: bool) -> None:
        for c, v in pending_counts:
            counts["rows"] += int(c)
            counts["valid"] += int(v)
        pending_counts.clear()
        if in_memory:
            return
        save_checkpoint(ckpt, state, {"chunks": chunk_runs(done), "counts": counts,
                                      "complete": complete, "processes": processes,
                                      "sweep": key})

    with computing(), _StopFlag(enabled=not in_memory) as stop:
        for i, k in enumerate(todo):
            t0 = time.perf_counter()
            state, count, valid = plan.reduce_step(state, k)
            if i == 0:
                jax.block_until_ready(state)
                result.compile_seconds = time.perf_counter() - t0
            pending_counts.append((count, valid))
            done.add(k)
            result.chunks += 1
            configs_done += plan.chunk_length(k)
            progress.update(configs_done, 0)
            if time.perf_counter() - last_save > CHECKPOINT_SECONDS:
                checkpoint(False)
                last_save = time.perf_counter()
            if stop.set:
                break
        progress.finish()
        interrupted = stop.set and result.chunks < todo.count
        checkpoint(not interrupted)
    result.seconds = time.perf_counter() - start
    result.configurations_done = configs_done
    if interrupted:
        result.interrupted = True
        raise SweepInterrupted(result)
    result.valid_rows = counts["valid"]
    if in_memory:
        result.extra["kept_rows"] = counts["rows"]
        result.extra["state"] = state
        result.reduced = plan.reducer.rows(state)
        result.rows = len(result.reduced[CONFIG_ID])
        return result
    result.extra["merged"] = _merge_if_last(plan, directory, meta)
    result.extra["kept_rows"] = counts["rows"]
    if result.extra["merged"] is not None:
        result.reduced = result.extra["merged"]
        result.rows = len(result.reduced[CONFIG_ID])
        result.parts = 1
    result.bytes = dataset_bytes(directory)
    return result


def _final_states(plan: Plan, directory: Path, key: str) -> list[tuple[dict, dict]] | None:
    """Every process's final ``(state, info)`` of sweep ``key`` in ``directory``,
    if together they cover every chunk; else None (a process is not done)."""
    found, covered = [], set()
    for path in sorted(directory.glob("_reduce-p*.npz")):
        state, info = load_checkpoint(path, plan.num_chunks)
        if info["sweep"] != key:
            continue  # another sweep's leftover: never merged
        if not info["complete"]:
            return None
        chunks = _chunks_of(info)
        if chunks & covered:
            raise SpecError(
                f"reduce: the states in {str(directory)!r} overlap (chunks folded twice by "
                "runs with different splits at once); rerun with --overwrite")
        found.append((state, info))
        covered |= chunks
    if covered != set(range(plan.num_chunks)):
        return None
    return found


def merged_state(plan: Plan, directory: Path) -> tuple[dict, dict[str, int]] | None:
    """The reduction of the whole sweep from the states in ``directory`` and its
    counts (``rows`` kept by the filter, ``valid``), summed over every process;
    None until every process has finished its share."""
    from jaxmodel.reduce import merge_states

    final = _final_states(plan, Path(directory), sweep_key(dataset_metadata(plan)))
    if final is None:
        return None
    counts = {k: sum(info["counts"][k] for _, info in final) for k in ("rows", "valid")}
    return merge_states(plan.reducer, [state for state, _ in final]), counts


def _merge_if_last(plan: Plan, directory: Path, meta: dict[str, Any]):
    """Merge every process's final state into the reduced part, once.

    Returns the reduced rows if this process wrote them, else ``None`` (another
    process will, when it finishes: each writes its final state before
    looking, so the last one to finish always sees all of them).

    The merge holds an advisory lock (released by the OS if the merger dies)
    and is recorded like any part, by a manifest line; a merge without its
    line (cut short by a kill) is cleaned up and redone by the next run.
    """
    from jaxmodel.reduce import merge_states

    key = sweep_key(meta)
    final = _final_states(plan, directory, key)
    if final is None:
        return None
    states = [state for state, _ in final]
    lock = FileLock(directory / MERGE_LOCK)
    if not lock.try_acquire():
        return None  # another process is merging right now
    try:
        if any(r.get("sweep") == key for r in Manifest.read_all(directory)):
            return None  # merged already
        clean_orphans(directory, [0])  # what a merge cut short left behind
        merged = merge_states(plan.reducer, states)
        rows = plan.reducer.rows(merged)
        writer = PartWriter(directory, 0, plan.columns, file_metadata=file_metadata(meta),
                            rows_per_file=1 << 62,
                            row_group_size=plan.spec.output.row_group_size,
                            compression=plan.spec.output.compression, sweep=key)
        n = len(rows[CONFIG_ID])
        writer._chunks = list(range(plan.num_chunks))
        if n:
            writer._tables = [to_table(plan.columns, rows, writer.full_schema)]
        writer._rows = n
        writer.flush(keep_schema=True)
    finally:
        lock.release()
    if getattr(plan.reducer, "overflowed", None) and plan.reducer.overflowed(merged):
        rows["__overflow__"] = np.array([True])
    return rows
