"""Layout search speed: ``jaxmodel best``'s engine against a plain Python loop.

Measured in one run, on whatever jax finds (GPU if any, else CPU):

1. The 175B-on-512-GPU question (96 layers, hidden 12288, global batch 1536
   sequences): how many candidates our enumeration gives it.
2. Engine rate: ``jaxmodel best``'s engine (``searching.reduce_table``, the
   sweep engine over a candidate table: ``vmap`` of the seed model +
   on-device top-10 by throughput, in compiled chunks of 65,536) over a long
   stream: the question's candidates at each of ``--rows / candidates`` link
   bandwidths from 50 to 900 GB/s (the question alone is far too short to
   time an engine: 590 rows run in milliseconds).  The first chunk (its
   compile) is reported apart and not in the rate.  (Repeating the same
   candidates instead would make every chunk a heap of exact ties at the
   top, which TopK resolves with a full sort: see ``--ties``.)
3. Baseline: a plain Python loop calling ``tests/reference.py``'s
   ``seed_reference`` (the formulas in float64 Python, one candidate at a
   time) over the first ``--python-rows`` candidates of the same stream, plus
   a Python ``max``; its per-candidate time is extrapolated to the stream.
4. End to end: ``jaxmodel best`` for the question in a fresh subprocess
   (interpreter start, imports, enumeration, compile, run, printing),
   ``--repeats`` times.

Prints a table and writes ``bench/results/search.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from reference import seed_reference  # noqa: E402

import jaxmodel  # noqa: E402
from jaxmodel.reduce import TopK  # noqa: E402
from jaxmodel.searching import LAYOUT_AXES, enumerate_layouts, reduce_table  # noqa: E402

QUESTION = {"model_params_b": 175.0, "num_layers": 96, "hidden_dim": 12288, "num_gpus": 512}
GLOBAL_BATCH = 1536
CLI_ARGS = ["best", "--model", "seed", "--model-params-b", "175", "--num-layers", "96",
            "--hidden-dim", "12288", "--num-gpus", "512", "--global-batch", str(GLOBAL_BATCH)]


def python_loop(values: dict, stream: dict, count: int) -> tuple[float, int]:
    """Seconds for the plain Python loop over the first ``count`` rows, and its best row."""
    cols = {k: stream[k][:count].tolist() for k in stream}
    args = {k: (int(v) if k != "model_params_b" and float(v).is_integer() else float(v))
            for k, v in values.items()}
    start = time.perf_counter()
    best, best_i = -1.0, -1
    for i in range(count):
        args.update({k: cols[k][i] for k in cols})
        out = seed_reference(**args)
        if out["valid_layout"] and out["throughput_tokens_s"] > best:
            best, best_i = out["throughput_tokens_s"], i
    return time.perf_counter() - start, best_i


def end_to_end(repeats: int) -> list[dict]:
    script = Path(sys.executable).parent / "jaxmodel"
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run([str(script), *CLI_ARGS, "--format", "json"], capture_output=True,
                              text=True, check=True, timeout=300)
        wall = time.perf_counter() - start
        doc = json.loads(done.stdout)
        runs.append({"wall_s": wall, **{f"{k}_s": v for k, v in doc["seconds"].items()},
                     "candidates": doc["candidates"], "best": doc["top"][0]})
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1 << 22, help="engine stream length")
    ap.add_argument("--python-rows", type=int, default=20_000, help="Python loop subset")
    ap.add_argument("--repeats", type=int, default=3, help="end-to-end subprocess runs")
    ap.add_argument("--ties", action="store_true",
                    help="repeat the question's candidates as they are (worst case for TopK)")
    ap.add_argument("--out", default=str(HERE / "results" / "search.json"))
    a = ap.parse_args()

    seed = jaxmodel.get_model("seed")
    values = {**seed.defaults, **QUESTION}
    cand = enumerate_layouts(512, 12288, 96, GLOBAL_BATCH)
    idle = enumerate_layouts(512, 12288, 96, GLOBAL_BATCH, allow_idle=True)
    n_question = len(cand["micro_batch"])

    reps = -(-a.rows // n_question)
    stream = {k: np.tile(cand[k], reps)[: a.rows] for k in LAYOUT_AXES}
    if not a.ties:
        bandwidths = np.linspace(50.0, 900.0, reps)
        stream["link_bandwidth_gb_s"] = np.repeat(bandwidths, n_question)[: a.rows]
    run = reduce_table(seed, values, stream, TopK("throughput_tokens_s", 10), chunk=1 << 16)
    top = run.state["rows"]
    # (run_s: every chunk after the first, which holds the compile)
    engine_rate = max(a.rows - run.chunk, 1) / max(run.run_s, 1e-9)

    py_rows = min(a.python_rows, a.rows)
    py_s, py_best = python_loop(values, stream, py_rows)
    py_rate = py_rows / py_s
    # the same rows, so the same best layout over the loop's subset
    sub = reduce_table(seed, values, {k: v[:py_rows] for k, v in stream.items()},
                       TopK("throughput_tokens_s", 1))
    names = [*stream]
    engine_best = {k: float(np.asarray(sub.state["rows"][k])[0]) for k in names}
    loop_best = {k: float(stream[k][py_best]) for k in names}
    stream_best = {k: float(np.asarray(top[k])[0]) for k in names}

    e2e = end_to_end(a.repeats)
    walls = [r["wall_s"] for r in e2e]

    result = {
        "device": str(jax.devices()[0]), "platform": platform.platform(),
        "cpu_count": os.cpu_count(), "load_average": os.getloadavg(),
        "question": {**QUESTION, "global_batch": GLOBAL_BATCH,
                     "candidates": n_question, "candidates_allow_idle": len(idle["micro_batch"])},
        "engine": {"rows": a.rows, "chunk": run.chunk, "chunks": run.chunks,
                   "compile_s": run.compile_s, "run_s": run.run_s,
                   "candidates_per_s": engine_rate, "best": stream_best,
                   "stream": "question x link bandwidths" if not a.ties else "repeated"},
        "python_loop": {"rows_timed": py_rows, "seconds": py_s, "candidates_per_s": py_rate,
                        "extrapolated_s_for_engine_rows": a.rows / py_rate, "best": loop_best,
                        "engine_best_same_rows": engine_best},
        "speedup": engine_rate / py_rate,
        "end_to_end": {"runs": e2e, "median_wall_s": statistics.median(walls),
                       "min_wall_s": min(walls)},
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")

    print(f"device: {result['device']}  ({os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f})")
    print(f"175B / 96 layers / h 12288 on 512 GPUs, global batch {GLOBAL_BATCH}: "
          f"{n_question:,} candidates ({len(idle['micro_batch']):,} with --allow-idle)")
    print()
    print(f"{'':<38}{'candidates/s':>14}{'rows':>12}{'seconds':>10}")
    print(f"{'jaxmodel best engine (run, no compile)':<38}{engine_rate:>14,.0f}{a.rows:>12,}"
          f"{run.run_s:>10.3f}")
    print(f"{'  its first chunk (compile)':<38}{'':>14}{'':>12}{run.compile_s:>10.3f}")
    print(f"{'plain Python loop (seed_reference)':<38}{py_rate:>14,.0f}{py_rows:>12,}"
          f"{py_s:>10.3f}")
    print(f"{'  extrapolated to the engine rows':<38}{'':>14}{a.rows:>12,}"
          f"{a.rows / py_rate:>10.1f}")
    print(f"speedup: {engine_rate / py_rate:,.0f}x (target >= 1,000x)")
    print(f"best of the first {py_rows:,} rows, engine: {engine_best}")
    print(f"                        Python loop: {loop_best}")
    print()
    print(f"end to end, `jaxmodel {' '.join(CLI_ARGS)}` in a fresh process, "
          f"{a.repeats} runs:")
    for r in e2e:
        print(f"  wall {r['wall_s']:.2f} s  (in-process: compile {r['compile_s']:.2f} s, "
              f"run {r['run_s']:.4f} s, enumerate {r['enumerate_s']:.4f} s)")
    print(f"  median {statistics.median(walls):.2f} s, min {min(walls):.2f} s (target < 5 s)")
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
