"""The sweep progress display (engine.Progress, drawn by rich): shown on a
terminal, silent when quiet or when the stream is not a terminal."""

import io
import re
from pathlib import Path

import pytest

from jaxmodel.engine import Plan, Progress, run_sweep
from jaxmodel.spec import load_spec

SMALL = Path(__file__).parent / "specs" / "small.toml"


class Terminal(io.StringIO):
    """A stream that says it is a terminal (as stderr is in an interactive shell)."""

    def isatty(self):
        return True


def plain(text: str) -> str:
    """The text a terminal shows: without colour and cursor escape sequences."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def test_bar_on_a_terminal_shows_chunks_configurations_and_rows(tmp_path):
    spec = load_spec(SMALL)
    plan = Plan(spec, chunk_size=400)  # 1152 configurations: chunks of 400, 400, 352
    stream = Terminal()
    result = run_sweep(plan, tmp_path / "ds", quiet=False, progress_stream=stream)
    shown = plain(stream.getvalue())
    # The last frame rich draws (on stop) holds the final counts.
    assert "chunk 3/3" in shown
    assert f"{spec.size:,}/{spec.size:,} configs" in shown
    assert f"{result.rows:,} rows" in shown
    assert 0 < result.rows < spec.size  # the filter keeps some rows, not all
    assert shown.endswith("\n")  # the line is ended, so the summary starts on its own


def test_resumed_bar_counts_only_the_chunks_left(tmp_path):
    spec = load_spec(SMALL)
    plan = Plan(spec, chunk_size=400)
    out = tmp_path / "ds"
    # Process 0 of 2 owns chunk 0 of 3 (a first run cut short leaves the same).
    run_sweep(plan, out, process=0, processes=2)
    stream = Terminal()
    run_sweep(plan, out, resume=True, quiet=False, progress_stream=stream)
    shown = plain(stream.getvalue())
    assert "chunk 2/2" in shown
    assert f"{spec.size - 400:,}/{spec.size - 400:,} configs" in shown


@pytest.mark.parametrize("quiet, stream", [(True, Terminal()), (False, io.StringIO())],
                         ids=["quiet", "not-a-terminal"])
def test_silent_when_quiet_or_not_a_terminal(tmp_path, quiet, stream):
    plan = Plan(load_spec(SMALL), chunk_size=400)
    run_sweep(plan, tmp_path / "ds", quiet=quiet, progress_stream=stream)
    assert stream.getvalue() == ""


def test_progress_alone():
    stream = Terminal()
    with Progress(total=10, chunks=2, enabled=True, stream=stream) as progress:
        progress.update(5, 1, 7)
        progress.update(10, 2, 9)
    shown = plain(stream.getvalue())
    assert "10/10 configs" in shown and "chunk 2/2" in shown and "9 rows" in shown
    silent = Terminal()
    with Progress(total=10, chunks=2, enabled=False, stream=silent) as progress:
        progress.update(10, 2, 9)
    assert silent.getvalue() == ""
