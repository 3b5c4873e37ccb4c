"""The Parquet sink: a dataset's part files, encoded and written in the background.

The directory layout, the file names, manifests, locks and what makes a
dataset safe to resume live in :mod:`jaxmodel.dataset`; this module turns
chunks of host rows into part files under the names made there (a hidden
temporary name, fsync, rename, then a manifest line).

Schema: integers int64, floats float32 (float64 with x64), booleans, category
columns (``bottleneck``, ``regime``) dictionary-encoded strings; never null
(Parquet REQUIRED: NaN marks an invalid layout's metrics); each field carries
its unit and meaning as field metadata, and every file carries the spec text,
model, jaxmodel and jax versions and creation time.

Writer settings (:func:`parquet_options`, the one place they are chosen),
measured on a 1M-row chunk of the default sweep (35 columns): pyarrow's
defaults (snappy, dictionary encoding tried on every column) took 0.69 s and
10.3 MB; zstd level 1 without dictionaries 0.75 s and 10.4 MB; snappy 0.29 s
and 16.9 MB; LZ4 0.24 s and 9.1 MB.  So: LZ4 by default, dictionary encoding
only for the category columns and the constants (near-unique floats gain
nothing from it), statistics kept so that readers can skip row groups.  Two
more choices, measured on a 1M-row part of the 24M-row grid (33 columns), best
of 5 (2026-12-01): ``config_id`` (ascending ids) written DELTA_BINARY_PACKED
took 12 ms and 0.01 B/row against PLAIN's 25 ms and 4.0 B/row; and the
category columns' min/max statistics (strings, which no reader prunes by)
cost 16 ms of each one's 27 ms.  These two: 0.32 -> 0.25 s and 11.3 -> 7.3
B/row for the whole part; with the REQUIRED columns (:meth:`Column.field`)
0.16 s and 8.3 B/row.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# The dataset's files are named in jaxmodel.dataset; these names stay
# importable from here for callers written before it existed.
from jaxmodel.dataset import (  # noqa: F401
    LOCK_PREFIX,
    MERGE_LOCK,
    METADATA_FILE,
    DatasetDamaged,
    FileLock,
    Manifest,
    check_output_path,
    chunk_runs,
    clean_orphans,
    dataset_files,
    done_chunks,
    foreign_records,
    is_dataset_file,
    locked_slots,
    part_files,
    part_name,
    recorded_parts,
    slot_lock,
    temporary_name,
)
from jaxmodel.fields import InputField, OutputField
from jaxmodel.reduce import CONFIG_ID

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
        """The Arrow field, declared non-nullable: a dataset's columns come from
        numpy arrays and never hold a null (NaN marks an invalid layout's
        metrics).  Parquet then stores them REQUIRED, without the definition
        level of every value, which took a third of the encoder's time (a
        1M-row part of the 24M-row grid: 0.24 -> 0.16 s, best of 5).  Parts
        written before, which declare them nullable, read together with new
        ones in pyarrow and DuckDB."""
        meta = {"unit": self.unit, "description": self.doc}
        if self.categories:
            meta["categories"] = ",".join(self.categories)
        return pa.field(self.name, self.type, nullable=False, metadata=meta)


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


def parquet_options(columns: Sequence[Column], constant: Collection[str] = (),
                    compression: str = "lz4") -> dict[str, Any]:
    """Keyword arguments for ``pq.ParquetWriter`` / ``pq.write_table``: how a
    dataset's part is encoded (see the module's notes for the measurements).

    Dictionary encoding for the category columns and the ``constant`` ones;
    DELTA_BINARY_PACKED for the configuration id; statistics for every column
    but the categories."""
    codec = None if compression == "none" else compression
    names = [c.name for c in columns]
    categories = {c.name for c in columns if c.categories}
    options: dict[str, Any] = {
        "compression": codec,
        "compression_level": 1 if codec == "zstd" else None,
        "use_dictionary": [n for n in names if n in categories or n in constant] or False,
        "write_statistics": [n for n in names if n not in categories] or False,
    }
    if CONFIG_ID in names and CONFIG_ID not in constant:
        options["column_encoding"] = {CONFIG_ID: "DELTA_BINARY_PACKED"}
    return options


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
        self.manifest = Manifest(directory, process, sweep)
        self.options = parquet_options(stored, constant, compression)
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

    def write_whole(self, chunks: Sequence[int], data: Mapping[str, np.ndarray],
                    rows: int) -> None:
        """Write ``rows`` rows covering ``chunks`` as this writer's one part (the
        schema only when there are none), and record it: the reduced rows of
        a ``[reduce]`` sweep, which stand for every chunk at once."""
        if not chunks:
            return
        tables = [to_table(self.columns, data, self.full_schema)] if rows else []
        self.write(Batch(list(chunks), tables, rows, empty=True))

    def write(self, batch: Batch) -> None:
        """Write one part (several files with ``partition_by``), then record it.

        Safe to call from several threads at once: each part has its own
        files, and the manifest line and the counters are updated under a lock.
        """
        first = min(batch.chunks)
        parts: list[str] = []
        sizes: list[int] = []
        if batch.rows or batch.empty:
            table = (pa.concat_tables(batch.tables) if batch.tables
                     else self.full_schema.empty_table())
            # An empty dataset gets one empty part at its top level.
            groups = self._partitions(table) if batch.rows else [("", table)]
            tmp_final = []
            for subdir, sub in groups:
                name = part_name(self.process, first)
                final = self.directory / subdir / name if subdir else self.directory / name
                final.parent.mkdir(parents=True, exist_ok=True)
                tmp = final.with_name(temporary_name(name))
                self._write(tmp, sub)
                tmp_final.append((tmp, final))
            for tmp, final in tmp_final:
                os.replace(tmp, final)
                sizes.append(final.stat().st_size)
                parts.append(final.relative_to(self.directory).as_posix())
            for parent in {f.parent for _, f in tmp_final}:
                _fsync_dir(parent)
        with self._lock:
            self.manifest.append({"parts": parts, "sizes": sizes,
                                  "chunks": chunk_runs(batch.chunks), "rows": batch.rows})
            self.rows_written += batch.rows
            self.bytes_written += sum(sizes)
            self.parts_written += len(parts)

    def _partitions(self, table: pa.Table) -> list[tuple[str, pa.Table]]:
        if not self.partition_by:
            return [("", table)]
        keys = table.select(self.partition_by)
        # Arrow's hash aggregation may return the groups in any order (it
        # runs on several threads); the manifest lists a part's files in the
        # order of their partition values, so it never depends on threads.
        uniq = sorted(keys.group_by(self.partition_by).aggregate([]).to_pylist(),
                      key=lambda key: [(value is None, value) for value in key.values()])
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
        with pq.ParquetWriter(path, self.schema, **self.options) as w:
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
