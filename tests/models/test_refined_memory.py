"""The memory of 2026 training (issue 24), each term against a hand derivation.

Layer activations are counted from the list of tensors a Megatron-Core layer
with Transformer Engine saves for its backward pass; the stage totals use
``test_refined.TOY`` (t = 4, p = 2, a toy GPT layer with s b h = 1,048,576 and
16 s b h of activations per layer with dropout, 16 bytes per parameter).
"""

from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest
from test_refined import TOY

import jaxmodel
from jaxmodel.api import as_dicts
from jaxmodel.models.presets import GPUS, _datasheet_memory_gb
from jaxmodel.models.refined import REFINED, RefinedInputs, layer_activation_bytes, moe
from jaxmodel.precision import computing
from jaxmodel.presets import apply_presets

SBH = 1024 * 1024  # TOY: s b h
P_GPU = 12_845_056  # TOY: parameters on a GPU of the first stage
LAYER_P = 3_145_728  # TOY: one layer's parameters on a GPU, 12 h^2 / t


def run(**changes) -> dict:
    return as_dicts(REFINED, jaxmodel.evaluate(REFINED, x64=True, **{**TOY, **changes}))


def approx(x):
    return pytest.approx(x, rel=1e-10)


def _layer_bytes(recompute=0, sp=1, **changes) -> float:
    values = {**REFINED.defaults, **apply_presets(REFINED, llm="llama3-70b"),
              "tensor_parallel": 4, "micro_batch": 1, "seq_length": 8192, **changes}
    with computing():
        x = RefinedInputs(**{k: jnp.asarray(float(v), jnp.float64) for k, v in values.items()})
        return float(layer_activation_bytes(x, jnp.asarray(recompute), jnp.asarray(float(sp))))


# Llama 3 70B (h 8192, 64 heads, 8 KV heads, SwiGLU f = 28672), s = 8192, b = 1,
# t = 4 with sequence parallelism: every tensor is split by t, s b h / t =
# 16,777,216 elements.
LLAMA_SBH_T = 8192 * 8192 / 4


def test_llama_layer_activations_from_the_tensor_list():
    # bf16, no dropout: the two norm inputs 2 + 2; the QKV and FC1 inputs 2 + 2;
    # Q 2, K and V 2 x 2 x 8 / 64 = 0.5; the attention output 2; the FC1 output
    # (gate and up) 4 f / h = 14; the SwiGLU output (FC2 input) 2 f / h = 7:
    # 33.5 bytes per element.
    assert _layer_bytes(dropout=0, precision=0) == approx(33.5 * LLAMA_SBH_T)
    # With dropout its two masks (1 byte each) are stored: 35.5 (Korthikanti's
    # 10 replicated bytes for 8 + 2).
    assert _layer_bytes(dropout=1, precision=0) == approx(35.5 * LLAMA_SBH_T)
    # FP8: the QKV, FC1 and FC2 inputs are saved as their FP8 casts (1 byte:
    # -1, -1, -3.5) and the output projection keeps an FP8 copy of the attention
    # output (+1): 29.
    assert _layer_bytes(dropout=0, precision=1) == approx(29.0 * LLAMA_SBH_T)
    # Full recompute keeps the layer input, 2 bytes, whatever the precision.
    assert _layer_bytes(recompute=2, dropout=0, precision=1) == approx(2.0 * LLAMA_SBH_T)


