"""Sweep rate with sensitivities (and a solve) against the plain sweep, in one run.

Rates are configurations per second on the same configurations, measured in
this run (compile time reported apart; paths timed in alternation, best of several):

  (a) plain:        jit(vmap(model.apply)) on a batch of random configurations,
  (b) sensitivity:  jit(vmap(model.apply + sensitivity_kernel)) on the same batch
                    (default: step time, MFU, throughput against every
                    continuous input, gradients: 30 columns),
  (c) engine plain: the sweep engine in memory (device chunks), no extras,
  (d) engine + [sensitivity]: the same plan with the sensitivity kernel as an
                    extra per-row kernel, computed in the same device pass,
  (e) engine + [solve]: the same plan with MFU = 60% by link bandwidth,
  (f) sweep plain to Parquet (``run_sweep``, end to end, best of two),
  (g) sweep + [sensitivity] to Parquet (30 more float columns written).

Target (issue 4): a sweep with sensitivities at >= 1/4 of the plain sweep's
rate: (g) >= (f) / 4; the device-only ratios (b / a, d / c) are reported too.

  python bench/sensitivity.py [--rows 1048576] [--kind gradient]

Writes bench/results/sensitivity.json.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa

from jaxmodel.engine import Extra, Plan, run_sweep
from jaxmodel.models import get_model
from jaxmodel.precision import computing, float_dtype
from jaxmodel.sensitivity import sensitivity_column_info, sensitivity_kernel
from jaxmodel.sink import Column
from jaxmodel.solving import solve_column_info, solve_kernel
from jaxmodel.spec import parse_spec

ROOT = Path(__file__).resolve().parents[1]
SPEC = """
[base]
model_params_b = 70
seq_length = 4096
hidden_dim = 8192
num_layers = 80

