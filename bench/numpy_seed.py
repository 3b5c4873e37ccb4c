"""The seed model's formulas vectorised with numpy: the baseline that the
engine's in-memory rate is compared with (bench/sweep_throughput.py).

Same formulas and dtype as ``jaxmodel.models.seed`` (SEED_MODEL.md), written
the way a careful numpy user would: whole-array operations, no Python loop,
every output the engine produces.
"""

from __future__ import annotations

import numpy as np


def seed_numpy(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    f = x["model_params_b"].dtype.type
    n = np.round(x["num_gpus"]).astype(np.int64)
    t_i = np.round(x["tensor_parallel"]).astype(np.int64)
    p_i = np.round(x["pipeline_parallel"]).astype(np.int64)
    d_i = n // (t_i * p_i)
    valid = (d_i >= 1) & (np.round(x["num_layers"]).astype(np.int64) % p_i == 0) & (
        np.round(x["hidden_dim"]).astype(np.int64) % t_i == 0)
    d = np.maximum(d_i, 1).astype(f)
    t, p, m, b, s = (x["tensor_parallel"], x["pipeline_parallel"], x["gradient_accum_steps"],
                     x["micro_batch"], x["seq_length"])
    bw = x["link_bandwidth_gb_s"] * f(1e6)
    tokens = b * m * s * d
    used = d * t * p
    compute = f(6) * x["model_params_b"] * tokens / (used * x["compute_tflops"])
    act = b * s * x["hidden_dim"] * f(2)
    tp = x["num_layers"] * f(4) * m * (f(2) * (t - 1) / t * act) / bw
    pp = np.where(p_i > 1, f(2) * m * act / bw, f(0))
    bubble = (p - 1) / m * compute
    dp_raw = f(2) * (d - 1) / d * (f(2) * x["model_params_b"] / (t * p)) / x[
        "link_bandwidth_gb_s"] * f(1e3)
    dp = np.maximum(dp_raw - f(2) / f(3) * compute, f(0))
    step = compute + tp + pp + bubble + dp
    mfu = f(100) * compute / step
    terms = np.stack([compute, tp, pp, bubble, dp])
    top = np.argmax(terms, axis=0)
    nan = f(np.nan)
    regime = np.where(top == 0, np.where(mfu >= 75, 0, 1), np.where(top == 3, 3, 2))
    throughput = tokens / step * f(1e3)

    def masked(v):
        return np.where(valid, v, nan)

    return {
        "data_parallel": d_i, "used_gpus": d_i * t_i * p_i, "idle_gpus": n - d_i * t_i * p_i,
        "valid_layout": valid,
        "tokens_per_step": np.round(b).astype(np.int64) * np.round(m).astype(np.int64)
        * np.round(s).astype(np.int64) * d_i,
        "compute_time_ms": masked(compute), "tp_comm_ms": masked(tp), "pp_comm_ms": masked(pp),
        "pipeline_bubble_ms": masked(bubble), "dp_allreduce_ms": masked(dp),
        "dp_allreduce_raw_ms": masked(dp_raw), "step_time_ms": masked(step),
        "comm_fraction_percent": masked(f(100) * (tp + pp + dp) / step),
        "bubble_fraction_percent": masked(f(100) * bubble / step),
        "scaling_efficiency_percent": masked(mfu), "mfu_percent": masked(mfu),
        "achieved_tflops_per_gpu": masked(x["compute_tflops"] * mfu / f(100)),
        "throughput_tokens_s": masked(throughput),
        "per_gpu_tokens_s": masked(throughput / used),
        "bottleneck": np.where(valid, top, 5), "regime": np.where(valid, regime, 4),
    }
