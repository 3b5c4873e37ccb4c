"""Output fields that mean the same in every model, defined once.

Models list them in their ``OUTPUTS`` beside their own; sweeps, search,
sensitivities and plots rely on these names meaning the same everywhere.
"""

from __future__ import annotations

from jaxmodel.fields import OutputField
from jaxmodel.models.terms import SHARED_TERMS, bottleneck_output
from jaxmodel.models.verdicts import REGIMES

SHARED_OUTPUTS: dict[str, OutputField] = {f.name: f for f in (
    OutputField("data_parallel", "replicas", "d = floor(num_gpus / (t p))", "int"),
    OutputField("used_gpus", "GPUs", "d t p, GPUs doing work", "int"),
    OutputField("idle_gpus", "GPUs", "num_gpus - used_gpus", "int"),
    OutputField("tokens_per_step", "tokens", "b m s d, tokens per optimizer step", "int"),
    OutputField("step_time_ms", "ms", "time of one optimizer step", "float"),
    OutputField("comm_fraction_percent", "%", "(tp + pp + exposed dp) / step", "float"),
    OutputField("bubble_fraction_percent", "%", "pipeline bubble / step", "float"),
    OutputField("throughput_tokens_s", "tokens/s", "tokens_per_step / step time", "float"),
    OutputField("per_gpu_tokens_s", "tokens/s", "throughput / used_gpus", "float"),
    bottleneck_output(SHARED_TERMS),
    OutputField("regime", "", "verdict regime", "category", REGIMES),
)}
