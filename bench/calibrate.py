"""Calibration speed: the bootstrap as one vmapped batch against a loop of fits.

Measured in one run, on whatever jax finds (GPU if any, else CPU), for 10
runs of the refined model (SC21 Table 1, the measured per-GPU TFLOP/s) and
the refined model's cluster parameters (six, the default ``--fit``):

1. The batch alone: ``calibrate.fit_batch`` on 1 + 10 + 200 weight rows,
   compile apart from run (best of ``--repeats``).
2. Baseline: the same solver compiled for one weight row, called in a
   Python loop over ``--loop`` resamples, extrapolated to 211 fits.
3. ``jaxmodel.calibrate`` end to end (the fit, 10 leave-one-out fits, 200
   bootstrap resamples, diagnostics, suggestions): first call (compiles
   what step 1 did not: the evaluation, Jacobian and prediction programs)
   and a second call (every program cached).

Prints a table and writes ``bench/results/calibrate.json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxmodel
from jaxmodel.models import get_model
from jaxmodel.models.validation import sc21_runs
from jaxmodel.precision import computing

C = importlib.import_module("jaxmodel.calibration")
HERE = Path(__file__).resolve().parent


def runs_table():
    inputs = [r.inputs() for r in sc21_runs()]
    shared = {k: v for k, v in inputs[0].items() if all(row[k] == v for row in inputs)}
    table = {k: np.array([row[k] for row in inputs]) for k in inputs[0] if k not in shared}
    table["measured_hardware_tflops_per_gpu"] = np.array([r.measured_tflops
                                                         for r in sc21_runs()])
    return table, shared


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resamples", type=int, default=200)
    ap.add_argument("--loop", type=int, default=20, help="fits timed in the Python loop")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    table, shared = runs_table()
    model = get_model("refined")
    names = model.cluster
    # The batch alone (compiled fresh, before calibrate() compiles it), and
    # the loop baseline, on the same arrays.
    base = {**shared, **{k: v[0] for k, v in table.items() if not k.startswith("measured")}}
    data = C.read_runs(table, model, {**model.defaults, **base})
    fields = [model.input_field(n) for n in names]
    lo = np.array([f.low for f in fields])
    hi = np.array([np.inf if f.high is None else f.high for f in fields])
    x0 = np.array([data.inputs[n][0] for n in names])
    z0 = C._to_z(x0, lo, hi)
    rows = np.stack([data.inputs[n] for n in model.input_names], axis=1)
    mask = ~np.isnan(data.measured)
    log_m = np.where(mask, np.log(np.where(mask, data.measured, 1.0)), 0.0)
    n = data.n
    rng = np.random.default_rng(0)
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=args.resamples).astype(float)
    weights = np.concatenate([np.ones((1, n)), 1.0 - np.eye(n), counts])[:, :, None] * mask
    static = {"model": model, "fit_index": tuple(model.input_names.index(k) for k in names),
              "out_names": data.outputs}
    with computing():
        arrays = [jnp.asarray(a) for a in (z0, lo, hi, rows, log_m)]
        t0 = time.perf_counter()
        compiled = C.fit_batch.lower(*arrays, jnp.asarray(weights), **static).compile()
        batch_compile = time.perf_counter() - t0
        batch_runs = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(*arrays, jnp.asarray(weights)))
            batch_runs.append(time.perf_counter() - t0)
        one = C.fit_batch.lower(*arrays, jnp.asarray(weights[:1]), **static).compile()
        jax.block_until_ready(one(*arrays, jnp.asarray(weights[:1])))
        t0 = time.perf_counter()
        for w in weights[1 + n:1 + n + args.loop]:
            jax.block_until_ready(one(*arrays, jnp.asarray(w[None])))
        per_fit = (time.perf_counter() - t0) / args.loop
    fits = len(weights)
    t0 = time.perf_counter()
    cal = jaxmodel.calibrate(table, model=model, bootstrap=args.resamples, **shared)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    jaxmodel.calibrate(table, model=model, bootstrap=args.resamples, **shared)
    second = time.perf_counter() - t0
    batch = min(batch_runs)
    loop = per_fit * fits
    result = {
        "device": str(jax.devices()[0]), "platform": platform.platform(),
        "jax": jax.__version__, "runs": n, "resamples": args.resamples, "fits": fits,
        "fit": list(names),
        "calibrate_first_call_s": first, "calibrate_second_call_s": second,
        "batch_compile_s": batch_compile, "batch_run_s": batch,
        "loop_per_fit_s": per_fit, "loop_extrapolated_s": loop,
        "batch_speedup_over_loop": loop / batch,
        "bootstrap_converged": cal.bootstrap["converged"],
    }
    print(f"{n} runs, {args.resamples} resamples, {len(names)} parameters "
          f"({', '.join(names)}), {result['device']}")
    print(f"{'measure':<52}{'value':>14}")
    for label, value in (
        ("calibrate(), first call (compiles)", f"{first:.2f} s"),
        ("calibrate(), second call", f"{second:.2f} s"),
        (f"batch of {fits} fits: compile", f"{batch_compile:.2f} s"),
        (f"batch of {fits} fits: run (best of {args.repeats})", f"{batch * 1e3:.1f} ms"),
        (f"loop of single fits: per fit ({args.loop} timed)", f"{per_fit * 1e3:.2f} ms"),
        (f"loop of single fits: {fits} fits (extrapolated)", f"{loop * 1e3:.1f} ms"),
        ("batch / loop speed", f"{loop / batch:.1f}x"),
    ):
        print(f"{label:<52}{value:>14}")
    out = HERE / "results" / "calibrate.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
