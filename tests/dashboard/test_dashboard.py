"""The dashboard's server side: its queries against numpy over the same rows, its filter
translation against the filter language's own numpy evaluator, the configuration panel
against ``jaxmodel.evaluate`` and the sweep's own columns, and bad requests over HTTP."""

import base64
import json
import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

pytest.importorskip("dash")
pytest.importorskip("duckdb")

import jaxmodel  # noqa: E402
from jaxmodel import plot  # noqa: E402
from jaxmodel.cli import app as cli_app  # noqa: E402
from jaxmodel.dashboard import config as cfg  # noqa: E402
from jaxmodel.dashboard import data as q  # noqa: E402
from jaxmodel.dashboard.app import build_app  # noqa: E402
from jaxmodel.expr import parse  # noqa: E402
from jaxmodel.spec import parse_spec  # noqa: E402
from jaxmodel.sweeping import sweep  # noqa: E402

SPECS = Path(__file__).parents[1] / "specs"
runner = CliRunner()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("dash") / "dash"
    sweep(SPECS / "dashboard.toml", path)
    return path


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory) -> Path:
    text = (SPECS / "dashboard.toml").read_text() + 'partition_by = ["tensor_parallel"]\n'
    path = tmp_path_factory.mktemp("dash") / "parts"
    sweep(parse_spec(text, "parts"), path)
    return path


@pytest.fixture(scope="module")
def catalog(dataset, partitioned):
    c = q.Catalog([dataset, partitioned])
    yield c
    c.close()


@pytest.fixture(scope="module")
def rows(dataset) -> dict[str, np.ndarray]:
    """Every column as numpy (categories as names): the independent reference."""
    t = ds.dataset(dataset, format="parquet").to_table()
    out = {}
    for name in t.column_names:
        col = t.column(name).combine_chunks()
        if hasattr(col, "dictionary_decode"):
            col = col.dictionary_decode()
        out[name] = col.to_numpy(zero_copy_only=False)
    return out


def numpy_mask(rows, text: str) -> np.ndarray:
    """The filter evaluated by the filter language's own numpy evaluator."""
    expr = parse(text, set(rows))
    cats = {"bottleneck": jaxmodel.BOTTLENECKS, "regime": jaxmodel.REGIMES}
    cols = {n: (np.array([cats[n].index(v) for v in rows[n]]) if n in cats else rows[n])
            for n in expr.columns()}
    with np.errstate(all="ignore"):
        return np.broadcast_to(np.asarray(expr.evaluate_numpy(cols, cats), dtype=bool),
                               rows["config_id"].shape)


# --- queries ------------------------------------------------------------------


@pytest.mark.parametrize("agg", q.AGGS)
@pytest.mark.parametrize("where", ["", "valid_layout and micro_batch == 4",
                                   'bottleneck != "compute" or mfu_percent < 50'])
def test_heatmap_cells_equal_a_numpy_group_by(catalog, rows, agg, where):
    f = q.Filters(ranges={"num_gpus": (16, 64)}, choices={"tensor_parallel": [1, 8]},
                  where=where)
    g = q.grid(catalog, "dash", "link_bandwidth_gb_s", "pipeline_parallel", "step_time_ms",
               agg, f)
    keep = (rows["num_gpus"] >= 16) & np.isin(rows["tensor_parallel"], [1, 8])
    if where:
        keep &= numpy_mask(rows, where)
    assert g.rows == keep.sum()
    for i, yv in enumerate(g.y_values):
        for j, xv in enumerate(g.x_values):
            cell = keep & (rows["link_bandwidth_gb_s"] == xv) & (rows["pipeline_parallel"] == yv)
            v = rows["step_time_ms"][cell].astype(np.float64)
            finite = v[np.isfinite(v)]
            if agg == "count":  # a cell without rows is blank
                expect = float(cell.sum()) if cell.any() else math.nan
            elif not finite.size:
                expect = math.nan
            else:
                expect = {"max": np.max, "min": np.min, "mean": np.mean}[agg](finite)
            got = g.cells[0, i, j]
            assert (math.isnan(got) and math.isnan(expect)) or got == pytest.approx(
                expect, rel=1e-6), (xv, yv)


def test_facets_and_partitioned_datasets_agree(catalog):
    g = q.grid(catalog, "dash", "num_gpus", "pipeline_parallel", "mfu_percent", "max",
               facet="tensor_parallel")
    p = q.grid(catalog, "parts", "num_gpus", "pipeline_parallel", "mfu_percent", "max",
               facet="tensor_parallel")
    assert g.facets == p.facets == (1, 4, 8)
    np.testing.assert_array_equal(g.cells, p.cells)
    for k, t in enumerate(g.facets):
        one = q.grid(catalog, "dash", "num_gpus", "pipeline_parallel", "mfu_percent", "max",
                     q.Filters(choices={"tensor_parallel": [t]}))
        np.testing.assert_array_equal(one.cells[0], g.cells[k])


FILTERS = [
    "mfu_percent >= 40",
    "mfu_percent != 100",  # NaN != 100 is true
    "not (step_time_ms < 1000)",  # NaN rows pass: the comparison is false
    'bottleneck == "tp_comm" or regime == "invalid"',
    "valid_layout and tensor_parallel * pipeline_parallel >= 8",
    "abs(step_time_ms - 1000) < 500 and max(micro_batch, 2) == 4",
    "log(link_bandwidth_gb_s) > 5 and sqrt(num_gpus) >= 4",
    "-pipeline_parallel < -2 || !valid_layout",
    "throughput_tokens_s / used_gpus > 1000",
]


@pytest.mark.parametrize("text", FILTERS)
def test_filters_keep_the_rows_the_filter_language_keeps(catalog, rows, text):
    got = q.count_rows(catalog, "dash", q.Filters(where=text))
    assert got == int(numpy_mask(rows, text).sum())


def test_regime_map_equals_the_plot_commands_map(catalog, dataset):
    c = q.regimes(catalog, "dash", "link_bandwidth_gb_s", "num_gpus", "bottleneck",
                  "mfu_percent", q.Filters(where="micro_batch == 1"))
    ref = plot.regime_data(dataset, "link_bandwidth_gb_s", "num_gpus", "bottleneck", "best",
                           "mfu_percent", "micro_batch == 1")
    assert c.x_values == tuple(ref.x_values) and c.y_values == tuple(ref.y_values)
    assert c.names.shape == (1, len(ref.y_values), len(ref.x_values)) and not c.facets
    np.testing.assert_array_equal(c.names[0], ref.names())


