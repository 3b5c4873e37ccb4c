"""The model contract: a third model defined here runs through every entry point.

The toy below is the whole of a new model: its fields (from the shared
builders), its terms (a shared one, ``compute`` and ``tp_comm``, plus its own
``offload``), its layout space (the 3D-parallel one plus its own axis
``offload_ways``) and its stepped input.  ``evaluate``, a sweep, the layout
search, sensitivities and the breakdown plot run on it without any module
outside this file knowing it; every value is checked against the toy's
formulas written out again in plain Python.
"""

import itertools
import math
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
import pyarrow.parquet as pq
import pytest

import jaxmodel
from jaxmodel import plot
from jaxmodel.engine import Plan, run_sweep
from jaxmodel.fields import OutputField
from jaxmodel.models import MODELS, Model
from jaxmodel.models.base import Term
from jaxmodel.models.common import count, masked, positive, whole
from jaxmodel.models.layout import LayoutSpace, replica_step
from jaxmodel.models.outputs import SHARED_OUTPUTS
from jaxmodel.models.terms import COMPUTE, TP_COMM, bottleneck_output
from jaxmodel.models.verdicts import REGIMES, bottleneck_and_regime, render_verdict
from jaxmodel.spec import parse_spec

# ----------------------------------------------------------------- the toy model

OFFLOAD = Term("offload", "offload_ms", "optimizer offload", "#17BECF", "communication",
               "optimizer offload", "the optimizer-state offload",
               lambda inputs, outputs: f"Use more offload ways (now {int(inputs['offload_ways'])})")
TERMS = (COMPUTE, TP_COMM, OFFLOAD)
INPUTS = (count("num_gpus", "GPUs", "N", 8), count("tensor_parallel", "ways", "t", 2),
          count("pipeline_parallel", "stages", "p", 2), count("micro_batch", "sequences", "b", 1),
          count("gradient_accum_steps", "micro-batches", "m", 4),
          count("seq_length", "tokens", "s", 1000), count("hidden_dim", "", "h", 64),
          count("num_layers", "", "L", 4), count("offload_ways", "ways", "o", 2),
          positive("offload_ms_per_step", "ms", "offload time at o = 1 per micro-batch", 10))
OUTPUTS = (SHARED_OUTPUTS["data_parallel"],
           OutputField("valid_layout", "", "at least one replica", "bool"),
           OutputField("compute_time_ms", "ms", "b m s L / (t p) / 1e3", "float"),
           OutputField("tp_comm_ms", "ms", "(t - 1) b m s / 1e3", "float"),
           OutputField("offload_ms", "ms", "offload_ms_per_step m / o", "float"),
           SHARED_OUTPUTS["step_time_ms"],
           OutputField("mfu_percent", "%", "compute / step", "float"),
           SHARED_OUTPUTS["throughput_tokens_s"], bottleneck_output(TERMS),
           SHARED_OUTPUTS["regime"])
ToyInputs = NamedTuple("ToyInputs", [(f.name, Any) for f in INPUTS])  # noqa: UP014
ToyOutputs = NamedTuple("ToyOutputs", [(f.name, Any) for f in OUTPUTS])  # noqa: UP014


def toy_model(x):
    d = whole(x.num_gpus) // (whole(x.tensor_parallel) * whole(x.pipeline_parallel))
    valid = d >= 1
    fdt = jnp.result_type(x.seq_length)
    tokens = x.micro_batch * x.gradient_accum_steps * x.seq_length
    compute = tokens * x.num_layers / (x.tensor_parallel * x.pipeline_parallel) / 1e3
    tp = (x.tensor_parallel - 1.0) * tokens / 1e3
    offload = x.offload_ms_per_step * x.gradient_accum_steps / x.offload_ways
    step = compute + tp + offload
    mfu = 100.0 * compute / step
    bottleneck, regime = bottleneck_and_regime(TERMS, (compute, tp, offload), mfu, valid)
    return ToyOutputs(d, valid, masked(valid, compute, fdt), masked(valid, tp, fdt),
                      masked(valid, offload, fdt), masked(valid, step, fdt),
                      masked(valid, mfu, fdt),
                      masked(valid, tokens * jnp.maximum(d, 1) / step * 1e3, fdt),
                      bottleneck, regime)


TOY = Model(
    name="toy", description="a toy model with an offload term", inputs=INPUTS, outputs=OUTPUTS,
    inputs_type=ToyInputs, outputs_type=ToyOutputs, apply=toy_model,
    verdict=lambda inputs, outputs: render_verdict(TERMS, inputs, outputs, []), terms=TERMS,
    steps={"num_gpus": replica_step(("tensor_parallel", "pipeline_parallel"))},
    layout=LayoutSpace(extra=lambda values, also: {"offload_ways": np.array([1, 2, 4])}),
)

