"""A whole training run from one step: time, GPU-hours, cost, energy and CO2.

A model that knows its step time, its tokens per step and how busy its GPUs
are declares ``RUN_INPUTS`` and ``RUN_OUTPUTS`` beside its own fields and
returns :func:`run_totals` with its outputs.  Everything here is per run:

* ``train_days = train_tokens / throughput``: the run is ``train_tokens /
  tokens_per_step`` steps (fractional: a planner's total, not a schedule);
* ``gpu_hours`` and ``cost_usd`` count every GPU the job holds, the idle ones
  too (a reservation is paid whether a GPU computes or not);
* ``energy_mwh``: the GPUs' board power, the node's share (CPUs, NICs,
  switches, fans) and the facility's overhead (PUE).

Power from utilisation, not a flat TDP.  A GPU draws its board power
(``gpu_power_w``) while it computes and ``gpu_idle_fraction`` of it while it
waits (on a collective, in the bubble, or idle outside the layout):

``P_gpu = P_board (f_idle + (1 - f_idle) u)``, ``u = compute / step``.

Measured clusters draw well under the rated power: an 8-GPU H100 HGX node
training Llama-2-13B peaked at 8.4 kW of its rated 10.2 kW (Latif et al.
2025, "Single-node power demand during AI training", IEEE Access 13, 61740),
and compute-heavy training averaged 76% of the rating (Newkirk et al. 2025,
arXiv:2506.14551), both with the GPUs near full use.  An idle H100 or H200
SXM reads 70-80 W on nvidia-smi, about 10% of its 700 W board power
(``gpu_idle_fraction`` 0.1).  Waiting on NCCL still runs the copy engines
and HBM, so the waiting power is a lower bound and the energy too.  The
node's share is held flat at its datasheet value (CPUs, fans and NICs do not
follow the GPUs' duty cycle); the presets derive it from the system's rated
maximum, which also stands in for the network switches the system rating
leaves out.
"""

from __future__ import annotations

from typing import Any

from jaxmodel.fields import InputField, OutputField

SECONDS_PER_DAY = 86400.0
SECONDS_PER_HOUR = 3600.0
JOULES_PER_MWH = 3.6e9

RUN_INPUTS: tuple[InputField, ...] = (
    # Llama 2 was pre-trained on 2.0T tokens (Touvron et al. 2023, Table 1),
    # the refined model's default LLM.
    InputField("train_tokens", "tokens", "tokens the whole run trains on", False, 0.0, False,
               2.0e12, None),
    # DeepSeek-AI 2024 (DeepSeek-V3 technical report, Table 1) prices an H800
    # GPU-hour at $2 for its training cost.
    InputField("gpu_hour_usd", "USD per GPU-hour", "price of one GPU-hour (rented, or "
               "amortised hardware with its power and hosting)", False, 0.0, True, 2.0, None),
    InputField("gpu_power_w", "W", "board power of one GPU at full load (TDP, datasheet)",
               False, 0.0, False, 700.0, None),
    InputField("gpu_idle_fraction", "fraction", "share of the board power a GPU draws "
               "while it waits (communication, bubble, idle)", False, 0.0, True, 0.1, 1.0),
    InputField("node_power_w", "W", "power of everything else per GPU: CPUs, memory, NICs, "
               "switches, fans (system rating less the GPUs, per GPU)", False, 0.0, True,
               575.0, None),
    # Google's fleet-wide trailing twelve-month PUE was 1.10 in 2023 (Google
    # 2024 Environmental Report); large AI sites report 1.1-1.2.
    InputField("pue", "ratio", "power usage effectiveness: facility power over IT power",
               False, 1.0, True, 1.1, None),
    # US grid average 2022: 823 lb CO2 / MWh = 0.373 kg / kWh (EPA eGRID2022).
    InputField("grid_kg_co2_per_kwh", "kg CO2 / kWh", "carbon intensity of the electricity",
               False, 0.0, True, 0.373, None),
)

RUN_OUTPUTS: tuple[OutputField, ...] = (
    OutputField("train_days", "days", "wall-clock days to train on train_tokens", "float"),
    OutputField("gpu_hours", "GPU-hours", "num_gpus x training hours (idle GPUs included)",
                "float"),
    OutputField("cost_usd", "USD", "gpu_hours x gpu_hour_usd", "float"),
    OutputField("power_mw", "MW", "average facility power of the job: GPUs (by "
                "utilisation), nodes and PUE", "float"),
    OutputField("energy_mwh", "MWh", "facility energy of the run: power_mw x training time",
                "float"),
    OutputField("co2_tonnes", "t CO2", "energy_mwh x grid_kg_co2_per_kwh", "float"),
    OutputField("usd_per_million_tokens", "USD", "cost_usd per million training tokens",
                "float"),
)


def run_totals(x: Any, *, num_gpus, used_gpus, step_s, tokens_per_step,
               busy_fraction) -> dict[str, Any]:
    """The ``RUN_OUTPUTS`` of one configuration (module doc), as a dict.

    Args:
      x: the inputs pytree (with ``RUN_INPUTS``).
      num_gpus, used_gpus: GPUs the job holds and GPUs in its layout (floats).
      step_s: seconds per optimizer step (NaN for an invalid layout: every
        output is then NaN).
      tokens_per_step: tokens per optimizer step (float).
      busy_fraction: share of the step a used GPU computes, in [0, 1].
    """
    seconds = x.train_tokens / tokens_per_step * step_s
    idle_w = x.gpu_power_w * x.gpu_idle_fraction
    used_w = idle_w + (x.gpu_power_w - idle_w) * busy_fraction
    it_w = used_gpus * used_w + (num_gpus - used_gpus) * idle_w + num_gpus * x.node_power_w
    facility_w = it_w * x.pue
    gpu_hours = num_gpus * seconds / SECONDS_PER_HOUR
    cost = gpu_hours * x.gpu_hour_usd
    energy_mwh = facility_w * seconds / JOULES_PER_MWH
    return {
        "train_days": seconds / SECONDS_PER_DAY,
        "gpu_hours": gpu_hours,
        "cost_usd": cost,
        "power_mw": facility_w / 1e6,
        "energy_mwh": energy_mwh,
        # MWh x kg/kWh = 1000 kWh x kg/kWh = tonnes
        "co2_tonnes": energy_mwh * x.grid_kg_co2_per_kwh,
        "usd_per_million_tokens": cost / x.train_tokens * 1e6,
    }