def test_per_op_selective_recompute_keeps_torchtitans_saved_outputs():
    # torchtitan's op policy keeps the layer input 2, the outputs of wq 2 and wv
    # 2 x 8 / 64 = 0.25, the attention output 2 and its fp32 log-sum-exp 4 x 64
    # / 8192, w1 4 f / (2 h) = 7 and w2 (row-parallel partial sums, not split by
    # t: 2 x 4 = 8 per s b h / t), and with sequence parallelism the two
    # reduce-scatter outputs 2 + 2; per s b h / t: 2 + 2 + 0.25 + 2 + 1/32 + 7 + 8
    # + 4 = 25.28125.
    assert _layer_bytes(recompute=3, dropout=0, precision=0) == approx(
        25.28125 * LLAMA_SBH_T)
    # Without tensor parallelism (Llama 3 8B on FSDP: h 4096, 32 heads, 8 KV
    # heads, f 14336, s b h = 2 x 8192 x 4096): 2 + 2 + 0.5 + 2 + 7 + 2 + 4 x 32 /
    # 4096 = 15.53125 bytes per s b h, FP8 or not (the outputs are bf16).
    for precision in (0, 1):
        assert _layer_bytes(recompute=3, dropout=0, precision=precision, tensor_parallel=1,
                            hidden_dim=4096, num_heads=32, num_kv_heads=8,
                            ffn_hidden_dim=14336, micro_batch=2, sp=0) == approx(
            15.53125 * 2 * 8192 * 4096)
    # ... and so with sequence_parallel set (torchtitan's rows set it whatever t):
    # without TP there is no reduce-scatter, so nothing more is saved.
    assert _layer_bytes(recompute=3, dropout=0, precision=0, tensor_parallel=1,
                        hidden_dim=4096, num_heads=32, num_kv_heads=8,
                        ffn_hidden_dim=14336, micro_batch=2, sp=1) == approx(
        15.53125 * 2 * 8192 * 4096)


def test_per_op_selective_recompute_runs_every_other_matmul_again():
    # recompute 3 against none: the forward GEMMs of wk (h -> kv h / a), wo
    # (h -> h) and w3 (h -> f) run again.  With gemm_shape_model 0 every GEMM is
    # at the ceiling, so the extra FLOPs are 2 b s (h^2 kv / a + h^2 + h f) per
    # layer; TOY's GPT layer (a = kv, f = 4 h, two matrices: w2 in place of w3)
    # recomputes h^2 + h^2 + 4 h^2 = 6 h^2 of its 12 h^2: half its GEMM FLOPs.
    base = run(recompute=0, gemm_shape_model=0, kernel_overhead_us=0)
    sac = run(recompute=3, gemm_shape_model=0, kernel_overhead_us=0)
    full = run(recompute=2, gemm_shape_model=0, kernel_overhead_us=0)
    assert sac["hfu_percent"] / sac["mfu_percent"] < full["hfu_percent"] / full["mfu_percent"]
    h, L, b, s, t, p, m = (TOY[k] for k in ("hidden_dim", "num_layers", "micro_batch",
                                             "seq_length", "tensor_parallel",
                                             "pipeline_parallel", "gradient_accum_steps"))
    extra_flops = L / p * m * 2 * b * s * 6 * h * h / t
    rate = TOY["compute_tflops"] * 1e12 * TOY["matmul_efficiency"]
    # The memory-bound kernels of the forward pass run again too (fwd bytes
    # without the attention scores: FlashAttention keeps none).
    memory_s = (sac["memory_bound_ms"] - base["memory_bound_ms"]) / 1e3
    assert (sac["recompute_ms"] - base["recompute_ms"]) / 1e3 == approx(
        extra_flops / rate + memory_s)


def test_dropout_masks_of_the_attention_scores():
    # Without FlashAttention the scores add (2 + 3 dropout) a s / h per s b h / t:
    # the softmax output 2, and with dropout its mask 1 and output 2.
    # a s / h = 64 x 8192 / 8192 = 64.
    for dropout, score_bytes in ((0, 2.0), (1, 5.0)):
        base = _layer_bytes(dropout=dropout, precision=0, flash_attention=1)
        scores = _layer_bytes(dropout=dropout, precision=0, flash_attention=0) - base
        assert scores == approx(score_bytes * 64 * LLAMA_SBH_T)


def test_embedding_mask_only_with_dropout():
    # TOY's first stage: 2 micro-batches x 4 layers x 16 s b h, plus the
    # embedding's dropout mask s b h per micro-batch in flight (2), or none.
    assert run()["activation_gb_per_gpu"] == approx(130 * SBH / 1e9)
    # Without dropout the layers lose their two masks (s b h each, replicated
    # at t = 4 without SP): 14 s b h per layer, and the embedding mask goes.
    assert run(dropout=0)["activation_gb_per_gpu"] == approx(2 * 4 * 14 * SBH / 1e9)


