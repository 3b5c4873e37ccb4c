"""The refined model's 2026 terms (issue 11), each against a hand derivation.

The configuration is ``test_refined.TOY`` (one node of 8 GPUs, t = 4, p = 2,
d = 1, a toy GPT layer h = 1024, s = 1024, 1e14 FLOP/s, 1e12 B/s HBM, 1e11 B/s
NVLink, 1e10 B/s network, efficiencies 1, latencies 0, the 2026 terms off) with
one new term switched on at a time.  Recurring hand values (float64):

* one layer's weight GEMMs on one GPU, forward: 2 s b 12 h^2 / t =
  6,442,450,944 FLOP -> 64.42450944 us at 1e14 FLOP/s (dgrad and wgrad the same);
* attention forward 4 b s^2 h / t = 1,073,741,824 FLOP -> 10.73741824 us;
* memory-bound forward bytes 22 s b h + 4 s b f / t = 27,262,976 B -> 27.262976 us
  (backward twice);
* per micro-batch, the last stage (4 layers and the logits): 1.269825536 ms;
  m = 4 micro-batches; TP all-reduce per layer 4 x 31.45728 us.
"""

import numpy as np
import pytest
from test_refined import TOY, WGRAD_QKV_US, WGRAD_UP_US

import jaxmodel
from jaxmodel.api import as_dicts
from jaxmodel.models.refined import REFINED, layer_gemm_shapes, layer_weight_params
from jaxmodel.precision import computing

GEMM_FWD_US = 64.42450944
ATTN_FWD_US = 10.73741824
BYTES_FWD_US = 27.262976
LOGIT_FWD_US = 5.36870912  # 2 s b h V / t = 536,870,912 FLOP
P_GPU = 12_845_056  # (4 x 12 h^2 + V h) / t parameters on a GPU of the first stage
LAYER_P = 3_145_728  # 12 h^2 / t
# The QKV and first feed-forward weight gradients a layer and micro-batch, beside
# which the backward TP collectives of those column-parallel GEMMs run.
WGRAD_US = WGRAD_QKV_US + WGRAD_UP_US


def run(**changes) -> dict:
    return as_dicts(REFINED, jaxmodel.evaluate(REFINED, x64=True, **{**TOY, **changes}))


def approx(x):
    return pytest.approx(x, rel=1e-10)


# --- context parallelism -----------------------------------------------------------


def test_context_parallel_ring_exposes_what_attention_cannot_hide():
    # t4 c2 p2 on 16 GPUs (d = 1); NVLink slowed to 1e10 B/s so the ring shows.
    # K and V of the local chunk: 2 x 2 B x (s / c = 512) x h x (kv / a = 1) / t
    # = 524,288 B; one hop 52.4288 us (t c = 8 <= 8 GPUs a node: NVLink).
    # Attention per GPU halves with c: 5.36870912 us forward, 10.73741824 backward.
    # c - 1 = 1 hop forward (K, V), 2 x 524,288 B backward (K, V and dK, dV):
    # exposed (52.4288 - 5.36870912) + (104.8576 - 10.73741824) = 141.18027264 us
    # per layer; 4 layers x 4 micro-batches.
    out = run(num_gpus=16, context_parallel=2, link_bandwidth_gb_s=10)
    assert out["cp_comm_ms"] == approx(16 * 141.18027264e-3)
    assert out["valid_layout"] and out["tokens_per_step"] == 4 * 1024


def test_ulysses_all_to_all_context_parallelism():
    # t4 c2 p2 on 16 GPUs, NVLink at 1e10 B/s.  Per layer, forward and backward,
    # an all-to-all of Q (2 B x s / c = 512 x h / t = 262,144 B), K and V (524,288 B)
    # and the output (262,144 B): 1,048,576 B, half of it to the one peer in the
    # node: 52.4288 us, twice a layer; 4 layers x 4 micro-batches.
    out = run(num_gpus=16, context_parallel=2, link_bandwidth_gb_s=10, cp_comm=2)
    assert out["cp_comm_ms"] == approx(16 * 2 * 52.4288e-3)
    # Full recompute repeats the forward's.
    again = run(num_gpus=16, context_parallel=2, link_bandwidth_gb_s=10, cp_comm=2,
                recompute=2)
    assert again["cp_comm_ms"] == approx(16 * 3 * 52.4288e-3)
    # c = 4 cannot split the 2 heads of a tensor-parallel rank; the ring can.
    assert not run(num_gpus=16, context_parallel=4, tensor_parallel=4, pipeline_parallel=1,
                   cp_comm=2)["valid_layout"]
    assert run(num_gpus=16, context_parallel=4, tensor_parallel=4, pipeline_parallel=1,
               cp_comm=0)["valid_layout"]


def test_context_parallel_all_gather():
    # Llama 3's all-gather of K, V (c x 524,288 B) over the 2 context ranks in a
    # node, 1/2 x 1,048,576 B / 1e10 B/s = 52.4288 us, and the reduce-scatter of
    # their gradients, the same: 104.8576 us a layer, not overlapped.
    out = run(num_gpus=16, context_parallel=2, link_bandwidth_gb_s=10, cp_comm=1)
    assert out["cp_comm_ms"] == approx(16 * 104.8576e-3)


def test_context_parallel_pytorch_all_gather_rotater():
    # PyTorch's context_parallel (cp_comm 3), t4 c2 p2 on 16 GPUs, NVLink at 1e10
    # B/s, 4 of the 8 heads key/value heads: the SDPA call gets K, V repeated to
    # the 8 query heads, so the local chunk's K, V are 2 x 2 B x 512 x 1024 / 4 =
    # 524,288 B (the grouped ones, which the ring and Llama 3 move, 262,144 B).
    # Attention per GPU 5.36870912 us forward, 10.73741824 backward, in c = 2
    # blocks: 2.68435456 us forward, (10.73741824 + 0.5 x 5.36870912) / 2 =
    # 6.7108864 us backward (FlashAttention's QK^T recompute).  The all-gather
    # of c x 524,288 B over the 2 ranks in the node, 1/2 x 1,048,576 B / 1e10 =
    # 52.4288 us, overlapped with one block: forward 52.4288 - 2.68435456 =
    # 49.74444544 us; backward again 52.4288 - 6.7108864 = 45.7179136 us, then
    # c = 2 fp32 hops of dK, dV (1,048,576 B, 104.8576 us): the first behind a
    # block (98.1467136 us), the last exposed (104.8576 us).  Per layer
    # 298.46667264 us; 4 layers x 4 micro-batches.
    gqa = dict(num_gpus=16, context_parallel=2, link_bandwidth_gb_s=10, num_kv_heads=4)
    out = run(**gqa, cp_comm=3)
    assert out["cp_comm_ms"] == approx(16 * 298.46667264e-3)
    # Full recompute runs the forward's gather again.
    again = run(**gqa, cp_comm=3, recompute=2)
    assert again["cp_comm_ms"] == approx(16 * (298.46667264 + 49.74444544) * 1e-3)
    # It holds the gathered K, V of a layer, c x 524,288 B, where Llama 3's
    # all-gather holds the grouped c x 262,144 B.
    llama3 = run(**gqa, cp_comm=1)
    assert out["memory_gb_per_gpu"] - llama3["memory_gb_per_gpu"] == pytest.approx(
        2 * 262_144 / 1e9, rel=1e-9)
    # Without context parallelism PyTorch's is not applied: nothing changes.
    assert run(num_kv_heads=4, cp_comm=3) == run(num_kv_heads=4, cp_comm=0)


def test_context_parallel_divides_activations_and_reduces_gradients_over_d_c():
    one, two = run(), run(num_gpus=16, context_parallel=2)
    # Activations (everything but the optimizer and weights) halve with c.
    assert two["activation_gb_per_gpu"] == approx(one["activation_gb_per_gpu"] / 2)
    assert two["model_state_gb_per_gpu"] == approx(one["model_state_gb_per_gpu"])
    # Gradients are all-reduced over d x c = 2 ranks (stride t = 4, 2 in the node):
    # 2 B x P_GPU x 2 x 1/2 / 1e11 B/s.
    assert two["dp_allreduce_raw_ms"] == approx(2 * P_GPU * 1e-11 * 1e3)
    # Sequence length must split into 2 c chunks for the causal balance.
    bad = run(num_gpus=16, context_parallel=2, seq_length=1026)
    assert not bad["valid_layout"]
    assert "2 x 2 chunks" in REFINED.verdict({**TOY, "num_gpus": 16, "context_parallel": 2,
                                              "seq_length": 1026}, bad)


# --- sharded data parallelism ------------------------------------------------------


def test_zero_stage_memory():
    # 16 GPUs: d = 2.  Bytes per parameter (bf16 weights 2, gradient buffer 2 in
    # TOY, optimizer 12): ZeRO-0 16, ZeRO-1 2 + 2 + 12/2 = 10, ZeRO-2
    # 2 + 14/2 = 9, ZeRO-3 16/2 = 8 plus two gathered layers' weights and one
    # layer's gradients, (2 x 2 + 2) x 12 h^2 / t.
    states = {z: run(num_gpus=16, zero_stage=z)["model_state_gb_per_gpu"] for z in range(4)}
    assert states[0] == approx(16 * P_GPU / 1e9)
    assert states[1] == approx(10 * P_GPU / 1e9)
    assert states[2] == approx(9 * P_GPU / 1e9)
    assert states[3] == approx((8 * P_GPU + 6 * LAYER_P) / 1e9)
    # Hybrid sharding over 1 of the 2 ranks: nothing sharded.
    assert run(num_gpus=16, zero_stage=3, zero_shard_degree=1)["model_state_gb_per_gpu"] \
        == approx((16 * P_GPU + 6 * LAYER_P) / 1e9)
    # The gradient buffer's precision: fp32 (Megatron-LM's main_grad), 18 bytes.
    assert run(grad_buffer_bytes=4)["model_state_gb_per_gpu"] == approx(18 * P_GPU / 1e9)


def test_fsdp_traffic():
    # ZeRO-3 over z = d = 2 ranks in the node: per micro-batch each of the 4 layers
    # gathers its 2 B x LAYER_P weights twice (forward, backward) and
    # reduce-scatters its gradients once; each pass over the 4 layers is
    # 1/2 x 2 x 4 LAYER_P / 1e11 B/s = 125.82912 us.  The stage's embedding
    # (V h / t = 262,144 parameters), the root unit, is gathered once (kept for
    # the backward pass) and reduce-scattered once: 1/2 x 2 x 262,144 / 1e11 =
    # 2.62144 us each.
    out = run(num_gpus=16, zero_stage=3)
    assert out["dp_allreduce_raw_ms"] == approx(4 * (3 * 125.82912 + 2 * 2.62144) * 1e-3)
    # dp_overlap = 0 in TOY: everything exposed, and the edges: the root's gather
    # and reduce-scatter and the first layer's gather (125.82912 / 4) again.
    assert out["dp_allreduce_ms"] == approx(
        4 * (125.82912 + 2 * 125.82912 + 2.62144 + 125.82912 / 4 + 2.62144) * 1e-3)
    # Invalid shard degree: 3 does not divide d c = 2.
    bad = run(num_gpus=16, zero_stage=3, zero_shard_degree=3)
    assert not bad["valid_layout"]


def test_fsdp_root_unit_is_exposed_whatever_the_overlap():
    # dp_overlap = 1: each layer's gather (31.45728 us) hides behind the previous
    # layer's compute and the backward pass hides the gathers and reduce-scatters
    # (251.65824 us against ~600 us of backward).  Left per micro-batch: the
    # root's gather (2.62144 us), which nothing precedes, the first layer's
    # gather (31.45728 us), and the root's reduce-scatter (2.62144 us), which
    # waits for the input embedding's gradient, the last of the backward pass.
    out = run(num_gpus=16, zero_stage=3, dp_overlap=1.0)
    assert out["dp_allreduce_ms"] == approx(4 * (2.62144 + 31.45728 + 2.62144) * 1e-3)


