"""The Parquet sink: a dataset directory of part files, written in the background.

Layout of a dataset directory::

    _jaxmodel.json                 what the sweep is (spec, model, versions, size)
    _manifest-p0000.jsonl          one line per finished part of process 0
    _lock-p0000                    locked (flock) while a run writes process 0
    part-p0000-c000000000000.parquet
    ...                            (under col=value/ directories with partition_by)

Nothing is lost and nothing half-written looks complete:

* A part is written under a hidden temporary name (``.part-...parquet.tmp``,
  which pyarrow, DuckDB and Polars skip), flushed, fsynced and renamed; only
  then is a manifest line appended (and fsynced) naming the part and the
  chunks it holds.  A part covers whole chunks.
* On ``--resume`` the chunks named in the manifests are done; temporary files
  and parts missing from the manifests (a kill between rename and manifest
  line) are deleted, and the remaining chunks are computed again.
* Every manifest line and part names the computation it belongs to (the
  ``sweep`` key; ``jaxmodel.sweep`` in file metadata), so a missing or
  replaced ``_jaxmodel.json`` cannot pair a spec with another sweep's rows.
  What is read back is validated: a damaged file is a one-line error naming it.
* A run holds an advisory lock (``_lock-pNNNN``, ``fcntl.flock``) on each
  process slot it writes; the OS releases it when the holder dies.

Schema: integers int64, floats float32 (float64 with x64), booleans,
category columns (``bottleneck``, ``regime``) dictionary-encoded strings; each
field carries its unit and meaning as field metadata, and every file carries
the spec text, model, jaxmodel and jax versions and creation time.

Writer settings, measured on a 1M-row chunk of the default sweep (35 columns):
pyarrow's defaults (snappy, dictionary encoding tried on every column) took
0.69 s and 10.3 MB; zstd level 1 without dictionaries 0.75 s and 10.4 MB;
snappy 0.29 s and 16.9 MB; LZ4 0.24 s and 9.1 MB.  So: LZ4 by default,
dictionary encoding only for the category columns (near-unique floats gain
nothing from it), statistics kept so that readers can skip row groups.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import queue
import socket
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jaxmodel.errors import SpecError
from jaxmodel.fields import InputField, OutputField

METADATA_FILE = "_jaxmodel.json"
LOCK_PREFIX = "_lock-p"
MERGE_LOCK = "_reduce-merge.lock"
_CATEGORY_INDEX = pa.int8()


@dataclass(frozen=True)
class Column:
    """One dataset column: its name, Arrow type, unit, meaning and categories."""

    name: str
    type: pa.DataType
    unit: str
    doc: str
    categories: tuple[str, ...] = ()

    def field(self) -> pa.Field:
        meta = {"unit": self.unit, "description": self.doc}
        if self.categories:
            meta["categories"] = ",".join(self.categories)
        return pa.field(self.name, self.type, nullable=True, metadata=meta)


def input_column(f: InputField, float_type: pa.DataType) -> Column:
    return Column(f.name, pa.int64() if f.integer else float_type, f.unit, f.doc)


def output_column(f: OutputField, float_type: pa.DataType) -> Column:
    if f.kind == "int":
        return Column(f.name, pa.int64(), f.unit, f.doc)
    if f.kind == "bool":
        return Column(f.name, pa.bool_(), f.unit, f.doc)
    if f.kind == "category":
        return Column(f.name, pa.dictionary(_CATEGORY_INDEX, pa.string()), f.unit, f.doc,
                      f.categories)
    return Column(f.name, float_type, f.unit, f.doc)


def float_column(name: str, float_type: pa.DataType, unit: str, doc: str) -> Column:
    return Column(name, float_type, unit, doc)


def to_table(columns: Sequence[Column], data: Mapping[str, np.ndarray],
             schema: pa.Schema) -> pa.Table:
    """Host arrays -> an Arrow table (zero-copy for numeric columns)."""
    arrays = []
    for c in columns:
        v = data[c.name]
        if c.categories:
            dictionary = pa.array(c.categories, type=pa.string())
            arrays.append(pa.DictionaryArray.from_arrays(
                pa.array(np.asarray(v, dtype=np.int8)), dictionary))
        else:
            arrays.append(pa.array(v, type=c.type))
    return pa.Table.from_arrays(arrays, schema=schema)


@dataclass
class Batch:
    """Whole chunks taken from a :class:`PartWriter`, to be written as one part.

    ``tables`` hold the kept rows (``rows`` in all); ``empty`` asks for an
    empty part (the schema only) when there are none.
    """

    chunks: list[int]
    tables: list[pa.Table]
    rows: int
    empty: bool = False


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DatasetDamaged(SpecError):
    """A file of the dataset cannot be read back as written (one line: which, what to do)."""


class Manifest:
    """The append-only record of one process's finished parts.

    Each line is ``{"parts": [...], "chunks": [[a, b], ...], "rows": n,
    "sweep": key}``: ``sweep`` is the identity of the computation (see
    :func:`jaxmodel.engine.sweep_key`), so that no metadata state can pair a
    spec with another sweep's rows.
    """

    def __init__(self, directory: Path, process: int, sweep: str | None = None):
        self.path = directory / f"_manifest-p{process:04d}.jsonl"
        self.sweep = sweep

    def append(self, record: Mapping[str, Any]) -> None:
        if self.sweep is not None:
            record = {**record, "sweep": self.sweep}
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def repair(self) -> None:
        """Cut a torn last line (a kill mid-append), so that the next record
        starts on a line of its own instead of being glued to the fragment."""
        try:
            with open(self.path, "rb+") as fh:
                data = fh.read()
                if data and not data.endswith(b"\n"):
                    fh.truncate(data.rfind(b"\n") + 1)
                    fh.flush()
                    os.fsync(fh.fileno())
        except FileNotFoundError:
            pass

    @staticmethod
    def read_all(directory: Path, num_chunks: int | None = None) -> list[dict]:
        """Every complete manifest line of every process, validated.

        A torn last line (no newline: a kill mid-write) is ignored; its part is
        then an orphan.  Any other line that is not a well-formed record raises
        :class:`DatasetDamaged` naming the file and line.  With ``num_chunks``,
        chunk runs must lie in ``[0, num_chunks)``.
        """
        records = []
        for path in sorted(directory.glob("_manifest-p*.jsonl")):
            try:
                data = path.read_bytes()
            except OSError as e:
                raise DatasetDamaged(f"output: cannot read {str(path)!r} ({e.strerror})") from None
            lines = data.split(b"\n")
            lines.pop()  # what follows the last newline: nothing, or a torn line
            for number, line in enumerate(lines, 1):
                record = _record(line)
                if not isinstance(record, str) and num_chunks is not None and any(
                        b > num_chunks for _, b in record["chunks"]):
                    record = f"a chunk beyond the sweep's {num_chunks:,}"
                if isinstance(record, str):
                    raise DatasetDamaged(
                        f"output: {str(path)!r} line {number} is damaged ({record}); delete "
                        "that line and rerun with --resume (its chunks are computed again), "
                        "or use --overwrite")
                records.append(record)
        return records


def _record(line: bytes) -> dict | str:
    """A validated manifest record, or what is wrong with it."""
    try:
        r = json.loads(line.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return "not JSON"
    if not isinstance(r, dict):
        return "not a record"
    parts, chunks = r.get("parts"), r.get("chunks")
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        return "'parts' is not a list of file names"
    if not isinstance(chunks, list) or not all(
            isinstance(c, list) and len(c) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in c)
            and 0 <= c[0] < c[1] for c in chunks):
        return "'chunks' is not a list of [first, end) runs"
    if not isinstance(r.get("sweep", ""), str):
        return "'sweep' is not a key"
    return r


def foreign_records(records: Sequence[Mapping[str, Any]], sweep: str, *,
                    keyless_ok: bool) -> list[Mapping[str, Any]]:
    """Records another computation than ``sweep`` wrote.  Records without a
    key (written before keys were) count as ours only if ``keyless_ok``."""
    return [r for r in records
            if not (r.get("sweep") == sweep or ("sweep" not in r and keyless_ok))]


def done_chunks(records: Sequence[Mapping[str, Any]]) -> set[int]:
    done: set[int] = set()
    for r in records:
        for a, b in r["chunks"]:
            done.update(range(a, b))
    return done


def recorded_parts(records: Sequence[Mapping[str, Any]]) -> set[str]:
    return {p for r in records for p in r["parts"]}


class FileLock:
    """An advisory lock (``fcntl.flock``) on a file of the dataset, held while a
    run writes (one per process slot, ``_lock-pNNNN``) or merges.  The OS
    releases it when the holder exits or dies, so a ``kill -9`` leaves no stale
    lock.  The file records the holder's pid, host and start time for messages.
    """

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None

    def try_acquire(self) -> bool:
        """Take the lock if no live process holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EACCES):
                return False
            raise
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}).encode())
        self.fd = fd
        return True

    def holder(self) -> str:
        """Who holds the lock, in words."""
        try:
            info = json.loads(self.path.read_text())
            return f"pid {info['pid']} on {info['host']}, started {info['started']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "holder unknown"

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None


