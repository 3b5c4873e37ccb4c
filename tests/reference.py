"""An independent plain-Python float64 implementation of SEED_MODEL.md.

Written from the formulas in ``shared/reference/SEED_MODEL.md`` in SI units,
one configuration at a time, without jax or numpy, so that the jitted,
vmapped model can be checked against it.
"""

from __future__ import annotations

import math

TERMS = ("compute", "tp_comm", "pp_comm", "pipeline_bubble", "dp_allreduce")


def ring_allreduce(nbytes: float, n: int, bandwidth: float) -> float:
    return 0.0 if n == 1 else 2.0 * (n - 1) / n * nbytes / bandwidth


def seed_reference(
    model_params_b, num_gpus, tensor_parallel, pipeline_parallel, micro_batch,
    gradient_accum_steps, seq_length, hidden_dim, num_layers, link_bandwidth_gb_s,
    compute_tflops,
) -> dict:
    P = model_params_b * 1e9
    B = link_bandwidth_gb_s * 1e9
    F = compute_tflops * 1e12
    t, p = tensor_parallel, pipeline_parallel
    b, m, s = micro_batch, gradient_accum_steps, seq_length
    h, L = hidden_dim, num_layers
    d = num_gpus // (t * p)
    used = d * t * p
    tokens = b * m * s * d
    out = {
        "data_parallel": d,
        "used_gpus": used,
        "idle_gpus": num_gpus - used,
        "tokens_per_step": tokens,
        "valid_layout": d >= 1 and L % p == 0 and h % t == 0,
    }
    if not out["valid_layout"]:
        return out
    compute = 6 * P * tokens / (used * F)
    a = b * s * h * 2
    tp = L * 4 * m * ring_allreduce(a, t, B)
    pp = 2 * m * a / B if p > 1 else 0.0
    bubble = (p - 1) / m * compute
    dp_raw = ring_allreduce(2 * P / (t * p), d, B)
    dp = max(0.0, dp_raw - 2.0 / 3.0 * compute)
    step = compute + tp + pp + bubble + dp
    mfu = compute / step
    terms = [compute, tp, pp, bubble, dp]
    out.update(
        compute_time_ms=compute * 1e3,
        tp_comm_ms=tp * 1e3,
        pp_comm_ms=pp * 1e3,
        pipeline_bubble_ms=bubble * 1e3,
        dp_allreduce_ms=dp * 1e3,
        dp_allreduce_raw_ms=dp_raw * 1e3,
        step_time_ms=step * 1e3,
        comm_fraction_percent=100 * (tp + pp + dp) / step,
        bubble_fraction_percent=100 * bubble / step,
        scaling_efficiency_percent=100 * mfu,
        mfu_percent=100 * mfu,
        achieved_tflops_per_gpu=compute_tflops * mfu,
        throughput_tokens_s=tokens / step,
        per_gpu_tokens_s=tokens / step / used,
        bottleneck=TERMS[terms.index(max(terms))],
        terms=terms,
    )
    assert math.isfinite(step)
    return out
