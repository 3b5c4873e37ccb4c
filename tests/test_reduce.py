"""Device reductions against exhaustive numpy computations over the same rows.

The expected results are computed here from the documented order (metric
best first, then config_id ascending; NaN and masked rows never win), by
sorting or by brute-force dominance, not by the reducers' own algorithms.
"""

import itertools

import jax
import numpy as np
import pytest

import jaxmodel.reduce
from jaxmodel.errors import SpecError
from jaxmodel.precision import computing
from jaxmodel.reduce import GroupBest, Pareto, TopK, jitted, merge_stacked, merge_states


@pytest.fixture(autouse=True)
def short_sorts(monkeypatch):
    """Take TopK's top_k pre-selection path for chunks longer than 16 rows too
    (by default only chunks over 8,192 rows take it), so both paths are tested."""
    monkeypatch.setattr(jaxmodel.reduce, "_SORT_BELOW", 16)


def make_rows(n, seed, metric_dtype=np.float32):
    """Random rows with many ties (small integer-valued metrics), NaNs and masks."""
    rng = np.random.default_rng(seed)
    rows = {
        "config_id": rng.permutation(n).astype(np.int64) + 10,
        "a": rng.integers(0, 8, n).astype(metric_dtype),
        "b": rng.integers(0, 8, n).astype(metric_dtype),
        "g": rng.integers(0, 5, n).astype(np.int64),
        "flag": rng.random(n) < 0.5,
    }
    if np.issubdtype(metric_dtype, np.floating):
        rows["a"][rng.random(n) < 0.1] = np.nan
        rows["b"][rng.random(n) < 0.1] = np.nan
        rows["a"][rows["a"] == 0] = -0.0  # -0.0 must tie with 0.0
    mask = rng.random(n) < 0.9
    return rows, mask


def good(rows, mask, *names):
    ok = mask.copy()
    for name in names:
        v = rows[name]
        if np.issubdtype(v.dtype, np.floating):
            ok &= ~np.isnan(v)
    return ok


def ref_top_k(rows, mask, by, k, maximize):
    ok = good(rows, mask, by)
    idx = np.flatnonzero(ok)
    key = rows[by][idx].astype(np.float64) * (-1 if maximize else 1)
    order = idx[np.lexsort((rows["config_id"][idx], key))]
    return order[:k]


def ref_group_best(rows, mask, by, gid, num_groups, maximize):
    ok = good(rows, mask, by)
    out = []
    for g in range(num_groups):
        idx = np.flatnonzero(ok & (gid == g))
        if len(idx):
            key = rows[by][idx].astype(np.float64) * (-1 if maximize else 1)
            out.append((g, idx[np.lexsort((rows["config_id"][idx], key))][0]))
    return out


def trade_off(rows, seed, same_direction=True):
    """b trades off against a (a front of several points, with exact ties)."""
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 3, len(rows["a"]))
    a = np.nan_to_num(rows["a"], nan=3)
    b = ((7 - a if same_direction else a) + noise).astype(rows["a"].dtype)
    b[np.isnan(rows["b"])] = np.nan
    return {**rows, "b": b}


def ref_pareto(rows, mask, x, y, minimize_x, minimize_y):
    ok = good(rows, mask, x, y)
    idx = np.flatnonzero(ok)
    kx = rows[x][idx].astype(np.float64) * (1 if minimize_x else -1)
    ky = rows[y][idx].astype(np.float64) * (1 if minimize_y else -1)
    cid = rows["config_id"][idx]
    front = []
    for i in range(len(idx)):
        dominated = np.any((kx <= kx[i]) & (ky <= ky[i]) & ((kx < kx[i]) | (ky < ky[i])))
        duplicate_first = np.any((kx == kx[i]) & (ky == ky[i]) & (cid < cid[i]))
        if not dominated and not duplicate_first:
            front.append(i)
    front = np.array(front, dtype=int)
    order = front[np.lexsort((ky[front], kx[front]))]
    return idx[order]


def columns_of(rows):
    return {k: v.dtype for k, v in rows.items()}


