"""jaxmodel: a GPU-accelerated sweep engine for a cost model of 3D-parallel LLM training."""

from jaxmodel.api import evaluate
from jaxmodel.errors import InputError, JaxmodelError, SpecError
from jaxmodel.models import DEFAULT_MODEL, MODELS, Model, get_model
from jaxmodel.models.seed import SeedInputs, SeedOutputs, seed_model
from jaxmodel.reduce import GroupBest, Pareto, TopK
from jaxmodel.search import SearchResult, search
from jaxmodel.sensitivity import Sensitivities, sensitivities
from jaxmodel.solve import Solution, solve
from jaxmodel.verdicts import BOTTLENECKS, REGIMES

__version__ = "0.1.0"

__all__ = [
    "BOTTLENECKS",
    "GroupBest", "Pareto", "SearchResult", "TopK", "search",
    "DEFAULT_MODEL",
    "MODELS",
    "REGIMES",
    "InputError",
    "JaxmodelError",
    "Model",
    "SeedInputs",
    "SeedOutputs",
    "Sensitivities",
    "Solution",
    "SpecError",
    "evaluate",
    "get_model",
    "seed_model",
    "sensitivities",
    "solve",
]
