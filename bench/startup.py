"""Start-up: first and second run of a command, each in a fresh process.

With jax's persistent compilation cache (``jaxmodel.compile_cache``) the
second run of a command loads its compiled programs from disk instead of
compiling them.  For ``eval --model refined``, ``best`` and a sweep, this
script runs each command twice in fresh processes against an empty cache
directory, and twice with the cache turned off (``JAXMODEL_COMPILE_CACHE=0``,
the baseline, measured in the same run), and reports wall seconds and the
ratios first / second.  Target: the second ``eval --model refined`` at least
2x faster than the first.  Writes ``bench/results/startup.json``.

    .venv/bin/python bench/startup.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JAXMODEL = str(Path(sys.executable).parent / "jaxmodel")
COMMANDS = {
    "eval --model refined": ["eval", "--model", "refined"],
    "best (refined, llama3-70b, 256 GPUs)": [
        "best", "--model", "refined", "--gpu", "h100-sxm", "--llm", "llama3-70b",
        "--num-gpus", "256", "--global-batch-tokens", "4194304"],
    "sweep sweeps/seed_profile.toml": ["sweep", "sweeps/seed_profile.toml", "--overwrite",
                                       "--quiet", "-o", "{tmp}/profile"],
}


def run(argv: list[str], env: dict[str, str], tmp: str) -> float:
    start = time.perf_counter()
    subprocess.run([JAXMODEL, *(a.format(tmp=tmp) for a in argv)], env=env, cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="fresh caches per command")
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, argv in COMMANDS.items():
            times: dict[str, list[float]] = {k: [] for k in
                                             ("cached first", "cached second", "off first",
                                              "off second")}
            for r in range(args.repeat):
                cache = Path(tmp) / f"cache-{len(rows)}-{r}"
                on = {**os.environ, "JAXMODEL_COMPILE_CACHE": str(cache)}
                off = {**os.environ, "JAXMODEL_COMPILE_CACHE": "0"}
                # interleaved, so that load on the machine hits both modes alike
                times["off first"].append(run(argv, off, tmp))
                times["cached first"].append(run(argv, on, tmp))
                times["off second"].append(run(argv, off, tmp))
                times["cached second"].append(run(argv, on, tmp))
            med = {k: statistics.median(v) for k, v in times.items()}
            rows[label] = {**{k.replace(" ", "_") + "_s": round(v, 3) for k, v in med.items()},
                           "speedup_second_run": round(med["cached first"]
                                                       / med["cached second"], 2),
                           "speedup_second_vs_off": round(med["off second"]
                                                          / med["cached second"], 2)}
    head = f"{'command':<40} {'off 1st':>8} {'off 2nd':>8} {'cache 1st':>9} " \
           f"{'cache 2nd':>9} {'1st/2nd':>8} {'off/2nd':>8}"
    print(head)
    for label, r in rows.items():
        print(f"{label:<40} {r['off_first_s']:>8.2f} {r['off_second_s']:>8.2f} "
              f"{r['cached_first_s']:>9.2f} {r['cached_second_s']:>9.2f} "
              f"{r['speedup_second_run']:>7.2f}x {r['speedup_second_vs_off']:>7.2f}x")
    target = rows["eval --model refined"]["speedup_second_run"]
    print(f"second eval --model refined {target:.2f}x faster than the first "
          f"(target 2x: {'met' if target >= 2 else 'not met'})")
    out = ROOT / "bench" / "results" / "startup.json"
    out.write_text(json.dumps({
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average": os.getloadavg()},
        "repeat": args.repeat, "commands": rows, "target_eval_speedup": 2.0,
        "target_met": target >= 2}, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