def slot_lock(directory: Path, process: int) -> FileLock:
    """The lock of process slot ``process`` of a dataset."""
    return FileLock(directory / f"{LOCK_PREFIX}{process:04d}")


def locked_slots(directory: Path) -> list[int]:
    """Slot numbers that have a lock file (held or not)."""
    out = []
    for path in directory.glob(f"{LOCK_PREFIX}*"):
        digits = path.name[len(LOCK_PREFIX):]
        if digits.isdigit():
            out.append(int(digits))
    return sorted(out)


def check_output_path(directory: Path, what: str = "output") -> None:
    """Refuse a directory name the file system cannot hold, before anything is
    created: a name that is not encodable, or a component too long."""
    text = str(directory)
    try:
        raw = os.fsencode(text)
        text.encode("utf-8")  # pyarrow opens files by UTF-8 names
    except UnicodeEncodeError:
        raise SpecError(f"{what}: {text!r} is not a valid UTF-8 name (pyarrow writes only "
                        "those); choose another directory name") from None
    longest = 255
    try:
        existing = next((p for p in [directory, *directory.parents] if p.exists()), Path("."))
        longest = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        pass
    for part in directory.parts:
        if len(os.fsencode(part)) > longest:
            raise SpecError(f"{what}: the name {part[:40]!r}... is {len(os.fsencode(part))} "
                            f"bytes; allowed: at most {longest} bytes per name")
    if len(raw) > 3000:
        raise SpecError(f"{what}: the path is {len(raw)} bytes long; allowed: at most 3000")


