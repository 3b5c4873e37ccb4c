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
    """``n`` candidate layouts of a preset pair, switches varied, drawn at random."""
    values = {**REFINED.defaults, **presets.apply_presets(REFINED, gpu=gpu, llm=llm),
              "num_gpus": 256}
    vary = {"recompute": [0, 1, 2], "precision": [0, 1, 2], "zero_stage": [0, 1, 3],
            "cuda_graphs": [0, 1, 2], "pipeline_schedule": [0, 1]}
    cand = REFINED.layout.candidates(values, 1024, vary=vary)
    rows = np.random.default_rng(seed).choice(len(cand["tensor_parallel"]), n, replace=False)
    batch = {k: np.full(n, float(v)) for k, v in values.items()}
    batch.update({k: np.asarray(v)[rows].astype(float) for k, v in cand.items()
                  if k in REFINED.input_names})
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