[axes]
link_bandwidth_gb_s = {{geomspace = [25, 3200, {n_bw}]}}
num_gpus = {{powers_of_two = [64, 16384]}}
compute_tflops = [312, 500, 989, 2250]
tensor_parallel = {{powers_of_two = [1, 8]}}
pipeline_parallel = [1, 2, 4, 8, 16]
micro_batch = {{powers_of_two = [1, 8]}}
gradient_accum_steps = {{powers_of_two = [1, 128]}}
"""
GRID_PER_BW = 9 * 4 * 4 * 5 * 4 * 8


def interleaved(fns: dict, repeats: int = 5) -> tuple[dict, dict]:
    """(first-call seconds, best seconds) of each function, timed in alternation
    so that a machine shared with other work slows every path alike."""
    first, best = {}, {k: math.inf for k in fns}
    for k, fn in fns.items():
        t0 = time.perf_counter()
        fn()
        first[k] = time.perf_counter() - t0
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return first, best


def random_batch(model, n: int, dtype) -> tuple:
    """Seed-like configurations: whole counts, positive floats, some invalid layouts."""
    rng = np.random.default_rng(0)
    cols = {}
    for f in model.inputs:
        if f.integer:
            hi = f.default * 4 if f.high is None or f.high > 8 else f.high
            v = np.round(np.exp(rng.uniform(np.log(max(f.low, 1.0)), np.log(max(hi, 1.0)), n)))
            cols[f.name] = np.clip(v, f.low, f.high)
        else:
            hi = f.high if f.high is not None else f.default * 4
            cols[f.name] = rng.uniform(max(f.low, hi * 1e-3), hi, n)
    return model.inputs_type(*(jnp.asarray(cols[f.name], dtype) for f in model.inputs))


def columns(info, dtype, bools=()) -> tuple[Column, ...]:
    ftype = pa.float64() if dtype == np.float64 else pa.float32()
    return tuple(Column(name, pa.bool_() if name in bools else ftype, unit, doc)
                 for name, unit, doc in info)


def engine_pass(plan: Plan):
    """Every chunk of a plan evaluated on the device (in memory), blocking."""

    def run():
        with computing():
            jax.block_until_ready([plan.step(k) for k in range(plan.num_chunks)])

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1 << 20)
    ap.add_argument("--kind", default="gradient", choices=["gradient", "elasticity", "both"])
    ap.add_argument("--x64", action="store_true")
    ap.add_argument("--skip-solve", action="store_true")
    args = ap.parse_args()

    model = get_model("seed")
    dtype = float_dtype(args.x64)
    n = args.rows
    sens = sensitivity_kernel(model, kind=args.kind)
    info = sensitivity_column_info(model, kind=args.kind)
    print(f"rows: {n:,}, sensitivity columns: {len(info)} ({args.kind}), "
          f"devices: {jax.devices()}")

    with computing():
        x = random_batch(model, n, dtype)
    plain = jax.jit(jax.vmap(model.apply))
    both = jax.jit(jax.vmap(lambda r: (model.apply(r), sens(r))))

    def raw(fn):
        def run():
            with computing():
                jax.block_until_ready(fn(x))
        return run

    first, best = interleaved({"a_plain": raw(plain), "b_sensitivity": raw(both)})
    rates = {k: n / v for k, v in best.items()}
    compile_s = {k: first[k] - best[k] for k in best}

    spec = parse_spec(SPEC.format(n_bw=max(n // GRID_PER_BW, 1)), name="bench-sensitivity")
    chunk = min(spec.size, 1 << 20)
    plans = {
        "c_engine_plain": Plan(spec, x64=args.x64, chunk_size=chunk),
        "d_engine_sensitivity": Plan(spec, x64=args.x64, chunk_size=chunk,
                                     extras=[Extra(sens, columns(info, dtype))]),
    }
    if not args.skip_solve:
        solver = solve_kernel(model, "mfu_percent", 60.0, "link_bandwidth_gb_s")
        sinfo = solve_column_info(model, "mfu_percent", "link_bandwidth_gb_s")
        plans["e_engine_solve"] = Plan(spec, x64=args.x64, chunk_size=chunk, extras=[
            Extra(solver, columns(sinfo, dtype, bools=("solve_reached", "solve_blocked")))])
    first, best = interleaved({k: engine_pass(p) for k, p in plans.items()}, repeats=3)
    rates.update({k: spec.size / v for k, v in best.items()})
    compile_s.update({k: first[k] - best[k] for k in best})

    tmp = Path(tempfile.mkdtemp(prefix="jaxmodel-bench-sens-"))
    try:
        def sweep_to_parquet(key, extras):
            def run():
                shutil.rmtree(tmp / "ds", ignore_errors=True)
                plan = Plan(spec, x64=args.x64, chunk_size=chunk, extras=extras)
                seconds = run_sweep(plan, tmp / "ds").compile_seconds
                compile_s.setdefault(key, seconds)  # the first (cold) run's
            return run

        sweeps = {"f_sweep_plain": [],
                  "g_sweep_sensitivity": [Extra(sens, columns(info, dtype))]}
        _, best = interleaved({k: sweep_to_parquet(k, e) for k, e in sweeps.items()},
                              repeats=2)
        rates.update({k: spec.size / v for k, v in best.items()})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    ratios = {"g_over_f": rates["g_sweep_sensitivity"] / rates["f_sweep_plain"],
              "b_over_a": rates["b_sensitivity"] / rates["a_plain"],
              "d_over_c": rates["d_engine_sensitivity"] / rates["c_engine_plain"]}
    if "e_engine_solve" in rates:
        ratios["e_over_c"] = rates["e_engine_solve"] / rates["c_engine_plain"]
    res = {
        "machine": {"platform": platform.platform(), "devices": [str(d) for d in jax.devices()],
                    "jax": jax.__version__},
        "rows": n, "engine_configurations": spec.size, "kind": args.kind,
        "sensitivity_columns": len(info), "x64": args.x64,
        "rates_configs_per_s": rates, "compile_seconds": compile_s, "ratios": ratios,
        "targets": {"g_over_f": 0.25},
    }
    print(f"{'path':<26}{'configs/s':>16}{'compile s':>12}")
    for k, v in rates.items():
        print(f"{k:<26}{v:>16,.0f}{compile_s[k]:>12.2f}")
    for k, v in ratios.items():
        target = res["targets"].get(k)
        print(f"ratio {k:<20}{v:>16.3f}" + (f"   (target >= {target})" if target else ""))
    out = ROOT / "bench" / "results" / "sensitivity.json"
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
