"""Several writer threads (sink.WriterPool, ``--writers``), constant columns and the
time estimate: the dataset does not depend on how many threads write it."""

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import jaxmodel
from jaxmodel import engine
from jaxmodel.cli import main
from jaxmodel.engine import Plan, WriteFailed, default_writers, run_sweep
from jaxmodel.sink import PartWriter
from jaxmodel.spec import load_spec, parse_spec
from jaxmodel.sweeping import expected_seconds

SPECS = Path(__file__).parent / "specs"
SMALL = SPECS / "small.toml"
JAXMODEL = str(Path(sys.executable).with_name("jaxmodel"))

# Many small parts (chunks of 40 rows, parts of >= 100 rows), so that several
# threads really have parts to write at once.
MANY_PARTS = SMALL.read_text().replace("rows_per_file = 200", "rows_per_file = 100")


def read(path) -> dict[str, np.ndarray]:
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    table = table.sort_by("config_id")
    return {name: table[name].to_numpy(zero_copy_only=False) for name in table.column_names}


def manifest_records(path: Path) -> list[dict]:
    lines = (path / "_manifest-p0000.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda r: r["chunks"])


def file_contents(path: Path) -> dict[str, tuple]:
    """Each part's schema (with field and file metadata, less the creation
    time) and row count, by its path in the dataset."""
    out = {}
    for part in sorted(path.rglob("part-*.parquet")):
        f = pq.ParquetFile(part)
        schema = f.schema_arrow
        meta = {k: v for k, v in schema.metadata.items() if k != b"jaxmodel.created"}
        out[part.relative_to(path).as_posix()] = (schema.with_metadata(meta),
                                                  f.metadata.num_rows,
                                                  f.metadata.num_row_groups)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("partition", [False, True])
def test_same_dataset_for_1_2_and_4_writers(tmp_path, partition):
    text = MANY_PARTS + ('partition_by = ["tensor_parallel"]\n' if partition else "")
    spec = parse_spec(text, "many")
    results = {n: run_sweep(Plan(spec, chunk_size=40), tmp_path / f"w{n}", writers=n)
               for n in (1, 2, 4)}
    assert {n: r.extra["writers"] for n, r in results.items()} == {1: 1, 2: 2, 4: 4}
    one = tmp_path / "w1"
    assert len(list(one.rglob("part-*.parquet"))) >= 8  # enough parts to share out

    # Against the model itself (an independent path): the kept rows.
    plan = Plan(spec)
    ids = np.arange(spec.size)
    inputs = plan.space.host_inputs(ids)
    out = jaxmodel.evaluate(spec.model, **inputs)
    keep = out.valid_layout & (out.mfu_percent >= 20)
    expected = read(one)
    np.testing.assert_array_equal(expected["config_id"], ids[keep])
    np.testing.assert_array_equal(expected["num_gpus"], inputs["num_gpus"][keep])

    for n in (2, 4):
        got = read(tmp_path / f"w{n}")
        assert list(got) == list(expected)
        for name in expected:
            np.testing.assert_array_equal(got[name], expected[name], err_msg=f"{n}: {name}")
        assert file_contents(tmp_path / f"w{n}") == file_contents(one)
        assert manifest_records(tmp_path / f"w{n}") == manifest_records(one)
        assert results[n].rows == results[1].rows and results[n].parts == results[1].parts
        assert results[n].bytes == results[1].bytes


def test_threads_write_parts_at_the_same_time(tmp_path, monkeypatch):
    """Two parts are in the encoder at once: each write waits (bounded) for
    another thread to arrive at the same point."""
    barrier = threading.Barrier(2, timeout=60)
    met = []
    real_write = PartWriter._write

    def write_together(self, path, table):
        if not met:
            barrier.wait()  # raises BrokenBarrierError if no second thread comes
            met.append(threading.current_thread().name)
        return real_write(self, path, table)

    monkeypatch.setattr(PartWriter, "_write", write_together)
    spec = parse_spec(MANY_PARTS, "many")
    run_sweep(Plan(spec, chunk_size=40), tmp_path / "ds", writers=2)
    assert met and met[0].startswith("jaxmodel-writer-")


@pytest.mark.slow
def test_a_failing_writer_stops_the_sweep_and_resume_finishes(tmp_path, monkeypatch):
    spec = parse_spec(MANY_PARTS, "many")
    run_sweep(Plan(spec, chunk_size=40), tmp_path / "clean", writers=1)
    calls = []
    real_write = PartWriter._write

    def fail_third(self, path, table):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real_write(self, path, table)

    monkeypatch.setattr(PartWriter, "_write", fail_third)
    with pytest.raises(WriteFailed, match="the disk is full"):
        run_sweep(Plan(spec, chunk_size=40), tmp_path / "ds", writers=3)
    recorded = {p for r in manifest_records(tmp_path / "ds") for p in r["parts"]}
    for part in (tmp_path / "ds").rglob("part-*.parquet"):
        pq.read_metadata(part)  # complete files only
    assert len(recorded) < len(list((tmp_path / "clean").rglob("part-*.parquet")))
    monkeypatch.setattr(PartWriter, "_write", real_write)
    run_sweep(Plan(spec, chunk_size=40), tmp_path / "ds", resume=True, writers=3)
    a, b = read(tmp_path / "ds"), read(tmp_path / "clean")
    for name in b:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.slow
def test_sigkill_with_several_writers_then_resume_equals_uninterrupted(tmp_path):
    spec_path = tmp_path / "kill.toml"
    spec_path.write_text(SMALL.read_text()
                         .replace('filter = "valid_layout and mfu_percent >= 20"', "")
                         .replace("geomspace = [25, 3200, 6]", "geomspace = [25, 3200, 60]")
                         .replace("rows_per_file = 200", "rows_per_file = 100"))
    env = {k: v for k, v in __import__("os").environ.items() if k != "XLA_FLAGS"}
    clean = tmp_path / "clean"
    subprocess.run([JAXMODEL, "sweep", str(spec_path), "-o", str(clean), "--chunk-size", "64",
                    "-q", "--writers", "1"], check=True, env=env)
    expected = read(clean)
    total_chunks = -(-len(expected["config_id"]) // 64)
    args = ["--chunk-size", "64", "-q", "--writers", "3"]
    cut_short = 0
    for case, delay in enumerate([0.0, 0.1, 0.3]):
        out = tmp_path / f"killed-{case}"
        proc = subprocess.Popen([JAXMODEL, "sweep", str(spec_path), "-o", str(out), *args],
                                env=env)
        deadline = time.time() + 60
        manifest = out / "_manifest-p0000.jsonl"
        while time.time() < deadline and proc.poll() is None and not manifest.exists():
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for part in out.rglob("part-*.parquet"):
            pq.read_metadata(part)  # every visible part is a complete file
        lines = manifest.read_text().splitlines() if manifest.exists() else []
        recorded = sum(b - a for line in lines for a, b in json.loads(line)["chunks"])
        if sum(1 for _ in out.rglob("*.tmp")) or recorded < total_chunks:
            cut_short += 1
        subprocess.run([JAXMODEL, "sweep", str(spec_path), "-o", str(out), "--resume", *args],
                       check=True, env=env)
        got = read(out)
        for name in expected:
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
        assert not list(out.rglob(".*.tmp"))
    assert cut_short >= 2  # the kills really landed mid-sweep


def test_constant_columns_are_dictionary_encoded_and_keep_their_values(tmp_path):
    spec = load_spec(SMALL)
    plan = Plan(spec, chunk_size=500)
    varied = {n for d in spec.dims for n in d.names}
    fixed = [f.name for f in spec.model.inputs if f.name not in varied]
    assert fixed and set(plan.constant) == set(fixed)
    # The device does not send them; the host fills them in.
    rows, n, _ = plan.rows_for(0)
    for name in fixed:
        assert rows[name].shape == (n,)
    run_sweep(plan, tmp_path / "ds")
    got = read(tmp_path / "ds")
    for f in spec.model.inputs:
        if f.name in fixed:
            value = round(spec.base[f.name]) if f.integer else np.float32(spec.base[f.name])
            assert (got[f.name] == value).all(), f.name
            assert got[f.name].dtype == (np.int64 if f.integer else np.float32)
    part = sorted((tmp_path / "ds").glob("part-*.parquet"))[0]
    meta = pq.ParquetFile(part).metadata
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    for i, name in enumerate(names):
        chunk = meta.row_group(0).column(i)
        if name in fixed:
            assert chunk.has_dictionary_page and "RLE_DICTIONARY" in chunk.encodings, name
        elif name in ("link_bandwidth_gb_s", "mfu_percent"):
            assert not chunk.has_dictionary_page, name


def test_parts_are_required_columns_with_delta_ids_and_no_category_statistics(tmp_path):
    """The writer's encoding choices (sink.parquet_options, Column.field), read
    back from a part's Parquet metadata; and a dataset whose older parts
    declare the columns nullable still reads as one, in pyarrow and DuckDB."""
    import duckdb

    run_sweep(Plan(load_spec(SMALL), chunk_size=500), tmp_path / "ds")
    parts = sorted((tmp_path / "ds").glob("part-*.parquet"))
    assert len(parts) >= 2
    meta = pq.ParquetFile(parts[0]).metadata
    categories = {"bottleneck", "regime"}
    for i in range(meta.num_columns):
        column = meta.schema.column(i)
        chunk = meta.row_group(0).column(i)
        assert column.max_definition_level == 0, column.name  # REQUIRED: no levels
        assert chunk.is_stats_set == (column.name not in categories), column.name
        if column.name == "config_id":
            assert "DELTA_BINARY_PACKED" in chunk.encodings
            assert not chunk.has_dictionary_page
    before = read(tmp_path / "ds")
    old = pq.read_table(parts[0])
    old = old.cast(pa.schema([f.with_nullable(True) for f in old.schema],
                             metadata=old.schema.metadata))
    pq.write_table(old, parts[0])
    assert pq.ParquetFile(parts[0]).metadata.schema.column(0).max_definition_level == 1
    after = read(tmp_path / "ds")
    assert after.keys() == before.keys()
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    n = len(before["config_id"])
    got = duckdb.sql(f"SELECT count(*), sum(config_id) FROM read_parquet("
                     f"'{tmp_path / 'ds'}/part-*.parquet')").fetchall()[0]
    assert got == (n, int(before["config_id"].sum()))  # DuckDB agrees with pyarrow


def test_expected_seconds_counts_writers_and_cores():
    # 1M configurations evaluated at 10M/s (0.1 s) and 1M rows written at
    # 1M rows/s per writer (1 s of one core).
    args = dict(configurations=1e6, rows=1e6, rate=1e7, write_rate=1e6)
    assert expected_seconds(**args, writers=1, cores=2, on_cpu=True) == pytest.approx(1.0)
    # Two writers on two CPU cores: the 1.1 core-seconds shared by both cores.
    assert expected_seconds(**args, writers=2, cores=2, on_cpu=True) == pytest.approx(0.55)
    # More writers than cores do not help.
    assert expected_seconds(**args, writers=8, cores=2, on_cpu=True) == pytest.approx(0.55)
    # A GPU host with 16 cores and 15 writers: the device is the limit.
    assert expected_seconds(**args, writers=15, cores=16, on_cpu=False) == pytest.approx(0.1)
    assert expected_seconds(**args, writers=4, cores=16, on_cpu=False) == pytest.approx(0.25)


def test_default_writers_every_core_on_a_cpu_within_memory(monkeypatch):
    plan = Plan(load_spec(SMALL), chunk_size=100)
    monkeypatch.setattr(engine, "usable_cores", lambda: 16)
    assert default_writers(plan) == 16  # the CPU is the device: every core writes
    monkeypatch.setattr(engine, "usable_cores", lambda: 1)
    assert default_writers(plan) == 1
    # Memory: a part of SMALL is 200 rows of 175 bytes (8 config_id + 8 x 8 + 3 x 4
    # inputs + 4 x 8 + 1 + 14 x 4 + 2 x 1 outputs), twice that while encoding:
    # 70,000 bytes.  A quarter of 1,120,000 bytes holds four parts: the part
    # being buffered and three writers.
    memory = {"SC_PHYS_PAGES": 1120, "SC_PAGE_SIZE": 1000}
    monkeypatch.setattr(engine.os, "sysconf", memory.__getitem__)
    monkeypatch.setattr(engine, "usable_cores", lambda: 16)
    assert default_writers(plan) == 3


@pytest.mark.slow
def test_dry_run_reports_the_writers(tmp_path, capsys):
    for n in ("1", "2"):
        with pytest.raises(SystemExit) as info:
            main(["sweep", str(SMALL), "-o", str(tmp_path / "ds"), "--dry-run", "--writers", n])
        out = capsys.readouterr().out
        assert info.value.code == 0
        assert f"with {n} writer{'s' if n == '2' else ''} (the probe:" in out
    assert not (tmp_path / "ds").exists()


def test_writers_zero_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["sweep", str(SMALL), "-o", str(tmp_path / "ds"), "--writers", "0"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.count("\n") == 1 and "--writers" in err and "0" in err


def test_a_parts_files_are_listed_in_the_order_of_their_partition_values(tmp_path):
    # Regression: the files of one partitioned part were listed in the order
    # Arrow's (multi-threaded) hash aggregation returned the groups, so the
    # manifests of two identical sweeps could differ (CI saw it once).  Here
    # the rows arrive 8, 1, 4, 2; the manifest must list 1, 2, 4, 8.
    from jaxmodel.sink import Batch, Column
    columns = [Column("config_id", pa.int64(), "", "id"),
               Column("tensor_parallel", pa.int64(), "", "t")]
    writer = PartWriter(tmp_path, 0, columns, file_metadata={}, rows_per_file=100,
                        row_group_size=100, compression="zstd",
                        partition_by=["tensor_parallel"])
    table = pa.table({"config_id": pa.array([0, 1, 2, 3, 4], pa.int64()),
                      "tensor_parallel": pa.array([8, 1, 4, 2, 8], pa.int64())})
    writer.write(Batch([0], [table], 5))
    (line,) = writer.manifest.path.read_text().splitlines()
    record = json.loads(line)
    assert record["parts"] == [f"tensor_parallel={t}/part-p0000-c000000000000.parquet"
                               for t in (1, 2, 4, 8)]
    assert pq.read_table(tmp_path / record["parts"][3]).column("config_id").to_pylist() == [0, 4]
