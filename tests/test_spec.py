"""Sweep specifications: axis kinds, zips, samples, and one-line errors for bad specs."""

from pathlib import Path

import numpy as np
import pytest

from jaxmodel.errors import InputError, SpecError
from jaxmodel.spec import load_spec, parse_spec


def test_axis_kinds_and_order():
    spec = parse_spec("""
model = "seed"
[axes]
link_bandwidth_gb_s = {linspace = [100, 400, 4]}
num_gpus = {powers_of_two = [6, 64]}
micro_batch = {range = [1, 8, 3]}
compute_tflops = {geomspace = [100, 10000, 3]}
tensor_parallel = {geomspace = [1, 8, 7]}
[[zip]]
seq_length = [1024, 2048]
gradient_accum_steps = [8, 4]
""")
    dims = {d.names: d.values for d in spec.dims}
    np.testing.assert_array_equal(dims[("link_bandwidth_gb_s",)][0], [100, 200, 300, 400])
    np.testing.assert_array_equal(dims[("num_gpus",)][0], [8, 16, 32, 64])
    np.testing.assert_array_equal(dims[("micro_batch",)][0], [1, 4, 7])
    np.testing.assert_allclose(dims[("compute_tflops",)][0], [100, 1000, 10000])
    # integer input from geomspace: 1, 1.41, 2, 2.83, 4, 5.66, 8 -> rounded, deduplicated
    np.testing.assert_array_equal(dims[("tensor_parallel",)][0], [1, 2, 3, 4, 6, 8])
    assert spec.size == 4 * 4 * 3 * 3 * 6 * 2
    assert spec.varied[:2] == ("link_bandwidth_gb_s", "num_gpus")
    assert spec.dims[-1].names == ("seq_length", "gradient_accum_steps")
    assert spec.base["model_params_b"] == 70.0  # seed default


def test_sample_table():
    spec = parse_spec("""
model = "seed"
[sample]
n = 1000
seed = 7
link_bandwidth_gb_s = {log_uniform = [25, 3200]}
tensor_parallel = {choice = [1, 2, 4, 8]}
micro_batch = {uniform = [1, 8]}
""")
    assert spec.size == 1000 and spec.sample.seed == 7
    assert [d.kind for d in spec.sample.distributions] == ["log_uniform", "choice", "uniform"]


def test_bundled_specs_parse():
    from pathlib import Path

    sweeps = Path(__file__).resolve().parents[1] / "sweeps"
    sizes = {p.stem: load_spec(p).size for p in sweeps.glob("*.toml")}
    assert sizes["seed_profile"] == 96
    assert 1_000_000 <= sizes["default"] <= 10_000_000
    assert max(sizes.values()) > 10**9


@pytest.mark.parametrize(
    "text, message",
    [
        ("[axes]\nlink_bandwith_gb_s = [1]", "did you mean 'link_bandwidth_gb_s'"),
        ("[axis]\nnum_gpus = [1]", "did you mean 'axes'"),
        ("[axes]\nnum_gpus = []", "axes.num_gpus: empty axis"),
        ("[axes]\nnum_gpus = {range = [10, 5, 1]}", "empty axis"),
        ("[axes]\nnum_gpus = \"many\"", "expected a list of values"),
        ("[axes]\nnum_gpus = [1, \"x\"]", "expected a number"),
        ("[axes]\nnum_gpus = {linspce = [1, 2, 3]}", "did you mean 'linspace'"),
        ("[axes]\nnum_gpus = {linspace = [1, 2]}", "expected [lo, hi, n]"),
        ("[axes]\nnum_gpus = {geomspace = [0, 8, 3]}", "positive bounds"),
        ("[[zip]]\nnum_gpus = [1, 2]\nmicro_batch = [1]", "equal lengths"),
        ("[axes]\nnum_gpus = [8]\n[[zip]]\nnum_gpus = [1]", "already varied"),
        ("[sample]\nn = 10\nnum_gpus = {normal = [1, 2]}", "unknown distribution"),
        ("[sample]\nnum_gpus = {uniform = [1, 2]}", "missing 'n'"),
        ("[axes]\nnum_gpus=[8]\n[sample]\nn=3\nmicro_batch={uniform=[1,2]}", "not both"),
        ("[output]\ncompression = \"brotli2\"", "output.compression"),
        ("[output]\nrow_per_file = 5", "did you mean 'rows_per_file'"),
        ("model = \"nope\"", "model"),
        ("this is not toml", "invalid TOML"),
    ],
)
def test_bad_specs_give_one_line(text, message):
    with pytest.raises((SpecError, InputError)) as info:
        parse_spec(text)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "text, field, value",
    [
        ("[axes]\nnum_gpus = [8, 0]", "axes.num_gpus", 0),
        ("[axes]\ntensor_parallel = [1.5]", "axes.tensor_parallel", 1.5),
        ("[axes]\nlink_bandwidth_gb_s = [-1.0]", "axes.link_bandwidth_gb_s", -1.0),
        ("[base]\nnum_layers = 0", "base.num_layers", 0),
        ("[axes]\nmicro_batch = {linspace = [0, 4, 5]}", "axes.micro_batch", 0),
    ],
)
def test_values_outside_domain_name_field_and_value(text, field, value):
    with pytest.raises(InputError) as info:
        parse_spec(text)
    assert info.value.field == field
    assert info.value.value == value


