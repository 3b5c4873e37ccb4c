"""The manual cannot go stale: the generated pages equal what the code gives now, and
the hand-written pages agree with the code where they quote it (switch ranges,
preset names, defaults, file paths), name no issue numbers, and explain every
long module."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import typer.main

from jaxmodel.cli import app
from jaxmodel.cli.docs import pages, stale_pages
from jaxmodel.manual import domain, models_page, number, physics_page, presets_page
from jaxmodel.models import MODELS
from jaxmodel.models.presets import GPUS, LLMS, MOE_LLMS
from jaxmodel.models.validation import SETS
from jaxmodel.models.validation_moe import MOE_SET
from jaxmodel.models.validation_sets import NEW_SETS

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
GROUP = typer.main.get_command(app)
# Every hand-written page: the README and docs/ outside the generated reference.
WRITTEN = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").rglob("*.md"))
                                 if REFERENCE not in p.parents)]
EVERY_PAGE = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _text(paths) -> list[tuple[str, str]]:
    return [(str(p.relative_to(ROOT)), p.read_text()) for p in paths]


# -- generated pages -------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(pages(GROUP)))
def test_generated_page_is_fresh(name):
    """Regenerate the page and compare with the file (`make docs` rewrites it)."""
    path = REFERENCE / name
    assert path.exists(), f"{path} is missing: run `make docs`"
    assert path.read_text() == pages(GROUP)[name](), f"{path} is stale: run `make docs`"


def test_a_field_doc_changed_without_regeneration_is_stale(monkeypatch):
    refined = MODELS["refined"]
    field = refined.input_field("zero_stage")
    changed = dataclasses.replace(field, doc="sharding, described differently")
    inputs = tuple(changed if f.name == "zero_stage" else f for f in refined.inputs)
    assert stale_pages(GROUP, REFERENCE) == []
    monkeypatch.setitem(MODELS, "refined", dataclasses.replace(refined, inputs=inputs))
    assert stale_pages(GROUP, REFERENCE) == ["models.md"]
    assert "sharding, described differently" in models_page()


def test_a_changed_default_or_preset_is_stale(monkeypatch):
    seed = MODELS["seed"]
    f = seed.input_field("num_gpus")
    inputs = tuple(dataclasses.replace(f, default=f.default * 2) if g is f else g
                   for g in seed.inputs)
    monkeypatch.setitem(MODELS, "seed", dataclasses.replace(seed, inputs=inputs))
    assert stale_pages(GROUP, REFERENCE) == ["models.md"]
    monkeypatch.setitem(MODELS, "seed", seed)
    h100 = GPUS["h100-sxm"]
    monkeypatch.setitem(GPUS, "h100-sxm", dataclasses.replace(
        h100, values={**h100.values, "compute_tflops": 1000.0}))
    assert stale_pages(GROUP, REFERENCE) == ["presets.md"]


def test_a_changed_physics_docstring_is_stale(monkeypatch):
    """The physics page is the modules' docstrings: editing one without
    regenerating fails, and the page carries the new text."""
    from jaxmodel.models.refined import memory

    assert stale_pages(GROUP, REFERENCE) == []
    monkeypatch.setattr(memory, "__doc__", "Memory per GPU, described differently.")
    assert stale_pages(GROUP, REFERENCE) == ["physics.md"]
    assert "### `jaxmodel/models/refined/memory.py`\n\nMemory per GPU, described " \
        "differently." in physics_page()


def test_every_module_of_the_refined_package_states_its_physics():
    """A new module of the refined package (a Mamba layer, say) is on the physics
    page once the model declares it; none is left off, each has a docstring."""
    package = ROOT / "jaxmodel" / "models" / "refined"
    modules = {f"jaxmodel.models.refined.{p.stem}" for p in package.glob("*.py")
               if p.stem != "__init__"}
    declared = MODELS["refined"].physics
    assert modules <= set(declared) and len(declared) == len(set(declared))
    page = physics_page()
    for name in declared:
        path = name.replace(".", "/") + ".py"
        body = page.split(f"### `{path}`\n\n")[1]
        assert len(body.split("\n### ")[0].strip()) > 200, f"{path}: no physics stated"


def test_the_models_page_says_what_the_fields_say():
    """Spot checks against the declarations, written independently of the generator."""
    page = models_page()
    zero = MODELS["refined"].input_field("zero_stage")
    assert (zero.low, zero.high) == (0.0, 3.0)
    row = next(line for line in page.splitlines() if line.startswith("| `zero_stage` |"))
    assert "| 0 | whole 0..3 |" in row and "`--zero-stage`" in row
    for model in MODELS.values():
        for f in model.inputs:
            assert f"| `{f.name}` | `{f.option}` |" in page
        for f in model.outputs:
            assert f"| `{f.name}` |" in page
    assert domain(MODELS["refined"].input_field("matmul_efficiency")) == "(0, 1]"
    assert domain(MODELS["seed"].input_field("num_gpus")).startswith("1..")
    assert number(4.0) == "4" and number(0.55) == "0.55"


def test_the_presets_page_lists_every_preset():
    page = presets_page()
    for name in (*GPUS, *LLMS):
        assert f"`{name}`" in page, name
    assert set(MOE_LLMS) <= set(LLMS)
    # Each LLM under one heading: the hybrid Mamba-2 / MoE models (experts and Mamba-2
    # layers) under their own, not among the dense ones.
    sections = dict(re.findall(r"\n(Dense|Mixture-of-experts|Hybrid Mamba-2 / MoE) LLMs "
                               r"\(\d+\): ([^\n]*)", page))
    listed = {kind: re.findall(r"`([^`]+)`", names) for kind, names in sections.items()}
    assert sorted(sum(listed.values(), [])) == sorted(LLMS)
    assert "nemotron3-nano" in listed["Hybrid Mamba-2 / MoE"]
    for name in listed["Dense"]:
        assert LLMS[name].values.get("num_experts", 1) <= 1, name
        assert LLMS[name].values.get("mamba_layers", 0) == 0, name


def test_the_cli_page_lists_every_command_and_option():
    page = (REFERENCE / "cli.md").read_text()
    for name, cmd in GROUP.commands.items():
        subs = getattr(cmd, "commands", {name: cmd})
        for sub_name, sub in subs.items():
            path = f"jaxmodel {name}" + (f" {sub_name}" if sub is not cmd else "")
            assert f"## `{path}`" in page
            for p in sub.params:
                if getattr(p, "hidden", False) or (
                        getattr(p, "rich_help_panel", None) or "").startswith("Inputs of "):
                    continue
                if getattr(p, "opts", None) and p.opts[0].startswith("--"):
                    assert p.opts[0] in page, (path, p.opts[0])


# -- hand-written pages against the code -----------------------------------------------------

_SWITCH = re.compile(r"`(--[a-z0-9-]+) (\d+(?:\|\d+)+|\d+\.\.\d+)`")


def switch_ranges(text: str) -> list[tuple[str, str]]:
    """``(option, range)`` for every ``--name 0|1|2`` or ``--name 0..3`` quoted in ``text``."""
    return _SWITCH.findall(text)


def _option_fields():
    return {f.option: f for m in MODELS.values() for f in m.inputs}


def test_switch_ranges_in_the_docs_are_the_fields_ranges():
    fields = _option_fields()
    found = []
    for page, text in _text(EVERY_PAGE):
        for option, quoted in switch_ranges(text):
            assert option in fields, f"{page}: {option} is no model input"
            f = fields[option]
            if ".." in quoted:
                lo, hi = quoted.split("..")
                values = list(range(int(lo), int(hi) + 1))
            else:
                values = [int(v) for v in quoted.split("|")]
            assert values == list(range(int(f.low), int(f.high) + 1)), (page, option, quoted)
            found.append(option)
    assert {"--zero-stage", "--recompute", "--flash-attention"} <= set(found)


# Other programs' flags the pages quote by name (Megatron-LM's), and XLA's
# (underscored, which no jaxmodel option is).
FOREIGN_FLAGS = {"--overlap-param-gather", "--tp-comm-overlap", "--recompute-method",
                 "--cp-comm-type", "--overlap-moe-expert-parallel-comm",
                 "--moe-router-force-load-balancing"}


def _every_option() -> set[str]:
    found = {f.option for m in MODELS.values() for f in m.inputs}

    def walk(cmd) -> None:
        for p in cmd.params:
            if getattr(p, "hidden", False):  # a retired option (--fp8) that only says so
                continue
            found.update(o for o in (*p.opts, *getattr(p, "secondary_opts", ()))
                         if o.startswith("--"))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(GROUP)
    return found


def test_every_option_quoted_in_the_docs_exists():
    """A renamed or removed option (an input replaced by another) fails here, in prose
    too, not only in the commands tests/test_readme.py parses."""
    options = _every_option()
    quoted = []
    for page, text in _text(WRITTEN):
        for option in re.findall(r"`(--[a-z0-9][a-z0-9_-]*)", text):
            if "_" in option or option in FOREIGN_FLAGS:
                continue
            assert option in options, f"{page}: {option} is no option of jaxmodel"
            quoted.append(option)
    assert {"--zero-stage", "--gpu", "--dry-run", "--resume"} <= set(quoted)
    assert "--no-such-option" not in options and "--fp8" not in options


def test_a_wrong_switch_range_is_caught():
    assert switch_ranges("ZeRO-1 (`--zero-stage 0|1`)") == [("--zero-stage", "0|1")]


# A preset's name always holds a digit (h100-sxm, kimi-k2), unlike words after --gpu in prose.
_PRESET_USE = re.compile(r"(?:--(gpu|llm) |\b(gpu|llm) = \")([a-z0-9.-]*\d[a-z0-9.-]*)")
# Backquoted names shaped like a preset (a family, a dash, a size or variant).
_PRESET_LIKE = re.compile(r"`((?:a100|h100|h200|h800|b200|b300|gb200|gb300|mi3\d\d|gpt|llama|"
                          r"megatron|mixtral|deepseek|qwen|kimi|nemotron)[a-z0-9.]*-[a-z0-9.-]+)`")


VALIDATION_SETS = {*SETS, *NEW_SETS, MOE_SET}


def test_every_preset_named_in_the_docs_exists():
    named = []
    for page, text in _text(WRITTEN):
        for gl, gl2, name in _PRESET_USE.findall(text):
            table = GPUS if (gl or gl2) == "gpu" else LLMS
            assert name in table, (page, name)
            named.append(name)
        for name in _PRESET_LIKE.findall(text):
            if name in VALIDATION_SETS:  # `megatron-h100`: a set, named like a preset
                continue
            assert name in GPUS or name in LLMS, (page, name)
            named.append(name)
    assert {"h100-sxm", "llama3-70b", "qwen3-235b-a22b"} <= set(named)


_DEFAULT_PATTERNS = (
    # `--opt` (default 0.7 ...   /  `--opt V` (default ...
    re.compile(r"`(--[a-z0-9-]+)`[^`\n(]{0,12}\(default:? ([0-9.]*[0-9])([kM]?)\b"),
    # (`--opt 1`, default)   /  `--opt 1` (the default)
    re.compile(r"`(--[a-z0-9-]+) ([0-9.]+)()`,? (?:default\b|\(the default\))"),
    # default `name` 0.55
    re.compile(r"default `([a-z0-9_]+)` ([0-9.]+)()"),
    # `name` (4 us)  /  `--opt` (4 GB: ...
    re.compile(r"`(--[a-z0-9-]+|[a-z0-9_]+)` \(([0-9.]+)() (?:us|GB)\b"),
)


def quoted_defaults(text: str) -> list[tuple[str, float]]:
    """``(input name, value)`` for every default a page quotes in one of the forms above."""
    scale = {"": 1.0, "k": 1e3, "M": 1e6}
    out = []
    for pattern in _DEFAULT_PATTERNS:
        for name, value, suffix in pattern.findall(text):
            out.append((name.lstrip("-").replace("-", "_"), float(value) * scale[suffix]))
    return out


def test_defaults_quoted_in_the_docs_are_the_models_defaults():
    defaults: dict[str, set[float]] = {}
    for m in MODELS.values():
        for f in m.inputs:
            defaults.setdefault(f.name, set()).add(f.default)
    found = []
    for page, text in _text(WRITTEN):
        for name, value in quoted_defaults(text):
            if name not in defaults:
                continue
            assert value in defaults[name], (page, name, value, defaults[name])
            found.append(name)
    assert {"matmul_efficiency", "attention_efficiency", "dp_bucket_params",
            "kernel_overhead_us", "reserved_memory_gb"} <= set(found)


def test_a_wrong_quoted_default_is_caught():
    assert quoted_defaults("the `--matmul-efficiency` ceiling (default 0.9; the GPU") == [
        ("matmul_efficiency", 0.9)]
    assert quoted_defaults("`--dp-bucket-params` (default 40M, Megatron") == [
        ("dp_bucket_params", 40e6)]


# An issue number of this project; a source's own tracker is cited with its name
# ("nccl-tests issue 212", "DeepSeek-V3 issue 28"), which a reader can follow.
def project_issues(text: str) -> list[str]:
    out = []
    for m in re.finditer(r"(\S*)\s+\(?(issues?\s*#?\d+)", text, re.IGNORECASE):
        if not re.fullmatch(r"\(?[\w.]+[-/][\w.-]+", m.group(1)):
            out.append(m.group(2))
    return out


def test_no_page_names_an_issue_number():
    for page, text in _text(EVERY_PAGE):
        assert project_issues(text) == [], page
    assert project_issues("### The 2026 terms (issue 11)") == ["issue 11"]
    assert project_issues("(`bench/README.md`, issue 15)") == ["issue 15"]
    assert project_issues("what issue 24 saw; nccl-tests issue 212 and DeepSeek-V3 issue 28") \
        == ["issue 24"]


_PATH = re.compile(r"`((?:jaxmodel|tests|bench|sweeps)/[A-Za-z0-9_./-]+\.(?:py|toml|csv|json|md))`")


def test_files_named_in_the_docs_exist():
    named = 0
    for page, text in _text(EVERY_PAGE):
        for path in _PATH.findall(text):
            assert (ROOT / path).exists(), (page, path)
            named += 1
    assert named > 30


def test_every_long_module_is_explained():
    """A module over 600 lines is named, with why, in architecture.md's section."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Files over 600 lines", 1)[1]
    for path in sorted((ROOT / "jaxmodel").rglob("*.py")):
        if len(path.read_text().splitlines()) > 600:
            assert f"`{path.relative_to(ROOT)}`" in section, path


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    top = "\n".join(lines[:40])
    assert "make run" in top and "make test" in top
    for page in ("docs/architecture.md", "docs/model.md", "docs/reference/models.md",
                 "docs/reference/presets.md", "docs/reference/cli.md"):
        assert f"]({page}" in "\n".join(lines), page


_EXTRA = re.compile(r"(?:'\.|jaxmodel)\[([a-z0-9_,-]+)\]|`(cuda\d*)` (?:extra|is offered)")


def test_every_extra_named_in_the_docs_exists():
    """The install lines (`pip install -e '.[cuda]'`, `jaxmodel[plot]`) name extras of
    pyproject.toml, and jax's CUDA plugin is what the `cuda` extra installs."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    named = set()
    for page, text in _text(WRITTEN):
        for group, single in _EXTRA.findall(text):
            for name in (group.split(",") if group else [single]):
                assert name in extras, (page, name)
                named.add(name)
    assert {"cuda", "plot", "dashboard"} <= named
    assert any(d.startswith("jax[cuda12]") for d in extras["cuda"])