def run(reducer, rows, mask, chunk, gid=None, num_groups=1):
    """Fold the rows in chunks of ``chunk`` (last one padded) into one state."""
    n = len(mask)
    update = jitted(reducer, "update")
    with computing():
        state = reducer.init(columns_of(rows), num_groups)
        for start in range(0, n, chunk):
            sl = slice(start, start + chunk)
            pad = chunk - len(mask[sl])
            cols = {k: np.concatenate([v[sl], np.repeat(v[:1], pad)]) for k, v in rows.items()}
            m = np.concatenate([mask[sl], np.zeros(pad, bool)])
            g = None if gid is None else np.concatenate([gid[sl], np.zeros(pad, np.int64)])
            state = update(state, cols, m, g)
    return state


def assert_rows_equal(got, rows, idx):
    for name, v in rows.items():
        np.testing.assert_array_equal(got[name], v[idx], err_msg=name)


@pytest.mark.parametrize("dtype,k,maximize", [
    (np.float32, 1, True), (np.float32, 7, False), (np.float64, 7, True),
    (np.float64, 500, False), (np.int64, 1, False), (np.int64, 500, True),
])
def test_top_k_equals_numpy(dtype, k, maximize):
    rows, mask = make_rows(300, seed=k + maximize, metric_dtype=dtype)
    r = TopK("a", k, maximize)
    expected = ref_top_k(rows, mask, "a", k, maximize)
    for chunk in (300, 37):
        assert_rows_equal(r.rows(run(r, rows, mask, chunk)), rows, expected)