def assert_panels_are_the_plot_commands_maps(c: q.Categorical, dataset, where: str):
    """Each facet's panel is ``jaxmodel plot regimes``' map (its own implementation, a
    pyarrow scan) of the rows with that facet value, on the panels' common axes
    (blank where the facet value has no row there)."""
    for f, value in enumerate(c.facets or [None]):
        text = " and ".join(filter(None, [where and f"({where})",
                                          value is not None and f"{c.facet} == {value!r}"]))
        ref = plot.regime_data(dataset, c.x, c.y, c.column, c.rule, c.by, text or None)
        want = np.full(c.names[f].shape, "", dtype=object)
        xi = [c.x_values.index(v) for v in ref.x_values]
        yi = [c.y_values.index(v) for v in ref.y_values]
        want[np.ix_(yi, xi)] = ref.names()
        np.testing.assert_array_equal(c.names[f], want, err_msg=f"{c.facet} = {value}")


@pytest.mark.parametrize("rule", ["best", "most"])
@pytest.mark.parametrize("facet", [None, "tensor_parallel", "micro_batch"])
@pytest.mark.parametrize("column, by, where", [
    ("regime", "mfu_percent", ""), ("bottleneck", "step_time_ms", "num_gpus >= 16")])
def test_faceted_regime_maps_by_either_rule_equal_the_plot_commands_maps(
        catalog, cubed, dataset, rule, facet, column, by, where):
    """With and without the summary cube (micro_batch is not one of its axes: that
    facet scans the rows)."""
    for cat in (catalog, cubed):
        c = q.regimes(cat, "dash", "link_bandwidth_gb_s", "num_gpus", column, by,
                      q.Filters(where=where), rule=rule, facet=facet)
        assert c.rule == rule and c.facet == facet
        assert len(c.facets) == {None: 0, "tensor_parallel": 3, "micro_batch": 2}[facet]
        assert_panels_are_the_plot_commands_maps(c, dataset, where)


def brute_front(x, y, ids):
    """Minimise both: the rows no other row dominates (of equal points, the lowest id)."""
    ok = np.isfinite(x) & np.isfinite(y)
    x, y, ids = x[ok], y[ok], ids[ok]
    keep = []
    for start in range(0, len(x), 512):  # every pair, 512 rows (i) against all (j) at once
        xi, yi, ii = (v[start:start + 512, None] for v in (x, y, ids))
        dominated = ((x <= xi) & (y <= yi) & ((x < xi) | (y < yi))).any(axis=1)
        same = ((x == xi) & (y == yi) & (ids < ii)).any(axis=1)
        keep.extend(start + np.flatnonzero(~dominated & ~same))
    return sorted(ids[keep].tolist())


@pytest.mark.parametrize("sample_percent, terms", [(0, 4), (100, 1), (100, 4), (40, 64),
                                                   (None, 4)])
@pytest.mark.parametrize("minimize_x, minimize_y", [(True, False), (False, True),
                                                    (True, True)])
def test_pareto_front_equals_a_brute_force_front(catalog, rows, sample_percent, terms,
                                                 minimize_x, minimize_y, monkeypatch):
    if sample_percent is None:  # the default: runs of ids, as for a big dataset
        monkeypatch.setattr(q, "PARETO_SAMPLE_ROWS", 100)
    t = q.pareto(catalog, "dash", "step_time_ms", "throughput_tokens_s",
                 sample_percent=sample_percent, terms=terms, minimize_x=minimize_x,
                 minimize_y=minimize_y, filters=q.Filters(where="num_gpus >= 16"))
    keep = rows["num_gpus"] >= 16
    sx, sy = (1 if minimize_x else -1), (1 if minimize_y else -1)
    want = brute_front(sx * rows["step_time_ms"][keep].astype(np.float64),
                       sy * rows["throughput_tokens_s"][keep].astype(np.float64),
                       rows["config_id"][keep])
    assert sorted(t["config_id"].to_pylist()) == want
    assert len(want) >= 1


def test_pareto_front_of_a_partitioned_dataset_is_the_plain_ones(catalog):
    for pct in (0, 100):
        a, b = (q.pareto(catalog, name, "step_time_ms", "mfu_percent", minimize_y=False,
                         sample_percent=pct, filters=q.Filters(where="micro_batch == 4"))
                for name in ("dash", "parts"))
        assert a.equals(b) and a.num_rows >= 1


@pytest.fixture(scope="module")
def ties(tmp_path_factory, dataset) -> tuple[Path, dict[str, np.ndarray]]:
    """A dataset made for the Pareto front's corner cases: few distinct values, so many
    rows share x, y or both (ids shuffled, so the lowest id of a tie is not the first
    row), NaN in either column, spread over several parts."""
    rng = np.random.default_rng(3)
    n = 6000
    cols = {
        "config_id": rng.permutation(n).astype(np.int64) * 7 + 5,
        "num_gpus": rng.choice([8, 16, 32, 64], n).astype(np.int64),
        "step_time_ms": rng.integers(1, 25, n).astype(np.float32),
        "throughput_tokens_s": (rng.integers(0, 30, n) * 0.5).astype(np.float32),
    }
    cols["step_time_ms"][rng.random(n) < 0.05] = np.nan
    cols["throughput_tokens_s"][rng.random(n) < 0.05] = np.nan
    path = tmp_path_factory.mktemp("ties") / "ties"
    path.mkdir()
    (path / "_jaxmodel.json").write_text((dataset / "_jaxmodel.json").read_text())
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.table(cols)
    for k, start in enumerate(range(0, n, 2500)):
        pq.write_table(table.slice(start, 2500), path / f"part-p0000-c{k:012d}.parquet",
                       row_group_size=1000)
    return path, cols


@pytest.mark.parametrize("sample_percent, terms", [(0, 4), (100, 1), (100, 4), (50, 64),
                                                   (None, 4)])