@pytest.mark.parametrize(
    "text, message",
    [
        ("[axes]\nnum_gpus = {range = [1, inf, 1]}", "expected a finite number"),
        ("[axes]\nnum_gpus = {powers_of_two = [1, inf]}", "expected a finite number"),
        ('[output]\ncolumns = ["mfu_percent", "mfu_percent"]', "listed twice"),
        ("[sample]\nn = 5\nseed = 4294967296\nnum_gpus = {uniform = [1, 8]}", "sample.seed"),
        ("[output]\nrow_group_size = 9223372036854775807", "output.row_group_size"),
        ("description = 5", "description: expected text"),
        ("[axes]\nnum_gpus = {range = [1, 1000001, 1]}\n"
         "link_bandwidth_gb_s = {range = [1, 1000001, 1]}\n"
         "compute_tflops = {range = [1, 1000001, 1]}\nmicro_batch = {range = [1, 10001, 1]}",
         "more than a sweep may hold"),
    ],
)
def test_values_that_would_break_later_are_refused_up_front(text, message):
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    assert message in str(info.value)


def test_a_sweep_of_2_to_the_61_configurations_runs_its_last_chunk():
    from jaxmodel.engine import Plan, Todo

    spec = parse_spec("model = 'seed'\n[axes]\nnum_gpus = {range = [1, 2049, 1]}\n"
                      "link_bandwidth_gb_s = {range = [1, 1048577, 1]}\n"
                      "compute_tflops = {range = [1, 65537, 1]}\n"
                      "micro_batch = {range = [1, 16385, 1]}\n")
    assert spec.size == 2**61
    plan = Plan(spec, chunk_size=1024)
    todo = Todo(plan, range(plan.num_chunks - 3, plan.num_chunks), {plan.num_chunks - 2})
    assert list(todo) == [plan.num_chunks - 3, plan.num_chunks - 1]
    assert todo.configurations == 2048 and todo.skipped == 1
    rows, n, _ = plan.rows_for(plan.num_chunks - 1)
    assert n == 1024 and rows["config_id"][-1] == 2**61 - 1
    assert rows["num_gpus"][-1] == 2048 and rows["micro_batch"][-1] == 2**14


def test_relative_paths_are_read_from_the_specs_folder(tmp_path, monkeypatch):
    """Issue 27 item 9: [output] path and [base] config both from the spec's folder."""
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "inputs.toml").write_text("num_gpus = 128\n")
    (folder / "s.toml").write_text('model = "seed"\n[base]\nconfig = "inputs.toml"\n'
                                   '[axes]\ntensor_parallel = [1, 2]\n'
                                   '[output]\npath = "../data/s"\n')
    monkeypatch.chdir(tmp_path)
    spec = load_spec(folder / "s.toml")
    assert Path(spec.output.path).resolve() == (tmp_path / "data" / "s").resolve()
    assert spec.base["num_gpus"] == 128
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_spec(Path("..") / "specs" / "s.toml")
    assert Path(spec.output.path).resolve() == (tmp_path / "data" / "s").resolve()


def test_a_spec_with_presets_keeps_its_name():
    """Regression: the loop over [base]'s presets reused the variable holding the
    spec's name, so a spec naming an llm preset was called after the preset and
    wrote to out/<llm> (make run's sweep went to out/llama3-70b, not out/default)."""
    spec = parse_spec('model = "refined"\n[base]\ngpu = "h100-sxm"\nllm = "llama3-70b"\n',
                      name="default")
    assert spec.name == "default"
    assert load_spec(Path(__file__).resolve().parents[1] / "sweeps" / "default.toml").name \
        == "default"
