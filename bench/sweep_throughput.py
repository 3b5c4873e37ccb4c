"""Sweep throughput: the engine against numpy, a Python loop and a raw pyarrow write.

All rates are configurations (rows) per second measured in this one run on
the same configurations (the bundled default sweep, ~2.9M configurations):

  (a) the engine evaluating in memory (device chunks, block until ready),
  (b) numpy: the same grid decoded and evaluated with vectorised formulas
      (bench/numpy_seed.py, every output),
  (c) a plain Python loop (tests/reference.py, on a subset, per-row rate),
  (d) the engine end to end to Parquet (jaxmodel sweep),
  (e) a raw pyarrow write of the same rows with the same writer settings,

  (f) the engine in memory on the refined model, same axes (vs (a): its cost),

then the peak RSS of a 100M-configuration sweep in a fresh process.
Targets: (a) >= 20x (b); (d) >= 0.8x (e); peak RSS < 2 GiB.

  python bench/sweep_throughput.py [--rss-configs 100000000] [--skip-rss]

Writes bench/results/sweep_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from numpy_seed import seed_numpy  # noqa: E402
from reference import seed_reference  # noqa: E402

from jaxmodel.engine import run_sweep  # noqa: E402
from jaxmodel.precision import computing  # noqa: E402
from jaxmodel.spec import load_spec, parse_spec  # noqa: E402
from jaxmodel.sweep import build_plan  # noqa: E402

SPEC = ROOT / "sweeps" / "default.toml"


def best_of(fn, repeats=3):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def engine_in_memory(plan) -> tuple[float, float]:
    """(compile seconds, run seconds) of evaluating every chunk on the device."""
    with computing():
        t0 = time.perf_counter()
        jax.block_until_ready(plan.step(0))
        compile_s = time.perf_counter() - t0

        def run():
            outs = [plan.step(k) for k in range(plan.num_chunks)]
            jax.block_until_ready(outs)

        return compile_s, best_of(run)


def rss_child(configs: int, directory: Path) -> dict:
    """Run a sweep of ``configs`` configurations in a fresh process; its peak RSS."""
    n_bw = max(configs // (9 * 4 * 4 * 5 * 4 * 8), 1)
    text = SPEC.read_text().replace("{geomspace = [25, 3200, 128]}",
                                    f"{{geomspace = [25, 3200, {n_bw}]}}")
    text = text.replace('path = "out/default"', f'path = "{directory}"')
    text += '\ncolumns = ["link_bandwidth_gb_s", "num_gpus", "mfu_percent", "step_time_ms"]\n'
    spec_path = directory.parent / "rss.toml"
    spec_path.write_text(text)
    size = load_spec(spec_path).size
    # VmHWM, the process's own high-water mark: ru_maxrss would carry the
    # parent's peak across fork + exec on Linux.
    code = ("import sys, time; from jaxmodel.sweep import sweep; t=time.perf_counter(); "
            "r = sweep(sys.argv[1]); s = time.perf_counter()-t; "
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]; "
            "print(r.rows, s, hwm.split()[1])")
    out = subprocess.run([sys.executable, "-c", code, str(spec_path)], check=True,
                         capture_output=True, text=True).stdout.split()
    return {"configurations": size, "rows": int(out[0]), "seconds": float(out[1]),
            "peak_rss_mib": int(out[2]) / 1024.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rss-configs", type=int, default=100_000_000)
    ap.add_argument("--skip-rss", action="store_true")
    ap.add_argument("--python-rows", type=int, default=20_000)
    args = ap.parse_args()

    spec = load_spec(SPEC)
    plan = build_plan(spec)
    n = spec.size
    print(f"configurations: {n:,} ({SPEC.name}), devices: {jax.devices()}")

    compile_s, engine_s = engine_in_memory(plan)
    rate_a = n / engine_s

    # The refined model on the same axes (its own defaults: Llama-2-70B on H100s).
    axes = SPEC.read_text().split("[axes]")[1].split("[output]")[0]
    refined = build_plan(parse_spec('model = "refined"\n[axes]' + axes, "refined"))
    refined_compile_s, refined_s = engine_in_memory(refined)
    rate_f = refined.size / refined_s

    ids = np.arange(n)
    inputs = plan.space.host_inputs(ids)
    # numpy decodes the grid (np.unravel_index + gathers) and evaluates, like the engine.
    rate_b = n / best_of(lambda: seed_numpy(plan.space.host_inputs(ids)))

    sub = np.linspace(0, n - 1, args.python_rows).astype(np.int64)
    rows = [{k: (int(v[i]) if plan.model.input_field(k).integer else float(v[i]))
             for k, v in inputs.items()} for i in sub]
    t0 = time.perf_counter()
    for r in rows:
        seed_reference(**r)
    rate_c = len(rows) / (time.perf_counter() - t0)

    tmp = Path(tempfile.mkdtemp(prefix="jaxmodel-bench-"))
    try:
        e2e_plan = build_plan(spec)

        def end_to_end():
            shutil.rmtree(tmp / "ds", ignore_errors=True)
            return run_sweep(e2e_plan, tmp / "ds")

        t0 = time.perf_counter()
        end_to_end()  # compiles
        d_compile = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = end_to_end()  # the same plan: compiled already
        rate_d = n / (time.perf_counter() - t0)
        d_compile -= time.perf_counter() - t0

        table = ds.dataset(tmp / "ds").to_table().sort_by("config_id")
        writer = result  # same settings as PartWriter: see jaxmodel.sink
        dictionary = [c.name for c in plan.columns if c.categories]
        per_file = spec.output.rows_per_file

        def raw_write():
            shutil.rmtree(tmp / "raw", ignore_errors=True)
            (tmp / "raw").mkdir()
            for i, start in enumerate(range(0, table.num_rows, per_file)):
                with pq.ParquetWriter(tmp / "raw" / f"part-{i}.parquet", table.schema,
                                      compression=spec.output.compression,
                                      use_dictionary=dictionary) as w:
                    w.write_table(table.slice(start, per_file),
                                  row_group_size=spec.output.row_group_size)

        rate_e = n / best_of(raw_write, repeats=2)
        del writer

        rss = None
        if not args.skip_rss:
            # Bounded memory means the peak does not grow with the sweep: a
            # tenth of the size for comparison, and two tries of the full one
            # (the peak varies with how far the writer thread lags).
            rss = {"runs": []}
            for i, configs in enumerate([args.rss_configs // 10, args.rss_configs,
                                         args.rss_configs]):
                run_dir = tmp / f"rss{i}"
                run_dir.mkdir()
                rss["runs"].append(rss_child(configs, run_dir / "ds"))
            full = [r for r in rss["runs"] if r["configurations"] > args.rss_configs // 2]
            rss.update(max(full, key=lambda r: r["peak_rss_mib"]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    res = {
        "machine": {"platform": platform.platform(), "devices": [str(d) for d in jax.devices()],
                    "jax": jax.__version__},
        "configurations": n,
        "rates_configs_per_s": {"a_engine_in_memory": rate_a, "b_numpy": rate_b,
                                "c_python_loop": rate_c, "d_engine_to_parquet": rate_d,
                                "e_raw_pyarrow_write": rate_e,
                                "f_engine_in_memory_refined_model": rate_f},
        "compile_seconds": {"in_memory": compile_s, "end_to_end": d_compile,
                            "refined_in_memory": refined_compile_s},
        "ratios": {"a_over_b": rate_a / rate_b, "a_over_c": rate_a / rate_c,
                   "d_over_e": rate_d / rate_e, "f_over_a": rate_f / rate_a},
        "targets": {"a_over_b": 20.0, "d_over_e": 0.8, "peak_rss_mib": 2048},
        "rss": rss,
        "self_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }
    print(f"{'path':<34}{'configs/s':>16}")
    for k, v in res["rates_configs_per_s"].items():
        print(f"{k:<34}{v:>16,.0f}")
    print(f"compile: in memory {compile_s:.2f} s, end to end ~{d_compile:.2f} s (first run - "
          "second run; apart from the rates)")
    for k, v in res["ratios"].items():
        print(f"ratio {k:<28}{v:>16,.2f}")
    if rss:
        for r in rss["runs"]:
            print(f"peak RSS of a {r['configurations']:,}-configuration sweep: "
                  f"{r['peak_rss_mib']:,.0f} MiB ({r['seconds']:.1f} s, {r['rows']:,} rows)")
    out = ROOT / "bench" / "results" / "sweep_throughput.json"
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
