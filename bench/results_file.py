"""Where a bench script writes: a file name under ``bench/results/``, checked up front."""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def checked_out(name: str, example: str) -> Path:
    """``bench/results/<name>``; exits with a one-line error when ``name`` is not a
    plain file name (checked before a bench's minutes of measuring, not at its
    write after them)."""
    if not name or Path(name).name != name:
        sys.exit(f"--out: {name!r} is not a file name; allowed: a name such as "
                 f"{example}, written under bench/results/")
    return RESULTS / name


def write_json(path: Path, doc: object) -> None:
    """Write ``doc`` as indented JSON to ``path`` through a ``.partial`` file renamed
    into place, so that an interrupted bench never leaves a file looking complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)
