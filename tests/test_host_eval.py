"""One configuration answered with NumPy on the host (``jaxmodel.api.evaluate_on_host``)
gives the numbers of the jax program (issue 26): the same model function, run
elementwise over a batch with NumPy as its array module."""

import sys

import numpy as np
import pytest

import jaxmodel
from jaxmodel.api import evaluate_on_host
from jaxmodel.deferred import jnp, on_host
from jaxmodel.models import presets
from tests.test_xla_options import random_inputs

REFINED = jaxmodel.get_model("refined")


def assert_same_numbers(model, ref, got):
    """Floats within 1e-12 relative (XLA may contract a multiply and an add into
    one FMA, NumPy does not); NaN rows alike; counts, flags and categories exact."""
    for field, a, b in zip(model.outputs, ref, got, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, field.name
        if a.dtype.kind != "f":
            np.testing.assert_array_equal(a, b, err_msg=field.name)
            continue
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=field.name)
        ok = np.isnan(a) | (np.abs(a - b) <= 1e-12 * np.maximum(np.abs(a), np.abs(b)))
        assert ok.all(), (field.name, a[~ok][:3], b[~ok][:3])


def _layouts(gpu: str, llm: str, n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` candidate layouts of a preset pair drawn at random, each with its
    switches drawn at random.  (Drawn, not crossed: crossing a GPT-OSS search
    with these switches made 10M rows, and a CI worker was killed for memory.)"""
    values = {**REFINED.defaults, **presets.apply_presets(REFINED, gpu=gpu, llm=llm),
              "num_gpus": 256}
    switches = {"recompute": [0, 1, 2], "precision": [0, 1, 2], "zero_stage": [0, 1, 3],
                "cuda_graphs": [0, 1, 2], "pipeline_schedule": [0, 1],
                "elementwise_fusion": [0, 1]}
    cand = REFINED.layout.candidates(values, 1024)
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(cand["tensor_parallel"]), n, replace=False)
    batch = {k: np.full(n, float(v)) for k, v in values.items()}
    batch.update({k: np.asarray(v)[rows].astype(float) for k, v in cand.items()
                  if k in REFINED.input_names})
    batch.update({k: rng.choice(np.asarray(v, float), n) for k, v in switches.items()})
    return batch


@pytest.mark.parametrize("gpu,llm", [("h100-sxm", "llama3-70b"), ("b200", "deepseek-v3"),
                                     ("h100-sxm", "qwen3-30b-a3b"), ("gb200-nvl72", "gpt-oss-120b"),
                                     ("b200", "nemotron3-nano")])
def test_searched_layouts_of_each_family_give_the_jax_numbers(gpu, llm):
    batch = _layouts(gpu, llm, 200, seed=len(llm))
    assert_same_numbers(REFINED, jaxmodel.evaluate(REFINED, x64=True, **batch),
                        evaluate_on_host(REFINED, **batch))


@pytest.mark.parametrize("name", ["seed", "refined"])
def test_random_cluster_inputs_give_the_jax_numbers(name):
    model = jaxmodel.get_model(name)
    batch = random_inputs(model, 300, seed=3)
    assert_same_numbers(model, jaxmodel.evaluate(model, x64=True, **batch),
                        evaluate_on_host(model, **batch))


def test_scalars_give_0d_outputs_and_inputs_are_checked():
    out = evaluate_on_host("refined", num_gpus=1024)
    assert np.asarray(out.step_time_ms).shape == ()
    assert out.step_time_ms.dtype == np.float64 and out.valid_layout.dtype == np.bool_
    with pytest.raises(jaxmodel.errors.InputError, match="tensor_parallel"):
        evaluate_on_host("refined", tensor_parallel=-1)


def test_on_host_is_numpy_in_this_block_only():
    with on_host():
        assert jnp.where is np.where
    assert "jax" not in sys.modules or jnp.where is not np.where


# -- sensitivities on the host (jaxmodel.dual) --------------------------------------------


def test_dual_rules_are_jaxs_on_kinks_and_branches():
    """Each rule against jax.jvp of the same function, at ties and branch points."""
    import jax
    import jax.numpy as jnp

    from jaxmodel.dual import Dual, seeded

    x0 = np.array([0.0, 1.0, 2.0, 3.0, -1.5, 4.0])
    y0 = np.array([1.0, 1.0, 3.0, 2.0, 0.5, 4.0])

    def f(xp, x, y):
        return (xp.maximum(x, y) * 2.0 + xp.minimum(x, 1.0) - xp.clip(y, 1.0, 3.0)
                + xp.where(x > y, x * y, y / (1.0 + x * x)) + abs(x) + x ** 2 + y ** 0.5
                + xp.floor(x * 1.7) + xp.round(y * 2.3) + xp.mod(x + 7.0, 2.0)
                + xp.select([x < 0, x < 2], [x * 3.0, y], 1.0)
                + xp.stack([x, y])[1] * xp.concatenate([x, y])[:6]
                + xp.broadcast_to(x[2] * y[3], (6,)) + xp.broadcast_to(y, 6))

    with jax.enable_x64(True):
        for direction in ((1.0, 0.0), (0.0, 1.0)):
            _, want = jax.jvp(lambda x, y: f(jnp, x, y), (x0, y0),
                              (np.full(6, direction[0]), np.full(6, direction[1])))
            dx, dy = seeded(x0, 0, 2), seeded(y0, 1, 2)
            with on_host():
                got = f(np, dx, dy)
            assert isinstance(got, Dual)
            tangent = got.tangent[0] * direction[0] + got.tangent[1] * direction[1]
            np.testing.assert_allclose(tangent, np.asarray(want), rtol=1e-12, atol=1e-12)


def test_a_dual_bf16_peak_stays_a_dual_through_the_precision_choice():
    """The GEMM rates pick the bf16 peak and ceiling as the last choice; NumPy's
    select does not dispatch on its default, so a Dual there came back as an
    object array of Duals and the step time could not be cast (a CI failure of
    test_solve_host's compute_tflops question).  d peak / d compute_tflops is
    1e12 at precision 0 and 0 at FP8; d ceiling / d matmul_efficiency 1 and 0."""
    from jaxmodel.dual import Dual, seeded
    from jaxmodel.models.refined.rates import low_precision_rate

    refined = jaxmodel.get_model("refined")
    x = refined.inputs_type(**{k: np.full(2, float(v)) for k, v in refined.defaults.items()})
    x = x._replace(precision=np.array([0.0, 1.0]), fp8_peak_tflops=np.full(2, 1979.0),
                   compute_tflops=seeded(np.full(2, 989.0), 0, 2),
                   matmul_efficiency=seeded(np.full(2, 0.8), 1, 2))
    with on_host():
        peak, ceiling, _ = low_precision_rate(x)
    assert isinstance(peak, Dual) and isinstance(ceiling, Dual)
    np.testing.assert_array_equal(peak.primal, [989e12, 1979e12])
    np.testing.assert_array_equal(peak.tangent, [[1e12, 0.0], [0.0, 0.0]])
    np.testing.assert_array_equal(ceiling.tangent, [[0.0, 0.0], [1.0, 0.0]])


def test_a_ufunc_without_a_rule_is_refused():
    from jaxmodel.dual import seeded

    with pytest.raises(TypeError, match="arctan"):
        np.arctan(seeded(np.ones(2), 0, 1))


def _assert_same_sensitivities(ref, got, batch):
    """Every column within 1e-9 of its scale: an elasticity absolutely, a gradient
    d y / d x relative to y / x (a derivative that is 0 up to rounding may come
    out as 0 or as rounding noise)."""
    assert ref.columns.keys() == got.columns.keys()
    for o in ref.of:
        for w in ref.wrt:
            for column, scale in ((f"d_{o}__d_{w}", np.abs(np.asarray(ref.values[o], np.float64))
                                   / np.maximum(np.abs(np.asarray(batch[w])), 1e-300)),
                                  (f"e_{o}__{w}", 1.0)):
                if column not in ref.columns:
                    continue
                a, b = np.asarray(ref.columns[column], np.float64), got.columns[column]
                np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=column)
                ok = np.isnan(a) | (np.abs(a - b) <= 1e-9 * (np.abs(a) + scale))
                assert ok.all(), (column, a[~ok][:3], b[~ok][:3])
    for w, v in ref.stepped_to.items():
        np.testing.assert_array_equal(np.asarray(v, np.float64), got.stepped_to[w])
    np.testing.assert_array_equal(ref.valid, got.valid)


def test_seed_sensitivities_on_the_host_are_jaxs():
    from jaxmodel.sensitivity import sensitivities, sensitivities_on_host

    model = jaxmodel.get_model("seed")
    batch = random_inputs(model, 64, seed=5)
    wrt = list(model.input_names)  # stepped num_gpus among them
    _assert_same_sensitivities(
        sensitivities(batch, wrt=wrt, kind="both", model=model, x64=True),
        sensitivities_on_host(batch, wrt=wrt, kind="both", model=model), batch)


@pytest.mark.slow
@pytest.mark.parametrize("gpu,llm", [("h100-sxm", "llama3-70b"), ("b200", "deepseek-v3"),
                                     ("b200", "nemotron3-nano")])
def test_refined_sensitivities_on_the_host_are_jaxs(gpu, llm):
    from jaxmodel.sensitivity import continuous_inputs, sensitivities, sensitivities_on_host

    batch = _layouts(gpu, llm, 40, seed=7)
    wrt = list(continuous_inputs(REFINED)) + ["num_gpus", "recompute", "zero_stage"]
    _assert_same_sensitivities(
        sensitivities(batch, of=["mfu_percent", "step_time_ms", "memory_gb_per_gpu"], wrt=wrt,
                      kind="both", model=REFINED, x64=True),
        sensitivities_on_host(batch, of=["mfu_percent", "step_time_ms", "memory_gb_per_gpu"],
                              wrt=wrt, kind="both", model=REFINED), batch)