# ------------------------------------------------------ the toy again, by hand


def by_hand(c):
    """The toy's formulas in plain Python floats (``c``: input name -> value)."""
    n, t, p, b, m, s = (c[k] for k in ("num_gpus", "tensor_parallel", "pipeline_parallel",
                                       "micro_batch", "gradient_accum_steps", "seq_length"))
    d = int(n) // int(t * p)
    compute = b * m * s * c["num_layers"] / (t * p) / 1000
    tp = (t - 1) * b * m * s / 1000
    offload = c["offload_ms_per_step"] * m / c["offload_ways"]
    step = compute + tp + offload
    terms = {"compute": compute, "tp_comm": tp, "offload": offload}
    return {"data_parallel": d, "compute_time_ms": compute, "tp_comm_ms": tp,
            "offload_ms": offload, "step_time_ms": step, "mfu_percent": 100 * compute / step,
            "throughput_tokens_s": b * m * s * max(d, 1) / step * 1000,
            "bottleneck": max(terms, key=terms.get) if d >= 1 else "invalid"}


BASE = TOY.defaults


def test_the_toy_declares_what_the_engine_derives():
    assert TOY.output_field("bottleneck").categories == (*jaxmodel.BOTTLENECKS[:-1], "offload",
                                                         "invalid")
    assert "num_gpus" not in TOY.continuous and "offload_ways" in TOY.continuous
    assert plot.shown_terms(TOY) == (("compute", "compute_time_ms"),
                                     ("TP all-reduce", "tp_comm_ms"),
                                     ("optimizer offload", "offload_ms"))
    with pytest.raises(ValueError, match="inputs_type fields"):
        Model(**{**TOY.__dict__, "inputs_type": NamedTuple("Wrong", [("a", Any)])})
    with pytest.raises(ValueError, match="bottleneck output's categories"):
        Model(**{**TOY.__dict__, "terms": TERMS[:2]})  # offload undeclared: codes would shift


def test_evaluate_and_verdict_are_the_hand_derivation():
    # N 8, t 2, p 2, b 1, m 4, s 1000, L 4, o 2: d = 2; compute = 4000 x 4 / 4 / 1e3 = 4 ms,
    # TP (2 - 1) x 4000 / 1e3 = 4 ms, offload 10 x 4 / 2 = 20 ms: the offload is the bottleneck.
    out = jaxmodel.evaluate(TOY, x64=True, **BASE)
    assert float(out.compute_time_ms) == 4.0 and float(out.tp_comm_ms) == 4.0
    assert float(out.offload_ms) == 20.0 and float(out.step_time_ms) == 28.0
    assert float(out.throughput_tokens_s) == pytest.approx(2 * 4000 / 28 * 1000)
    categories = TOY.output_field("bottleneck").categories
    assert categories[int(out.bottleneck)] == "offload"
    assert REGIMES[int(out.regime)] == "communication-bound"
    outputs = {f.name: np.asarray(v).item() for f, v in zip(TOY.outputs, out, strict=True)}
    verdict = TOY.verdict(BASE, outputs)
    assert verdict.startswith("communication-bound -- the optimizer-state offload is the "
                              "largest single term at 20 ms (71% of the step")
    assert verdict.endswith("Use more offload ways (now 2)")


def test_a_sweep_writes_the_hand_derivation(tmp_path, monkeypatch):
    monkeypatch.setitem(MODELS, "toy", TOY)  # a spec names its model; nothing else is told
    spec = parse_spec('model = "toy"\n[axes]\noffload_ways = [1, 2, 4]\n'
                      'tensor_parallel = [1, 2, 16]\n')
    result = run_sweep(Plan(spec, x64=True, chunk_size=4), tmp_path / "toy")
    table = pq.read_table(tmp_path / "toy").sort_by("config_id").to_pylist()
    assert len(table) == 9 and result.rows == 9
    for row, (o, t) in zip(table, itertools.product([1, 2, 4], [1, 2, 16]), strict=True):
        want = by_hand({**BASE, "offload_ways": o, "tensor_parallel": t})
        assert row["valid_layout"] == (t != 16)  # 16 x 2 GPUs do not fit in 8
        assert str(row["bottleneck"]) == want["bottleneck"]
        for name in ("compute_time_ms", "tp_comm_ms", "offload_ms", "step_time_ms"):
            if t != 16:
                assert row[name] == pytest.approx(want[name], rel=1e-12)
            else:
                assert math.isnan(row[name])


