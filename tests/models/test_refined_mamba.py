"""Mamba-2 layers of hybrid models (``jaxmodel.models.refined.mamba``): one layer's
parameters and scan FLOPs by hand, Nemotron-3 Nano's counts against the published
figures and its step's model FLOPs by hand, and its Megatron-Bridge rows."""

from types import SimpleNamespace

import numpy as np
import pytest

import jaxmodel
from jaxmodel.models.refined import mamba, moe
from jaxmodel.models.refined.model import REFINED
from jaxmodel.presets import apply_presets, get_preset


def _small(**changes):
    # h 64, H 4 heads of P 16 (d = 64), G 2 groups, state N 8, conv 4, chunk Q 16.
    values = dict(hidden_dim=64.0, mamba_heads=4.0, mamba_head_dim=16.0, mamba_groups=2.0,
                  mamba_state_dim=8.0, mamba_conv_kernel=4.0, mamba_chunk_size=16.0,
                  tensor_parallel=1.0, precision=0.0)
    return SimpleNamespace(**{k: np.float64(v) for k, v in {**values, **changes}.items()})


def test_one_mamba_layer_parameters_by_hand():
    x = _small()
    # in_proj h -> z (64) + x (64) + B, C (2 x 2 x 8) + dt (4) = 164: 64 x 164 = 10,496;
    # out_proj 64 x 64 = 4,096; conv1d over x, B, C (96 channels), width 4 and a bias:
    # 96 x 5 = 480; A, D, dt bias 3 x 4 = 12; the gated norm's 64.
    assert float(mamba.in_proj_width(x)) == 164
    assert float(mamba.gemm_params(x)) == 10_496 + 4_096
    assert float(mamba.layer_params(x)) == 10_496 + 4_096 + 480 + 12 + 64
    # Tensor parallelism splits the projections' inner side (heads and groups).
    x2 = _small(tensor_parallel=2.0)
    assert [tuple(map(float, s)) for s in mamba.gemm_shapes(x2)] == [(82, 64), (64, 32)]


def test_one_mamba_layer_scan_flops_by_hand():
    # Per token: C B^T per group 2 Q N = 256 (x 2 groups), per head the masked block
    # applied to x 2 Q P = 512, the chunk state B^T x 2 N P = 256 and the states'
    # outputs C h 2 N P = 256 (x 4 heads): 512 + 4 x 1024 = 4,608.
    assert float(mamba.scan_flops_per_token(_small())) == 512 + 4 * 1024


def test_one_mamba_layer_bytes_by_hand():
    x = _small()
    # conv1d read + write of 96 channels (4 x 96), gated norm y, z in and out (6 x 64),
    # scan x, B, C in and y out (2 x 160), fp32 chunk states 8 x 4 x 16 x 8 / 16 = 256.
    assert float(mamba.forward_bytes_per_token(x)) == 384 + 384 + 320 + 256
    # Stored per s b h: in_proj output 2 x 164, y 2 x 64, the out_proj input 2 x 64
    # (1 x 64 under FP8), over h = 64.
    assert float(mamba.activation_bytes(x)) == (328 + 128 + 128) / 64
    assert float(mamba.activation_bytes(_small(precision=1.0))) == (328 + 128 + 64) / 64


# Nemotron-3 Nano by hand (Megatron-Bridge Nemotron3NanoProvider, HF config.json):
# h 2688, 23 Mamba-2 layers (64 heads of 64, 8 groups, state 128, conv 4), 6 attention
# layers (32 heads of 128, 2 KV heads), 23 MoE layers (router, 128 experts of 1856
# with squared ReLU: 2 matrices, top-6, a shared expert of 3712), V 131,072, untied.
H, V = 2688, 131072
MAMBA = H * (2 * 4096 + 2 * 8 * 128 + 64) + 4096 * H + (4096 + 2048) * 5 + 3 * 64 + 4096
ATTENTION = 2 * H * 32 * 128 + 2 * H * 2 * 128
EXPERT = 2 * H * 1856
ROUTER = H * 128
EMBEDDINGS = 2 * V * H


