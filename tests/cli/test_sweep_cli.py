"""`jaxmodel sweep` from the command line: summary, dry run, errors, bundled sweeps."""

import json
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest

from jaxmodel.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMALL = Path(__file__).parents[1] / "specs" / "small.toml"


def run(args, capsys):
    with pytest.raises(SystemExit) as info:
        main(args)
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def test_sweep_prints_summary_with_path(tmp_path, capsys):
    code, out, err = run(["sweep", str(SMALL), "-o", str(tmp_path / "ds"), "--chunk-size",
                          "500"], capsys)
    assert code == 0, err
    rows = ds.dataset(tmp_path / "ds").count_rows()
    assert f"wrote {rows:,} rows" in out
    assert "of 1,152 configurations" in out
    assert str(tmp_path / "ds") in out
    assert err == ""  # no progress bar when stderr is not a terminal


def test_dry_run_writes_nothing(tmp_path, capsys):
    code, out, err = run(["sweep", str(SMALL), "-o", str(tmp_path / "ds"), "--dry-run"], capsys)
    assert code == 0, err
    assert "configurations: 1,152" in out
    assert "expected rows: ~" in out and "expected bytes" in out and "expected time" in out
    assert not (tmp_path / "ds").exists()


@pytest.mark.slow
def test_resume_on_complete_dataset_does_nothing(tmp_path, capsys):
    args = ["sweep", str(SMALL), "-o", str(tmp_path / "ds"), "--chunk-size", "500"]
    assert run(args, capsys)[0] == 0
    code, out, err = run(args, capsys)
    assert code == 2 and "--resume" in err and "--overwrite" in err
    code, out, err = run(args + ["--resume"], capsys)
    assert code == 0 and "nothing to do" in out
    code, out, err = run(args + ["--overwrite", "-q"], capsys)
    assert code == 0 and out == ""


@pytest.mark.parametrize(
    "spec, message",
    [
        ('[axes]\nnum_gpu = [8]', "axes: unknown input 'num_gpu' (did you mean 'num_gpus'?)"),
        ('filter = "mfu_percnt > 3"', "filter: unknown column 'mfu_percnt' (did you mean"),
        ("[axes]\nnum_gpus = {linspace = [8, 64, 0]}", "expected a whole number from 1"),
        ('[axes]\nseq_length = [1024, 0]', "axes.seq_length: got 0"),
        ('[output]\ncolumns = ["mfu"]', "output: unknown column 'mfu'"),
    ],
)
def test_bad_specs_exit_2_with_one_line_before_writing(tmp_path, capsys, spec, message):
    path = tmp_path / "bad.toml"
    path.write_text(spec)
    code, out, err = run(["sweep", str(path), "-o", str(tmp_path / "ds")], capsys)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "ds").exists()


def test_bad_options_exit_2(tmp_path, capsys):
    code, _, err = run(["sweep", str(tmp_path / "missing.toml")], capsys)
    assert code == 2 and "cannot read" in err
    code, _, err = run(["sweep", str(SMALL), "--shard", "2/2"], capsys)
    assert code == 2 and "--shard" in err
    code, _, err = run(["sweep", str(SMALL), "--resume", "--overwrite"], capsys)
    assert code == 2 and "either --resume or --overwrite" in err


def test_seed_profile_sweep_reproduces_the_seed_curves(tmp_path, capsys, seed_example):
    code, out, err = run(["sweep", str(ROOT / "sweeps" / "seed_profile.toml"), "-o",
                          str(tmp_path / "profile")], capsys)
    assert code == 0, err
    table = ds.dataset(tmp_path / "profile").to_table().sort_by("config_id")
    mfu = np.round(table["mfu_percent"].to_numpy().astype(np.float64), 2)
    gpus = table["num_gpus"].to_numpy()
    bw = table["link_bandwidth_gb_s"].to_numpy().astype(np.float64)
    curve_gpus = seed_example["profile"]["eff_vs_gpus"]
    curve_bw = seed_example["profile"]["eff_vs_bw"]
    assert gpus[:48].tolist() == [g for g, _ in curve_gpus]
    assert mfu[:48].tolist() == [e for _, e in curve_gpus]
    assert np.round(bw[48:], 1).tolist() == [b for b, _ in curve_bw]
    assert mfu[48:].tolist() == [e for _, e in curve_bw]