def test_the_search_ranges_over_the_toy_layout_space():
    # Every t | 64, p | 4 with t p | 8, d = 8 / (t p) dividing the batch 8,
    # b | 8 / d, m = 8 / (d b), o in (1, 2, 4): written out as loops.
    expected = []
    for t in (1, 2, 4, 8, 16, 32, 64):
        for p in (1, 2, 4):
            if t * p > 8 or 8 % (t * p):
                continue
            d = 8 // (t * p)
            for b in range(1, 9):
                if 8 % d or (8 // d) % b:
                    continue
                for o in (1, 2, 4):
                    c = {**BASE, "tensor_parallel": t, "pipeline_parallel": p, "micro_batch": b,
                         "gradient_accum_steps": 8 // (d * b), "offload_ways": o}
                    expected.append((by_hand(c)["throughput_tokens_s"], c))
    r = jaxmodel.search(TOY, BASE, global_batch=8, top=3, x64=True)
    assert r.candidates == len(expected) and r.valid == len(expected)
    best = sorted(expected, key=lambda e: -e[0])[:3]  # (stable: ties keep config_id order)
    for i, (value, c) in enumerate(best):
        assert r.top["throughput_tokens_s"][i] == pytest.approx(value, rel=1e-12)
        for name in ("tensor_parallel", "pipeline_parallel", "micro_batch",
                     "gradient_accum_steps", "offload_ways"):
            assert r.top[name][i] == c[name]


def test_sensitivities_follow_the_declared_steps():
    s = jaxmodel.sensitivities(BASE, of=["throughput_tokens_s", "step_time_ms"], model=TOY,
                               x64=True, wrt=["offload_ways", "num_gpus"])
    # d step / d o = -10 m / o^2 = -10 ms per way.
    assert float(s.gradient("step_time_ms", "offload_ways")) == pytest.approx(-10.0)
    # num_gpus is stepped: N' = (floor(8 / 4) + 1) x 4 = 12 GPUs, d = 3.
    now, then = by_hand(BASE), by_hand({**BASE, "num_gpus": 12})
    assert float(s.gradient("throughput_tokens_s", "num_gpus")) == pytest.approx(
        (then["throughput_tokens_s"] - now["throughput_tokens_s"]) / 4)


def test_breakdown_plot_data_stacks_the_toy_terms(tmp_path):
    pytest.importorskip("matplotlib")
    configs, labels = plot.compare_configs(BASE, {"offload_ways": [1, 4]})
    data = plot.plot_breakdown(TOY, configs, tmp_path / "b.png", labels=labels)
    assert (tmp_path / "b.png").stat().st_size > 0
    assert list(data.terms) == ["compute_time_ms", "tp_comm_ms", "offload_ms"]
    for i, c in enumerate(configs):
        want = by_hand(c)
        for col in data.terms:
            assert data.terms[col][i] == pytest.approx(want[col], rel=1e-6)
    # The --layouts breakdown: the fastest layouts of the toy's own space.
    configs, labels = plot.layout_configs(TOY, BASE, top=2, x64=True)
    steps = [by_hand(c)["step_time_ms"] for c in configs]
    assert steps == sorted(steps) and labels[0].startswith("t1 p")


# ----------------------------------------------------------------- what the core asks the model


def test_the_layout_space_says_which_candidates_are_practised():
    """Tensor parallelism within a node where the model knows the node, else any."""
    cand = {"tensor_parallel": np.array([1, 4, 8, 16])}
    refined = jaxmodel.get_model("refined")
    np.testing.assert_array_equal(
        refined.layout.practised({"gpus_per_node": 8}, cand), [True, True, True, False])
    np.testing.assert_array_equal(jaxmodel.get_model("seed").layout.practised({}, cand),
                                  [True] * 4)


def test_the_report_asks_the_model_for_its_layout_and_memory_inputs():
    from jaxmodel.report import memory_lines

    refined, seed = jaxmodel.get_model("refined"), jaxmodel.get_model("seed")
    assert refined.memory_capacity == "gpu_memory_gb" and seed.memory_capacity is None
    out = {"memory_gb_per_gpu": 30.0, "fits_in_memory": True}
    assert memory_lines(refined, {"gpu_memory_gb": 80.0}, out)[1] == (
        "memory per GPU: 30.00 GB of 80 GB (fits: yes, 50.00 GB free)")
    assert seed.layout.report_summary({"tensor_parallel": 8, "pipeline_parallel": 4},
                                      {"data_parallel": 2}) == "t=8 p=4 d=2"
    with pytest.raises(ValueError, match="'gpu_memory' is not an input"):
        Model(**{**{f: getattr(TOY, f) for f in TOY.__dataclass_fields__},
                 "memory_capacity": "gpu_memory"})
