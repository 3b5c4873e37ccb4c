"""A dataset directory on disk: the only code that knows its file names.

Layout of a dataset directory::

    _jaxmodel.json                 what the sweep is (spec, model, versions, size)
    _manifest-p0000.jsonl          one line per finished part of process 0
    _lock-p0000                    locked (flock) while a run writes process 0
    _reduce-p0000.npz              process 0's reducer state (a [reduce] sweep)
    _reduce-merge.lock             locked while a process merges those states
    part-p0000-c000000000000.parquet
    ...                            (under col=value/ directories with partition_by)

Nothing is lost and nothing half-written looks complete:

* A part is written under a hidden temporary name (``.part-...parquet.tmp``,
  which pyarrow, DuckDB and Polars skip), flushed, fsynced and renamed; only
  then is a manifest line appended (and fsynced) naming the part and the
  chunks it holds.  A part covers whole chunks.  (The parts themselves are
  encoded and written by :mod:`jaxmodel.sink`, under names made here.)
* On ``--resume`` the chunks named in the manifests are done; temporary files
  and parts missing from the manifests (a kill between rename and manifest
  line) are deleted, and the remaining chunks are computed again.
* Every manifest line, part and reducer state names the computation it
  belongs to (the ``sweep`` key, :func:`sweep_key`; ``jaxmodel.sweep`` in file
  metadata), so a missing or replaced ``_jaxmodel.json`` cannot pair a spec
  with another sweep's rows.  What is read back is validated: a damaged file
  is a one-line error naming it.
* A run holds an advisory lock (``_lock-pNNNN``, ``fcntl.flock``) on each
  process slot it writes; the OS releases it when the holder dies.
* Reducer states are checkpointed atomically (temporary file + rename).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxmodel.errors import JaxmodelError, SpecError

METADATA_FILE = "_jaxmodel.json"
LOCK_PREFIX = "_lock-p"
MERGE_LOCK = "_reduce-merge.lock"
SPLIT_LOCK = "_lock-split"  # held shared by every live run, exclusively to change the split
DECIDE_LOCK = "_lock-decide"  # held for the moment a run checks and records the split
MANIFEST_PREFIX = "_manifest-p"
PART_PREFIX = "part-p"
CHECKPOINT_PREFIX = "_reduce-p"
MAX_PROCESSES = 10_000  # process numbers have four digits in file names


def check_processes(processes: int, what: str = "processes") -> None:
    """Refuse a split into more processes than file names number (a process
    number with five digits would be read back as another process's)."""
    if processes > MAX_PROCESSES:
        raise SpecError(f"{what}: got {processes:,} processes; allowed: at most "
                        f"{MAX_PROCESSES:,}")


def metadata_path(directory: Path) -> Path:
    """Where a dataset's metadata (``_jaxmodel.json``) lives."""
    return Path(directory) / METADATA_FILE


def part_name(process: int, first_chunk: int) -> str:
    """The file name of process ``process``'s part that starts at ``first_chunk``."""
    return f"{PART_PREFIX}{process:04d}-c{first_chunk:012d}.parquet"


def temporary_name(name: str) -> str:
    """The hidden name a file is written under before it is renamed to ``name``."""
    return f".{name}.tmp"


def stale_slots(process: int, processes: int) -> list[int]:
    """The process slots whose leftovers a run's process cleans: its own, and for
    process 0 those of process numbers the run does not have."""
    return [process] + (list(range(processes, MAX_PROCESSES)) if process == 0 else [])


class DatasetExists(SpecError):
    """The output directory already holds a dataset (and no --resume/--overwrite)."""


class WriteFailed(JaxmodelError):
    """Writing the dataset failed (a full disk, a file size limit, an I/O error).

    Every chunk recorded before the failure is safe; ``--resume`` continues
    once the cause is removed.  The message is one line.
    """


class DatasetDamaged(SpecError):
    """A file of the dataset cannot be read back as written (one line: which, what to do)."""


class Manifest:
    """The append-only record of one process's finished parts.

    Each line is ``{"parts": [...], "sizes": [...], "chunks": [[a, b], ...],
    "rows": n, "sweep": key}``: ``sweep`` is the identity of the computation
    (see :func:`sweep_key`), so that no metadata state can pair a spec with
    another sweep's rows; ``sizes`` are the parts' bytes as written, so that a
    part deleted or truncated since is found (:func:`missing_parts`).
    """

    def __init__(self, directory: Path, process: int, sweep: str | None = None):
        self.path = directory / f"{MANIFEST_PREFIX}{process:04d}.jsonl"
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
        for path in sorted(directory.glob(f"{MANIFEST_PREFIX}*.jsonl")):
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
    if not isinstance(parts, list) or not all(
            isinstance(p, str) and p and not p.startswith("/") and ".." not in p.split("/")
            for p in parts):
        return "'parts' is not a list of file names"
    sizes = r.get("sizes", [0] * len(parts))
    if not isinstance(sizes, list) or len(sizes) != len(parts) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sizes):
        return "'sizes' is not a list of byte counts, one per part"
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


