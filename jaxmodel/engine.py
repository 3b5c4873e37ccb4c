"""The host loop of a sweep: chunks -> the device program -> the dataset.

A sweep has three parts, each in its own module:

* the device program (:mod:`jaxmodel.program`, :class:`Plan`): for chunk
  ``k`` (configurations ``[k C, (k + 1) C)``) the device decodes
  ``k C + arange(C)`` into inputs (:mod:`jaxmodel.space`), evaluates the
  vmapped model and any extra per-row kernels (sensitivities, solves), applies
  the filter, and either compacts the kept rows to the front or folds them
  into a reducer state;
* this module's one loop (:func:`_run_chunks`), shared by plain and
  ``[reduce]`` sweeps and searches: it dispatches chunk ``k + 1`` before it
  finishes chunk ``k`` where a dispatched chunk may be dropped (so device work
  overlaps the host's fetching and writing), stops after the chunk in hand on
  Ctrl-C, shows progress, and checkpoints every :data:`CHECKPOINT_SECONDS`.
  What is done with a chunk is the only part that differs: a plain sweep
  fetches the kept rows (rounded up to a power of two, so that the slice
  compiles a bounded number of times) and hands them to background writers
  (:mod:`jaxmodel.sink`); a reduction keeps its state on the device;
* the dataset on disk (:mod:`jaxmodel.dataset`): metadata, manifests, locks,
  checkpoints, removal; the only code that knows the file names.

Every chunk has the same shape (the last is padded and masked), so a sweep
compiles once.  Each chunk is sharded over a 1-D mesh of the local devices.
With several processes (``jax.distributed`` or ``--shard I/N``) the chunks
are split into contiguous blocks, one per process, and every process writes
its own parts (or reducer state).

The names this module had before the split (``Plan``, ``Extra``,
``prepare_directory``, ``read_metadata``, ...) are still importable from it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pyarrow as pa
import rich.console
import rich.progress
import rich.text

from jaxmodel.dataset import (  # noqa: F401  (re-exported: names of engine before the split)
    DatasetExists,
    Manifest,
    WriteFailed,
    check_no_overlap,
    checkpoint_files,
    checkpoint_path,
    chunk_runs,
    chunks_of,
    clean_orphans,
    dataset_bytes,
    done_chunks,
    drop_damaged_records,
    file_metadata,
    final_states,
    intact_records,
    load_checkpoint,
    merge_lock,
    metadata_path,
    prepare_directory,
    read_metadata,
    remove_dataset,
    same_sweep,
    save_checkpoint,
    stale_slots,
    sweep_key,
    write_failed,
)
from jaxmodel.errors import SpecError
from jaxmodel.precision import computing
from jaxmodel.program import (  # noqa: F401
    DEFAULT_CHUNK,
    MAX_CHUNK,
    Extra,
    Plan,
    dataset_metadata,
    local_mesh,
)
from jaxmodel.reduce import CONFIG_ID
from jaxmodel.sink import PartWriter, WriterPool
from jaxmodel.spec import MAX_WRITERS, check_writers  # noqa: F401  (engine's names before)

CHECKPOINT_SECONDS = 10.0


class SweepInterrupted(Exception):
    """Ctrl-C: the sweep stopped after a finished chunk; ``--resume`` continues."""



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


class Progress:
    """A progress bar on a terminal, drawn by rich: configurations, chunks,
    rows kept, configurations per second and time left.

    Off when ``enabled`` is false (``quiet``) or when the stream is not a
    terminal (a pipe, a log file, a test): then nothing at all is written, so
    logs hold only the summary.  A context manager; :meth:`finish` stops it.
    """

    def __init__(self, total: int, chunks: int, enabled: bool, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(enabled) and getattr(self.stream, "isatty", lambda: False)()
        self._bar = None
        if self.enabled:
            rp = rich.progress
            self._bar = rp.Progress(
                # Fits 80 columns up to millions of configurations.
                rp.BarColumn(bar_width=10), rp.TaskProgressColumn(),
                rp.TextColumn("{task.completed:,.0f}/{task.total:,.0f} configs"),
                rp.TextColumn("chunk {task.fields[chunks]:,}/{task.fields[total_chunks]:,}"),
                rp.TextColumn("{task.fields[rows]:,} rows"),
                _RateColumn(), rp.TimeRemainingColumn(),
                console=rich.console.Console(file=self.stream, force_terminal=True),
                refresh_per_second=5)
            self._task = self._bar.add_task("sweep", total=total, chunks=0, total_chunks=chunks,
                                            rows=0)

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self.finish()

    def update(self, done: int, chunks: int, rows: int) -> None:
        """``done`` configurations in ``chunks`` chunks, ``rows`` rows kept."""
        if self._bar is not None:
            self._bar.update(self._task, completed=done, chunks=chunks, rows=rows)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.stop()  # draws the final state and ends the line
            self._bar = None


class _RateColumn(rich.progress.ProgressColumn):
    """Configurations per second (rich's own speed column counts bytes)."""

    def render(self, task) -> rich.text.Text:
        speed = task.finished_speed or task.speed
        if speed is None:
            return rich.text.Text("?/s")
        for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if speed >= scale:
                return rich.text.Text(f"{speed / scale:.1f}{unit}/s")
        return rich.text.Text(f"{speed:.0f}/s")


# -- the one loop -------------------------------------------------------------

def _run_chunks(plan: Plan, todo: Todo, result: SweepResult, work, *, quiet: bool,
                progress_stream, catch_ctrl_c: bool = True) -> bool:
    """Run ``todo``'s chunks through ``work``; whether Ctrl-C stopped it early.

    ``work`` says what is done with a chunk (:class:`_WriteRows`,
    :class:`_FoldState`): ``dispatch(k)`` starts chunk ``k`` on the device and
    returns its device values; ``finish(k, values)`` completes it on the host
    and returns ``(rows, valid_rows)`` to count; ``checkpoint()`` records the
    progress made (called every :data:`CHECKPOINT_SECONDS`); ``close(complete)``
    ends the run (``complete`` None when an exception ends it).  Where
    ``work.ahead``, chunk ``k + 1`` is dispatched before chunk ``k`` is
    finished (and dropped unfinished on Ctrl-C); else it is dispatched after.

    Ctrl-C (with ``catch_ctrl_c``) stops the loop after the chunk in hand; a
    second Ctrl-C raises ``KeyboardInterrupt`` at once.
    """
    progress = Progress(todo.configurations, todo.count, not quiet, progress_stream)
    start = last_save = time.perf_counter()
    chunks = iter(todo)
    complete = None
    with computing(), _StopFlag(enabled=catch_ctrl_c) as stop, progress:
        try:
            t0 = time.perf_counter()
            k = next(chunks, None)
            pending = work.dispatch(k) if k is not None else None
            if pending is not None:
                jax.block_until_ready(pending)
                result.compile_seconds = time.perf_counter() - t0
            while k is not None:
                k_next = next(chunks, None) if not stop.set else None
                nxt = work.dispatch(k_next) if work.ahead and k_next is not None else None
                rows, valid = work.finish(k, pending)
                result.rows += rows
                result.valid_rows += valid
                result.chunks += 1
                result.configurations_done += plan.chunk_length(k)
                progress.update(result.configurations_done, result.chunks, result.rows)
                if time.perf_counter() - last_save > CHECKPOINT_SECONDS:
                    work.checkpoint()
                    last_save = time.perf_counter()
                if stop.set:
                    break
                if not work.ahead and k_next is not None:
                    nxt = work.dispatch(k_next)
                k, pending = k_next, nxt
            complete = not (stop.set and result.chunks < todo.count)
        finally:
            work.close(complete)
    result.seconds = time.perf_counter() - start
    return not complete


class _WriteRows:
    """A plain sweep's chunk: fetch its kept rows and hand them to the writers.
    A dispatched chunk may be dropped (its rows were never written), so the
    next chunk is dispatched before this one is fetched."""

    ahead = True

    def __init__(self, plan: Plan, background: WriterPool):
        self.plan = plan
        self.background = background

    def dispatch(self, chunk: int):
        return self.plan.step(chunk)

    def finish(self, chunk: int, values) -> tuple[int, int]:
        rows, n, valid = self.plan.fetch(values)
        self.background.put(chunk, rows, n)
        return n, valid

    def checkpoint(self) -> None:
        pass  # each part's manifest line is its checkpoint

    def close(self, complete: bool | None) -> None:
        self.background.close()  # the parts in hand are written even on an error


class _FoldState:
    """A ``[reduce]`` sweep's chunk: fold it into the reducer state on the device.
    Dispatching a chunk folds it (the old state is donated), so it cannot be
    dropped: the next chunk is dispatched only once this one is counted."""

    ahead = False

    def __init__(self, plan: Plan, state, done: set[int], counts: dict[str, int],
                 path: Path | None, info: dict[str, Any]):
        self.plan = plan
        self.state = state
        self.done = done  # chunks folded into the state
        self.counts = counts
        self.path = path  # None: in memory, never saved
        self.info = info
        self._pending: list = []  # device counts, read only at checkpoints (no sync per chunk)

    def dispatch(self, chunk: int):
        self.state, count, valid = self.plan.reduce_step(self.state, chunk)
        return self.state, count, valid

    def finish(self, chunk: int, values) -> tuple[int, int]:
        _, count, valid = values
        self._pending.append((count, valid))
        self.done.add(chunk)
        return 0, 0

    def checkpoint(self, complete: bool = False) -> None:
        for count, valid in self._pending:
            self.counts["rows"] += int(count)
            self.counts["valid"] += int(valid)
        self._pending.clear()
        if self.path is not None:
            save_checkpoint(self.path, self.state, {
                "chunks": chunk_runs(self.done), "counts": self.counts, "complete": complete,
                **self.info})

    def close(self, complete: bool | None) -> None:
        if complete is not None:
            self.checkpoint(complete)


@contextmanager
def _dataset_locked(plan: Plan, directory: Path, *, resume: bool, overwrite: bool,
                    process: int, processes: int) -> Iterator[dict[str, Any]]:
    """Prepare and lock ``directory`` for this process (yielding the dataset's
    metadata), turn an OS error while writing into :class:`WriteFailed`, and
    release the locks."""
    meta = dataset_metadata(plan)
    locks = prepare_directory(directory, meta, process=process, processes=processes,
                              resume=resume, overwrite=overwrite)
    try:
        yield meta
    except OSError as e:
        raise write_failed(directory, e) from None
    finally:
        for lock in locks:
            lock.release()


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
    check_writers(writers)
    if plan.reducer is not None:
        return run_reduce(plan, directory, resume=resume, overwrite=overwrite, process=process,
                          processes=processes, quiet=quiet, progress_stream=progress_stream)
    directory = Path(directory)
    with _dataset_locked(plan, directory, resume=resume, overwrite=overwrite, process=process,
                         processes=processes):
        return _write_rows(plan, directory, process=process, processes=processes, quiet=quiet,
                           progress_stream=progress_stream, writers=writers)


def _write_rows(plan: Plan, directory: Path, *, process: int, processes: int, quiet: bool,
                progress_stream, writers: int | None) -> SweepResult:
    """A plain sweep, with the directory prepared and locked."""
    Manifest(directory, process).repair()
    lost = drop_damaged_records(directory, stale_slots(process, processes))
    clean_orphans(directory, stale_slots(process, processes))
    # Only chunks whose parts are all on disk as written are done, and no chunk
    # may be held twice: so "complete" means every row is there, once.
    records = intact_records(directory, Manifest.read_all(directory, plan.num_chunks))
    check_no_overlap(directory, records)
    done = done_chunks(records)
    todo = Todo(plan, my_chunks(plan.num_chunks, process, processes), done)
    result = SweepResult(directory, plan.size, skipped_chunks=todo.skipped)
    if lost:
        result.extra["lost_parts"] = lost
    on_disk = read_metadata(metadata_path(directory))
    writer = PartWriter(
        directory, process, plan.columns, file_metadata=file_metadata(on_disk),
        rows_per_file=plan.spec.output.rows_per_file,
        row_group_size=plan.spec.output.row_group_size,
        compression=plan.spec.output.compression,
        partition_by=plan.spec.output.partition_by,
        sweep=sweep_key(on_disk),
        constant=plan.constant,
    )
    writers = writers or default_writers(plan)
    interrupted = _run_chunks(plan, todo, result, _WriteRows(plan, WriterPool(writer, writers)),
                              quiet=quiet, progress_stream=progress_stream)
    result.bytes = writer.bytes_written
    result.parts = writer.parts_written
    result.extra["writers"] = writers
    if interrupted:
        result.interrupted = True
        raise SweepInterrupted(result)
    return result


def run_reduce(plan: Plan, directory: Path | None, *, resume: bool, overwrite: bool,
               process: int, processes: int, quiet: bool, progress_stream=None) -> SweepResult:
    """A sweep whose rows are folded on the device by ``plan.reducer``.

    With ``directory`` None the reduction runs in memory in one process
    (nothing is written, Ctrl-C is a plain ``KeyboardInterrupt``), and the
    result's ``reduced`` holds the rows and ``extra["state"]`` the state.

    Each process checkpoints its state (:func:`~jaxmodel.dataset.checkpoint_path`,
    atomically) every ``CHECKPOINT_SECONDS`` and at the end, so ``--resume``
    continues from the last checkpoint.  The process that finds every
    process's final state on disk merges them (the reducers' merge is
    order-free) and writes the reduced rows as the dataset's one part; a merge
    cut short (a kill) is redone by the next run that finds every final state.
    """
    if directory is None:
        if processes != 1:
            raise SpecError(f"processes: got {processes}; several processes need an output "
                            "directory to merge their states in")
        return _reduce(plan, None, {}, resume=False, process=0, processes=1, quiet=quiet,
                       progress_stream=progress_stream)
    directory = Path(directory)
    with _dataset_locked(plan, directory, resume=resume, overwrite=overwrite, process=process,
                         processes=processes) as meta:
        return _reduce(plan, directory, meta, resume=resume, process=process,
                       processes=processes, quiet=quiet, progress_stream=progress_stream)


def _reduce(plan: Plan, directory: Path | None, meta: dict[str, Any], *, resume: bool,
            process: int, processes: int, quiet: bool, progress_stream) -> SweepResult:
    in_memory = directory is None
    ckpt = None if in_memory else checkpoint_path(directory, process)
    key = None if in_memory else sweep_key(meta)
    done: set[int] = set()  # chunks folded into this process's state
    counts = {"rows": 0, "valid": 0}
    state = plan.init_state()
    if not in_memory and ckpt.exists() and resume:
        loaded, info = load_checkpoint(ckpt, plan.num_chunks)
        if info["sweep"] == key:
            state = plan.init_state(loaded)
            done = chunks_of(info)
            counts = info["counts"]
    resumed = dict(counts)
    # Chunks folded by other processes' states (an earlier split) are skipped,
    # so that no chunk is ever folded twice.
    others = set()
    for path in () if in_memory else checkpoint_files(directory):
        if path != ckpt:
            _, info = load_checkpoint(path, plan.num_chunks)
            if info["sweep"] == key:
                others |= chunks_of(info)
    todo = Todo(plan, my_chunks(plan.num_chunks, process, processes), done | others)
    result = SweepResult(directory, plan.size, skipped_chunks=todo.skipped)
    work = _FoldState(plan, state, done, counts, ckpt,
                      {"processes": processes, "sweep": key})
    interrupted = _run_chunks(plan, todo, result, work, quiet=quiet,
                              progress_stream=progress_stream, catch_ctrl_c=not in_memory)
    if interrupted:
        result.interrupted = True
        raise SweepInterrupted(result)
    state = work.state
    # This run's share, as configurations_done is: a resumed run's state also
    # counts what the runs before it folded (the summary said "reduced 231M
    # configurations (345M kept by the filter)").
    result.valid_rows = counts["valid"] - resumed["valid"]
    result.extra["kept_rows"] = counts["rows"] - resumed["rows"]
    if in_memory:
        state = plan.widen(state)
        result.extra["state"] = state
        result.reduced = plan.reducer.rows(state)
        result.rows = len(result.reduced[CONFIG_ID])
        return result
    merged = _merge_if_last(plan, directory, meta)
    result.extra["merged"] = None if merged is None else merged[0]
    if merged is not None:
        result.reduced, result.extra["overflow"], lost = merged
        if lost:
            result.extra["lost_parts"] = lost
        result.rows = len(result.reduced[CONFIG_ID])
        result.parts = 1
    result.bytes = dataset_bytes(directory)
    return result


def merged_state(plan: Plan, directory: Path) -> tuple[dict, dict[str, int]] | None:
    """The reduction of the whole sweep from the states in ``directory`` and its
    counts (``rows`` kept by the filter, ``valid``), summed over every process;
    None until every process has finished its share."""
    from jaxmodel.reduce import merge_states

    final = final_states(Path(directory), sweep_key(dataset_metadata(plan)), plan.num_chunks)
    if final is None:
        return None
    counts = {k: sum(info["counts"][k] for _, info in final) for k in ("rows", "valid")}
    return plan.widen(merge_states(plan.reducer, [state for state, _ in final])), counts


def _merge_if_last(plan: Plan, directory: Path, meta: dict[str, Any]):
    """Merge every process's final state into the reduced part, once.

    Returns ``(rows, overflowed)``, the reduced rows and whether a Pareto
    front was truncated, if this process wrote them, else ``None`` (another
    process will, when it finishes: each writes its final state before
    looking, so the last one to finish always sees all of them).

    The merge holds an advisory lock (released by the OS if the merger dies)
    and is recorded like any part, by a manifest line; a merge without its
    line (cut short by a kill) is cleaned up and redone by the next run.
    """
    from jaxmodel.reduce import merge_states

    key = sweep_key(meta)
    final = final_states(directory, key, plan.num_chunks)
    if final is None:
        return None
    states = [state for state, _ in final]
    lock = merge_lock(directory)
    if not lock.try_acquire():
        return None  # another process is merging right now
    try:
        # Only mergers write process 0's manifest, under this lock.  A merged
        # part deleted or truncated since is merged again.
        lost = drop_damaged_records(directory, [0])
        if any(r.get("sweep") == key for r in Manifest.read_all(directory)):
            return None  # merged already
        clean_orphans(directory, [0])  # what a merge cut short left behind
        merged = plan.widen(merge_states(plan.reducer, states))
        rows = plan.reducer.rows(merged)
        writer = PartWriter(directory, 0, plan.columns, file_metadata=file_metadata(meta),
                            rows_per_file=1 << 62,
                            row_group_size=plan.spec.output.row_group_size,
                            compression=plan.spec.output.compression, sweep=key)
        writer.write_whole(range(plan.num_chunks), rows, len(rows[CONFIG_ID]))
    finally:
        lock.release()
    overflowed = getattr(plan.reducer, "overflowed", None)
    return rows, bool(overflowed and overflowed(merged)), lost
