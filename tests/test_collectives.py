"""The shared collectives and GEMM-efficiency physics, against hand arithmetic."""

import pytest

from jaxmodel.collectives import (
    Network,
    all_gather,
    all_reduce,
    all_to_all,
    contention_growth,
    gemm_efficiency,
    hierarchical_seconds,
    one_level,
    point_to_point,
    reduce_scatter,
)
from jaxmodel.precision import computing

# NVLink 1e11 B/s with 1 us a step, network 1e10 B/s with 5 us a step.
NET = Network(intra_bw=1e11, inter_bw=1e10, intra_latency=1e-6, inter_latency=5e-6)


@pytest.fixture(autouse=True)
def _x64():
    with computing():
        yield


def approx(x):
    return pytest.approx(x, rel=1e-12)


def test_all_reduce_two_levels():
    # 16 ranks, 8 to a node, 8e8 B: intra 2 * 7/8 * 8e8 / 1e11 = 14 ms + 14 steps * 1 us;
    # inter (k = 2) 2 * 1/2 * 1e8 / 1e10 = 10 ms + 2 steps * 5 us.
    assert float(all_reduce(8e8, 16.0, 8.0, NET)) == approx(0.014 + 14e-6 + 0.010 + 10e-6)
    # One level when the group fits in a node; nothing for one rank.
    assert float(all_reduce(8e8, 8.0, 8.0, NET)) == approx(0.014 + 14e-6)
    assert float(all_reduce(8e8, 1.0, 8.0, NET)) == 0.0


def test_reduce_scatter_and_all_gather_are_half_an_all_reduce():
    for f in (reduce_scatter, all_gather):
        assert float(f(8e8, 16.0, 8.0, NET)) == approx((0.014 + 14e-6 + 0.010 + 10e-6) / 2)
    assert float(hierarchical_seconds(8e8, 16.0, 8.0, NET, 1.0)) == approx(
        float(reduce_scatter(8e8, 16.0, 8.0, NET)))


def test_point_to_point():
    assert float(point_to_point(1e6, 0.0, NET)) == approx(1e6 / 1e11 + 1e-6)
    assert float(point_to_point(1e6, 1.0, NET)) == approx(1e6 / 1e10 + 5e-6)


def test_all_to_all_slower_link_sets_the_pace():
    # 16 ranks, 8 a node, 1.6e9 B per rank: 7/16 of it in the node,
    # 7e8 / 1e11 = 7 ms + 7 us; 8/16 across, 8e8 / 1e10 = 80 ms + (8 / 8) * 5 us.
    assert float(all_to_all(1.6e9, 16.0, 8.0, NET)) == approx(0.080 + 5e-6)
    # Within one node: 7/8 of 1.6e9 over NVLink, 14 ms + 7 us.
    assert float(all_to_all(1.6e9, 8.0, 8.0, NET)) == approx(0.014 + 7e-6)


def test_one_level_network_is_the_seeds_ring():
    # The seed's ring: 2 (n - 1) / n bytes on one link of 1e9 B/s.
    net = one_level(1e9)
    assert float(all_reduce(1e9, 4.0, 1.0, net)) == approx(1.5)
    assert float(all_reduce(1e9, 4.0, 4.0, net)) == approx(1.5)


def test_gemm_efficiency_by_hand():
    # A GEMM that fills whole tiles and waves: m = 128 * 4, n = 256 * 33, 132 tiles on
    # 132 SMs (one wave), k = 8192.  Math 2 m n k / (1e15 x 0.8); memory
    # 2 (m k + k n + m n) bytes at 3e12 B/s.
    m, n, k = 512.0, 8448.0, 8192.0
    flops = 2 * m * n * k
    math_s = flops / 0.8e15
    mem_s = 2 * (m * k + k * n + m * n) / 3e12
    eff = gemm_efficiency(m, n, k, ceiling=0.8, peak_flops=1e15, hbm_bytes_s=3e12,
                          num_sms=132.0)
    assert float(eff) == approx(flops / ((math_s + mem_s) * 1e15))
    # One tile more (133 tiles): a second wave of 132 tiles, twice the math time.
    n2 = 8448.0 + 1.0
    eff2 = gemm_efficiency(512.0, n2, k, ceiling=0.8, peak_flops=1e15, hbm_bytes_s=3e12,
                           num_sms=132.0)
    math2 = 2 * 132 * 2 * 128 * 256 * k / 0.8e15
    mem2 = 2 * (m * k + k * n2 + m * n2) / 3e12
    assert float(eff2) == approx(2 * m * n2 * k / ((math2 + mem2) * 1e15))


def test_a_low_precision_gemm_reads_its_operands_small_and_writes_bf16():
    # The same GEMM in FP4 (0.5 bytes an operand element): the inputs move
    # 0.5 (m k + k n) bytes, the BF16 output 2 m n.  Before, the output was
    # taken at the operands' 0.5 bytes too: a quarter of what the GEMM writes.
    m, n, k = 512.0, 8448.0, 8192.0
    flops = 2 * m * n * k
    math_s = flops / (0.8 * 4e15)
    mem_s = (0.5 * (m * k + k * n) + 2 * m * n) / 3e12
    eff = gemm_efficiency(m, n, k, ceiling=0.8, peak_flops=4e15, hbm_bytes_s=3e12,
                          num_sms=132.0, bytes_per_element=0.5)
    assert float(eff) == approx(flops / ((math_s + mem_s) * 4e15))
    assert float(eff) < float(gemm_efficiency(m, n, k, ceiling=0.8, peak_flops=4e15,
                                              hbm_bytes_s=3e12, num_sms=132.0,
                                              bytes_per_element=0.5, output_bytes=0.5))


def test_gemm_efficiency_grows_with_size_towards_the_ceiling():
    args = dict(ceiling=0.8, peak_flops=989e12, hbm_bytes_s=3.35e12 * 0.8, num_sms=132.0)
    small = float(gemm_efficiency(4096.0, 2048.0, 2048.0, **args))
    large = float(gemm_efficiency(16384.0, 16384.0, 16384.0, **args))
    assert small < large < 0.8
    assert large > 0.74


def test_contention_scales_with_the_rate_the_collective_streams():
    # 16 ranks, 8 to a node: NVLink 100, NIC 10 (any unit), slowdown 0.5 on
    # NVLink.  Bandwidth time per byte: intra 7/8 / 100 = 7/800, inter
    # (1/2) / 8 / 10 = 1/160, of 3/200 in all.  On NVLink a hidden second costs
    # 0.5 / 1.5 = 1/3; on the NIC the slowdown is 0.5 x 10/100 = 0.05, a second
    # costs 0.05 / 1.05 = 1/21.  (7/800 / 3 + 1/160 / 21) / (3/200) = 3/14.
    net = Network(100.0, 10.0, 0.0, 0.0)
    assert float(contention_growth(0.5, 16.0, 8.0, net)) == pytest.approx(3 / 14, rel=1e-12)
    # All in one node: 1/3; one rank a node: 1/21; a group of one: 0.
    assert float(contention_growth(0.5, 8.0, 8.0, net)) == pytest.approx(1 / 3, rel=1e-12)
    assert float(contention_growth(0.5, 16.0, 1.0, net)) == pytest.approx(1 / 21, rel=1e-12)
    assert float(contention_growth(0.5, 1.0, 8.0, net)) == 0.0
