"""The layout space people run (issue 25): uneven pipelines, every layout axis
through ``--vary``, tensor parallelism inside the NVLink domain, and no two
candidates that are the same plan."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import jaxmodel
from jaxmodel.cli import app
from jaxmodel.errors import SpecError
from jaxmodel.searching import search

runner = CliRunner()
REFINED = jaxmodel.get_model("refined")
# A toy dense model that fits anywhere: 12 layers, so p = 5 or 8 is uneven.
TOY = {**REFINED.defaults, "hidden_dim": 1024, "num_layers": 12, "num_heads": 8,
       "num_kv_heads": 8, "ffn_hidden_dim": 4096, "vocab_size": 1024, "seq_length": 1024,
       "gpu_memory_gb": 1e6, "num_gpus": 16}
TOY_MOE = {**TOY, "num_experts": 8, "experts_per_token": 2, "moe_ffn_hidden_dim": 1024,
           "num_gpus": 32}


def _plans(top, model=REFINED):
    """Each row's outputs as a tuple: two rows with equal outputs are one plan."""
    floats = [f.name for f in model.outputs if f.kind == "float"]
    return [tuple(np.round(float(top[n][i]), 9) for n in floats)
            for i in range(len(top["config_id"]))]


def test_uneven_pipeline_is_a_candidate_and_the_busiest_stage_sets_the_pace():
    result = search(REFINED, TOY, global_batch=16, top=3, vary={"pipeline_parallel": [8]},
                    pinned={"tensor_parallel": 2})
    assert len(result.top["config_id"]) and set(result.top["pipeline_parallel"]) == {8}
    row = {k: float(result.top[k][0]) for k in ("micro_batch", "gradient_accum_steps",
                                                "virtual_stages")}
    out = jaxmodel.evaluate(REFINED, **{**TOY, **row, "tensor_parallel": 2,
                                        "pipeline_parallel": 8})
    assert float(out.step_time_ms) == pytest.approx(float(result.top["step_time_ms"][0]),
                                                    rel=1e-5)
    # 12 layers on 8 stages: the busiest holds 2, as on 6 stages; 8 is not faster
    # in compute than 6, whose stages are all full.
    six = jaxmodel.evaluate(REFINED, **{**TOY, **row, "tensor_parallel": 2,
                                        "pipeline_parallel": 6, "num_gpus": 12})
    assert float(out.compute_time_ms) >= float(six.compute_time_ms) * 0.999


@pytest.mark.slow
def test_no_two_rows_are_the_same_plan_dense_and_moe():
    for values in (TOY, TOY_MOE):
        result = search(REFINED, values, global_batch=32, top=200)
        plans = _plans(result.top)
        assert len(plans) == len(set(plans)), values["num_experts"]
        top = result.top
        # virtual stages only with a pipeline; expert levers only with experts
        assert np.all(top["virtual_stages"][top["pipeline_parallel"] == 1] == 1)
        no_ep = top["expert_parallel"] == 1
        for lever in ("moe_overlap", "max_nodes_per_token", "moe_dispatcher"):
            assert np.all(top[lever][no_ep] == 0)
    # the MoE search tries the levers
    assert {0.0, 0.5} <= set(top["moe_overlap"].tolist())


def test_tensor_parallelism_stays_in_the_node_unless_asked():
    values = {**TOY, "gpus_per_node": 4}
    inside = search(REFINED, values, global_batch=16, top=500)
    assert inside.top["tensor_parallel"].max() == 4
    across = search(REFINED, values, global_batch=16, top=500, cross_node_tp=True)
    assert across.top["tensor_parallel"].max() == 8  # (8 heads: t = 16 cannot split them)
    assert across.candidates > inside.candidates


