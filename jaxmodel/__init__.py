"""jaxmodel: a GPU-accelerated sweep engine for a cost model of 3D-parallel LLM training.

The public API, one entry per step of the flow (spec -> device -> Parquet):

* ``evaluate`` -- a model on scalars or broadcast arrays;
* ``parse_spec`` / ``load_spec`` and ``sweep`` -- a TOML sweep to a Parquet dataset;
* ``sensitivities`` and ``solve`` -- derivatives by autodiff, inverse questions;
* ``search`` and the reducers ``TopK``, ``GroupBest``, ``Pareto`` -- layout search;
* ``calibrate`` -- fit a model's cluster parameters to measured runs.

(``jaxmodel.sweep``, ``jaxmodel.search``, ``jaxmodel.solve`` and ``jaxmodel.calibrate`` are these
functions; their modules are named for the activity, so that neither shadows the other:
``jaxmodel.sweeping``, ``jaxmodel.searching``, ``jaxmodel.solving``, ``jaxmodel.calibration``.)
"""

from importlib.metadata import version as _version

from jaxmodel import presets
from jaxmodel.api import evaluate
from jaxmodel.calibration import Calibration, calibrate
from jaxmodel.errors import InputError, JaxmodelError, SpecError
from jaxmodel.models import DEFAULT_MODEL, MODELS, Model, get_model
from jaxmodel.models.seed import SeedInputs, SeedOutputs, seed_model
from jaxmodel.reduce import GroupBest, Pareto, TopK
from jaxmodel.searching import SearchResult, search
from jaxmodel.sensitivity import Sensitivities, sensitivities
from jaxmodel.solving import Solution, solve
from jaxmodel.spec import SweepSpec, load_spec, parse_spec
from jaxmodel.sweeping import sweep
from jaxmodel.verdicts import BOTTLENECKS, REGIMES

# One source of the version, pyproject.toml (the sweep metadata reads it there too).
__version__ = _version("jaxmodel")

__all__ = [
    "BOTTLENECKS",
    "Calibration",
    "DEFAULT_MODEL",
    "MODELS",
    "REGIMES",
    "GroupBest",
    "InputError",
    "JaxmodelError",
    "Model",
    "Pareto",
    "SearchResult",
    "SeedInputs",
    "SeedOutputs",
    "Sensitivities",
    "Solution",
    "SpecError",
    "SweepSpec",
    "TopK",
    "calibrate",
    "evaluate",
    "get_model",
    "load_spec",
    "parse_spec",
    "presets",
    "search",
    "seed_model",
    "sensitivities",
    "solve",
    "sweep",
]
