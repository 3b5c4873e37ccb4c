"""Lowered programs kept on disk, so that a warm command neither traces nor lowers.

jax's persistent cache (:mod:`jaxmodel.compile_cache`) keeps XLA's compiled
code, but it is keyed by the lowered program, so every process still traces
the model and lowers it to StableHLO before it can look: a third of a warm
``jaxmodel eval --model refined`` and two thirds of a warm ``sensitivity``
(bench/README.md, issue 26).  This module keeps the lowered program itself
(``jax.export``'s serialized ``Exported``) and calls it, which jax lowers in a
fraction of the time and whose XLA compile hits the persistent cache as
before: a warm ``sensitivity`` took 42.9 s instead of 151.9 s.  Its users:
``eval``/``validate`` (:func:`jaxmodel.api.batched`), ``sensitivity``, ``solve``
and the reduce step of a search over a candidate table (``best``, ``plan``;
:meth:`jaxmodel.program.Plan.program_key`).  (On the CPU,
jax's lowering of such a call first loads jaxlib's LAPACK bindings, which
import SciPy, about a second.)

Safe by construction: an entry is found only under a key made of everything
that shapes the program (the program's name and static arguments, the
bytes of every file of the installed jaxmodel package, jax's, jaxlib's and
numpy's versions, Python's, the backend and device kind, the input shapes and
dtypes, the XLA options, jax's numeric settings), so a change to any of them
misses.  An entry stores its full key and a SHA-256 of its program; one that
does not match, does not deserialize, or takes other inputs is ignored (and
rewritten).  Entries are written to a temporary file and renamed into place,
so a reader never sees half of one.

Where: ``exported/`` in the compile cache's directory (``jaxmodel.compile_cache``);
off with it (``JAXMODEL_COMPILE_CACHE=0``), or on its own with
``JAXMODEL_PROGRAM_CACHE=0``.  Like the compile cache, it is turned on by the
command line's entry point only; the Python API traces as before unless a
caller turns it on (:func:`enable_program_cache`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import secrets
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jaxmodel.deferred import jax

ENV = "JAXMODEL_PROGRAM_CACHE"
_OFF = {"", "0", "off", "false", "no"}
SUBDIR = "exported"
FORMAT = "jaxmodel-program/1"
MAGIC = b"JAXMODEL-PROGRAM\n"
SUFFIX = ".jaxprog"

_directory: Path | None = None


def enable_program_cache(compile_cache: Path | None, environ=None) -> Path | None:
    """Keep lowered programs in ``compile_cache / "exported"`` (None: off), unless
    ``JAXMODEL_PROGRAM_CACHE`` turns this layer off.  Returns the directory used."""
    global _directory
    environ = os.environ if environ is None else environ
    off = environ.get(ENV, "1").strip().lower() in _OFF
    _directory = None if compile_cache is None or off else Path(compile_cache) / SUBDIR
    return _directory


def program_dir() -> Path | None:
    """The directory lowered programs are kept in, or None (off)."""
    return _directory


@functools.cache
def source_digest() -> str:
    """:func:`digest_of` the jaxmodel package."""
    return digest_of(Path(__file__).resolve().parent)


def digest_of(root: Path) -> str:
    """SHA-256 of every file under ``root`` (paths and bytes), bytecode aside."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _environment() -> dict[str, Any]:
    """What, besides the program's own key, shapes a lowered program here."""
    import jaxlib
    import numpy as np

    device = jax.devices()[0]
    return {
        "format": FORMAT,
        "source": source_digest(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": np.__version__,  # constants the model computes while traced
        "python": platform.python_version(),
        "backend": jax.default_backend(),
        "device_kind": device.device_kind,
        # float64 on only inside jaxmodel.precision.computing()
        "x64": str(jax.dtypes.canonicalize_dtype("float64")),
        "config": {name: str(getattr(jax.config, name)) for name in (
            "jax_default_matmul_precision", "jax_numpy_rank_promotion",
            "jax_numpy_dtype_promotion", "jax_enable_x64")},
    }


def _signature(args: Sequence[Any]) -> list[list[Any]]:
    return [[list(a.shape), str(a.dtype)] for a in args]


class CachedProgram:
    """``jax.jit(fn)`` of flat arrays to a flat tuple of arrays, its lowered form
    kept on disk while :func:`program_dir` is set.

    Args:
      name: what the program is, e.g. ``"api.batched"``.
      fn: ``fn(*arrays) -> tuple of arrays``; a pure function of ``key`` and its
        inputs (everything else it closes over comes from the jaxmodel package).
      key: JSON-able static arguments that, with the package, fix ``fn``; None:
        something else does (a caller's own model), so it is traced every time.
      compiler_options: ``jax.jit``'s XLA options (also part of the key).
    """

    def __init__(self, name: str, fn: Callable[..., tuple], key: Mapping[str, Any] | None,
                 compiler_options: Mapping[str, Any] | None = None):
        self.name = name
        self.key = None if key is None else dict(key)
        self.options = dict(compiler_options) if compiler_options else None
        self.jitted = jax.jit(fn, compiler_options=self.options)
        self._calls: dict[str, Callable] = {}

    def __call__(self, *args) -> tuple:
        directory = program_dir()
        if directory is None or self.key is None:
            return self.jitted(*args)
        key = json.dumps({"program": self.name, "key": self.key,
                          "options": {k: str(v) for k, v in sorted((self.options or {}).items())},
                          "inputs": _signature(args), **_environment()},
                         sort_keys=True)
        if key in self._calls:
            return self._calls[key](*args)
        try:
            program = self._load_or_export(directory, key, args)
            out = program(*args)
        except Exception:  # noqa: BLE001 - a program jax cannot export or call back:
            program = self.jitted  # traced as without the cache (a real error raises again)
            out = program(*args)
        self._calls[key] = program
        return out

    def _load_or_export(self, directory: Path, key: str, args) -> Callable:
        path = directory / (hashlib.sha256(key.encode()).hexdigest()[:40] + SUFFIX)
        exported = read_entry(path, key, args)
        if exported is None:
            specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
            blob = bytes(jax.export.export(self.jitted)(*specs).serialize())
            write_entry(path, key, blob)
            # Call the deserialized form, so that this process compiles the same
            # program as the next one and fills the persistent cache for it.
            exported = jax.export.deserialize(bytearray(blob))

        def call(*xs):
            return exported.call(*xs)

        # named as the program, as jax names its persistent cache's entries
        call.__name__ = call.__qualname__ = exported.fun_name.removeprefix("jit_")
        return jax.jit(call, compiler_options=self.options)


def write_entry(path: Path, key: str, blob: bytes) -> None:
    """Write an entry atomically (temporary file, then rename); a failure only
    costs the next process its trace."""
    key_bytes = key.encode()
    data = (MAGIC + hashlib.sha256(blob).digest() + len(key_bytes).to_bytes(8, "little")
            + key_bytes + blob)
    # a name of its own per writer (processes may write the same entry at once),
    # created with the umask's permissions, as jax's own entries
    tmp = path.with_name(f".tmp-{os.getpid()}-{secrets.token_hex(8)}{SUFFIX}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(tmp, "xb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError:
        return


def read_entry(path: Path, key: str, args: Sequence[Any]):
    """The ``Exported`` stored at ``path`` for ``key``, or None if missing, for
    another key, corrupt, or taking other inputs than ``args``."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head = len(MAGIC)
    if data[:head] != MAGIC or len(data) < head + 40:
        return None
    checksum = data[head:head + 32]
    size = int.from_bytes(data[head + 32:head + 40], "little")
    start = head + 40
    if data[start:start + size] != key.encode():
        return None
    blob = data[start + size:]
    if hashlib.sha256(blob).digest() != checksum:
        return None
    try:
        exported = jax.export.deserialize(bytearray(blob))
    except Exception:  # noqa: BLE001 - a damaged flatbuffer raises whatever it meets
        return None
    if _signature(exported.in_avals) != _signature(args) or exported.nr_devices != 1:
        return None
    return exported


__all__ = ["CachedProgram", "digest_of", "enable_program_cache", "program_dir",
           "source_digest"]