def test_fp8_weight_copies_and_fp8_primary_weights():
    # TOY, 16 bytes a parameter.  FP8 adds an FP8 copy and its transpose of each
    # layer weight (2 bytes x 4 layers x 12 h^2 / t); FP8 primary weights
    # (fp8_param_gather) hold the weight in FP8 with its transpose, 1 + 1 bytes
    # in place of bf16's 2: no more than BF16.
    assert run(precision=1)["model_state_gb_per_gpu"] == approx(
        (16 * P_GPU + 2 * 4 * LAYER_P) / 1e9)
    assert run(precision=1, fp8_param_gather=1)["model_state_gb_per_gpu"] == approx(
        16 * P_GPU / 1e9)
    assert run(precision=0, fp8_param_gather=1)["model_state_gb_per_gpu"] == approx(
        16 * P_GPU / 1e9)


def test_activation_offload_keeps_one_layer_in_transit():
    # TOY's first stage, 3 of its 4 layers offloaded: 1 layer x 2 micro-batches
    # x 16 s b h stays, the one in transit 16 s b h, the embedding masks 2:
    # 50 s b h (the last stage holds 16 + 16 + the logits 3.5: less).
    assert run(offload_layers=3)["activation_gb_per_gpu"] == approx(50 * SBH / 1e9)
    # Offloading more layers than the stage has keeps only the one in transit;
    # then the last stage is the fuller: 16 + the output layer's input 4 s b h / t
    # = 1 + the logits 10 s V / t = 2.5: 19.5 s b h (the first: 16 + 2).
    assert run(offload_layers=9)["activation_gb_per_gpu"] == approx(19.5 * SBH / 1e9)


def test_offload_copies_show_only_where_they_outlast_their_pass():
    # TOY, 3 of a stage's 4 layers offloaded: D = 3 x 16 s b h = 50,331,648 bytes a
    # micro-batch go out in the forward pass and back in the backward pass.  Over a
    # fast host link both copies hide under the passes; over a slow one both show,
    # m (2 D / B - 3 F) a step, so halving B from 1 MB/s to 0.5 adds 2 m D (1 / 5e5 -
    # 1 / 1e6) = 8 D x 1e-6 s = 402.653184 s, whatever F is.
    assert run(offload_layers=3, host_link_gb_s=1000.0)["offload_ms"] == 0.0
    assert run(offload_layers=0, host_link_gb_s=0.001)["offload_ms"] == 0.0
    slow = run(offload_layers=3, host_link_gb_s=0.001)
    slower = run(offload_layers=3, host_link_gb_s=0.0005)
    assert (slower["offload_ms"] - slow["offload_ms"]) == approx(8 * 50_331_648 * 1e-6 * 1e3)
    assert slower["step_time_ms"] - slow["step_time_ms"] == approx(
        slower["offload_ms"] - slow["offload_ms"])
    assert slow["bottleneck"] == "offload"


def test_interleaved_in_flight_is_megatrons_warm_up():
    # 16 layers, p = 4, v = 2 (chunks of 2 layers), m = 8.  Megatron-Core's
    # interleaved schedule on rank 0 runs 2 (p - 1) + (v - 1) p = 10 warm-up
    # chunks and one more in the steady state before its first backward: 11
    # chunks, 22 layers of 16 s b h, and the embedding masks for 4 micro-batches
    # x 1.375 (the same factor 1 + (p - 1) / (p v)): 357.5 s b h.
    out = run(num_gpus=16, pipeline_parallel=4, virtual_stages=2, num_layers=16,
              gradient_accum_steps=8)
    warm_up_chunks = 2 * (4 - 1) + (2 - 1) * 4 + 1
    assert out["activation_gb_per_gpu"] == approx(
        (warm_up_chunks * 2 * 16 + 4 * 1.375) * SBH / 1e9)


def test_interleaved_in_flight_never_exceeds_the_micro_batches():
    # The same with m = p = 4: there are only m v = 8 chunk passes, and
    # Megatron-Core runs them all before the first backward (schedules.py:
    # num_microbatches == pipeline_parallel_size -> all_warmup_microbatches),
    # not the 11 of the formula: 8 chunks, 16 layers of 16 s b h, and the
    # embedding masks of the 4 micro-batches: 260 s b h (the old count, 357.5,
    # held 3 chunks of micro-batches that do not exist).
    out = run(num_gpus=16, pipeline_parallel=4, virtual_stages=2, num_layers=16)
    assert out["activation_gb_per_gpu"] == approx((4 * 2 * 2 * 16 + 4) * SBH / 1e9)