def missing_parts(directory: Path, record: Mapping[str, Any]) -> list[str]:
    """The parts of a manifest record that are gone, or no longer have the size
    they were written with (records written before sizes were: gone only)."""
    sizes = record.get("sizes", [None] * len(record["parts"]))
    out = []
    for part, size in zip(record["parts"], sizes, strict=True):
        try:
            intact = size is None or (directory / part).stat().st_size == size
        except OSError:
            intact = False
        if not intact:
            out.append(part)
    return out


def intact_records(directory: Path, records: Sequence[Mapping[str, Any]]) -> list[Mapping]:
    """The records whose every part is on disk as written: only their chunks are done."""
    return [r for r in records if not missing_parts(directory, r)]


def drop_damaged_records(directory: Path, processes: Sequence[int]) -> list[str]:
    """Forget the parts of ``processes`` that were deleted or truncated since
    they were recorded: their manifest lines are removed (the file rewritten
    atomically), their other files deleted, so their chunks are written again.
    The parts found missing or damaged, by name.  Call it only holding the
    slot locks of ``processes`` (no other run appends to their manifests)."""
    named = []
    for process in processes:
        path = Manifest(directory, process).path
        if not path.exists():
            continue
        lines = path.read_bytes().split(b"\n")
        lines.pop()
        keep = []
        for line in lines:
            record = _record(line)
            lost = [] if isinstance(record, str) else missing_parts(directory, record)
            if not lost:
                keep.append(line)
                continue
            named += lost
            for part in record["parts"]:
                (directory / part).unlink(missing_ok=True)
        if len(keep) < len(lines):
            tmp = path.with_name(temporary_name(path.name))
            with open(tmp, "wb") as fh:
                fh.write(b"".join(line + b"\n" for line in keep))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
    return named


