"""The bench scripts' own arguments: a bad one is a one-line error before any measurement."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_refined_bench_rejects_a_path_for_out_before_it_measures():
    # --out names a file under bench/results/; a path (bench/results/x.json) was
    # joined under it again and failed with a traceback after the whole run.
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "refined_2026.py"),
                           "--out", "bench/results/x.json", "--rounds", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert lines == ["--out: 'bench/results/x.json' is not a file name; allowed: a name such "
                     "as refined_2026.json, written under bench/results/"]
    assert done.stdout == ""
    assert not (ROOT / "bench" / "results" / "bench").exists()


def test_fast_set_bench_rejects_bad_arguments_before_it_extracts_or_runs_anything():
    # Each run of the fast-set bench takes minutes; its arguments are checked first.
    for args, line in ((["--out", "bench/results/x.json"],
                        "--out: 'bench/results/x.json' is not a file name; allowed: a name such "
                        "as fast_set.json, written under bench/results/"),
                       (["--rounds", "0"], "--rounds/--workers: got 0/2; allowed: 1 or more")):
        done = subprocess.run([sys.executable, str(ROOT / "bench" / "fast_set.py"), *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        assert done.stderr.strip().splitlines() == [line]
        assert done.stdout == ""


def test_gemm_shapes_bench_rejects_a_path_for_out_and_writes_nothing():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gemm_shapes.py"),
                           "--out", "results/x.json"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "--out: 'results/x.json' is not a file name; allowed: a name such as "
        "gemm_shapes.json, written under bench/results/")
    assert done.stdout == ""
    assert not (ROOT / "bench" / "results" / "results").exists()
