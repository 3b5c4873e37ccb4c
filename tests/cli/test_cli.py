"""``jaxmodel eval`` through CliRunner and the installed console script.

typer 0.29's CliRunner keeps stderr apart (``result.stderr``), so every error
test checks that stdout is empty and stderr is exactly one line.  Usage errors
(an unknown option, a missing value, a bad choice) are turned into one line by
``jaxmodel.cli.main``, not by the typer app (which draws a box), so those are
run through ``main``.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA
from reference import seed_reference
from typer.testing import CliRunner

import jaxmodel
from jaxmodel.cli import app, main

runner = CliRunner()
MODEL = jaxmodel.get_model("seed")
SEED = MODEL.defaults
SEED_FILE = DATA / "seed_example.json"
CONSOLE_SCRIPT = Path(sys.executable).parent / "jaxmodel"


def run_ok(*args: str) -> str:
    result = runner.invoke(app, ["eval", "--model", "seed", *args])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    return result.stdout


def eval_json(*args: str) -> dict:
    text = run_ok(*args)
    assert text.count("\n") == 1  # one line of JSON, as the seed file
    return json.loads(text)


def reference(**changes):
    inputs = {**SEED, **changes}
    return seed_reference(**{k: int(v) if MODEL.input_field(k).integer else float(v)
                             for k, v in inputs.items()})


# --- output -----------------------------------------------------------------


def test_options_set_the_inputs_and_outputs_follow_the_reference():
    doc = eval_json("--num-gpus", "128", "--link-bandwidth-gb-s", "900", "--x64",
                    "--no-profile")
    assert doc["inputs"] == {**{k: int(v) if MODEL.input_field(k).integer else v
                                for k, v in SEED.items()},
                             "num_gpus": 128, "link_bandwidth_gb_s": 900.0}
    ref = reference(num_gpus=128, link_bandwidth_gb_s=900)
    out = doc["outputs"]
    assert out["data_parallel"] == ref["data_parallel"] == 4
    assert out["tokens_per_step"] == ref["tokens_per_step"]
    for key in ("compute_time_ms", "tp_comm_ms", "pp_comm_ms", "pipeline_bubble_ms",
                "dp_allreduce_ms", "step_time_ms"):
        assert out[key] == round(ref[key], 3), key
    assert out["mfu_percent"] == round(ref["mfu_percent"], 1)
    assert out["throughput_tokens_s"] == float(round(ref["throughput_tokens_s"]))
    assert out["bottleneck"] == ref["bottleneck"]


def test_float32_default_agrees_with_x64_to_printed_rounding():
    f32 = eval_json("--num-gpus", "96", "--no-profile")["outputs"]
    f64 = eval_json("--num-gpus", "96", "--no-profile", "--x64")["outputs"]
    for key, v in f64.items():
        if isinstance(v, float):
            assert f32[key] == pytest.approx(v, rel=1e-5, abs=1e-3), key
        else:
            assert f32[key] == v, key


def test_no_profile_skips_the_curves():
    doc = eval_json("--no-profile")
    assert "profile" not in doc and doc["steps"] == 0
    assert list(doc) == ["model", "inputs", "outputs", "steps", "node", "wall_ms"]
    full = eval_json()
    assert full["steps"] == 96 and len(full["profile"]["eff_vs_bw"]) == 48


def test_format_table_shows_the_breakdown_bottleneck_and_verdict(seed_example):
    text = run_ok("--format", "table", "--no-profile", "--x64")
    lines = text.splitlines()
    ref = reference()
    step = ref["step_time_ms"]
    rows = {
        "compute": ref["compute_time_ms"],
        "tensor-parallel all-reduce": ref["tp_comm_ms"],
        "pipeline point-to-point": ref["pp_comm_ms"],
        "pipeline bubble": ref["pipeline_bubble_ms"],
        "exposed DP all-reduce": ref["dp_allreduce_ms"],
        "step time": step,
    }
    columns = set()
    for label, ms in rows.items():
        (line,) = [ln for ln in lines if ln.startswith(label + "  ")]
        cells = line[len(label):].split()
        assert cells == [f"{ms:,.3f}", f"{100 * ms / step:.1f}%"], label
        columns.add((line.index(cells[0]) + len(cells[0]), len(line)))
    assert len(columns) == 1  # aligned: every ms and every share ends in the same column
    assert "bottleneck: compute" in lines
    assert f"verdict: {seed_example['outputs']['verdict']}" in lines
    assert any(ln.startswith("MFU: 50.8%") for ln in lines)


def test_format_table_for_an_invalid_layout():
    text = run_ok("--format", "table", "--num-gpus", "16", "--no-profile")
    assert "bottleneck: invalid" in text
    assert "verdict: invalid layout -- tensor x pipeline = 8 x 4 = 32 GPUs" in text


def test_config_seed_file_is_accepted_as_is(seed_example):
    """Without --model: the file's model line selects the seed (issue 27 item 1)."""
    doc = eval_json("--config", str(SEED_FILE))
    assert doc["model"] == seed_example["model"]
    assert doc["inputs"] == seed_example["inputs"]
    assert doc["outputs"] == seed_example["outputs"]
    points = seed_example["profile"]["eff_vs_gpus"]  # each point once (issue 27 item 13)
    assert doc["profile"] == {**seed_example["profile"], "eff_vs_gpus": [
        pt for i, pt in enumerate(points) if i == 0 or pt != points[i - 1]]}


