"""``jaxmodel plot``: images of the requested size, and the plotted data checked against
the model (the float64 reference, the seed file, ``evaluate``, ``sensitivities``) and the
dataset (DuckDB group-bys, a brute-force numpy regime map)."""

import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.dataset as ds
import pytest
from reference import seed_reference
from typer.testing import CliRunner

import jaxmodel
from jaxmodel import plot
from jaxmodel.cli import app
from jaxmodel.sensitivity import sensitivities
from jaxmodel.spec import parse_spec
from jaxmodel.sweeping import sweep

pytest.importorskip("matplotlib")
import matplotlib.image  # noqa: E402

runner = CliRunner()
SEED = jaxmodel.get_model("seed")
CONSOLE_SCRIPT = Path(sys.executable).parent / "jaxmodel"

# 6 x 4 x 4 x 4 x 2 x 3 = 2,304 rows; t p = 40 > 32 GPUs gives invalid rows,
# and small row groups and files make the scan many batches across parts.
SPEC = """
model = "seed"
[axes]
link_bandwidth_gb_s = {geomspace = [25, 3200, 6]}
num_gpus = [32, 64, 128, 256]
tensor_parallel = [1, 2, 4, 8]
pipeline_parallel = [1, 2, 4, 5]
micro_batch = [1, 2]
gradient_accum_steps = [1, 2, 8]

[output]
rows_per_file = 700
row_group_size = 100
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plot") / "small"
    sweep(parse_spec(SPEC, "small"), path)
    return path


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plot") / "parts"
    text = SPEC + 'partition_by = ["micro_batch"]\n'
    sweep(parse_spec(text, "parts"), path)
    return path


def image(path: Path, width: int, height: int) -> np.ndarray:
    """The PNG's pixels, after checking its size and that it is not one colour."""
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[:2] == (height, width)
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 20
    return pixels


def invoke_ok(*args: str) -> str:
    result = runner.invoke(app, ["plot", *args])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert result.stdout.startswith("wrote ")
    return result.stdout


def invoke_error(*args: str) -> str:
    result = runner.invoke(app, ["plot", *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    return result.stderr


def duck(dataset: Path, sql: str) -> list[tuple]:
    source = f"read_parquet('{dataset}/**/*.parquet', hive_partitioning = true)"
    return duckdb.sql(sql.replace("DATA", source)).fetchall()


# --- images -------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    ["profile"],
    ["breakdown"],
    ["breakdown", "--compare", "tensor_parallel=1,2,4,8"],
    ["breakdown", "--layouts", "--top", "5"],
    ["tornado"],
])
def test_configuration_commands_write_an_image_of_the_requested_size(tmp_path, command):
    out = tmp_path / "a.png"
    invoke_ok(*command, "-o", str(out), "--width", "640", "--height", "480")
    image(out, 640, 480)


@pytest.mark.parametrize("command", [
    ["heatmap", "--value", "mfu_percent"],
    ["regimes"],
    ["regimes", "--column", "regime", "--rule", "most"],
])
def test_dataset_commands_write_an_image_of_the_requested_size(tmp_path, dataset, command):
    out = tmp_path / "a.png"
    invoke_ok(command[0], str(dataset), "--x", "link_bandwidth_gb_s", "--y", "num_gpus",
              *command[1:], "-o", str(out), "--width", "500", "--height", "300")
    image(out, 500, 300)


def test_svg_by_extension_at_the_same_size(tmp_path):
    out = tmp_path / "p.svg"
    invoke_ok("profile", "--model", "seed", "-o", str(out), "--width", "720", "--height", "360")
    text = out.read_text()
    assert text.lstrip().startswith("<?xml")
    # 100 pixels per inch, 72 points per inch.
    assert 'width="518.4pt"' in text and 'height="259.2pt"' in text


# --- errors -------------------------------------------------------------------


def test_other_extensions_are_a_one_line_error(tmp_path):
    err = invoke_error("profile", "--model", "seed", "-o", str(tmp_path / "p.jpg"))
    assert ".png or .svg" in err
    assert not (tmp_path / "p.jpg").exists()