def dataset_files(directory: Path) -> Iterator[Path]:
    """The files of a dataset's own area: its top level and its hive partition
    directories (``col=value``, recursively).  Nothing else below it, such as
    another dataset in a subdirectory, is ever read, cleaned or deleted."""
    for path in directory.iterdir():
        if path.is_dir():
            if "=" in path.name:
                yield from dataset_files(path)
        elif path.is_file():
            yield path


def is_dataset_file(path: Path) -> bool:
    """A file a jaxmodel dataset writes (by its name)."""
    name = path.name
    return (
        name == METADATA_FILE
        or name.startswith("_manifest-p")
        or (name.startswith("part-p") and name.endswith(".parquet"))
        or (name.startswith(".part-p") and name.endswith(".tmp"))
        or name.startswith("_reduce-")
        or name.startswith(LOCK_PREFIX)
        or name == MERGE_LOCK
        or (name.startswith(f".{METADATA_FILE}") and name.endswith(".tmp"))
    )


def part_files(directory: Path) -> list[Path]:
    return sorted(p for p in dataset_files(directory)
                  if p.name.startswith("part-p") and p.name.endswith(".parquet"))


def clean_orphans(directory: Path, processes: Sequence[int]) -> int:
    """Delete temporary files and unrecorded parts of ``processes``; the count."""
    recorded = recorded_parts(Manifest.read_all(directory))
    prefixes = tuple(f"part-p{p:04d}-" for p in processes)
    removed = 0
    for path in list(dataset_files(directory)):
        name = path.name
        rel = path.relative_to(directory).as_posix()
        tmp = name.startswith(".part-p") and name.endswith(".tmp")
        stale = name.startswith(prefixes) and name.endswith(".parquet") and rel not in recorded
        if (tmp and name[1:].startswith(prefixes)) or stale:
            path.unlink()
            removed += 1
    return removed


