"""The 10^10-candidate top-k sweep (issue 5): rate and memory of a long run.

Runs ``sweeps/top_layouts_1e10.toml`` (12,042,240,000 configurations, a
top-100 reduction on the device) in a fresh process and records its wall time,
configurations/s, compile time and peak RSS (VmHWM), plus the RSS sampled
every few seconds to show that memory stays flat.  Long: about an hour on two
CPU cores; not part of ``make bench``.

  python bench/top_k_1e10.py [--chunk-size 4194304] [--output out/top_layouts_1e10]
  python bench/top_k_1e10.py --share 400 --devices 1,2 --repeats 3   # a rate sample
  python bench/top_k_1e10.py --share 100 --processes 1,2 --repeats 2  # 1 vs 2 processes

``--share P`` evaluates only the first 1/P of the chunks (a contiguous
prefix, as process 0 of P would: a rate sample in a minute instead of the
whole sweep).  ``--devices 1,2`` runs the sweep once per count of CPU
devices (``--xla_force_host_platform_device_count``), interleaved
``--repeats`` times, and reports each count's median rate and the ratio to
the first (same run, same load).  With a GPU the device count is whatever
jax finds (``--devices`` is for CPU hosts).

Writes bench/results/top_k_1e10.json (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "sweeps" / "top_layouts_1e10.toml"

CHILD = """
import json, sys, time
from jaxmodel.sweeping import build_plan
from jaxmodel.engine import run_sweep
plan = build_plan(sys.argv[1], chunk_size=int(sys.argv[3]))
import resource
ru0 = resource.getrusage(resource.RUSAGE_SELF)
t = time.perf_counter()
r = run_sweep(plan, sys.argv[2], overwrite=True, process=int(sys.argv[5]),
              processes=int(sys.argv[4]))
s = time.perf_counter() - t
hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"configurations": r.configurations_done, "seconds": s,
                  "cpu_seconds": ru.ru_utime + ru.ru_stime - ru0.ru_utime - ru0.ru_stime,
                  "compile_seconds": r.compile_seconds, "rows": r.rows,
                  "valid_rows": r.valid_rows, "kept_rows": r.extra["kept_rows"],
                  "peak_rss_mib": int(hwm) / 1024, "traces": plan.traces,
                  "devices": [str(d) for d in plan.mesh.devices.flat]}))
"""


def run_processes(args, n: int) -> dict:
    """``n`` sweeps at once, process i of ``share x n`` each (so together the
    first 1/share of the chunks, as one process of ``share``); their rate is
    all their configurations over the slowest one's time after its compile."""
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(SPEC), f"{args.output}-{i}",
                               str(args.chunk_size), str(args.share * n), str(i)],
                              stdout=subprocess.PIPE, text=True, env=env) for i in range(n)]
    outs = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"the sweep failed (exit {proc.returncode})")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    configs = sum(o["configurations"] for o in outs)
    run_s = max(o["seconds"] - o["compile_seconds"] for o in outs)
    res = {"processes": n, "configurations": configs, "rate_configs_per_s": configs / run_s,
           "cpu_cores_busy": [o["cpu_seconds"] / o["seconds"] for o in outs], "runs": outs}
    print(f"{n} process(es): {configs:,} configurations, {res['rate_configs_per_s']:,.0f}/s "
          f"after compile; each kept "
          f"{', '.join(f'{c:.2f}' for c in res['cpu_cores_busy'])} cores busy (compile included)")
    return res


def run_child(args, devices: int | None) -> dict:
    env = dict(os.environ)
    if devices is not None:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                            f" --xla_force_host_platform_device_count={devices}").strip()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(SPEC), args.output,
                             str(args.chunk_size), str(args.share), "0"],
                            stdout=subprocess.PIPE, text=True, env=env)
    samples: list[tuple[float, float]] = []
    start = time.perf_counter()

    def sample() -> None:
        status = Path(f"/proc/{proc.pid}/status")
        while proc.poll() is None:
            try:
                rss = [ln for ln in status.read_text().splitlines() if ln.startswith("VmRSS")]
                samples.append((time.perf_counter() - start, int(rss[0].split()[1]) / 1024))
            except (OSError, IndexError):
                pass
            time.sleep(5)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    out, _ = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"the sweep failed (exit {proc.returncode})")
    res = json.loads(out.strip().splitlines()[-1])
    res["rate_configs_per_s"] = res["configurations"] / (res["seconds"] - res["compile_seconds"])
    res["rss_mib_samples"] = samples[:: max(len(samples) // 50, 1)]
    res["chunk_size"] = args.chunk_size
    res["share"] = args.share
    print(f"{len(res['devices'])} device(s): {res['configurations']:,} configurations in "
          f"{res['seconds']:,.1f} s ({res['rate_configs_per_s']:,.0f}/s after "
          f"{res['compile_seconds']:.1f} s compile), peak RSS {res['peak_rss_mib']:,.0f} MiB, "
          f"{res['rows']} rows kept")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunk-size", type=int, default=1 << 22)
    ap.add_argument("--output", default=str(ROOT / "out" / "top_layouts_1e10"))
    ap.add_argument("--share", type=int, default=1,
                    help="evaluate the first 1/SHARE of the chunks only")
    ap.add_argument("--devices", default=None,
                    help="comma-separated CPU device counts to compare, e.g. 1,2")
    ap.add_argument("--processes", default=None,
                    help="comma-separated counts of concurrent processes to compare (each "
                         "count splits the same share of chunks), e.g. 1,2")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "top_k_1e10.json"))
    args = ap.parse_args()
    if args.devices and args.processes:
        raise SystemExit("--devices and --processes: give one of them")
    what = "processes" if args.processes else "devices"
    given = args.processes or args.devices
    counts = [int(c) for c in given.split(",")] if given else [None]
    runs: dict[str, list[dict]] = {str(c): [] for c in counts}
    for _ in range(args.repeats):
        for c in counts:
            runs[str(c)].append(run_processes(args, c) if args.processes
                                else run_child(args, c))
    if counts == [None] and args.repeats == 1:
        res = runs["None"][0]
    else:
        first = str(counts[0])
        rates = {c: [r["rate_configs_per_s"] for r in rs] for c, rs in runs.items()}
        res = {
            "load_average_at_end": os.getloadavg(), "share": args.share, "compared": what,
            "chunk_size": args.chunk_size, "repeats": args.repeats,
            "median_rate_configs_per_s": {c: statistics.median(v) for c, v in rates.items()},
            "median_ratio_to_first": {
                c: statistics.median(a / b for a, b in zip(v, rates[first], strict=True))
                for c, v in rates.items()},
            "runs": runs,
        }
        for c, v in res["median_rate_configs_per_s"].items():
            print(f"{what} {c}: median {v:,.0f} configurations/s, "
                  f"{res['median_ratio_to_first'][c]:.2f}x {what} {first}")
    target = Path(args.out)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(res, indent=1) + "\n")
    print(f"-> {target}")


if __name__ == "__main__":
    main()
