"""`make test`'s fast set against the tree issue 26 was filed on, with the same tests.

Issue 26 asks that the fast set take "less than half its time today, with the
same tests".  Its "today" is the tree it was filed on (``--baseline``,
b96c477: 1,102 tests in 188 s on the 2-core machine).  Tests were added
since; the like-for-like figure is the tests both trees hold under the same
node id, run in each tree.  This script extracts the baseline tree from git
(``git archive``, into a temporary directory), collects both trees' fast sets
(``pytest --collect-only``, the default marks, ``slow`` left out), and runs,
in each round and in this order:

- the baseline tree, its whole fast set (the issue's "today");
- the baseline tree, the shared tests only;
- this tree, the shared tests only;
- this tree, its whole fast set.

Each run is ``python -m pytest -q -n WORKERS --dist worksteal`` as
``make test`` runs it, from an empty compile cache (each tree's
``tests/conftest.py`` makes its own), under this checkout's virtual
environment (the baseline tree is imported first through ``PYTHONPATH``:
both trees run under today's jax, so what differs is the code and the
tests).  A small pytest plugin, written to the temporary directory, keeps
only the listed node ids.  It prints each run's wall time and pytest's own
count and time, and the ratios of this tree's shared-tests time to the
baseline's whole fast set and to the baseline's shared tests, measured in the
same round.  Writes ``bench/results/<--out>``.

    .venv/bin/python bench/fast_set.py [--baseline b96c477] [--rounds 1] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

from results_file import checked_out, write_json

ROOT = Path(__file__).resolve().parents[1]
# The tree issue 26 was filed on (its note: "b96c477 ran 1,102 tests in 188 s").
FILED_ON = "b96c477"

PLUGIN = '''
import os


def pytest_collection_modifyitems(config, items):
    path = os.environ.get("JAXMODEL_BENCH_ONLY_IDS")
    if not path:
        return
    with open(path, encoding="utf-8") as f:
        keep = set(f.read().splitlines())
    config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in keep])
    items[:] = [i for i in items if i.nodeid in keep]
'''
TO_WHOLE = "ratio to the baseline's whole fast set"
TO_SHARED = "ratio to the baseline's shared tests"
SUMMARY = re.compile(r"(\d+) passed.* in ([0-9.]+)s")


def extract(rev: str, into: Path) -> Path:
    """The tree at ``rev`` (a commit of this repository), written under ``into``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev],
                             check=True, capture_output=True).stdout
    tree = into / f"tree-{rev}"
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def environment(tree: Path, plugin_dir: Path, ids: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(plugin_dir)])
    env.pop("CI", None)  # the fast set, as `make test` runs it on a workstation
    if ids is not None:
        env["JAXMODEL_BENCH_ONLY_IDS"] = str(ids)
    return env


def collect(tree: Path, plugin_dir: Path) -> list[str]:
    """The fast set's node ids in ``tree``."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider"], cwd=tree, capture_output=True,
                          text=True, env=environment(tree, plugin_dir, None))
    if done.returncode != 0:
        sys.exit(f"collecting the tests of {tree.name} failed:\n{done.stdout[-2000:]}")
    return [line for line in done.stdout.splitlines() if "::" in line]


def run(tree: Path, plugin_dir: Path, ids: Path | None, workers: int) -> dict:
    """One fast-set run of ``tree`` (only ``ids`` if given): wall seconds, pytest's
    count and time."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", str(workers),
                           "--dist", "worksteal", "-p", "no:cacheprovider", "-p", "only_ids"],
                          cwd=tree, capture_output=True, text=True,
                          env=environment(tree, plugin_dir, ids))
    wall = time.perf_counter() - start
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    found = SUMMARY.search(tail)
    if done.returncode != 0 or found is None:
        sys.exit(f"the fast set of {tree.name} failed ({tail!r}):\n{done.stdout[-3000:]}")
    return {"wall_s": round(wall, 1), "passed": int(found.group(1)),
            "pytest_s": float(found.group(2)), "summary": tail}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=FILED_ON,
                        help="the commit whose fast set is the reference (default: the tree "
                             "issue 26 was filed on)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="fast_set.json",
                        help="file name written under bench/results/")
    args = parser.parse_args()
    path = checked_out(args.out, "fast_set.json")
    if args.rounds < 1 or args.workers < 1:
        sys.exit(f"--rounds/--workers: got {args.rounds}/{args.workers}; allowed: 1 or more")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="jaxmodel-fast-set-") as scratch:
        scratch = Path(scratch)
        (scratch / "only_ids.py").write_text(PLUGIN, encoding="utf-8")
        baseline = extract(args.baseline, scratch)
        here = extract("HEAD", scratch)  # the committed tree, as CI sees it
        old_ids, new_ids = collect(baseline, scratch), collect(here, scratch)
        shared = sorted(set(old_ids) & set(new_ids))
        shared_file = scratch / "shared_ids.txt"
        shared_file.write_text("\n".join(shared) + "\n", encoding="utf-8")
        print(f"fast sets: {args.baseline} {len(old_ids)} tests, {head} {len(new_ids)}; "
              f"shared by node id: {len(shared)}", flush=True)
        rounds = []
        for index in range(args.rounds):
            one = {}
            for name, tree, ids in (("baseline, whole fast set", baseline, None),
                                    ("baseline, shared tests", baseline, shared_file),
                                    ("head, shared tests", here, shared_file),
                                    ("head, whole fast set", here, None)):
                one[name] = run(tree, scratch, ids, args.workers)
                print(f"round {index + 1}: {name:26s} {one[name]['summary']} "
                      f"(wall {one[name]['wall_s']} s)", flush=True)
            shared_s = one["head, shared tests"]["wall_s"]
            one[TO_WHOLE] = round(shared_s / one["baseline, whole fast set"]["wall_s"], 3)
            one[TO_SHARED] = round(shared_s / one["baseline, shared tests"]["wall_s"], 3)
            print(f"round {index + 1}: head's shared tests / {TO_WHOLE[9:]} {one[TO_WHOLE]:.3f}, "
                  f"/ {TO_SHARED[9:]} {one[TO_SHARED]:.3f}", flush=True)
            rounds.append(one)
    result = {
        "baseline": args.baseline, "head": head, "workers": args.workers,
        "tests": {"baseline": len(old_ids), "head": len(new_ids), "shared": len(shared)},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rounds": rounds,
        f"median {TO_WHOLE}": statistics.median(r[TO_WHOLE] for r in rounds),
        f"median {TO_SHARED}": statistics.median(r[TO_SHARED] for r in rounds),
    }
    write_json(path, result)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