def test_nemotron3_nano_counts_by_hand_and_published():
    assert MAMBA == 38_742_208 and ATTENTION == 23_396_352
    total = 23 * MAMBA + 6 * ATTENTION + 23 * (ROUTER + 130 * EXPERT) + EMBEDDINGS
    active = 23 * MAMBA + 6 * ATTENTION + 23 * (ROUTER + 8 * EXPERT) + EMBEDDINGS
    values = apply_presets(REFINED, llm="nemotron3-nano")
    out = jaxmodel.evaluate(REFINED, x64=True, **values)
    assert float(out.total_params_b) * 1e9 == pytest.approx(total, rel=1e-12)
    assert float(out.active_params_b) * 1e9 == pytest.approx(active, rel=1e-12)
    # NVIDIA: "3.2B active (3.6B with embeddings), 31.6B total parameters".
    published = get_preset("llm", "nemotron3-nano").published
    assert float(out.total_params_b) == pytest.approx(published.total_params_b, abs=0.05)
    assert float(out.active_params_b) == pytest.approx(published.active_params_b, abs=0.05)
    # Without the input embedding (a lookup): 3.2B.
    assert float(out.active_params_b) - V * H / 1e9 == pytest.approx(3.2, abs=0.05)


def test_nemotron3_nano_step_model_flops_by_hand():
    # One GPU, one sequence of 8192: the step's model FLOPs (from MFU, the step and
    # the peak) are three passes of 2 x the active layer weights, the 6 attention
    # layers' full square 4 a d_h s, the 23 scans, and the logits 2 h V, per token.
    s = 8192
    values = {**apply_presets(REFINED, gpu="h100-sxm", llm="nemotron3-nano"),
              "num_gpus": 1, "tensor_parallel": 1, "pipeline_parallel": 1,
              "expert_parallel": 1, "gradient_accum_steps": 1, "micro_batch": 1,
              "seq_length": s, "gpu_memory_gb": 10_000}
    out = jaxmodel.evaluate(REFINED, x64=True, **values)
    flops = (float(out.mfu_percent) / 100 * float(out.step_time_ms) / 1e3
             * values["compute_tflops"] * 1e12)
    layers = 23 * MAMBA + 6 * ATTENTION + 23 * (ROUTER + 8 * EXPERT)
    scan = 2 * 8 * 128 * 128 + 64 * (2 * 128 * 64 + 4 * 128 * 64)
    per_token = 3 * (2 * layers + 6 * 4 * 32 * 128 * s + 23 * scan + 2 * H * V)
    assert flops == pytest.approx(s * per_token, rel=1e-9)


def test_without_mamba_layers_the_mamba_inputs_are_unused():
    dense = REFINED.unused(REFINED.defaults)
    assert set(mamba.HYBRID_INPUTS) <= set(dense)
    hybrid = REFINED.unused({**REFINED.defaults, **apply_presets(REFINED, llm="nemotron3-nano")})
    assert not set(mamba.HYBRID_INPUTS) & set(hybrid)


def test_a_hybrid_layout_the_model_rejects_says_why():
    base = {**apply_presets(REFINED, gpu="h100-sxm", llm="nemotron3-nano"), "num_gpus": 8,
            "pipeline_parallel": 1, "gradient_accum_steps": 1}
    # 8 Mamba groups split over t = 16: not whole (Megatron-Core asserts it).
    out = jaxmodel.evaluate(REFINED, **{**base, "tensor_parallel": 16, "num_gpus": 16})
    assert not bool(out.valid_layout)
    reasons = REFINED.layout_reasons({**REFINED.defaults, **base, "tensor_parallel": 16,
                                      "num_gpus": 16}, out._asdict())
    assert ("tensor parallelism t = 16 does not divide mamba_groups 8"
            in [problem for problem, _ in reasons])
    # 23 Mamba-2 and 30 attention layers in 52.
    bad = {**REFINED.defaults, **base, "tensor_parallel": 1, "attention_layers": 30}
    out = jaxmodel.evaluate(REFINED, **bad)
    assert not bool(out.valid_layout)
    assert REFINED.layout_reasons(bad, out._asdict())[0][0] == (
        "mamba_layers 23 + attention_layers 30 exceed the 52 layers")
    # Context parallelism of the Mamba-2 layers is not modelled: refused.
    cp = {**REFINED.defaults, **base, "tensor_parallel": 1, "context_parallel": 2}
    out = jaxmodel.evaluate(REFINED, **cp)
    assert not bool(out.valid_layout)
    assert REFINED.layout_reasons(cp, out._asdict())[0][0] == (
        "context parallelism c = 2 of the Mamba-2 layers is not modelled")


