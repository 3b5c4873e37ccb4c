"""Pieces shared by CLI commands: input options, error reporting, precision."""


import functools
import inspect
import re
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from jaxmodel.config import config_model, load_config
from jaxmodel.errors import InputError, JaxmodelError, SpecError
from jaxmodel.fields import InputField
from jaxmodel.models import DEFAULT_MODEL, MODELS, Model, get_model
from jaxmodel.presets import GPUS, LLMS, apply_presets

# Preset options every command with model inputs gets; they arrive in ``inputs``
# under these keys and ``gather_inputs`` applies them (defaults < presets < ...).
PRESET_OPTIONS = {
    "gpu": typer.Option("--gpu", metavar="NAME", rich_help_panel="Presets",
                        help="hardware preset: " + ", ".join(GPUS)),
    "llm": typer.Option("--llm", metavar="NAME", rich_help_panel="Presets",
                        help="model preset (jaxmodel presets): " + ", ".join(LLMS)),
}


def input_panel(name: str) -> str:
    """The --help panel of an input option: which models take it."""
    owners = [m.name for m in MODELS.values() if name in m.input_names]
    if len(owners) == len(MODELS):
        return "Inputs of every model"
    return f"Inputs of model {' and '.join(owners)} only"


def all_input_fields() -> list[InputField]:
    """Every model's inputs, once each, in registry order (one CLI option each)."""
    seen: dict[str, InputField] = {}
    for model in MODELS.values():
        for f in model.inputs:
            seen.setdefault(f.name, f)
    return list(seen.values())


def fail(message: str) -> typer.Exit:
    """Print one line to stderr; the caller raises the returned ``Exit(2)``."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def reports_errors(fn: Callable) -> Callable:
    """Turn a ``JaxmodelError`` into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except JaxmodelError as e:
            raise fail(str(e)) from None
        except Exception as e:
            damaged = damaged_file(e)
            if damaged is None:
                raise
            raise fail(damaged) from None

    return wrapper


def damaged_file(e: Exception) -> str | None:
    """One line for a reader's error on a damaged part (DuckDB's or pyarrow's,
    which name the file in their own words), or None for any other error."""
    module = type(e).__module__ or ""
    if not module.startswith(("duckdb", "_duckdb", "pyarrow")):
        return None
    text = str(e).strip()
    found = re.search(r"'([^']+\.parquet)'", text)
    if found is None:
        return None
    why = ("not a complete Parquet file" if "magic bytes" in text
           else text.splitlines()[0].split(": ", 1)[-1][:120])
    return (f"{found.group(1)!r} is damaged ({why}); rerun its sweep with --resume "
            "to write it again")


def with_input_options(fn: Callable) -> Callable:
    """Add one ``--dashed-name`` option per model input to a typer command.

    The command receives them gathered as ``inputs: dict[str, str | None]``.
    Values are taken as text and checked by the model's fields, so that every
    malformed value gets the same one-line error.
    """
    # Shared inputs first, then each model's own, so --help groups them by model.
    fields = sorted(all_input_fields(), key=lambda f: input_panel(f.name) != "Inputs of "
                    "every model")
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.name != "inputs"]
    for f in fields:
        help_text = f"{f.doc} ({f.unit or 'count'}; default {f.default:g})"
        option = typer.Option(f.option, help=help_text, metavar="NUMBER",
                              rich_help_panel=input_panel(f.name), show_default=False)
        params.append(inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, default=None,
            annotation=Annotated[str | None, option],
        ))
    # Retired inputs stay as hidden options, so that naming one gets the
    # model's one-line pointer to what replaced it rather than typer's
    # "No such option".
    retired = sorted({name for m in MODELS.values() for name in m.retired}
                     - {f.name for f in fields})
    for name in retired:
        option = typer.Option("--" + name.replace("_", "-"), hidden=True, metavar="NUMBER")
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                        annotation=Annotated[str | None, option]))
    for name, option in PRESET_OPTIONS.items():
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                        annotation=Annotated[str | None, option]))

    @functools.wraps(fn)
    def wrapper(**kwargs):
        inputs = {f.name: kwargs.pop(f.name) for f in fields}
        inputs.update({name: kwargs.pop(name) for name in (*retired, *PRESET_OPTIONS)})
        return fn(inputs=inputs, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=params)
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


