"""jax's persistent compilation cache and a "compiling..." status, for the CLI.

Most of a short command's time is compiling (a refined ``eval`` spends seconds
in XLA for milliseconds of work), so every compiled program is kept on disk
and reused by the next process with the same program, jax and machine.

Where: ``$XDG_CACHE_HOME/jaxmodel/jax`` (``~/.cache/jaxmodel/jax`` when
``XDG_CACHE_HOME`` is unset).  ``JAXMODEL_COMPILE_CACHE=DIR`` puts it
elsewhere; ``JAXMODEL_COMPILE_CACHE=0`` (or ``off``, ``false``, ``no``, empty)
turns it off.  Deleting the directory is always safe.  Set at the entry point
(``jaxmodel.cli.main``), never on import: the Python API leaves jax's
configuration to the caller.  The entry point has not imported jax yet (a
command that stops at ``--help`` or a bad option never does), so the cache is
set through jax's environment variables, which jax reads when it is imported.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

from jaxmodel.program_cache import enable_program_cache

ENV = "JAXMODEL_COMPILE_CACHE"
_OFF = {"", "0", "off", "false", "no"}


def cache_dir(environ=None) -> Path | None:
    """The cache directory the environment asks for, or None when turned off."""
    environ = os.environ if environ is None else environ
    if ENV in environ:
        value = environ[ENV].strip()
        return None if value.lower() in _OFF else Path(value).expanduser()
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "jaxmodel" / "jax"


def enable_compile_cache(environ=None) -> Path | None:
    """Point jax's persistent compilation cache at :func:`cache_dir` (if on), and
    keep lowered programs beside it (:mod:`jaxmodel.program_cache`).

    Every program is cached, however short its compile (jax's default skips
    those under 1 s; a CLI command compiles several such).  An unusable
    directory only costs the speed-up: jax compiles as before.  Its warnings
    about an entry it could not write or read are silenced: a full disk is
    reported once, by the sweep's own one-line error, not also by jax; and
    since jax writes an entry in place, a full disk or a file size limit can
    leave one cut short, which the next run simply compiles and writes again.
    """
    import warnings

    path = cache_dir(environ)
    enable_program_cache(path, environ)
    if path is None:
        return None
    for action in ("writing", "reading"):
        warnings.filterwarnings("ignore", category=UserWarning,
                                message=f"Error {action} persistent compilation cache")
    settings = {"jax_compilation_cache_dir": str(path),
                "jax_persistent_cache_min_compile_time_secs": 0.0,
                "jax_persistent_cache_min_entry_size_bytes": 0}
    if "jax" in sys.modules:
        import jax

        for name, value in settings.items():
            jax.config.update(name, value)
    else:
        os.environ.update({name.upper(): str(value) for name, value in settings.items()})
    return path


# jax's monitoring events around one compile: lowering to MLIR ends right
# before the backend compile (or the persistent-cache lookup) starts.
_LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_COMPILED = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT = "/jax/compilation_cache/cache_hits"


class CompileStatus:
    """Writes ``compiling...`` to a terminal while XLA compiles, then erases it.

    Nothing is written when ``stream`` is not a terminal (pipes, files, CI),
    so machine-readable output stays clean.
    """

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.shown = False

    def on_duration(self, event: str, _secs: float, **_kw) -> None:
        if event == _LOWERED:
            self.show()
        elif event == _COMPILED:
            self.clear()

    def on_event(self, event: str, **_kw) -> None:
        if event == _CACHE_HIT:
            self.clear()

    def show(self) -> None:
        if not self.shown:
            self.stream.write("compiling...")
            self.stream.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False


def show_compile_status(stream: TextIO | None = None) -> CompileStatus | None:
    """Register a :class:`CompileStatus` on ``stream`` (stderr) if it is a terminal:
    now if jax is imported, else before the first computation
    (:func:`jaxmodel.precision.before_first_computation`), so that registering
    does not import jax."""
    stream = sys.stderr if stream is None else stream
    if not (hasattr(stream, "isatty") and stream.isatty()):
        return None
    status = CompileStatus(stream)

    def register() -> None:
        from jax import monitoring

        monitoring.register_event_duration_secs_listener(status.on_duration)
        monitoring.register_event_listener(status.on_event)

    if "jax" in sys.modules:
        register()
    else:
        from jaxmodel.precision import before_first_computation

        before_first_computation(register)
    return status
