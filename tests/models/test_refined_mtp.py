"""Multi-token prediction (``jaxmodel.models.refined.mtp``), each term against a hand value.

The toy configuration is ``test_refined.TOY`` (t = 4, p = 2, d = 1, a GPT layer of
h = 1024 at s = 1024, 1e14 FLOP/s, 1e12 B/s HBM, the 2026 terms off); its per-layer
hand values are those of ``test_refined_2026``.
"""

import math
from types import SimpleNamespace

import pytest
from test_refined import TOY, WGRAD_QKV_US, WGRAD_UP_US

import jaxmodel
from jaxmodel.api import as_dicts
from jaxmodel.models.refined import REFINED
from jaxmodel.models.refined.pipeline import layers_per_stage, uneven_note
from jaxmodel.models.refined.validity import layout_reasons
from jaxmodel.presets import apply_presets

LAYER_US = 312.64342016  # one layer a micro-batch: GEMMs 3 x 64.42, attention 3.5 x 10.74, bytes
LOGIT_US = 19.25185536  # the output layer: 3 x 5.36870912 GEMMs + 3,145,728 B of cross-entropy
PROJ_US = 3 * 10.73741824  # [s, 2h] x [2h, h / t], three passes: 2 x 1024 x 2048 x 256 FLOP each
# A layer's four all-reduces of [s, b, h] over t = 4, less the two backward ones'
# time beside the QKV and feed-forward weight gradients (test_tensor_parallel_term).
TP_LAYER_US = 4 * 31.45728 - (WGRAD_QKV_US + WGRAD_UP_US)


def run(**changes) -> dict:
    return as_dicts(REFINED, jaxmodel.evaluate(REFINED, x64=True, **{**TOY, **changes}))


def approx(x):
    return pytest.approx(x, rel=1e-10)


def test_one_module_adds_a_layer_a_projection_and_the_output_layer_to_the_last_stage():
    base, mtp = run(), run(mtp_layers=1)
    # Per micro-batch the last stage runs one more layer, the output layer again and
    # the projection; m = 4 micro-batches.  The optimizer steps 14 h^2 / t more
    # parameters (the block's 12 h^2 and the projection's 2 h^2; tied, so no
    # embedding copy) at 28 bytes each: 102.760448 us.
    micro_us = LAYER_US + LOGIT_US + PROJ_US
    assert (mtp["compute_time_ms"] - base["compute_time_ms"]) * 1e3 == approx(
        4 * micro_us + 28 * 14 * 1024**2 / 4 / 1e6)
    # The block's tensor-parallel all-reduces, as a layer's.
    assert (mtp["tp_comm_ms"] - base["tp_comm_ms"]) * 1e3 == approx(4 * TP_LAYER_US)
    # Model FLOPs: 3 (2 b s 14 h^2 + 4 b s^2 h) + 6 b s h V = 109,521,666,048 a
    # micro-batch, m = 4, over t p = 8 GPUs at 1e14 FLOP/s.
    ideal_us = (base["mfu_percent"] * base["step_time_ms"]) / 100 * 1e3
    assert (mtp["mfu_percent"] * mtp["step_time_ms"]) / 100 * 1e3 - ideal_us == approx(
        4 * 109_521_666_048 / 8 / 1e14 * 1e6)
    assert mtp["total_params_b"] - base["total_params_b"] == approx(14 * 1024**2 / 1e9)
    assert mtp["active_params_b"] - base["active_params_b"] == approx(14 * 1024**2 / 1e9)


def test_module_memory_on_a_single_stage():
    # p = 1 (4 GPUs): the one stage holds the module.  State: 14 h^2 / t parameters at
    # 2 + 2 + 12 bytes = 58,720,256 B.  Activations: the block's as a layer's (s b h
    # (10 + 24 / t) = 16,777,216 B), the two norm inputs and the projection input
    # (8 s b h = 8,388,608 B), and the logits again (4 s b h / t + 10 s b V / t =
    # 3,670,016 B).
    base = run(num_gpus=4, pipeline_parallel=1)
    mtp = run(num_gpus=4, pipeline_parallel=1, mtp_layers=1)
    assert (mtp["model_state_gb_per_gpu"] - base["model_state_gb_per_gpu"]) * 1e9 == approx(
        58_720_256)
    assert (mtp["activation_gb_per_gpu"] - base["activation_gb_per_gpu"]) * 1e9 == approx(
        16_777_216 + 8_388_608 + 3_670_016)


