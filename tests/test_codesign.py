"""Co-design by gradient (``jaxmodel.codesign``): the envelope gradient at the
best layout against a brute-force re-search of every candidate (through
``jaxmodel.evaluate``, not the engine) at +-1% of each input, and the +-10%
argmax check and the stepped memory input against the same brute force."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import jaxmodel
from jaxmodel.cli import app
from jaxmodel.codesign import FACTORS, weigh
from jaxmodel.errors import SpecError
from jaxmodel.presets import apply_presets
from jaxmodel.searching import row_dicts, search

runner = CliRunner()


def brute_best(model, values, cols, by, maximize, name=None, factor=1.0):
    """The best candidate (its index and objective, and its cost where the
    model has one) with ``name`` scaled by ``factor``: every row evaluated."""
    inputs = {**values, **cols}
    if name is not None:
        inputs[name] = np.asarray(inputs[name], np.float64) * factor
    out = jaxmodel.evaluate(model, x64=True, **inputs)
    f = np.asarray(getattr(out, by), np.float64)
    f = np.where(out.valid_layout, f, -np.inf if maximize else np.inf)
    i = int(np.argmax(f) if maximize else np.argmin(f))
    cost = float(out.cost_usd[i]) if "cost_usd" in model.output_names else None
    return i, float(f[i]), cost


def check_envelope(model, values, batch, by, maximize, wrt):
    """Each smooth input's envelope gradient equals the central difference of
    the brute-force best at +-1%, within 1%, where the argmax stays."""
    result = search(model, values, global_batch=batch, by=by, maximize=maximize, top=1,
                    x64=True)
    cand = model.layout.candidates(values, batch)
    cols = {k: v for k, v in cand.items() if k in model.input_names}
    best = row_dicts(model, result.top)
    weights = weigh(model, values, cols, best, by=by, maximize=maximize, wrt=wrt, x64=True)[0]
    i0, f0, c0 = brute_best(model, values, cols, by, maximize)
    assert best[0]["config_id"] == i0
    compared = 0
    for name, w in weights.items():
        if w.stepped:
            continue
        lo = brute_best(model, values, cols, by, maximize, name, 0.99)
        hi = brute_best(model, values, cols, by, maximize, name, 1.01)
        if lo[0] != i0 or hi[0] != i0:
            continue
        step = 0.02 * float(values[name])
        assert w.gradient == pytest.approx((hi[1] - lo[1]) / step, rel=0.01), name
        if c0 is not None:
            assert w.usd_gradient == pytest.approx((hi[2] - lo[2]) / step, rel=0.01), name
        compared += 1
        # the +-10% check against the same brute force
        for f in FACTORS:
            j, fb, _ = brute_best(model, values, cols, by, maximize, name, f)
            assert w.moved[f] == (j != i0), (name, f)
            assert w.best_at[f] == pytest.approx(fb, rel=1e-6), (name, f)
    return weights, compared, (cols, i0, f0, c0)


def test_envelope_gradient_equals_brute_force_on_the_seed():
    seed = jaxmodel.get_model("seed")
    values = {**seed.defaults, "num_gpus": 64.0}
    weights, compared, _ = check_envelope(seed, values, 32, "throughput_tokens_s", True,
                                          None)
    assert set(weights) == set(seed.hardware) and compared == len(seed.hardware)
    # more of either never lowers the best throughput, and compute matters here
    assert weights["compute_tflops"].gradient > 0
    assert weights["link_bandwidth_gb_s"].gradient >= 0


@pytest.mark.slow
def test_envelope_gradient_equals_brute_force_on_a_refined_plan():
    refined = jaxmodel.get_model("refined")
    values = {**refined.defaults, **apply_presets(refined, llm="llama3-8b", gpu="h100-sxm"),
              "train_tokens": 1e12, "num_gpus": 64.0}
    weights, compared, (cols, i0, f0, c0) = check_envelope(
        refined, values, 2**22 // 8192, "train_days", False, None)
    assert compared >= 4, weights
    assert weights["compute_tflops"].gradient < 0  # faster GPUs: fewer days
    # dollars: cost = N x days x 24 x price at a fixed layout
    w = weights["compute_tflops"]
    assert w.usd_gradient == pytest.approx(64 * 24 * values["gpu_hour_usd"] * w.gradient,
                                           rel=1e-6)
    assert w.usd_per_10_percent == pytest.approx(-0.1 * 989 * w.usd_gradient)
    # memory acts by steps: the re-searched difference at +10%
    m = weights["gpu_memory_gb"]
    assert m.stepped
    _, f1, _ = brute_best(refined, values, cols, "train_days", False, "gpu_memory_gb", 1.1)
    assert m.gradient == pytest.approx((f1 - f0) / (0.1 * 80), rel=1e-5, abs=1e-12)


def test_sensitivity_refuses_an_objective_without_a_derivative():
    seed = jaxmodel.get_model("seed")
    with pytest.raises(SpecError, match="bottleneck"):
        weigh(seed, seed.defaults, {"micro_batch": np.ones(1)}, [None],
              by="bottleneck", maximize=True)
    with pytest.raises(SpecError, match="link_bandwith"):
        weigh(seed, seed.defaults, {"micro_batch": np.ones(1)}, [None],
              by="mfu_percent", maximize=True, wrt=["link_bandwith"])
    with pytest.raises(SpecError, match="'num_gpus' is a whole number"):
        weigh(seed, seed.defaults, {"micro_batch": np.ones(1)}, [None],
              by="mfu_percent", maximize=True, wrt=["num_gpus"])


def test_best_sensitivity_cli():
    out = runner.invoke(app, ["best", "--model", "seed", "--num-gpus", "64", "--top", "2",
                              "--sensitivity", "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    names = [s["input"] for s in doc["sensitivity"]]
    assert names == ["compute_tflops", "link_bandwidth_gb_s"]
    out = runner.invoke(app, ["best", "--model", "seed", "--num-gpus", "64",
                              "--sensitivity", "--allow-idle"])
    assert out.exit_code == 2 and "--sensitivity" in out.output
    assert "Traceback" not in out.output


def test_bad_sensitivity_requests_are_refused_before_searching():
    for cmd in (["best", "--model", "seed", "--num-gpus", "64"],
                ["plan", "--llm", "llama3-8b", "--train-tokens", "1e12", "--num-gpus", "64"]):
        out = runner.invoke(app, [*cmd, "--sensitivity-wrt", "link_bandwith"])
        assert out.exit_code == 2, out.output
        assert "link_bandwith" in out.output and "Traceback" not in out.output
    out = runner.invoke(app, ["best", "--model", "seed", "--num-gpus", "64", "--sensitivity",
                              "--by", "valid_layout"])
    assert out.exit_code == 2 and "has no derivative" in out.output
