"""``--help``, ``presets`` and one-line errors answer without importing jax (issue 26).

Each command runs in a fresh interpreter (this process has jax imported long
ago) that reports, after the command, whether jax was ever imported.
"""

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
from jaxmodel.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "jax": "jax" in sys.modules}), file=sys.stderr)
"""


def _run(args, tmp_path):
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                            text=True, cwd=tmp_path, timeout=300)
    *message, report = result.stderr.strip().splitlines()
    return json.loads(report), result.stdout, "\n".join(message)


BAD_SPEC = 'model = "refined"\n[axes]\nnum_gpus = [8, "x"]\n'


@pytest.mark.parametrize("args, code, says", [
    (["--help"], 0, ""),
    (["eval", "--help"], 0, ""),
    (["presets"], 0, ""),
    (["presets", "--format", "json"], 0, ""),
    (["eval", "--model", "refined", "--num-gpus", "abc"], 2, "num_gpus: got 'abc'"),
    (["eval", "--model", "nope"], 2, "model: got 'nope'"),
    (["eval", "--bogus"], 2, "No such option: --bogus"),
    (["best", "--model", "refined", "--gpu", "nope"], 2, "gpu: got 'nope'"),
    (["sensitivity", "--model", "refined", "--of", "nope"], 2, "unknown output 'nope'"),
    (["sweep", "bad.toml"], 2, "axes.num_gpus: expected a number, got 'x'"),
    (["validate", "--set", "nope"], 2, "set: got 'nope'"),
])
def test_answers_without_importing_jax(args, code, says, tmp_path):
    (tmp_path / "bad.toml").write_text(BAD_SPEC)
    report, stdout, message = _run(args, tmp_path)
    assert report == {"code": code, "jax": False}, message
    if says:
        assert message.startswith("error: ") and says in message and "\n" not in message
    else:
        assert stdout


def test_a_command_that_computes_imports_jax(tmp_path):
    """The probe can see jax: a command that runs a jax program imports it."""
    report, stdout, _ = _run(["best", "--model", "seed", "--num-gpus", "64", "--format",
                              "json"], tmp_path)
    assert report == {"code": 0, "jax": True}
    assert json.loads(stdout)["top"]


@pytest.mark.parametrize("model", ["seed", "refined"])
def test_sensitivity_answers_on_the_host_without_jax(model, tmp_path):
    """Every continuous input, by forward mode on the host (issue 26)."""
    report, stdout, message = _run(["sensitivity", "--model", model, "--of", "mfu_percent"],
                                   tmp_path)
    assert report == {"code": 0, "jax": False}, message
    assert len(json.loads(stdout)["elasticity"]["mfu_percent"]) > 5


@pytest.mark.parametrize("model", ["seed", "refined"])
def test_eval_answers_on_the_host_without_jax(model, tmp_path):
    """One configuration and its profile curves: NumPy on the host (issue 26)."""
    report, stdout, message = _run(["eval", "--model", model, "--format", "json"], tmp_path)
    assert report == {"code": 0, "jax": False}, message
    doc = json.loads(stdout)
    assert doc["outputs"]["step_time_ms"] > 0 and len(doc["profile"]["eff_vs_bw"]) == 48


def test_validate_all_answers_on_the_host_without_jax(tmp_path):
    report, stdout, message = _run(["validate", "--all", "--format", "json"], tmp_path)
    assert report == {"code": 0, "jax": False}, message
    # Every row of every set and variant: 73 + 190 + 7 + 18 + 5 + 2 + 13 + 201 + 9 + 10
    # + 2 x 9 + 2 x 12.
    assert len(json.loads(stdout)["runs"]) == 570


@pytest.mark.parametrize("model", ["seed", "refined"])
def test_solve_answers_on_the_host_without_jax(model, tmp_path):
    """The solver run eagerly on the host (``jaxmodel.solving.solve_on_host``, issue 26);
    the answer, evaluated again, gives the target."""
    report, stdout, message = _run(["solve", "--model", model, "--target", "mfu_percent=30",
                                    "--vary", "link_bandwidth_gb_s"], tmp_path)
    assert report == {"code": 0, "jax": False}, message
    doc = json.loads(stdout)
    assert doc["reached"] is True
    assert doc["solved"]["mfu_percent"] == pytest.approx(30.0, rel=1e-9)


@pytest.mark.parametrize("args", [
    ["breakdown"],
    ["breakdown", "--compare", "tensor_parallel=1,2,4,8"],
    ["tornado", "--of", "mfu_percent"],
    ["profile"],
])
def test_plots_of_a_few_configurations_answer_on_the_host_without_jax(args, tmp_path):
    """A breakdown, a comparison and a tornado's title evaluate a few configurations
    for a person, as ``eval`` does: on the host, no compile (they compiled the refined
    model for 3-8 s before, issue 26)."""
    report, stdout, message = _run(["plot", *args, "-o", "a.png"], tmp_path)
    assert report == {"code": 0, "jax": False}, message
    assert stdout.startswith("wrote ") and (tmp_path / "a.png").stat().st_size > 0
