"""Presets in --config files and suggestions by prefix (issue 17 item 10)."""

import json

import pytest
from typer.testing import CliRunner

import jaxmodel
from jaxmodel.cli import app
from jaxmodel.errors import SpecError, closest
from jaxmodel.expr import parse

runner = CliRunner()
REFINED = jaxmodel.get_model("refined")


def _inputs(args):
    result = runner.invoke(app, ["eval", "--model", "seed", "--no-profile", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["inputs"]


@pytest.mark.slow
@pytest.mark.parametrize("suffix, text", [
    (".toml", 'gpu = "h100-sxm"\nllm = "llama3-70b"\nnum_gpus = 128\n'),
    (".json", '{"gpu": "h100-sxm", "llm": "llama3-70b", "num_gpus": 128}'),
])
def test_config_file_accepts_presets_like_a_sweep_base(tmp_path, suffix, text):
    path = tmp_path / f"c{suffix}"
    path.write_text(text)
    got = _inputs(["--model", "refined", "--config", str(path)])
    expected = {**REFINED.defaults, **jaxmodel.presets.apply_presets(
        REFINED, gpu="h100-sxm", llm="llama3-70b"), "num_gpus": 128}
    assert got == pytest.approx(expected)
    # explicit values in the file beat its presets; command-line options beat both
    path.write_text(text.replace("num_gpus", "compute_tflops"))
    assert _inputs(["--model", "refined", "--config", str(path)])["compute_tflops"] == 128
    got = _inputs(["--model", "refined", "--config", str(path), "--gpu", "a100-80gb-sxm",
                   "--compute-tflops", "300"])
    assert got["compute_tflops"] == 300
    # A100's "80 GB" are 80 GiB = 85.89934592e9 bytes.
    assert got["gpu_memory_gb"] == 85.89934592 and got["link_bandwidth_gb_s"] == \
        jaxmodel.presets.GPUS["a100-80gb-sxm"].values["link_bandwidth_gb_s"]


def test_config_preset_errors_are_one_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('gpu = "h100"\n')
    result = runner.invoke(app, ["eval", "--model", "seed", "--config", str(path)])
    assert result.exit_code == 2
    assert "did you mean 'h100-sxm'?" in result.output
    path.write_text("gpu = 3\n")
    result = runner.invoke(app, ["eval", "--model", "seed", "--config", str(path)])
    assert result.exit_code == 2 and "a preset name" in result.output


def test_suggestions_by_prefix():
    assert closest("h100", jaxmodel.presets.GPUS) == " (did you mean 'h100-sxm'?)"
    assert closest("llama3", jaxmodel.presets.LLMS) == " (did you mean 'llama3-8b'?)"
    assert closest("mfu", REFINED.output_names) == " (did you mean 'mfu_percent'?)"
    assert closest("num_gpu", REFINED.input_names) == " (did you mean 'num_gpus'?)"
    assert closest("zzz", REFINED.input_names) == ""
    with pytest.raises(SpecError, match="did you mean 'mfu_percent'"):
        parse("mfu >= 40", set(REFINED.output_names))
    result = runner.invoke(app, ["eval", "--model", "seed", "--gpu", "h100"])
    assert result.exit_code == 2 and "did you mean 'h100-sxm'?" in result.output
