"""The first answer: each command of issue 26 cold and warm, in fresh processes.

For every command this script runs a fresh process with an empty compile
cache (cold), then another with the cache the first one filled (warm), and
records the wall time, the child's peak RSS (``wait4``'s ``ru_maxrss``) and
where the time went inside it: importing ``jaxmodel.cli``, tracing, lowering
and XLA compiling (jax's own monitoring events; a warm run's compile is its
cache reads), the rest being jax's import, running and printing.  The
baseline is the bare ``python -c "import jax; jax.numpy.zeros(1)"``, measured
in the same run (before and after the commands, median), and every time is
also given as a ratio to it.  A child whose RSS passes ``--max-rss-gb`` is
killed (and reported so), so that a command that runs away cannot take the
machine down.  Writes ``bench/results/first_answer.json`` and ``.md``.

    .venv/bin/python bench/first_answer.py [--only eval,sensitivity] [--repeat N]
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
RESULTS = ROOT / "bench" / "results"
REFINED_70B = ["--model", "refined", "--gpu", "h100-sxm", "--llm", "llama3-70b",
               "--num-gpus", "1024"]
DEEPSEEK = ["--model", "refined", "--gpu", "h800", "--llm", "deepseek-v3", "--num-gpus", "2048",
            "--global-batch-tokens", "62914560", "--vary", "recompute", "--vary", "zero_stage",
            "--vary", "precision", "--vary", "pipeline_schedule",
            "--vary", "virtual_stages=1,2,4,8"]
# name -> (arguments, target cold ratio, target warm ratio, target peak RSS in GB)
COMMANDS = {
    "--help": (["--help"], 1.2, 1.2, None),
    "presets": (["presets"], 1.2, 1.2, None),
    "eval": (["eval", *REFINED_70B], 4.0, 2.0, None),
    "sensitivity": (["sensitivity", *REFINED_70B], 10.0, None, 3.0),
    "sensitivity --of mfu_percent": (["sensitivity", *REFINED_70B, "--of", "mfu_percent"],
                                     10.0, None, 3.0),
    "sensitivity --of step_time_ms": (["sensitivity", *REFINED_70B, "--of", "step_time_ms"],
                                      10.0, None, 3.0),
    "best (DeepSeek-V3)": (["best", *DEEPSEEK], 15.0, 4.0, None),
    # a new user's first search: the 70B's 516 default layouts (not in the list)
    "best (Llama 3 70B)": (["best", *REFINED_70B], 15.0, 4.0, None),
    "validate": (["validate"], 20.0, None, None),
    "validate --all": (["validate", "--all"], 20.0, None, None),
}
BARE = [sys.executable, "-c", "import jax; jax.numpy.zeros(1)"]

# Runs in the child: the CLI in-process, with jax's compile events summed.
PROBE = r"""
import json, os, sys, time
start = time.perf_counter()
import jaxmodel.cli
from jaxmodel.precision import before_first_computation
phases = {"import_cli_s": time.perf_counter() - start, "trace_s": 0.0, "lower_s": 0.0,
          "compile_s": 0.0, "programs": 0, "cache_hits": 0}
EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace_s",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
          "/jax/core/compile/backend_compile_duration": "compile_s",
          "/jax/compilation_cache/cache_retrieval_time_sec": "compile_s"}

def listen():
    from jax import monitoring
    def on_duration(event, secs, **kw):
        if event in EVENTS:
            phases[EVENTS[event]] += secs
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            phases["programs"] += 1
    def on_event(event, **kw):
        if event == "/jax/compilation_cache/cache_hits":
            phases["cache_hits"] += 1
    monitoring.register_event_duration_secs_listener(on_duration)
    monitoring.register_event_listener(on_event)

before_first_computation(listen)
code = 0
try:
    jaxmodel.cli.main(sys.argv[1:])
except SystemExit as e:
    code = e.code or 0
phases["jax_imported"] = "jax" in sys.modules
phases["code"] = code
with open(os.environ["FIRST_ANSWER_PHASES"], "w") as f:
    json.dump(phases, f)
"""


def run_child(argv: list[str], env: dict[str, str], max_rss_kb: int,
              timeout_s: float) -> dict:
    """Wall seconds and peak RSS of one fresh process; killed past either limit."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
        killed = None
        status_path = Path(f"/proc/{proc.pid}/status")
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            try:
                rss = next(int(line.split()[1]) for line in
                           status_path.read_text().splitlines() if line.startswith("VmRSS:"))
            except (OSError, StopIteration, ValueError):
                rss = 0
            if rss > max_rss_kb:
                killed = f"RSS over {max_rss_kb / 2**20:.1f} GB"
            elif time.perf_counter() - start > timeout_s:
                killed = f"over {timeout_s:g} s"
            if killed:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    return {"wall_s": round(wall, 3), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "returncode": code, "killed": killed,
            "stderr_tail": stderr.strip().splitlines()[-1:] if code else []}


