"""Reading a configuration file (JSON or TOML) of input values."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from jaxmodel.errors import InputError
from jaxmodel.models import Model

# Preset names a configuration file may give, as a sweep's [base] does
# (applied first, then the file's explicit values).
PRESET_KEYS = ("gpu", "llm")

MAX_VALUE_NESTING = 16


def nesting(value: Any) -> int:
    """How deeply tables and lists nest in ``value``, counted without recursion
    (every later step that walks or prints a value recurses)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(v, dict):
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)
    return deepest


def load_config(path: str | Path, model: Model) -> dict[str, Any]:
    """Input values from a JSON or TOML file (``gpu`` / ``llm``: preset names).

    A file shaped like ``seed_example.json`` (with an ``inputs`` object) is
    accepted as is; otherwise the top-level keys are the inputs.  Other
    top-level keys of a seed-shaped file (``outputs``, ``profile``, ...) are
    ignored, since they are results, not inputs.

    Raises:
      InputError: unreadable file, bad syntax, or an unknown input name.
    """
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as e:
        raise InputError("config", str(path), f"a readable file ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise InputError("config", str(path), f"UTF-8 text (byte {e.start} is not)") from None
    try:
        data = tomllib.loads(text) if p.suffix.lower() == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError, RecursionError) as e:
        kind = "TOML" if p.suffix.lower() == ".toml" else "JSON"
        first = (str(e).splitlines() or [""])[0]
        if isinstance(e, RecursionError):
            first = "nested too deeply"
        raise InputError("config", str(path), f"valid {kind} ({first})") from None
    if not isinstance(data, dict):
        raise InputError("config", str(path), "an object of input values")
    if nesting(data) > MAX_VALUE_NESTING:
        raise InputError("config", str(path), f"values nested at most {MAX_VALUE_NESTING} deep")
    inputs = data.get("inputs", data) if isinstance(data.get("inputs"), dict) else data
    if inputs is not data:
        # Beside an "inputs" object the top level holds results (outputs,
        # profile, ...); an input there would be silently dropped.
        stray = [k for k in data if k in model.input_names or k in PRESET_KEYS]
        if stray:
            raise InputError(f"config {stray[0]}", data[stray[0]],
                             'inside "inputs" (this file has an "inputs" object, and an input '
                             "beside it would be ignored)")
    for key in inputs:
        if key in PRESET_KEYS:
            if not isinstance(inputs[key], str):
                raise InputError(f"config {key}", inputs[key], "a preset name (jaxmodel presets)")
            continue
        if key not in model.input_names:
            raise InputError(
                f"config {key}", inputs[key],
                f"an input of model {model.name!r}{model.input_hint(key)}",
            )
    return dict(inputs)
