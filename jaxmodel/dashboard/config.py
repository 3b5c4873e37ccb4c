"""One configuration of a sweep, evaluated live by the model.

A dataset row holds the inputs the sweep wrote; the others are the sweep's
fixed ``[base]`` values (from the spec stored in the dataset).  The
breakdown, the tornado and the what-if panel all go through the package API
(:func:`jaxmodel.profile.answer`, :func:`jaxmodel.sensitivity.answer_sensitivities`:
on the host where the model runs there, else jax) and the model's
declared fields; the step-time terms are the model's declared ``terms``, so
nothing here re-implements the model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxmodel.dashboard.data import DashboardError, Source
from jaxmodel.errors import JaxmodelError
from jaxmodel.models import Model
from jaxmodel.profile import answer
from jaxmodel.sensitivity import answer_sensitivities


def inputs_of_row(src: Source, row: Mapping[str, Any]) -> dict[str, float]:
    """The model inputs of a dataset row: its input columns over the sweep's base."""
    values = dict(src.base)
    for name in src.model.input_names:
        if name in row and row[name] is not None:
            values[name] = float(row[name])
    return values


def check_inputs(model: Model, values: Mapping[str, Any]) -> dict[str, float]:
    """Each input checked by its field (a what-if box may hold anything).

    Raises:
      DashboardError: one line naming the input, the value and what is allowed.
    """
    out: dict[str, float] = {}
    for f in model.inputs:
        v = values.get(f.name, f.default)
        if v is None or (isinstance(v, str) and not v.strip()):
            raise DashboardError(f"{f.name}: empty; allowed: {f.allowed()}")
        try:
            out[f.name] = f.check_scalar(v, text=isinstance(v, str))
        except JaxmodelError as e:
            raise DashboardError(str(e)) from None
    return out


@dataclass(frozen=True)
class Evaluation:
    """One configuration's outputs and step-time breakdown.

    Attributes:
      inputs: the inputs evaluated.
      outputs: output name -> value (floats; categories as names; NaN invalid).
      terms: (label, output name, ms) for each step-time term the model declares.
      valid: whether the layout is valid.
      colours: each term's colour, in ``terms`` order.
    """

    inputs: dict[str, float]
    outputs: dict[str, Any]
    terms: tuple[tuple[str, str, float], ...]
    valid: bool
    colours: tuple[str, ...] = ()


def evaluate(model: Model, inputs: Mapping[str, float], *, x64: bool = False) -> Evaluation:
    """One configuration, on the host where the model runs there (no compile:
    ``jaxmodel.profile.answer``), else ``jaxmodel.evaluate``."""
    try:
        out = answer(model, x64=x64, **inputs)
    except JaxmodelError as e:
        raise DashboardError(str(e)) from None
    values: dict[str, Any] = {}
    for f, v in zip(model.outputs, out, strict=True):
        v = np.asarray(v).item()
        if f.kind == "category":
            v = f.categories[int(v)]
        elif f.kind == "float":
            v = float(v)
        values[f.name] = v
    terms = tuple((t.label, t.output, float(values[t.output])) for t in model.terms)
    return Evaluation(dict(inputs), values, terms, bool(values[model.validity]),
                      tuple(t.colour for t in model.terms))


@dataclass(frozen=True)
class Tornado:
    """Elasticities of ``output`` (+1% of an input -> % of the output), largest first."""

    output: str
    value: float
    inputs: tuple[str, ...]
    elasticities: tuple[float, ...]


# The tornado's time limit.  A model that runs on the host (seed, refined) is
# differentiated there in milliseconds (jaxmodel.sensitivity.answer_sensitivities);
# another one's first call compiles the model with its tangents (about a
# minute for the refined model on a busy 2-core machine, bench/README.md), and
# the program's memory does not grow with the inputs
# (jaxmodel.sensitivity._derivatives).  One worker: clicks never compile two
# programs at once, and a call past the limit goes on in the background, so
# the next click finds its program compiled.
TORNADO_SECONDS = 60.0
_TORNADO_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jaxmodel-tornado")


def tornado(model: Model, inputs: Mapping[str, float], output: str = "step_time_ms", *,
            x64: bool = False, seconds: float = TORNADO_SECONDS) -> Tornado:
    """``jaxmodel.sensitivities`` (elasticities) of one output, ranked by magnitude,
    within ``seconds``.

    Raises:
      DashboardError: an invalid layout (its sensitivities are undefined), a bad
        name, or not done within ``seconds``.
    """
    job = _TORNADO_WORKER.submit(answer_sensitivities, dict(inputs), of=[output],
                                 kind="elasticity", model=model, x64=x64)
    try:
        s = job.result(timeout=seconds)
    except FutureTimeout:
        raise DashboardError(f"sensitivities: not done within {seconds:g} s (the model is "
                             "still compiling); ask again in a minute") from None
    except JaxmodelError as e:
        raise DashboardError(str(e)) from None
    if not bool(np.asarray(s.valid)):
        raise DashboardError("sensitivities: the layout is invalid, so they are undefined")
    e = {w: float(np.asarray(s.elasticity(output, w))) for w in s.wrt}
    ranked = sorted((w for w in e if math.isfinite(e[w])), key=lambda w: -abs(e[w]))
    return Tornado(output, float(np.asarray(s.values[output])), tuple(ranked),
                   tuple(e[w] for w in ranked))