def test_without_matplotlib_the_commands_name_the_extra(tmp_path, dataset, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    for args in (["profile"], ["tornado"],
                 ["heatmap", str(dataset), "--x", "num_gpus", "--y", "tensor_parallel",
                  "--value", "mfu_percent"]):
        err = invoke_error(*args, "-o", str(tmp_path / "x.png"))
        assert "install the plot extra: pip install 'jaxmodel[plot]'" in err
    assert not list(tmp_path.iterdir())


def test_bad_columns_are_a_one_line_error_with_a_suggestion(tmp_path, dataset):
    base = ["--x", "link_bandwidth_gb_s", "--y", "num_gpus"]
    out = ["-o", str(tmp_path / "h.png")]
    err = invoke_error("heatmap", str(dataset), "--x", "link_bandwith_gb_s", "--y", "num_gpus",
                       "--value", "mfu_percent", *out)
    assert "'link_bandwith_gb_s'" in err and "did you mean 'link_bandwidth_gb_s'" in err
    err = invoke_error("heatmap", str(dataset), *base, "--value", "mfu_pct", *out)
    assert "did you mean 'mfu_percent'" in err
    err = invoke_error("heatmap", str(dataset), *base, "--value", "bottleneck", *out)
    assert "not numeric" in err
    err = invoke_error("regimes", str(dataset), *base, "--column", "botleneck", *out)
    assert "did you mean 'bottleneck'" in err
    err = invoke_error("heatmap", str(dataset), *base, "--value", "mfu_percent",
                       "--where", "num_gpu > 3", *out)
    assert "did you mean 'num_gpus'" in err
    err = invoke_error("heatmap", str(tmp_path / "nowhere"), *base, "--value", "mfu_percent",
                       *out)
    assert "no such file" in err
    err = invoke_error("breakdown", "--model", "seed", "--compare", "tensor_paralel=1,2", *out)
    assert "did you mean 'tensor_parallel'" in err
    err = invoke_error("breakdown", "--model", "seed", "--compare", "tensor_parallel=1,2.5", *out)
    assert "tensor_parallel" in err and "2.5" in err
    err = invoke_error("tornado", "--model", "seed", "--of", "mfu_percnt", *out)
    assert "did you mean 'mfu_percent'" in err
    err = invoke_error("profile", "--model", "seed", "--width", "20", *out)
    assert "width" in err
    assert not list(tmp_path.iterdir())


# --- the data: configurations ---------------------------------------------------


def test_profile_data_is_the_seed_profile(tmp_path, seed_example):
    data = plot.plot_profile(SEED, SEED.defaults, tmp_path / "p.png")
    expected = seed_example["profile"]
    assert data.gpus.tolist() == [g for g, _ in expected["eff_vs_gpus"]]
    assert [round(float(e), 2) for e in data.mfu_vs_gpus] == [
        e for _, e in expected["eff_vs_gpus"]]
    assert [round(float(b), 1) for b in data.bandwidths_gb_s] == [
        b for b, _ in expected["eff_vs_bw"]]
    assert [round(float(e), 2) for e in data.mfu_vs_bandwidth] == [
        e for _, e in expected["eff_vs_bw"]]
    assert (data.own_gpus, data.own_bandwidth_gb_s) == (64, 450)
    assert round(data.own_mfu, 1) == seed_example["outputs"]["mfu_percent"]


def test_profile_data_is_profile_curves_for_any_configuration():
    from jaxmodel.profile import profile_curves

    inputs = {**SEED.defaults, "num_gpus": 256, "tensor_parallel": 4, "link_bandwidth_gb_s": 100}
    data = plot.profile_data(SEED, inputs)
    curves = profile_curves(SEED, inputs)
    np.testing.assert_array_equal(data.gpus, curves["eff_vs_gpus"][0])
    np.testing.assert_array_equal(data.mfu_vs_gpus, curves["eff_vs_gpus"][1])
    np.testing.assert_array_equal(data.bandwidths_gb_s, curves["eff_vs_bw"][0])
    np.testing.assert_array_equal(data.mfu_vs_bandwidth, curves["eff_vs_bw"][1])
    ref = seed_reference(**{k: int(v) if SEED.input_field(k).integer else v
                            for k, v in inputs.items()})
    assert data.own_mfu == pytest.approx(ref["mfu_percent"], rel=1e-5)


def test_breakdown_bars_are_the_step_time_terms(tmp_path, seed_example):
    configs, labels = plot.compare_configs(SEED.defaults, {"tensor_parallel": [1, 2, 8],
                                                           "pipeline_parallel": [1, 3]})
    data = plot.plot_breakdown(SEED, configs, tmp_path / "b.png", labels=labels)
    assert data.labels == ("t=1 p=1", "t=1 p=3", "t=2 p=1", "t=2 p=3", "t=8 p=1", "t=8 p=3")
    for i, c in enumerate(configs):
        ref = seed_reference(**{k: int(v) if SEED.input_field(k).integer else v
                                for k, v in c.items()})
        assert bool(data.valid[i]) == ref["valid_layout"]  # 80 layers do not split in 3
        for _, col in plot.shown_terms(SEED):
            if ref["valid_layout"]:
                assert data.terms[col][i] == pytest.approx(ref[col], rel=1e-5, abs=1e-6)
            else:
                assert np.isnan(data.terms[col][i])
    # (the breakdown answers on the host in float64, as evaluate does with x64)
    out = jaxmodel.evaluate("seed", x64=True,
                            **{n: np.array([c[n] for c in configs]) for n in SEED.input_names})
    for _, col in plot.shown_terms(SEED):
        np.testing.assert_array_equal(data.terms[col], getattr(out, col))
    # The seed configuration alone: its bar is the seed file's breakdown.
    seed = plot.breakdown_data(SEED, [SEED.defaults])
    profile = seed_example["profile"]
    for key, col in (("compute_ms", "compute_time_ms"), ("tp_ms", "tp_comm_ms"),
                     ("pp_ms", "pp_comm_ms"), ("bubble_ms", "pipeline_bubble_ms"),
                     ("dp_ms", "dp_allreduce_ms")):
        assert round(float(seed.terms[col][0]), 3) == profile[key]


def test_breakdown_layouts_are_the_fastest_valid_layouts_at_the_same_batch():
    base = SEED.defaults  # 64 GPUs, global batch d b m = 2 x 1 x 16 = 32 sequences
    configs, labels = plot.layout_configs(SEED, base, top=6)
    # Brute force: every t | 8192, p | 80, b, m with t p d = 64 and d b m = 32.
    found = []
    for t in [1, 2, 4, 8, 16, 32, 64]:
        for p in [1, 2, 4, 8, 16]:
            if 64 % (t * p):
                continue
            d = 64 // (t * p)
            for b in range(1, 33):
                if 32 % (d * b):
                    continue
                m = 32 // (d * b)
                ref = seed_reference(**{**{k: int(v) if SEED.input_field(k).integer else v
                                           for k, v in base.items()},
                                        "tensor_parallel": t, "pipeline_parallel": p,
                                        "micro_batch": b, "gradient_accum_steps": m})
                found.append((ref["step_time_ms"], t, p, b, m))
    found.sort()
    got = [(c["tensor_parallel"], c["pipeline_parallel"], c["micro_batch"],
            c["gradient_accum_steps"]) for c in configs]
    step = [seed_reference(**{k: int(v) if SEED.input_field(k).integer else v
                              for k, v in c.items()})["step_time_ms"] for c in configs]
    np.testing.assert_allclose(step, [f[0] for f in found[:6]], rtol=1e-5)
    assert got[0] == found[0][1:]
    assert labels[0] == "t{} p{} b{} m{}".format(*found[0][1:])


def test_tornado_bars_are_the_elasticities_ranked(tmp_path):
    inputs = {**SEED.defaults, "link_bandwidth_gb_s": 200}
    data = plot.plot_tornado(SEED, inputs, tmp_path / "t.png", of="mfu_percent")
    # (the tornado differentiates on the host in float64: issue 26)
    s = sensitivities(inputs, of=["mfu_percent"], kind="elasticity", model=SEED, x64=True)
    expected = {w: float(s.elasticity("mfu_percent", w)) for w in s.wrt}
    assert set(data.inputs) == set(expected)
    assert dict(zip(data.inputs, data.elasticities.tolist(), strict=True)) == pytest.approx(
        expected, rel=1e-9, abs=1e-12)
    magnitudes = np.abs(data.elasticities)
    assert (np.diff(magnitudes) <= 0).all()
    # By hand: MFU = compute / step, and compute does not depend on bandwidth, so
    # e(MFU, B) = -e(step, B) = (tp + pp + dp) / step.
    ref = seed_reference(**{k: int(v) if SEED.input_field(k).integer else v
                            for k, v in inputs.items()})
    comm = ref["tp_comm_ms"] + ref["pp_comm_ms"] + ref["dp_allreduce_ms"]
    e_bw = data.elasticities[data.inputs.index("link_bandwidth_gb_s")]
    assert e_bw == pytest.approx(comm / ref["step_time_ms"], rel=1e-4)


def test_tornado_of_an_invalid_layout_is_an_error(tmp_path):
    err = invoke_error("tornado", "--model", "seed", "--pipeline-parallel", "3", "-o",
                       str(tmp_path / "t.png"))
    assert "invalid" in err


# --- the data: datasets ----------------------------------------------------------


@pytest.mark.parametrize("agg", ["max", "min", "mean"])
def test_heatmap_cells_equal_a_duckdb_group_by(dataset, agg):
    data = plot.heatmap_data(dataset, "link_bandwidth_gb_s", "num_gpus", "mfu_percent", agg,
                             batch_size=64)
    assert data.rows_read == 2304
    # DuckDB orders NaN above every number, so the invalid rows (NaN) are left
    # out by valid_layout (DuckDB 1.x's isnan() misses some of these NaNs).
    rows = duck(dataset, f"SELECT link_bandwidth_gb_s, num_gpus, {agg}(mfu_percent) "
                "FILTER (valid_layout), count(*) FILTER (valid_layout) FROM DATA GROUP BY ALL")
    assert len(rows) == data.cells.size == 6 * 4
    for bw, n, v, count in rows:
        i = data.y_values.tolist().index(n)
        j = data.x_values.tolist().index(np.float32(bw))
        assert data.counts[i, j] == count
        if agg == "mean":
            assert data.cells[i, j] == pytest.approx(v, rel=1e-9)
        else:
            assert data.cells[i, j] == v


def test_heatmap_where_is_pushed_down_and_blank_cells_are_nan(dataset):
    where = "pipeline_parallel == 5 and tensor_parallel == 8"
    data = plot.heatmap_data(dataset, "tensor_parallel", "num_gpus", "step_time_ms", "max",
                             where, batch_size=50)
    assert data.rows_read == 6 * 4 * 2 * 3  # only the filtered rows come out of the scan
    rows = dict(duck(dataset, "SELECT num_gpus, max(step_time_ms) FILTER (valid_layout) "
                              f"FROM DATA WHERE {where} GROUP BY ALL"))
    assert data.x_values.tolist() == [8]
    assert data.y_values.tolist() == [32, 64, 128, 256]
    # t p = 40 > 32 GPUs: every row of that cell is invalid, so the cell is blank.
    assert np.isnan(data.cells[0, 0]) and data.counts[0, 0] == 0 and rows[32] is None
    assert data.cells[1:, 0].tolist() == [rows[64], rows[128], rows[256]]


def test_heatmap_reads_a_partitioned_dataset_alike(dataset, partitioned):
    for x in ("micro_batch", "link_bandwidth_gb_s"):
        a = plot.heatmap_data(dataset, x, "tensor_parallel", "throughput_tokens_s")
        b = plot.heatmap_data(partitioned, x, "tensor_parallel", "throughput_tokens_s",
                              batch_size=100)
        np.testing.assert_array_equal(a.x_values, b.x_values)
        np.testing.assert_array_equal(a.cells, b.cells)


def brute_force_regimes(dataset: Path, x: str, y: str, column: str, rule: str, by: str,
                        where: str | None):
    table = ds.dataset(dataset, format="parquet", partitioning="hive").to_table()
    if where:
        t = table["tensor_parallel"].to_numpy()
        table = table.filter(t == int(where.split("==")[1]))
    xs, ys = table[x].to_numpy(), table[y].to_numpy()
    names = np.array(table[column].to_pylist(), dtype=object)
    values = table[by].to_numpy().astype(np.float64)
    cats = jaxmodel.get_model("seed").output_field(column).categories
    grid = {}
    for xv in np.unique(xs):
        for yv in np.unique(ys):
            rows = (xs == xv) & (ys == yv)
            cell = rows & np.isfinite(values)
            if not rows.any():
                grid[xv, yv] = ""
            elif not cell.any():
                grid[xv, yv] = "invalid"
            elif rule == "best":
                top = values[cell].max()
                winners = set(names[cell & (values == top)])
                grid[xv, yv] = min(winners, key=cats.index)
            else:
                counts = [int(np.sum(names[cell] == c)) for c in cats]
                grid[xv, yv] = cats[int(np.argmax(counts))]
    return grid


# The best layout with t = 1 is compute-bound everywhere: the "best" maps are
# drawn for t = 8 (the filter is applied by the brute force too).
@pytest.mark.parametrize("column,rule,x,y", [
    ("bottleneck", "best", "link_bandwidth_gb_s", "gradient_accum_steps"),
    ("regime", "best", "link_bandwidth_gb_s", "pipeline_parallel"),
    ("bottleneck", "most", "link_bandwidth_gb_s", "tensor_parallel"),
    ("regime", "most", "pipeline_parallel", "num_gpus"),
])
def test_regime_cells_equal_a_brute_force_numpy_map(dataset, column, rule, x, y):
    where = "tensor_parallel == 8" if rule == "best" else None
    data = plot.regime_data(dataset, x, y, column, rule, where=where, batch_size=64)
    expected = brute_force_regimes(dataset, x, y, column, rule, "mfu_percent", where)
    names = data.names()
    assert names.size == len(expected)
    for (xv, yv), name in expected.items():
        assert names[data.y_values.tolist().index(yv), data.x_values.tolist().index(xv)] == name
    assert len(set(names.ravel())) > 1  # the map is not one colour


def test_category_axes_keep_their_order_and_missing_cells_stay_blank(dataset):
    data = plot.regime_data(dataset, "bottleneck", "tensor_parallel", "regime", "most")
    expected = brute_force_regimes(dataset, "bottleneck", "tensor_parallel", "regime", "most",
                                   "mfu_percent", None)
    order = list(jaxmodel.BOTTLENECKS)
    present = data.x_values.tolist()
    assert present == sorted(present, key=order.index)  # BOTTLENECKS order, not alphabetical
    names = data.names()
    for (xv, yv), name in expected.items():
        assert names[data.y_values.tolist().index(yv), present.index(xv)] == name
    # No row is TP-bound at t = 1: that cell has no row at all and is blank.
    assert names[data.y_values.tolist().index(1), present.index("tp_comm")] == ""
    grid = plot.heatmap_data(dataset, "bottleneck", "tensor_parallel", "mfu_percent")
    assert grid.x_values.tolist() == present


class Spy:
    """A dataset whose scans are recorded."""

    def __init__(self, dataset):
        self.dataset = dataset
        self.schema = dataset.schema
        self.scans: list[dict] = []
        self.batches = 0

    def scanner(self, **kwargs):
        self.scans.append(kwargs)
        scanner = self.dataset.scanner(**kwargs)
        spy = self

        class Counting:
            def to_batches(self):
                for batch in scanner.to_batches():
                    spy.batches += 1
                    yield batch

        return Counting()


def test_scans_read_only_the_needed_columns_with_the_filter_pushed_down(dataset):
    spy = Spy(ds.dataset(dataset, format="parquet", partitioning="hive"))
    where = "micro_batch == 2 and pipeline_parallel != 5"
    data = plot.heatmap_data(spy, "link_bandwidth_gb_s", "num_gpus", "step_time_ms", "min",
                             where, batch_size=32)
    (scan,) = spy.scans
    assert scan["columns"] == ["link_bandwidth_gb_s", "num_gpus", "step_time_ms"]
    assert scan["filter"] is not None
    assert data.rows_read == 2304 // 2 * 3 // 4
    assert spy.batches >= data.rows_read // 32  # merged from many partial aggregates
    rows = duck(dataset, "SELECT link_bandwidth_gb_s, num_gpus, min(step_time_ms) FILTER "
                         f"(valid_layout) FROM DATA WHERE {where.replace('==', '=')} "
                         "GROUP BY ALL")
    for bw, n, v in rows:
        i = data.y_values.tolist().index(n)
        j = data.x_values.tolist().index(np.float32(bw))
        assert data.cells[i, j] == v
    spy = Spy(ds.dataset(dataset, format="parquet", partitioning="hive"))
    plot.regime_data(spy, "link_bandwidth_gb_s", "num_gpus", "bottleneck", where=where)
    (scan,) = spy.scans
    assert scan["columns"] == ["link_bandwidth_gb_s", "num_gpus", "bottleneck", "mfu_percent"]
    assert scan["filter"] is not None


def test_regimes_of_the_seed_layout_match_the_reference(dataset, tmp_path):
    where = ("tensor_parallel == 8 and pipeline_parallel == 4 and micro_batch == 1 "
             "and num_gpus == 64")
    data = plot.plot_regimes(dataset, "link_bandwidth_gb_s", "gradient_accum_steps",
                             tmp_path / "r.png", column="bottleneck", where=where)
    for i, m in enumerate(data.y_values):
        for j, bw in enumerate(data.x_values):
            ref = seed_reference(**{**{k: int(v) if SEED.input_field(k).integer else v
                                       for k, v in SEED.defaults.items()},
                                    "gradient_accum_steps": int(m),
                                    "link_bandwidth_gb_s": float(bw)})
            assert data.names()[i, j] == ref["bottleneck"]


def test_geometric_axes_are_logarithmic():
    assert plot.is_geometric(np.geomspace(25, 3200, 128))
    assert plot.is_geometric(np.array([64, 128, 256, 512, 1024]))
    assert not plot.is_geometric(np.linspace(20, 900, 48))
    assert not plot.is_geometric(np.array([1, 2, 3]))  # spans less than 8x
    assert not plot.is_geometric(np.array(["a", "b", "c"]))


def test_console_script_writes_a_heatmap(tmp_path, dataset):
    out = tmp_path / "h.svg"
    done = subprocess.run([str(CONSOLE_SCRIPT), "plot", "heatmap", str(dataset), "--x",
                           "link_bandwidth_gb_s", "--y", "num_gpus", "--value", "mfu_percent",
                           "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote {out} (6 x 4 cells from 2,304 rows)"
    assert out.read_text().count("<path") > 10


def test_importing_jaxmodel_does_not_import_matplotlib():
    code = "import sys, jaxmodel, jaxmodel.plot, jaxmodel.cli; print('matplotlib' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def test_tornado_title_names_the_llm_size_gpus_and_model():
    """Issue 27 item 13: the title says what was differentiated, for which model size,
    on how many GPUs and in which cost model."""
    assert plot.tornado_title(SEED, SEED.defaults, "step_time_ms", 3383.864) == (
        "Sensitivity of step_time_ms = 3,384 ms: 70B parameters, 64 GPUs, t=8 p=4 b=1 m=16 "
        "(seed model)")
    refined = jaxmodel.get_model("refined")
    # The refined defaults by hand: 80 layers of h 8192 with 8 of 64 heads' keys and
    # values (8192 x (8192 + 2 x 1024) + 8192^2) and a SwiGLU of 28672 (3 x 8192 x
    # 28672), 855.6M a layer; untied embeddings of 32000 x 8192 twice; the norms'
    # 1.3M: 68.98B, "69" to three digits.
    title = plot.tornado_title(refined, refined.defaults, "mfu_percent", 41.0)
    assert title.startswith("Sensitivity of mfu_percent = 41 %: 69B parameters, "
                            "64 GPUs, t=8 p=4 b=1 m=16")
    assert title.endswith("(refined model)")
