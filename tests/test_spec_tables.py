"""The spec's tables: one parser, one error style, every error before a plan exists."""

import ast
import re
from pathlib import Path

import pytest

from jaxmodel.errors import SpecError
from jaxmodel.reduce import GroupBest, Pareto, TopK
from jaxmodel.spec import parse_spec
from jaxmodel.spec_tables import (
    OUTPUT_KEYS,
    REDUCE_KEYS,
    SENSITIVITY_KEYS,
    SOLVE_KEYS,
    SensitivityRequest,
    SolveRequest,
)

GRID = "[axes]\nnum_gpus = [8, 16]\n"
PACKAGE = Path(__file__).resolve().parents[1] / "jaxmodel"

# A valid body for each table, so that only the unknown key is wrong.
VALID = {
    "output": (OUTPUT_KEYS, ""),
    "sensitivity": (SENSITIVITY_KEYS, 'of = ["mfu_percent"]\n'),
    "solve": (SOLVE_KEYS, 'target = "mfu_percent=60"\nvary = "compute_tflops"\n'),
    "reduce": (REDUCE_KEYS, 'top_k = 3\nby = "mfu_percent"\n'),
}


@pytest.mark.parametrize("table", sorted(VALID))
def test_an_unknown_key_is_refused_in_the_same_words_in_every_table(table):
    keys, body = VALID[table]
    with pytest.raises(SpecError) as info:
        parse_spec(f"{GRID}[{table}]\n{body}zz_unknown = 1\n")
    message = str(info.value)
    assert message == f"{table}: unknown key 'zz_unknown'; allowed: {', '.join(keys)}"


@pytest.mark.parametrize("table", sorted(VALID))
def test_a_misspelt_key_gets_a_suggestion_in_every_table(table):
    keys, body = VALID[table]
    wrong = keys[0][:-1] + "x" if len(keys[0]) > 3 else keys[0] + "x"
    with pytest.raises(SpecError, match=re.escape(f"(did you mean {keys[0]!r}?)")):
        parse_spec(f"{GRID}[{table}]\n{body}{wrong} = 1\n")


@pytest.mark.parametrize("table", ["base", "axes", "sample", *sorted(VALID)])
def test_a_table_given_as_a_value_is_refused_in_one_style(table):
    with pytest.raises(SpecError) as info:
        parse_spec(f"{table} = 5\n")
    assert str(info.value).startswith(f"{table}: got 5; allowed: a table")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "text, field, value",
    [
        ("[reduce]\ntop_k = 0\nby = \"mfu_percent\"", "reduce.top_k", "0"),
        ("[reduce]\ntop_k = 3\nby = 7", "reduce.by", "7"),
        ("[reduce]\ntop_k = 3\nby = \"mfu_percent\"\nminimize = 1", "reduce.minimize", "1"),
        ("[reduce]\npareto = [\"a\", \"b\"]\ncapacity = 0", "reduce.capacity", "0"),
        ("[sensitivity]\nkind = \"hessian\"", "sensitivity.kind", "'hessian'"),
        ("[sensitivity]\nwrt = [3]", "sensitivity.wrt", "[3]"),
        ("[solve]\ntarget = 60\nvary = \"compute_tflops\"", "solve.target", "60"),
        ("[output]\nrows_per_file = 0", "output.rows_per_file", "0"),
        ("[output]\ncompression = \"brotli\"", "output.compression", "'brotli'"),
        ("[output]\npath = \"\"", "output.path", "''"),
    ],
)
def test_a_bad_value_names_the_field_the_value_and_what_is_allowed(text, field, value):
    with pytest.raises(SpecError) as info:
        parse_spec(GRID + text)
    assert str(info.value).startswith(f"{field}: got {value}; allowed: ")
    assert "\n" not in str(info.value)


def test_tables_are_validated_when_the_spec_is_parsed_not_when_it_is_planned():
    # Before: parse_spec accepted these and only build_plan refused them.
    for text in ("[reduce]\ntopk = 3", "[sensitivity]\nof = [\"mfu\"]",
                 "[solve]\ntarget = \"mfu_percent=60\""):
        with pytest.raises(SpecError):
            parse_spec(GRID + text)


def test_the_parsed_requests_are_on_the_spec():
    spec = parse_spec(GRID + '[sensitivity]\nof = "mfu_percent"\nwrt = ["compute_tflops"]\n'
                      '[solve]\ntarget = {step_time_ms = 1000}\nvary = "link_bandwidth_gb_s"\n'
                      '[reduce]\ntop_k = 4\nby = "step_time_ms"\nminimize = true\n')
    assert spec.sensitivity == SensitivityRequest(("mfu_percent",), ("compute_tflops",),
                                                  "gradient")
    assert spec.solve == SolveRequest("step_time_ms", 1000.0, "link_bandwidth_gb_s")
    assert spec.reduce == TopK("step_time_ms", 4, False)
    assert spec.tables["reduce"] == {"top_k": 4, "by": "step_time_ms", "minimize": True}
    plain = parse_spec(GRID)
    assert plain.sensitivity is plain.solve is plain.reduce is None


def test_reduce_forms():
    group = parse_spec(GRID + '[reduce]\nby = "mfu_percent"\ngroup_by = "num_gpus"\n').reduce
    assert group == GroupBest("mfu_percent", ("num_gpus",), True)
    front = parse_spec(GRID + '[reduce]\npareto = ["used_gpus", "step_time_ms"]\n'
                       "minimize = [true, false]\ncapacity = 16\n").reduce
    assert front == Pareto("used_gpus", "step_time_ms", True, False, 16)


def test_capacity_without_pareto_is_refused_rather_than_ignored():
    with pytest.raises(SpecError, match="reduce.capacity: got 8; allowed: only with pareto"):
        parse_spec(GRID + '[reduce]\ntop_k = 3\nby = "mfu_percent"\ncapacity = 8\n')


def _imports(module: str) -> set[str]:
    """Every ``jaxmodel`` module ``module`` imports, at its top or inside a function."""
    path = PACKAGE.joinpath(*module.split(".")[1:])
    path = path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxmodel"):
            found.add(node.module)
            for alias in node.names:
                sub = PACKAGE.joinpath(*node.module.split(".")[1:], alias.name)
                if sub.with_suffix(".py").exists() or (sub / "__init__.py").exists():
                    found.add(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("jaxmodel")}
    return found


def test_the_spec_layer_does_not_import_the_api_or_the_cli():
    """``jaxmodel.spec`` and everything it imports outside the models (which sit
    below every layer) never reach the API, the computations on top of it, or
    the CLI."""
    layer, todo = set(), ["jaxmodel.spec", "jaxmodel.spec_tables"]
    while todo:
        module = todo.pop()
        if module in layer or module == "jaxmodel" or module.startswith("jaxmodel.models"):
            continue
        layer.add(module)
        todo += _imports(module)
    above = {"jaxmodel.api", "jaxmodel.sensitivity", "jaxmodel.solving", "jaxmodel.sweeping",
             "jaxmodel.engine"}
    assert not layer & above, layer & above
    assert not [m for m in layer if m.startswith("jaxmodel.cli")]
    assert "jaxmodel.spec_tables" in layer and "jaxmodel.reduce" in layer
