"""The refined model's cost before and after issue 11 (the 2026 terms), in one run.

Configurations per second of ``jit(vmap(model.apply))`` on the same batch of
random configurations (layouts, micro-batches, bandwidths; the model's
defaults otherwise), and the compile time of each, for:

  (a) before: the refined model as of the baseline commit (that commit's
      package, measured in a subprocess; the model without the 2026 terms),
  (b) after:  the current refined model, the same inputs (new inputs at their
      defaults),
  (c) after, with the 2026 terms exercised: context parallelism, ZeRO-3, FP8,
      ZB-V and uneven stages varying over the batch.

Target (issue 11): (b) and (c) cost at most 2x (a): rate ratio >= 0.5.

  python bench/refined_2026.py [--rows 262144] [--baseline 6fe5bce]

Writes bench/results/refined_2026.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxmodel.models import get_model

ROOT = Path(__file__).resolve().parent.parent


def baseline_rate(commit: str, rows: int, repeats: int) -> dict:
    """(compile seconds, configurations per second) of the refined model as of
    ``commit``: that commit's whole package (``git archive``), measured by
    this script in a subprocess, so the old model runs against its own code."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", commit, "jaxmodel"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        env = {**os.environ, "PYTHONPATH": tmp}
        out = subprocess.run([sys.executable, __file__, "--measure-only", "--rows", str(rows),
                              "--repeats", str(repeats)], env=env, check=True,
                             capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def batch(model, rows: int, rng: np.random.Generator, extra: dict | None = None):
    values = {k: np.full(rows, v, np.float32) for k, v in model.defaults.items()}
    values.update({
        "num_gpus": 2.0 ** rng.integers(3, 14, rows),
        "tensor_parallel": 2.0 ** rng.integers(0, 4, rows),
        "pipeline_parallel": 2.0 ** rng.integers(0, 4, rows),
        "micro_batch": 2.0 ** rng.integers(0, 3, rows),
        "gradient_accum_steps": 2.0 ** rng.integers(2, 7, rows),
        "network_bandwidth_gb_s": rng.uniform(10, 100, rows),
    })
    values.update(extra or {})
    return model.inputs_type(**{k: jnp.asarray(np.asarray(values[k], np.float32))
                                for k in model.input_names})


def measure(model, x, repeats: int) -> tuple[float, float]:
    """(compile seconds, best configurations per second)."""
    f = jax.jit(jax.vmap(model.apply))
    start = time.perf_counter()
    compiled = f.lower(x).compile()
    compile_s = time.perf_counter() - start
    rows = len(x.num_gpus)
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(x))
        best = max(best, rows / (time.perf_counter() - start))
    return compile_s, best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=262_144)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default="6fe5bce")
    parser.add_argument("--measure-only", action="store_true",
                        help="print this package's refined model's figures as JSON (the baseline)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    after = get_model("refined")
    x_after = batch(after, args.rows, np.random.default_rng(0))
    if args.measure_only:
        compile_s, rate = measure(after, x_after, args.repeats)
        print(json.dumps({"compile_s": compile_s, "configs_per_s": rate}))
        return
    n = args.rows
    extra = {"context_parallel": 2.0 ** rng.integers(0, 3, n),
             "zero_stage": rng.integers(0, 4, n).astype(np.float32),
             "fp8": rng.integers(0, 2, n).astype(np.float32),
             "pipeline_schedule": rng.integers(0, 2, n).astype(np.float32),
             "num_layers": rng.integers(60, 81, n).astype(np.float32),
             "tp_overlap": rng.uniform(0, 1, n)}
    x_terms = batch(after, args.rows, np.random.default_rng(0), extra)
    results = {"before": baseline_rate(args.baseline, args.rows, args.repeats)}
    for name, model, x in (("after", after, x_after), ("after, 2026 terms varied", after, x_terms)):
        compile_s, rate = measure(model, x, args.repeats)
        results[name] = {"compile_s": compile_s, "configs_per_s": rate}
    base = results["before"]["configs_per_s"]
    print(f"{'path':<28}{'compile s':>10}{'configs/s':>14}{'vs before':>11}")
    for name, r in results.items():
        r["ratio_vs_before"] = r["configs_per_s"] / base
        print(f"{name:<28}{r['compile_s']:>10.2f}{r['configs_per_s']:>14,.0f}"
              f"{r['ratio_vs_before']:>10.2f}x")
    ok = min(r["ratio_vs_before"] for r in results.values()) >= 0.5
    print(f"target: cost within 2x of before (ratio >= 0.5): {'met' if ok else 'NOT met'}")
    out = ROOT / "bench" / "results" / "refined_2026.json"
    out.write_text(json.dumps({"rows": args.rows, "baseline": args.baseline,
                               "machine": platform.platform(), "jax": jax.__version__,
                               "results": results, "target_met": ok}, indent=2) + "\n")


if __name__ == "__main__":
    main()