def test_compute_slowed_by_the_collectives_it_hides():
    # ZeRO-3 over d = 2, dp_overlap = 1 (test_fsdp_root_unit_is_exposed_whatever_
    # the_overlap): raw 4 x (3 x 125.82912 + 2 x 2.62144) = 1530.92096 us, exposed
    # 4 x (2.62144 + 31.45728 + 2.62144) = 146.80064 us, so 1384.12032 us hidden
    # behind compute.  Compute 1.5 x slower beside it does 1 / 1.5 of its work
    # there: the step grows by 0.5 / 1.5 x 1384.12032 = 461.37344 us.
    def extra(**changes):
        on = run(overlap_slowdown=0.5, **changes)
        off = run(overlap_slowdown=0.0, **changes)
        assert on["dp_allreduce_ms"] == off["dp_allreduce_ms"]
        assert on["compute_time_ms"] - off["compute_time_ms"] == approx(
            on["step_time_ms"] - off["step_time_ms"])
        return on["step_time_ms"] - off["step_time_ms"]

    assert extra(num_gpus=16, zero_stage=3, dp_overlap=1.0) == approx(0.46137344)
    # Nothing hidden, nothing slowed: dp_overlap 0 exposes every collective, and
    # d = 1 has none.
    assert extra(num_gpus=16, zero_stage=3) == 0.0
    assert extra(dp_overlap=1.0) == 0.0
    # Four GPUs a node: the two data-parallel ranks (stride t = 4) sit on two
    # nodes and the collectives stream at the NIC's 10 GB/s, a tenth of NVLink:
    # the compute slows 0.5 x 0.1 = 0.05, a hidden second costs 0.05 / 1.05.
    out = run(num_gpus=16, zero_stage=3, dp_overlap=1.0, gpus_per_node=4)
    hidden = out["dp_allreduce_raw_ms"] - out["dp_allreduce_ms"]
    assert hidden > 1.0
    assert extra(num_gpus=16, zero_stage=3, dp_overlap=1.0, gpus_per_node=4) == approx(
        hidden / 21)


def test_fsdp2_copies_around_the_collectives():
    # ZeRO-3 over d = 2, bf16, grad_buffer_bytes 2, HBM 1e12 B/s; per micro-batch
    # the 4 layers (4 LAYER_P = 12,582,912 parameters) are gathered twice and the
    # root (262,144) once, each copy-out reading and writing 2 bytes a weight:
    # 2 x (2 x 2 x 12,582,912 + 2 x 262,144) = 101,711,872 B; every gradient
    # copied into the reduce-scatter input, read 2 and write 2 bytes:
    # 4 x 12,845,056 = 51,380,224 B.  153,092,096 B x m = 4 -> 612.368384 us.
    def extra(**changes):
        on, off = run(fsdp_copies=1, **changes), run(fsdp_copies=0, **changes)
        assert on["memory_bound_ms"] - off["memory_bound_ms"] == approx(
            on["compute_time_ms"] - off["compute_time_ms"])
        return on["step_time_ms"] - off["step_time_ms"]

    assert extra(num_gpus=16, zero_stage=3) == approx(0.612368384)
    # Kept gathered: each once a step, the layers gathered once:
    # 2 x (2 x 12,582,912 + 2 x 262,144) + 51,380,224 = 102,760,448 B.
    assert extra(num_gpus=16, zero_stage=3, fsdp_keep_gathered=1) == approx(0.102760448)
    # Nothing to gather over one rank (d = 1), nor without ZeRO-3.
    assert extra(zero_stage=3) == 0.0
    assert extra(num_gpus=16, zero_stage=1) == 0.0


def test_foreach_adamw_and_clipping_passes():
    # PyTorch's foreach AdamW, one HBM pass per _foreach op over fp32 p, g, m, v
    # and the sqrt temporary: mul_(p) 8, lerp_(m, g) 12, mul_(v) 8,
    # addcmul_(v, g, g) 12, sqrt(v) 8, div_ 8, add_ 8, addcdiv_(p, m, sq) 16 =
    # 80 B; clip_grad_norm_(foreach): _foreach_norm(g) 4 + _foreach_mul_(g) 8 =
    # 12 B.  92 against the fused pass's 28: 64 B more per parameter of the
    # optimizer's shard.  Without ZeRO (d = 1) that is P_GPU = 12,845,056
    # parameters: 64 x 12,845,056 B / 1e12 B/s = 822.083584 us, once a step,
    # memory-bound on the compute stream.
    def extra(**changes):
        on, off = run(foreach_optimizer=1, **changes), run(foreach_optimizer=0, **changes)
        assert on["memory_bound_ms"] - off["memory_bound_ms"] == approx(
            on["compute_time_ms"] - off["compute_time_ms"])
        return on["step_time_ms"] - off["step_time_ms"]

    assert extra() == approx(0.822083584)
    # ZeRO-1 and FSDP over d = 2 ranks: each GPU steps half the parameters.
    assert extra(num_gpus=16, zero_stage=1) == approx(0.411041792)
    assert extra(num_gpus=16, zero_stage=3) == approx(0.411041792)


def test_zero1_param_gather_overlap():
    # ZeRO-1 over d = 2: reduce-scatter + all-gather, each 1/2 x 2 P_GPU / 1e11 B/s
    # (128.45056 us); param_gather_overlap = 1 hides the gather behind the
    # forward pass of a micro-batch (415.06832384 us on the last stage: 4 layers x
    # (64.42450944 + 10.73741824 + 27.262976) + 5.36870912 for the logits).
    base = run(num_gpus=16, zero_stage=1)
    assert base["dp_allreduce_ms"] == approx(2 * 128.45056e-3)
    hidden = run(num_gpus=16, zero_stage=1, param_gather_overlap=1.0)
    assert hidden["dp_allreduce_ms"] == approx(128.45056e-3)


def test_interleaved_chunks_gather_and_reduce_one_after_another():
    # ZeRO-1 over d = 2 in the node with NVLink at 1e10 B/s: reduce-scatter and
    # all-gather 1/2 x 2 B x 2 P_GPU / 1e10 = 1284.5056 us each; dp_overlap 0 leaves
    # the reduce-scatter exposed, param_gather_overlap 1 hides the gather behind
    # forward passes.  One chunk (v = 1): behind the stage's forward pass of one
    # micro-batch, 415.06832384 us (test_zero1_param_gather_overlap).
    dp = dict(num_gpus=16, zero_stage=1, param_gather_overlap=1.0, link_bandwidth_gb_s=10.0)
    gather, stage_f = 1284.5056, 415.06832384
    one = run(**dp)
    assert one["dp_allreduce_ms"] * 1e3 == approx(gather + gather - stage_f)
    # Two chunks (v = 2, interleaved 1F1B): each gathers its half of the weights
    # before its first forward pass; chunk 1's first pass comes p = 2 chunk passes
    # (207.53416192 us each) after chunk 0's, so the queue hides (1 x 2 + 1) chunk
    # passes of the whole, or the last chunk's half beyond its own pass:
    # max(642.2528 - 207.53416192, 1284.5056 - 3 x 207.53416192) = 661.90311424.
    chunk_f = stage_f / 2
    two = run(**dp, virtual_stages=2)
    exposed = max(gather / 2 - chunk_f, gather - 3 * chunk_f)
    assert exposed == pytest.approx(661.90311424)
    assert two["dp_allreduce_ms"] * 1e3 == approx(gather + exposed)
    # The reduce-scatter the same way behind the backward passes, dp_overlap 1 and
    # param_gather_overlap 0.  The backward window of a micro-batch is the backward
    # share of a layer's FLOPs, 1 - (GEMM + attention forward) / (3 GEMM + 3.5
    # attention), of the last stage's 1,269.825536 us: 856.393966 us; a chunk's half.
    fwd = GEMM_FWD_US + ATTN_FWD_US
    backward = (1 - fwd / (3 * GEMM_FWD_US + 3.5 * ATTN_FWD_US)) * 1269.825536
    assert backward == pytest.approx(856.393966, abs=1e-6)
    dp = dict(dp, param_gather_overlap=0.0, dp_overlap=1.0)
    assert run(**dp)["dp_allreduce_ms"] * 1e3 == approx(gather + gather - backward)
    chunk_b = backward / 2
    exposed = max(gather / 2 - chunk_b, gather - 3 * chunk_b)
    # max(642.2528 - 428.19698, 1284.5056 - 1284.59095): the last chunk's half shows.
    assert exposed == pytest.approx(214.0558169, abs=1e-6)
    assert run(**dp, virtual_stages=2)["dp_allreduce_ms"] * 1e3 == approx(gather + exposed)


# --- Precision ----------------------------------------------------------------------

# Every low precision at 2 x the bf16 peak and the same ceiling (1.0), so the
# three passes of the layer GEMMs, 3 x 64.42450944 us, halve.
LOW_AT_TWICE = dict(fp8_peak_tflops=200, mxfp8_peak_tflops=200, fp4_peak_tflops=200,
                    fp8_matmul_efficiency=1.0, fp4_matmul_efficiency=1.0)


# Per-tensor FP8's casts: amax read, cast read, FP8 + transpose written.  The
# block-scaled and NVFP4 casts take that time times their measured quantisation
# time over FP8's on the same tensors (Transformer Engine's GEMM tutorial, B300:
# autocast minus pre-quantized ms of one layer, FP8 9.147 - 6.812, MXFP8 8.984 -
# 7.161, NVFP4 6.453 - 3.764), to the 3 decimals the model keeps.
FP8_CAST = 2 + 2 + 1 + 1


@pytest.mark.parametrize("precision, cast_bytes", [
    (1, FP8_CAST),
    (2, round(FP8_CAST * (8.984 - 7.161) / (9.147 - 6.812), 3)),
    (3, round(FP8_CAST * (6.453 - 3.764) / (9.147 - 6.812), 3)),
])
def test_precision_halves_layer_gemms_and_adds_its_casts(precision, cast_bytes):
    # Per layer and micro-batch the casts touch (forward inputs s (2 h + h / t
    # + f / t) = 3,407,872 + backward output gradients s (3 h / t + 2 h + f / t)
    # = 3,932,160) = 7,340,032 elements, 7.340032 us per byte at 1e12 B/s; the
    # weights are cast once a step, 4 layers x 12 h^2 / t = 12,582,912 elements.
    off = run(**LOW_AT_TWICE)
    on = run(precision=precision, **LOW_AT_TWICE)
    delta = 16 * (-3 * GEMM_FWD_US / 2 + 7.340032 * cast_bytes) + 12.582912 * cast_bytes
    assert on["compute_time_ms"] - off["compute_time_ms"] == approx(delta * 1e-3)
    # MFU stays against the bf16 peak: model FLOPs / (GPUs x step x 1e14).
    model_flops = 4 * (8 * 3 * (25_769_803_776 + 4_294_967_296) + 3 * 2_147_483_648)
    assert on["mfu_percent"] == approx(100 * model_flops / (8 * on["step_time_ms"] * 1e-3 * 1e14))
    # Low-precision copies of the layer weights, 2 B each (FP8 and its transpose).
    assert on["model_state_gb_per_gpu"] - off["model_state_gb_per_gpu"] == approx(
        2 * 4 * LAYER_P / 1e9)


@pytest.mark.parametrize("precision, cast_bytes", [
    (1, FP8_CAST), (3, round(FP8_CAST * (6.453 - 3.764) / (9.147 - 6.812), 3))])
def test_layers_kept_in_bf16_take_their_share_of_gemms_and_casts_back(precision, cast_bytes):
    # bf16_layers 2 of the 8 layers (NVFP4 recipes keep the last ones in BF16,
    # Megatron-Core's first_last_layers_bf16): the average layer's GEMMs are 3/4
    # at the low precision's rate and 1/4 at bf16's, and 3/4 of the casts remain,
    # so the change the precision made (the test above) is 3/4 as large.
    off = run(**LOW_AT_TWICE)["compute_time_ms"]
    on = run(precision=precision, **LOW_AT_TWICE)["compute_time_ms"]
    kept = run(precision=precision, bf16_layers=2, **LOW_AT_TWICE)["compute_time_ms"]
    delta = 16 * (-3 * GEMM_FWD_US / 2 + 7.340032 * cast_bytes) + 12.582912 * cast_bytes
    assert on - off == approx(delta * 1e-3)
    assert kept - off == approx(0.75 * delta * 1e-3)
    # Every layer in BF16 is BF16; in BF16 the input changes nothing.
    assert run(precision=precision, bf16_layers=8, **LOW_AT_TWICE)["compute_time_ms"] == \
        approx(off)
    assert run(bf16_layers=2, **LOW_AT_TWICE)["compute_time_ms"] == approx(off)


