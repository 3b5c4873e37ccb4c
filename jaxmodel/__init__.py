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

import importlib
from importlib.metadata import version as _version
from typing import TYPE_CHECKING

from jaxmodel.xla_options import guard_cpu_scheduler

# Each public name and the module it lives in.  They are imported on first use
# (PEP 562), so that ``import jaxmodel.cli`` -- and with it ``jaxmodel --help``,
# ``jaxmodel presets`` and every one-line input error -- never imports jax
# (issue 26).
_WHERE = {
    "BOTTLENECKS": "jaxmodel.verdicts",
    "Calibration": "jaxmodel.calibration",
    "DEFAULT_MODEL": "jaxmodel.models",
    "GroupBest": "jaxmodel.reduce",
    "InputError": "jaxmodel.errors",
    "JaxmodelError": "jaxmodel.errors",
    "MODELS": "jaxmodel.models",
    "Model": "jaxmodel.models",
    "Pareto": "jaxmodel.reduce",
    "REGIMES": "jaxmodel.verdicts",
    "SearchResult": "jaxmodel.searching",
    "SeedInputs": "jaxmodel.models.seed",
    "SeedOutputs": "jaxmodel.models.seed",
    "Sensitivities": "jaxmodel.sensitivity",
    "Solution": "jaxmodel.solving",
    "SpecError": "jaxmodel.errors",
    "SweepSpec": "jaxmodel.spec",
    "TopK": "jaxmodel.reduce",
    "calibrate": "jaxmodel.calibration",
    "evaluate": "jaxmodel.api",
    "get_model": "jaxmodel.models",
    "load_spec": "jaxmodel.spec",
    "parse_spec": "jaxmodel.spec",
    "search": "jaxmodel.searching",
    "seed_model": "jaxmodel.models.seed",
    "sensitivities": "jaxmodel.sensitivity",
    "solve": "jaxmodel.solving",
    "sweep": "jaxmodel.sweeping",
}


def __getattr__(name: str):
    if name == "presets":
        return importlib.import_module("jaxmodel.presets")
    if name not in _WHERE:
        raise AttributeError(f"module 'jaxmodel' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE, "presets"})


if TYPE_CHECKING:
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

# XLA's CPU scheduler that computed wrong elements (jaxmodel.xla_options): off
# before jax's backend starts.
guard_cpu_scheduler()

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
