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


def _read(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the whole document, its inputs) of a JSON or TOML file."""
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
    return data, inputs


def config_model(path: str | Path) -> str | None:
    """The model a configuration file was written for, or None: its ``model`` key
    names a model (``calibrated.toml``) or is a model's ``description`` (the seed's
    JSON, whose ``model`` is that line).

    Raises:
      InputError: unreadable file, bad syntax, or a ``model`` no model answers to.
    """
    data, _ = _read(path)
    return _model_name(data.get("model"))


def _model_name(name: Any) -> str | None:
    from jaxmodel.models import MODELS

    if name is None:
        return None
    for m in MODELS.values():
        if name in (m.name, m.description):
            return m.name
    raise InputError("config model", name, "one of " + ", ".join(MODELS))


def load_config(path: str | Path, model: Model) -> dict[str, Any]:
    """Input values from a JSON or TOML file (``gpu`` / ``llm``: preset names).

    A file shaped like ``seed_example.json`` (with an ``inputs`` object) is
    accepted as is; otherwise the top-level keys are the inputs.  Other
    top-level keys of a seed-shaped file (``outputs``, ``profile``, ...) are
    ignored, since they are results, not inputs.

    Raises:
      InputError: unreadable file, bad syntax, or an unknown input name.
    """
    data, inputs = _read(path)
    if inputs is not data:
        # Beside an "inputs" object the top level holds results (outputs,
        # profile, ...); an input there would be silently dropped.
        stray = [k for k in data if k in model.input_names or k in PRESET_KEYS]
        if stray:
            raise InputError(f"config {stray[0]}", data[stray[0]],
                             'inside "inputs" (this file has an "inputs" object, and an input '
                             "beside it would be ignored)")
    for key in inputs:
        if key == "model" and inputs is data:  # the model it was written for
            if _model_name(data["model"]) != model.name:
                raise InputError("config model", data["model"],
                                 f"{model.name!r}, the model it is used with")
            continue
        if key in PRESET_KEYS:
            if not isinstance(inputs[key], str):
                raise InputError(f"config {key}", inputs[key], "a preset name (jaxmodel presets)")
            continue
        if key not in model.input_names:
            raise InputError(
                f"config {key}", inputs[key],
                f"an input of model {model.name!r}{model.input_hint(key)}",
            )
    return {k: v for k, v in inputs.items() if not (k == "model" and inputs is data)}
