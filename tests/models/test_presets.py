"""Hardware and model presets: sources, values, layering, the CLI."""

import json

import pytest
from typer.testing import CliRunner

import jaxmodel
from jaxmodel import InputError
from jaxmodel.cli import app
from jaxmodel.presets import GPUS, LLMS, MOE_LLMS, apply_presets, get_preset

runner = CliRunner()
SEED = jaxmodel.get_model("seed")
REFINED = jaxmodel.get_model("refined")


def test_every_preset_has_a_source_and_only_model_inputs():
    names = set(SEED.input_names) | set(REFINED.input_names)
    for preset in [*GPUS.values(), *LLMS.values()]:
        assert preset.source and preset.description
        assert set(preset.values) <= names, preset.name
        for name, value in preset.values.items():
            field = (REFINED if name in REFINED.input_names else SEED).input_field(name)
            field.check_scalar(value)


def test_the_issue_lists_are_covered():
    assert {"a100-40gb-sxm", "a100-80gb-sxm", "h100-sxm", "h200", "b200", "mi300x"} <= set(GPUS)
    assert {"gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b",
            "llama3-405b"} <= set(LLMS)
    assert sum(name.startswith("megatron-") for name in LLMS) == 10


def test_datasheet_figures():
    # A100: 312 TFLOP/s dense bf16, NVLink 600 GB/s total = 300 per direction,
    # 200 Gb/s HDR per GPU = 25 GB/s; H100 SXM: 989 dense, 3.35 TB/s.
    a100 = get_preset("gpu", "a100-80gb-sxm").values
    assert (a100["compute_tflops"], a100["link_bandwidth_gb_s"],
            a100["network_bandwidth_gb_s"]) == (312, 300, 25)
    h100 = get_preset("gpu", "h100-sxm").values
    assert (h100["compute_tflops"], h100["hbm_bandwidth_tb_s"]) == (989, 3.35)


@pytest.mark.parametrize("name", sorted(n for n in LLMS if n not in MOE_LLMS))
def test_architecture_reproduces_the_published_parameter_count(name):
    # (MoE presets: total and active counts in tests/test_moe.py.)
    # The refined model counts parameters from the architecture; a preset whose
    # shape is mistyped would miss its published size.  Published sizes are
    # rounded to one decimal (SC21 prints 1.7 for eq. 2's 1.65), hence abs=0.06.
    values = apply_presets(REFINED, llm=name)
    params = float(jaxmodel.evaluate(REFINED, x64=True, **values).model_params_b)
    assert params == pytest.approx(LLMS[name].values["model_params_b"], rel=0.01, abs=0.06)


def test_apply_presets_keeps_each_models_own_inputs():
    seed = apply_presets(SEED, gpu="h100-sxm", llm="llama3-70b")
    assert seed == {"compute_tflops": 989.0, "link_bandwidth_gb_s": 450.0,
                    "model_params_b": 70.6, "hidden_dim": 8192.0, "num_layers": 80.0,
                    "seq_length": 8192.0}
    refined = apply_presets(REFINED, gpu="h100-sxm", llm="llama3-70b")
    # H100's "80 GB" are 80 GiB: 80 x 2^30 = 85,899,345,920 bytes.
    assert refined["num_kv_heads"] == 8 and refined["gpu_memory_gb"] == 85.89934592
    assert apply_presets(REFINED) == {}


def test_unknown_preset_names_the_closest():
    with pytest.raises(InputError, match="did you mean 'h100-sxm'"):
        apply_presets(REFINED, gpu="h100sxm")
    with pytest.raises(InputError, match="llm: got 'llama4'"):
        apply_presets(REFINED, llm="llama4")


@pytest.mark.slow
def test_layering_defaults_presets_config_command_line(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"num_layers": 40}))
    result = runner.invoke(app, [
        "eval", "--model", "refined", "--no-profile", "--llm", "llama3-70b",
        "--gpu", "h200", "--config", str(config), "--hidden-dim", "4096",
    ])
    assert result.exit_code == 0, result.output
    inputs = json.loads(result.output)["inputs"]
    assert inputs["gpu_memory_gb"] == 141 * 2**30 / 1e9  # preset (141 GiB) over default
    assert inputs["vocab_size"] == 128256         # preset over default
    assert inputs["num_layers"] == 40             # config over preset
    assert inputs["hidden_dim"] == 4096           # command line over preset
    assert inputs["tensor_parallel"] == REFINED.defaults["tensor_parallel"]


def test_seed_model_takes_presets_too():
    result = runner.invoke(app, ["eval", "--no-profile", "--gpu", "a100-80gb-sxm",
                                 "--llm", "gpt3-175b"])
    assert result.exit_code == 0, result.output
    inputs = json.loads(result.output)["inputs"]
    assert inputs["compute_tflops"] == 312.0 and inputs["model_params_b"] == 175.0


@pytest.mark.parametrize("option", ["--gpu", "--llm"])
def test_bad_preset_is_one_line_exit_2(option):
    result = runner.invoke(app, ["eval", "--model", "refined", option, "nope"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {option[2:]}: got 'nope'")


def test_presets_command_lists_everything():
    result = runner.invoke(app, ["presets"])
    assert result.exit_code == 0, result.output
    for name in [*GPUS, *LLMS]:
        assert name in result.output
    doc = json.loads(runner.invoke(app, ["presets", "--format", "json"]).output)
    assert set(doc["gpu"]) == set(GPUS) and set(doc["llm"]) == set(LLMS)
    assert doc["gpu"]["h100-sxm"]["values"]["compute_tflops"] == 989
    assert doc["gpu"]["h100-sxm"]["source"].startswith("NVIDIA H100")


def test_installed_console_script_lists_presets():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("jaxmodel")
    if not script.exists():
        pytest.skip("console script not installed beside this python")
    done = subprocess.run([str(script), "presets", "--format", "json"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "llama3-405b" in json.loads(done.stdout)["llm"]


def test_issue_11_presets():
    assert {"h800", "b300", "gb200-nvl72", "gb300-nvl72", "mi355x"} <= set(GPUS)
    assert {"llama3.1-405b", "nemotron4-340b", "qwen3-32b"} <= set(LLMS)
    for gpu in GPUS.values():
        assert {"fp8_tflops", "num_sms", "matmul_efficiency"} <= set(gpu.values), gpu.name
        assert gpu.values["fp8_tflops"] >= gpu.values["compute_tflops"]
    # The NVL72 racks are one NVLink domain of 72 GPUs; H800's NVLink is 400 GB/s
    # in total, 200 per direction.
    assert GPUS["gb200-nvl72"].values["gpus_per_node"] == 72
    assert GPUS["h800"].values["link_bandwidth_gb_s"] == 200
    # Measured large-GEMM ceilings: newer NVIDIA GPUs sustain a smaller fraction.
    assert (GPUS["a100-80gb-sxm"].values["matmul_efficiency"]
            > GPUS["h100-sxm"].values["matmul_efficiency"]
            > GPUS["b200"].values["matmul_efficiency"])
    llama = LLMS["llama3.1-405b"].values
    assert (llama["num_layers"], llama["hidden_dim"], llama["ffn_hidden_dim"],
            llama["num_heads"], llama["num_kv_heads"], llama["vocab_size"]) == (
        126, 16384, 53248, 128, 8, 128256)