def test_precision_runs_at_its_own_peak_and_ceiling():
    # FP8 at 400 TFLOP/s and a 0.5 ceiling is 200 TFLOP/s: the GEMMs as at
    # LOW_AT_TWICE.  Block-scaled FP8 takes its own peak, NVFP4 its own ceiling.
    base = run(precision=1, **LOW_AT_TWICE)["compute_time_ms"]
    assert run(precision=1, **{**LOW_AT_TWICE, "fp8_peak_tflops": 400,
                               "fp8_matmul_efficiency": 0.5})["compute_time_ms"] == approx(base)
    mx = run(precision=2, **LOW_AT_TWICE)["compute_time_ms"]
    mx_fast = run(precision=2, **{**LOW_AT_TWICE, "mxfp8_peak_tflops": 400})["compute_time_ms"]
    # A quarter of the 3 GEMM passes of 16 layer micro-batches at 200 TFLOP/s.
    assert mx - mx_fast == approx(16 * 3 * GEMM_FWD_US / 4 * 1e-3)
    fp4 = run(precision=3, **LOW_AT_TWICE)["compute_time_ms"]
    fp4_slow = run(precision=3, **{**LOW_AT_TWICE, "fp4_matmul_efficiency": 0.5})
    assert fp4_slow["compute_time_ms"] - fp4 == approx(16 * 3 * GEMM_FWD_US / 2 * 1e-3)


def test_block_scaled_fp8_runs_at_the_fp8_ceiling_times_its_ratio():
    # mxfp8_matmul_ratio 0.8 slows block-scaled FP8's layer GEMMs (3 passes of
    # 16 layer micro-batches, GEMM_FWD_US / 2 each at 200 TFLOP/s) to 1 / 0.8
    # of their time, 0.25 x (16 x 3 x GEMM_FWD_US / 2) more; per-tensor FP8
    # and the casts do not change.
    mx = run(precision=2, **LOW_AT_TWICE)["compute_time_ms"]
    mx_slow = run(precision=2, **{**LOW_AT_TWICE, "mxfp8_matmul_ratio": 0.8})["compute_time_ms"]
    assert mx_slow - mx == approx(0.25 * 16 * 3 * GEMM_FWD_US / 2 * 1e-3)
    fp8 = run(precision=1, **LOW_AT_TWICE)["compute_time_ms"]
    assert run(precision=1, **{**LOW_AT_TWICE, "mxfp8_matmul_ratio": 0.8})[
        "compute_time_ms"] == approx(fp8)


def test_a_precision_the_gpu_lacks_is_invalid():
    out = run(precision=3, fp4_peak_tflops=0)
    assert not out["valid_layout"]
    from jaxmodel.models.refined.validity import layout_reasons
    inputs = {**REFINED.defaults, **TOY, "precision": 3, "fp4_peak_tflops": 0}
    assert "NVFP4" in layout_reasons(inputs, out)[0][0]
    assert run(precision=2, **LOW_AT_TWICE)["valid_layout"]


def test_fp8_is_retired_with_a_pointer_to_precision(tmp_path):
    from typer.testing import CliRunner

    from jaxmodel.cli import app
    from jaxmodel.config import load_config
    from jaxmodel.errors import InputError, SpecError
    from jaxmodel.spec import parse_spec
    with pytest.raises(InputError, match="retired: use precision"):
        run(fp8=1)
    config = tmp_path / "c.json"
    config.write_text('{"fp8": 1}')
    with pytest.raises(InputError, match="retired: use precision"):
        load_config(str(config), REFINED)
    with pytest.raises(SpecError, match="retired: use fp8_peak_tflops"):
        parse_spec('model = "refined"\n[axes]\nfp8_tflops = [1979, 3958]\n')
    done = CliRunner().invoke(app, ["eval", "--model", "refined", "--fp8", "1"])
    assert done.exit_code == 2
    assert "retired: use precision" in done.output and len(done.output.splitlines()) == 1


# --- Full recompute of some layers -----------------------------------------------


def test_recompute_layers_recomputes_the_first_k_of_each_chunk():
    # p = 2, v = 1: chunks of 4 layers; recompute_layers 1 recomputes a quarter.
    out = run(recompute=2, recompute_layers=1)
    # Recompute per layer and micro-batch: FlashAttention's own half forward of
    # the attention (0.5 x 10.73741824 us) and a quarter of the whole forward
    # (GEMMs 64.42450944 + attention 10.73741824 + bytes 27.262976 us); 4 layers
    # x 4 micro-batches.
    assert out["recompute_ms"] == approx(
        16 * (0.5 * ATTN_FWD_US + 0.25 * (GEMM_FWD_US + ATTN_FWD_US + BYTES_FWD_US)) * 1e-3)
    # Tensor-parallel all-reduces: 4 a layer, plus the 2 of the forward again on
    # a quarter of the layers: 4.5 of 31.45728 us, less the two backward ones'
    # time beside the QKV and feed-forward weight gradients; x 16.
    assert out["tp_comm_ms"] == approx(16 * (4.5 * 31.45728 - WGRAD_US) * 1e-3)
    # Activations, in s b h: a quarter of the layers store their input (2), the
    # rest everything (10 + 24 / t = 16): 12.5 a layer x 4 layers x 2 micro-batches
    # in flight, one layer's full activations while recomputing (16), the
    # embedding masks (2).
    sbh = 1024 * 1024
    assert out["activation_gb_per_gpu"] == approx((100 + 16 + 2) * sbh / 1e9)
    # k at least the chunk, or 0: every layer, as before.
    every = run(recompute=2)
    for k in (0, 4, 9):
        assert run(recompute=2, recompute_layers=k)["recompute_ms"] == approx(
            every["recompute_ms"])
    # Without full recompute the input does nothing.
    assert run(recompute=1, recompute_layers=1)["step_time_ms"] == approx(
        run(recompute=1)["step_time_ms"])


# --- CUDA graphs ---------------------------------------------------------------------


def test_cuda_graphs_keep_only_the_gpu_gap_of_the_kernels_they_replay():
    # 60 kernels a layer and micro-batch at 4 us; a graph replays a kernel with a
    # 0.5 us gap (3.4 - 2.9 us, NVIDIA's CUDA graphs blog).  Per layer: the
    # attention's 30 save 3.5 us each; full iteration: all 60.  16 layer
    # micro-batches on the busiest stage (4 layers x m = 4).
    none, layer, full = (run(kernel_overhead_us=4, cuda_graphs=g)["compute_time_ms"]
                         for g in (0, 1, 2))
    assert none - layer == approx(16 * 30 * 3.5e-3)
    assert none - full == approx(16 * 60 * 3.5e-3)
    # Full recompute launches a third of the kernels again, graphed as well.
    none, full = (run(kernel_overhead_us=4, recompute=2, cuda_graphs=g)["compute_time_ms"]
                  for g in (0, 2))
    assert none - full == approx(16 * 80 * 3.5e-3)
    # A kernel overhead below the graph's gap: nothing to save.
    assert run(kernel_overhead_us=0.3, cuda_graphs=2)["compute_time_ms"] == approx(
        run(kernel_overhead_us=0.3)["compute_time_ms"])


# --- GEMM shapes, TP overlap, kernels, cross-entropy --------------------------------


def test_layer_gemm_shapes_cover_the_layer():
    with computing():
        x = REFINED.inputs_type(**{k: np.float64(v) for k, v in
                                   {**REFINED.defaults, **TOY}.items()})
        shapes = layer_gemm_shapes(x)
        total = sum(float(n) * float(k) for n, k in shapes)
        assert total == approx(float(layer_weight_params(x)) / 4)


def test_shape_model_is_never_faster_than_the_ceiling():
    plain, shaped = run(), run(gemm_shape_model=1)
    assert shaped["compute_time_ms"] > plain["compute_time_ms"]


# TOY's four weight GEMMs a layer (2 s b n k at 1e14 FLOP/s, s b = 1024 tokens): QKV
# (n 768, k 1024) 16.10612736 us, the output projection (1024, 256) 5.36870912 us, the
# two feed-forward GEMMs (1024, 1024) 21.47483648 us each; dgrad and wgrad the same.
# One all-reduce 31.45728 us; each all-gather or reduce-scatter half: 15.72864 us,
# 3/4 of it (t = 4 chunks, the first exposed) 11.79648 us to hide.
TP_SHARE_US = 11.79648
PROJ_US = 5.36870912


def test_tp_overlap_hides_each_collective_behind_its_own_gemm():
    # Sequence parallelism (which Megatron's --tp-comm-overlap requires): 4 pairs of a
    # reduce-scatter and an all-gather, 15.72864 us each, 125.82912 us a layer.
    # Forward: the reduce-scatter after the output projection hides only 5.36870912
    # us (that GEMM's time), the other three their 11.79648 us.  Backward (Transformer
    # Engine): the gradient all-gathers behind the projection's and the second
    # feed-forward GEMM's dgrad (5.36870912 + 11.79648), the input-gradient
    # reduce-scatters whole behind QKV's and the first feed-forward GEMM's wgrad (2 x
    # 15.72864: the bulk overlap is not split in t chunks).  The re-gathers of the QKV
    # and feed-forward inputs (15.72864 us each) hide whole behind their dgrad.
    # Hidden 40.75814912 + 48.62246912 = 89.38061824 us: 36.44850176 exposed a layer,
    # 4 layers x 4 micro-batches.
    forward = 3 * TP_SHARE_US + PROJ_US
    backward = PROJ_US + TP_SHARE_US + 2 * 15.72864
    assert forward + backward == pytest.approx(89.38061824)
    sp = dict(sequence_parallel=1)
    assert run(tp_overlap=1.0, **sp)["tp_comm_ms"] == approx(
        16 * (125.82912 - forward - backward) * 1e-3)
    # Half the overlap: 5.89824 us a collective to hide, the projection still its
    # 5.36870912; the backward reduce-scatters still whole.
    half = 3 * TP_SHARE_US / 2 + PROJ_US + PROJ_US + TP_SHARE_US / 2 + 2 * 15.72864
    assert run(tp_overlap=0.5, **sp)["tp_comm_ms"] == approx(16 * (125.82912 - half) * 1e-3)
    # Full recompute: six pairs (188.74368 us), the forward pairs hide twice.
    assert run(tp_overlap=1.0, recompute=2, **sp)["tp_comm_ms"] == approx(
        16 * (188.74368 - 2 * forward - backward) * 1e-3)
    # Without sequence parallelism the backward has no all-gathers; its two all-reduces
    # (31.45728 us) run beside the weight gradients (16.10612736, 21.47483648).
    assert run(tp_overlap=1.0)["tp_comm_ms"] == approx(
        16 * (125.82912 - forward - WGRAD_US) * 1e-3)


def test_async_tp_leaves_the_backward_reduce_scatters_and_sums_the_partials():
    # PyTorch's async TP (tp_overlap_kind 1), with sequence parallelism as torchtitan
    # runs it: the backward reduce-scatters of the summed QKV and feed-forward input
    # gradients are not fused: hidden forward 3 x 11.79648 + 5.36870912, backward
    # 5.36870912 + 11.79648 = 57.92333824 us.  Each forward fused reduce-scatter then
    # sums its t = 4 partial blocks: 2 B x 1024 x 1024 x (1 + 1/4) = 2,621,440 B at
    # 1e12 B/s = 2.62144 us, twice a layer.  DTensor TP keeps the gathered input: no
    # re-gathers.
    async_tp = dict(tp_overlap_kind=1, sequence_parallel=1)
    hidden = 4 * TP_SHARE_US + 2 * PROJ_US
    assert hidden == pytest.approx(57.92333824)
    exposed = 125.82912 - hidden + 2 * 2.62144
    assert run(tp_overlap=1.0, **async_tp)["tp_comm_ms"] == approx(16 * exposed * 1e-3)
    # Full recompute: the recomputed forward hides (and sums) again.
    again = 188.74368 - (hidden + 3 * TP_SHARE_US + PROJ_US) + 4 * 2.62144
    assert run(tp_overlap=1.0, recompute=2, **async_tp)["tp_comm_ms"] == approx(
        16 * again * 1e-3)
    # Without overlap DTensor hides nothing, while Megatron (kind 0) runs its backward
    # reduce-scatters (15.72864 us) beside the weight gradients and its re-gathers
    # beside the input gradients.
    assert run(**async_tp)["tp_comm_ms"] == approx(16 * 125.82912e-3)
    assert run(sequence_parallel=1)["tp_comm_ms"] == approx(
        16 * (125.82912 - 2 * 15.72864) * 1e-3)