def _loss_stage(cross_entropy_fusion=None, without_tp=False) -> dict:
    """TOY with 4096 tokens of vocabulary and every layer offloaded, so that the
    last stage's loss shows (``without_tp``: t = 1 on 2 GPUs)."""
    changes = {} if cross_entropy_fusion is None else {
        "cross_entropy_fusion": cross_entropy_fusion}
    if without_tp:
        changes.update(tensor_parallel=1, num_gpus=2)
    return run(offload_layers=9, vocab_size=4096, **changes)


def test_transformer_engines_cross_entropy_keeps_only_the_bf16_logits():
    # TOY with 4096 tokens of vocabulary and every layer offloaded: the last
    # stage holds the layer in transit 16, the output layer's input 1 and the
    # logits, s V / t = 1024 x 4096 / 4 = 1 s b h of them: 10 bytes each with a
    # fused kernel that keeps an fp32 softmax (27 s b h), 2 with Transformer
    # Engine's, which writes the gradient into the bf16 logits (19 s b h; the
    # first stage's 16 + 2 is less in both).
    fused = _loss_stage()
    in_place = _loss_stage(2)
    assert fused["activation_gb_per_gpu"] == approx(27 * SBH / 1e9)
    assert in_place["activation_gb_per_gpu"] == approx(19 * SBH / 1e9)
    # The loss kernel's traffic is a fused kernel's either way.
    assert in_place["step_time_ms"] == approx(fused["step_time_ms"])


def test_pytorch_cross_entropy_holds_three_or_four_fp32_logit_tensors():
    # torchtitan's loss, F.cross_entropy on fp32 logits (cross_entropy_fusion 3),
    # at its backward pass: the saved log_softmax output, nll_loss_backward's
    # gradient and log_softmax's gradient, 3 x 4 = 12 bytes a logit; under loss
    # parallelism (t > 1) DTensor's fused backward, (grad_input + exp(x)) *
    # grad_output, holds x, grad_input, exp(x) and the sum: 16.  TOY (t = 4) with
    # 4096 tokens of vocabulary, every layer offloaded: the layer in transit 16,
    # the output layer's input 1 and s V / t = 1 s b h of logits at 16: 33 s b h.
    torch_ce = _loss_stage(3)
    assert torch_ce["activation_gb_per_gpu"] == approx(33 * SBH / 1e9)
    # Without TP (t = 1, 2 GPUs): the layer in transit 10 + 24 = 34 s b h, the
    # output layer's input 4, and s V = 4 s b h of logits at 12 bytes: 86.
    one = _loss_stage(3, without_tp=True)
    assert one["activation_gb_per_gpu"] == approx(86 * SBH / 1e9)
    # Its traffic: 76 bytes a logit under loss parallelism instead of a fused
    # kernel's 12 (TOY: s V / t = 262,144 logits a micro-batch, 4 micro-batches,
    # 1e12 B/s).
    fused = _loss_stage()
    assert torch_ce["compute_time_ms"] - fused["compute_time_ms"] == approx(
        4 * 64 * 1024 * 4096 / 4 / 1e12 * 1e3)
    # ... and 36 without TP (cast 6, log_softmax 8, zeros 4, its backward 12,
    # cast back 6): 24 bytes more on each of the s V = 4,194,304 logits.
    one_fused = _loss_stage(without_tp=True)
    assert one["compute_time_ms"] - one_fused["compute_time_ms"] == approx(
        4 * 24 * 1024 * 4096 / 1e12 * 1e3)


def test_compiled_pytorch_cross_entropy_keeps_the_bf16_logits_and_their_gradient():
    # torchtitan's loss of 2025 under --training.compile (cross_entropy_fusion 4):
    # F.cross_entropy(pred.float()) compiled, on the model's bf16 output.
    # AOTAutograd saves the bf16 logits (the graph's input) and a max and a
    # log-sum-exp a token; the fused backward writes a new bf16 gradient: 2 + 2 =
    # 4 bytes a logit at the loss's backward pass.  TOY (t = 4) with 4096 tokens of
    # vocabulary, every layer offloaded: the layer in transit 16, the output
    # layer's input 1 and s V / t = 1 s b h of logits at 4: 21 s b h.
    compiled = _loss_stage(4)
    assert compiled["activation_gb_per_gpu"] == approx(21 * SBH / 1e9)
    # Without TP (t = 1, 2 GPUs): the layer in transit 34, the output layer's
    # input 4, and s V = 4 s b h of logits at 4 bytes: 54 (86 eager).
    one = _loss_stage(4, without_tp=True)
    assert one["activation_gb_per_gpu"] == approx(54 * SBH / 1e9)
    # Its traffic: one read of the bf16 logits forward (the online softmax), a
    # read and a write backward, 6 bytes a logit against a fused kernel's 12
    # (TOY: s V / t = 262,144 logits a micro-batch, 4 micro-batches, 1e12 B/s).
    fused = _loss_stage()
    assert fused["compute_time_ms"] - compiled["compute_time_ms"] == approx(
        4 * 6 * 1024 * 4096 / 4 / 1e12 * 1e3)