def test_dataset_metadata_file(tmp_path, capsys):
    assert run(["sweep", str(SMALL), "-o", str(tmp_path / "ds"), "-q"], capsys)[0] == 0
    meta = json.loads((tmp_path / "ds" / "_jaxmodel.json").read_text())
    assert meta["spec"] == SMALL.read_text()
    assert meta["configurations"] == 1152 and meta["model"] == "seed"


@pytest.mark.slow
def test_ctrl_c_prints_the_resume_command_and_resume_finishes(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    spec = tmp_path / "long.toml"
    spec.write_text(SMALL.read_text().replace("geomspace = [25, 3200, 6]",
                                              "geomspace = [25, 3200, 60]"))
    exe = str(Path(sys.executable).with_name("jaxmodel"))
    out = tmp_path / "ds"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.Popen([exe, "sweep", str(spec), "-o", str(out), "--chunk-size", "32",
                             "--x64"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 60
    while time.time() < deadline and not (out / "_manifest-p0000.jsonl").exists():
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.count("\n") == 1
    command = err.split("resume with: ")[1].split()
    assert command[:2] == ["jaxmodel", "sweep"] and "--resume" in command
    assert "--x64" in command and command[command.index("--chunk-size") + 1] == "32"
    done = subprocess.run([exe, *command[1:]], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    clean = subprocess.run([exe, "sweep", str(spec), "-o", str(tmp_path / "clean"), "-q",
                            "--chunk-size", "32", "--x64"], env=env)
    assert clean.returncode == 0
    a = ds.dataset(out).to_table().sort_by("config_id")
    b = ds.dataset(tmp_path / "clean").to_table().sort_by("config_id")
    assert a.equals(b)


@pytest.mark.parametrize(
    "filt, message",
    [
        ("mfu_percent", "is not a condition"),
        ("1 + 2", "is not a condition"),
        ("config_id", "is not a condition"),
        ("bottleneck > 1", "compares with == or !="),
        ("bottleneck == regime", "compares with == or !="),
        ('bottleneck == "nope"', "'nope' is not a value of bottleneck"),
        ("valid_layout and 3", "joins conditions"),
    ],
)
def test_filters_that_are_not_conditions_fail_before_writing(tmp_path, capsys, filt, message):
    path = tmp_path / "f.toml"
    path.write_text(f"filter = '{filt}'\n[axes]\nnum_gpus = [64]\n")
    code, _, err = run(["sweep", str(path), "-o", str(tmp_path / "ds")], capsys)
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "ds").exists()


def test_python_resume_reuses_the_stored_chunk_size_as_the_cli_does(tmp_path, capsys):
    """The chunk size is part of a sweep's identity; resuming without one
    continues with the dataset's own, in Python as on the command line."""
    import jaxmodel

    jaxmodel.sweep(SMALL, tmp_path / "py", chunk_size=500)
    rows = ds.dataset(tmp_path / "py").count_rows()
    again = jaxmodel.sweep(SMALL, tmp_path / "py", resume=True)
    assert again.chunks == 0 and again.configurations_done == 0
    assert ds.dataset(tmp_path / "py").count_rows() == rows
    assert run(["sweep", str(SMALL), "-o", str(tmp_path / "cli"), "--chunk-size", "500"],
               capsys)[0] == 0
    code, out, err = run(["sweep", str(SMALL), "-o", str(tmp_path / "cli"), "--resume"], capsys)
    assert code == 0 and "nothing to do" in out, err