def test_fp8_sequence_parallel_all_gathers_move_the_quantized_tensor():
    # Sequence parallelism: each of the 4 all-reduce equivalents a layer is a bf16
    # reduce-scatter (15.72864 us: 2 B x 1024 x 1024 over t = 4 at 1e11 B/s, 3/4 of it
    # sent) and an all-gather; 2 of them forward (the QKV and first feed-forward input),
    # 2 backward (the projection's and second feed-forward's output gradient).
    # FP8 GEMMs at 1e14 FLOP/s (dgrad and wgrad QKV 16.10612736 us, first feed-forward
    # 21.47483648) hide the backward re-gathers of their inputs whole
    # (test_backward_regathers_of_column_parallel_inputs_hide_behind_their_dgrad), and
    # the two backward reduce-scatters whole behind the weight gradients: 2 rs less.
    rs = 15.72864
    assert run(sequence_parallel=1)["tp_comm_ms"] == approx(16 * (125.82912 - 2 * rs) * 1e-3)

    def run8(**changes):
        return run(fp8_peak_tflops=100, mxfp8_peak_tflops=100, fp8_matmul_efficiency=1.0,
                   **changes)

    # Per-tensor FP8: both all-gathers 1 B an element, half the bf16 time.
    fp8 = 4 * (rs + rs / 2)
    assert fp8 == pytest.approx(94.37184)
    assert run8(sequence_parallel=1, precision=1)["tp_comm_ms"] == approx(
        16 * (fp8 - 2 * rs) * 1e-3)
    # Without sequence parallelism the all-reduce stays bf16; the two backward ones
    # (31.45728 us) run beside the weight gradients.
    assert run8(precision=1)["tp_comm_ms"] == approx(16 * (125.82912 - WGRAD_US) * 1e-3)
    # Block-scaled FP8: forward row-wise data and a scale per 32 (1 + 1/32 B), backward
    # row- and column-wise (2 + 2/32 B): 2 (rs + 8.11008) + 2 (rs + 16.22016).
    block = 2 * (rs + rs * (1 + 1 / 32) / 2) + 2 * (rs + rs * (1 + 1 / 32))
    assert block == pytest.approx(111.57504)
    assert run8(sequence_parallel=1, precision=2)["tp_comm_ms"] == approx(
        16 * (block - 2 * rs) * 1e-3)
    # Full recompute: the two recomputed forward pairs gather in FP8 too.
    assert run8(sequence_parallel=1, precision=1, recompute=2)["tp_comm_ms"] == approx(
        16 * (6 * (rs + rs / 2) - 2 * rs) * 1e-3)
    assert run8(sequence_parallel=1, precision=2, recompute=2)["tp_comm_ms"] == approx(
        16 * (4 * (rs + rs * (1 + 1 / 32) / 2) + 2 * (rs + rs * (1 + 1 / 32)) - 2 * rs) * 1e-3)


def test_backward_regathers_of_column_parallel_inputs_hide_behind_their_dgrad():
    # Sequence parallelism, NVLink slowed to 1e10 B/s: each bf16 reduce-scatter and
    # all-gather 157.2864 us (2 B x 1024 x 1024, 3/4 of it sent), 4 pairs a layer.
    # Transformer Engine / Megatron-Core save the QKV and first feed-forward inputs as
    # sequence shards and gather them again in backward (2 more all-gathers), each
    # launched beside its own dgrad GEMM (QKV 16.10612736 us, first feed-forward
    # 21.47483648): exposed 2 x 157.2864 - 37.58096384 = 276.99183616 us a layer more,
    # with or without tp_overlap (here 0).  The two backward reduce-scatters run
    # beside the weight-gradient GEMMs of the same two blocks (the same times), which
    # hide 37.58096384 us of them.
    ag = 157.2864
    pairs = 4 * 2 * ag
    more = 2 * ag - (16.10612736 + 21.47483648)
    assert more == pytest.approx(276.99183616)
    slow = dict(link_bandwidth_gb_s=10)
    assert run(sequence_parallel=1, **slow)["tp_comm_ms"] == approx(
        16 * (pairs + more - WGRAD_US) * 1e-3)
    # PyTorch DTensor TP (kind 1) keeps the gathered input, and runs the backward
    # reduce-scatters after their GEMMs.  Without sequence parallelism the input is
    # whole on every rank: no re-gather, and each backward all-reduce (314.5728 us)
    # runs beside its weight gradient.
    assert run(sequence_parallel=1, tp_overlap_kind=1, **slow)["tp_comm_ms"] == approx(
        16 * pairs * 1e-3)
    assert run(**slow)["tp_comm_ms"] == approx(16 * (pairs - WGRAD_US) * 1e-3)
    # Full recompute: six pairs, still one re-gather per column-parallel GEMM.
    assert run(sequence_parallel=1, recompute=2, **slow)["tp_comm_ms"] == approx(
        16 * (6 * 2 * ag + more - WGRAD_US) * 1e-3)
    # Per-tensor FP8 (GEMMs at 2e14 FLOP/s: dgrad and wgrad QKV 8.05306368 us,
    # feed-forward 10.73741824): the shard's row-wise FP8 data, 1 B, re-gathered in
    # 78.6432 us.
    fp8 = dict(precision=1, fp8_peak_tflops=200, mxfp8_peak_tflops=200,
               fp8_matmul_efficiency=1.0)
    wgrad_fp8 = 8.05306368 + 10.73741824
    more_fp8 = 2 * ag / 2 - wgrad_fp8
    assert run(sequence_parallel=1, **fp8, **slow)["tp_comm_ms"] == approx(
        16 * (4 * (ag + ag / 2) + more_fp8 - wgrad_fp8) * 1e-3)
    # Block-scaled FP8: the column-wise data and its scales, 1 + 1/32 B an element,
    # as the forward gather (the backward gradient gather moves twice that).
    ag_block = ag * (1 + 1 / 32) / 2
    more_block = 2 * ag_block - wgrad_fp8
    block = 2 * (ag + ag_block) + 2 * (ag + 2 * ag_block) + more_block - wgrad_fp8
    assert run(sequence_parallel=1, **{**fp8, "precision": 2}, **slow)["tp_comm_ms"] == approx(
        16 * block * 1e-3)
    # At full NVLink speed (157.2864 / 10 = 15.72864 us each) the re-gathers and the
    # backward reduce-scatters hide whole.
    assert run(sequence_parallel=1)["tp_comm_ms"] == approx(
        16 * (125.82912 - 2 * 15.72864) * 1e-3)


def test_fp8_all_gathers_hide_by_their_own_time():
    # tp_overlap 1 (Transformer Engine) with per-tensor FP8 GEMMs at 2e14 FLOP/s: QKV
    # 8.05306368 us, projection 2.68435456, feed-forward 10.73741824 each (dgrad and
    # wgrad the same).  3/4 of each collective to hide: all-gathers 5.89824 us (1 B),
    # reduce-scatters 11.79648.  Forward: QKV 5.89824, projection 2.68435456, first
    # feed-forward 5.89824, second 10.73741824; backward: dgrad of the projection
    # 2.68435456 and of the second feed-forward 5.89824, wgrad of QKV 8.05306368 and of
    # the first feed-forward 10.73741824.  Exposed 94.37184 - 52.59132928 a layer.
    hidden = (5.89824 + 2.68435456 + 5.89824 + 10.73741824
              + 2.68435456 + 5.89824 + 8.05306368 + 10.73741824)
    assert hidden == pytest.approx(52.59132928)
    out = run(sequence_parallel=1, precision=1, tp_overlap=1.0, fp8_peak_tflops=200,
              fp8_matmul_efficiency=1.0)
    assert out["tp_comm_ms"] == approx(16 * (94.37184 - hidden) * 1e-3)


def test_kernel_overhead_and_unfused_cross_entropy():
    # 60 kernels a layer and micro-batch at 1 us: 16 x 60 us more compute.
    assert run(kernel_overhead_us=1.0)["compute_time_ms"] - run()["compute_time_ms"] == approx(
        16 * 60e-3)
    # Unfused cross-entropy: 52 instead of 12 bytes per logit, s V / t = 262,144
    # logits a micro-batch: 4 x 40 x 262,144 B / 1e12 B/s.
    assert run(cross_entropy_fusion=0)["compute_time_ms"] - run()["compute_time_ms"] == approx(
        4 * 40 * 262_144 / 1e12 * 1e3)


def test_gradient_buffer_traffic():
    # grad_buffer_traffic 1 with bf16 buffers (g = 2), the last stage of TOY (4 layers
    # of LAYER_P = 3,145,728 weights a GPU, the output layer V h / t = 262,144):
    # every micro-batch the weight-gradient GEMMs read and write the buffer, 2 g - 2
    # = 2 B a weight more than their bf16 output: 2 x (4 x 3,145,728 + 262,144) B =
    # 25.690112 us at 1e12 B/s; m = 4 -> 102.760448 us.  Once a step, zeroing,
    # NaN-check norm and 1/d pre-scaling: 4 g = 8 B x P_GPU = 102.760448 us.
    base, traffic = run(), run(grad_buffer_traffic=1)
    extra_us = 4 * 25.690112 + 8 * P_GPU / 1e6
    assert traffic["compute_time_ms"] - base["compute_time_ms"] == approx(extra_us * 1e-3)
    assert traffic["memory_bound_ms"] - base["memory_bound_ms"] == approx(extra_us * 1e-3)
    # The 1F1B bubble, (p - 1) / m of the busy time, grows by a quarter of the
    # per-micro-batch part.
    assert traffic["pipeline_bubble_ms"] - base["pipeline_bubble_ms"] == approx(25.690112e-3)
    # p = 1 (d = 2): 8 layers, the output layer, and the input embedding's dense
    # gradient added to the buffer, 4 + 2 g = 8 B x 262,144 = 2.097152 us, every
    # micro-batch: 2 x (8 x 3,145,728 + 262,144) B + 2,097,152 B = 52.953088 us;
    # once a step 8 B x (8 x 3,145,728 + 262,144 tied embedding) = 203.423744 us.
    one = dict(pipeline_parallel=1)
    delta = run(**one, grad_buffer_traffic=1)["compute_time_ms"] - run(**one)["compute_time_ms"]
    assert delta == approx((4 * 52.953088 + 203.423744) * 1e-3)
    # fp32 buffers (g = 4): 6 B a weight a micro-batch, 16 B a weight a step.
    fp32 = run(grad_buffer_bytes=4, grad_buffer_traffic=1)["compute_time_ms"] - run(
        grad_buffer_bytes=4)["compute_time_ms"]
    assert fp32 == approx((4 * 6 * (4 * LAYER_P + 262_144) + 16 * P_GPU) / 1e12 * 1e3)


