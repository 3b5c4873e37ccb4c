"""The commands of the README and of every page under docs/, checked so that they cannot rot.

Extraction rule (keep it in mind when adding to the README or docs/):

* A **command** is a line in a fenced block without a language tag (a bare
  ```` ``` ````) that starts with ``.venv/bin/jaxmodel ``, joined with the lines
  that follow it while a line ends in ``\\`` (as the shell does).  A ``#``
  comment at the end is dropped (``shlex`` rules).
* Lines containing ``...`` are elided variants of the command above them and
  are skipped; so are synopses (``jaxmodel sweep SPEC.toml [-o DIR] ...``, no
  ``.venv/bin/``), ``make`` and ``pip`` lines.
* A fenced ``python`` block is a **snippet**, run as is.

The pages are read in order: the README, then ``docs/**/*.md`` sorted by path.

``make test`` (fast): every command parses against the CLI (each subcommand,
option and value type exists, via click's own parser, nothing run), and every
input file it names (a ``.toml``, ``.json`` or ``.csv`` argument that is not
an ``-o`` output) exists relative to the repository root, where the README's
commands are run, or is written by an earlier command's ``-o``.

``-m slow``: every command but ``dashboard`` (a server, until Ctrl-C) runs, in
page order, in-process from a scratch directory that holds links to the
repository's ``sweeps/`` and ``tests/`` (so outputs such as ``out/default``
and ``docs/*.png`` land there), and must exit 0; a sweep over more than
``MAX_RUN_CONFIGS`` configurations gets ``--dry-run`` (it is checked, sized
and probed, not written). Then the python snippets run in the same directory.
"""

import re
import shlex
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from jaxmodel.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
PREFIX = ".venv/bin/jaxmodel "
MAX_RUN_CONFIGS = 10**7
INPUT_SUFFIXES = (".toml", ".json", ".csv")


def _blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced block, in order."""
    blocks, lang, lines = [], None, []
    for line in text.splitlines():
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence and lang is None:
            lang, lines = fence.group(1), []
        elif line.startswith("```") and lang is not None:
            blocks.append((lang, lines))
            lang = None
        elif lang is not None:
            lines.append(line)
    return blocks


def readme_commands(text: str) -> list[list[str]]:
    """The README's commands as argv lists (without the program), in order."""
    out = []
    for lang, lines in _blocks(text):
        if lang:
            continue
        joined, pending = [], ""
        for line in lines:
            pending += line
            if pending.endswith("\\"):
                pending = pending[:-1]
                continue
            joined.append(pending)
            pending = ""
        for line in joined:
            if line.startswith(PREFIX) and "..." not in line:
                out.append(shlex.split(line[len(PREFIX):], comments=True))
    return out


def readme_snippets(text: str) -> list[str]:
    return ["\n".join(lines) for lang, lines in _blocks(text) if lang == "python"]


def _page_commands() -> list[tuple[str, list[str]]]:
    return [(str(page.relative_to(ROOT)), argv) for page in PAGES
            for argv in readme_commands(page.read_text())]


PAGE_COMMANDS = _page_commands()
COMMANDS = [argv for _, argv in PAGE_COMMANDS]


def test_extraction_finds_the_tour():
    """The rule picks up the README's tour and the guides' commands (and joins
    continued lines), and skips elisions."""
    tour = readme_commands(README.read_text())
    assert ["sweep", "sweeps/default.toml", "--dry-run"] in tour
    assert tour[0][:1] == ["eval"] and any(c[:1] == ["best"] for c in tour)
    assert {"best", "sweep", "sensitivity", "solve", "calibrate", "dashboard"} <= {
        c[0] for c in tour}
    pages = {page for page, _ in PAGE_COMMANDS}
    assert {"README.md", "docs/guide/evaluate.md", "docs/guide/pictures.md"} <= pages
    assert len(COMMANDS) >= 40
    assert ["eval"] in COMMANDS
    joined = [c for c in COMMANDS if c[:1] == ["plot"] and "regimes" in c][0]
    where = " ".join(joined[joined.index("--where") + 1].split())
    assert where == ("tensor_parallel == 8 and pipeline_parallel == 4 and micro_batch == 1 "
                     "and compute_tflops == 500 and num_gpus == 64")
    assert not any("..." in arg for c in COMMANDS for arg in c)


def _input_files(argv: list[str]) -> list[str]:
    files = []
    for i, arg in enumerate(argv):
        if arg.endswith(INPUT_SUFFIXES) and (i == 0 or argv[i - 1] not in ("-o", "--output")):
            files.append(arg)
    return files


@pytest.mark.parametrize("argv", COMMANDS,
                         ids=[f"{p}: {' '.join(c)[:60]}" for p, c in PAGE_COMMANDS])
def test_readme_command_parses_and_its_inputs_exist(argv):
    group = typer.main.get_command(app)
    ctx = group.make_context("jaxmodel", list(argv), resilient_parsing=False)
    name, sub, rest = group.resolve_command(ctx, list(argv))
    while hasattr(sub, "resolve_command"):  # a group: e.g. plot heatmap
        sub_ctx = sub.make_context(name, rest, parent=ctx)
        name, sub, rest = sub.resolve_command(sub_ctx, rest)
        ctx = sub_ctx
    try:
        sub.make_context(name, rest, parent=ctx)
    except Exception as e:  # click's UsageError: a renamed option or a bad value
        pytest.fail(f"{' '.join(argv)}: {getattr(e, 'format_message', e.__str__)()}")
    written = {c[i + 1] for c in COMMANDS[:COMMANDS.index(argv)]
               for i, a in enumerate(c[:-1]) if a in ("-o", "--output")}
    for f in _input_files(argv):
        assert (ROOT / f).exists() or f in written, \
            f"{' '.join(argv)}: {f} does not exist from the root"


def test_readme_presets_snippet_runs():
    """The Python line the README gives for presets, as written."""
    import jaxmodel

    line = re.search(r"`(jaxmodel\.presets\.apply_presets\([^`]*\))`", README.read_text())
    assert line, "the README's apply_presets example moved"
    values = eval(line.group(1), {"jaxmodel": jaxmodel})
    assert values["num_layers"] == 80 and values["compute_tflops"] == 989
    assert values == jaxmodel.presets.apply_presets(
        jaxmodel.get_model("refined"), gpu="h100-sxm", llm="llama3-70b")


@pytest.mark.slow
def test_readme_commands_run(tmp_path, monkeypatch):
    import jaxmodel

    for name in ("sweeps", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    ran = set()
    for argv in COMMANDS:
        if argv[0] == "dashboard":  # serves until Ctrl-C; its parse is checked in the fast set
            continue
        # A command quoted on several pages (the README's tour and its guide) runs
        # once: a second run of the same line checks nothing new.
        if tuple(argv) in ran:
            continue
        ran.add(tuple(argv))
        argv = list(argv)
        if argv[0] == "sweep" and "--dry-run" not in argv:
            if jaxmodel.load_spec(argv[1]).size > MAX_RUN_CONFIGS:
                argv.append("--dry-run")
        result = runner.invoke(app, argv)
        assert result.exit_code == 0, (argv, result.output[-2000:])
    for page in PAGES:
        for snippet in readme_snippets(page.read_text()):
            exec(compile(snippet, str(page.relative_to(ROOT)), "exec"), {})
