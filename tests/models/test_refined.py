"""The refined model: each term against a hand derivation, memory against
Korthikanti et al. 2022, jit / vmap / grad, and the CLI.

The hand values below are worked out in the comments from the formulas in the
module docstring of ``jaxmodel.models.refined`` (and the papers it cites), with
round-number inputs so that the arithmetic can be followed on paper.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

import jaxmodel
from jaxmodel.api import as_dicts
from jaxmodel.cli import app
from jaxmodel.models.refined import REFINED, RefinedInputs, layer_activation_bytes
from jaxmodel.precision import computing
from jaxmodel.xla_options import quick_compile

runner = CliRunner()

# One node of 8 GPUs, t = 4, p = 2, d = 1; a toy GPT layer (h = 1024, a = 8,
# f = 4h), rates that make the units easy (1e14 FLOP/s, 1e12 B/s HBM, 1e11 B/s
# NVLink, 1e10 B/s network), efficiencies 1, latencies 0, FlashAttention on.
TOY = {
    "num_gpus": 8, "tensor_parallel": 4, "pipeline_parallel": 2, "virtual_stages": 1,
    "micro_batch": 1, "gradient_accum_steps": 4, "seq_length": 1024, "hidden_dim": 1024,
    "num_layers": 8, "num_heads": 8, "num_kv_heads": 8, "ffn_hidden_dim": 4096,
    "mlp_weight_matrices": 2, "vocab_size": 1024, "tied_embeddings": 1, "recompute": 0,
    "sequence_parallel": 0, "zero_stage": 0, "flash_attention": 1, "dp_overlap": 0.0,
    "compute_tflops": 100, "matmul_efficiency": 1.0, "hbm_bandwidth_tb_s": 1.0,
    "hbm_efficiency": 1.0, "gpu_memory_gb": 80, "gpus_per_node": 8,
    "link_bandwidth_gb_s": 100, "network_bandwidth_gb_s": 10, "intra_node_efficiency": 1.0,
    "inter_node_efficiency": 1.0, "intra_node_latency_us": 0.0, "inter_node_latency_us": 0.0,
    # The 2026 terms off, so that the hand values above test the original ones
    # alone (each new term has its own hand-computed test in test_refined_2026.py):
    # every GEMM and attention at matmul_efficiency (1.0), the full attention
    # square with no fixed work per query tile, bf16 gradient buffers, no reserved
    # memory, no gradient-buffer traffic and no bucket granularity.
    "gemm_shape_model": 0, "attention_efficiency": 1.0, "causal_mask": 0,
    "attention_tile_keys": 0.0,
    "grad_buffer_bytes": 2, "reserved_memory_gb": 0.0, "kernel_overhead_us": 0.0,
    "grad_buffer_traffic": 0, "dp_bucket_params": 0.0, "overlap_slowdown": 0.0,
    # Dropout as in Korthikanti et al. 2022 (GPT with dropout 0.1): its masks
    # are stored, so the activations are Table 2's.
    "dropout": 1,
}


def run(**changes) -> dict:
    return as_dicts(REFINED, jaxmodel.evaluate(REFINED, x64=True, **{**TOY, **changes}))


def approx(x):
    return pytest.approx(x, rel=1e-12)


# --- each term, by hand --------------------------------------------------------


# The weight-gradient GEMMs of the column-parallel QKV (3 h^2 / t) and first
# feed-forward (4 h^2 / t) projections, per layer and micro-batch, at 1e14 FLOP/s:
# 2 * 1024 * 3 * 1024^2 / 4 / 1e14 = 16.10612736 us and 21.47483648 us.
WGRAD_QKV_US, WGRAD_UP_US = 16.10612736, 21.47483648


@pytest.mark.slow
def test_tensor_parallel_term():
    # One all-reduce of the [s, b, h] bf16 activation: 2 * 1024 * 1024 = 2,097,152 B;
    # ring over 4 GPUs in one node: 2 * 3/4 * 2,097,152 B / 1e11 B/s = 31.45728 us.
    # Four per layer, L / p = 4 layers, m = 4 micro-batches: 64 -> 2.01326592 ms.
    # The two backward ones reduce the column-parallel input gradients and run
    # beside those GEMMs' weight gradients (Megatron's async dgrad all-reduce):
    # each hides min(31.45728, wgrad) us, 16 layer passes.
    hidden = 16 * (WGRAD_QKV_US + WGRAD_UP_US) * 1e-3
    assert run()["tp_comm_ms"] == approx(2.01326592 - hidden)
    # Full recompute repeats the two forward all-reduces: 6 per layer.
    assert run(recompute=2)["tp_comm_ms"] == approx(2.01326592 * 6 / 4 - hidden)
    # Sequence parallelism: reduce-scatter + all-gather move the same bytes; the
    # backward reduce-scatters (15.72864 us) hide whole behind the weight
    # gradients, and the re-gathers of the QKV and feed-forward inputs (15.72864
    # us each) behind their input gradients: 4 * 31.45728 - 2 * 15.72864 us a pass.
    assert run(sequence_parallel=1)["tp_comm_ms"] == approx(
        16 * (4 * 31.45728 - 2 * 15.72864) * 1e-3)
    # t = 1: no tensor-parallel traffic.
    assert run(tensor_parallel=1, num_gpus=2)["tp_comm_ms"] == 0.0


def test_pipeline_transfer_term():
    # The whole job is one node, so transfers use NVLink.  Each sends 1/t of the
    # activation, 2,097,152 / 4 B / 1e11 B/s = 5.24288 us, then all-gathers it
    # over the 4 TP ranks, 3/4 * 2,097,152 B / 1e11 B/s = 15.72864 us: 20.97152 us.
    # 2 v m = 8 transfers per step -> 0.16777216 ms.
    assert run()["pp_comm_ms"] == approx(0.16777216)
    # Interleaved, v = 2, every transfer waited for: twice the transfers.  (The
    # steady-state overlap, pp_overlap, has its own test in test_refined_2026.py.)
    assert run(virtual_stages=2, pp_overlap=0)["pp_comm_ms"] == approx(2 * 0.16777216)
    # Sequence parallelism: the activation is already sharded, no all-gather.
    assert run(sequence_parallel=1)["pp_comm_ms"] == approx(8 * 5.24288e-3)
    # Two nodes (16 GPUs, d = 2): the hop crosses the network, 1e10 B/s, +5 us latency.
    two = run(num_gpus=16, inter_node_latency_us=5.0)
    assert two["pp_comm_ms"] == approx(8 * (2_097_152 / 4 / 1e10 + 5e-6 + 15.72864e-6) * 1e3)
    # Four nodes, p = 8 (32 GPUs, d = 1): stages 4 ranks apart, two to a node, so
    # no stage has node boundaries on both sides; the busiest sends one direction
    # over the network and the other over NVLink (5.24288 us): half each.
    shared = run(num_gpus=32, pipeline_parallel=8, inter_node_latency_us=5.0)
    one_way = (2_097_152 / 4 / 1e10 + 5e-6 + 5.24288e-6) / 2
    assert shared["pp_comm_ms"] == approx(8 * (one_way + 15.72864e-6) * 1e3)
    assert run(pipeline_parallel=1, num_gpus=4)["pp_comm_ms"] == 0.0


def test_compute_term():
    # Forward FLOPs per micro-batch of one layer: matrices 2 b s * 12 h^2 =
    # 25,769,803,776; attention 4 b s^2 h = 4,294,967,296; logits 2 b s h V =
    # 2,147,483,648.  Training: matrices x3, attention x3.5 (FlashAttention
    # recomputes QK^T in its backward), logits x3.  The last stage has 4 layers
    # and the logits, split over t = 4:
    #   (4 * (3 * 25,769,803,776 + 3.5 * 4,294,967,296) + 3 * 2,147,483,648) / 4
    #   = 93,952,409,600 FLOPs -> 0.939524096 ms at 1e14 FLOP/s.
    # Memory-bound bytes per micro-batch: per layer forward 22 s b h (layer norms,
    # bias-dropout-add, replicated) + 4 s b f / t (bias-GeLU) = 27,262,976, x3 for
    # forward and backward; logits 12 s b V / t = 3,145,728:
    #   4 * 3 * 27,262,976 + 3,145,728 = 330,301,440 B -> 0.33030144 ms at 1e12 B/s.
    # Per micro-batch 1.269825536 ms, x m = 4: 5.079302144 ms.  Adam update:
    # (4 * 12 h^2 + V h) / t = 12,845,056 parameters x 28 B = 0.359661568 ms.
    out = run()
    assert out["compute_time_ms"] == approx(5.079302144 + 0.359661568)
    assert out["memory_bound_ms"] == approx(4 * 0.33030144 + 0.359661568)
    # Recompute: FlashAttention's QK^T, 4 layers * 0.5 * 4,294,967,296 / 4 per
    # micro-batch at 1e14 FLOP/s, x4.
    assert out["recompute_ms"] == approx(4 * 4 * 0.5 * 4_294_967_296 / 4 / 1e14 * 1e3)


def test_bubble_and_step():
    # Bubble: (p - 1) / (v m) of the stage's busy time (compute without the
    # optimizer, plus TP, test_tensor_parallel_term):
    # 1/4 * (5.079302144 + 1.41197049856) = 1.62281816064 ms.
    tp = 2.01326592 - 16 * (WGRAD_QKV_US + WGRAD_UP_US) * 1e-3
    bubble = (5.079302144 + tp) / 4
    assert bubble == approx(1.62281816064)
    out = run()
    assert out["pipeline_bubble_ms"] == approx(bubble)
    assert out["dp_allreduce_ms"] == 0.0  # d = 1
    step = 5.079302144 + 0.359661568 + tp + 0.16777216 + bubble
    assert out["step_time_ms"] == approx(step)
    # Interleaved, v = 2: half the bubble.
    assert run(virtual_stages=2)["pipeline_bubble_ms"] == approx(bubble / 2)
    # MFU: model FLOPs m d (3 L (matrices + attention) + 3 logits) over
    # used x step x peak.
    model_flops = 4 * (8 * 3 * (25_769_803_776 + 4_294_967_296) + 3 * 2_147_483_648)
    assert out["mfu_percent"] == approx(100 * model_flops / (8 * step * 1e-3 * 1e14))
    assert out["tokens_per_step"] == 4 * 1024


def test_data_parallel_two_level_term():
    # t = p = 1 on 16 GPUs of two 8-GPU nodes: d = 16, 8 of the group per node.
    # Gradients: (8 * 12 h^2 + V h) = 101,711,872 parameters x 2 B = 203,423,744 B.
    # Intra-node reduce-scatter + all-gather: 2 * 7/8 * 203,423,744 / 1e11 s =
    # 3.55991552 ms + 14 steps x 1 us; inter-node all-reduce of 1/8 of it on each
    # GPU's NIC: 2 * 1/2 * 25,427,968 / 1e10 s = 2.5427968 ms + 2 steps x 5 us.
    dp = dict(num_gpus=16, tensor_parallel=1, pipeline_parallel=1,
              intra_node_latency_us=1.0, inter_node_latency_us=5.0)
    raw = 3.55991552 + 0.014 + 2.5427968 + 0.010
    out = run(**dp)
    assert out["dp_allreduce_raw_ms"] == approx(raw)
    assert out["dp_allreduce_ms"] == approx(raw)  # dp_overlap = 0
    # Overlap: the backward share of the last micro-batch's busy time hides it.
    # Per micro-batch on the one stage: (8 layers * (3 * 25,769,803,776 + 3.5 *
    # 4,294,967,296) + 3 * 2,147,483,648) / 1e14 s + bytes (8 * 3 * (22 + 16) s b h
    # + 12 s b V) / 1e12 s; backward share 1 - (matrices + attention) / (3 x
    # matrices + 3.5 x attention) of a layer.
    micro = ((8 * (3 * 25_769_803_776 + 3.5 * 4_294_967_296) + 3 * 2_147_483_648) / 1e14
             + (8 * 3 * 38 * 1024**2 + 12 * 1024**2) / 1e12) * 1e3
    share = 1 - (25_769_803_776 + 4_294_967_296) / (3 * 25_769_803_776 + 3.5 * 4_294_967_296)
    hidden = run(**dp, dp_overlap=1.0)
    assert hidden["dp_allreduce_ms"] == approx(max(0.0, raw - share * micro))
    # ZeRO-1: reduce-scatter (may hide) + all-gather of the weights (exposed).
    zero = run(**dp, dp_overlap=1.0, zero_stage=1)
    assert zero["dp_allreduce_ms"] == approx(max(0.0, raw / 2 - share * micro) + raw / 2)


def test_tensor_group_spanning_nodes_uses_the_network():
    # t = 16 over two 8-GPU nodes: intra 2 * 7/8 * A / 1e11 + inter 2 * 1/2 *
    # (A / 8) / 1e10, A = 2,097,152 B; 4 per layer, 8 layers, m = 4.  The two
    # backward ones each hide the QKV or feed-forward weight gradient, now a
    # sixteenth of the layer's: (3 + 4) h^2 * 2 * 1024 / 16 / 1e14 s a layer pass.
    a = 2_097_152
    one = 2 * 7 / 8 * a / 1e11 + 2 * 1 / 2 * a / 8 / 1e10
    wgrad = 7 * 1024**2 * 2 * 1024 / 16 / 1e14
    out = run(num_gpus=16, tensor_parallel=16, pipeline_parallel=1, num_heads=16,
              num_kv_heads=16)
    assert out["tp_comm_ms"] == approx((4 * 8 * 4 * one - 8 * 4 * wgrad) * 1e3)


def test_flops_match_narayanan_eq3_with_full_recompute():
    # SC21 eq. 3: F = 96 B s l h^2 (1 + s / 6h + V / 16 l h) per iteration.
    cfg = dict(recompute=2, flash_attention=0, vocab_size=51200, num_gpus=64,
               gradient_accum_steps=8, micro_batch=2, seq_length=2048)
    out = run(**cfg)
    B, s, L, h, V = 2 * 8 * 8, 2048, 8, 1024, 51200
    eq3 = 96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
    flops = out["hardware_tflops_per_gpu"] * 1e12 * out["used_gpus"] * out["step_time_ms"] / 1e3
    assert flops == pytest.approx(eq3, rel=1e-10)
    # Model FLOPs (MFU) leave the recompute out: 72 B s l h^2 (1 + s / 6h) + 6 B s h V.
    model = out["achieved_tflops_per_gpu"] * 1e12 * out["used_gpus"] * out["step_time_ms"] / 1e3
    assert model == pytest.approx(72 * B * s * L * h**2 * (1 + s / (6 * h)) + 6 * B * s * h * V,
                                  rel=1e-10)


def test_selective_recompute_adds_the_attention_core():
    # Korthikanti et al. 2022 sec. 5: selective recompute repeats QK^T and
    # attention x V, 4 b s^2 h per layer and micro-batch.
    out = run(recompute=1, flash_attention=0)
    extra = (out["hfu_percent"] - out["mfu_percent"]) / 100 * 8 * out["step_time_ms"] / 1e3 * 1e14
    assert extra == pytest.approx(4 * 8 * 4 * 1024**3, rel=1e-9)


def test_params_from_architecture():
    # GPT: 12 h^2 per layer (Narayanan et al. eq. 2 without the 13 h biases) + V h.
    assert run()["model_params_b"] == approx((8 * 12 * 1024**2 + 1024 * 1024) / 1e9)
    # Untied embeddings count the output layer too.
    assert run(tied_embeddings=0)["model_params_b"] == approx(
        (8 * 12 * 1024**2 + 2 * 1024 * 1024) / 1e9)


# --- memory ---------------------------------------------------------------------


def _inputs(**changes) -> RefinedInputs:
    values = {**REFINED.defaults, **TOY, **changes}
    return RefinedInputs(**{k: jnp.asarray(float(v), jnp.float64) for k, v in values.items()})


GPT_LAYER = dict(seq_length=2048, micro_batch=2, hidden_dim=4096, num_heads=32, num_kv_heads=32,
                 ffn_hidden_dim=16384, mlp_weight_matrices=2, flash_attention=0)


@pytest.mark.parametrize("t", [1, 2, 8])
@pytest.mark.parametrize("sp", [0, 1])
@pytest.mark.parametrize("mode", [0, 1, 2], ids=["none", "selective", "full"])
def test_layer_activations_match_korthikanti(t, sp, mode):
    # Korthikanti et al. 2022, Table 2 (bytes per layer, per micro-batch, per GPU).
    s, b, h, a = 2048, 2, 4096, 32
    sbh = s * b * h
    formula = {
        (0, 0): sbh * (10 + 24 / t + 5 * a * s / (h * t)),
        (0, 1): sbh / t * (34 + 5 * a * s / h),
        (1, 0): sbh * (10 + 24 / t),
        (1, 1): sbh * 34 / t,
        (2, 0): 2 * sbh,
        (2, 1): 2 * sbh / t,
    }[(mode, sp)]
    with computing():
        x = _inputs(**GPT_LAYER, tensor_parallel=t)
        ours = float(layer_activation_bytes(x, jnp.asarray(mode), jnp.asarray(float(sp))))
    assert ours == pytest.approx(formula, rel=1e-12)


def test_flash_attention_drops_the_score_activations():
    with computing():
        x = _inputs(**{**GPT_LAYER, "flash_attention": 1}, tensor_parallel=2)
        ours = float(layer_activation_bytes(x, jnp.asarray(0), jnp.asarray(0.0)))
    assert ours == pytest.approx(2048 * 2 * 4096 * (10 + 24 / 2), rel=1e-12)


def test_memory_total_by_hand():
    # Model state: (4 * 12 h^2 + V h) / t = 12,845,056 parameters x 16 B
    # (bf16 weights and gradients 4 + fp32 Adam 12) = 205,520,896 B.
    # Activations of the first stage: min(m, p) = 2 micro-batches x 4 layers x
    # s b h (10 + 24 / t) (flash: no score term) = 8 * 16 * 1,048,576, plus the
    # embedding dropout mask, s b h x 2 micro-batches: 136,314,880 B.
    out = run()
    assert out["model_state_gb_per_gpu"] == approx(205_520_896 / 1e9)
    assert out["activation_gb_per_gpu"] == approx(136_314_880 / 1e9)
    assert out["memory_gb_per_gpu"] == approx((205_520_896 + 136_314_880) / 1e9)
    # ZeRO-1 over d = 2 (16 GPUs): the 12 optimizer bytes are halved: 4 + 6 = 10 B.
    assert run(num_gpus=16, zero_stage=1)["model_state_gb_per_gpu"] == approx(
        12_845_056 * 10 / 1e9)
    # Interleaved, v = 2: activations x (1 + (p - 1) / (p v)) = 1.25.
    assert run(virtual_stages=2)["activation_gb_per_gpu"] == approx(1.25 * 136_314_880 / 1e9)


def test_full_recompute_holds_one_layer_while_recomputing():
    # 2 micro-batches x 4 layers x 2 s b h (layer inputs) + one layer's full
    # activations s b h (10 + 24 / t) + embedding mask 2 s b h.
    sbh = 1024 * 1024
    assert run(recompute=2)["activation_gb_per_gpu"] == approx(
        (2 * 4 * 2 * sbh + 16 * sbh + 2 * sbh) / 1e9)


def test_layout_that_does_not_fit_is_invalid_and_says_by_how_much():
    out = run(gpu_memory_gb=0.3)
    assert not out["valid_layout"] and not out["fits_in_memory"]
    assert np.isnan(out["step_time_ms"]) and out["regime"] == "invalid"
    need = out["memory_gb_per_gpu"]
    assert need == pytest.approx(0.341835776, rel=1e-12)
    verdict = REFINED.verdict({**TOY, "gpu_memory_gb": 0.3}, out)
    assert verdict.startswith("invalid layout -- does not fit in memory by 0.0 GB")
    big = {**REFINED.defaults, "micro_batch": 16, "recompute": 0, "flash_attention": 0}
    out = as_dicts(REFINED, jaxmodel.evaluate(REFINED, x64=True, **big))
    verdict = REFINED.verdict(big, out)
    over = out["memory_gb_per_gpu"] - REFINED.defaults["gpu_memory_gb"]
    assert not out["valid_layout"] and over > 0
    assert f"does not fit in memory by {over:.1f} GB" in verdict


@pytest.mark.parametrize("changes, words", [
    # 8 layers over 2 x 3 chunks is an uneven but valid split (issue 11); 4 layers
    # cannot fill 6 chunks.
    (dict(num_layers=4, virtual_stages=3), "virtual chunks"),
    (dict(num_heads=6, num_kv_heads=6), "attention heads do not split"),
    (dict(virtual_stages=2, gradient_accum_steps=3), "multiple of"),
    (dict(num_heads=8, num_kv_heads=3), "key/value heads"),
    (dict(num_gpus=4), "more than the 4 available"),
])
def test_malformed_layouts(changes, words):
    out = run(**changes)
    assert not out["valid_layout"] and np.isnan(out["step_time_ms"])
    assert words in REFINED.verdict({**TOY, **changes}, out)


# --- properties, jit / vmap / grad ----------------------------------------------


@pytest.mark.slow
def test_more_bandwidth_is_never_slower():
    for name in ("link_bandwidth_gb_s", "network_bandwidth_gb_s", "hbm_bandwidth_tb_s"):
        values = np.geomspace(0.5, 2000, 25)
        out = jaxmodel.evaluate(REFINED, x64=True, **{name: values})
        assert np.all(np.diff(out.step_time_ms) <= 1e-9), name


@pytest.mark.slow
def test_float32_agrees_with_float64():
    grid = dict(num_gpus=[64, 512, 4096], micro_batch=[1, 2, 4], recompute=[0, 1, 2])
    lo = jaxmodel.evaluate(REFINED, **grid)
    hi = jaxmodel.evaluate(REFINED, x64=True, **grid)
    assert lo.step_time_ms.dtype == np.float32
    np.testing.assert_allclose(lo.step_time_ms, hi.step_time_ms, rtol=1e-5)
    np.testing.assert_array_equal(lo.tokens_per_step, hi.tokens_per_step)


def _step(x: RefinedInputs):
    return REFINED.apply(x).step_time_ms


# Every program below is jitted, with the short programs' XLA options (as
# jaxmodel compiles one configuration): the refined model run op by op, and
# its gradient, took 12 minutes of the suite; each gradient program takes a
# minute to compile even so, so the test compiles one.
def _jit(f):
    return jax.jit(f, compiler_options=quick_compile(True))


_jit_step = _jit(_step)
_jit_grad = _jit(jax.grad(_step))


@pytest.mark.slow
def test_jit_vmap_and_grad():
    with computing():
        x = _inputs(num_gpus=16)
        g = _jit_grad(x)
        assert all(np.isfinite(float(v)) for v in g)
        # d step / d matmul efficiency < 0, d step / d bandwidth < 0.
        assert float(g.matmul_efficiency) < 0 and float(g.link_bandwidth_gb_s) < 0
        # Central finite difference in float64.
        eps = 1e-3
        up = _jit_step(x._replace(network_bandwidth_gb_s=x.network_bandwidth_gb_s + eps))
        down = _jit_step(x._replace(network_bandwidth_gb_s=x.network_bandwidth_gb_s - eps))
        assert float(g.network_bandwidth_gb_s) == pytest.approx(
            float(up - down) / (2 * eps), rel=1e-5)
        # vmap over a batch equals the loop, and each row's gradient is its own
        # (a central difference at each row): no row sees another.
        bw = jnp.array([50.0, 100.0, 400.0])
        batch = jax.tree.map(lambda v: jnp.broadcast_to(v, bw.shape), x)._replace(
            link_bandwidth_gb_s=bw)
        steps = _jit(jax.vmap(_step))(batch)
        for i in range(3):
            row = x._replace(link_bandwidth_gb_s=bw[i])
            assert float(steps[i]) == pytest.approx(float(_jit_step(row)), rel=1e-12)
            up = _jit_step(row._replace(link_bandwidth_gb_s=bw[i] + eps))
            down = _jit_step(row._replace(link_bandwidth_gb_s=bw[i] - eps))
            assert float(_jit_grad(row).link_bandwidth_gb_s) == pytest.approx(
                float(up - down) / (2 * eps), rel=1e-5, abs=1e-9)


@pytest.mark.slow
def test_grad_finite_at_invalid_layouts():
    with computing():
        for changes in (dict(num_gpus=4), dict(gpu_memory_gb=0.01), dict(num_layers=1)):
            x = _inputs(**changes)
            assert np.isnan(float(_jit_step(x)))
            g = _jit_grad(x)
            assert all(np.isfinite(float(v)) for v in g), changes


# --- the command line -----------------------------------------------------------


@pytest.mark.slow
def test_eval_refined_through_the_cli():
    result = runner.invoke(app, ["eval", "--model", "refined", "--no-profile"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["model"] == REFINED.description
    assert doc["inputs"] == {f.name: (int(f.default) if f.integer else f.default)
                             for f in REFINED.inputs}
    assert doc["outputs"]["valid_layout"] is True
    assert doc["outputs"]["memory_gb_per_gpu"] > 0
    assert doc["outputs"]["verdict"]


@pytest.mark.slow
def test_eval_refined_with_presets_and_profile():
    result = runner.invoke(app, ["eval", "--model", "refined", "--gpu", "a100-80gb-sxm",
                                 "--llm", "gpt3-175b", "--num-gpus", "1024",
                                 "--pipeline-parallel", "8", "--micro-batch", "1"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["inputs"]["compute_tflops"] == 312.0
    assert doc["inputs"]["hidden_dim"] == 12288 and doc["inputs"]["num_gpus"] == 1024
    assert len(doc["profile"]["eff_vs_bw"]) == 48
    table = runner.invoke(app, ["eval", "--model", "refined", "--format", "table",
                                "--no-profile"])
    assert table.exit_code == 0 and "verdict:" in table.output


def test_refined_option_on_seed_model_is_an_error():
    result = runner.invoke(app, ["eval", "--model", "seed", "--recompute", "2"])
    assert result.exit_code == 2
    assert "options of model 'seed' only" in result.output


@pytest.mark.slow
def test_invariants_on_random_configurations():
    rng = np.random.default_rng(6)
    n = 4000
    grid = {
        "num_gpus": 2 ** rng.integers(0, 13, n),
        "tensor_parallel": 2 ** rng.integers(0, 4, n),
        "pipeline_parallel": 2 ** rng.integers(0, 4, n),
        "virtual_stages": rng.choice([1, 2, 5], n),
        "micro_batch": 2 ** rng.integers(0, 3, n),
        "gradient_accum_steps": 2 ** rng.integers(0, 7, n),
        "recompute": rng.integers(0, 3, n),
        "sequence_parallel": rng.integers(0, 2, n),
        "zero_stage": rng.integers(0, 2, n),
        "flash_attention": rng.integers(0, 2, n),
        "dp_overlap": rng.uniform(0, 1, n),
        "network_bandwidth_gb_s": rng.uniform(5, 100, n),
        "gpu_memory_gb": rng.choice([40, 80, 192], n),
    }
    out = jaxmodel.evaluate(REFINED, x64=True, **grid)
    ok = out.valid_layout
    assert 0.05 < ok.mean() < 0.95  # both kinds are exercised
    assert np.all(np.isnan(out.step_time_ms[~ok]))
    step, compute = out.step_time_ms[ok], out.compute_time_ms[ok]
    assert np.all(step >= compute)
    assert np.all((out.mfu_percent[ok] > 0) & (out.mfu_percent[ok] <= 100))
    assert np.all(out.hfu_percent[ok] >= out.mfu_percent[ok] - 1e-9)
    np.testing.assert_allclose(out.comm_fraction_percent[ok] + out.bubble_fraction_percent[ok]
                               + out.scaling_efficiency_percent[ok], 100.0, rtol=1e-9)
    assert np.all(out.memory_gb_per_gpu[ok] <= grid["gpu_memory_gb"][ok])
    assert np.all(out.dp_allreduce_ms[ok] <= out.dp_allreduce_raw_ms[ok] + 1e-9)
    assert np.all(out.recompute_ms[ok] <= compute)