@pytest.mark.slow
@pytest.mark.parametrize("experts", [1, 128])
def test_without_mamba_layers_the_mamba_inputs_change_no_bit(experts):
    # mamba_layers 0: every other Mamba-2 input, set at random, changes no output
    # by a single bit, for dense and MoE models (the model selects its own
    # expressions by where).
    from tests.models.test_moe import _equal, random_dense

    n = 200
    base = {k: np.asarray(v, float) for k, v in random_dense(n, 5).items()}
    if experts > 1:
        base.update(num_experts=np.full(n, 128.0), experts_per_token=np.full(n, 8.0),
                    moe_ffn_hidden_dim=np.full(n, 768.0), expert_parallel=np.full(n, 8.0))
    rng = np.random.default_rng(3)
    knobs = dict(attention_layers=rng.choice([0, 4, 6], n), mamba_heads=rng.choice([64, 128], n),
                 mamba_head_dim=rng.choice([64, 80], n), mamba_state_dim=rng.choice([64, 256], n),
                 mamba_groups=rng.choice([1, 8], n), mamba_conv_kernel=rng.choice([2, 4], n),
                 mamba_chunk_size=rng.choice([64, 256], n))
    assert set(knobs) == set(mamba.HYBRID_INPUTS)
    plain = jaxmodel.evaluate(REFINED, x64=True, **base)
    knobbed = jaxmodel.evaluate(REFINED, x64=True, **base,
                                **{k: np.asarray(v, float) for k, v in knobs.items()})
    assert np.asarray(plain.valid_layout).any()
    for name in REFINED.output_names:
        assert _equal(getattr(plain, name), getattr(knobbed, name)), name


def _hybrid_counts(name, total, active):
    """The preset ``name``'s inputs, after checking that the model counts ``total``
    and ``active`` parameters (a hand count) and that they are the publisher's
    figures, within 1% and the rounding of the printed figure, the active count
    without the input embedding where the publisher leaves it out."""
    values = apply_presets(REFINED, llm=name)
    out = jaxmodel.evaluate(REFINED, x64=True, **values)
    assert float(out.total_params_b) * 1e9 == pytest.approx(total, rel=1e-12)
    assert float(out.active_params_b) * 1e9 == pytest.approx(active, rel=1e-12)
    pub = get_preset("llm", name).published
    embedding = 0 if pub.active_counts_input_embedding else V * values["hidden_dim"]
    assert abs(total / 1e9 - pub.total_params_b) <= (0.01 * pub.total_params_b
                                                     + pub.total_half_unit)
    assert abs((active - embedding) / 1e9 - pub.active_params_b) <= (
        0.01 * pub.active_params_b + pub.active_half_unit)
    return values


def _latent_hybrid_counts(h, mamba_heads, heads, layers, latent, expert_ffn, top_k):
    """Total and active parameters of a Nemotron-3 LatentMoE hybrid, by hand.

    ``layers``: (Mamba-2, attention, MoE).  A Mamba-2 layer (heads of 64, 8 groups,
    state 128, conv 4, inner width d = 64 heads): the in-projection h x (2 d + 2 x 8
    x 128 + heads), the out-projection d x h, the conv over x, B, C with its bias
    (d + 2048) x 5, A, D and the dt bias, the gated norm d.  An attention layer:
    Q and O h x heads x 128, K and V h x 2 x 128.  A LatentMoE layer: the router h x
    512, a shared expert of 2 f on h (2 x h x 2 f), the projections h -> latent -> h,
    and 512 experts of f with squared ReLU on the latent (2 x latent x f each), of
    which top-k are active.  Untied embeddings 2 V h."""
    d = 64 * mamba_heads
    mamba = h * (2 * d + 2 * 8 * 128 + mamba_heads) + d * h + (d + 2048) * 5 \
        + 3 * mamba_heads + d
    attention = 2 * h * heads * 128 + 2 * h * 2 * 128
    expert = 2 * latent * expert_ffn
    block = h * 512 + 2 * h * 2 * expert_ffn + 2 * h * latent
    m, a, e = layers
    dense = m * mamba + a * attention + e * block + 2 * V * h
    return dense + e * 512 * expert, dense + e * top_k * expert