def chunk_runs(chunks: Iterable[int]) -> list[list[int]]:
    """Sorted chunk numbers as half-open ``[a, b)`` runs."""
    runs: list[list[int]] = []
    for c in sorted(chunks):
        if runs and runs[-1][1] == c:
            runs[-1][1] = c + 1
        else:
            runs.append([c, c + 1])
    return runs


class PartWriter:
    """Accumulates whole chunks into part files of one process.

    Call :meth:`add` per chunk (in any order), :meth:`close` at the end.  A
    part is closed once it holds ``rows_per_file`` rows or more.  (A
    :class:`WriterPool` instead takes whole parts with :meth:`buffer` and
    :meth:`take` and writes them on its threads with :meth:`write`.)

    ``constant`` names columns that hold one value for the whole sweep (inputs
    fixed by ``[base]`` or a model default): they are dictionary-encoded, so
    each costs a few bytes per row group instead of a value per row.
    """

    def __init__(self, directory: Path, process: int, columns: Sequence[Column],
                 *, file_metadata: Mapping[str, str], rows_per_file: int,
                 row_group_size: int, compression: str, partition_by: Sequence[str] = (),
                 sweep: str | None = None, constant: Collection[str] = ()):
        self.directory = directory
        self.process = process
        self.columns = list(columns)
        self.partition_by = list(partition_by)
        stored = [c for c in self.columns if c.name not in self.partition_by]
        self.stored = stored
        self.schema = pa.schema([c.field() for c in stored],
                                metadata={k.encode(): v.encode() for k, v in file_metadata.items()})
        self.full_schema = pa.schema([c.field() for c in self.columns])
        self.rows_per_file = rows_per_file
        self.row_group_size = row_group_size
        self.compression = None if compression == "none" else compression
        self.manifest = Manifest(directory, process, sweep)
        self.dictionary = [c.name for c in stored if c.categories or c.name in constant]
        self._chunks: list[int] = []
        self._tables: list[pa.Table] = []
        self._rows = 0
        self._parts_taken = 0
        self._lock = threading.Lock()
        self.rows_written = 0
        self.bytes_written = 0
        self.parts_written = 0

    def add(self, chunk: int, data: Mapping[str, np.ndarray], rows: int) -> None:
        if self.buffer(chunk, data, rows):
            self.flush()

    def buffer(self, chunk: int, data: Mapping[str, np.ndarray], rows: int) -> bool:
        """Buffer one chunk's rows; whether the buffered part is now full."""
        self._chunks.append(chunk)
        if rows:
            self._tables.append(to_table(self.columns, data, self.full_schema))
            self._rows += rows
        return self._rows >= self.rows_per_file

    def take(self, keep_schema: bool = False) -> Batch | None:
        """What is buffered, as one part to write (``None`` if nothing), and an
        empty buffer.  Which chunks make a part depends only on the order of
        the chunks, never on how many threads write the parts.

        With ``keep_schema`` (the last part), a writer that has taken no part
        with rows takes an empty one, so that a dataset whose filter kept
        nothing still opens with its schema in pyarrow, DuckDB and Polars.
        """
        if not self._chunks:
            return None
        empty = keep_schema and self._parts_taken == 0
        batch = Batch(self._chunks, self._tables, self._rows, empty)
        if self._rows or empty:
            self._parts_taken += 1
        self._chunks, self._tables, self._rows = [], [], 0
        return batch

    def flush(self, keep_schema: bool = False) -> None:
        """Write what is buffered as part file(s), then record it."""
        batch = self.take(keep_schema)
        if batch is not None:
            self.write(batch)

    def write(self, batch: Batch) -> None:
        """Write one part (several files with ``partition_by``), then record it.

        Safe to call from several threads at once: each part has its own
        files, and the manifest line and the counters are updated under a lock.
        """
        first = min(batch.chunks)
        parts: list[str] = []
        nbytes = 0
        if batch.rows or batch.empty:
            table = (pa.concat_tables(batch.tables) if batch.tables
                     else self.full_schema.empty_table())
            # An empty dataset gets one empty part at its top level.
            groups = self._partitions(table) if batch.rows else [("", table)]
            tmp_final = []
            for subdir, sub in groups:
                name = f"part-p{self.process:04d}-c{first:012d}.parquet"
                final = self.directory / subdir / name if subdir else self.directory / name
                final.parent.mkdir(parents=True, exist_ok=True)
                tmp = final.with_name("." + name + ".tmp")
                self._write(tmp, sub)
                tmp_final.append((tmp, final))
            for tmp, final in tmp_final:
                os.replace(tmp, final)
                nbytes += final.stat().st_size
                parts.append(final.relative_to(self.directory).as_posix())
            for parent in {f.parent for _, f in tmp_final}:
                _fsync_dir(parent)
        with self._lock:
            self.manifest.append({"parts": parts, "chunks": chunk_runs(batch.chunks),
                                  "rows": batch.rows})
            self.rows_written += batch.rows
            self.bytes_written += nbytes
            self.parts_written += len(parts)

    def _partitions(self, table: pa.Table) -> list[tuple[str, pa.Table]]:
        if not self.partition_by:
            return [("", table)]
        keys = table.select(self.partition_by)
        uniq = keys.group_by(self.partition_by).aggregate([]).to_pylist()
        out = []
        for key in uniq:
            mask = None
            for col, value in key.items():
                cond = pc.equal(table[col], pa.scalar(value, type=table[col].type))
                mask = cond if mask is None else pc.and_(mask, cond)
            sub = table.filter(mask).drop_columns(self.partition_by)
            subdir = "/".join(f"{col}={_hive(value)}" for col, value in key.items())
            out.append((subdir, sub))
        return out

    def _write(self, path: Path, table: pa.Table) -> None:
        table = table.select(self.schema.names).cast(self.schema)
        with pq.ParquetWriter(path, self.schema, compression=self.compression,
                              compression_level=1 if self.compression == "zstd" else None,
                              use_dictionary=self.dictionary or False) as w:
            w.write_table(table, row_group_size=self.row_group_size)
        with open(path, "rb+") as fh:
            os.fsync(fh.fileno())

    def close(self) -> None:
        self.flush(keep_schema=True)


