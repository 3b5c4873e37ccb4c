"""Result documents built in the core: what the CLI prints, importable without the CLI."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import jaxmodel
from jaxmodel.cli import app
from jaxmodel.documents import (
    dry_run_summary,
    evaluation_document,
    human_bytes,
    sensitivity_document,
    sensitivity_table,
    solve_document,
    sweep_summary,
)
from jaxmodel.report import to_json
from jaxmodel.sensitivity import sensitivities_on_host

runner = CliRunner()
SEED = jaxmodel.get_model("seed")


def test_a_dashboard_imports_the_documents_and_the_dashboard_without_the_cli():
    code = ("import sys, jaxmodel.documents, jaxmodel.dashboard.app, jaxmodel.dashboard.report\n"
            "print(sorted(m for m in sys.modules if m.startswith('jaxmodel.cli')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout


def test_evaluation_document_matches_the_seed_example(seed_example):
    doc = evaluation_document(SEED, SEED.defaults, x64=True)
    assert doc["outputs"] == seed_example["outputs"]
    points = seed_example["profile"]["eff_vs_gpus"]  # each point once (issue 27 item 13)
    assert doc["profile"]["eff_vs_gpus"] == [pt for i, pt in enumerate(points)
                                             if i == 0 or pt != points[i - 1]]
    assert doc["steps"] == 96 and "profile" not in evaluation_document(SEED, SEED.defaults,
                                                                       profile=False)


def test_sensitivity_document_against_the_seed_example(seed_example):
    s = jaxmodel.sensitivities(SEED.defaults, of=["mfu_percent"],
                               wrt=["link_bandwidth_gb_s", "num_gpus"], kind="both", x64=True,
                                   model="seed")
    doc = sensitivity_document(SEED, SEED.defaults, s)
    o = seed_example["outputs"]
    # MFU = compute / step, and only the TP and PP terms scale as 1 / bandwidth.
    assert doc["elasticity"]["mfu_percent"]["link_bandwidth_gb_s"] == pytest.approx(
        (o["tp_comm_ms"] + o["pp_comm_ms"]) / o["step_time_ms"], rel=1e-6)  # ms to 3 places
    assert doc["outputs"]["mfu_percent"] == pytest.approx(o["mfu_percent"], abs=0.05)
    # N = 64, t p = 32: the next GPU count adding a replica is 96.
    assert doc["stepped"]["num_gpus"] == {"from": 64, "to": 96.0, "note": doc["stepped"][
        "num_gpus"]["note"]}
    text = sensitivity_table(SEED, SEED.defaults, s)
    assert text.splitlines()[2].startswith("mfu_percent = ")
    assert "num_gpus" in text and "64 -> 96 (next step)" in text


def test_the_cli_prints_the_core_documents():
    # (the CLI differentiates one configuration on the host: issue 26)
    s = sensitivities_on_host(SEED.defaults, of=["step_time_ms"], kind="both", model="seed")
    result = runner.invoke(app, ["sensitivity", "--model", "seed", "--x64", "--of", "step_time_ms"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == json.loads(to_json(
        sensitivity_document(SEED, SEED.defaults, s)))


def test_solve_document_reaches_the_target():
    s = jaxmodel.solve(SEED.defaults, ("mfu_percent", 60.0), "link_bandwidth_gb_s",
                       model=SEED, x64=True)
    doc = solve_document(SEED, SEED.defaults, s, x64=True)
    assert doc["reached"] is True
    # Evaluated again at the answer, independently of the solver's own residual.
    assert doc["solved"]["mfu_percent"] == pytest.approx(60.0, rel=1e-9)
    assert doc["limit"]["link_bandwidth_gb_s"] == "infinity"
    assert doc["answer"].startswith("link_bandwidth_gb_s = ")
    assert json.loads(to_json(doc)) == doc


@pytest.mark.parametrize(("n", "text"), [(999, "999 B"), (1_234_567, "1.2 MB"),
                                         (5e15, "5,000.0 TB")])
def test_human_bytes(n, text):
    assert human_bytes(n) == text


def test_sweep_summaries_in_words(tmp_path):
    plan = SimpleNamespace(reducer=None, filter=None, size=1_000, num_chunks=2, chunk_size=512)
    result = SimpleNamespace(chunks=2, skipped_chunks=0, reduced=None, rows=1_000,
                             valid_rows=900, configurations_done=1_000, seconds=2.0,
                             rate=500.0, compile_seconds=1.5, bytes=12_345, parts=2, extra={})
    assert sweep_summary(plan, result, "out/x/", process=1, processes=2) == (
        "wrote 1,000 rows (900 valid) of 1,000 configurations (process 1 of 2) in 2.00 s "
        "(500 configurations/s, compile 1.50 s), 12.3 KB in 2 parts -> out/x/")
    done = SimpleNamespace(**{**vars(result), "chunks": 0, "skipped_chunks": 2})
    assert sweep_summary(plan, done, "out/x") == "nothing to do: out/x is complete (2 chunks)"
    one = SimpleNamespace(**{**vars(result), "chunks": 0, "skipped_chunks": 1})
    assert sweep_summary(plan, one, "out/x") == "nothing to do: out/x is complete (1 chunk)"
    # Issue 27 item 10: a resumed run (1 part of 1 row now, 2 parts of 600 and 400
    # from before) says what the dataset holds in all; plurals by count.
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jaxmodel.dataset import part_name

    for chunk, rows in ((0, 600), (1, 400), (2, 1)):
        pq.write_table(pa.table({"x": list(range(rows))}), tmp_path / part_name(0, chunk))
    resumed = SimpleNamespace(**{**vars(result), "chunks": 1, "skipped_chunks": 2, "rows": 1,
                                 "valid_rows": 1, "parts": 1})
    assert sweep_summary(plan, resumed, tmp_path).endswith(
        f"in 1 part -> {tmp_path}/; the dataset holds 1,001 rows in 3 parts (2 chunks from "
        "before)")
    est = {"rows": 1_000, "keep_fraction": 1.0, "probe": 1_000, "bytes": 2e6, "seconds": 3.0,
           "compile_seconds": 1.0, "writers": 1, "rate": 1e4, "write_rate": 5e5}
    assert dry_run_summary(plan, est, "out/x").splitlines() == [
        "configurations: 1,000", "chunks: 2 of 512", "expected rows: 1,000",
        "expected bytes: ~2.0 MB",
        "expected time: ~3.0 s + ~1.0 s compile with 1 writer (the probe: 10,000 "
        "configurations/s evaluated, 500,000 rows/s written per writer)",
        "output: out/x"]


def test_presets_documents_show_every_preset_with_its_model_inputs():
    from jaxmodel.documents import presets_document, presets_table
    from jaxmodel.presets import GPU_COLUMNS, GPUS, LLMS

    doc = presets_document()
    assert set(doc) == {"gpu", "llm"} and set(doc["llm"]) == set(LLMS)
    assert doc["gpu"]["h100-sxm"]["values"]["compute_tflops"] == 989
    lines = presets_table().splitlines()
    header = lines[1].split()
    assert header[0] == "name" and len(header) == 1 + sum(len(h.split()) for _, h in
                                                          GPU_COLUMNS)
    h100 = next(line.split() for line in lines if line.startswith("h100-sxm "))
    # compute, memory, HBM, NVLink per direction, network, GPUs per node (the datasheet;
    # its "80 GB" are GiB: 80 x 2**30 bytes = 85.8993 GB).
    assert h100 == ["h100-sxm", "989", f"{80 * 2**30 / 1e9:g}", "3.35", "450", "50", "8"]
    assert len([line for line in lines if line.split()[:1] and line.split()[0] in GPUS]) \
        == len(GPUS)


@pytest.mark.slow
def test_validation_documents_carry_the_published_figures():
    from jaxmodel.documents import validation_document, validation_text
    from jaxmodel.models.validation import builtin_table, table_summary, validate_table

    table = builtin_table("sc21")
    rows = validate_table(table, evaluate=jaxmodel.evaluate)
    doc = validation_document(table, rows, table_summary(rows))
    assert doc["set"] == "sc21" and doc["gpu"] == "a100-80gb-sxm" and len(doc["runs"]) == 10
    text = validation_text(table, rows).splitlines()
    assert text[0].startswith("set: sc21 (Narayanan et al. 2021")
    # Table 1's last row: 1T parameters on 3072 GPUs, 163 TFLOP/s measured per GPU.
    last = next(line for line in text if line.startswith("| 1008 | 3072 |"))
    assert "| 163 |" in last and doc["runs"][-1]["measured_tflops"] == 163


@pytest.mark.parametrize("on_host, programs", [(False, 1), (True, 0)])
def test_eval_evaluates_the_configuration_and_its_curves_in_one_program(on_host, programs):
    """Issue 26: the configuration was evaluated alone, then its profile curves as a
    batch: the model compiled twice (half of a cold refined eval).  Now one batch:
    one program, or none where the model runs on the host."""
    import dataclasses

    import jax
    from jax import monitoring

    from jaxmodel.api import as_dicts
    from jaxmodel.report import printed_outputs
    from jaxmodel.xla_options import quick_options

    model = dataclasses.replace(jaxmodel.get_model("seed"), on_host=on_host)
    values = {**model.defaults, "num_gpus": 96.0}
    jax.clear_caches()
    quick_options()  # (its one-time probe lowers a program of its own)
    lowered = []

    def on_duration(event, _secs, **_kw):
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            lowered.append(event)

    monitoring.register_event_duration_secs_listener(on_duration)
    try:
        doc = evaluation_document(model, values, x64=True)
    finally:
        monitoring.unregister_event_duration_listener(on_duration)
    assert len(lowered) == programs
    # the configuration's outputs are those it has evaluated alone
    alone = as_dicts(model, jaxmodel.evaluate(model, x64=True, **values))
    assert doc["outputs"] == {**printed_outputs(model, alone),
                              "verdict": model.verdict(values, alone)}


@pytest.mark.parametrize(("v", "sign", "text"), [
    (1360420.4, False, "1,360,420"), (51851.2, True, "+51,851"), (-16870.0, True, "-16,870"),
    (3383.864, False, "3384"), (-2.9812, True, "-2.981"), (0.00012, False, "1.200e-04"),
    (0.0, True, "+0")])
def test_one_number_format_per_document(v, sign, text):
    """Issue 27 item 13: not +5.185e+04 beside 1.36042e+06 and 1.687e+04."""
    from jaxmodel.documents import plain_number

    assert plain_number(v, sign=sign) == text