# Nemotron-3 Super by hand (Megatron-Bridge Nemotron3SuperProvider, HF config.json):
# h 4096, 40 Mamba-2 layers (128 heads of 64, 8 groups, state 128, conv 4), 8 attention
# layers (32 heads of 128, 2 KV heads), 40 LatentMoE layers (router on h, 512 experts
# of 2688 with squared ReLU on the latent 1024, top-22, a shared expert of 5376 on h,
# the projections h -> 1024 -> h), V 131,072, untied; MTP modules not in the preset.
def test_nemotron3_super_counts_by_hand_and_published():
    total, active = _latent_hybrid_counts(4096, 128, 32, (40, 8, 40), 1024, 2688, 22)
    assert total == 120_668_322_816 and active == 12_769_852_416
    values = _hybrid_counts("nemotron3-super", total, active)
    assert (values["mamba_layers"], values["attention_layers"], values["num_layers"],
            values["moe_latent_size"]) == (40, 8, 88, 1024)
    # NVIDIA: "120 billion (active 12 billion)", the active count without the
    # input embedding (12.23B here): _hybrid_counts checks it.


# Nemotron-3 Ultra by hand (its HF config.json as transcribed in the preset's source):
# h 8192, 48 Mamba-2 layers (256 heads of 64, 8 groups, state 128, conv 4), 12
# attention layers (64 heads of 128, 2 KV heads), 48 LatentMoE layers (router on h,
# 512 experts of 5120 with squared ReLU on the latent 2048, top-22, a shared expert of
# 10240 on h, the projections h -> 2048 -> h), V 131,072, untied.
def test_nemotron3_ultra_counts_by_hand_and_published():
    total, active = _latent_hybrid_counts(8192, 256, 64, (48, 12, 48), 2048, 5120, 22)
    values = _hybrid_counts("nemotron3-ultra", total, active)
    assert (values["mamba_layers"], values["attention_layers"], values["num_layers"],
            values["moe_latent_size"], values["mamba_heads"]) == (48, 12, 108, 2048, 256)
    # NVIDIA (arXiv 2606.15007): "550 billion total and 55 billion active", the
    # active count without the input embedding (54.98B here).
    assert round((active - V * 8192) / 1e9, 2) == 54.98


# _mamba_chunk_scan_combined_bwd's launches (mamba_ssm ops/triton/ssd_combined.py,
# with z, as Megatron-Core's MambaMixer._ssm_training calls it: no rmsnorm_weight).
SSD_BACKWARD = ("dt.clone", "_chunk_cumsum_fwd", "_bmm_chunk_fwd", "_chunk_state_fwd",
                "_state_passing_fwd", "_chunk_scan_bwd_dz", "_chunk_scan_bwd_dstates",
                "_state_passing_bwd", "_chunk_scan_chunk_state_bwd_dx", "_chunk_state_bwd_db",
                "_chunk_scan_bwd_dC", "_chunk_scan_bwd_dcb", "_bmm_chunk_bwd dB",
                "_bmm_chunk_bwd dC", "ddA_cumsum_prev[..., -1] +=", "flip", "cumsum", "flip",
                "_chunk_scan_bwd_ddAcs_stable", "ddA_next + ddA_prev", "ddA +=",
                "_chunk_cumsum_bwd")
