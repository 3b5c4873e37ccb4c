"""Run totals (``jaxmodel.models.run``): time, GPU-hours, cost, energy and CO2,
by hand, and through the refined model (idle GPUs paid and powered)."""

from types import SimpleNamespace

import numpy as np
import pytest

import jaxmodel
from jaxmodel.api import as_dicts
from jaxmodel.models.presets import GPUS
from jaxmodel.models.refined import REFINED
from jaxmodel.models.run import run_totals

# Round numbers: 1e9 tokens at 1e6 tokens a step and 2 s a step is 2,000 s.
X = SimpleNamespace(train_tokens=1e9, gpu_hour_usd=2.0, gpu_power_w=1000.0,
                    gpu_idle_fraction=0.1, node_power_w=500.0, pue=1.2,
                    grid_kg_co2_per_kwh=0.5)


def test_run_totals_by_hand():
    out = run_totals(X, num_gpus=10.0, used_gpus=8.0, step_s=2.0, tokens_per_step=1e6,
                     busy_fraction=0.5)
    # idle GPU 0.1 x 1000 = 100 W; a used GPU 100 + 900 x 0.5 = 550 W;
    # IT power 8 x 550 + 2 x 100 + 10 x 500 = 9,600 W; facility x 1.2 = 11,520 W.
    assert out["train_days"] == pytest.approx(2000 / 86400)
    assert out["gpu_hours"] == pytest.approx(10 * 2000 / 3600)
    assert out["cost_usd"] == pytest.approx(2 * 10 * 2000 / 3600)
    assert out["power_mw"] == pytest.approx(0.01152)
    assert out["energy_mwh"] == pytest.approx(11520 * 2000 / 3.6e9)  # 0.0064 MWh
    assert out["co2_tonnes"] == pytest.approx(0.0064 * 0.5)  # 6.4 kWh x 0.5 kg
    assert out["usd_per_million_tokens"] == pytest.approx(2 * 10 * 2000 / 3600 / 1000)


def test_waiting_gpus_draw_less():
    busy = run_totals(X, num_gpus=8.0, used_gpus=8.0, step_s=1.0, tokens_per_step=1e6,
                      busy_fraction=1.0)
    waiting = run_totals(X, num_gpus=8.0, used_gpus=8.0, step_s=1.0, tokens_per_step=1e6,
                         busy_fraction=0.0)
    # 8 x (1000 + 500) W against 8 x (100 + 500) W
    assert busy["power_mw"] == pytest.approx(8 * 1500 * 1.2 / 1e6)
    assert waiting["power_mw"] == pytest.approx(8 * 600 * 1.2 / 1e6)
    assert busy["cost_usd"] == waiting["cost_usd"]


SMALL = {"num_gpus": 16, "tensor_parallel": 8, "pipeline_parallel": 2, "micro_batch": 1,
         "gradient_accum_steps": 8, "train_tokens": 1e11, "gpu_hour_usd": 3.0,
         "gpu_memory_gb": 1e6}


@pytest.mark.slow
def test_refined_run_outputs_count_idle_gpus():
    """Through the refined model: the totals follow from its own step, tokens and
    compute share, and the two idle GPUs of 18 (t8 p2 d1) are paid and powered."""
    rows = []
    for n in (16, 18):
        rows.append(as_dicts(REFINED, jaxmodel.evaluate(REFINED, x64=True,
                                                        **{**SMALL, "num_gpus": n})))
    full, idle = rows
    assert idle["idle_gpus"] == 2 and idle["used_gpus"] == 16
    assert full["data_parallel"] == idle["data_parallel"] == 1
    step_s = full["step_time_ms"] / 1e3
    seconds = 1e11 / full["tokens_per_step"] * step_s
    assert full["train_days"] == pytest.approx(seconds / 86400, rel=1e-9)
    assert full["gpu_hours"] == pytest.approx(16 * seconds / 3600, rel=1e-9)
    assert full["cost_usd"] == pytest.approx(3.0 * 16 * seconds / 3600, rel=1e-9)
    assert idle["cost_usd"] == pytest.approx(full["cost_usd"] * 18 / 16, rel=1e-9)
    u = full["compute_time_ms"] / full["step_time_ms"]
    gpu_w = 700 * (0.1 + 0.9 * u)
    power_w = (16 * gpu_w + 16 * 575) * 1.1
    assert full["power_mw"] == pytest.approx(power_w / 1e6, rel=1e-9)
    assert idle["power_mw"] == pytest.approx((power_w + 2 * (70 + 575) * 1.1) / 1e6,
                                             rel=1e-9)
    assert full["energy_mwh"] == pytest.approx(power_w * seconds / 3.6e9, rel=1e-9)
    assert full["co2_tonnes"] == pytest.approx(full["energy_mwh"] * 0.373, rel=1e-9)
    assert full["usd_per_million_tokens"] == pytest.approx(full["cost_usd"] / 1e5, rel=1e-9)


@pytest.mark.slow
def test_invalid_layout_has_no_run():
    out = as_dicts(REFINED, jaxmodel.evaluate(REFINED, **{**SMALL, "tensor_parallel": 3}))
    assert not out["valid_layout"]
    assert all(np.isnan(out[k]) for k in ("train_days", "cost_usd", "energy_mwh"))


def test_every_gpu_preset_has_its_power():
    for name, preset in GPUS.items():
        assert preset.values["gpu_power_w"] >= 400, name
        assert preset.values["node_power_w"] > 0, name
