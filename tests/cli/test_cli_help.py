"""--help groups the input options by the model that takes them (issue 17 item 11)."""

import re

import pytest
import typer
from typer.testing import CliRunner

import jaxmodel
from jaxmodel.cli import app

runner = CliRunner()


def panels(text: str) -> dict[str, list[str]]:
    """Panel title -> the --options listed in it, from rich's boxed help."""
    out: dict[str, list[str]] = {}
    title = None
    for line in text.splitlines():
        head = re.match(r"^╭─ (.+?) ─", line)
        if head:
            title = head.group(1)
            out[title] = []
        # The option stands one space in; a description wrapped onto a line of
        # its own may also begin with "--", but further in.
        elif title and (opt := re.match(r"^│ (--[\w-]+)", line)):
            out[title].append(opt.group(1))
    return out


@pytest.mark.parametrize("command", ["eval", "best", "sensitivity", "solve"])
def test_help_groups_inputs_by_model(command):
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "160"})
    assert result.exit_code == 0
    got = panels(result.output)
    seed, refined = jaxmodel.get_model("seed"), jaxmodel.get_model("refined")
    option = {f.name: f.option for m in (seed, refined) for f in m.inputs}
    both = set(seed.input_names) & set(refined.input_names)
    assert set(got["Inputs of every model"]) == {option[n] for n in both}
    assert set(got["Inputs of model seed only"]) == \
        {option[n] for n in set(seed.input_names) - both}
    assert set(got["Inputs of model refined only"]) == \
        {option[n] for n in set(refined.input_names) - both}
    assert "--model-params-b" in got["Inputs of model seed only"]
    assert "--num-heads" in got["Inputs of model refined only"]
    titles = list(got)
    assert titles.index("Inputs of every model") < titles.index("Inputs of model seed only")


def test_a_seed_only_option_with_the_refined_model_names_the_output():
    result = runner.invoke(app, ["eval", "--model", "refined", "--model-params-b", "175"])
    assert result.exit_code == 2
    err = result.output
    assert err.count("\n") == 1 and err.startswith("error: --model-params-b: got '175'")
    assert "'Inputs of model refined only'" in err
    assert "model 'refined' computes model_params_b (an output)" in err


def test_best_help_at_80_columns_cuts_no_word():
    """Issue 27 item 13: at 80 columns rich folds the help text; a word longer than
    the column ("min:used_gpus,max:throughp…") was cut off."""
    result = runner.invoke(app, ["best", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    pareto = result.output[result.output.index("--pareto"):].split("--format")[0]
    assert "…" not in pareto and "max:throughput_tokens_s" in pareto


def _commands(group, path=()):
    """Every command path of ``group`` (typer's click-style group), itself first."""
    out = [path]
    for name, command in group.commands.items():
        out += _commands(command, (*path, name)) if hasattr(command, "commands") \
            else [(*path, name)]
    return out


COMMANDS = _commands(typer.main.get_command(app))


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) or "jaxmodel" for p in COMMANDS])
def test_help_at_80_columns_shows_flags_untyped_and_cuts_nothing(path):
    """Issue 27 item 13: ``--help <bool>`` (typer prints a type for flags, which
    take no value), and option help cut off with an ellipsis at 80 columns (a
    Megatron flag name longer than the column)."""
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "--help" in result.output
    assert "<bool>" not in result.output
    assert "…" not in result.output