def test_untied_last_stage_also_holds_the_input_embedding():
    # Untied, p = 2: the last stage builds the input embedding for the module
    # (V h / t = 262,144 parameters at 16 bytes) beside the block and projection.
    base = run(tied_embeddings=0, gpu_memory_gb=1000)
    mtp = run(tied_embeddings=0, gpu_memory_gb=1000, mtp_layers=1)
    # The last stage is now the fuller: its optimizer step covers both.
    extra = 14 * 1024**2 / 4 + 1024 * 1024 / 4
    assert (mtp["compute_time_ms"] - base["compute_time_ms"]) * 1e3 == approx(
        4 * (LAYER_US + LOGIT_US + PROJ_US) + 28 * extra / 1e6)


def test_deepseek_v3_mtp_module_is_the_published_14b():
    # DeepSeek-V3's MTP module (config.json: one MoE layer, MLA, 256 routed + 1 shared
    # experts of 3 x 7168 x 2048): attention 48,758,784 (queries) + 20,905,984 (keys,
    # values) + 117,440,512 (output) = 187,105,280; router 1,835,008; experts 257 x
    # 44,040,192 = 11,318,329,344; projection 2 x 7168^2 = 102,760,448.
    module = 187_105_280 + 1_835_008 + 11_318_329_344 + 102_760_448
    values = apply_presets("refined", gpu="h800", llm="deepseek-v3")
    base = as_dicts(REFINED, jaxmodel.evaluate(REFINED, x64=True, **values))
    mtp = as_dicts(REFINED, jaxmodel.evaluate(REFINED, x64=True, **values, mtp_layers=1))
    assert (mtp["total_params_b"] - base["total_params_b"]) * 1e9 == pytest.approx(
        module, rel=1e-9)
    # Active: attention, router, 8 routed + 1 shared experts, the projection.
    active = 187_105_280 + 1_835_008 + 9 * 44_040_192 + 102_760_448
    assert (mtp["active_params_b"] - base["active_params_b"]) * 1e9 == pytest.approx(
        active, rel=1e-9)
    # The Hugging Face checkpoint stores the module with its own embedding and head
    # (2 V h = 1,853,358,080): 685B in all of which 671B the main model, both
    # rounded to 1B, so 14 +- 1.
    stored = module + 2 * 129_280 * 7168
    assert 13e9 <= stored <= 15e9
    assert base["total_params_b"] == pytest.approx(671, abs=0.5)


# --- the modules as units of the pipeline split (mtp_in_pipeline_split) ----------------

def _split(p, v, layers, e, mtp, switch, last=0):
    x = SimpleNamespace(pipeline_split_embedding=float(e), mtp_layers=float(mtp),
                        mtp_in_pipeline_split=float(switch), last_stage_layers=float(last))
    g = SimpleNamespace(L=float(layers), p=float(p), v=float(v), one_stage=float(p == 1))
    return tuple(float(n) for n in layers_per_stage(x, g))


