"""The Parquet sink (``jaxmodel.sink``)."""

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 -- loaded, so that only the attribute is taken away

from jaxmodel import sink


def test_partitioning_does_not_rely_on_another_module_loading_pyarrow_compute(monkeypatch):
    # sink.py once called pa.compute.equal without importing pyarrow.compute:
    # it worked only because group_by (or another module) had loaded it and
    # set the attribute.  Without the attribute, partitioning must still work.
    monkeypatch.delattr(pa, "compute")
    table = pa.table({"tensor_parallel": [1, 1, 2], "x": [1.0, 2.0, 3.0]})
    parts = sink.PartWriter._partitions(SimpleNamespace(partition_by=["tensor_parallel"]),
                                        table)
    assert [(d, t.num_rows, t.column_names) for d, t in parts] == [
        ("tensor_parallel=1", 2, ["x"]), ("tensor_parallel=2", 1, ["x"])]


def test_how_duckdb_and_polars_order_an_invalid_rows_nan(tmp_path):
    """Issue 27 item 1: an invalid layout's metrics are NaN, which DuckDB and Polars
    both sort above every number and DuckDB's max returns; the README's queries
    keep the valid rows (``where valid_layout``), as it says they must."""
    from pathlib import Path

    import duckdb
    import polars as pl

    import jaxmodel

    spec = Path(__file__).parent / "specs" / "dashboard.toml"
    out = tmp_path / "ds"
    jaxmodel.sweep(spec, out)
    files = f"{out}/*.parquet"
    raw = dict(duckdb.sql(f"select num_gpus, max(mfu_percent) from '{files}' group by 1"
                          ).fetchall())
    assert any(np.isnan(v) for v in raw.values())  # some GPU count has an invalid row
    top = duckdb.sql(f"select mfu_percent from '{files}' order by 1 desc limit 1").fetchall()
    assert np.isnan(top[0][0])
    kept = dict(duckdb.sql(f"select num_gpus, max(mfu_percent) from '{files}' where "
                           "valid_layout group by 1").fetchall())
    assert all(np.isfinite(v) and 0 < v <= 100 for v in kept.values())
    frame = pl.read_parquet(files)
    assert np.isnan(frame.sort("mfu_percent", descending=True)["mfu_percent"][0])
    best = frame.filter(pl.col("valid_layout")).sort("mfu_percent", descending=True)
    assert best["mfu_percent"][0] == max(kept.values())