@pytest.mark.parametrize("x, y, minimize_x, minimize_y", [
    ("step_time_ms", "throughput_tokens_s", True, False),
    ("step_time_ms", "throughput_tokens_s", False, False),
    ("throughput_tokens_s", "step_time_ms", True, True),
    ("num_gpus", "throughput_tokens_s", True, False),
    ("step_time_ms", "num_gpus", False, True),
])
@pytest.mark.parametrize("where", ["", "num_gpus >= 16 and step_time_ms != 7"])
def test_pareto_front_keeps_the_lowest_id_of_ties_and_skips_nan(
        ties, sample_percent, terms, x, y, minimize_x, minimize_y, where, monkeypatch):
    path, cols = ties
    if sample_percent is None:  # the default: runs of (sparse, shuffled) ids
        monkeypatch.setattr(q, "PARETO_SAMPLE_ROWS", 600)
    catalog = q.Catalog([path])
    fetched = []
    sqls = []
    query = catalog.query

    def counted(sql, params=()):
        out = query(sql, params)
        fetched.append(out.num_rows)
        sqls.append(sql)
        return out

    catalog.query = counted
    try:
        t = q.pareto(catalog, "ties", x, y, minimize_x=minimize_x, minimize_y=minimize_y,
                     filters=q.Filters(where=where), sample_percent=sample_percent,
                     terms=terms)
    finally:
        catalog.close()
    keep = np.ones(len(cols["config_id"]), dtype=bool)
    if where:  # written out in numpy: NaN != 7 is true
        keep = (cols["num_gpus"] >= 16) & ~(cols["step_time_ms"] == 7)
    sx, sy = (1 if minimize_x else -1), (1 if minimize_y else -1)
    want = brute_front(sx * cols[x][keep].astype(np.float64),
                       sy * cols[y][keep].astype(np.float64), cols["config_id"][keep])
    assert sorted(t["config_id"].to_pylist()) == want
    got = dict(zip(t["config_id"].to_pylist(), zip(t["x"].to_pylist(), t["y"].to_pylist(),
                                                   strict=True), strict=True))
    at = {i: k for k, i in enumerate(cols["config_id"].tolist())}
    for i, (gx, gy) in got.items():  # each id's own values, not its tie's
        assert (gx, gy) == (float(cols[x][at[i]]), float(cols[y][at[i]]))
    assert t["x"].to_pylist() == sorted(t["x"].to_pylist(), reverse=not minimize_x)
    if sample_percent == 100:  # the sampled front's tests removed rows before the fetch
        assert fetched[-1] < int(keep.sum()) // 2
    if sample_percent is None:
        assert "config_id BETWEEN" in sqls[0] and fetched[0] > 0, (sqls, fetched)


@pytest.fixture(scope="module")
def cubed(dataset):
    """The test dataset with a summary cube (built for any size; its axes may span half
    the rows), and the SQL of every query it ran."""
    c = logged_catalog(dataset)
    yield c
    c.close()


def test_the_cube_groups_by_the_first_axes_and_every_category(cubed, rows):
    cube = cubed.source("dash").cube
    # 6 * 4 * 3 * 4 = 288 <= 576 / 2 combinations; micro_batch would double them
    assert cube.dims == ("link_bandwidth_gb_s", "num_gpus", "tensor_parallel",
                         "pipeline_parallel", "valid_layout", "bottleneck", "regime")
    keys = {tuple(rows[c][i] for c in cube.dims) for i in range(len(rows["config_id"]))}
    assert cube.groups == len(keys)
    assert q.Catalog.__init__.__kwdefaults__["cube_min_rows"] == q.CUBE_MIN_ROWS


CUBE_FILTERS = [
    q.Filters(),
    q.Filters(ranges={"num_gpus": (16, 64)}, choices={"tensor_parallel": [1, 8]}),
    q.Filters(choices={"regime": ["compute-bound", "invalid"], "valid_layout": [True]}),
    q.Filters(where="tensor_parallel * pipeline_parallel >= 8 and link_bandwidth_gb_s > 100"),
]


def cube_filter_mask(rows, f: q.Filters) -> np.ndarray:
    """The rows ``f`` keeps, in numpy."""
    keep = np.ones(len(rows["config_id"]), dtype=bool)
    for c, (lo, hi) in f.ranges.items():
        keep &= (rows[c] >= lo) & (rows[c] <= hi)
    for c, vals in f.choices.items():
        keep &= np.isin(rows[c], vals)
    if f.where:
        keep &= numpy_mask(rows, f.where)
    return keep


@pytest.mark.parametrize("agg", q.AGGS)
@pytest.mark.parametrize("k", range(len(CUBE_FILTERS)))
def test_cube_views_equal_a_numpy_group_by(cubed, rows, agg, k):
    f = CUBE_FILTERS[k]
    cubed.log.clear()
    g = q.grid(cubed, "dash", "link_bandwidth_gb_s", "pipeline_parallel", "step_time_ms",
               agg, f, facet="tensor_parallel")
    assert "cube0" in cubed.log[-1] and "ds0" not in cubed.log[-1]
    keep = cube_filter_mask(rows, f)
    assert g.rows == keep.sum()
    assert q.count_rows(cubed, "dash", f) == keep.sum() and "cube0" in cubed.log[-1]
    for t, tv in enumerate(g.facets):
        for i, yv in enumerate(g.y_values):
            for j, xv in enumerate(g.x_values):
                cell = (keep & (rows["link_bandwidth_gb_s"] == xv)
                        & (rows["pipeline_parallel"] == yv) & (rows["tensor_parallel"] == tv))
                v = rows["step_time_ms"][cell].astype(np.float64)
                finite = v[np.isfinite(v)]
                if agg == "count":
                    expect = float(cell.sum()) if cell.any() else math.nan
                elif not finite.size:
                    expect = math.nan
                else:
                    expect = {"max": np.max, "min": np.min, "mean": np.mean}[agg](finite)
                got = g.cells[t, i, j]
                assert (math.isnan(got) and math.isnan(expect)) or got == pytest.approx(
                    expect, rel=1e-6), (tv, yv, xv)
                assert g.counts[t, i, j] == (cell.sum() if agg == "count" else finite.size)


@pytest.mark.parametrize("column, by", [("regime", "mfu_percent"),
                                        ("bottleneck", "step_time_ms")])
@pytest.mark.parametrize("where", ["", CUBE_FILTERS[-1].where, "valid_layout"])
def test_cube_regime_maps_equal_the_plot_commands_map(cubed, dataset, column, by, where):
    f = q.Filters(where=where)
    cubed.log.clear()
    c = q.regimes(cubed, "dash", "link_bandwidth_gb_s", "num_gpus", column, by, f)
    assert "cube0" in cubed.log[-1] and "ds0" not in cubed.log[-1]
    ref = plot.regime_data(dataset, "link_bandwidth_gb_s", "num_gpus", column, "best", by,
                           f.where or None)
    assert c.x_values == tuple(ref.x_values) and c.y_values == tuple(ref.y_values)
    np.testing.assert_array_equal(c.names[0], ref.names())


@pytest.mark.parametrize("x, y, value, filters", [
    ("link_bandwidth_gb_s", "micro_batch", "mfu_percent", q.Filters()),  # not a cube axis
    ("link_bandwidth_gb_s", "num_gpus", "mfu_percent", q.Filters(where="mfu_percent > 30")),
    ("link_bandwidth_gb_s", "num_gpus", "mfu_percent", q.Filters(choices={"micro_batch": [4]})),
])
def test_views_the_cube_cannot_answer_scan_the_rows(cubed, catalog, x, y, value, filters):
    cubed.log.clear()
    g = q.grid(cubed, "dash", x, y, value, "max", filters)
    assert "ds0" in cubed.log[-1] and "cube0" not in cubed.log[-1]
    ref = q.grid(catalog, "dash", x, y, value, "max", filters)
    np.testing.assert_array_equal(g.cells, ref.cells)
    assert catalog.source("dash").cube is None  # small datasets get none by default


