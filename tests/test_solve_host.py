"""``solve`` on the host (``jaxmodel.solving.solve_on_host``) gives the jax x64 answers
(issue 26): the same solver code, run eagerly with NumPy and forward mode on the
host instead of traced, vmapped and compiled."""

import numpy as np
import pytest
from test_sensitivity import random_valid_configs

import jaxmodel
from jaxmodel.api import evaluate_on_host
from jaxmodel.deferred import on_host
from jaxmodel.solving import answer_solve, solve, solve_on_host
from tests.test_host_eval import _layouts

SEED = jaxmodel.get_model("seed")
REFINED = jaxmodel.get_model("refined")


def _close(a, b, rel):
    """Equal to ``rel`` relative, NaN where the other is NaN, infinities alike."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    same = (np.isnan(a) & np.isnan(b)) | (a == b)
    with np.errstate(invalid="ignore"):  # inf - inf where both are infinite
        return same | (np.abs(a - b) <= rel * np.maximum(np.abs(a), np.abs(b)))


def host_outputs(model, values):
    """The model on the host at ``values`` over its defaults, broadcast together:
    relaxed counts and infinite ends allowed (``evaluate`` rightly refuses them)."""
    arrays = np.broadcast_arrays(*(np.asarray(values.get(n, model.defaults[n]), np.float64)
                                   for n in model.input_names))
    with on_host():
        return model.apply(model.inputs_type(*arrays))


def assert_same_solution(model, inputs, ref, got):
    """The flags exactly; the solved value and the limit to 1e-9 relative (XLA may
    contract a multiply and an add into one FMA, NumPy does not: the Newton steps
    then stop a few ulps apart); the start's output to 1e-12.  Where the output
    is flat to rounding (throughput against accumulation steps, the far grid
    points), the argmax of the limit may fall on another grid point: there the
    output at the host's point must be the jax limit to 1e-9."""
    assert got.solved.dtype == np.float64 and got.solved.shape == ref.solved.shape
    np.testing.assert_array_equal(got.reached, ref.reached)
    np.testing.assert_array_equal(got.blocked, ref.blocked)
    for name, rel in [("start", 0), ("start_value", 1e-12), ("solved", 1e-9), ("limit", 1e-9)]:
        a, b = getattr(ref, name), getattr(got, name)
        ok = _close(a, b, rel)
        assert ok.all(), (name, np.asarray(a)[~ok][:3], np.asarray(b)[~ok][:3])
    moved = ~_close(ref.limit_at, got.limit_at, 1e-9)
    if moved.any():
        at = {k: np.broadcast_to(np.asarray(v, np.float64), got.limit_at.shape)[moved]
              for k, v in inputs.items()}
        at[got.vary] = got.limit_at[moved]
        there = getattr(host_outputs(model, at), got.output)
        assert _close(there, ref.limit[moved], 1e-9).all(), (there, ref.limit[moved])


def _targets(model, inputs, output, factors):
    """One row of targets per factor: the output at the start times the factor."""
    start = np.asarray(getattr(evaluate_on_host(model, **inputs), output), np.float64)
    return np.stack([f * start for f in factors])


def _compare(model, inputs, output, vary, targets):
    ref = solve(inputs, (output, targets), vary, model=model, x64=True)
    got = solve_on_host(inputs, (output, targets), vary, model=model)
    assert_same_solution(model, inputs, ref, got)
    return got


@pytest.fixture(scope="module")
def configs():
    return random_valid_configs(12, seed=4)


