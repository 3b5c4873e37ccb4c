"""Fault injection: kill -9 at random moments, then --resume, row for row.

Plain, partitioned and reduce sweeps, with one process and with two
(``--shard``), are killed at a random moment (after a random delay once the
run's metadata file appears; for reduce sweeps also as soon as the merge
starts), then every process is resumed and the dataset is compared row for
row with an uninterrupted run.  The moments are drawn from a seeded generator
(``JAXMODEL_FAULT_SEED``, printed on failure) so that a failure reproduces;
``JAXMODEL_FAULT_KILLS=N`` kills each case N times for a wider search.  A run
that a kill leaves holding its slot lock is also shown not to block the
resume (the OS drops a dead holder's flock).
"""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from jaxmodel.spec import load_spec
from jaxmodel.sweeping import build_plan, run_sweep

pytestmark = pytest.mark.slow

SMALL = Path(__file__).parent / "specs" / "small.toml"
JAXMODEL = str(Path(sys.executable).with_name("jaxmodel"))
SEED = int(os.environ.get("JAXMODEL_FAULT_SEED", "16"))
KILLS = int(os.environ.get("JAXMODEL_FAULT_KILLS", "1"))
CHUNK = 64

# 11,520 configurations, 180 chunks of 64: long enough to be cut anywhere.
BASE = (SMALL.read_text()
        .replace('filter = "valid_layout and mfu_percent >= 20"', 'filter = "mfu_percent > 5"')
        .replace("geomspace = [25, 3200, 6]", "geomspace = [25, 3200, 60]")
        .replace("rows_per_file = 200", "rows_per_file = 300"))
KINDS = {
    "plain": BASE,
    "partitioned": BASE.replace("rows_per_file = 300",
                                'rows_per_file = 300\npartition_by = ["tensor_parallel"]'),
    "reduce": BASE + '\n[reduce]\nby = "mfu_percent"\ngroup_by = ["tensor_parallel", "num_gpus"]\n',
}


def _env():
    # No compile cache: the kill moments are spread over the time an
    # in-process run takes to compile and run (the suite's own process never
    # caches), and a cached subprocess could finish before any of them.
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAXMODEL_COMPILE_CACHE"] = "0"
    return env


def read(path) -> dict[str, np.ndarray]:
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    table = table.sort_by("config_id")
    return {n: table[n].to_numpy(zero_copy_only=False) for n in sorted(table.column_names)}


def _start(spec: Path, out: Path, processes: int, extra=()) -> list[subprocess.Popen]:
    shard = [["--shard", f"{i}/{processes}"] if processes > 1 else [] for i in range(processes)]
    return [subprocess.Popen([JAXMODEL, "sweep", str(spec), "-o", str(out), "--chunk-size",
                              str(CHUNK), "-q", *shard[i], *extra], env=_env(),
                             stderr=subprocess.PIPE, text=True)
            for i in range(processes)]


def _wait_for(path_test, procs, limit=120.0) -> None:
    deadline = time.time() + limit
    while time.time() < deadline and not path_test() and any(p.poll() is None for p in procs):
        time.sleep(0.001)


def _kill(procs, which) -> int:
    """SIGKILL the chosen processes; how many were still running."""
    alive = 0
    for i in which:
        if procs[i].poll() is None:
            alive += 1
            procs[i].send_signal(signal.SIGKILL)
    for p in procs:
        p.communicate(timeout=300)  # reads and closes its stderr
    return alive


def _resume(spec: Path, out: Path, processes: int) -> None:
    procs = _start(spec, out, processes, ["--resume"])
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err


def _check_visible_files(out: Path) -> None:
    for part in out.rglob("part-*.parquet"):
        pq.read_metadata(part)  # every visible part is a complete file


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("processes", [1, 2])
def test_random_kills_then_resume_equal_an_uninterrupted_run(tmp_path, kind, processes):
    rng = random.Random(f"{SEED}-{kind}-{processes}")
    spec = tmp_path / f"{kind}.toml"
    spec.write_text(KINDS[kind])
    expected_dir = tmp_path / "clean"
    t0 = time.perf_counter()
    run_sweep(build_plan(load_spec(spec), chunk_size=CHUNK), expected_dir)
    took = time.perf_counter() - t0  # compile and run, as a run after its metadata
    expected = read(expected_dir)
    landed = 0
    # A moment between the metadata's appearance and the run's end (compiling,
    # then chunks, parts and checkpoints); JAXMODEL_FAULT_KILLS asks for more.
    moments = [("start", rng.uniform(0.05, 0.9) * took) for _ in range(KILLS)]
    if kind == "reduce":
        moments.append(("merge", 0.0))
    for case, (marker, delay) in enumerate(moments):
        out = tmp_path / f"killed-{case}"
        procs = _start(spec, out, processes)
        if marker == "merge":
            _wait_for(lambda out=out: (out / "_reduce-merge.lock").exists(), procs)
        else:
            _wait_for(lambda out=out: (out / "_jaxmodel.json").exists(), procs)
            time.sleep(delay)
        which = rng.sample(range(processes), rng.randint(1, processes))
        landed += _kill(procs, which) > 0
        _check_visible_files(out)
        _resume(spec, out, processes)
        got = read(out)
        assert got.keys() == expected.keys()
        for name in expected:
            np.testing.assert_array_equal(got[name], expected[name],
                                          err_msg=f"{name} (seed {SEED}, case {case})")
        assert not list(out.rglob(".*.tmp"))
    assert landed >= 1  # at least one kill hit a running sweep


SPLITS = {"plain and a shard": ([], ["--shard", "1/2"]),
          "two splits of different N": (["--shard", "0/2"], ["--shard", "1/3"])}


@pytest.mark.parametrize("case", list(SPLITS))
@pytest.mark.parametrize("order", ["first-second", "second-first"])
def test_runs_of_different_splits_at_once_never_duplicate_rows(tmp_path, case, order):
    """Two runs of different splits started together into one dataset: each
    ends, or is refused in one line; no row is ever written twice; a resume
    then finishes the uninterrupted run's rows (issue 29)."""
    rng = random.Random(f"{SEED}-{case}-{order}")
    spec = tmp_path / "plain.toml"
    spec.write_text(KINDS["plain"])
    expected_dir = tmp_path / "clean"
    run_sweep(build_plan(load_spec(spec), chunk_size=CHUNK), expected_dir)
    expected = read(expected_dir)
    out = tmp_path / "d"
    args = SPLITS[case] if order == "first-second" else SPLITS[case][::-1]
    procs = []
    for extra in args:
        procs.append(subprocess.Popen(
            [JAXMODEL, "sweep", str(spec), "-o", str(out), "--chunk-size", str(CHUNK), "-q",
             "--resume", *extra], env=_env(), stderr=subprocess.PIPE, text=True))
        time.sleep(rng.uniform(0.0, 0.5))
    refused = 0
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode in (0, 2), err
        if p.returncode == 2:
            lines = [line for line in err.splitlines() if line.strip()]
            assert len(lines) == 1 and "is being written by" in lines[0], err
            refused += 1
    ids = read(out)["config_id"]
    assert len(np.unique(ids)) == len(ids)  # no row twice
    assert set(ids) <= set(expected["config_id"])
    # Whatever is left, one resume finishes it (no run is alive now).
    done = subprocess.run([JAXMODEL, "sweep", str(spec), "-o", str(out), "--chunk-size",
                           str(CHUNK), "-q", "--resume"], env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = read(out)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
