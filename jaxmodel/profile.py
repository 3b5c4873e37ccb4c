"""The seed's two profile curves: efficiency against GPU count and link bandwidth."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from jaxmodel.api import evaluate, evaluate_on_host
from jaxmodel.models import Model, get_model
from jaxmodel.models.layout import BANDWIDTH, GPUS, PIPELINE, TENSOR

PROFILE_POINTS = 48
GPU_SPAN = 32  # the GPU curve runs from t p up to GPU_SPAN x num_gpus
BW_LOW_GB_S = 20.0  # the bandwidth curve runs from 20 GB/s up to 2 x the input
MAX_PROFILE_GPUS = 2**24  # the largest num_gpus the seed inputs allow


def profile_points(inputs: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """The x values of both curves (SEED_MODEL.md, "Profile curves").

    Returns:
      ``(gpus, bandwidths)``: 48 GPU counts spaced geometrically from ``t p`` to
      ``32 num_gpus``, each rounded down to a multiple of ``t p`` (duplicates
      kept), and 48 bandwidths evenly spaced from 20 GB/s to twice the input.
    """
    tp = int(inputs[TENSOR]) * int(inputs[PIPELINE])
    raw = np.geomspace(tp, GPU_SPAN * int(inputs[GPUS]), PROFILE_POINTS)
    gpus = (np.floor(raw / tp + 1e-9) * tp).astype(np.int64)
    # Keep every point a legal ``num_gpus``: at least one replica (t p) even
    # when t p exceeds 32 num_gpus (the curve then runs downward and would
    # round to 0), and at most the field's bound (2**24), rounded down to a
    # multiple of t p where one fits.  Such layouts evaluate (invalid, NaN)
    # instead of raising on the profile of a valid command line.
    top = MAX_PROFILE_GPUS if tp > MAX_PROFILE_GPUS else MAX_PROFILE_GPUS // tp * tp
    gpus = np.minimum(np.maximum(gpus, tp), top)
    bandwidths = np.linspace(BW_LOW_GB_S, 2.0 * float(inputs[BANDWIDTH]),
                             PROFILE_POINTS)
    return gpus, bandwidths


def answer(model: Model | str, *, x64: bool = False, **inputs):
    """A few configurations for a person: on the host in float64 where the model
    runs there (``evaluate_on_host``: no compile), else jax's ``evaluate``
    (``evaluate``'s arguments, so it can be handed where ``evaluate`` is)."""
    model = get_model(model)
    if model.on_host:
        return evaluate_on_host(model, **inputs)
    return evaluate(model, x64=x64, **inputs)


def evaluate_with_profile(model: Model, inputs: Mapping[str, float], *, x64: bool = False):
    """The configuration's outputs and both curves, evaluated in one batch.

    One batch (:func:`answer`: on the host where the model runs there, else
    one compiled program: evaluating the configuration on its own compiled the
    model a second time for another shape, half of a cold ``jaxmodel eval
    --model refined``; bench/README.md, issue 26).

    Returns:
      ``(outputs, curves)``: ``model.outputs_type`` of the configuration (0-d
      arrays, as ``evaluate`` on scalars) and :func:`profile_curves`'s dict.
    """
    gpus, bandwidths = profile_points(inputs)
    n = PROFILE_POINTS
    # row 0: the configuration; then the GPU curve's n points, the bandwidth curve's n
    batch = {k: np.full(2 * n + 1, v, dtype=np.float64) for k, v in inputs.items()}
    batch[GPUS][1:n + 1] = gpus
    batch[BANDWIDTH][n + 1:] = bandwidths
    out = answer(model, x64=x64, **batch)
    mfu = np.asarray(out.mfu_percent, dtype=np.float64)
    curves = {"eff_vs_gpus": (gpus, mfu[1:n + 1]), "eff_vs_bw": (bandwidths, mfu[n + 1:]),
              "at": {GPUS: int(inputs[GPUS]), BANDWIDTH: float(inputs[BANDWIDTH])}}
    return model.outputs_type(*(np.asarray(v)[0] for v in out)), curves


def profile_curves(model: Model, inputs: Mapping[str, float], *, x64: bool = False):
    """Both curves as ``(x, mfu_percent)`` arrays, evaluated in one batch.

    Returns:
      ``{"eff_vs_gpus": (gpus, eff), "eff_vs_bw": (bandwidths, eff), "at":
      {gpus input: the configuration's, bandwidth input: the configuration's}}``.
    """
    return evaluate_with_profile(model, inputs, x64=x64)[1]
