"""Muon (``optimizer`` 1) in the refined model: Newton-Schulz FLOPs and the state
it saves, by hand (jaxmodel.models.refined.muon)."""

from types import SimpleNamespace

import jax
import numpy as np
import pytest

import jaxmodel
from jaxmodel.models.refined import muon
from jaxmodel.presets import apply_presets

REFINED = jaxmodel.get_model("refined")


def ns(m, n):
    """Five quintic Newton-Schulz steps on an m x n matrix, m <= n: X X^T (2 m^2 n),
    b A + c A A (2 m^3), a X + B X (2 m^2 n)."""
    return 5 * (2 * m * m * n + 2 * m ** 3 + 2 * m * m * n)


def _x(llm, **kw):
    return SimpleNamespace(**{**REFINED.defaults, **apply_presets(REFINED, llm=llm), **kw})


def test_newton_schulz_flops_of_a_matrix_by_hand():
    assert float(muon.ns_flops(2.0, 3.0)) == 5 * (4 * 4 * 3 + 2 * 8) == ns(2, 3)
    # A tall matrix is transposed first: the same count.
    assert float(muon.ns_flops(3.0, 2.0)) == ns(2, 3)


def test_a_dense_layer_s_matrices_on_a_tensor_parallel_rank():
    # Llama 3 8B at t = 2: the fused QKV (32 + 2 x 8) x 128 / 2 = 3072 rows of 4096,
    # the output projection 4096 x 4096 / 2, the fused gate and up 2 x 14336 / 2
    # rows of 4096, the down projection 4096 x 14336 / 2.
    x = _x("llama3-8b", tensor_parallel=2.0)
    expected = ns(3072, 4096) + ns(2048, 4096) + ns(4096, 14336) + ns(4096, 7168)
    with jax.enable_x64(True):
        flops = float(muon.layer_ns_flops(x, 2.0, True))
    assert flops == pytest.approx(expected, rel=1e-12)


def test_an_mla_moe_layer_and_its_experts_by_hand():
    # Kimi K2 (DeepSeek-V3's MLA): q down 1536 x 7168 and kv down (512 + 64) x 7168
    # whole; q up 64 (128 + 64) / t x 1536, kv up 64 x 2 x 128 / t x 512 and the
    # output projection 7168 x 64 x 128 / t split.  Its MoE layers: the router 384 x
    # 7168, the shared expert's 2 x 2048 / t x 7168 and 7168 x 2048 / t; its one dense
    # layer's FFN 2 x 18432 / t x 7168 and 7168 x 18432 / t.  t = 1.
    x = _x("kimi-k2")
    attention = (ns(1536, 7168) + ns(1536, 12288) + ns(576, 7168) + ns(512, 16384)
                 + ns(7168, 8192))
    block = ns(384, 7168) + ns(4096, 7168) + ns(2048, 7168)
    dense_ffn = ns(7168, 36864) + ns(7168, 18432)
    share = 60 / 61
    expected = attention + share * block + (1 - share) * dense_ffn
    with jax.enable_x64(True):
        flops = float(muon.layer_ns_flops(x, 1.0, False))
        expert = float(muon.expert_ns_flops(x, 1.0))
    assert flops == pytest.approx(expected, rel=1e-12)
    # A routed expert: gate and up 2 x 2048 x 7168, down 7168 x 2048.
    assert expert == ns(4096, 7168) + ns(2048, 7168)


@pytest.mark.slow  # compiles the refined model
def test_muon_saves_a_state_and_orthogonalises_each_rank_s_share():
    # Llama 3 8B on 8 H100, t = 2, d = 4, the distributed optimizer (ZeRO 1): Muon
    # keeps no second moment for the layers' matrices (4 bytes a parameter over the
    # 4 ranks; the embeddings stay on Adam), and each rank runs the Newton-Schulz
    # steps for a quarter of its layers' matrices at the bf16 GEMM ceiling, while
    # its step reads and writes 8 bytes a matrix parameter fewer (28 -> 20) at HBM's
    # achieved rate.
    values = {**apply_presets(REFINED, gpu="h100-sxm", llm="llama3-8b"),
              "num_gpus": 8.0, "tensor_parallel": 2.0, "zero_stage": 1.0,
              "gpu_memory_gb": 1000.0}
    batch = {k: np.array([values.get(k, REFINED.defaults[k])] * 2) for k in REFINED.input_names}
    batch["optimizer"] = np.array([0.0, 1.0])
    out = jaxmodel.evaluate(REFINED, x64=True, **batch)
    x = _x("llama3-8b", tensor_parallel=2.0)
    h, f, a, kv, layers = 4096, 14336, 32, 8, 32
    layer_params = (2 * h * a * 128 + 2 * h * kv * 128 + 3 * h * f) / 2
    saved_gb = 4 * layers * layer_params / 4 / 1e9
    state = np.asarray(out.model_state_gb_per_gpu)
    assert state[0] - state[1] == pytest.approx(saved_gb, rel=1e-9)
    with jax.enable_x64(True):
        layer_ns = float(muon.layer_ns_flops(x, 2.0, True))
    ns_s = layers * layer_ns / 4 / (989e12 * 0.791)
    bytes_s = 8 * layers * layer_params / 4 / (3.35e12 * 0.876)
    compute = np.asarray(out.compute_time_ms)
    assert compute[1] - compute[0] == pytest.approx(1e3 * (ns_s - bytes_s), rel=1e-6)