def approx32(x):
    """The MoE functions on plain numbers compute in float32."""
    return pytest.approx(x, rel=1e-6)


def _deepseek(**changes):
    x = SimpleNamespace(**{k: np.float64(v) for k, v in apply_presets(
        REFINED, llm="deepseek-v3").items()})
    for k, v in {"precision": 0, "mla_recompute": 0, **changes}.items():
        setattr(x, k, np.float64(v))
    return x


def test_mla_activations_by_hand():
    # DeepSeek-V3: h 7168, 128 heads of d_h 128 with a rotary part d_r 64,
    # latents r_q 1536 and r_kv 512.  Per element of s b h: Q and K of
    # 128 x 192 = 24,576 values each, V and the output 128 x 128 = 16,384 each,
    # 2 bytes: 163,840 / 7168; under FP8 the output projection's FP8 copy adds
    # 16,384.  With the up-projections recomputed only the output stays.
    assert float(moe.attention_activation_bytes(_deepseek())) == approx32(163_840 / 7168)
    assert float(moe.attention_activation_bytes(_deepseek(precision=1))) == approx32(
        180_224 / 7168)
    assert float(moe.attention_activation_bytes(_deepseek(mla_recompute=1))) == approx32(
        32_768 / 7168)
    # Latents: the down-projections' outputs 1536 + 512 + 64 as norm inputs
    # (2 bytes) and the normed 1536 + 512 as up-projection inputs (2; FP8 1).
    assert float(moe.latent_activation_bytes(_deepseek())) == approx32(8_320 / 7168)
    assert float(moe.latent_activation_bytes(_deepseek(precision=1))) == approx32(6_272 / 7168)


def test_routed_copies_keep_only_the_expert_input():
    # Qwen3-235B (94 MoE layers of 94): k = 8 permuted copies of the expert FC1
    # input, 2 bytes each (FP8: 1), per element of s b h.
    x = SimpleNamespace(**apply_presets(REFINED, llm="qwen3-235b-a22b"), moe_latent_size=0.0)
    x.moe_imbalance, x.capacity_factor = 1.0, 0.0
    for precision, per_copy in ((0, 2.0), (1, 1.0)):
        x.precision = np.float64(precision)
        assert float(moe.dispatch_activation_bytes(x)) == approx32(8 * per_copy)


def test_capacity_in_bytes_from_the_datasheet_gib():
    # nvidia-smi shows 81,559 MiB on an "80 GB" H100 and 183,359 MiB on a
    # "180 GB" B200: the datasheet's GB are GiB (what the driver holds back is
    # in the reserve).
    assert _datasheet_memory_gb(80) == approx(85.89934592)
    assert GPUS["h100-sxm"].values["gpu_memory_gb"] == approx(85.89934592)
    assert GPUS["b200"].values["gpu_memory_gb"] == approx(180 * 1.073741824)
    assert 183_359 * 2**20 / 1e9 < GPUS["b200"].values["gpu_memory_gb"]


def test_dtensor_tp_saves_the_gathered_gemm_inputs():
    # PyTorch DTensor TP (tp_overlap_kind 1, torchtitan) keeps the QKV and FC1 inputs
    # as gathered (Replicate) for the backward pass: 2 + 2 bytes of all s b h, t = 4
    # times the shard Transformer Engine keeps, 4 x 3 = 12 more per s b h / t:
    # 33.5 -> 45.5; FP8 casts (1 + 1): 29 -> 35.
    assert _layer_bytes(dropout=0, precision=0, tp_overlap_kind=1) == approx(
        45.5 * LLAMA_SBH_T)
    assert _layer_bytes(dropout=0, precision=1, tp_overlap_kind=1) == approx(
        35.0 * LLAMA_SBH_T)
    # Without sequence parallelism every rank holds the whole input either way:
    # 8 replicated bytes x t = 32, plus the 25.5 split ones.
    assert _layer_bytes(sp=0, dropout=0, precision=0, tp_overlap_kind=1) == approx(
        57.5 * LLAMA_SBH_T)
    assert _layer_bytes(sp=0, dropout=0, precision=0) == approx(57.5 * LLAMA_SBH_T)


