"""Validation against Narayanan et al. 2021 (SC21) Table 1, and ``jaxmodel validate``."""

import csv
import json

import pytest
from conftest import DATA
from typer.testing import CliRunner

from jaxmodel import InputError
from jaxmodel.cli import app
from jaxmodel.validate import SC21_TABLE1, read_runs, sc21_runs, summary, validate

runner = CliRunner()
CSV = DATA / "sc21_table1.csv"

# The issue's ten rows, as printed there: params (B), heads, hidden, layers,
# t, p, d, GPUs, batch, micro-batch, measured TFLOP/s per GPU.
ISSUE_ROWS = """
1.7, 24, 2304, 24, 1, 1, 32, 32, 512, 16, 137 / 3.6, 32, 3072, 30, 2, 1, 32, 64, 512, 16, 138 /
7.5, 32, 4096, 36, 4, 1, 32, 128, 512, 16, 142 / 18.4, 48, 6144, 40, 8, 1, 32, 256, 1024, 8, 135 /
39.1, 64, 8192, 48, 8, 2, 32, 512, 1536, 4, 138 /
76.1, 80, 10240, 60, 8, 4, 32, 1024, 1792, 2, 140 /
145.6, 96, 12288, 80, 8, 8, 24, 1536, 2304, 2, 148 /
310.1, 128, 16384, 96, 8, 16, 15, 1920, 2160, 1, 155 /
529.6, 128, 20480, 105, 8, 35, 9, 2520, 2520, 1, 163 /
1008.0, 160, 25600, 128, 8, 64, 6, 3072, 3072, 1, 163
"""


def issue_rows():
    flat = " ".join(ISSUE_ROWS.split())
    return [tuple(float(v) for v in row.split(",")) for row in flat.split("/")]


def test_data_file_and_built_in_table_are_the_issue_rows():
    with open(CSV, newline="") as f:
        from_csv = [tuple(float(v) for v in row) for row in list(csv.reader(f))[1:]]
    assert from_csv == issue_rows()
    assert [tuple(float(v) for v in row) for row in SC21_TABLE1] == issue_rows()
    for run in sc21_runs():
        assert run.tensor_parallel * run.pipeline_parallel * run.data_parallel == run.gpus


def test_measured_step_time_from_eq3_matches_the_papers_training_time():
    # Narayanan et al. 2021 sec. 5.1: the 1T model on 3072 GPUs at 163 TFLOP/s
    # would train on 450B tokens in about 84 days (their eq. 4, 8 T P / (n X)).
    one_t = sc21_runs()[-1]
    steps = 450e9 / (one_t.batch * 2048)
    days = steps * one_t.measured_step_ms / 1e3 / 86400
    assert days == pytest.approx(84, rel=0.03)


def test_validation_meets_the_target_on_the_data_file():
    rows = validate(read_runs(CSV))
    stats = summary(rows)
    assert stats["runs"] == 10
    assert all(r["valid_layout"] for r in rows)
    assert all(r["memory_gb_per_gpu"] <= 80 for r in rows)
    assert stats["mean_abs_error_percent"] <= 8.0, rows
    assert stats["max_abs_error_percent"] <= 15.0, rows
    for r in rows:
        # Same FLOPs on both sides, so the step-time error mirrors the TFLOP/s error.
        assert (1 + r["tflops_error_percent"] / 100) * (1 + r["step_error_percent"] / 100) \
            == pytest.approx(1.0, rel=1e-9)


def test_validate_command_table_and_json(tmp_path):
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 0, result.output
    table = result.output.splitlines()
    assert sum(line.startswith("| ") and "|---" not in line for line in table) == 11
    assert "mean absolute error" in result.output
    result = runner.invoke(app, ["validate", "--format", "json", "--data", str(CSV)])
    doc = json.loads(result.output)
    assert len(doc["runs"]) == 10 and doc["summary"]["mean_abs_error_percent"] <= 8.0


def test_bad_data_file_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("params_b,heads\n1,2\n")
    result = runner.invoke(app, ["validate", "--data", str(bad)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    with pytest.raises(InputError):
        read_runs(tmp_path / "missing.csv")
