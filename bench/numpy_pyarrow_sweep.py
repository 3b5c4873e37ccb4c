"""The baseline of the end-to-end benchmark: what a user could write in an
afternoon instead of jaxmodel.

The grid of ``sweeps/seed_default.toml`` with BANDWIDTHS link bandwidths (1024 by
default: 23,592,960 configurations), decoded with numpy a million rows at a
time, evaluated with the seed model's formulas vectorised in numpy
(``bench/numpy_seed.py``), and written, every input and output, through one
``pyarrow.parquet.ParquetWriter`` with pyarrow's usual settings for such a
script: snappy, no dictionaries.  The two category outputs are written as
their int8 codes (the cheapest a user could do; jaxmodel writes names).  It
imports neither jax nor jaxmodel, so its start-up is a plain Python one.

  python bench/numpy_pyarrow_sweep.py OUT.parquet [BANDWIDTHS]

Prints the rows written.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from numpy_seed import seed_numpy  # noqa: E402

CHUNK = 1 << 20
INTEGER = {"num_gpus", "tensor_parallel", "pipeline_parallel", "micro_batch",
           "gradient_accum_steps", "seq_length", "hidden_dim", "num_layers"}


def axes(bandwidths: int) -> dict[str, np.ndarray]:
    """The grid of sweeps/seed_default.toml, first axis slowest."""
    f = np.float32
    return {
        "link_bandwidth_gb_s": np.geomspace(25, 3200, bandwidths).astype(f),
        "num_gpus": (2.0 ** np.arange(6, 15)).astype(f),
        "compute_tflops": np.array([312, 500, 989, 2250], dtype=f),
        "tensor_parallel": np.array([1, 2, 4, 8], dtype=f),
        "pipeline_parallel": np.array([1, 2, 4, 8, 16], dtype=f),
        "micro_batch": np.array([1, 2, 4, 8], dtype=f),
        "gradient_accum_steps": (2.0 ** np.arange(0, 8)).astype(f),
    }


BASE = {"model_params_b": 70.0, "seq_length": 4096.0, "hidden_dim": 8192.0,
        "num_layers": 80.0}


def main() -> None:
    out = Path(sys.argv[1])
    grid = axes(int(sys.argv[2]) if len(sys.argv) > 2 else 1024)
    radices = tuple(len(v) for v in grid.values())
    size = int(np.prod(radices))
    writer = None
    for start in range(0, size, CHUNK):
        ids = np.arange(start, min(start + CHUNK, size), dtype=np.int64)
        digits = np.unravel_index(ids, radices)
        x = {name: values[d] for (name, values), d in zip(grid.items(), digits, strict=True)}
        x.update({k: np.full(len(ids), v, dtype=np.float32) for k, v in BASE.items()})
        y = seed_numpy(x)
        columns = {"config_id": ids}
        columns.update({k: np.round(v).astype(np.int64) if k in INTEGER else v
                        for k, v in x.items()})
        columns.update({k: v.astype(np.int8) if k in ("bottleneck", "regime") else v
                        for k, v in y.items()})
        table = pa.table(columns)
        if writer is None:
            writer = pq.ParquetWriter(out, table.schema, compression="snappy",
                                      use_dictionary=False)
        writer.write_table(table)
    writer.close()
    print(size)


if __name__ == "__main__":
    main()