def test_dashboard_command_says_when_it_builds_a_cube_and_no_cube_skips_it(
        dataset, monkeypatch):
    import jaxmodel.dashboard.serve as serve_module

    served = []
    monkeypatch.setattr(serve_module, "serve", lambda app, host, port, **kw: served.append(kw))
    monkeypatch.setattr(q, "CUBE_MIN_ROWS", 500)  # the test dataset has 576 rows
    out = runner.invoke(cli_app, ["dashboard", str(dataset), "--no-browser"])
    assert out.exit_code == 0, out.output
    assert "dash has 576 rows; summarising it once" in out.output
    assert "groups by link_bandwidth_gb_s, num_gpus" in out.output
    out = runner.invoke(cli_app, ["dashboard", str(dataset), "--no-browser", "--no-cube"])
    assert out.exit_code == 0 and "summarising" not in out.output
    assert len(served) == 2


def test_top_rows_are_sorted_and_skip_nan(catalog, rows):
    t = q.top_rows(catalog, "dash", "step_time_ms", descending=True, k=5,
                   columns=["config_id", "step_time_ms"])
    v = rows["step_time_ms"].astype(np.float64)
    order = np.lexsort((rows["config_id"], -np.where(np.isfinite(v), v, -np.inf)))[:5]
    assert t["config_id"].to_pylist() == rows["config_id"][order].tolist()


@pytest.mark.parametrize("by", ["step_time_ms", "mfu_percent", "used_gpus"])
@pytest.mark.parametrize("descending", [True, False])
@pytest.mark.parametrize("k", [1, 7, 300, 10_000])
@pytest.mark.parametrize("f", range(len(CUBE_FILTERS)))
def test_top_rows_bounded_by_the_cube_equal_a_numpy_sort(cubed, rows, by, descending, k, f):
    """With a cube, the row query carries the cube's bound and axis ranges; the
    rows are still exactly the k best under the filter (ties by config_id)."""
    filters = CUBE_FILTERS[f]
    if by not in cubed.source("dash").cube.values:
        pytest.skip(f"{by} is not a value of the test dataset's cube")
    cubed.log.clear()
    t = q.top_rows(cubed, "dash", by, descending=descending, k=k, filters=filters,
                   columns=["config_id", by])
    keep = cube_filter_mask(rows, filters)
    v = rows[by].astype(np.float64)
    keep &= np.isfinite(v)
    sign = -1.0 if descending else 1.0
    order = np.lexsort((rows["config_id"][keep], sign * v[keep]))[:k]
    assert t["config_id"].to_pylist() == rows["config_id"][keep][order].tolist()
    bounded = f'"{by}" {">=" if descending else "<="} ?' in cubed.log[-1]
    if k <= 7:  # every filter here keeps more than 7 of the cube's groups
        assert bounded, cubed.log[-3:]
    if k > len(rows["config_id"]):  # more than there are groups: no bound
        assert not bounded and "cube0" in cubed.log[-2], cubed.log[-3:]


def test_scatter_is_a_repeatable_sample_under_the_filter(catalog, rows):
    f = q.Filters(where="valid_layout")
    a = q.scatter(catalog, "dash", "step_time_ms", "mfu_percent", "regime", f, points=50)
    b = q.scatter(catalog, "dash", "step_time_ms", "mfu_percent", "regime", f, points=50)
    assert a.equals(b) and a.num_rows == 50
    valid = set(rows["config_id"][rows["valid_layout"]].tolist())
    assert set(a["config_id"].to_pylist()) <= valid


