"""The sweep API: a spec file -> a :class:`~jaxmodel.engine.Plan` -> a dataset.

``jaxmodel.sweep(spec_path, output)`` is what ``jaxmodel sweep`` runs; the
spec's extra tables (``[sensitivity]``, ``[solve]``, ``[reduce]``) are turned
into engine pieces here, so the engine stays one loop.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxmodel.engine import DEFAULT_CHUNK, Plan, SweepResult, run_sweep
from jaxmodel.precision import computing
from jaxmodel.sink import to_table
from jaxmodel.spec import SweepSpec, load_spec, parse_spec

PROBE = 1 << 16


def extras_for(spec: SweepSpec, x64: bool) -> list:
    """Extra per-row kernels from the spec's [sensitivity] and [solve] tables."""
    return []


def build_plan(spec: str | Path | SweepSpec, *, x64: bool = False,
               chunk_size: int = DEFAULT_CHUNK, devices=None) -> Plan:
    """Parse (if needed) and plan a spec: columns, filter and kernels checked."""
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    return Plan(spec, x64=x64, chunk_size=chunk_size, devices=devices,
                extras=extras_for(spec, x64))


def output_directory(spec: SweepSpec, output: str | Path | None) -> Path:
    if output is not None:
        return Path(output)
    if spec.output.path:
        return Path(spec.output.path)
    return Path("out") / spec.name


def sweep(spec: str | Path | SweepSpec, output: str | Path | None = None, *,
          x64: bool = False, chunk_size: int = DEFAULT_CHUNK, resume: bool = False,
          overwrite: bool = False, devices=None) -> SweepResult:
    """Run a sweep into a Parquet dataset (the Python form of ``jaxmodel sweep``).

    Args:
      spec: a spec file path, or a parsed ``SweepSpec`` (see ``parse_spec``).
      output: dataset directory (default: the spec's ``output.path``, else
        ``out/<spec name>``).
    """
    plan = build_plan(spec, x64=x64, chunk_size=chunk_size, devices=devices)
    return run_sweep(plan, output_directory(plan.spec, output), resume=resume,
                     overwrite=overwrite)


def estimate(plan: Plan) -> dict[str, float]:
    """Expected rows, bytes and seconds of a sweep, from a probe of evenly
    spread configurations evaluated in memory and encoded to Parquet in memory
    (nothing is written to disk)."""
    n = int(min(plan.size, PROBE))
    ids = np.unique(np.linspace(0, plan.size - 1, n).astype(np.int64))
    with computing():
        fn = jax.jit(plan.evaluate_rows)
        cols = fn(ids, plan.tables)
        jax.block_until_ready(cols)
        t0 = time.perf_counter()
        cols = jax.block_until_ready(fn(ids, plan.tables))
        seconds = time.perf_counter() - t0
        host = {k: np.asarray(v) for k, v in jax.device_get(cols).items()}
    keep = np.ones(len(ids), dtype=bool)
    if plan.filter is not None:
        keep = np.asarray(plan.filter.evaluate_numpy(host, plan.categories), dtype=bool)
    kept = {c.name: host[c.name][keep] for c in plan.columns}
    fraction = float(keep.mean())
    schema = pa.schema([c.field() for c in plan.columns])
    table = to_table(plan.columns, kept, schema)
    buf = io.BytesIO()
    t1 = time.perf_counter()
    compression = None if plan.spec.output.compression == "none" else plan.spec.output.compression
    pq.write_table(table, buf, compression=compression,
                   use_dictionary=[c.name for c in plan.columns if c.categories] or False)
    write_s = time.perf_counter() - t1
    rows = plan.size * fraction
    if table.num_rows >= 4096:
        bytes_per_row = buf.tell() / table.num_rows
    else:  # too few rows for compression to show: count raw widths
        bytes_per_row = sum(1 if c.categories or pa.types.is_boolean(c.type)
                            else c.type.bit_width // 8 for c in plan.columns)
    rate = len(ids) / max(seconds, 1e-9)
    write_rate = max(table.num_rows, 1) / max(write_s, 1e-9)
    return {
        "probe": len(ids), "keep_fraction": fraction, "rows": rows,
        "bytes": rows * bytes_per_row, "rate": rate,
        "seconds": max(plan.size / rate, rows / write_rate),
    }


__all__ = ["build_plan", "estimate", "output_directory", "parse_spec", "sweep"]
