"""The 10^10-candidate top-k sweep (issue 5): rate and memory of a long run.

Runs ``sweeps/top_layouts_1e10.toml`` (12,042,240,000 configurations, a
top-100 reduction on the device) in a fresh process and records its wall time,
configurations/s, compile time and peak RSS (VmHWM), plus the RSS sampled
every few seconds to show that memory stays flat.  Long: about an hour on two
CPU cores; not part of ``make bench``.

  python bench/top_k_1e10.py [--chunk-size 4194304] [--output out/top_layouts_1e10]

Writes bench/results/top_k_1e10.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "sweeps" / "top_layouts_1e10.toml"

CHILD = """
import json, sys, time
from jaxmodel.sweep import build_plan
from jaxmodel.engine import run_sweep
plan = build_plan(sys.argv[1], chunk_size=int(sys.argv[3]))
t = time.perf_counter()
r = run_sweep(plan, sys.argv[2], overwrite=True)
s = time.perf_counter() - t
hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]
print(json.dumps({"configurations": r.configurations_done, "seconds": s,
                  "compile_seconds": r.compile_seconds, "rows": r.rows,
                  "valid_rows": r.valid_rows, "kept_rows": r.extra["kept_rows"],
                  "peak_rss_mib": int(hwm) / 1024, "traces": plan.traces}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunk-size", type=int, default=1 << 22)
    ap.add_argument("--output", default=str(ROOT / "out" / "top_layouts_1e10"))
    args = ap.parse_args()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(SPEC), args.output,
                             str(args.chunk_size)], stdout=subprocess.PIPE, text=True)
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
    print(f"{res['configurations']:,} configurations in {res['seconds']:,.0f} s "
          f"({res['rate_configs_per_s']:,.0f}/s after {res['compile_seconds']:.1f} s compile), "
          f"peak RSS {res['peak_rss_mib']:,.0f} MiB, {res['rows']} rows kept")
    target = ROOT / "bench" / "results" / "top_k_1e10.json"
    target.write_text(json.dumps(res, indent=1) + "\n")
    print(f"-> {target}")


if __name__ == "__main__":
    main()