def test_data_parallel_bucket_tail():
    # ZeRO-1 over d = 2 in the node (16 GPUs), everything overlappable: the reduce-
    # scatter (128.45056 us) hides in the backward pass, the all-gather in the
    # forward pass, with infinitely fine buckets (dp_bucket_params 0).
    dp = dict(num_gpus=16, zero_stage=1, dp_overlap=1.0, param_gather_overlap=1.0)
    assert run(**dp)["dp_allreduce_ms"] == 0.0
    # Megatron-Core's 40M-parameter bucket holds all 12,845,056 weights of the GPU:
    # one bucket, reduced after the backward pass and gathered before the forward.
    assert run(**dp, dp_bucket_params=40e6)["dp_allreduce_ms"] == approx(2 * 128.45056e-3)
    # A small bucket: max(1, 1M x d = 2M) = 2M parameters (the embedding, 262,144,
    # is smaller): reduce-scatter of 2 B x 2M over 2 ranks in the node, 1/2 x 4e6 B /
    # 1e11 B/s = 20 us, and the all-gather of the bf16 weights, 20 us.
    assert run(**dp, dp_bucket_params=1.0)["dp_allreduce_ms"] == approx(40e-3)
    # A large vocabulary: the embedding, V h / t = 4,194,304 weights, fills the
    # last bucket: 2 x 1/2 x 2 B x 4,194,304 / 1e11 B/s = 2 x 41.94304 us.
    big = run(**dp, dp_bucket_params=1.0, vocab_size=16384)
    assert big["dp_allreduce_ms"] == approx(2 * 41.94304e-3)
    # No ZeRO: the last bucket's all-reduce, 2 x 1/2 x 4e6 B / 1e11 B/s = 40 us.
    plain = run(num_gpus=16, dp_overlap=1.0, dp_bucket_params=1.0)
    assert plain["dp_allreduce_ms"] == approx(40e-3)
    # Nothing overlapped: the whole reduction is exposed, the tail adds nothing.
    assert run(num_gpus=16, zero_stage=1, dp_bucket_params=1.0)["dp_allreduce_ms"] == approx(
        2 * 128.45056e-3)


# --- pipelines -----------------------------------------------------------------------


def test_uneven_stages_busiest_sets_the_pace():
    # 7 layers over 2 stages: ceil(7 / 2) = 4 on the busiest (the last, with the
    # logits), exactly the step of 8 layers, with 7/8 of the model FLOPs.
    seven, eight = run(num_layers=7), run(num_layers=8)
    assert seven["valid_layout"]
    assert seven["step_time_ms"] == approx(eight["step_time_ms"])
    flops = {L: L * 3 * (25_769_803_776 + 4_294_967_296) + 3 * 2_147_483_648 for L in (7, 8)}
    assert seven["mfu_percent"] == approx(eight["mfu_percent"] * flops[7] / flops[8])
    assert "Uneven pipeline: 7 layers over 2 stages" in REFINED.verdict(
        {**TOY, "num_layers": 7}, seven)


def test_embedding_and_loss_in_the_pipeline_split():
    # 6 layers + embedding + output layer = 8 units over p = 4: 2 each; the first
    # and last stages hold 1 layer, the middle ones 2.  The busiest: a middle stage,
    # 2 x 312.64342016 us (a layer's F + B + W) against 1 layer + the logits.
    cfg = dict(num_gpus=16, pipeline_parallel=4, num_layers=6, pipeline_split_embedding=1)
    out = run(**cfg)
    layer_us = (GEMM_FWD_US + ATTN_FWD_US + BYTES_FWD_US) + (
        GEMM_FWD_US + 2 * ATTN_FWD_US + 2 * BYTES_FWD_US + 0.5 * ATTN_FWD_US) + GEMM_FWD_US
    assert layer_us == approx(312.64342016)
    # The optimizer step of the stage with the most parameters (a middle one, 2
    # layers; the first holds 1 layer + the embedding): 28 B x 2 x 12 h^2 / t.
    optimizer_us = 28 * 2 * LAYER_P / 1e12 * 1e6
    assert out["compute_time_ms"] == approx((4 * 2 * layer_us + optimizer_us) * 1e-3)


def test_uneven_note_at_two_stages_has_no_others_and_follows_a_full_stop():
    """Issue 27 item 5: with p = 2 both stages are the first and the last; the note
    is a sentence of its own after the verdict's last one."""
    # 7 layers + embedding + output layer = 9 units over p = 2: ceil(9 / 2) = 5 a
    # stage, so the first and last hold 4 layers each (+ embedding / output layer).
    cfg = {**TOY, "num_layers": 7, "pipeline_split_embedding": 1}
    verdict = REFINED.verdict(cfg, run(num_layers=7, pipeline_split_embedding=1))
    assert ("Uneven pipeline: 7 layers over 2 stages (3.50 on average); the first and "
            "last stages hold 4 layers (+ embedding / output layer), and the busiest sets "
            "the pace.") in verdict
    assert "the others" not in verdict
    head, note = verdict.split(" Uneven pipeline:")
    assert head.endswith(".") and not head.endswith("..")
    # Four stages keep the middle ones: 6 + 2 = 8 units, 2 each.
    four = REFINED.verdict({**TOY, "num_gpus": 16, "pipeline_parallel": 4, "num_layers": 6,
                            "pipeline_split_embedding": 1},
                           run(num_gpus=16, pipeline_parallel=4, num_layers=6,
                               pipeline_split_embedding=1))
    assert "the first and last stages hold 1 layer (+ embedding / output layer), " \
        "the others 2" in four


def test_zero_bubble_schedules():
    # Last stage per micro-batch (us): F = 4 x 102.42490368 + 5.36870912 (logits),
    # W = 4 x 64.42450944, B = 1269.825536 - F - W.  1F1B's bubble is
    # (p - 1) / m of the busy time (compute + TP: 2013.26592 us less the backward
    # all-reduces hidden behind the weight gradients, test_tensor_parallel_term),
    # ZB-H1's (p - 1)(F + B - W) scaled by the same busy / compute ratio.
    F = 4 * 102.42490368 + LOGIT_FWD_US
    W = 4 * GEMM_FWD_US
    B = 1269.825536 - F - W
    tp = 2013.26592 - 16 * (WGRAD_QKV_US + WGRAD_UP_US)
    scale = (4 * 1269.825536 + tp) / (4 * 1269.825536)
    assert run()["pipeline_bubble_ms"] == approx((4 * 1269.825536 + tp) / 4 * 1e-3)
    assert run(pipeline_schedule=1)["pipeline_bubble_ms"] == approx((F + B - W) * scale * 1e-3)
    # ZB-V: two chunks per stage, (p - 1) / 2 (F + B - 2 W).
    zbv = run(pipeline_schedule=2, virtual_stages=2)
    assert zbv["pipeline_bubble_ms"] == approx((F + B - 2 * W) / 2 * scale * 1e-3)
    # Memory: ZB-V holds what 1F1B holds (no interleaving factor).
    assert zbv["activation_gb_per_gpu"] == approx(run()["activation_gb_per_gpu"])
    # Each schedule's chunk count is checked.
    assert not run(pipeline_schedule=2)["valid_layout"]
    assert not run(pipeline_schedule=1, virtual_stages=2)["valid_layout"]


def test_interleaved_transfers_hide_in_the_steady_state_not_in_warm_up_and_flush():
    # v = 2, p = 2, m = 4 in one node: each transfer 20.97152 us (test_refined's
    # test_pipeline_transfer_term), 2 v m = 16 of them.  Megatron-Core's
    # num_warmup_microbatches for pipeline rank 0: 2 (p - 1) + (v - 1) p = 4 forward
    # chunks, and the flush as many backward ones: 2 x 4 transfers waited for.  The
    # other v m - 4 = 4 pairs run under their chunk passes (1269.825536 us / v a
    # pair, far longer than the pair's 2 x 20.97152 us): hidden.
    one = 20.97152e-3
    queues = dict(virtual_stages=2, serial_streams=0)  # several hardware queues
    assert run(**queues)["pp_comm_ms"] == approx(2 * 4 * one)
    # The NCCL kernels slow the passes they hide under: overlap_slowdown s over
    # NVLink costs s / (1 + s) of each hidden second.
    slowed = run(**queues, overlap_slowdown=0.35)
    assert slowed["pp_comm_ms"] == approx(2 * 4 * one + 4 * 2 * one * 0.35 / 1.35)
    # Every transfer waited for: with pp_overlap 0, one hardware queue
    # (serial_streams 1), or v = 1 (Megatron-Core overlaps the interleaved schedule only).
    every = 2 * 2 * 4 * one
    assert run(**queues, pp_overlap=0)["pp_comm_ms"] == approx(every)
    assert run(virtual_stages=2, serial_streams=1)["pp_comm_ms"] == approx(every)
    assert run(serial_streams=0)["pp_comm_ms"] == approx(2 * 4 * one)
    # m = 2: the warm-up, min(4, v m = 4), takes every chunk; nothing is hidden.
    assert run(**queues, gradient_accum_steps=2)["pp_comm_ms"] == approx(2 * 2 * 2 * one)
    # A transfer longer than its pair's passes shows its excess: NVLink at 0.1 GB/s
    # (the send 524,288 B / 1e8 = 5.24288 ms, the TP all-gather 3/4 x 2,097,152 B /
    # 1e8 = 15.72864 ms: 20.97152 ms); a pair exposes 2 x 20.97152 - 1.269825536 / 2 ms.
    slow = run(**queues, link_bandwidth_gb_s=0.1)
    assert slow["pp_comm_ms"] == approx(2 * 4 * 20.97152 + 4 * (2 * 20.97152 - 1.269825536 / 2))


def test_one_hardware_queue_as_megatron_lm_sets_it():
    # serial_streams 2 (the default), Megatron-LM's rule: CUDA_DEVICE_MAX_CONNECTIONS=1
    # before Blackwell (compute capability major < 10) with TP or CP > 1, unless
    # ZeRO-3 / FSDP or the expert all-to-all overlap.  TOY: t = 4, so on a Hopper
    # (9) every one of the 16 transfers is waited for; on a Blackwell (10), or
    # with ZeRO-3, only the warm-up's and flush's 8.
    one = 20.97152e-3
    assert REFINED.defaults["serial_streams"] == 2
    assert run(virtual_stages=2, compute_capability_major=9)["pp_comm_ms"] == approx(16 * one)
    assert run(virtual_stages=2, compute_capability_major=10)["pp_comm_ms"] == approx(8 * one)
    assert run(virtual_stages=2, zero_stage=3)["pp_comm_ms"] == approx(8 * one)
    # t = 1 (two GPUs, one per stage): no TP, several queues; the transfer is the
    # send alone, 2,097,152 B / 1e11 B/s = 20.97152 us with no gather.
    solo = run(virtual_stages=2, num_gpus=2, tensor_parallel=1)
    assert solo["pp_comm_ms"] == approx(8 * 2_097_152 / 1e11 * 1e3)


# --- memory items ----------------------------------------------------------------------


def test_logits_reserve_and_workspace_memory():
    # p = 1 on 4 GPUs: one stage of 8 layers, 1 micro-batch in flight: 8 x 16 s b h
    # (layer activations), s b h (embedding mask), the output layer's input
    # 4 s b h / t and the logits 10 B x s V / t (bf16, fp32 copy, fp32 softmax):
    # (128 + 1 + 1 + 2.5) x 1,048,576 B.
    out = run(num_gpus=4, pipeline_parallel=1)
    assert out["activation_gb_per_gpu"] == approx(132.5 * 1_048_576 / 1e9)
    # Reserved memory and TP-overlap userbuffers (3 x 2 s b h bytes).
    other = run(reserved_memory_gb=2.5, tp_overlap=0.5)
    assert other["other_memory_gb_per_gpu"] == approx(2.5 + 3 * 2_097_152 / 1e9)
    assert other["memory_gb_per_gpu"] == approx(
        run()["memory_gb_per_gpu"] + 2.5 + 3 * 2_097_152 / 1e9)


def test_middle_stage_can_be_the_fullest():
    # 6 layers over 4 stages with the embedding and loss in the split: the second
    # stage holds 2 layers and min(m, p - 1) = 3 micro-batches (6 layer-activations
    # of 16 s b h) against the first's 1 layer x 4 micro-batches + the mask.
    out = run(num_gpus=16, pipeline_parallel=4, num_layers=6, pipeline_split_embedding=1)
    assert out["activation_gb_per_gpu"] == approx(6 * 16 * 1_048_576 / 1e9)
    assert out["model_state_gb_per_gpu"] == approx(16 * 2 * LAYER_P / 1e9)


# --- the example -----------------------------------------------------------------