@pytest.mark.slow
@pytest.mark.parametrize("maximize", [True, False])
def test_top_k_with_infinities_and_long_chunks(maximize):
    # Long chunks take the top_k pre-selection path; +-inf ties must still
    # be broken by config_id, and NaN rows must not crowd out -inf rows.
    rows, mask = make_rows(600, seed=7)
    rng = np.random.default_rng(8)
    rows["a"][rng.random(600) < 0.3] = np.inf
    rows["a"][rng.random(600) < 0.3] = -np.inf
    for k in (3, 40):
        r = TopK("a", k, maximize)
        expected = ref_top_k(rows, mask, "a", k, maximize)
        for chunk in (600, 256):
            assert_rows_equal(r.rows(run(r, rows, mask, chunk)), rows, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_top_k_continuous_metric(dtype):
    # Few ties: the top_k pre-selection keeps the chunk's candidates.
    rows, mask = make_rows(3000, seed=9, metric_dtype=dtype)
    rng = np.random.default_rng(10)
    rows["a"] = np.where(np.isnan(rows["a"]), np.nan, rng.normal(size=3000)).astype(dtype)
    rows["a"][[7, 0, 3]] = np.nanmax(rows["a"])  # a three-way tie for the best
    for k, maximize in [(1, True), (10, False), (100, True)]:
        r = TopK("a", k, maximize)
        expected = ref_top_k(rows, mask, "a", k, maximize)
        assert_rows_equal(r.rows(run(r, rows, mask, 1024)), rows, expected)


@pytest.mark.parametrize("case", ["sub_float32_differences", "sparse_config_ids"])
def test_top_k_falls_back_to_the_exact_sort(case):
    # Many rows tie once rounded to float32 but differ in float64, or tie
    # exactly with config ids too far apart for float32: TopK sorts the chunk.
    rng = np.random.default_rng(4)
    n = 500
    rows = {"config_id": rng.permutation(n).astype(np.int64),
            "a": 1.0 + rng.integers(0, 50, n) * 1e-12}
    if case == "sparse_config_ids":
        rows["config_id"] = rows["config_id"] * (1 << 30) + 5
        rows["a"] = np.round(rows["a"])
    mask = rng.random(n) < 0.9
    for k, maximize in [(3, True), (20, False)]:
        r = TopK("a", k, maximize)
        expected = ref_top_k(rows, mask, "a", k, maximize)
        assert_rows_equal(r.rows(run(r, rows, mask, 128)), rows, expected)


def test_top_k_of_ten_thousand():
    # k at the bound, chunks long enough for the top_k pre-selection
    rows, mask = make_rows(50_000, seed=12)
    rng = np.random.default_rng(13)
    values = np.round(rng.normal(size=50_000), 2).astype(np.float32)  # ~600 distinct values
    rows["a"] = np.where(np.isnan(rows["a"]), np.nan, values)
    r = TopK("a", 10_000)
    expected = ref_top_k(rows, mask, "a", 10_000, True)
    assert_rows_equal(r.rows(run(r, rows, mask, 25_000)), rows, expected)


def test_top_k_over_blocks_equals_numpy(monkeypatch, row=64):
    # Chunks longer than the longest top_k row are cut into blocks (the last
    # padded), the blocks' tops topped again, twice over for 3,000 rows in
    # blocks of 64: the rows are still numpy's, ties and NaNs included.
    monkeypatch.setattr(jaxmodel.reduce, "_TOP_K_ROW", row)
    rows, mask = make_rows(3000, seed=21)
    rng = np.random.default_rng(22)
    rows["a"] = np.where(np.isnan(rows["a"]), np.nan,
                         np.round(rng.normal(size=3000), 1)).astype(np.float32)
    for k, maximize in [(1, True), (40, False)]:
        r = TopK("a", k, maximize)
        expected = ref_top_k(rows, mask, "a", k, maximize)
        for chunk in (3000, 1000):
            assert_rows_equal(r.rows(run(r, rows, mask, chunk)), rows, expected)


def test_top_k_of_a_long_chunk_hands_xla_no_top_k_over_a_million():
    # XLA:GPU's TopKSplitter rewrites a top_k over more than 2**20 elements,
    # and under jax 0.11.2 its output failed the HLO verifier on an H200 (a
    # 16M-row chunk of the 10^10 top-k sweep).  Every top_k in TopK's program
    # for a 2**21-row chunk must be over at most 2**20 elements.
    import re

    n = 1 << 21
    r = TopK("a", 100)
    cols = {"config_id": np.zeros(n, np.int64), "a": np.zeros(n, np.float32)}
    with computing():
        state = r.init(columns_of(cols))
        text = jax.jit(r.update).lower(state, cols, np.ones(n, bool)).as_text()
    lengths = [int(m) for m in re.findall(r"top_k[^\n]*?tensor<(?:\d+x)*(\d+)xf32>", text)]
    assert lengths, "no top_k in the program"
    assert max(lengths) <= 1 << 20, lengths


def test_top_k_by_bool_column():
    rows, mask = make_rows(100, seed=3)
    r = TopK("flag", 10, True)
    expected = ref_top_k(rows, mask, "flag", 10, True)
    assert_rows_equal(r.rows(run(r, rows, mask, 32)), rows, expected)


@pytest.mark.parametrize("maximize", [True, False])
def test_group_best_equals_numpy(maximize):
    rows, mask = make_rows(400, seed=5)
    gid = rows["g"]
    r = GroupBest("a", ("g",), maximize)
    expected = ref_group_best(rows, mask, "a", gid, 6, maximize)  # group 5 stays empty
    assert [g for g, _ in expected] == [0, 1, 2, 3, 4]
    for chunk in (400, 33):
        got = r.rows(run(r, rows, mask, chunk, gid=gid, num_groups=6))
        np.testing.assert_array_equal(got["group_id"], [g for g, _ in expected])
        assert_rows_equal(got, rows, np.array([i for _, i in expected]))


@pytest.mark.slow
@pytest.mark.parametrize("minimize_x,minimize_y", list(itertools.product([True, False], repeat=2)))
def test_pareto_equals_brute_force(minimize_x, minimize_y):
    rows, mask = make_rows(300, seed=11 + 2 * minimize_x + minimize_y)
    rows = trade_off(rows, 1, minimize_x == minimize_y)
    r = Pareto("a", "b", minimize_x, minimize_y, capacity=64)
    expected = ref_pareto(rows, mask, "a", "b", minimize_x, minimize_y)
    assert 2 <= len(expected) < 64
    for chunk in (300, 100, 41):
        state = run(r, rows, mask, chunk)
        assert not r.overflowed(state)
        assert_rows_equal(r.rows(state), rows, expected)


def test_pareto_continuous_front():
    # A front with many points: y = 1 / x on a grid, plus dominated noise.
    rng = np.random.default_rng(0)
    x = rng.permutation(np.linspace(1, 10, 200))
    rows = {"config_id": np.arange(400, dtype=np.int64),
            "x": np.concatenate([x, x + 0.5]), "y": np.concatenate([1 / x, 1 / x + 0.01])}
    mask = np.ones(400, bool)
    r = Pareto("x", "y", capacity=256)
    got = r.rows(run(r, rows, mask, 64))
    np.testing.assert_array_equal(got["config_id"], ref_pareto(rows, mask, "x", "y", True, True))
    assert len(got["config_id"]) == 200


def test_pareto_overflow_is_flagged():
    x = np.arange(50, dtype=np.float64)
    rows = {"config_id": np.arange(50, dtype=np.int64), "x": x, "y": -x}
    r = Pareto("x", "y", capacity=8)
    state = run(r, rows, np.ones(50, bool), 16)
    assert r.overflowed(state)
    np.testing.assert_array_equal(r.rows(state)["config_id"], np.arange(8))


def split_states(reducer, rows, mask, parts, gid=None, num_groups=1):
    """States of disjoint row subsets (as devices or processes would hold)."""
    n = len(mask)
    bounds = np.linspace(0, n, parts + 1).astype(int)
    states = []
    for lo, hi in itertools.pairwise(bounds):
        sub = {k: v[lo:hi] for k, v in rows.items()}
        g = None if gid is None else gid[lo:hi]
        states.append(run(reducer, sub, mask[lo:hi], 16, gid=g, num_groups=num_groups))
    return states


@pytest.mark.parametrize("reducer", [
    TopK("a", 9, True), TopK("b", 40, False), GroupBest("b", ("g",), False),
    Pareto("a", "b", True, False, capacity=32),
], ids=["top_k_max", "top_k_min", "group_best", "pareto"])
def test_merge_order_does_not_matter(reducer):
    rows, mask = make_rows(240, seed=21)
    rows = trade_off(rows, 2, same_direction=False)
    gid = rows["g"] if isinstance(reducer, GroupBest) else None
    whole = reducer.rows(run(reducer, rows, mask, 240, gid=gid, num_groups=5))
    assert len(whole["config_id"]) >= 3
    states = split_states(reducer, rows, mask, 4, gid=gid, num_groups=5)
    merge = jitted(reducer, "merge")
    orders = [[0, 1, 2, 3], [3, 1, 0, 2], [2, 0, 3, 1]]
    for order in orders:
        got = reducer.rows(merge_states(reducer, [states[i] for i in order]))
        for name in whole:
            np.testing.assert_array_equal(got[name], whole[name], err_msg=name)
    # a tree of merges, ((0 3) (1 2)), gives the same as a left fold
    with computing():
        tree = merge(merge(states[0], states[3]), merge(states[1], states[2]))
    for name, v in reducer.rows(tree).items():
        np.testing.assert_array_equal(v, whole[name], err_msg=name)
    # states stacked along a leading axis, as process_allgather returns them
    host = [jax.tree_util.tree_map(np.asarray, s) for s in states]
    stacked = jax.tree_util.tree_map(lambda *v: np.stack(v), *host)
    for name, v in reducer.rows(merge_stacked(reducer, stacked)).items():
        np.testing.assert_array_equal(v, whole[name], err_msg=name)


def test_update_compiles_once_for_many_chunks():
    rows, mask = make_rows(200, seed=2)
    r = TopK("a", 5)
    traces = []
    update = jax.jit(lambda s, c, m: (traces.append(1), r.update(s, c, m))[1])
    with computing():
        state = r.init(columns_of(rows))
        for start in range(0, 200, 40):
            cols = {k: v[start:start + 40] for k, v in rows.items()}
            state = update(state, cols, mask[start:start + 40])
    assert len(traces) == 1
    assert_rows_equal(r.rows(state), rows, ref_top_k(rows, mask, "a", 5, True))


def test_all_rows_masked_gives_no_rows():
    rows, _ = make_rows(50, seed=1)
    mask = np.zeros(50, bool)
    for r, g in [(TopK("a", 3), None), (GroupBest("a", ("g",)), rows["g"]),
                 (Pareto("a", "b", capacity=4), None)]:
        got = r.rows(run(r, rows, mask, 25, gid=g, num_groups=5))
        assert all(len(v) == 0 for v in got.values())


def test_bad_reducer_arguments():
    with pytest.raises(SpecError, match="k must be"):
        TopK("a", 0)
    with pytest.raises(SpecError, match="capacity"):
        Pareto("a", "b", capacity=0)
    with pytest.raises(SpecError, match="did you mean 'a'"), computing():
        TopK("aa", 3).init({"config_id": np.int64, "a": np.float32})
    with pytest.raises(SpecError, match="config_id"), computing():
        TopK("a", 3).init({"a": np.float32})