def test_norm_recompute_frees_the_norm_outputs_and_runs_the_norms_again():
    # Llama 3 70B layer as above: the QKV and FC1 inputs (the norm outputs) go,
    # 2 + 2 bytes in bf16 (33.5 -> 29.5), 1 + 1 under FP8 (29 -> 27).
    assert _layer_bytes(dropout=0, precision=0, norm_recompute=1) == approx(29.5 * LLAMA_SBH_T)
    assert _layer_bytes(dropout=0, precision=1, norm_recompute=1) == approx(27.0 * LLAMA_SBH_T)
    # Time: both norms' forward again, each reading and writing s b h in bf16
    # (8 bytes per element, 8,388,608 B at 1e12 B/s = 8.388608 us) per layer
    # and micro-batch: 4 layers x 4 micro-batches on TOY's busiest stage.
    extra_ms = run(norm_recompute=1)["memory_bound_ms"] - run()["memory_bound_ms"]
    assert extra_ms == approx(16 * 8.388608e-3)


def test_fsdp_kept_gathered_holds_the_stage_whole_and_gathers_once():
    # TOY (d = 1): ZeRO-3 holds two layers' weights gathered (2 x 2 bytes) and one
    # layer's gradients (grad_buffer_bytes 2) beside the shards; kept gathered
    # across micro-batches it holds the whole first stage's weights and gradients
    # instead: P_GPU x (2 + 2) - 6 LAYER_P bytes more.
    per_mb = run(zero_stage=3)
    kept = run(zero_stage=3, fsdp_keep_gathered=1)
    assert (kept["model_state_gb_per_gpu"] - per_mb["model_state_gb_per_gpu"]) * 1e9 == approx(
        P_GPU * 4 - 6 * LAYER_P)
    # 16 GPUs (d = 2): every micro-batch gathers each layer twice and
    # reduce-scatters it once, and the root unit (the embedding, V h / t =
    # 262,144 parameters) once each (m = 4; bf16 weights and bf16 gradients,
    # 1/2 x bytes / 1e11 B/s: 125.82912 us for the 4 layers, 2.62144 us for the
    # root); kept gathered, one gather and one reduce-scatter of each a step.
    per_mb = run(zero_stage=3, num_gpus=16)
    kept = run(zero_stage=3, num_gpus=16, fsdp_keep_gathered=1)
    assert per_mb["dp_allreduce_raw_ms"] == approx(4 * (3 * 125.82912 + 2 * 2.62144) * 1e-3)
    assert kept["dp_allreduce_raw_ms"] == approx((2 * 125.82912 + 2 * 2.62144) * 1e-3)


def test_fp8_param_gather_gathers_fp8_weights():
    # ZeRO-3 with FP8 primary weights (fp8_param_gather): no FP8 copy of the 4
    # layers (2 bytes each) and the two gathered layers in FP8 (1 byte, not 2):
    # 8 LAYER_P + 2 LAYER_P bytes less than FP8 copies beside bf16 weights.
    copies = run(zero_stage=3, precision=1)
    gathered = run(zero_stage=3, precision=1, fp8_param_gather=1)
    assert (copies["model_state_gb_per_gpu"] - gathered["model_state_gb_per_gpu"]) * 1e9 == (
        approx(10 * LAYER_P))
    # d = 2: the layers' weights are gathered as FP8, the embedding in bf16; the
    # gradients stay bf16.
    copies = run(zero_stage=3, precision=1, num_gpus=16)
    gathered = run(zero_stage=3, precision=1, fp8_param_gather=1, num_gpus=16)
    # The layers' gathers move 4 LAYER_P bytes in FP8 (8 LAYER_P in bf16), their
    # reduce-scatter 8 LAYER_P; the embedding (the root unit, R = 262,144
    # parameters) is gathered once in bf16 and reduce-scattered once: 4 R.
    root = 262_144
    assert gathered["dp_allreduce_raw_ms"] == approx(
        copies["dp_allreduce_raw_ms"] * (16 * LAYER_P + 4 * root) / (24 * LAYER_P + 4 * root))


