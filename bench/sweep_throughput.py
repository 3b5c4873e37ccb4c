"""Sweep throughput: the engine against numpy, a Python loop and a raw pyarrow write.

All rates are configurations (rows) per second measured in this one run on
the same configurations (the bundled default sweep, ~2.9M configurations):

  (a) the engine evaluating in memory (device chunks, block until ready),
  (b) numpy: the same grid decoded and evaluated with vectorised formulas
      (bench/numpy_seed.py, every output),
  (c) a plain Python loop (tests/reference.py, on a subset, per-row rate),
  (d1), (dN) the engine to Parquet (run_sweep, compiled) with 1 and N writers,
  (e1), (eN) raw pyarrow writes of the same rows with the same writer
      settings, by 1 thread and by N threads at once,

  (f) the engine in memory on the refined model, same axes (vs (a): its cost),

then, each as a whole process (start-up and compile included), on the same
grid with BANDWIDTHS bandwidths (1024: 23,592,960 configurations):

  (g1), (gN) ``jaxmodel sweep`` with ``--writers 1`` and ``--writers N``,
  (h) the user's numpy + pyarrow script (bench/numpy_pyarrow_sweep.py),

repeated and interleaved (medians reported, load hits every path alike);
the cost of the constant columns (plain LZ4 before, dictionary after: bytes
per row and rows/s); the dry run's estimate against (gN); the model's
projection for 16 cores; then the peak RSS of a 100M-configuration sweep.
N is the number of usable cores.
Targets: (a) >= 20x (b); (gN) >= 2.5x (h); (dN) >= 0.8x (eN); RSS < 2 GiB.

  python bench/sweep_throughput.py [--bandwidths 1024] [--repeats 3]
                                   [--rss-configs 100000000] [--skip-rss]

Writes bench/results/sweep_throughput.json.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from numpy_seed import seed_numpy  # noqa: E402
from reference import seed_reference  # noqa: E402

from jaxmodel.engine import DEFAULT_CHUNK, run_sweep, usable_cores  # noqa: E402
from jaxmodel.precision import computing  # noqa: E402
from jaxmodel.sink import parquet_options, to_table  # noqa: E402
from jaxmodel.spec import load_spec  # noqa: E402
from jaxmodel.sweeping import build_plan, estimate, expected_seconds  # noqa: E402

SPEC = ROOT / "sweeps" / "seed_default.toml"
REFINED_SPEC = ROOT / "sweeps" / "default.toml"
LOAD_AT_START = (0.0, 0.0, 0.0)
JAXMODEL = str(Path(sys.executable).with_name("jaxmodel"))


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


def timed(cmd: list[str]) -> float:
    """Wall seconds of a whole process (start-up included)."""
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0


def grid_spec(bandwidths: int, directory: Path) -> Path:
    """sweeps/seed_default.toml with ``bandwidths`` link bandwidths."""
    text = SPEC.read_text().replace("{geomspace = [25, 3200, 128]}",
                                    f"{{geomspace = [25, 3200, {bandwidths}]}}")
    path = directory / f"grid{bandwidths}.toml"
    path.write_text(text)
    return path


def whole_process(bandwidths: int, writers: int, repeats: int, tmp: Path,
                  chunk_size: int) -> dict:
    """(g1), (gN) and (h), interleaved ``repeats`` times; medians and ratios."""
    spec_path = grid_spec(bandwidths, tmp)
    size = load_spec(spec_path).size
    paths = {
        "g1": [JAXMODEL, "sweep", str(spec_path), "-o", str(tmp / "g"), "--overwrite", "-q",
               "--writers", "1", "--chunk-size", str(chunk_size)],
        "gN": [JAXMODEL, "sweep", str(spec_path), "-o", str(tmp / "g"), "--overwrite", "-q",
               "--writers", str(writers), "--chunk-size", str(chunk_size)],
        "h": [sys.executable, str(ROOT / "bench" / "numpy_pyarrow_sweep.py"),
              str(tmp / "h.parquet"), str(bandwidths)],
    }
    seconds: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(repeats):
        for key, cmd in paths.items():
            seconds[key].append(timed(cmd))
    assert pq.read_metadata(tmp / "h.parquet").num_rows == size
    assert ds.dataset(tmp / "g").count_rows() == size
    nbytes = {"g": sum(p.stat().st_size for p in (tmp / "g").glob("*.parquet")),
              "h": (tmp / "h.parquet").stat().st_size}
    rounds = [{"gN_over_h": seconds["h"][i] / seconds["gN"][i],
               "g1_over_h": seconds["h"][i] / seconds["g1"][i],
               "gN_over_g1": seconds["g1"][i] / seconds["gN"][i]} for i in range(repeats)]
    plan = build_plan(spec_path, chunk_size=chunk_size)
    est = estimate(plan, writers)
    return {
        "configurations": size, "writers": writers, "seconds": seconds,
        "median_rates_rows_per_s": {k: size / statistics.median(v) for k, v in seconds.items()},
        "median_ratios": {k: statistics.median(r[k] for r in rounds) for k in rounds[0]},
        "rounds": rounds,
        "bytes_per_row": {k: v / size for k, v in nbytes.items()},
        "dry_run_estimate_seconds": est["seconds"] + est["compile_seconds"],
    }


def constant_columns(plan) -> dict:
    """Bytes per row and rows/s of one chunk written with the constant
    columns plain (LZ4, as before) and dictionary-encoded (now)."""
    rows, n, _ = plan.rows_for(0)
    schema = pa.schema([c.field() for c in plan.columns])
    table = to_table(plan.columns, rows, schema)
    out = {"rows": n, "constant_columns": sorted(plan.constant),
           "columns": len(plan.columns)}
    for label, constant in (("plain", ()), ("dictionary", plan.constant)):
        options = parquet_options(plan.columns, constant)

        def write(options=options):
            buf = io.BytesIO()
            pq.write_table(table, buf, row_group_size=1 << 20, **options)
            return buf.tell()

        nbytes = write()
        seconds = statistics.median([best_of(write, 1) for _ in range(5)])
        constant_bytes = sum(
            pq.read_metadata(pa.BufferReader(_encoded(table, options))).row_group(0)
            .column(i).total_compressed_size
            for i, name in enumerate(table.column_names) if name in plan.constant)
        out[label] = {"bytes_per_row": nbytes / n, "rows_per_s": n / seconds,
                      "constant_bytes_per_row": constant_bytes / n}
    return out


def _encoded(table, options) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=1 << 20, **options)
    return buf.getvalue()


def rss_child(configs: int, directory: Path) -> dict:
    """Run a sweep of ``configs`` configurations in a fresh process; its peak RSS."""
    n_bw = max(configs // (9 * 4 * 4 * 5 * 4 * 8), 1)
    text = SPEC.read_text().replace("{geomspace = [25, 3200, 128]}",
                                    f"{{geomspace = [25, 3200, {n_bw}]}}")
    assert text.rstrip().splitlines()[-1].startswith("rows_per_file"), "[output] comes last"
    text += f'\npath = "{directory}"\n'
    text += 'columns = ["link_bandwidth_gb_s", "num_gpus", "mfu_percent", "step_time_ms"]\n'
    spec_path = directory.parent / "rss.toml"
    spec_path.write_text(text)
    size = load_spec(spec_path).size
    # VmHWM, the process's own high-water mark: ru_maxrss would carry the
    # parent's peak across fork + exec on Linux.
    code = ("import sys, time; from jaxmodel.sweeping import sweep; t=time.perf_counter(); "
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
    ap.add_argument("--bandwidths", type=int, default=1024,
                    help="link bandwidths of the whole-process grid (1024: 23.6M rows)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--writers", type=int, default=usable_cores())
    ap.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK,
                    help="configurations per device chunk (raise on a GPU)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "sweep_throughput.json"))
    args = ap.parse_args()
    N = args.writers

    global LOAD_AT_START
    LOAD_AT_START = os.getloadavg()
    spec = load_spec(SPEC)
    plan = build_plan(spec, chunk_size=args.chunk_size)
    n = spec.size
    print(f"configurations: {n:,} ({SPEC.name}), devices: {jax.devices()}")

    compile_s, engine_s = engine_in_memory(plan)
    rate_a = n / engine_s

    # The refined model on the same grid (sweeps/default.toml: Llama 3 70B on
    # H100s, each GPU speed zipped with its FP8 peaks).
    refined_spec = load_spec(REFINED_SPEC)
    assert refined_spec.size == n, (refined_spec.size, n)
    refined = build_plan(refined_spec, chunk_size=args.chunk_size)
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
        e2e_plan = build_plan(spec, chunk_size=args.chunk_size)

        def end_to_end(writers):
            shutil.rmtree(tmp / "ds", ignore_errors=True)
            return run_sweep(e2e_plan, tmp / "ds", writers=writers)

        t0 = time.perf_counter()
        end_to_end(1)  # compiles
        d_compile = time.perf_counter() - t0

        table = ds.dataset(tmp / "ds").to_table().sort_by("config_id")
        options = parquet_options(plan.columns, plan.constant, spec.output.compression)
        per_file = spec.output.rows_per_file
        slices = [table.slice(start, per_file) for start in range(0, table.num_rows, per_file)]

        def raw_write(threads):
            shutil.rmtree(tmp / "raw", ignore_errors=True)
            (tmp / "raw").mkdir()

            def one(i):
                with pq.ParquetWriter(tmp / "raw" / f"part-{i}.parquet", table.schema,
                                      **options) as w:
                    w.write_table(slices[i], row_group_size=spec.output.row_group_size)

            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(one, range(len(slices))))

        d_e: dict[str, list[float]] = {"d1": [], "dN": [], "e1": [], "eN": []}
        for _ in range(args.repeats):
            d_e["d1"].append(best_of(lambda: end_to_end(1), 1))
            d_e["dN"].append(best_of(lambda: end_to_end(N), 1))
            d_e["e1"].append(best_of(lambda: raw_write(1), 1))
            d_e["eN"].append(best_of(lambda: raw_write(N), 1))
        d_compile -= statistics.median(d_e["d1"])
        rates_de = {k: n / statistics.median(v) for k, v in d_e.items()}
        def ratio(fast, slow):  # per round (same load), then the median
            return statistics.median(s / f for f, s in zip(d_e[fast], d_e[slow], strict=True))

        ratios_de = {"d1_over_e1": ratio("d1", "e1"), "dN_over_eN": ratio("dN", "eN"),
                     "dN_over_d1": ratio("dN", "d1"), "eN_over_e1": ratio("eN", "e1")}
        constants = constant_columns(e2e_plan)
        refined_constants = constant_columns(refined)
        process = whole_process(args.bandwidths, N, args.repeats, tmp, args.chunk_size)

        # The model's projection (jaxmodel.sweeping.expected_seconds) from this
        # run's rates: per-writer rate (e1), device rate (a).
        per_writer = rates_de["e1"]
        projection = {
            "per_writer_rows_per_s": per_writer,
            "cpu_host_2_cores": n / expected_seconds(n, n, rate_a, per_writer, writers=2,
                                                     cores=2, on_cpu=True),
            "cpu_host_16_cores": n / expected_seconds(n, n, 8 * rate_a, per_writer, writers=16,
                                                      cores=16, on_cpu=True),
            "gpu_host_16_cores_15_writers": 15 * per_writer,
        }

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
                    "jax": jax.__version__, "load_average_at_start": LOAD_AT_START},
        "configurations": n,
        "load_average_at_end": os.getloadavg(),
        "cores": usable_cores(), "writers": N, "repeats": args.repeats,
        "rates_configs_per_s": {"a_engine_in_memory": rate_a, "b_numpy": rate_b,
                                "c_python_loop": rate_c,
                                **{f"{k}_to_parquet" if k[0] == "d" else f"{k}_raw_pyarrow_write":
                                   v for k, v in rates_de.items()},
                                "f_engine_in_memory_refined_model": rate_f},
        "compile_seconds": {"in_memory": compile_s, "end_to_end": d_compile,
                            "refined_in_memory": refined_compile_s},
        "ratios": {"a_over_b": rate_a / rate_b, "a_over_c": rate_a / rate_c,
                   **ratios_de, "f_over_a": rate_f / rate_a},
        "whole_process": process,
        "constant_columns": {"seed_default_sweep": constants,
                             "refined_same_axes": refined_constants},
        "projection_rows_per_s": projection,
        "targets": {"a_over_b": 20.0, "gN_over_h": 2.5, "dN_over_eN": 0.8,
                    "top_k_speedup": 1.6, "peak_rss_mib": 2048},
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
    print(f"whole process, {process['configurations']:,} configurations, medians of "
          f"{args.repeats}:")
    for k, v in process["median_rates_rows_per_s"].items():
        print(f"  {k:<32}{v:>16,.0f} rows/s")
    for k, v in process["median_ratios"].items():
        print(f"  ratio {k:<26}{v:>16,.2f}")
    print(f"  dry-run estimate {process['dry_run_estimate_seconds']:.1f} s vs measured (gN) "
          f"{statistics.median(process['seconds']['gN']):.1f} s")
    for label, c in res["constant_columns"].items():
        print(f"constant columns, {label} ({len(c['constant_columns'])} of {c['columns']}): "
              + "; ".join(f"{k} {c[k]['bytes_per_row']:.3f} B/row "
                          f"({c[k]['constant_bytes_per_row']:.4f} in constants), "
                          f"{c[k]['rows_per_s']:,.0f} rows/s" for k in ("plain", "dictionary")))
    for k, v in projection.items():
        print(f"projection {k:<30}{v:>16,.0f}")
    if rss:
        for r in rss["runs"]:
            print(f"peak RSS of a {r['configurations']:,}-configuration sweep: "
                  f"{r['peak_rss_mib']:,.0f} MiB ({r['seconds']:.1f} s, {r['rows']:,} rows)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