# _ssm_training's eager ops forward: zxBCdt's transposed copy, A_log.float(), exp,
# neg, dt_bias.float(), y's transposed copy.
EAGER_FORWARD = ("zxBCdt copy", "A_log cast", "exp", "neg", "dt_bias cast", "y copy")


def test_mamba_layer_kernels_by_hand():
    # Forward 13 (norm, in-proj, conv1d, 5 SSD kernels, norm, out-proj, residual,
    # 2 TP collectives) and the eager ops; backward the norm, 4 GEMMs, conv1d
    # again and its gradient, the SSD backward, norm, residual, 2 TP collectives
    # and the eager ops' gradients (one each).
    assert len(SSD_BACKWARD) == 22 and len(EAGER_FORWARD) == 6
    assert mamba.MAMBA_LAYER_KERNELS == (13 + len(EAGER_FORWARD) + (1 + 4 + 2 + 1 + 1 + 2)
                                         + len(SSD_BACKWARD) + len(EAGER_FORWARD))


def test_nemotron3_nano_mixer_layers_run_at_the_host_pace_by_hand():
    # Nano on H100, dropless: every layer but the first follows an MoE layer's
    # sync, so all of the average layer's kernels are paced, not the MoE
    # layers' 23/52 share: (6 attention x 30 + 23 Mamba-2 x 58 + 23 FFN x 30)
    # / 52 per layer (test_mamba_layer_kernels_by_hand: 58), plus the MoE
    # kernels (40 here), each at host - launch.
    x = SimpleNamespace(**{**REFINED.defaults, **apply_presets(
        REFINED, gpu="h100-sxm", llm="nemotron3-nano")})
    # mamba.moe_view: the 29 mixer layers counted with the leading non-MoE layers.
    x.dense_layers = x.dense_layers + x.mamba_layers + x.attention_layers
    assert float(moe.dropless(x)) == 1.0 and float(moe.moe_layers(x)) == 23
    assert float(mamba.paced_layer_share(x)) == 1.0
    layer = (6 * 30 + 23 * 58 + 23 * 30) / 52
    paced = (x.host_kernel_us - x.kernel_overhead_us) * 1e-6
    assert paced > 0
    got = float(moe.host_paced_seconds(x, layer, 40.0, x.kernel_overhead_us * 1e-6,
                                       layer_share=mamba.paced_layer_share(x)))
    assert got == pytest.approx(paced * (layer + 40), rel=1e-6)
    # Nemotron-H style (no experts): no sync, nothing paced.
    x.num_experts = 1.0
    assert float(mamba.paced_layer_share(x)) == 0.0


def test_the_ssd_scan_rate_reproduces_its_h100_measurement():
    # vLLM PR 27299's H100 microbenchmark of mamba_chunk_scan_combined: 128 heads of 64,
    # 1 group, state 128, chunk 256, median 1.18e7 tokens/s.  By hand at that shape:
    # FLOPs 2 x 1 x 256 x 128 + 128 x (2 x 256 x 64 + 4 x 128 x 64) = 8,454,144 a token;
    # bytes 2 x (8,448 + 8,192) bf16 + 8 x 128 x 64 x 128 / 256 fp32 states = 66,048.
    x = _small(**mamba.SSD_MEASURED_SHAPE)
    assert float(mamba.scan_flops_per_token(x)) == 8_454_144
    assert float(mamba.scan_bytes_per_token(x)) == 66_048
    # The scan's FLOPs at the measured fraction of the H100 preset's bf16 peak, plus
    # its bytes at the preset's HBM rate, give the measured rate back (to the
    # fraction's three digits).
    h100 = get_preset("gpu", "h100-sxm").values
    peak = h100["compute_tflops"] * 1e12
    hbm = h100["hbm_bandwidth_tb_s"] * 1e12 * h100["hbm_efficiency"]
    seconds = mamba.scan_seconds(8_454_144, peak) + 66_048 / hbm
    assert 1.0 / seconds == pytest.approx(1.18e7, rel=2e-3)
    # A quarter of the fused-attention rate the scan was taken at before.
    assert mamba.SSD_PEAK_FRACTION == 0.137 < h100["attention_efficiency"] / 3