def test_vary_accepts_a_layout_axis_and_rejects_a_pinned_one():
    result = runner.invoke(app, ["best", "--model", "refined", "--llm", "llama2-7b",
                                 "--num-gpus", "64", "--gpu-memory-gb", "1000000",
                                 "--global-batch", "64", "--vary", "pipeline_parallel=2,4",
                                 "--top", "20", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert {r["pipeline_parallel"] for r in json.loads(result.output)["top"]} == {2, 4}
    with pytest.raises(SpecError, match="also pinned"):
        search(REFINED, TOY, global_batch=16, pinned={"pipeline_parallel": 2},
               vary={"pipeline_parallel": [2, 4]})


def test_a_pinned_p_that_fits_nothing_says_why_without_an_empty_bracket():
    result = runner.invoke(app, ["best", "--model", "seed", "--num-layers", "126",
                                 "--pipeline-parallel", "16"])
    assert result.exit_code != 0
    line = result.output.strip().splitlines()[-1]
    assert "()" not in line and "p | num_layers" in line and "no (t, p) pair" in line


def test_virtual_stages_that_split_the_layers_evenly_are_searched():
    # Llama 3 70B: 80 layers.  Besides v = 1, 2, 4, every v with p v dividing
    # 80 (Megatron-Bridge runs p = 8, v = 5: two layers a chunk); a v that
    # splits them unevenly only among the standard three.
    values = {**REFINED.defaults, **jaxmodel.presets.apply_presets(REFINED, llm="llama3-70b"),
              "num_gpus": 64}
    cand = REFINED.layout.candidates(values, 256)
    pairs = set(zip(cand["pipeline_parallel"].tolist(), cand["virtual_stages"].tolist(),
                    strict=True))
    assert {(8, v) for v in (1, 2, 4, 5, 10)} == {(p, v) for p, v in pairs if p == 8}
    assert {(16, v) for v in (1, 2, 4, 5)} == {(p, v) for p, v in pairs if p == 16}
    assert {(32, v) for v in (1, 2, 4)} == {(p, v) for p, v in pairs if p == 32}
    assert {v for p, v in pairs if p == 1} == {1}
    # + the embedding and output layer: 82 units, so p = 2 takes v = 41
    split = REFINED.layout.candidates({**values, "pipeline_split_embedding": 1}, 256)
    assert 41 in split["virtual_stages"][split["pipeline_parallel"] == 2]
    # a v the user asks for is taken as given
    pinned = REFINED.layout.candidates(values, 256, pinned={"virtual_stages": 3})
    assert set(pinned["virtual_stages"].tolist()) == {3}


def test_a_fractional_layout_option_is_pinned_at_its_value(monkeypatch):
    # `--moe-overlap 0.5` pinned the overlap at int(0.5) = 0.
    import jaxmodel.searching

    seen = {}

    def stop(model, values, **kwargs):
        seen.update(kwargs["pinned"])
        raise SpecError("stopped before the search")

    monkeypatch.setattr(jaxmodel.searching, "search", stop)
    result = runner.invoke(app, ["best", "--model", "refined", "--llm", "mixtral-8x7b",
                                 "--num-gpus", "64", "--moe-overlap", "0.5",
                                 "--tensor-parallel", "2"])
    assert "stopped before the search" in result.output
    assert seen == {"moe_overlap": 0.5, "tensor_parallel": 2}
    assert isinstance(seen["tensor_parallel"], int)


def test_cross_where_keeps_the_crossed_rows_a_rule_admits_in_order():
    from jaxmodel.models.layout import cross_where

    cand = {"t": np.array([1, 2, 4]), "p": np.array([1, 1, 2])}
    axes = {"v": np.array([1, 3]), "z": np.array([0, 1])}
    # Rows (t, p, v, z), the last axis fastest; the rule keeps t v <= 4.
    expected = [(t, p, v, z) for t, p in [(1, 1), (2, 1), (4, 2)]
                for v in (1, 3) for z in (0, 1) if t * v <= 4]
    for block_rows in (1, 4, 5, 1 << 20):  # a block of 1, 1, 1 and 3 rows of cand
        out = cross_where(cand, axes, lambda b: b["t"] * b["v"] <= 4, block_rows=block_rows)
        assert list(zip(*(out[k].tolist() for k in ("t", "p", "v", "z")), strict=True)) \
            == expected
    empty = cross_where({k: v[:0] for k, v in cand.items()}, axes, lambda b: b["t"] > 0)
    assert all(len(v) == 0 for v in empty.values()) and set(empty) == {"t", "p", "v", "z"}


def test_blockwise_candidates_equal_the_whole_cross(monkeypatch):
    # A search's candidates, crossed and cut a block at a time (issue 26), are
    # the whole cross cut once: same columns, rows, order and dtypes.
    import jaxmodel.models.layout as layout

    values = {**REFINED.defaults, **jaxmodel.presets.apply_presets(REFINED, llm="llama3-70b"),
              "num_gpus": 64}
    vary = {"recompute": [0, 1, 2], "virtual_stages": [1, 2, 3, 5]}
    whole = REFINED.layout.candidates(values, 256, vary=vary)
    monkeypatch.setattr(layout, "CROSS_BLOCK_ROWS", 200)
    blocks = REFINED.layout.candidates(values, 256, vary=vary)
    assert len(whole["tensor_parallel"]) > 1000 and list(blocks) == list(whole)
    for k, v in whole.items():
        assert blocks[k].dtype == v.dtype and np.array_equal(blocks[k], v), k


def _same_columns(got, want):
    assert list(got) == list(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and np.array_equal(got[k], v, equal_nan=True), k


@pytest.mark.parametrize("case", ["dense", "moe-idle", "llama-admissible"])
def test_crossed_candidates_expand_to_the_table(case):
    # The layouts and each layout's admitted combinations (what best hands the
    # device, issue 26) are the crossed-and-cut table: same rows, order,
    # columns and dtypes, so the same config_id for every candidate.
    values, batch, kw = {
        "dense": (TOY, 16, {"vary": {"recompute": [0, 1, 2], "virtual_stages": [1, 2, 3],
                                     "pipeline_schedule": [0, 1, 2]}}),
        "moe-idle": ({**TOY_MOE, "num_gpus": 30}, 32,
                     {"allow_idle": True, "vary": {"zero_stage": [0, 1, 3]},
                      "pinned": {"moe_dispatcher": 1}}),
        "llama-admissible": ({**REFINED.defaults, **jaxmodel.presets.apply_presets(
            REFINED, llm="llama3-70b"), "num_gpus": 64}, 256, {"vary": {"recompute": [0, 2]}}),
    }[case]
    crossed = REFINED.layout.crossed(values, batch, **kw)
    table = REFINED.layout.candidates(values, batch, **kw)
    assert crossed.size == len(table["tensor_parallel"]) > 500
    assert len(crossed.ends) < crossed.size // 5  # (the layouts: far fewer rows)
    _same_columns(crossed.expand(), table)
    ids = np.array([0, 1, crossed.size // 3, crossed.size - 1])
    _same_columns(crossed.rows(ids), {k: v[ids] for k, v in table.items()})
    if case == "llama-admissible":  # (virtual stages that do not split the layers are cut)
        assert len(crossed.combos[0]) < np.prod(crossed.radices)


def test_a_rule_reading_an_undeclared_layout_column_raises():
    from dataclasses import replace

    def reads_micro_batch(values, cand):
        return {"recompute": np.asarray(cand["micro_batch"]) > 1}

    space = replace(REFINED.layout, meaningless=reads_micro_batch)
    with pytest.raises(KeyError, match="rule_columns"):
        space.crossed(TOY, 16, vary={"recompute": [0, 1]})
    # declared, it is read (and the crossing agrees with the table)
    space = replace(space, rule_columns=("tensor_parallel", "pipeline_parallel", "micro_batch"))
    _same_columns(space.crossed(TOY, 16, vary={"recompute": [0, 1]}).expand(),
                  space.candidates(TOY, 16, vary={"recompute": [0, 1]}))


def test_the_device_decodes_a_crossed_table_as_the_host_does():
    import jax
    import jax.numpy as jnp

    from jaxmodel.precision import computing
    from jaxmodel.searching import table_spec
    from jaxmodel.space import IndexSpace

    crossed = REFINED.layout.crossed(TOY_MOE, 32, vary={"recompute": [0, 1, 2]})
    layout = {k: v for k, v in crossed.layouts.items() if k in REFINED.input_names}
    spec = table_spec(REFINED, TOY_MOE, layout, question={}, crossed=crossed)
    space = IndexSpace(spec, np.float64)
    ids = np.arange(space.size, dtype=np.int64)
    with computing():
        x = jax.jit(space.decode)(jnp.asarray(ids), space.tables)
    host = space.host_inputs(ids)
    table = REFINED.layout.candidates(TOY_MOE, 32, vary={"recompute": [0, 1, 2]})
    for f, v in zip(REFINED.inputs, x, strict=True):
        want = table[f.name] if f.name in table else host[f.name]
        assert np.array_equal(np.broadcast_to(np.asarray(v), ids.shape), want), f.name


def test_best_over_the_crossed_table_equals_best_over_the_whole_table(monkeypatch):
    # The same best rows (every column, config_id included), order and counts
    # as the search over the materialised table (issue 26); with idle GPUs, so
    # that the rows' num_gpus column and the reported job size are decoded too.
    import jaxmodel.searching as searching

    idle = True
    values = {**TOY_MOE, "gpu_memory_gb": 40.0, "num_gpus": 30 if idle else 32}
    kw = dict(global_batch=32, top=40, allow_idle=idle, pareto=("step_time_ms",
              "memory_gb_per_gpu", True, True),
              group_by=("pipeline_parallel", "virtual_stages", "expert_parallel"),
              vary={"recompute": [0, 1, 2], "pipeline_schedule": [0, 1, 2]})
    crossed = search(REFINED, values, **kw)
    monkeypatch.setattr(searching, "CROSSED", False)
    table = search(REFINED, values, **kw)
    assert (crossed.candidates, crossed.valid, crossed.chunks) \
        == (table.candidates, table.valid, table.chunks)
    assert 0 < crossed.valid < crossed.candidates
    _same_columns(crossed.top, table.top)
    _same_columns(crossed.pareto, table.pareto)
    _same_columns(crossed.per_group, table.per_group)


@pytest.mark.parametrize("names", [("pipeline_parallel", "recompute", "expert_parallel"),
                                   ("recompute", "data_parallel"), ("moe_overlap",),
                                   ("micro_batch",)])
def test_crossed_groups_are_numbered_as_the_table_numbers_them(names):
    kw = {"vary": {"recompute": [0, 1, 2], "pipeline_schedule": [0, 1]}}
    crossed = REFINED.layout.crossed(TOY_MOE, 32, **kw)
    table = REFINED.layout.candidates(TOY_MOE, 32, **kw)
    keys, want = np.unique(np.stack([table[n] for n in names], axis=1), axis=0,
                           return_inverse=True)
    of_layout, of_combo, ids, count = crossed.groups(names)
    i = np.arange(crossed.size)
    r = np.searchsorted(crossed.ends, i, side="right")
    combo = crossed.combos[crossed.pattern[r], i - crossed.starts[r]]
    assert count == len(keys) > 1
    assert np.array_equal(ids[of_layout[r], of_combo[combo]], want.reshape(-1))
    assert crossed.groups(names, limit=1) is None  # (then the search crosses the table)


def test_the_dispatcher_backends_searched_are_those_whose_rates_differ():
    # DeepEP (1) and HybridEP (2) move the same bytes; on B200 their measured NVLink
    # rates differ (0.380, 0.519), so both are plans; on H100 the preset takes
    # DeepEP's for both, so HybridEP would repeat DeepEP's rows.
    from jaxmodel.models.presets import GPUS
    from jaxmodel.models.refined.space import layout_axes
    for gpu, codes in (("b200", [0, 1, 2]), ("h100-sxm", [0, 1])):
        values = {**TOY_MOE, **GPUS[gpu].values}
        assert layout_axes(values)["moe_dispatcher"].tolist() == codes, gpu