def test_llama_405b_at_128k_context_on_16384_gpus():
    from jaxmodel.presets import apply_presets
    x = {**apply_presets(REFINED, gpu="h100-sxm", llm="llama3.1-405b"),
         "num_gpus": 16384, "tensor_parallel": 8, "pipeline_parallel": 16,
         "context_parallel": 16, "seq_length": 131072, "gradient_accum_steps": 16,
         "virtual_stages": 4, "pipeline_split_embedding": 1, "recompute": 2,
         "zero_stage": 1, "tp_overlap": 1.0, "param_gather_overlap": 1.0}
    out = as_dicts(REFINED, jaxmodel.evaluate(REFINED, x64=True, **x))
    assert out["valid_layout"] and out["data_parallel"] == 8
    assert 25 < out["mfu_percent"] < 55  # Llama 3 reports 38% for this layout
    assert out["memory_gb_per_gpu"] < 80


# NeMo's published long-sequence runs (NVIDIA/NeMo docs/source/performance/
# performance_summary.md, "Long Input Sequences", index id 28718048417; the same
# runs as performance_long_sequence.md): Llama 2 7B in FP8 on DGX-H100, container
# NeMo 24.03.01, micro-batch 1.  Sequence (K tokens), GPUs, global batch, TP, PP, CP,
# DP; tokens/s per GPU as published.
NEMO_LONG_SEQUENCE = [(8, 8, 512, 1, 2, 1, 4, 13907), (16, 16, 256, 2, 1, 1, 8, 10082),
                      (32, 32, 128, 2, 1, 2, 8, 6687), (64, 64, 64, 4, 1, 2, 8, 4021),
                      (128, 128, 32, 4, 1, 4, 8, 2260), (256, 256, 16, 4, 1, 8, 8, 1214),
                      (512, 512, 8, 8, 1, 16, 4, 635), (1024, 1024, 4, 8, 1, 32, 4, 318)]


