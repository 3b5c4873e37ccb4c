"""Precision, chosen at entry points (CLI, API calls, conftest), never on import.

jaxmodel computes floats in float32 (default) or float64 (``x64=True``) and
integers in int64 in both modes: exact token counts beyond 2**31 and sweep
indices beyond 2**31 need 64-bit integers even when the floats are 32-bit.
Every entry point therefore traces and runs inside :func:`computing`, which
turns jax's 64-bit types on for that block only, and casts inputs to the
float dtype it asks for; the model keeps that dtype throughout (Python
constants are weakly typed in jax, so they do not promote float32 to float64).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import numpy as np

from jaxmodel.deferred import jax


def float_dtype(x64: bool) -> np.dtype:
    """The float dtype of a computation: float64 if ``x64`` else float32."""
    return np.dtype(np.float64 if x64 else np.float32)


# Set-up that waits for the first computation (the command line's "compiling..."
# status), so that a command that stops before computing never imports jax.
_BEFORE_FIRST: list[Callable[[], None]] = []


def before_first_computation(setup: Callable[[], None]) -> None:
    """Run ``setup`` when :func:`computing` is first entered (jax imported by then)."""
    _BEFORE_FIRST.append(setup)


@contextlib.contextmanager
def computing() -> Iterator[None]:
    """Trace and run jax code with 64-bit types available (see module doc)."""
    while _BEFORE_FIRST:
        _BEFORE_FIRST.pop(0)()
    with jax.enable_x64(True):
        yield
