"""The sweep API: a spec file -> a :class:`~jaxmodel.engine.Plan` -> a dataset.

``jaxmodel.sweep(spec_path, output)`` is what ``jaxmodel sweep`` runs; the
spec's extra tables (``[sensitivity]``, ``[solve]``, ``[reduce]``), validated
by ``jaxmodel.spec_tables``, are turned into engine pieces here, so the engine
stays one loop.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxmodel.engine import DEFAULT_CHUNK, Extra, Plan, SweepResult, read_metadata, run_sweep
from jaxmodel.precision import computing
from jaxmodel.sink import METADATA_FILE, Column, float_column, parquet_options, to_table
from jaxmodel.spec import SweepSpec, load_spec, parse_spec

PROBE = 1 << 16


def extras_for(spec: SweepSpec, x64: bool) -> list[Extra]:
    """Extra per-row kernels from the spec's (validated) ``[sensitivity]`` and
    ``[solve]`` requests."""
    from jaxmodel.sensitivity import sensitivity_column_info, sensitivity_kernel
    from jaxmodel.solving import solve_column_info, solve_kernel

    float_type = pa.float64() if x64 else pa.float32()
    extras = []
    if spec.sensitivity is not None:
        columns = tuple(float_column(name, float_type, unit, doc) for name, unit, doc
                        in sensitivity_column_info(spec.model, *spec.sensitivity))
        extras.append(Extra(sensitivity_kernel(spec.model, *spec.sensitivity), columns))
    if spec.solve is not None:
        from jaxmodel.solving import check_representable

        check_representable(spec.solve.output, spec.solve.value, x64)
        columns = tuple(
            Column(name, pa.bool_() if name in ("solve_reached", "solve_blocked")
                   else float_type, unit, doc)
            for name, unit, doc in solve_column_info(spec.model, spec.solve.output,
                                                     spec.solve.vary))
        extras.append(Extra(solve_kernel(spec.model, *spec.solve), columns))
    return extras


def build_plan(spec: str | Path | SweepSpec, *, x64: bool = False,
               chunk_size: int = DEFAULT_CHUNK, devices=None) -> Plan:
    """Parse (if needed) and plan a spec: columns, filter and kernels checked."""
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    return Plan(spec, x64=x64, chunk_size=chunk_size, devices=devices,
                extras=extras_for(spec, x64), reducer=spec.reduce)


def output_directory(spec: SweepSpec, output: str | Path | None) -> Path:
    """The dataset directory, checked to be a name the file system can hold."""
    from jaxmodel.sink import check_output_path

    if output is not None:
        path = Path(output)
    elif spec.output.path:
        path = Path(spec.output.path)
    else:
        path = Path("out") / spec.name
    check_output_path(path)
    return path


def chunk_size_for(directory: Path, chunk_size: int | None, resume: bool) -> int:
    """The chunk size a run uses: the one asked for; else, resuming, the one
    the dataset was started with (it is part of the sweep's identity, so a
    resumed run must continue the same chunks); else ``DEFAULT_CHUNK``."""
    if chunk_size is not None:
        return chunk_size
    meta = directory / METADATA_FILE
    if resume and meta.exists():
        return read_metadata(meta)["chunk_size"] or DEFAULT_CHUNK
    return DEFAULT_CHUNK


def sweep(spec: str | Path | SweepSpec, output: str | Path | None = None, *,
          x64: bool = False, chunk_size: int | None = None, resume: bool = False,
          overwrite: bool = False, devices=None, writers: int | None = None) -> SweepResult:
    """Run a sweep into a Parquet dataset (the Python form of ``jaxmodel sweep``).

    Args:
      spec: a spec file path, or a parsed ``SweepSpec`` (see ``parse_spec``).
      output: dataset directory (default: the spec's ``output.path``, else
        ``out/<spec name>``).
      chunk_size: configurations per device chunk (default: ``DEFAULT_CHUNK``,
        or with ``resume`` the dataset's own; see :func:`chunk_size_for`).
      writers: threads writing Parquet parts at once (default: the cores not
        busy feeding the device; see ``jaxmodel.engine.default_writers``).
    """
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    directory = output_directory(spec, output)
    plan = build_plan(spec, x64=x64, chunk_size=chunk_size_for(directory, chunk_size, resume),
                      devices=devices)
    return run_sweep(plan, directory, resume=resume, overwrite=overwrite, writers=writers)


def expected_seconds(configurations: float, rows: float, rate: float, write_rate: float, *,
                     writers: int, cores: int, on_cpu: bool) -> float:
    """Wall time of a sweep from its parts' rates: the device evaluates
    ``rate`` configurations/s, one writer thread encodes and writes
    ``write_rate`` rows/s, and ``writers`` threads share ``cores`` cores.

    The slowest of: the device; the writers (no faster than one per core);
    and, on a CPU host, where the model runs on the writers' cores, all the
    CPU work spread over every core.
    """
    device_s = configurations / max(rate, 1e-9)
    write_s = rows / max(write_rate, 1e-9)
    seconds = max(device_s, write_s / max(min(writers, cores), 1))
    if on_cpu:
        seconds = max(seconds, (device_s + write_s) / max(cores, 1))
    return seconds


# Contiguous blocks of the probe for the bytes estimate (see ``estimate``).
PROBE_BLOCKS = 4


def _probe_blocks(size: int, n: int) -> np.ndarray:
    """``PROBE_BLOCKS`` runs of consecutive configuration ids, spread over the
    sweep, ``n`` ids in all (the whole sweep when it is no larger)."""
    if size <= n:
        return np.arange(size, dtype=np.int64)
    run = n // PROBE_BLOCKS
    starts = np.linspace(0, size - run, PROBE_BLOCKS).astype(np.int64)
    return (starts[:, None] + np.arange(run, dtype=np.int64)[None, :]).reshape(-1)


def estimate(plan: Plan, writers: int | None = None) -> dict[str, float]:
    """Expected rows, bytes and seconds of a sweep, from probes evaluated in
    memory and encoded to Parquet in memory (nothing is written to disk).

    The kept fraction and the rate come from evenly spread configurations.
    The bytes come from runs of consecutive configurations, encoded as the
    sink writes them: a sweep writes its rows in ``config_id`` order, where
    slowly varying inputs are constant over long runs and compress to almost
    nothing, which a spread sample (every column changing every row) does not
    show; the README's default sweep wrote 4.7x less than such a sample said.
    The time counts ``writers`` writer threads (default: as many as the
    sweep would use).
    """
    from jaxmodel.engine import default_writers, usable_cores

    n = int(min(plan.size, PROBE))
    spread = np.unique(np.linspace(0, plan.size - 1, n).astype(np.int64))
    runs = _probe_blocks(plan.size, len(spread))
    with computing():
        fn = jax.jit(plan.evaluate_rows)
        t0 = time.perf_counter()
        jax.block_until_ready(fn(spread, plan.tables))
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        cols = jax.block_until_ready(fn(spread, plan.tables))
        seconds = time.perf_counter() - t0
        host = {k: np.asarray(v) for k, v in jax.device_get(cols).items()}
        contiguous = {k: np.asarray(v) for k, v in
                      jax.device_get(fn(runs, plan.tables)).items()}

    def kept_rows(cols):
        if plan.filter is None:
            return np.ones(len(next(iter(cols.values()))), dtype=bool)
        return np.asarray(plan.filter.evaluate_numpy(cols, plan.categories), dtype=bool)

    keep = kept_rows(host)
    fraction = float(keep.mean())
    schema = pa.schema([c.field() for c in plan.columns])
    options = parquet_options(plan.columns, plan.constant, plan.spec.output.compression)
    run_keep = kept_rows(contiguous)
    block = np.repeat(np.arange(PROBE_BLOCKS), -(-len(runs) // PROBE_BLOCKS))[:len(runs)]
    encoded = kept_total = 0
    write_s = 0.0
    for k in range(PROBE_BLOCKS):
        sel = run_keep & (block == k)
        if not sel.any():
            continue
        table = to_table(plan.columns, {c.name: contiguous[c.name][sel]
                                        for c in plan.columns}, schema)
        buf = io.BytesIO()
        t1 = time.perf_counter()
        pq.write_table(table, buf, **options)
        write_s += time.perf_counter() - t1
        encoded += buf.tell()
        kept_total += table.num_rows
    rows = plan.size * fraction
    if kept_total >= 4096:
        bytes_per_row = encoded / kept_total
    else:  # too few rows for compression to show: count raw widths
        bytes_per_row = sum(1 if c.categories or pa.types.is_boolean(c.type)
                            else c.type.bit_width // 8 for c in plan.columns)
    rate = len(spread) / max(seconds, 1e-9)
    write_rate = max(kept_total, 1) / max(write_s, 1e-9)
    writers = writers or default_writers(plan)
    on_cpu = all(d.platform == "cpu" for d in plan.mesh.devices.flat)
    return {
        "probe": len(spread), "keep_fraction": fraction, "rows": rows,
        "bytes": rows * bytes_per_row, "rate": rate, "write_rate": write_rate,
        "writers": writers, "seconds": expected_seconds(
            plan.size, rows, rate, write_rate, writers=writers, cores=usable_cores(),
            on_cpu=on_cpu),
        "compile_seconds": compile_s,
    }



__all__ = ["build_plan", "estimate", "output_directory", "parse_spec", "sweep"]