def check_no_overlap(directory: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """Refuse a dataset in which two records hold the same chunk: its rows are
    written twice (runs of different splits wrote it at once)."""
    runs = sorted({(a, b, tuple(r["parts"])) for r in records for a, b in r["chunks"]})
    for (_, b0, p0), (a1, b1, p1) in zip(runs, runs[1:], strict=False):
        if a1 < b0:
            raise DatasetDamaged(
                f"output: {str(directory)!r} holds chunks {a1:,} to {min(b0, b1) - 1:,} twice "
                f"({', '.join(p0) or 'no rows'} and {', '.join(p1) or 'no rows'}): runs of "
                "different splits wrote it at once; rerun with --overwrite")


class FileLock:
    """An advisory lock (``fcntl.flock``) on a file of the dataset, held while a
    run writes (one per process slot, ``_lock-pNNNN``) or merges.  The OS
    releases it when the holder exits or dies, so a ``kill -9`` leaves no stale
    lock.  The file records the holder's pid, host and start time for messages.
    """

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None

    def try_acquire(self, shared: bool = False) -> bool:
        """Take the lock if no live process holds it (``shared``: if none holds
        it exclusively; shared holders are not recorded in the file)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EACCES):
                return False
            raise
        self.fd = fd
        if not shared:
            self._record_holder()
        return True

    def convert(self, shared: bool) -> bool:
        """Turn a held lock shared or exclusive, if no other holder prevents it.
        Not atomic (flock drops the old lock first): call it only under a lock
        that every other change of this lock also holds (:func:`_deciding`)."""
        try:
            fcntl.flock(self.fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EACCES):
                return False
            raise
        return True

    def acquire(self, seconds: float) -> bool:
        """Take the lock exclusively, waiting up to ``seconds`` for its holder."""
        deadline = time.monotonic() + seconds
        while not self.try_acquire():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def _record_holder(self) -> None:
        fd = self.fd
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}).encode())

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
    """A file a jaxmodel dataset writes (by its name), its temporaries included."""
    name = path.name
    return (
        name == METADATA_FILE
        or name.startswith(MANIFEST_PREFIX)
        or (name.startswith(PART_PREFIX) and name.endswith(".parquet"))
        or name.startswith(CHECKPOINT_PREFIX)
        or name.startswith(LOCK_PREFIX)
        or name in (MERGE_LOCK, SPLIT_LOCK, DECIDE_LOCK)
        or _temporary_of(name, (METADATA_FILE, PART_PREFIX, MANIFEST_PREFIX, CHECKPOINT_PREFIX))
    )


def _temporary_of(name: str, prefixes: tuple[str, ...]) -> bool:
    """Whether ``name`` is the temporary (``temporary_name``) of a dataset file whose
    name starts with one of ``prefixes`` (the metadata's carry a writer's suffix)."""
    return name.startswith(tuple("." + p for p in prefixes)) and name.endswith(".tmp")


def _clean_temporaries(directory: Path, processes: Sequence[int],
                      prefixes: tuple[str, ...]) -> int:
    """Delete the temporaries of ``processes``' files named with ``prefixes``; the count.

    A file is written under its temporary name and renamed (``temporary_name``);
    a kill in between leaves the temporary.  The caller holds what every writer
    of those files holds (their process slots, or the merge lock for the
    merger's), so any such temporary there now is a dead run's."""
    removed = 0
    for path in list(dataset_files(directory)):
        if _temporary_of(path.name, prefixes) and _process_of(path) in processes:
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def part_files(directory: Path) -> list[Path]:
    return sorted(p for p in dataset_files(directory)
                  if p.name.startswith(PART_PREFIX) and p.name.endswith(".parquet"))


def clean_orphans(directory: Path, processes: Sequence[int]) -> int:
    """Delete the temporary parts and manifests and the unrecorded parts of
    ``processes``; the count."""
    recorded = recorded_parts(intact_records(directory, Manifest.read_all(directory)))
    prefixes = tuple(f"{PART_PREFIX}{p:04d}-" for p in processes)
    removed = _clean_temporaries(directory, processes, (PART_PREFIX, MANIFEST_PREFIX))
    for path in list(dataset_files(directory)):
        name = path.name
        rel = path.relative_to(directory).as_posix()
        if name.startswith(prefixes) and name.endswith(".parquet") and rel not in recorded:
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



def file_metadata(meta: dict[str, Any]) -> dict[str, str]:
    keys = ("spec", "model", "jaxmodel_version", "jax_version", "created", "filter")
    out = {f"jaxmodel.{k}": "" if meta[k] is None else str(meta[k]) for k in keys}
    out["jaxmodel.sweep"] = sweep_key(meta)
    return out


def sweep_key(meta: dict[str, Any]) -> str:
    """Identity of the computation a dataset holds (spec, model, precision,
    chunk size): written into every manifest record, part and reducer state."""
    import hashlib

    identity = [meta["spec"], meta["model"], meta["x64"], meta["chunk_size"]]
    if "draws" in meta:  # how [sample] draws; a dataset of older draws is another sweep
        identity.append(meta["draws"])
    text = json.dumps(identity)
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


_OWNED_NAME = re.compile(
    "(?:" + "|".join(re.escape(p) for p in (PART_PREFIX, MANIFEST_PREFIX, CHECKPOINT_PREFIX))
    + r")(\d{4,})[-.]")


def _process_of(path: Path) -> int | None:
    """The process number in a part, manifest or checkpoint name, else None.

    The whole number up to the ``-`` or ``.`` that ends it: ``part-p12345-...``
    is process 12345, never process 1234."""
    m = _OWNED_NAME.match(path.name.lstrip("."))
    return int(m.group(1)) if m else None


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
        if path.name.startswith(MANIFEST_PREFIX):
            return 0
        return 2 if path.name == METADATA_FILE else 1

    for path in sorted(dataset_files(directory), key=order):
        if not is_dataset_file(path) or path.name.startswith(LOCK_PREFIX) or path.name in (
                SPLIT_LOCK, DECIDE_LOCK):
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
    check_processes(processes)
    meta = {**meta, "processes": processes}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        locks = _lock_slots(directory, process, processes)
    except OSError as e:
        raise SpecError(f"output: cannot write to {str(directory)!r} ({e.strerror})") from None
    try:
        with _deciding(directory):
            locks.append(_claim_split(directory, processes))
            _adopt(directory, meta, process=process, processes=processes, resume=resume,
                   overwrite=overwrite)
            _clean_metadata_temporaries(directory)
            _record_split(meta_path, processes)
    except OSError as e:
        for lock in locks:
            lock.release()
        raise SpecError(f"output: cannot write to {str(directory)!r} ({e.strerror})") from None
    except BaseException:
        for lock in locks:
            lock.release()
        raise
    return locks


@contextmanager
def _deciding(directory: Path) -> Iterator[None]:
    """Hold the dataset's decision lock while a run checks, claims and records
    the split: runs that start together take turns here (for milliseconds),
    so none of them can see the split between another's check and record."""
    lock = FileLock(directory / DECIDE_LOCK)
    if not lock.acquire(seconds=60.0):
        raise SpecError(f"output: {str(directory)!r} is being prepared by another run "
                        f"({lock.holder()}) for over a minute; stop it, then rerun")
    try:
        yield
    finally:
        lock.release()


def recorded_split(meta_path: Path) -> int | None:
    """How many processes the dataset's runs split it into (``--shard I/N``:
    N; a plain run: 1), as recorded; None when nothing readable records it."""
    try:
        split = read_metadata(meta_path).get("processes") if meta_path.exists() else None
    except DatasetDamaged:
        return None
    return split if isinstance(split, int) and not isinstance(split, bool) else None


def _split_words(n: int) -> str:
    return "a run without --shard" if n == 1 else f"runs split into {n} (--shard I/{n})"


def _claim_split(directory: Path, processes: int) -> FileLock:
    """The split lock, held shared while this run writes (under :func:`_deciding`).

    Every run into a dataset must split its chunks the same way, or two runs
    write the same chunks (a plain run and a shard, or ``--shard 0/2`` and
    ``--shard 1/3``: duplicated rows).  A run of the recorded split shares the
    lock with the others; a run of another split changes the split only when
    it can hold the lock alone, i.e. when no run is alive."""
    recorded = recorded_split(directory / METADATA_FILE)
    lock = FileLock(directory / SPLIT_LOCK)
    if recorded in (None, processes):
        if lock.try_acquire(shared=True):
            return lock
    elif lock.try_acquire() and lock.convert(shared=True):
        return lock  # no run is alive: this run's split replaces the recorded one
    lock.release()
    raise SpecError(
        f"output: {str(directory)!r} is being written by "
        f"{_split_words(recorded) if recorded else 'another run'}; "
        f"this run splits it into {processes}; wait for those runs to finish (or use "
        "the same split), then rerun")


def _clean_metadata_temporaries(directory: Path) -> None:
    """Delete what a run killed while writing the metadata left behind.

    Metadata is written only under :func:`_deciding`, which the caller holds:
    any ``._jaxmodel.json.*.tmp`` there now is a dead run's.  (A kill between
    ``os.link`` and the unlink that follows leaves one beside a complete
    metadata file.)"""
    for path in directory.glob(f".{METADATA_FILE}.*.tmp"):
        path.unlink(missing_ok=True)


def _record_split(meta_path: Path, processes: int) -> None:
    """Write the split into the metadata, if it records another."""
    meta = read_metadata(meta_path)
    if meta.get("processes") != processes:
        tmp = meta_path.with_name(f".{METADATA_FILE}.split.tmp")
        tmp.write_text(json.dumps({**meta, "processes": processes}, indent=1))
        os.replace(tmp, meta_path)


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
            remove_dataset(directory, stale_slots(process, processes))
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



def write_failed(directory: Path, e: OSError) -> WriteFailed:
    """The one-line error for an OS error while writing the dataset."""
    # pyarrow's writer raises OSError without errno, naming it in the text.
    found = re.search(r"\[errno (\d+)\]", str(e))
    code = e.errno if e.errno is not None else int(found.group(1)) if found else None
    text = (e.strerror or str(e) or type(e).__name__).splitlines()[0]
    why = "the disk is full" if code in (errno.ENOSPC, errno.EDQUOT) else text
    where = f" ({e.filename})" if e.filename else ""
    return WriteFailed(f"output: writing {str(directory)!r} failed: {why}{where}; "
                       "the chunks finished before it are kept")



def dataset_bytes(directory: Path) -> int:
    """Bytes of the dataset's part files."""
    return sum(p.stat().st_size for p in part_files(directory))


def dataset_rows(directory: Path) -> tuple[int, int]:
    """(rows, part files) of the whole dataset, from the parts' footers."""
    import pyarrow.parquet as pq

    parts = part_files(directory)
    return sum(pq.ParquetFile(p).metadata.num_rows for p in parts), len(parts)



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
    tmp = path.with_name(temporary_name(path.name))
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


def chunks_of(info: dict[str, Any]) -> set[int]:
    return {c for a, b in info["chunks"] for c in range(a, b)}


def checkpoint_path(directory: Path, process: int) -> Path:
    """Where process ``process`` checkpoints its reducer state."""
    return directory / f"{CHECKPOINT_PREFIX}{process:04d}.npz"



def checkpoint_files(directory: Path) -> list[Path]:
    """Every process's reducer state file in ``directory``."""
    return sorted(directory.glob(f"{CHECKPOINT_PREFIX}*.npz"))


def merge_lock(directory: Path) -> FileLock:
    """The lock held while a process merges the reducer states into the reduced part."""
    return FileLock(directory / MERGE_LOCK)


def final_states(directory: Path, key: str, num_chunks: int) -> list[tuple[dict, dict]] | None:
    """Every process's final ``(state, info)`` of sweep ``key`` in ``directory``,
    if together they cover every chunk; else None (a process is not done)."""
    found, covered = [], set()
    for path in checkpoint_files(directory):
        state, info = load_checkpoint(path, num_chunks)
        if info["sweep"] != key:
            continue  # another sweep's leftover: never merged
        if not info["complete"]:
            return None
        chunks = chunks_of(info)
        if chunks & covered:
            raise SpecError(
                f"reduce: the states in {str(directory)!r} overlap (chunks folded twice by "
                "runs with different splits at once); rerun with --overwrite")
        found.append((state, info))
        covered |= chunks
    if covered != set(range(num_chunks)):
        return None
    return found

