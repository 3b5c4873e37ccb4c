"""jax and jax.numpy, imported on first use.

The models, their fields and the shared physics only call jax when a model
is traced, but the command line builds its options and checks its inputs
from the same modules: importing jax there would cost ``jaxmodel --help``,
``jaxmodel presets`` and every one-line error about a second (issue 26).
These modules write ``from jaxmodel.deferred import jnp`` instead of
``import jax.numpy as jnp``; the first attribute looked up imports jax.

Inside :func:`on_host` the same names are NumPy instead, in this thread only:
a model written against ``jnp`` (and ``jax.lax.stop_gradient``) then runs as
plain NumPy arrays, with no trace and no compile, which is how one
configuration is evaluated for a person (``jaxmodel.api.evaluate_on_host``).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np

_HOST = threading.local()


class Deferred:
    """A module imported when one of its attributes is first looked up."""

    __slots__ = ("_name", "_module", "_host")

    def __init__(self, name: str, host: Any):
        self._name = name
        self._module: ModuleType | None = None
        self._host = host

    def __getattr__(self, attr: str) -> Any:
        if getattr(_HOST, "on", False):
            return getattr(self._host, attr)
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<deferred module {self._name!r}>"


# What a model may call of jax on the host: stop_gradient drops the tangent of
# jaxmodel.dual's forward mode (of a plain array, the identity).  Anything else
# is an AttributeError.
def _stop_gradient(v: Any) -> Any:
    from jaxmodel.dual import stop_gradient  # a Dual's value without its tangent

    return stop_gradient(v)


_HOST_JAX = SimpleNamespace(lax=SimpleNamespace(stop_gradient=_stop_gradient), numpy=np)

jax = Deferred("jax", _HOST_JAX)
jnp = Deferred("jax.numpy", np)


def hosted() -> bool:
    """Whether this thread is inside :func:`on_host` (``jnp`` is NumPy)."""
    return getattr(_HOST, "on", False)


@contextlib.contextmanager
def on_host() -> Iterator[None]:
    """``jnp`` and ``jax`` are NumPy in this block, in this thread (module doc);
    NumPy's floating-point warnings are off, as jax has none."""
    before = getattr(_HOST, "on", False)
    _HOST.on = True
    try:
        with np.errstate(all="ignore"):
            yield
    finally:
        _HOST.on = before