@pytest.mark.parametrize("f", range(len(CUBE_FILTERS)))
@pytest.mark.parametrize("data", ["dash", "runs"])
def test_scatter_with_a_cube_is_the_same_sample(request, cubed, rows, data, f):
    """With a cube, the scatter reads fewer rows: under a filter on the cube's axes,
    it hashes the ids of the groups with the smallest hashes (from the cube) and
    reads the chosen rows by position (no query on the rows); else it drops rows
    by a hash bound first.  Either way the sample is the filtered rows with the
    smallest hashes (computed here without it), with their own values."""
    filters = CUBE_FILTERS[f]
    if data == "runs":
        path, rows = request.getfixturevalue("runs")
        cubed = logged_catalog(path)
    keep = cube_filter_mask(rows, filters)
    points = max(1, int(keep.sum()) // 10)
    cubed.log.clear()
    try:
        got = q.scatter(cubed, data, "step_time_ms", "mfu_percent", "regime", filters,
                        points=points)
        log = list(cubed.log)
    finally:
        if data == "runs":
            cubed.close()
    by_category = set(filters.choices) & {"regime", "valid_layout"}
    if by_category:
        assert "hash(\"config_id\") < ?" in log[-1], log
    else:
        assert not any("FROM ds0" in sql for sql in log), log
    import duckdb

    ids = rows["config_id"][keep]
    hashes = duckdb.sql("SELECT i, hash(i) AS h FROM (SELECT unnest(?::BIGINT[]) AS i)",
                        params=[ids.tolist()]).fetchnumpy()
    want = hashes["i"][np.lexsort((hashes["i"], hashes["h"]))][:points]
    assert got["config_id"].to_pylist() == want.tolist()
    at = {i: k for k, i in enumerate(rows["config_id"].tolist())}
    k = [at[i] for i in want.tolist()]
    for c in ("step_time_ms", "mfu_percent"):
        np.testing.assert_array_equal(got[c].to_numpy(), rows[c][k])
    assert got["regime"].to_pylist() == rows["regime"][k].tolist()
    assert got.column_names == ["step_time_ms", "mfu_percent", "regime", "config_id"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    """The test sweep in parts of odd sizes and row groups of 15: the cube's runs of
    consecutive ids (2 rows, one per micro batch) straddle row groups and parts."""
    text = (SPECS / "dashboard.toml").read_text().replace(
        "rows_per_file = 200", "rows_per_file = 77\nrow_group_size = 15")
    path = tmp_path_factory.mktemp("runs") / "runs"
    sweep(parse_spec(text, "runs"), path, chunk_size=33)  # parts of 99 rows
    t = ds.dataset(path, format="parquet").to_table()
    cols = {c: t.column(c).combine_chunks() for c in t.column_names}
    cols = {c: (a.dictionary_decode() if hasattr(a, "dictionary_decode") else a).to_numpy(
        zero_copy_only=False) for c, a in cols.items()}
    return path, cols


def logged_catalog(path: Path) -> q.Catalog:
    """A catalog with a cube for any size (axes up to half the rows) that keeps the SQL
    of every query it runs."""
    c = q.Catalog([path], cube_min_rows=0, cube_shrink=2)
    c.log = []
    query = c.query

    def logged(sql, params=()):
        c.log.append(sql)
        return query(sql, params)

    c.query = logged
    return c


def test_id_runs_are_where_the_parts_put_each_id(runs):
    path, cols = runs
    c = logged_catalog(path)
    try:
        src = c.source("runs")
        ids = src.cube.ids
        assert ids is not None and len(src.files) >= 4
        assert any(o % 2 for o in ids.offsets.values())  # a run straddles two parts
        for f in src.files:
            t = pq.read_table(f, columns=["config_id"])["config_id"].to_numpy()
            assert ids.offsets[f] == t[0] and (t == t[0] + np.arange(len(t))).all()
            assert sum(ids.row_groups[f]) == len(t) and max(ids.row_groups[f]) == 15
    finally:
        c.close()


@pytest.fixture(scope="module")
def scrambled(runs, tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    """The runs dataset with random step times and throughputs that trade off (the
    throughput about the step time, so the front is long): few distinct values (ties
    within and across groups), NaN in either."""
    path, cols = runs
    rng = np.random.default_rng(11)
    out = tmp_path_factory.mktemp("scrambled") / "runs"
    out.mkdir()
    (out / "_jaxmodel.json").write_text((path / "_jaxmodel.json").read_text())
    cols = dict(cols)
    n = len(cols["config_id"])
    step = rng.integers(1, 40, n)
    for c, v in (("step_time_ms", step), ("throughput_tokens_s", step + rng.integers(-4, 5, n))):
        v = v.astype(np.float32)
        v[rng.random(n) < 0.04] = np.nan
        cols[c] = v
    at = 0
    for part in sorted(path.glob("part-*.parquet")):
        t = pq.read_table(part)
        for c in ("step_time_ms", "throughput_tokens_s"):
            i = t.schema.get_field_index(c)
            t = t.set_column(i, t.schema.field(i), pa.array(cols[c][at:at + t.num_rows]))
        pq.write_table(t, out / part.name, row_group_size=15)
        at += t.num_rows
    return out, cols


@pytest.fixture(scope="module")
def cubed_catalogs():
    """``logged_catalog`` of each dataset path, built once for the module (building
    the cube is most of a catalog's cost) and closed after it; each use starts an
    empty log."""
    built: dict[Path, q.Catalog] = {}

    def catalog(path: Path) -> q.Catalog:
        if path not in built:
            built[path] = logged_catalog(path)
        built[path].log.clear()
        return built[path]

    yield catalog
    for c in built.values():
        c.close()


RUNS_FILTERS = CUBE_FILTERS + [
    q.Filters(where="num_gpus == 8 or link_bandwidth_gb_s >= 800"),
    q.Filters(where="num_gpus > 1000"),  # no row
]


@pytest.mark.parametrize("x, y, minimize_x, minimize_y", [
    ("step_time_ms", "throughput_tokens_s", True, False),
    ("mfu_percent", "step_time_ms", False, True),
    ("throughput_tokens_s", "used_gpus", False, True),
    ("comm_fraction_percent", "mfu_percent", True, True),
    ("used_gpus", "data_parallel", True, False),  # integers: ties across groups
    ("tokens_per_step", "idle_gpus", False, True),
])
@pytest.mark.parametrize("f", range(len(RUNS_FILTERS)))
@pytest.mark.parametrize("data", ["runs", "scrambled"])
def test_pareto_from_the_cube_equals_a_brute_force_front(request, data, x, y, minimize_x,
                                                          minimize_y, f, monkeypatch,
                                                          cubed_catalogs):
    """With id runs, the Pareto view reads the cube, then a few groups' rows by
    position (no query on the rows); where the filter names a category it scans the
    rows.  Either way the front is the brute-force one, with its own values.  (The
    cube path is taken here however many groups it keeps.)"""
    monkeypatch.setattr(q, "PARETO_CUBE_SHARE", 1.0)
    path, cols = request.getfixturevalue(data)
    filters = RUNS_FILTERS[f]
    c = cubed_catalogs(path)
    if {x, y} - set(c.source("runs").cube.values):
        pytest.skip(f"{x} or {y} is not a value of the test dataset's cube")
    keep = cube_filter_mask(cols, filters)
    if not keep.any():
        with pytest.raises(q.DashboardError, match="no rows match the filters"):
            q.pareto(c, "runs", x, y, minimize_x=minimize_x, minimize_y=minimize_y,
                     filters=filters)
        return
    t = q.pareto(c, "runs", x, y, minimize_x=minimize_x, minimize_y=minimize_y,
                 filters=filters)
    scanned = [s for s in c.log if "FROM ds0" in s]
    sx, sy = (1 if minimize_x else -1), (1 if minimize_y else -1)
    want = brute_front(sx * cols[x][keep].astype(np.float64),
                       sy * cols[y][keep].astype(np.float64), cols["config_id"][keep])
    assert sorted(t["config_id"].to_pylist()) == want
    at = {i: k for k, i in enumerate(cols["config_id"].tolist())}
    for i, gx, gy in zip(t["config_id"].to_pylist(), t["x"].to_pylist(), t["y"].to_pylist(),
                         strict=True):
        assert (gx, gy) == (float(cols[x][at[i]]), float(cols[y][at[i]]))
    assert t["x"].to_pylist() == sorted(t["x"].to_pylist(), reverse=not minimize_x)
    by_category = bool(filters.choices) and set(filters.choices) & {"regime", "valid_layout"}
    assert bool(scanned) == bool(by_category), c.log


def test_ranges_concatenate_each_run_of_positions():
    rng = np.random.default_rng(5)
    for _ in range(50):
        s = rng.integers(0, 30, rng.integers(0, 6))
        e = s + rng.integers(-2, 5, len(s))
        want = [i for a, b in zip(s, e, strict=True) for i in range(a, b)]
        assert q._ranges(s, e).tolist() == want


def test_parts_out_of_id_order_get_no_id_runs_and_the_same_front(runs, tmp_path):
    """A part whose rows are not in id order (here: reversed) turns the runs off; the
    view then scans the rows, and the front is the same."""
    path, cols = runs
    import shutil

    copy = tmp_path / "runs"
    shutil.copytree(path, copy)
    part = sorted(copy.glob("part-*.parquet"))[3]
    t = pq.read_table(part)
    pq.write_table(t.take(np.arange(t.num_rows)[::-1]), part)
    fronts = []
    for p in (path, copy):
        c = logged_catalog(p)
        try:
            assert (c.source("runs").cube.ids is None) == (p == copy)
            fronts.append(q.pareto(c, "runs", "step_time_ms", "throughput_tokens_s",
                                   minimize_y=False))
            assert any("FROM ds0" in s for s in c.log) == (p == copy)
        finally:
            c.close()
    assert fronts[0].equals(fronts[1]) and fronts[0].num_rows >= 1


def test_export_rows_are_the_filtered_rows(catalog, rows):
    t = q.export_rows(catalog, "dash", ["config_id", "mfu_percent"],
                      q.Filters(where="mfu_percent > 90"))
    assert t["config_id"].to_pylist() == rows["config_id"][
        rows["mfu_percent"] > 90].tolist()


@pytest.mark.parametrize("call, message", [
    (lambda c: q.grid(c, "dash", "link_bandwidth", "num_gpus", "mfu_percent"),
     "x: no column 'link_bandwidth' in dataset 'dash' (did you mean 'link_bandwidth_gb_s'?)"),
    (lambda c: q.grid(c, "dash", 'num_gpus" from x; --', "micro_batch", "mfu_percent"),
     "x: no column"),
    (lambda c: q.grid(c, "dash", "num_gpus", "micro_batch", "mfu_percent", "sum"),
     "aggregation: got 'sum'; allowed: max, min, mean, count"),
    (lambda c: q.grid(c, "dash", "num_gpus", "num_gpus", "mfu_percent"), "x and y are both"),
    (lambda c: q.grid(c, "dash", "num_gpus", "micro_batch", "regime"), "value: column 'regime'"),
    (lambda c: q.count_rows(c, "../etc", q.Filters()), "dataset: got '../etc'; allowed: dash"),
    (lambda c: q.count_rows(c, "dash", q.Filters(where="mfu_percent >")), "filter:"),
    (lambda c: q.count_rows(c, "dash", q.Filters(where="mfu_percnt > 1")),
     "filter: unknown column 'mfu_percnt' (did you mean 'mfu_percent'?)"),
    (lambda c: q.count_rows(c, "dash", q.Filters(where='bottleneck == "tp"')),
     "is not a value of bottleneck"),
    (lambda c: q.count_rows(c, "dash", q.Filters(where="1; DROP TABLE x")), "filter:"),
    (lambda c: q.count_rows(c, "dash", q.Filters(where="__import__('os')")), "filter:"),
    (lambda c: q.count_rows(c, "dash", q.Filters(ranges={"num_gpus": (64, 8)})),
     "range filter num_gpus"),
    (lambda c: q.count_rows(c, "dash", q.Filters(choices={"regime": ["fast"]})),
     "choice filter regime: got 'fast'"),
])
def test_bad_requests_are_one_line_errors(catalog, call, message):
    with pytest.raises(q.DashboardError) as e:
        call(catalog)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_only_jaxmodel_datasets_open(tmp_path, dataset):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.parquet").write_bytes(b"not parquet")
    (tmp_path / "file.txt").write_text("x")
    for path, message in ((tmp_path / "missing", "no such directory"),
                          (tmp_path / "file.txt", "not a directory"),
                          (tmp_path / "plain", "not a jaxmodel dataset")):
        with pytest.raises(q.DashboardError, match=message):
            q.Catalog([path])


def test_a_dataset_reads_only_its_own_parts(tmp_path, dataset):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    shutil.copytree(dataset, copy / "nested")  # another dataset below it is not read
    c = q.Catalog([copy])
    assert q.count_rows(c, "copy") == q.count_rows(q.Catalog([dataset]), "dash")


# --- one configuration --------------------------------------------------------


def test_breakdown_of_a_row_is_the_model_on_its_inputs(catalog, rows):
    src = catalog.source("dash")
    i = int(np.flatnonzero(rows["valid_layout"] & (rows["pipeline_parallel"] > 1))[0])
    row = q.row_by_id(catalog, "dash", int(rows["config_id"][i]))
    inputs = cfg.inputs_of_row(src, row)
    assert inputs["model_params_b"] == 13 and inputs["num_layers"] == 40  # the spec's base
    ev = cfg.evaluate(src.model, inputs)
    # (the dashboard answers one row on the host, in float64: issue 26)
    direct = jaxmodel.evaluate("seed", x64=True, **inputs)
    for _, col, ms in ev.terms:
        assert ms == pytest.approx(float(getattr(direct, col)), rel=1e-12)
        assert ms == pytest.approx(float(rows[col][i]), rel=1e-6)  # what the sweep wrote
    assert [c for _, c, _ in ev.terms] == [c for _, c in plot.shown_terms(src.model)]


def test_tornado_is_the_sensitivities_ranked(catalog):
    src = catalog.source("dash")
    inputs = cfg.inputs_of_row(src, q.top_rows(catalog, "dash", "step_time_ms", k=1,
                                               filters=q.Filters(where="valid_layout and "
                                                                 "pipeline_parallel == 2")
                                               ).to_pylist()[0])
    t = cfg.tornado(src.model, inputs, "step_time_ms")
    ref = plot.tornado_data(src.model, inputs, "step_time_ms")
    assert t.inputs == ref.inputs
    np.testing.assert_allclose(t.elasticities, ref.elasticities)


def test_tornado_past_its_time_limit_is_one_line(catalog):
    """A tornado that cannot finish in time says so in one line (issue 26): a click
    never holds the server; the sensitivities go on compiling in the background."""
    src = catalog.source("dash")
    inputs = cfg.inputs_of_row(src, q.top_rows(catalog, "dash", "step_time_ms", k=1
                                               ).to_pylist()[0])
    # an output and a precision no other test asks for: its program is not compiled yet
    with pytest.raises(q.DashboardError) as e:
        cfg.tornado(src.model, inputs, "tp_comm_ms", x64=True, seconds=0.0)
    assert str(e.value) == ("sensitivities: not done within 0 s (the model is still "
                            "compiling); ask again in a minute")


def test_what_if_values_are_checked_by_the_model_fields(catalog):
    model = catalog.source("dash").model
    with pytest.raises(q.DashboardError, match=r"num_gpus: got 0; allowed: a whole number"):
        cfg.check_inputs(model, {"num_gpus": "0"})
    with pytest.raises(q.DashboardError, match="tensor_parallel: empty"):
        cfg.check_inputs(model, {"tensor_parallel": ""})
    assert cfg.check_inputs(model, {"num_gpus": "128"})["num_gpus"] == 128.0


# --- HTTP -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(catalog):
    app = build_app(catalog)
    c = app.server.test_client()
    deps = c.get("/_dash-dependencies").get_json()
    return c, deps


def call(client, output: str, values: dict, changed: str):
    """POST one callback as the page does; unspecified inputs are None, patterns []."""
    c, deps = client
    dep = next(d for d in deps if output in d["output"])
    outs = dep["output"].strip(".").split("...")
    outputs = [{"id": o.rsplit(".", 1)[0], "property": o.rsplit(".", 1)[1]} for o in outs]

    def entry(spec):
        if spec["id"].startswith("{"):
            return []
        return {"id": spec["id"], "property": spec["property"],
                "value": values.get(spec["id"])}

    body = {"output": dep["output"], "outputs": outputs,
            "inputs": [entry(s) for s in dep["inputs"]],
            "state": [entry(s) for s in dep["state"]], "changedPropIds": [changed]}
    r = c.post("/_dash-update-component", json=body)
    assert r.status_code == 200, r.data[:300]
    return r.get_json()["response"]


VIEW = {"dataset": "dash", "kind": "heatmap", "x": "link_bandwidth_gb_s", "y": "num_gpus",
        "value": "mfu_percent", "agg": "max", "where": ""}


def plotly_array(value) -> np.ndarray:
    """A trace's array as Plotly sends it: a list, or a typed array
    ``{"dtype", "bdata" (base64), "shape"}`` (decoded here by hand)."""
    if isinstance(value, dict):
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        shape = [int(n) for n in str(value.get("shape", len(flat))).split(",")]
        return flat.reshape(shape)
    return np.asarray([[np.nan if v is None else v for v in row] for row in value], float)


def test_http_view_answers_with_the_grid(client, catalog):
    resp = call(client, "view-graph.figure", VIEW, "x.value")
    z = plotly_array(resp["view-graph"]["figure"]["data"][0]["z"])
    g = q.grid(catalog, "dash", "link_bandwidth_gb_s", "num_gpus", "mfu_percent", "max")
    np.testing.assert_array_equal(z, g.cells[0])  # NaN (an empty cell) where the grid has NaN


@pytest.mark.parametrize("color, facet", [("regime", None), ("mfu_percent", None),
                                          (None, None), ("regime", "tensor_parallel"),
                                          ("mfu_percent", "micro_batch")])
def test_http_scatter_sends_the_sampled_rows_one_trace_per_category(client, catalog, color,
                                                                    facet):
    """The scatter's figure holds exactly the sampled rows: colour by a category
    gives one trace per category (its name and colour, and only its rows), by a
    number one trace coloured by the values (one scale for every panel), by nothing
    one plain trace; a facet puts each value's rows in its own panel, in order; each
    point's customdata is its row's config_id (what a click opens)."""
    view = {**VIEW, "kind": "scatter", "x": "step_time_ms", "y": "throughput_tokens_s",
            "value": color, "facet": facet,
            "where": "tensor_parallel * pipeline_parallel >= 4"}
    resp = call(client, "view-graph.figure", view, "kind.value")
    fig = resp["view-graph"]["figure"]
    t = q.scatter(catalog, "dash", "step_time_ms", "throughput_tokens_s", color,
                  q.Filters(where=view["where"]), facet=facet)
    want = {i: k for k, i in enumerate(t["config_id"].to_pylist())}
    panels = sorted(set(t[facet].to_pylist())) if facet else [None]
    seen, scales = [], set()
    for tr in fig["data"]:
        ids = plotly_array(tr["customdata"]).ravel().astype(np.int64).tolist()
        k = [want[i] for i in ids]
        np.testing.assert_array_equal(plotly_array(tr["x"]).ravel(),
                                      t["step_time_ms"].to_numpy()[k])
        np.testing.assert_array_equal(plotly_array(tr["y"]).ravel(),
                                      t["throughput_tokens_s"].to_numpy()[k])
        panel = int(tr.get("xaxis", "x")[1:] or 1) - 1
        if facet:
            assert {t[facet][j].as_py() for j in k} == {panels[panel]}
            title = fig["layout"]["annotations"][panel]["text"]
            assert title == f"{facet} = {panels[panel]}"
        if color == "regime":
            assert {t["regime"][j].as_py() for j in k} == {tr["name"]}
            assert tr["marker"]["color"] == plot._CATEGORY_COLORS[tr["name"]]
        elif color:
            np.testing.assert_array_equal(plotly_array(tr["marker"]["color"]).ravel(),
                                          t[color].to_numpy()[k])
            scales.add((tr["marker"]["cmin"], tr["marker"]["cmax"]))
        seen += ids
    assert sorted(seen) == sorted(want) and len(want) > 10
    # Regression: the axes are the rows' range with Plotly's own ticks (they had
    # ticks at every n-th sampled value, NaN among them, overlapping); log here, as
    # step times and throughputs span over 20x.
    axes = {k: v for k, v in fig["layout"].items() if k.startswith(("xaxis", "yaxis"))}
    assert len(axes) == 2 * len(panels)
    for name, axis in axes.items():  # later panels' axes match the first panel's
        assert "tickvals" not in axis, (name, axis)
        assert axis.get("type") == "log" or axis.get("matches") == name[0], (name, axis)
    if color == "mfu_percent":
        finite = t[color].to_numpy()[np.isfinite(t[color].to_numpy())]
        assert scales == {(float(finite.min()), float(finite.max()))}
    if color == "regime":
        names = [tr["name"] for tr in fig["data"] if tr["showlegend"]]
        assert sorted(names) == sorted(set(t["regime"].to_pylist()))  # one legend entry each
    elif not facet:
        assert len(fig["data"]) == 1


@pytest.mark.parametrize("agg, facet", [("max", "micro_batch"), ("count", None),
                                        ("count", "tensor_parallel")])
def test_http_regime_map_takes_the_facet_and_the_rule(client, catalog, agg, facet):
    """The regime map's aggregation picks the rule (max: the best row's category;
    count: the most frequent), its facet one map per value; what the page gets
    is the query's answer, category codes in the colour scale's order."""
    view = {**VIEW, "kind": "regimes", "value": "regime", "agg": agg, "facet": facet}
    resp = call(client, "view-graph.figure", view, "kind.value")
    fig = resp["view-graph"]["figure"]
    c = q.regimes(catalog, "dash", VIEW["x"], VIEW["y"], "regime", "mfu_percent",
                  rule=q.RULES[agg], facet=facet)
    cats = catalog.source("dash").columns["regime"].categories
    assert len(fig["data"]) == max(1, len(c.facets))
    for f, tr in enumerate(fig["data"]):
        got = [[None if v is None else cats[int(v)] for v in row] for row in tr["z"]]
        want = [[v or None for v in row] for row in c.names[f]]
        assert got == want
    meta = resp["view-meta"]["data"]
    assert meta["facet"] == facet and meta["facets"] == list(c.facets)


def test_http_regime_map_refuses_a_mean_in_one_line(client):
    resp = call(client, "view-graph.figure", {**VIEW, "kind": "regimes", "agg": "mean"},
                "agg.value")
    errors = [v for k, v in resp.items() if k == "errors"][0]["data"]
    assert errors["view"].startswith("aggregation: got 'mean' for a regime map; allowed: max")
    assert "\n" not in errors["view"]


@pytest.mark.parametrize("change, message", [
    ({"where": "mfu_percent >"}, "filter: "),
    ({"where": "os.system('x')"}, "filter: "),
    ({"where": "mfu_percent > 1; select 1"}, "filter: "),
    ({"x": "nope"}, "x: no column 'nope'"),
    ({"value": "x\" FROM read_csv('/etc/passwd') --"}, "value: no column"),
    ({"dataset": "/etc"}, "dataset: got '/etc'; allowed: dash, parts"),
    ({"dataset": "../dash"}, "dataset: got '../dash'"),
    ({"kind": "pie"}, "view: got 'pie'"),
])
def test_http_bad_requests_answer_one_line_in_the_page(client, change, message):
    resp = call(client, "view-graph.figure", {**VIEW, **change}, "where.value")
    errors = [v for k, v in resp.items() if k == "errors"][0]["data"]
    assert message in errors["view"]
    assert "\n" not in errors["view"] and "Traceback" not in json.dumps(resp)
    shown = resp["view-graph"]["figure"]["layout"]["annotations"][0]["text"]
    assert shown == errors["view"]


@pytest.mark.parametrize("path", [
    "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/assets/../../../etc/passwd",
    "/_dash-component-suites/dash/../../../../etc/passwd",
    "/_dash-component-suites/plotly/package_data/../../../../../../etc/passwd",
    "/_dash-component-suites/jaxmodel/dashboard/data.py", "/_dash-component-suites/os/x.js",
    "/dash/part-p0000-c000000000000.parquet", "/_jaxmodel.json",
])
def test_http_serves_no_file_outside_its_own_bundles(client, path, capsys):
    """Unknown paths get the app's page (Dash routes every path to it) or a 404."""
    c, _ = client
    r = c.get(path)
    page = b'id="react-entry-point"' in r.data
    assert (r.status_code == 200 and page) or r.status_code in (400, 404), (path, r.status_code)
    for leaked in (b"root:", b"PAR1", b"DashboardError", b'"spec"'):
        assert leaked not in r.data
    assert "Traceback" not in capsys.readouterr().err


# --- command line ----------------------------------------------------------------


def test_dashboard_command_errors_are_one_line(tmp_path):
    result = runner.invoke(cli_app, ["dashboard", str(tmp_path / "missing"), "--no-browser"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "no such directory" in result.stderr


def test_report_refuses_other_extensions_and_bad_datasets(tmp_path, dataset):
    r = runner.invoke(cli_app, ["report", str(dataset), "-o", str(tmp_path / "r.pdf")])
    assert r.exit_code == 2 and "must end in .html" in r.stderr
    r = runner.invoke(cli_app, ["report", str(tmp_path), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 2 and "not a jaxmodel dataset" in r.stderr
    assert not (tmp_path / "r.html").exists()


def test_report_embeds_aggregates_not_rows(tmp_path, dataset):
    out = tmp_path / "report.html"
    r = runner.invoke(cli_app, ["report", str(dataset), "-o", str(out)])
    assert r.exit_code == 0, r.output
    from plotly.offline import get_plotlyjs

    text = out.read_text()
    assert text.count(get_plotlyjs()) == 1  # plotly.js inline, once
    rest = text.replace(get_plotlyjs(), "")
    assert "<script src=" not in rest and "http" not in rest.replace("http-equiv", "")
    assert rest.count("Plotly.newPlot") >= 4
    assert len(rest) < 400_000  # aggregates of a 576-row sweep, not its rows
    # Issue 27 item 14: the mode open() gives (0644 under umask 022), as the Parquet
    # parts have, not mkstemp's 0600.
    part = next(Path(dataset).glob("*.parquet"))
    assert out.stat().st_mode & 0o777 == part.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


def test_dashboard_console_script_serves_and_warns_off_localhost(dataset):
    """The installed command in a subprocess: the address line, the page, the warning
    for a non-local --host (127.0.0.2 is still this machine), a busy port in one line."""
    import socket
    import subprocess
    import sys
    import urllib.request

    exe = Path(sys.executable).parent / "jaxmodel"
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(exe), "dashboard", str(dataset), "--host", "127.0.0.2",
                             "--port", str(port), "--no-browser"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("jaxmodel dashboard: dash at http://127.0.0.2:"), line
        page = urllib.request.urlopen(f"http://127.0.0.2:{port}/", timeout=30).read()
        assert b"jaxmodel dashboard" in page
        busy = subprocess.run([str(exe), "dashboard", str(dataset), "--host", "127.0.0.2",
                               "--port", str(port), "--no-browser"], capture_output=True,
                              text=True, timeout=120)
        assert busy.returncode == 2
        assert busy.stderr.splitlines()[1:] == [
            f"error: --port {port} / --host 127.0.0.2: cannot listen there (address already "
            "in use); choose another --port or --host"]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "warning: --host 127.0.0.2 serves the datasets" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("reduce", ['top_k = 10\nby = "mfu_percent"',
                                    'by = "mfu_percent"\ngroup_by = ["num_gpus"]',
                                    'pareto = ["used_gpus", "step_time_ms"]'])
def test_reduced_datasets_open_and_aggregate(tmp_path, reduce):
    text = (SPECS / "dashboard.toml").read_text().replace(
        "[output]", f"[reduce]\n{reduce}\n\n[output]")
    path = tmp_path / "reduced"
    sweep(parse_spec(text, "reduced"), path)
    c = q.Catalog([path])
    t = ds.dataset(path, format="parquet").to_table()
    g = q.grid(c, "reduced", "num_gpus", "tensor_parallel", "config_id", "count")
    assert int(np.nansum(g.cells)) == t.num_rows == q.count_rows(c, "reduced")
    c.close()


def test_export_downloads_the_filtered_rows_as_csv_and_parquet(client, rows):
    import base64
    import io

    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    where = "valid_layout and mfu_percent > 90"
    want = rows["config_id"][numpy_mask(rows, where)].tolist()
    for button, read in (("export-csv", lambda b: pcsv.read_csv(io.BytesIO(b))),
                         ("export-parquet", lambda b: pq.read_table(io.BytesIO(b)))):
        resp = call(client, "download.data", {"dataset": "dash", "where": where,
                                              "value": "mfu_percent", button: 1},
                    f"{button}.n_clicks")
        sent = resp["download"]["data"]
        assert sent["filename"] == f"dash-rows.{button.split('-')[1]}"
        table = read(base64.b64decode(sent["content"]))
        assert table["config_id"].to_pylist() == want
        assert {"link_bandwidth_gb_s", "num_gpus", "mfu_percent"} <= set(table.column_names)


def test_slider_marks_share_one_number_format():
    """Issue 27 item 13: a geomspace level (1381.3) reads 1,381 beside 3,200."""
    from jaxmodel.dashboard.app import _fmt

    assert [_fmt(v) for v in (1381.3, 3200.0, 25.0, 12.5, 0.8)] == [
        "1,381", "3,200", "25", "12.5", "0.8"]