def measure(name: str, args: list[str], cache: Path, max_rss_kb: int, timeout_s: float) -> dict:
    """One command cold (empty cache) then warm (the cache it filled)."""
    out = {}
    for mode in ("cold", "warm"):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            phases_path = f.name
        env = {**os.environ, "JAXMODEL_COMPILE_CACHE": str(cache),
               "FIRST_ANSWER_PHASES": phases_path}
        r = run_child([sys.executable, "-c", PROBE, *args], env, max_rss_kb, timeout_s)
        try:
            r["phases"] = json.loads(Path(phases_path).read_text() or "{}")
        except (OSError, ValueError):
            r["phases"] = {}
        os.unlink(phases_path)
        out[mode] = r
        print(f"  {name:<32} {mode}: {r['wall_s']:8.2f} s, {r['peak_rss_mb']:7.0f} MB"
              + (f"  KILLED ({r['killed']})" if r["killed"] else "")
              + (f"  exit {r['returncode']}" if r["returncode"] else ""), flush=True)
        if r["killed"]:
            break
    return out


def bare(n: int) -> list[dict]:
    return [run_child(BARE, dict(os.environ), 1 << 40, 600) for _ in range(n)]


def markdown(doc: dict) -> str:
    b = doc["bare_import_s"]
    lines = [f"# First answer ({doc['date']}, load average {doc['load_before']} before, "
             f"{doc['load_after']} after)", "",
             f"Bare `import jax; jax.numpy.zeros(1)`: {b:.2f} s (median of "
             f"{len(doc['bare_runs_s'])}), {doc['bare_rss_mb']:.0f} MB. "
             f"Program cache (`JAXMODEL_PROGRAM_CACHE`): {doc.get('program_cache', 'on')}.", "",
             "| command | cold s | cold x bare | target | warm s | warm x bare | target "
             "| peak RSS cold MB | target | cold: import cli / trace / lower / compile s "
             "| warm: import cli / trace / lower / compile s | programs | jax imported |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|"]
    for name, r in doc["commands"].items():
        cold, warm = r["cold"], r.get("warm")
        p = cold["phases"]
        q = warm["phases"] if warm else {}
        t_cold, t_warm, t_rss = r["targets"]

        def cell(x):
            return "" if x is None else f"{x:g}"

        lines.append(
            f"| `{name}` | {cold['wall_s']:.2f}{' (killed)' if cold['killed'] else ''} "
            f"| {cold['wall_s'] / b:.1f} | {cell(t_cold)} "
            f"| {warm['wall_s'] if warm else float('nan'):.2f} "
            f"| {warm['wall_s'] / b if warm else float('nan'):.1f} | {cell(t_warm)} "
            f"| {cold['peak_rss_mb']:.0f} | {cell(t_rss and t_rss * 1024)} "
            f"| {p.get('import_cli_s', 0):.2f} / {p.get('trace_s', 0):.2f} / "
            f"{p.get('lower_s', 0):.2f} / {p.get('compile_s', 0):.2f} "
            f"| {q.get('import_cli_s', 0):.2f} / {q.get('trace_s', 0):.2f} / "
            f"{q.get('lower_s', 0):.2f} / {q.get('compile_s', 0):.2f} "
            f"| {p.get('programs', '')} | {p.get('jax_imported', '')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated command names (default: all)")
    parser.add_argument("--bare", type=int, default=3, help="bare-import runs before and after")
    parser.add_argument("--max-rss-gb", type=float, default=8.0)
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per process")
    parser.add_argument("--name", default="first_answer", help="results file stem")
    parser.add_argument("--out-dir", default=str(RESULTS), help="where the results go")
    args = parser.parse_args()
    chosen = [n.strip() for n in args.only.split(",")] if args.only else list(COMMANDS)
    load_before = os.getloadavg()
    runs = bare(args.bare)
    commands = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(chosen):
            argv, *targets = COMMANDS[name]
            r = measure(name, argv, Path(tmp) / f"cache-{i}", int(args.max_rss_gb * 2**20),
                        args.timeout)
            commands[name] = {"argv": argv, "targets": targets, **r}
    runs += bare(args.bare)
    walls = [r["wall_s"] for r in runs]
    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores",
           "python": platform.python_version(),
           "load_before": [round(x, 2) for x in load_before],
           "load_after": [round(x, 2) for x in os.getloadavg()],
           # JAXMODEL_PROGRAM_CACHE=0: warm runs trace and lower again (before issue 26's
           # program cache)
           "program_cache": os.environ.get("JAXMODEL_PROGRAM_CACHE", "on"),
           "bare_runs_s": walls, "bare_import_s": statistics.median(walls),
           "bare_rss_mb": statistics.median(r["peak_rss_mb"] for r in runs),
           "commands": commands}
    for r in commands.values():
        for mode in ("cold", "warm"):
            if mode in r:
                r[mode]["ratio_to_bare"] = round(r[mode]["wall_s"] / doc["bare_import_s"], 2)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / f"{args.name}.md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
