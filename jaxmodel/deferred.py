"""jax and jax.numpy, imported on first use.

The models, their fields and the shared physics only call jax when a model
is traced, but the command line builds its options and checks its inputs
from the same modules: importing jax there would cost ``jaxmodel --help``,
``jaxmodel presets`` and every one-line error about a second (issue 26).
These modules write ``from jaxmodel.deferred import jnp`` instead of
``import jax.numpy as jnp``; the first attribute looked up imports jax.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class Deferred:
    """A module imported when one of its attributes is first looked up."""

    __slots__ = ("_name", "_module")

    def __init__(self, name: str):
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<deferred module {self._name!r}>"


jax = Deferred("jax")
jnp = Deferred("jax.numpy")