def test_pytorch_pipelining_buffers_on_the_first_stage():
    # TOY (p = 2, m = 4, v = 1, no SP): a stage's input or output is one layer's
    # input, 2 s b h bytes.  torch.distributed.pipelining keeps on the first
    # stage a gradient receive buffer for each of the 4 micro-batches (8 s b h)
    # and, as of Dec 2024 (pp_stage_buffers 2), its output of every micro-batch
    # until the step ends (8 s b h); from May 2025 (1) only the outputs of the 2
    # micro-batches in flight (fwd_cache, 4 s b h).  The first stage stays the
    # fullest (the last adds 3 activation buffers, 6 s b h, and the 4
    # micro-batches' bf16 logits, 4 x 2 x s V / t = 2 s b h).  Megatron-Core (0)
    # keeps none of them.
    base = run()["activation_gb_per_gpu"]
    assert (run(pp_stage_buffers=2)["activation_gb_per_gpu"] - base) * 1e9 == approx(16 * SBH)
    assert (run(pp_stage_buffers=1)["activation_gb_per_gpu"] - base) * 1e9 == approx(12 * SBH)
    # No pipeline, no pipeline runtime.
    one = dict(pipeline_parallel=1, num_gpus=4)
    assert run(pp_stage_buffers=2, **one)["activation_gb_per_gpu"] == approx(
        run(**one)["activation_gb_per_gpu"])


def _pipeline_buffers(chunks, first, last, **changes) -> float:
    from jaxmodel.models.refined.derived import derive
    from jaxmodel.models.refined.memory import pipeline_buffer_bytes

    values = {**REFINED.defaults, **apply_presets(REFINED, llm="llama3.1-405b"), **changes}
    with computing():
        x = RefinedInputs(**{k: jnp.asarray(float(v), jnp.float64) for k, v in values.items()})
        return float(pipeline_buffer_bytes(x, derive(x), chunks, first=first, last=last))


def test_pytorch_pipelining_keeps_every_micro_batchs_bf16_logits_on_the_last_stage():
    # torchtitan's Llama 3.1 405B, t = 8 with SP, p = 8, 8 micro-batches of 4 x
    # 8192 tokens (its Table 5, 1F1B), the last rank (1 micro-batch in flight):
    # the logits of all 8 micro-batches as the model returns them, bf16 (PR 642
    # of Oct 2024 moved the upcast into the loss, F.cross_entropy(pred.float())),
    # 8 x 2 x 32768 x 128256 / 8 = 8,405,385,216 bytes, and the activation
    # receive buffers of the 7 micro-batches not in flight, 7 x 2 x 32768 x
    # 16384 / 8 = 939,524,096 bytes; no gradient is received, no output sent.
    layout = dict(num_gpus=512, tensor_parallel=8, pipeline_parallel=8, micro_batch=4,
                  gradient_accum_steps=8, seq_length=8192, sequence_parallel=1,
                  pp_stage_buffers=2)
    last = _pipeline_buffers(1.0, False, True, cross_entropy_fusion=3, **layout)
    assert last == approx(8_405_385_216 + 939_524_096)
    # The loss's own buffers are counted apart (logits_mem): the held outputs are
    # bf16 whatever the loss, Transformer Engine's or the compiled one.
    for kind in (1, 2, 4):
        assert _pipeline_buffers(1.0, False, True, cross_entropy_fusion=kind,
                                 **layout) == approx(last)
    # Interleaved, v = 2, 16 micro-batches of 2, the first rank with 23 chunk
    # passes in flight: stage 0 receives no activation, stage 8 one a
    # micro-batch (16, of which its share of the chunks in flight, 11.5, are
    # its layers' inputs already); both receive a gradient and keep an output a
    # micro-batch (32 + 32): 68.5 buffers of 2 x 16384 x 16384 / 8 = 67,108,864 bytes.
    inter = dict(layout, virtual_stages=2, micro_batch=2, gradient_accum_steps=16)
    assert _pipeline_buffers(23.0, True, False, **inter) == approx(68.5 * 67_108_864)