def test_deepseek_v3_custom_layouts_split_the_module_as_a_unit():
    # Megatron-LM's and Megatron-Bridge's DeepSeek-V3 layout Et|(tt|)*30mL at PP16
    # VPP2: 61 layers + embedding + loss + 1 module = 64 units over 32 chunks, 2 a
    # chunk, 4 a stage: the first holds chunks Et and tt, 3 layers (+ the
    # embedding), the last tt and mL, 2 (+ the module and the loss), the others 4.
    assert _split(16, 2, 61, 1, 1, 1) == (4.0, 3.0, 2.0)
    # Megatron-Core's default (the module beside the last stage's share): 63 units,
    # still 2 a chunk; the last stage keeps 3 layers and the module on top.
    assert _split(16, 2, 61, 1, 1, 0) == (4.0, 3.0, 3.0)
    # The MoE recipe's Et*4|(tttt|)*14tmL (16 chunks, PP8 VPP2): 64 / 16 = 4 a chunk,
    # 8 a stage: 7 layers on the first, 8 - 1 - 1 = 6 on the last.
    assert _split(8, 2, 61, 1, 1, 1) == (8.0, 7.0, 6.0)
    # One stage holds every layer, the module beside them.
    assert _split(1, 1, 61, 1, 1, 1) == (64.0, 61.0, 61.0)


def test_last_stage_layers_reads_the_deepseek_v3_layouts_exactly():
    # Megatron-Core puts chunk i of the p v on stage i mod p.  Megatron-Bridge's
    # DeepSeek-V3 layout Et*4|(t*4|)*14tmL on p 16 v 1: the last stage t m L, 1
    # layer; the others 4 each (the first E + 4): Z = 1, 60 / 15 = 4, the first
    # 60 - 14 x 4 = 4.
    assert _split(16, 1, 61, 0, 1, 0, last=1) == (4.0, 4.0, 1.0)
    # The same on p 8 v 2: the last stage holds chunks 7 (t*4) and 15 (t m L), 5
    # layers; the others chunks of 4 + 4: 56 / 7 = 8, the first 56 - 6 x 8 = 8.
    assert _split(8, 2, 61, 0, 1, 0, last=5) == (8.0, 8.0, 5.0)
    # Et|(tt|)*30mL on p 8 v 4: the last stage chunks 7, 15, 23, 31 = 2 + 2 + 2 + 0;
    # 55 / 7 -> 8 a stage, the first 55 - 6 x 8 = 7 (chunks 0, 8, 16, 24: 1 + 2 + 2 + 2).
    assert _split(8, 4, 61, 0, 1, 0, last=6) == (8.0, 7.0, 6.0)
    # It overrides the units of the split, and means nothing on one stage.
    assert _split(16, 1, 61, 1, 1, 1, last=1) == (4.0, 4.0, 1.0)
    assert _split(1, 1, 61, 0, 1, 0, last=5) == (61.0, 61.0, 61.0)


def test_busiest_stage_weighs_the_first_stage_on_two_stages():
    from jaxmodel.models.refined.pipeline import busiest_stage

    # p = 2 (no middle stage): 6 layers on the first, 2 on the last with the output
    # layer.  Layer 1 s (forward 0.3, weight gradient 0.3), logits 1.5 s: the last
    # stage takes 2 + 1.5 = 3.5 s, the first 6 s, which sets the pace.
    g = SimpleNamespace(has_mid=0.0, pp_active=1.0)
    lt = SimpleNamespace(layer_s=1.0, logit_s=1.5, embed_grad_s=0.0, layer_f=0.3,
                         layer_w=0.3, logit_fwd_s=0.5)
    stage = busiest_stage(g, 6.0, 6.0, 2.0, lt, (0.0, 0.0, 0.0))
    assert float(stage.micro_compute) == 6.0 and float(stage.stage_layers) == 6.0
    assert not bool(stage.last_busiest)
    assert float(stage.stage_f) == pytest.approx(1.8)
    # An even split (3 and 3): the last, 3 + 1.5 = 4.5 s.
    stage = busiest_stage(g, 3.0, 3.0, 3.0, lt, (0.0, 0.0, 0.0))
    assert float(stage.micro_compute) == 4.5 and bool(stage.last_busiest)
    # One stage: the first is the last.
    g1 = SimpleNamespace(has_mid=0.0, pp_active=0.0)
    assert float(busiest_stage(g1, 61.0, 61.0, 61.0, lt, (0.0, 0.0, 0.0)).micro_compute) \
        == 62.5


