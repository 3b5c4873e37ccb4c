"""Validation against Narayanan et al. 2021 (SC21) Table 1, and ``jaxmodel validate``."""

import csv
import json

import pytest
from conftest import DATA
from typer.testing import CliRunner

import jaxmodel
from jaxmodel import InputError
from jaxmodel.cli import app
from jaxmodel.models.validation import SC21_TABLE1, read_runs, sc21_runs, summary, validate

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


@pytest.mark.slow
def test_validation_meets_the_target_on_the_data_file():
    rows = validate(read_runs(CSV), evaluate=jaxmodel.evaluate)
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


@pytest.mark.slow
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


# --- the Megatron-LM H100 set and files that name their GPU (issues 11 and 17) ----

SHARED_CSV = DATA.parent.parent.parent / "shared" / "validation" / \
    "megatron_lm_h100_weak_scaling.csv"


def test_packaged_megatron_csv_keeps_its_source_and_rows():
    from jaxmodel.models.validation import MEGATRON_H100_CSV
    text = MEGATRON_H100_CSV.read_text()
    assert text.startswith("# NVIDIA/Megatron-LM README.md")
    if SHARED_CSV.exists():
        assert text == SHARED_CSV.read_text()


@pytest.mark.slow
def test_megatron_h100_meets_the_target_with_one_set_of_settings():
    from jaxmodel.models.validation import (
        MEGATRON_H100_SETTINGS,
        builtin_table,
        table_summary,
        validate_table,
    )
    table = builtin_table("megatron-h100")
    rows = validate_table(table, evaluate=jaxmodel.evaluate)
    stats = table_summary(rows)
    assert stats["runs"] == 9 and all(r["valid_layout"] for r in rows)
    assert all(r["memory_gb_per_gpu"] <= 80 for r in rows)
    # Issue 11's target: 5% mean, 10% max.
    assert stats["mean_abs_error_percent"] <= 5.0, rows
    assert stats["max_abs_error_percent"] <= 10.0, rows
    # One set of settings: nothing per row beyond the table's own columns.
    assert {"micro_batch", "virtual_stages", "recompute"} <= set(MEGATRON_H100_SETTINGS)


def test_sc21_still_holds_with_the_2026_model():
    stats = summary(validate(evaluate=jaxmodel.evaluate))
    assert stats["mean_abs_error_percent"] <= 8.0 and stats["max_abs_error_percent"] <= 15.0


@pytest.mark.slow
def test_validate_set_command():
    result = runner.invoke(app, ["validate", "--set", "megatron-h100"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("set: megatron-h100") and "h100-sxm" in result.output
    assert sum(line.startswith("| ") and "|---" not in line
               for line in result.output.splitlines()) == 10
    bad = runner.invoke(app, ["validate", "--set", "h100"])
    assert bad.exit_code == 2 and "one of sc21, megatron-h100" in bad.output


def _h100_rows(tmp_path, header="", gpu_column=False, name="mine.csv"):
    from jaxmodel.models.validation import MEGATRON_H100_CSV
    lines = [ln for ln in MEGATRON_H100_CSV.read_text().splitlines() if not ln.startswith("#")]
    if gpu_column:
        lines = [lines[0] + ",gpu"] + [ln + ",h100-sxm" for ln in lines[1:]]
    path = tmp_path / name
    path.write_text((header + "\n" if header else "") + "\n".join(lines) + "\n")
    return path


def test_a_file_without_gpu_says_what_was_assumed(tmp_path):
    # Issue 17 item 6: H100 rows given without naming the GPU used to be read
    # silently with the SC21 hardware ("-64.5%").  Now a file of MFU rows is read
    # with the megatron-h100 set and the output says so.
    path = _h100_rows(tmp_path)
    result = runner.invoke(app, ["validate", "--data", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["gpu"] == "h100-sxm" and doc["set"] == "megatron-h100"
    assert doc["assumed"] and "names no GPU" in doc["assumed"]
    assert doc["summary"]["mean_abs_error_percent"] <= 5.0
    table = runner.invoke(app, ["validate", "--data", str(path)])
    assert "assumed:" in table.output
    # The SC21 file too: its assumption is printed, not silent.
    sc21 = runner.invoke(app, ["validate", "--data", str(CSV)])
    assert "assumed: " in sc21.output and "a100-80gb-sxm" in sc21.output


def test_a_file_names_its_gpu_in_a_header_or_a_column(tmp_path):
    header = _h100_rows(tmp_path, "# jaxmodel-validate: set=megatron-h100, gpu=h200, "
                                  "attention_efficiency=0.5")
    doc = json.loads(runner.invoke(app, ["validate", "--data", str(header), "--format",
                                         "json"]).output)
    assert doc["gpu"] == "h200" and doc["assumed"] is None
    assert doc["settings"]["attention_efficiency"] == 0.5
    column = _h100_rows(tmp_path, gpu_column=True, name="column.csv")
    doc = json.loads(runner.invoke(app, ["validate", "--data", str(column), "--format",
                                         "json"]).output)
    assert doc["assumed"] is None
    # A different GPU gives a different answer: the name is used, not ignored.
    h200 = runner.invoke(app, ["validate", "--data", str(header), "--format", "json"])
    h100 = runner.invoke(app, ["validate", "--set", "megatron-h100", "--format", "json"])
    assert json.loads(h200.output)["runs"][0]["predicted"] != \
        json.loads(h100.output)["runs"][0]["predicted"]


def test_bad_header_and_gpu_are_one_line(tmp_path):
    for header in ("# jaxmodel-validate: gpu=h100", "# jaxmodel-validate: colour=blue",
                   "# jaxmodel-validate: recompute"):
        path = _h100_rows(tmp_path, header)
        result = runner.invoke(app, ["validate", "--data", str(path)])
        assert result.exit_code == 2, (header, result.output)
        assert len(result.output.strip().splitlines()) == 1