def _nemo_long_sequence_tokens(attention_kernel):
    from jaxmodel.presets import apply_presets
    k, g, gbs, t, p, c, d, _ = np.array(NEMO_LONG_SEQUENCE, dtype=np.float64).T
    out = jaxmodel.evaluate(REFINED, x64=True, **{
        **apply_presets(REFINED, gpu="h100-sxm", llm="llama2-7b"), "precision": 1,
        "attention_kernel": attention_kernel, "recompute": 0, "sequence_parallel": 0,
        "zero_stage": 1, "param_gather_overlap": 1.0, "dp_overlap": 1.0, "cuda_graphs": 0,
        "seq_length": k * 1024, "num_gpus": g, "tensor_parallel": t, "pipeline_parallel": p,
        "context_parallel": c, "micro_batch": 1, "gradient_accum_steps": gbs // d})
    assert np.all(np.asarray(out.valid_layout)) and np.all(np.asarray(out.fits_in_memory))
    return np.asarray(out.per_gpu_tokens_s)


def test_context_parallel_ring_to_a_million_tokens_on_1024_h100s():
    """The ring context parallelism (cp_comm 0: Transformer Engine's p2p exchange,
    each hop under the attention of the block in hand, c kernel calls a layer)
    against NeMo's published long-sequence runs, 8K to 1M tokens, CP 1 to 32, up
    to 1,024 H100s, each within 5% of its tokens/s.  Settings as documented: the
    table's layout and batch, FP8 (delayed scaling: the launcher's examples set
    fp8 and fp8_hybrid), and FlashAttention-2 (attention_kernel 1): the 24.03.01
    container's launcher config sets NVTE_FUSED_ATTN: 0, "Disable cudnn FA until
    we've tested it more" (NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/
    config.yaml at 01d0773863a5b59f5575af36614b87649c1ec5ff, whose container is
    nvcr.io/nvidia/nemo:24.03.01.framework);
    the rest at the launcher's llama2_7b.yaml of the era (no activation
    recompute, no sequence parallelism, distributed Adam with overlapped
    gradient and parameter sync).
    Its 4K row (4 GPUs, DP 4) is left out: its gradient dtype is not documented,
    and with Apex's default fp32 gradients the model needs 94 GB of 80.
    The rows check the attention FLOPs of the causal load balance (s^2 / c a
    GPU), the ring's hops hidden under it, and the kernel rate the environment
    chose: at the preset's own fused-attention rate (cuDNN 9.19 of 2026,
    attention_kernel 0) the model runs the 1M row twice as fast as NeMo did."""
    measured = np.array([r[-1] for r in NEMO_LONG_SEQUENCE], dtype=float)
    fa2 = _nemo_long_sequence_tokens(1)
    np.testing.assert_allclose(fa2, measured, rtol=0.05)
    cudnn_2026 = _nemo_long_sequence_tokens(0)
    assert cudnn_2026[-1] > 1.8 * measured[-1]


# --- search and sweeps over the new inputs -------------------------------------------


@pytest.mark.slow
def test_best_picks_context_parallelism_for_long_context():
    from typer.testing import CliRunner

    from jaxmodel.cli import app
    result = CliRunner().invoke(app, [
        "best", "--model", "refined", "--gpu", "h100-sxm", "--llm", "llama3-70b",
        "--num-gpus", "256", "--seq-length", "131072", "--global-batch", "16",
        "--vary", "context_parallel", "--vary", "zero_stage", "--format", "json", "--top", "3"])
    assert result.exit_code == 0, result.output
    import json
    doc = json.loads(result.output)
    top = doc["top"][0]
    # At 128K tokens one sequence's activations do not fit without splitting it.
    assert top["context_parallel"] > 1 and top["valid_layout"]
    assert top["memory_gb_per_gpu"] <= 80


def test_vary_values_and_errors():
    from jaxmodel.errors import SpecError
    from jaxmodel.searching import vary_values
    assert vary_values(REFINED, "zero_stage", None, 64, 4096) == [0.0, 1.0, 2.0, 3.0]
    assert vary_values(REFINED, "precision", None, 64, 4096) == [0.0, 1.0, 2.0, 3.0]
    assert vary_values(REFINED, "context_parallel", None, 16, 4096) == [1.0, 2.0, 4.0, 8.0,
                                                                       16.0]
    assert vary_values(REFINED, "context_parallel", [2, 4], 16, 4096) == [2.0, 4.0]
    with pytest.raises(SpecError, match="not a switch"):
        vary_values(REFINED, "hidden_dim", None, 16, 4096)
    with pytest.raises(SpecError, match="zero_stage"):
        vary_values(REFINED, "zero_stag", None, 16, 4096)


def test_sensitivity_steps_the_new_switches():
    from jaxmodel.sensitivity import continuous_inputs, stepped_inputs
    steps = stepped_inputs(REFINED)
    for name in ("context_parallel", "zero_stage", "precision", "cp_comm", "pipeline_schedule",
                 "pipeline_split_embedding", "grad_buffer_bytes", "gemm_shape_model"):
        assert (name in steps) == (name != "context_parallel"), name
    assert "tp_overlap" in continuous_inputs(REFINED)


@pytest.mark.slow
def test_long_context_sweep_runs_through_the_engine(tmp_path):
    import pyarrow.dataset as ds

    from jaxmodel.cli import main
    spec = __import__("pathlib").Path(__file__).parents[2] / "sweeps" / \
        "refined_long_context.toml"
    with pytest.raises(SystemExit) as info:
        main(["sweep", str(spec), "-o", str(tmp_path / "ds")])
    assert info.value.code == 0
    table = ds.dataset(tmp_path / "ds").to_table()
    col = {name: table.column(name).to_numpy() for name in table.column_names}
    assert len(col["context_parallel"]) > 0 and set(col["context_parallel"]) > {1}
    # At 128K tokens only context parallelism (c >= 2) makes the model fit.
    long = col["seq_length"] == 131072
    assert long.any() and col["context_parallel"][long].min() >= 2
    # H100's "80 GB" are 80 GiB (85.9 GB), the capacity a layout must fit in.
    assert (col["memory_gb_per_gpu"] <= 80 * 2**30 / 1e9).all()


def test_flashattention2_kernel_runs_at_its_own_efficiency():
    # attention_kernel 1 times the attention core at fa2_attention_efficiency
    # instead of attention_efficiency: FA2 at 0.5 of peak is the fused kernel at
    # 0.5, and the switch at 0 ignores it.
    fa2 = run(attention_kernel=1, fa2_attention_efficiency=0.5)
    assert fa2["step_time_ms"] == approx(run(attention_efficiency=0.5)["step_time_ms"])
    assert run(attention_kernel=0, fa2_attention_efficiency=0.5)["step_time_ms"] == approx(
        run()["step_time_ms"])
    # The attention core takes twice as long: forward 1, backward 2 and
    # FlashAttention's own recompute 0.5 times ATTN_FWD_US a layer, 4 layers of the
    # last stage, m = 4 micro-batches, and the 1F1B bubble (p - 1) / m on top.
    extra_us = (1 + 2 + 0.5) * ATTN_FWD_US * 4 * 4 * (1 + 1 / 4)
    assert (fa2["step_time_ms"] - run()["step_time_ms"]) * 1e3 == approx(extra_us)


def test_flashattention2_s_predecessors_run_at_their_measured_fraction_of_it():
    # attention_kernel 2 (flash-attn 1.x) and 3 (its Triton kernel) run the core at
    # FlashAttention-2's fraction times their speed relative to it (Dao 2023,
    # arXiv 2307.08691, sec. 4.1, A100): the first FlashAttention at 1/2 both ways;
    # the Triton kernel at 1/1.4 forward and 1/2 backward, so with the 1 : 2.5
    # FLOP split its fraction is 3.5 / (1.4 + 2.5 x 2) = 0.546875 of FA2's.  With
    # FA2 at 0.5 of peak (the test above) they run at 0.25 and 0.2734375 of it.
    # The core of the test above at a fraction 1 of peak is core_us, at r core_us / r.
    assert 3.5 / (1.4 + 2.5 * 2.0) == 0.546875
    core_us = (1 + 2 + 0.5) * ATTN_FWD_US * 4 * 4 * (1 + 1 / 4)
    fa2 = run(attention_kernel=1, fa2_attention_efficiency=0.5)["step_time_ms"]
    rates = {2: 0.25, 3: 0.5 * 0.546875}
    for kernel, rate in rates.items():
        step = run(attention_kernel=kernel, fa2_attention_efficiency=0.5)["step_time_ms"]
        assert (step - fa2) * 1e3 == approx(core_us / rate - core_us / 0.5)
    # Every kernel of the family keeps FlashAttention-2's softmax part d0 = 17.2:
    # 16 heads of 64 run it at (64 / 81.2) / (128 / 145.2) of its rate.
    small = {"num_heads": 16, "num_kv_heads": 16}
    head = (64 / (64 + 17.2)) / (128 / (128 + 17.2))
    for kernel, rate in rates.items():
        base = run(attention_kernel=kernel, fa2_attention_efficiency=0.5)["step_time_ms"]
        step = run(attention_kernel=kernel, fa2_attention_efficiency=0.5, **small)
        assert (step["step_time_ms"] - base) * 1e3 == approx(core_us / rate * (1 / head - 1))


def test_a_small_head_runs_fused_attention_slower_per_flop():
    # 16 heads of 64 in place of 8 of 128: the same width, GEMMs and attention
    # FLOPs, but the kernel's rate falls as d / (d + d0) (rates.head_dim_factor;
    # FlashAttention-3 paper, H100 at 8K: cuDNN 426 against 539 TFLOP/s combined,
    # d0 = 46.2; FlashAttention-2 296 against 331, d0 = 17.2).
    for kernel, d0 in ((0, 46.2), (1, 17.2)):
        rate = (64 / (64 + d0)) / (128 / (128 + d0))
        base = run(attention_kernel=kernel, fa2_attention_efficiency=1.0)
        small = run(attention_kernel=kernel, fa2_attention_efficiency=1.0, num_heads=16,
                    num_kv_heads=16)
        # The attention core of the FA2 test below, 1 / rate times as long.
        extra_us = (1 + 2 + 0.5) * ATTN_FWD_US * 4 * 4 * (1 + 1 / 4) * (1 / rate - 1)
        assert (small["step_time_ms"] - base["step_time_ms"]) * 1e3 == approx(extra_us)
    assert (64 / (64 + 46.2)) / (128 / (128 + 46.2)) == pytest.approx(426.09 / 539.05, abs=1e-3)
    # Heads of 256 would run a 0.88 kernel at 0.88 x 1.153 = 1.015 of the peak: it
    # runs at the peak, as a 0.9 one does (and a 0.8 one below it).
    wide = {"num_heads": 4, "num_kv_heads": 4}
    at_peak = run(attention_efficiency=0.9, **wide)["step_time_ms"]
    assert run(attention_efficiency=0.88, **wide)["step_time_ms"] == approx(at_peak)
    assert run(attention_efficiency=0.8, **wide)["step_time_ms"] > at_peak


def test_a_gpu_with_fewer_exponential_units_per_flop_runs_small_heads_slower():
    # The softmax part d0 is counted in tensor-core FLOPs, so on a GPU with 512
    # FLOPs an exponential (Blackwell: 8,192 / 16 per SM and clock) it is twice
    # Hopper's 256: d0 = 2 x 46.2 = 92.4, and 16 heads of 64 run the kernel at
    # (64 / 156.4) / (128 / 220.4) = 0.7046 of its head-dim-128 rate (0.790 on
    # Hopper).  At the reference width 128 the ratio changes nothing.
    assert run(mma_per_exponential=512.0)["step_time_ms"] == approx(run()["step_time_ms"])
    small = {"num_heads": 16, "num_kv_heads": 16}
    for ratio, d0 in ((512.0, 92.4), (128.0, 23.1)):
        rate = (64 / (64 + d0)) / (128 / (128 + d0))
        base = run(mma_per_exponential=ratio)
        step = run(mma_per_exponential=ratio, **small)
        extra_us = (1 + 2 + 0.5) * ATTN_FWD_US * 4 * 4 * (1 + 1 / 4) * (1 / rate - 1)
        assert (step["step_time_ms"] - base["step_time_ms"]) * 1e3 == approx(extra_us)
    assert (64 / 156.4) / (128 / 220.4) == pytest.approx(0.7046, abs=1e-4)


def test_hopper_flashattention2_efficiency_from_the_fa3_paper():
    # Shah et al. 2024, FlashAttention-2's bars at head dim 128, 8K on H100:
    # forward with the causal mask 333 (Fig. 5), backward 318 TFLOP/s (Fig. 6);
    # 3.5 / (989 / 333 + 2.5 x 989 / 318) = 3.5 / 10.7530 = 0.3255.
    from jaxmodel.presets import GPUS
    expected = round(3.5 / (989 / 333 + 2.5 * 989 / 318), 3)
    assert expected == 0.326
    for name in ("h100-sxm", "h800", "h200"):
        assert GPUS[name].values["fa2_attention_efficiency"] == expected
    # Where no FlashAttention-2 figure is published (MI355X: HipKittens' two plot
    # scripts disagree on PyTorch SDPA's), the same kernel's measurement on the
    # previous die: MI300X's Azure figure 328.6 / 1307.4.
    assert GPUS["mi355x"].values["fa2_attention_efficiency"] == round(328.6 / 1307.4, 3)
    assert (GPUS["mi355x"].values["fa2_attention_efficiency"]
            == GPUS["mi300x"].values["fa2_attention_efficiency"])


def test_blackwell_flashattention2_efficiency_is_azure_s_gb200_measurement():
    # Azure/AI-benchmarking-guide, ND GB200 v6: FlashAttention-2 fwd + bwd at head dim
    # 128, batch 2, 8K: 373.9 TFLOP/s of the GB200's 2,500 (the same harness gives
    # 327.9 on H100, 0.332 against the paper's 0.326): 0.1496.  It runs Ampere's
    # mma.sync path, a third of what cuDNN reaches on the same GPU.  GB300 has its own
    # figure from the same harness (ND GB300 v6): 399.7 of 2,500.
    from jaxmodel.presets import GPUS
    measured = {"b200": 373.9, "b300": 373.9, "gb200-nvl72": 373.9, "gb300-nvl72": 399.7}
    for name, tflops in measured.items():
        values = GPUS[name].values
        assert values["fa2_attention_efficiency"] == pytest.approx(tflops / 2500, abs=5e-4)
        assert values["fa2_attention_efficiency"] < values["attention_efficiency"] / 3


# --- sliding-window attention ------------------------------------------------------


def _attention_step_us(full_minus_windowed_keys, causal=1.0):
    """Step-time change when each query of every layer sees ``full_minus_windowed_keys``
    fewer keys: forward 1, backward 2 and FlashAttention's recompute 0.5 attention
    passes a layer (ATTN_FWD_US for all s = 1024 keys; the causal half when causal is
    0.5), 4 layers of the last stage, m = 4, and the 1F1B bubble (p - 1) / m on top."""
    return (3.5 * ATTN_FWD_US * causal * full_minus_windowed_keys / 1024 * 4 * 4
            * (1 + 1 / 4))


def test_sliding_window_counts_and_runs_only_its_band():
    # Window 256 in half the layers, no causal mask (TOY): a query sees on average
    # 0.5 x 1024 + 0.5 x 256 = 640 keys, 384 fewer than the full square.
    windowed = run(sliding_window=256, sliding_window_share=0.5)
    full = run()
    assert (full["step_time_ms"] - windowed["step_time_ms"]) * 1e3 == approx(
        _attention_step_us(384))
    # Model FLOPs: 3 x 4 b s (1024 - 640) h per layer fewer, L = 8 layers, m = 4, over
    # t p = 8 GPUs at 1e14 FLOP/s: mfu x step / 100 is the ideal seconds.
    fewer_s = 4 * 8 * 3 * 4 * 1024 * 384 * 1024 / 8 / 1e14
    assert (full["mfu_percent"] * full["step_time_ms"]
            - windowed["mfu_percent"] * windowed["step_time_ms"]) / 100 * 1e-3 == approx(
        fewer_s)
    # The stored activations do not change (no score tensor with FlashAttention).
    assert windowed["memory_gb_per_gpu"] == approx(full["memory_gb_per_gpu"])


def test_causal_sliding_window_executes_its_band():
    # The kernel runs whole 128 x 128 tiles (FlashAttention-3's causal / local tile
    # at head dim 128).  Causal, s = 1024: query tile i (of 8) runs key tiles 0..i,
    # (1 + 2 + ... + 8) / 8 = 4.5 tiles, 576 keys a query where 512 are unmasked:
    # 448 fewer than the unmasked square (TOY's causal_mask 0).
    causal = run(causal_mask=1)
    assert (run()["step_time_ms"] - causal["step_time_ms"]) * 1e3 == approx(
        _attention_step_us(448))
    # Window 128 in every layer: query i sees min(i + 1, 128) keys, but query tile i
    # runs tiles i - 1 and i (tile 0 only itself), (1 + 7 x 2) / 8 = 1.875 tiles, 240
    # keys: 336 fewer than full causal attention.
    windowed = run(causal_mask=1, sliding_window=128, sliding_window_share=1.0)
    assert (causal["step_time_ms"] - windowed["step_time_ms"]) * 1e3 == approx(
        _attention_step_us(336))
    # Query 128 i sees back to key 128 i - w + 1: up to w = 129 that is tile i - 1, a
    # window of 130 reaches tile i - 2: (1 + 2 + 6 x 3) / 8 = 2.625 tiles, 336 keys.
    assert run(causal_mask=1, sliding_window=129, sliding_window_share=1.0)[
        "step_time_ms"] == approx(windowed["step_time_ms"])
    wider = run(causal_mask=1, sliding_window=130, sliding_window_share=1.0)
    assert (causal["step_time_ms"] - wider["step_time_ms"]) * 1e3 == approx(
        _attention_step_us(576 - 336))
    # A window as long as the sequence is full attention; no window (0) ignores the share.
    assert run(causal_mask=1, sliding_window=1024)["step_time_ms"] == approx(
        causal["step_time_ms"])
    assert run(causal_mask=1, sliding_window=0, sliding_window_share=0.5)[
        "step_time_ms"] == approx(causal["step_time_ms"])


def test_sliding_window_saves_the_same_in_an_moe_layer():
    # The MoE path (its own attention expression) saves what the dense one does:
    # 2 experts, top-1, each of the dense FFN's width, the router on top.
    moe = {"num_experts": 2, "experts_per_token": 1, "moe_ffn_hidden_dim": 4096,
           "expert_parallel": 1}
    saved = (run(**moe)["step_time_ms"]
             - run(**moe, sliding_window=256, sliding_window_share=0.5)["step_time_ms"])
    assert saved * 1e3 == pytest.approx(_attention_step_us(384), rel=1e-9)


def test_a_fused_kernel_pays_a_fixed_work_per_query_tile():
    # attention_tile_keys (TOY: 0; the default 512): each query runs its keys plus 512
    # more, over the 8,192 / (8,192 + 512) of that work the attention_efficiency,
    # measured at 8,192 keys without a mask, already holds.  TOY's 1,024 keys become
    # 1,536 x 8,192 / 8,704 = 1,445.647 keys' time: 421.647 more a query.
    base, tile = run(), run(attention_tile_keys=512.0)
    more = 1536 * 8192 / 8704 - 1024
    assert more == pytest.approx(421.647, abs=1e-3)
    assert (tile["step_time_ms"] - base["step_time_ms"]) * 1e3 == approx(
        _attention_step_us(more))
    # Model FLOPs count the keys the model has, not the kernel's work: MFU falls by
    # the step's growth alone.
    assert tile["mfu_percent"] * tile["step_time_ms"] == approx(
        base["mfu_percent"] * base["step_time_ms"])
    # At the reference, 8,192 keys without a mask, the preset's fraction is the rate:
    # (8,192 + 512) x 8,192 / 8,704 = 8,192 keys' time, the term adds nothing.
    ref = dict(seq_length=8192, gpu_memory_gb=1000)
    assert run(**ref, attention_tile_keys=512.0)["step_time_ms"] == approx(
        run(**ref)["step_time_ms"])
    # Causal, s = 1,024: 576 keys run (test_causal_sliding_window_executes_its_band),
    # 1,088 with the fixed work, 1,088 x 8,192 / 8,704 = 1,024 keys' time: the causal
    # half costs what the full square costs without the term.
    causal = run(causal_mask=1, attention_tile_keys=512.0)
    assert (causal["step_time_ms"] - run(causal_mask=1)["step_time_ms"]) * 1e3 == approx(
        _attention_step_us(1024 - 576))
    # FlashAttention-2 and its predecessors (attention_kernel 1-3) take none: their
    # measured fraction is the causal 8K kernel's, flat in the sequence.
    fa2 = dict(attention_kernel=1, fa2_attention_efficiency=1.0)
    assert run(**fa2, attention_tile_keys=512.0)["step_time_ms"] == approx(
        run(**fa2)["step_time_ms"])


def test_a_ring_step_is_a_kernel_call_of_its_own():
    # Context parallelism over c = 2 (t4 c2 p2 on 16 GPUs): a rank runs 512 of the
    # 1,024 queries.  The ring (cp_comm 0) calls the kernel once per step, c times a
    # layer, so a query pays 2 x 512 keys; all-to-all (2) calls it once on the whole
    # sequence.  The compute time (4 layers, m = 4, forward 1 + backward 2 +
    # FlashAttention's recompute 0.5) grows by 3.5 ATTN_FWD_US / 2 x (keys - 1,024) /
    # 1,024 a layer and micro-batch.
    cp = dict(num_gpus=16, context_parallel=2)

    def grown_us(cp_comm):
        return (run(**cp, cp_comm=cp_comm, attention_tile_keys=512.0)["compute_time_ms"]
                - run(**cp, cp_comm=cp_comm)["compute_time_ms"]) * 1e3

    def expect_us(calls):
        keys = (1024 + 512 * calls) * 8192 / 8704
        return 3.5 * ATTN_FWD_US / 2 * (keys - 1024) / 1024 * 4 * 4

    assert grown_us(0) == approx(expect_us(2))
    assert grown_us(2) == approx(expect_us(1))
    assert grown_us(1) == approx(expect_us(1))


def test_fp8_attention_runs_at_its_own_rate_and_casts_its_inputs_and_outputs():
    # fp8_attention 1 at fp8_attention_efficiency 2 (TOY's bf16 attention runs at 1):
    # the attention core takes half its time.  Transformer Engine casts Q, K, V (qkv_n
    # = 1,024 x 3 / 4 = 768 elements a token on a GPU) and O (256) forward, dO and dQ,
    # dK, dV backward, 3 bytes an element: 3 x 1,024 tokens x 1,024 = 3,145,728 B each
    # way, 3.145728 us at TOY's 1e12 B/s.  A layer and micro-batch changes by -0.5 x
    # 3.5 x ATTN_FWD_US + 2 x 3.145728 us; 4 layers, m = 4, the bubble's 1 / 4 on top.
    fp8 = dict(fp8_attention=1, fp8_attention_efficiency=2.0)
    per_layer = -0.5 * 3.5 * ATTN_FWD_US + 2 * 3.145728
    assert (run(**fp8)["step_time_ms"] - run()["step_time_ms"]) * 1e3 == approx(
        per_layer * 4 * 4 * (1 + 1 / 4))
    # Selective recompute (the attention core) runs its forward and its casts again.
    again = per_layer - 0.5 * ATTN_FWD_US + 3.145728
    assert (run(**fp8, recompute=1)["step_time_ms"] - run(recompute=1)["step_time_ms"]) * 1e3 \
        == approx(again * 4 * 4 * (1 + 1 / 4))
    # Head dim 64 (16 heads of TOY's width; the same FLOPs and casts): the softmax part
    # d0 = 46.2 x mma_per_exponential / 256 is twice as large at FP8's doubled tensor
    # rate, so FP8 keeps (64 / 156.4) / (128 / 220.4) = 0.7046 of its 128 rate, bf16
    # (64 / 110.2) / (128 / 174.2) = 0.7904.
    def factor(d0):
        return (64 / (64 + d0)) / (128 / (128 + d0))

    assert factor(92.4) == pytest.approx(0.7046, abs=1e-4)
    small = dict(num_heads=16, num_kv_heads=16)
    per_layer = 3.5 * ATTN_FWD_US * (1 / (2 * factor(92.4)) - 1 / factor(46.2)) + 2 * 3.145728
    assert (run(**small, **fp8)["step_time_ms"] - run(**small)["step_time_ms"]) * 1e3 == approx(
        per_layer * 4 * 4 * (1 + 1 / 4))


def test_fp8_attention_needs_fp8_tensor_cores_and_the_fused_kernel():
    from jaxmodel.models.refined.validity import layout_reasons

    assert run(fp8_attention=1)["valid_layout"] == 1.0
    for bad in (dict(fp8_peak_tflops=0.0), dict(attention_kernel=1), dict(flash_attention=0)):
        inputs = {**TOY, "fp8_attention": 1, **bad}
        out = run(fp8_attention=1, **bad)
        assert out["valid_layout"] == 0.0, bad
        assert any("FP8 attention" in problem for problem, _ in layout_reasons(inputs, out)), bad


# --- eager PyTorch elementwise ops (elementwise_fusion 0) ----------------------------


def test_eager_elementwise_ops_charge_torchtitans_unfused_kernels():
    # TOY with a Llama layer: SwiGLU (3 matrices) and GQA (a = 8, kv = 4), t = 4, no
    # SP.  Per token on a GPU: h = 1024 (replicated), q = h / t = 256, k = v = 128,
    # f / t = 1024.  Eager, op by op (torchtitan's model.py and norms.py), bytes:
    #   forward: 2 fp32 RMSNorms and 2 residual adds 84 x 1024 = 86,016; RoPE on q
    #   and k 20 x 384 = 7,680; repeat_kv 2 B x (128 read + 256 written) x 2 (k, v)
    #   = 1,536; silu 4 + product 6 = 10 x 1024 = 10,240: 105,472, less the fused
    #   22 x 1024 + 6 x 1024 = 28,672 -> 76,800;
    #   backward: 196 x 1024 = 200,704; 7,680; 1,536; 18 x 1024 = 18,432: 228,352,
    #   less twice the fused 57,344 -> 171,008.
    # x 1024 tokens: 78,643,200 + 175,112,192 = 253,755,392 B = 253.755392 us at
    # 1e12 B/s per layer and micro-batch; 16 of them on the busiest stage.
    # Kernels: forward 16 + 2 + 6 + 1 + 1 + 2 = 28, backward 32 + 2 + 6 + 1 + 2 + 2
    # = 45, less the 6 + 6 fused ones already counted: 61 more at 1 us.
    llama = dict(mlp_weight_matrices=3, num_kv_heads=4, kernel_overhead_us=1.0)
    fused, eager = (run(**llama, elementwise_fusion=e)["compute_time_ms"] for e in (1, 0))
    assert eager - fused == approx(16 * (253.755392 + 61) * 1e-3)
    # Per-op recompute (torchtitan's op SAC keeps only matmul and attention
    # outputs) runs the 22 extra forward kernels and their 78,643,200 B again.
    fused3, eager3 = (run(**llama, recompute=3, elementwise_fusion=e)["compute_time_ms"]
                      for e in (1, 0))
    assert (eager3 - fused3) - (eager - fused) == approx(16 * (78.6432 + 22) * 1e-3)
    # Without GQA (kv = a = 8) repeat_kv returns its input: no copies, 4 kernels
    # fewer; RoPE on q and k of 256 each, 20 x 512 = 10,240 each way.  Forward
    # 86,016 + 10,240 + 10,240 - 28,672 = 77,824; backward 200,704 + 10,240 +
    # 18,432 - 57,344 = 172,032; x 1024 tokens = 255,852,544 B.
    mha = dict(llama, num_kv_heads=8)
    fused_m, eager_m = (run(**mha, elementwise_fusion=e)["compute_time_ms"] for e in (1, 0))
    assert eager_m - fused_m == approx(16 * (255.852544 + 57) * 1e-3)


def test_eager_norms_of_one_kernel_and_no_rotary_embedding_charge_less():
    # The Llama layer of the test above, eager.  norm_kernel 0 (PyTorch's
    # F.layer_norm, as Composer's MPT): each norm reads x and writes y forward (4
    # bytes), reads x and dy and writes dx backward (6), so the norms and residual
    # adds move 2 x 4 + 12 = 20 and 2 x 6 + 12 = 24 bytes per [s b h] element in
    # place of 84 and 196: (84 - 20 + 196 - 24) x 1024 x 1024 tokens = 247,463,936 B
    # = 247.463936 us a layer and micro-batch at 1e12 B/s; kernels forward 2 in
    # place of 16, backward 4 in place of 32: 42 fewer at 1 us.
    llama = dict(mlp_weight_matrices=3, num_kv_heads=4, kernel_overhead_us=1.0,
                 elementwise_fusion=0)
    op_by_op, one = (run(**llama, norm_kernel=k)["compute_time_ms"] for k in (1, 0))
    assert op_by_op - one == approx(16 * (247.463936 + 42) * 1e-3)
    # No rotary embedding (learned positions, MPT): RoPE's 20 bytes per element of q
    # and k (384 a token) each way, 2 x 20 x 384 x 1024 = 15,728,640 B, and its 6 + 6
    # kernels go.
    no_rope = run(**llama, rotary_embedding=0)["compute_time_ms"]
    assert op_by_op - no_rope == approx(16 * (15.72864 + 12) * 1e-3)
    # Fused elementwise kernels (elementwise_fusion 1) count neither.
    fused = {**llama, "elementwise_fusion": 1}
    assert run(**fused, norm_kernel=0, rotary_embedding=0)["compute_time_ms"] == approx(
        run(**fused)["compute_time_ms"])


def test_eager_fused_qkv_split_and_bias_gradients_charge_their_backward_copies():
    # The Llama layer of the tests above, eager: per token on a GPU q = 256, k = v =
    # 128 elements, h = 1024 (no SP), f / t = 1024, SwiGLU (3 matrices).
    # fused_qkv 1 (MPT's Wqkv split by chunk): the backward concatenates dq, dk, dv,
    # 4 B an element of 512 = 2,048 B a token x 1024 = 2.097152 us a layer and
    # micro-batch at 1e12 B/s, and 1 kernel (1 us).
    llama = dict(mlp_weight_matrices=3, num_kv_heads=4, kernel_overhead_us=1.0,
                 elementwise_fusion=0)
    base = run(**llama)["compute_time_ms"]
    assert run(**llama, fused_qkv=1)["compute_time_ms"] - base == approx(
        16 * (2.097152 + 1) * 1e-3)
    # linear_bias 1: each bias gradient reads its linear layer's output gradient
    # once (2 B an element): q, k, v 512 + the output projection 1024 + the two
    # up projections 2 x 1024 + the down projection 1024 = 4,608 elements, 9,216 B
    # a token = 9.437184 us; a kernel a linear layer: 3 + 1 + 3 = 7 (with a fused
    # QKV projection 1 + 1 + 3 = 5).
    assert run(**llama, linear_bias=1)["compute_time_ms"] - base == approx(
        16 * (9.437184 + 7) * 1e-3)
    assert run(**llama, fused_qkv=1, linear_bias=1)["compute_time_ms"] - base == approx(
        16 * (2.097152 + 1 + 9.437184 + 5) * 1e-3)
    # Fused elementwise kernels (Transformer Engine's GEMM epilogues, torch.compile)
    # count neither.
    fused = {**llama, "elementwise_fusion": 1}
    assert run(**fused, fused_qkv=1, linear_bias=1)["compute_time_ms"] == approx(
        run(**fused)["compute_time_ms"])


def test_unpadded_attention_charges_flash_attns_gather_and_scatter_copies():
    # The Llama layer of the tests above (a = 8, kv = 4, t = 4: per token on a GPU
    # q = 256 elements, k = v = 128).  LLM Foundry's flash path (unpadded_attention
    # 1) gathers q, k and v (torch.gather: read and write 2 B an element) and pads
    # the output (zeros 2 B, then index_put reads 2 and writes 2); backward the
    # pad's gradient is a gather (4 B an element of q) and each unpad's zeros and
    # a scatter_ (6 B an element of q, k, v).  Per token:
    #   forward 4 x (256 + 128 + 128) + 6 x 256 = 2,048 + 1,536 = 3,584 B;
    #   backward 4 x 256 + 6 x 512 = 1,024 + 3,072 = 4,096 B;
    # x 1024 tokens = 7,864,320 B = 7.86432 us a layer and micro-batch at 1e12
    # B/s; kernels: forward 3 gathers, zeros, index_put, the all-ones mask and 5
    # index ops in each of 3 unpad_input calls = 21, backward 1 + 3 x 2 = 7: 28 us
    # at 1 us a kernel.  The unpad calls' waits (nonzero, .item()) leave their 18
    # kernels from the first wait to the attention call at the host's pace: 16 us
    # each, 15 more than the 1 us charged, 270 us a forward pass.  16 layers and
    # micro-batches on the busiest stage.
    llama = dict(mlp_weight_matrices=3, num_kv_heads=4, kernel_overhead_us=1.0,
                 host_kernel_us=16.0)
    for fusion in (1, 0):  # index ops around the kernel call: fused or eager alike
        plain, unpadded = (run(**llama, elementwise_fusion=fusion, unpadded_attention=u)
                           ["compute_time_ms"] for u in (0, 1))
        assert unpadded - plain == approx(16 * (7.86432 + 28 + 270) * 1e-3)
    # Full recompute runs the forward copies again: 3,584 B x 1024 = 3.670016 us,
    # 21 kernels and the 270 us of host pace more a layer and micro-batch.
    plain2, unpadded2 = (run(**llama, recompute=2, unpadded_attention=u)["compute_time_ms"]
                         for u in (0, 1))
    assert (unpadded2 - plain2) - (unpadded - plain) == approx(
        16 * (3.670016 + 21 + 270) * 1e-3)
    # A host no slower than the launch charge adds no pace.
    fast = dict(llama, host_kernel_us=1.0)
    assert (run(**fast, unpadded_attention=1)["compute_time_ms"]
            - run(**fast)["compute_time_ms"]) == approx(16 * (7.86432 + 28) * 1e-3)
    # An MoE layer's attention path does not take it (a dense layer's switch).
    moe = dict(llama, num_experts=2, experts_per_token=1, moe_ffn_hidden_dim=4096,
               expert_parallel=1)
    assert run(**moe, unpadded_attention=1)["compute_time_ms"] == approx(
        run(**moe)["compute_time_ms"])
