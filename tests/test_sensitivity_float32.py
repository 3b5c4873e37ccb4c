"""Sensitivities in the default float32 mode agree with float64 over the presets' range.

Issue 17 item 1: at 1024 GPUs the refined model's MFU derivative overflowed in
float32 (the job's FLOPs times the tangent of ``used x step x peak``, ~1e39)
and came back NaN, though the value itself was finite.  Every GPU preset x
every LLM preset x GPU counts from one node to 16,384 x a spread of layouts is
differentiated in both precisions; wherever float64 calls the layout valid,
float32 must be finite and agree.
"""

import itertools

import numpy as np
import pytest

import jaxmodel
from jaxmodel.presets import GPUS, LLMS, apply_presets
from jaxmodel.sensitivity import continuous_inputs

REFINED = jaxmodel.get_model("refined")
OF = ("step_time_ms", "mfu_percent", "hfu_percent", "throughput_tokens_s")


def preset_grid() -> dict[str, np.ndarray]:
    """Every (GPU, LLM) preset pair at N in {8, 64, 1024, 16384}, several layouts."""
    rows = []
    for gpu, llm, n, t, p, b in itertools.product(
            GPUS, LLMS, (8, 64, 1024, 16384), (1, 8), (1, 4, 16), (1, 4)):
        values = {f.name: f.default for f in REFINED.inputs}
        values.update(apply_presets(REFINED, gpu=gpu, llm=llm))
        values.update(num_gpus=n, tensor_parallel=t, pipeline_parallel=p, micro_batch=b,
                      gradient_accum_steps=32, gpu_memory_gb=1e4)  # judge the timing, not fit
        rows.append(values)
    return {k: np.array([r[k] for r in rows], float) for k in rows[0]}


def check_float32_against_float64(of, wrt, kind):
    configs = preset_grid()
    s32 = jaxmodel.sensitivities(configs, of=of, wrt=wrt, kind=kind, model=REFINED)
    s64 = jaxmodel.sensitivities(configs, of=of, wrt=wrt, kind=kind, model=REFINED, x64=True)
    keep = s64.valid
    assert keep.sum() >= 1000
    assert (s32.valid == keep).all()
    checked = 0
    for name, g64 in s64.columns.items():
        g32 = s32.columns[name]
        assert np.isfinite(g32[keep]).all(), (name, np.flatnonzero(~np.isfinite(g32) & keep)[:3])
        # float32 keeps ~7 digits; a derivative built from cancelling terms
        # loses some, so compare against the column's own scale as well.
        scale = np.abs(g64[keep]).max()
        err = np.abs(g32 - g64)
        bad = keep & (err > 1e-3 * np.abs(g64) + 1e-5 * scale)
        assert not bad.any(), (name, np.flatnonzero(bad)[:3], g32[bad][:3], g64[bad][:3])
        checked += keep.sum()
    assert checked >= len(s64.columns) * 1000


@pytest.mark.slow
def test_float32_sensitivities_of_mfu_match_float64_across_presets():
    """The issue's inputs (matmul efficiency, micro-batch) and the hardware knobs."""
    check_float32_against_float64(
        ("mfu_percent", "step_time_ms"),
        ("matmul_efficiency", "micro_batch", "compute_tflops", "network_bandwidth_gb_s"),
        "gradient")


@pytest.mark.slow
def test_float32_sensitivities_match_float64_for_every_input():
    check_float32_against_float64(OF, continuous_inputs(REFINED), "both")