def test_config_seed_shaped_file_and_command_line_override(tmp_path, seed_example):
    shaped = dict(seed_example, inputs={**seed_example["inputs"], "num_gpus": 128})
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(shaped))
    doc = eval_json("--config", str(path), "--tensor-parallel", "4", "--no-profile", "--x64")
    assert doc["inputs"]["num_gpus"] == 128  # from the file
    assert doc["inputs"]["tensor_parallel"] == 4  # the command line wins
    assert doc["inputs"]["pipeline_parallel"] == 4  # the file (= the default)
    ref = reference(num_gpus=128, tensor_parallel=4)
    assert doc["outputs"]["data_parallel"] == ref["data_parallel"] == 8
    assert doc["outputs"]["step_time_ms"] == round(ref["step_time_ms"], 3)


def test_config_flat_toml_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("# a flat TOML file of inputs\nnum_gpus = 256\n"
                    "link_bandwidth_gb_s = 900.0\ngradient_accum_steps = 32\n")
    doc = eval_json("--config", str(path), "--no-profile", "--x64")
    assert doc["inputs"]["num_gpus"] == 256
    assert doc["inputs"]["link_bandwidth_gb_s"] == 900.0
    assert doc["inputs"]["gradient_accum_steps"] == 32
    ref = reference(num_gpus=256, link_bandwidth_gb_s=900, gradient_accum_steps=32)
    assert doc["outputs"]["tokens_per_step"] == ref["tokens_per_step"]
    assert doc["outputs"]["step_time_ms"] == round(ref["step_time_ms"], 3)


