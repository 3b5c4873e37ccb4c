"""``jaxmodel presets``: the named GPUs and LLMs for ``--gpu`` / ``--llm`` and specs."""


import json
from typing import Annotated, Literal

import typer

from jaxmodel.cli.common import reports_errors
from jaxmodel.presets import GPUS, LLMS, Preset

_GPU_COLUMNS = (
    ("compute_tflops", "TFLOP/s"),
    ("gpu_memory_gb", "GB"),
    ("hbm_bandwidth_tb_s", "HBM TB/s"),
    ("link_bandwidth_gb_s", "NVLink GB/s"),
    ("network_bandwidth_gb_s", "net GB/s"),
    ("gpus_per_node", "per node"),
)
_LLM_COLUMNS = (
    ("model_params_b", "params B"),
    ("hidden_dim", "h"),
    ("num_layers", "L"),
    ("num_heads", "a"),
    ("num_kv_heads", "kv"),
    ("ffn_hidden_dim", "ffn"),
    ("vocab_size", "V"),
    ("seq_length", "s"),
    ("num_experts", "E"),
    ("experts_per_token", "k"),
)


def _fmt(v: float) -> str:
    return f"{int(v)}" if float(v).is_integer() else f"{v:g}"


def _table(title: str, presets: dict[str, Preset], columns) -> list[str]:
    # Dense LLM presets carry no expert counts: one expert, one per token.
    rows = [[p.name] + [_fmt(p.values.get(k, 1)) for k, _ in columns] for p in presets.values()]
    header = ["name"] + [label for _, label in columns]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    line = "  ".join(f"{{:<{widths[0]}}}" if i == 0 else f"{{:>{w}}}"
                     for i, w in enumerate(widths))
    out = [title, line.format(*header)]
    out += [line.format(*r) for r in rows]
    out.append("sources:")
    out += [f"  {p.name}: {p.source}" for p in presets.values()]
    return out


@reports_errors
def presets_command(
    output_format: Annotated[
        Literal["table", "json"], typer.Option("--format", help="table or json")
    ] = "table",
) -> None:
    """List the hardware (--gpu) and model (--llm) presets, with their sources."""
    if output_format == "json":
        doc = {kind: {p.name: {"description": p.description, "source": p.source,
                               "values": p.values} for p in table.values()}
               for kind, table in (("gpu", GPUS), ("llm", LLMS))}
        typer.echo(json.dumps(doc))
        return
    lines = _table("GPUs (--gpu NAME): peak dense bf16, per-GPU bandwidth per direction",
                   GPUS, _GPU_COLUMNS)
    lines.append("")
    lines += _table("LLMs (--llm NAME)", LLMS, _LLM_COLUMNS)
    typer.echo("\n".join(lines))