ModelOption = Annotated[str | None, typer.Option(
    "--model", help=f"cost model: {', '.join(MODELS)} (default: the --config file's model, "
    f"else {DEFAULT_MODEL})", show_default=False)]
ConfigOption = Annotated[
    str | None,
    typer.Option("--config", help="JSON or TOML file of inputs (a seed-shaped file works)",
                 metavar="FILE"),
]
X64Option = Annotated[bool, typer.Option("--x64", help="compute in float64 (default float32)")]
SensitivityWrtOption = Annotated[str | None, typer.Option(
    "--sensitivity-wrt", metavar="NAMES", help="the inputs --sensitivity weighs, "
    "comma-separated (default: the model's hardware inputs)")]


def gather_inputs(model_name: str | None, config: str | None,
                  options: dict[str, str | None]) -> tuple[Model, dict[str, float]]:
    """The model and one configuration: defaults < presets < config file < command line.

    The model: ``model_name``, else the one the config file names
    (``config_model``: a ``calibrated.toml``, the seed's JSON), else the default.
    ``options`` may carry the ``PRESET_OPTIONS`` keys (``gpu``, ``llm``): preset names.

    Raises:
      InputError: an option that does not apply to the model, a bad value, or a
        config file written for another model than ``model_name``.
    """
    named = config_model(config) if config else None
    if model_name and named and get_model(model_name).name != named:
        raise InputError("config model", named, f"{model_name!r}, the --model given "
                         f"(drop --model to use the file's, or give --model {named})")
    model = get_model(model_name or named or DEFAULT_MODEL)
    values: dict[str, Any] = dict(model.defaults)
    from_file = load_config(config, model) if config else {}
    # Presets first (an option overrides the file's), then explicit values.
    presets = {k: options.get(k) or from_file.pop(k, None) for k in PRESET_OPTIONS}
    for k in PRESET_OPTIONS:
        from_file.pop(k, None)
    values.update(apply_presets(model, **presets))
    values.update(from_file)
    typed: set[str] = set()
    for name, text in options.items():
        if text is None or name in PRESET_OPTIONS:
            continue
        if name in model.retired:
            raise InputError("--" + name.replace("_", "-"), text,
                             f"an input of model {model.name!r}{model.input_hint(name)}")
        if name not in model.input_names:
            computed = (f"; model {model.name!r} computes {name} (an output) from its other "
                        "inputs" if name in model.output_names else "")
            raise InputError("--" + name.replace("_", "-"), text,
                             f"options of model {model.name!r} only (--help lists them under "
                             f"'{input_panel(next(iter(model.input_names)))}' and "
                             f"'Inputs of model {model.name} only'){computed}")
        values[name] = text
        typed.add(name)
    checked = {f.name: f.check_scalar(values[f.name], text=f.name in typed)
               for f in model.inputs}
    model.check_products(checked)
    model.check_at_least(checked)
    return model, checked


def parse_shard(shard: str) -> tuple[int, int]:
    """``--shard I/N`` -> ``(I, N)``: this process's share and the share count.

    Raises:
      SpecError: not I/N with 0 <= I < N.
    """
    from jaxmodel.dataset import MAX_PROCESSES

    m = re.fullmatch(r"(\d+)/(\d+)", shard)
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise SpecError(f"--shard: got {shard!r}; allowed: I/N with 0 <= I < N, e.g. 0/4")
    if int(m.group(2)) > MAX_PROCESSES:
        raise SpecError(f"--shard: got {shard!r}; allowed: I/N with N at most {MAX_PROCESSES:,}")
    return int(m.group(1)), int(m.group(2))


def echo_error_and_exit(message: str, code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _untyped_flags(params: list[Any]) -> list[Any]:
    """Flags take no value, so their help shows no type: typer (0.29) prints
    ``<bool>`` beside ``--resume`` or ``--help`` unless the metavar is set."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class Command(typer.core.TyperCommand):
    """Every ``jaxmodel`` command: flags shown without a type in ``--help``."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))


class Group(typer.core.TyperGroup):
    """The ``jaxmodel`` and ``jaxmodel plot`` groups, as :class:`Command`."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))