def _hive(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return repr(value)
    return str(value)


class WriterPool:
    """Writes a :class:`PartWriter`'s parts on ``threads`` threads at once.

    The caller's thread buffers chunks (:meth:`put`, in chunk order) into
    parts exactly as one writer would, and hands each full part to the pool;
    a free thread encodes, writes and records it (pyarrow releases the GIL
    while encoding and compressing, so the threads run on separate cores).
    So the parts, their rows and their manifest lines do not depend on the
    number of threads; only the order of the manifest lines does.

    ``put`` blocks while every thread is busy with a part, so at most
    ``threads + 1`` parts are in memory however large the sweep.  An exception
    on a writer thread is re-raised on the next ``put`` or on ``close``; the
    parts already recorded stay valid, and ``--resume`` redoes the others.
    """

    _STOP = object()

    def __init__(self, writer: PartWriter, threads: int = 1):
        if threads < 1:
            raise ValueError(f"threads: got {threads}; allowed: 1 or more")
        self.writer = writer
        self._queue: queue.Queue = queue.Queue()
        self._free = threading.Semaphore(threads)
        self._error: BaseException | None = None
        self._threads = [threading.Thread(target=self._run, name=f"jaxmodel-writer-{i}",
                                          daemon=True) for i in range(threads)]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is self._STOP:
                return
            try:
                if self._error is None:
                    self.writer.write(batch)
            except BaseException as e:  # re-raised on the caller's thread
                self._error = e
            finally:
                self._free.release()

    def _submit(self, batch: Batch | None) -> None:
        if batch is None:
            return
        self._free.acquire()
        self._queue.put(batch)

    def put(self, chunk: int, data: Mapping[str, np.ndarray], rows: int) -> None:
        if self._error is not None:
            raise self._error
        if self.writer.buffer(chunk, data, rows):
            self._submit(self.writer.take())

    def close(self) -> None:
        """Write the last part, wait for every thread, re-raise any writer error."""
        try:
            if self._error is None:
                self._submit(self.writer.take(keep_schema=True))
        finally:
            for _ in self._threads:
                self._queue.put(self._STOP)
            for t in self._threads:
                t.join()
        if self._error is not None:
            raise self._error