def test_last_stage_layers_validity():
    model = REFINED
    base = {**model.defaults, "num_gpus": 64, "tensor_parallel": 1, "pipeline_parallel": 8,
            "num_layers": 10, "gradient_accum_steps": 8}
    # 10 layers, 1 on the last stage: 9 over 7 stages is 2 a stage (ceil), 9 - 6 x 2
    # = -3 for the first: not a layout.
    bad = {**base, "last_stage_layers": 1}
    out = jaxmodel.api.evaluate_on_host(model, **bad)
    assert not bool(out.valid_layout)
    assert any("none for the first" in problem for problem, _ in
               layout_reasons(bad, out._asdict()))
    # 3 on the last: 7 over 7, one each.
    ok = {**base, "last_stage_layers": 3}
    assert bool(jaxmodel.api.evaluate_on_host(model, **ok).valid_layout)


def test_deepseek_v3_uneven_note_names_the_module_on_the_last_stage():
    cfg = {"pipeline_parallel": 16, "virtual_stages": 2, "num_layers": 61,
           "pipeline_split_embedding": 1, "mtp_layers": 1, "mtp_in_pipeline_split": 1}
    assert uneven_note(cfg) == (
        " Uneven pipeline: 61 layers over 16 stages (3.81 on average); the first stage "
        "holds 3 layers (+ embedding), the last 2 (+ MTP module / output layer), the "
        "others 4, and the busiest sets the pace.")


def test_module_in_the_split_takes_a_layer_off_the_last_stage():
    # TOY, 5 layers + embedding + loss + 1 module = 8 units over p = 2: 4 a stage;
    # the first holds 3 layers, the last 4 - 1 - 1 = 2 and the module (without the
    # switch: 7 units, still 4 a stage, and the last keeps 3 layers and the module).
    # The last stage is the busier in both; per micro-batch it runs one layer less
    # (m = 4), and its optimizer steps one layer's 12 h^2 / t parameters less at
    # 28 bytes each.  One layer's tensor-parallel all-reduces less.
    cfg = dict(num_layers=5, pipeline_split_embedding=1, mtp_layers=1, gpu_memory_gb=1000)
    beside, unit = run(**cfg), run(**cfg, mtp_in_pipeline_split=1)
    assert (beside["compute_time_ms"] - unit["compute_time_ms"]) * 1e3 == approx(
        4 * LAYER_US + 28 * 12 * 1024**2 / 4 / 1e6)
    assert (beside["tp_comm_ms"] - unit["tp_comm_ms"]) * 1e3 == approx(4 * TP_LAYER_US)


def test_module_in_the_split_takes_a_layer_off_the_fullest_stage():
    # m = 1: one micro-batch in flight, so the last stage (its layers, the module's
    # block and inputs, two sets of logits) is the fullest with or without the
    # switch.  With it, one layer less: 12 h^2 / t parameters at 2 + 2 + 12 bytes =
    # 50,331,648 B of state and s b h (10 + 24 / t) = 16,777,216 B of activations.
    cfg = dict(num_layers=5, pipeline_split_embedding=1, mtp_layers=1,
               gradient_accum_steps=1)
    beside, unit = run(**cfg), run(**cfg, mtp_in_pipeline_split=1)
    assert (beside["model_state_gb_per_gpu"] - unit["model_state_gb_per_gpu"]) * 1e9 == (
        approx(50_331_648))
    assert (beside["activation_gb_per_gpu"] - unit["activation_gb_per_gpu"]) * 1e9 == (
        approx(16_777_216))


def test_module_in_the_split_fills_a_stage():
    # 1 layer over p = 2 stages: invalid with the module beside the last stage's
    # share (1 unit < 2 chunks); valid as t|mL, the module a unit of its own.
    beside = run(num_layers=1, mtp_layers=1)
    unit = run(num_layers=1, mtp_layers=1, mtp_in_pipeline_split=1)
    assert math.isnan(beside["step_time_ms"]) and not math.isnan(unit["step_time_ms"])
    reasons = layout_reasons({**TOY, "num_layers": 1, "mtp_layers": 1}, beside)
    assert any("1 layers cannot fill 2 stages" in problem for problem, _ in reasons)