@pytest.mark.slow
def test_installed_console_script(seed_example):
    assert CONSOLE_SCRIPT.exists(), "install the project first (make test does)"
    done = subprocess.run([str(CONSOLE_SCRIPT), "eval", "--model", "seed", "--no-profile"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["outputs"] == seed_example["outputs"]

    bad = subprocess.run([str(CONSOLE_SCRIPT), "eval", "--num-gpus", "-1", "--bogus", "2"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "--bogus" in bad.stderr
    assert "Traceback" not in bad.stderr


# --- malformed input: exit code 2, one line on stderr, no traceback ----------


def assert_one_line_error(result, *names):
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    err = result.stderr
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err.startswith("error: ")
    assert "Traceback" not in err
    for name in names:
        assert name in err, (name, err)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--num-gpus", "0"], ["num_gpus", "got 0;", "whole number >= 1"]),
        (["--tensor-parallel", "-2"], ["tensor_parallel", "got -2;"]),
        (["--link-bandwidth-gb-s", "-450"], ["link_bandwidth_gb_s", "-450", "> 0"]),
        (["--compute-tflops", "0"], ["compute_tflops", "got 0;", "> 0"]),
        (["--compute-tflops", "nan"], ["compute_tflops", "nan", "finite"]),
        (["--model-params-b", "inf"], ["model_params_b", "inf", "finite"]),
        (["--link-bandwidth-gb-s", "-inf"], ["link_bandwidth_gb_s", "-inf"]),
        (["--num-gpus", "64.5"], ["num_gpus", "64.5", "whole number"]),
        (["--tensor-parallel", "2.5"], ["tensor_parallel", "2.5", "whole number"]),
        (["--pipeline-parallel", "1.5"], ["pipeline_parallel", "1.5", "whole number"]),
        (["--gradient-accum-steps", "NaN"], ["gradient_accum_steps", "nan"]),
        (["--num-gpus", "99999999999"], ["num_gpus", "99999999999", "<= 16777216"]),
        (["--seq-length", "abc"], ["seq_length", "'abc'"]),
        (["--micro-batch", ""], ["micro_batch", "''"]),
        (["--hidden-dim", "8192x"], ["hidden_dim", "'8192x'"]),
        (["--model", "nonesuch"], ["model", "'nonesuch'", "seed"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and v and v[0].startswith("--") else None,
)
def test_malformed_option_value(args, names):
    assert_one_line_error(runner.invoke(app, ["eval", "--model", "seed", *args]), *names)


@pytest.mark.parametrize(
    ("name", "text", "names"),
    [
        ("unknown_key.json", '{"num_gpu": 64}', ["num_gpu", "64", "did you mean 'num_gpus'"]),
        ("unknown_key.toml", "num_gpus = 64\nlink_bw = 4\n", ["link_bw", "4"]),
        ("zero.json", '{"inputs": {"num_gpus": 0}}', ["num_gpus", "got 0;"]),
        ("true.json", '{"num_gpus": true}', ["num_gpus", "True"]),
        ("nan.json", '{"link_bandwidth_gb_s": NaN}', ["link_bandwidth_gb_s", "nan"]),
        ("text.toml", 'num_gpus = "many"\n', ["num_gpus", "'many'"]),
        ("list.json", '{"num_gpus": [64]}', ["num_gpus", "[64]"]),
        ("syntax.json", '{"num_gpus": 64', ["config", "syntax.json", "valid JSON"]),
        ("syntax.toml", "num_gpus = \n", ["config", "syntax.toml", "valid TOML"]),
        ("array.json", "[64, 8]", ["config", "array.json", "an object"]),
    ],
)
def test_malformed_config_file(tmp_path, name, text, names):
    path = tmp_path / name
    path.write_text(text)
    assert_one_line_error(runner.invoke(app, ["eval", "--model", "seed", "--config", str(path)]),
                          *names)


def test_unreadable_config_file(tmp_path):
    missing = tmp_path / "missing.json"
    assert_one_line_error(runner.invoke(app, ["eval", "--model", "seed", "--config", str(missing)]),
                          "config", "missing.json", "readable file")
    assert_one_line_error(runner.invoke(app, ["eval", "--model", "seed", "--config",
                                              str(tmp_path)]),
                          "config", str(tmp_path), "readable file")


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["eval", "--model", "seed", "--bogus", "3"], ["--bogus"]),
        (["eval", "--model", "seed", "--num-gpu", "64"], ["--num-gpu"]),
        (["eval", "--model", "seed", "--format", "xml"], ["--format", "xml"]),
        (["eval", "--model", "seed", "--num-gpus"], ["--num-gpus", "requires an argument"]),
        (["nosuch"], ["nosuch"]),
    ],
)
def test_usage_errors_through_main(capsys, argv, names):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: ")
    assert "Traceback" not in captured.err
    for name in names:
        assert name in captured.err


def test_main_runs_eval(capsys, seed_example):
    with pytest.raises(SystemExit) as e:
        main(["eval", "--model", "seed", "--no-profile"])
    assert e.value.code == 0
    assert json.loads(capsys.readouterr().out)["outputs"] == seed_example["outputs"]


def test_values_past_float32_and_text_in_files_are_one_line_errors(tmp_path, capsys):
    from jaxmodel.cli import main

    def run(args):
        with pytest.raises(SystemExit) as info:
            main(args)
        return info.value.code, capsys.readouterr().err

    code, err = run(["eval", "--model", "seed", "--link-bandwidth-gb-s", "1e300"])
    assert code == 2 and "float32's range" in err and err.count("\n") == 1
    code, err = run(["eval", "--model", "seed", "--compute-tflops", "1e-300"])
    assert code == 2 and "compute_tflops: got 1e-300" in err
    config = tmp_path / "c.json"
    config.write_text('{"num_gpus": "64"}')
    code, err = run(["eval", "--model", "seed", "--config", str(config)])
    assert code == 2 and "num_gpus: got '64'" in err and "not text" in err
    # eval answers in float64 on the host (issue 26): a result past float32's
    # range is a number there ...
    with pytest.raises(SystemExit) as info:
        main(["eval", "--model", "seed", "--compute-tflops", "1.2e-38", "--no-profile"])
    assert info.value.code == 0
    assert json.loads(capsys.readouterr().out)["outputs"]["compute_time_ms"] > 3.5e38
    # ... and where a float32 program overflows, the document prints null, never
    # a traceback
    from jaxmodel.api import as_dicts, evaluate
    from jaxmodel.report import to_json

    outputs = as_dicts(jaxmodel.get_model("seed"), evaluate("seed", compute_tflops=1.2e-38))
    assert '"compute_time_ms": null' in to_json({"outputs": outputs})
