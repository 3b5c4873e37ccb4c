"""The registry of cost models, selectable by name everywhere (``--model``)."""

from __future__ import annotations

from jaxmodel.errors import InputError
from jaxmodel.models.base import Model, Term
from jaxmodel.models.layout import LayoutSpace
from jaxmodel.models.refined import REFINED
from jaxmodel.models.seed import SEED

MODELS: dict[str, Model] = {SEED.name: SEED, REFINED.name: REFINED}
DEFAULT_MODEL = REFINED.name


def get_model(name: str | Model = DEFAULT_MODEL) -> Model:
    """The model called ``name`` (a ``Model`` passes through)."""
    if isinstance(name, Model):
        return name
    try:
        return MODELS[name]
    except KeyError:
        raise InputError("model", name, "one of " + ", ".join(sorted(MODELS))) from None


__all__ = ["DEFAULT_MODEL", "MODELS", "LayoutSpace", "Model", "Term", "get_model"]
