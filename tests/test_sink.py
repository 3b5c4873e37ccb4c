"""The Parquet sink (``jaxmodel.sink``)."""

from types import SimpleNamespace

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