def test_seed_bandwidth_reachable_and_capped_at_infinity(configs):
    """Up, past the analytic cap 1 / (1 + (p - 1) / m) (limit at infinite bandwidth),
    and down: the jax answers, and each kind of answer occurs."""
    cap = 100.0 / (1.0 + (configs["pipeline_parallel"] - 1.0) / configs["gradient_accum_steps"])
    start = evaluate_on_host(SEED, **configs).mfu_percent
    targets = np.stack([np.minimum(1.05 * start, 0.5 * (start + cap)), cap * (1 + 1e-6),
                        0.5 * start])
    got = _compare(SEED, configs, "mfu_percent", "link_bandwidth_gb_s", targets)
    assert got.reached[0].all() and got.reached[2].all()
    assert not got.reached[1].any() and np.isinf(got.limit_at[1]).all()
    np.testing.assert_allclose(got.limit[1], cap, rtol=1e-12)


@pytest.mark.parametrize(("output", "vary", "factors"), [
    ("step_time_ms", "compute_tflops", [0.5, 2.0, 1e-3]),
    ("throughput_tokens_s", "gradient_accum_steps", [1.1, 0.9]),
    ("comm_fraction_percent", "compute_tflops", [1.2, 0.5]),
    ("step_time_ms", "seq_length", [2.0, 0.5]),
])
def test_seed_questions_give_the_jax_answers(configs, output, vary, factors):
    _compare(SEED, configs, output, vary, _targets(SEED, configs, output, factors))


def test_seed_blocked_by_layout_rules(configs):
    """Relaxed layer counts that do not split over the stages: blocked, as on jax."""
    got = _compare(SEED, configs, "mfu_percent", "num_layers",
                   _targets(SEED, configs, "mfu_percent", [1.3, 0.7]))
    assert got.blocked.any()


@pytest.mark.slow
@pytest.mark.parametrize(("output", "vary", "factors", "kinds"), [
    # up (reachable), past any bandwidth (limit at infinity), down
    ("mfu_percent", "link_bandwidth_gb_s", [1.05, 100.0, 0.7], {"reached", "infinite"}),
    ("mfu_percent", "num_layers", [1.1, 0.9], {"blocked"}),
    ("step_time_ms", "compute_tflops", [0.8, 1e-3], {"reached"}),
])
def test_refined_questions_give_the_jax_answers(output, vary, factors, kinds):
    batch = _layouts("h100-sxm", "llama3-70b", 200, seed=11)  # (most do not fit)
    valid = np.flatnonzero(np.isfinite(evaluate_on_host(REFINED, **batch).mfu_percent))[:4]
    assert valid.size == 4
    batch = {k: v[valid] for k, v in batch.items()}
    got = _compare(REFINED, batch, output, vary, _targets(REFINED, batch, output, factors))
    seen = {"reached": got.reached.any(), "blocked": got.blocked.any(),
            "infinite": (~got.reached & np.isinf(got.limit_at)).any()}
    assert all(seen[k] for k in kinds), seen


def test_refined_default_question_on_the_host():
    """The command line's question, answered on the host: out of reach, the limit at
    infinite bandwidth, which the model gives there in closed form."""
    s = answer_solve({}, "mfu_percent=60", "link_bandwidth_gb_s", model=REFINED)
    assert not s.reached and np.isinf(s.limit_at)
    at_inf = host_outputs(REFINED, {"link_bandwidth_gb_s": np.inf}).mfu_percent
    assert s.limit == pytest.approx(float(at_inf), rel=1e-12)
    lower = answer_solve({}, ("mfu_percent", 0.9 * float(s.start_value)), "link_bandwidth_gb_s",
                         model=REFINED)
    assert lower.reached
    back = evaluate_on_host(REFINED, link_bandwidth_gb_s=float(lower.solved)).mfu_percent
    assert float(back) == pytest.approx(0.9 * float(s.start_value), rel=1e-9)


def test_solve_on_host_needs_an_on_host_model():
    model = jaxmodel.get_model("seed")
    plain = type(model)(**{**{f.name: getattr(model, f.name) for f in
                               __import__("dataclasses").fields(model)}, "on_host": False})
    with pytest.raises(ValueError, match="does not declare on_host"):
        solve_on_host({}, "mfu_percent=60", "link_bandwidth_gb_s", model=plain)

