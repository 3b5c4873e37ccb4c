"""Shared communication and kernel physics: collectives and GEMM efficiency.

Every cost model calls these (the seed's one-link ring, the refined model's
two-level network; the MoE terms' all-to-all), so a correction lands in every
model at once.  Pure jax functions of scalars (or arrays, elementwise), SI
units: bytes, bytes/s, seconds, FLOP/s.

Collectives (alpha-beta, Patarasuk & Yuan 2009 for the ring; Thakur et al.
2005 for the algorithms' step counts):

* ``ring_allreduce_bytes``: bytes a rank sends in a ring all-reduce.
* ``hierarchical_seconds``: a ring collective over ``n`` ranks, ``g`` to a
  node, run in two levels (reduce-scatter in the node, the collective across
  nodes on ``1 / g`` of the data over each GPU's own NIC, all-gather in the
  node), as NCCL's tree/ring hierarchies do.  ``all_reduce`` (2 phases),
  ``reduce_scatter`` and ``all_gather`` (1 phase each) are its cases.
* ``contention_growth``: what a hidden collective costs the compute beside it
  (its SMs and HBM traffic, in proportion to the rate it streams).
* ``point_to_point``: one send, ``bytes / bandwidth + latency``.
* ``all_to_all``: every rank sends ``1 / n`` of its buffer to every other; the
  intra-node and inter-node parts run at once on their own links, so the slower
  one sets the time.

GEMM efficiency (``gemm_efficiency``): the achievable fraction of peak of one
matrix multiply from its shape, after NVIDIA's "Matrix Multiplication
Background User's Guide" (Deep Learning Performance documentation, sections
"Math and memory bounds" and "Tile / wave quantization").
"""

from __future__ import annotations

from typing import Any, NamedTuple

from jaxmodel.deferred import jnp


class Network(NamedTuple):
    """The two levels of a network, in SI units (bytes/s achieved, seconds a step)."""

    intra_bw: Any
    inter_bw: Any
    intra_latency: Any
    inter_latency: Any


def one_level(bandwidth_bytes_s, latency_s=0.0) -> Network:
    """A network with one kind of link (the seed model's): both levels the same."""
    return Network(bandwidth_bytes_s, bandwidth_bytes_s, latency_s, latency_s)


def ring_allreduce_bytes(message_bytes, ways):
    """Bytes each rank sends in a ring all-reduce of ``message_bytes`` over ``ways``.

    ``2 (n - 1) / n * bytes``: each rank sends ``(n - 1) / n`` of the message
    twice (reduce-scatter, then all-gather), Patarasuk & Yuan (2009); divide by
    the link bandwidth for the time.  Zero when ``ways == 1``.  ``ways`` is
    clamped to >= 1 so that an invalid layout (d = 0) stays finite; the caller
    masks it.
    """
    # where, not maximum: at ways == 1 the derivative is the right-hand one
    # (2 bytes per unit of ways), as for positive_part; maximum would halve it.
    n = jnp.where(ways >= 1.0, ways, jnp.ones_like(ways))
    return 2.0 * (n - 1.0) / n * message_bytes


def hierarchical_seconds(nbytes, ranks, ranks_per_node, net: Network, phases):
    """Time of a ring collective over ``ranks`` GPUs, ``ranks_per_node`` to a node.

    Hierarchical: ``g = ranks_per_node`` (clipped to [1, ranks]) ranks share a
    node and ``k = ranks / g`` nodes take part.  The intra-node level moves
    ``phases (g - 1) / g`` of ``nbytes`` per GPU, the inter-node level
    ``phases (k - 1) / k`` of ``nbytes / g`` (each GPU sends its shard on its own
    NIC); each of the ``phases (n - 1)`` ring steps per level costs a latency.

    Args:
      nbytes: the message (the full buffer each rank holds), bytes.
      ranks: GPUs in the group (>= 1).
      ranks_per_node: group members per node.
      net: the network.
      phases: 2 for an all-reduce, 1 for a reduce-scatter or an all-gather.

    Returns:
      Seconds; zero for a group of one.
    """
    n = jnp.maximum(ranks, 1.0)
    g = jnp.clip(ranks_per_node, 1.0, n)
    k = n / g
    intra = phases * ((g - 1.0) / g * nbytes / net.intra_bw + (g - 1.0) * net.intra_latency)
    inter = phases * ((k - 1.0) / k * nbytes / g / net.inter_bw + (k - 1.0) * net.inter_latency)
    return intra + inter


def hidden_second_costs(slowdown, net: Network):
    """``(in_node, across)``: the compute seconds one hidden second of transfer
    costs over NVLink and over the network (``contention_growth``'s two levels):
    ``s / (1 + s)`` with ``s`` the NVLink ``slowdown``, and with ``slowdown x
    inter_bw / intra_bw`` across nodes."""
    s_inter = slowdown * net.inter_bw / net.intra_bw
    return slowdown / (1.0 + slowdown), s_inter / (1.0 + s_inter)


def contention_growth(slowdown, ranks, ranks_per_node, net: Network):
    """Of each second a ring collective runs hidden behind compute, the seconds
    the compute loses to it.

    A collective runs as kernels on the SMs and streams its data through HBM;
    NCCL sizes its channels (a CTA each) to the link it drives ("a single NIC,
    which can achieve up to 12-24 GB/s ... should just launch 2 SMs",
    NVIDIA/nccl issue 689), so the compute beside it slows in proportion to the
    rate it moves data.  ``slowdown`` is that slowdown on NVLink (the intra-node
    rate); a level running at ``inter_bw`` slows the compute by
    ``slowdown * inter_bw / intra_bw``.  Compute ``1 + s`` times slower does
    ``1 / (1 + s)`` of its work, so a hidden second costs ``s / (1 + s)``;
    weighted by the share of the collective's (bandwidth) time each level of
    ``hierarchical_seconds`` takes.  Zero for a group of one.
    """
    n = jnp.maximum(ranks, 1.0)
    g = jnp.clip(ranks_per_node, 1.0, n)
    k = n / g
    intra = (g - 1.0) / g / net.intra_bw
    inter = (k - 1.0) / k / g / net.inter_bw
    total = intra + inter
    in_node, across = hidden_second_costs(slowdown, net)
    growth = in_node * intra + across * inter
    return jnp.where(total > 0.0, growth / jnp.where(total > 0.0, total, 1.0), 0.0)


def all_reduce(nbytes, ranks, ranks_per_node, net: Network):
    """Hierarchical ring all-reduce of an ``nbytes`` buffer (seconds)."""
    return hierarchical_seconds(nbytes, ranks, ranks_per_node, net, 2.0)


def reduce_scatter(nbytes, ranks, ranks_per_node, net: Network):
    """Reduce-scatter of an ``nbytes`` buffer into ``1 / ranks`` shards (seconds)."""
    return hierarchical_seconds(nbytes, ranks, ranks_per_node, net, 1.0)


def all_gather(nbytes, ranks, ranks_per_node, net: Network):
    """All-gather of ``1 / ranks`` shards into an ``nbytes`` buffer (seconds)."""
    return hierarchical_seconds(nbytes, ranks, ranks_per_node, net, 1.0)


def point_to_point(nbytes, crosses_node, net: Network):
    """One send of ``nbytes``: over the network when ``crosses_node`` (0/1), else in the node."""
    inter = crosses_node > 0.5
    bw = jnp.where(inter, net.inter_bw, net.intra_bw)
    latency = jnp.where(inter, net.inter_latency, net.intra_latency)
    return nbytes / bw + latency


def all_to_all(nbytes, ranks, ranks_per_node, net: Network):
    """All-to-all of an ``nbytes`` buffer per rank over ``ranks`` GPUs (seconds).

    Each rank keeps ``1 / n`` and sends ``1 / n`` to each of the others
    (pairwise exchange, ``n - 1`` steps): ``(g - 1) / n`` of the buffer to the
    ``g - 1`` peers in its node over NVLink and ``(n - g) / n`` to the others
    over its own NIC.  The two run concurrently on separate links, so the
    slower sets the pace; each level pays a latency per peer step.
    """
    n = jnp.maximum(ranks, 1.0)
    g = jnp.clip(ranks_per_node, 1.0, n)
    intra = (g - 1.0) / n * nbytes / net.intra_bw + (g - 1.0) * net.intra_latency
    inter = (n - g) / n * nbytes / net.inter_bw + (n - g) / g * net.inter_latency
    return jnp.maximum(intra, inter)


def all_to_all_two_level(intra_bytes, inter_bytes, ranks, ranks_per_node, net: Network):
    """An all-to-all whose rank sends ``intra_bytes`` over NVLink and
    ``inter_bytes`` over its own NIC (seconds), e.g. a hierarchical MoE dispatch
    (DeepEP: a token crosses the network once per destination node, then is
    forwarded in the node).  As ``all_to_all``: both levels at once, the slower
    sets the time, each paying a latency per peer step (``g - 1`` in the node,
    ``(n - g) / g`` across nodes).
    """
    n = jnp.maximum(ranks, 1.0)
    g = jnp.clip(ranks_per_node, 1.0, n)
    intra = intra_bytes / net.intra_bw + (g - 1.0) * net.intra_latency
    inter = inter_bytes / net.inter_bw + (n - g) / g * net.inter_latency
    return jnp.maximum(intra, inter)


# --- GEMM efficiency -----------------------------------------------------------

# Output tile of one thread block (one SM at a time), elements.  128 x 256 is
# the largest tile cuBLAS/CUTLASS pick for bf16 on A100 and H100 (CUTLASS
# profiler's default SM80/SM90 tensor-op tiles), and the one large transformer
# GEMMs run with; smaller GEMMs get smaller tiles but then lose in arithmetic
# intensity, which the roofline term counts.
GEMM_TILE_M = 128.0
GEMM_TILE_N = 256.0


def _ceil_ratio(a, b):
    """``ceil(a / b)`` for positive values, as a float (a step function: zero gradient)."""
    return jnp.ceil(a / b - 1e-6)


def gemm_efficiency(m, n, k, *, ceiling, peak_flops, hbm_bytes_s, num_sms,
                    bytes_per_element=2.0, output_bytes=2.0):
    """Achievable fraction of ``peak_flops`` for an ``[m, k] x [k, n]`` GEMM.

    NVIDIA, "Matrix Multiplication Background User's Guide" (Deep Learning
    Performance docs): a GEMM does ``2 m n k`` FLOPs and moves at least
    ``e (m k + k n) + o m n`` bytes (``e`` bytes per input element, ``o`` per
    output element: a low-precision GEMM of training reads FP8 or FP4 operands
    but writes its output in BF16, ``o`` = 2, as Transformer Engine's FP8 and
    NVFP4 GEMMs do for the forward, data-gradient and weight-gradient passes
    alike); it is limited by
    math when its arithmetic intensity exceeds the GPU's ops:byte ratio, by
    memory otherwise; its output is cut into ``T_m x T_n`` tiles (tile
    quantization: a partial tile costs a whole one) that run in waves of
    ``num_sms`` (wave quantization: a partial last wave costs a whole one).

    Time: ``padded FLOPs / (peak x ceiling)`` with the padding of both
    quantizations, plus the compulsory bytes at ``hbm_bytes_s``.  Adding the
    memory time (rather than taking the larger of the two) counts the
    prologue (loading the first K-slices before any math) and epilogue (writing
    the output) that the main loop cannot hide; it is the conservative edge of
    the roofline, and a GEMM far above the ridge point costs only
    ``ceiling`` plus a few percent.

    Args:
      m, n, k: the GEMM's dimensions (rows of the output, columns, reduction).
      ceiling: the fraction of peak a large, square GEMM sustains (measured:
        ``matmul_efficiency``).
      peak_flops: the datasheet peak for the precision used, FLOP/s.
      hbm_bytes_s: achieved memory bandwidth, bytes/s.
      num_sms: streaming multiprocessors (compute units) of the GPU.
      bytes_per_element: 2 for bf16 operands, 1 for FP8, 0.5 for FP4.
      output_bytes: bytes per output element, 2 (BF16) whatever the operands.

    Returns:
      The fraction in (0, ceiling]: FLOPs / (time x peak).
    """
    math_s, memory_s = gemm_math_and_memory_seconds(
        m, n, k, ceiling=ceiling, peak_flops=peak_flops, hbm_bytes_s=hbm_bytes_s,
        num_sms=num_sms, bytes_per_element=bytes_per_element, output_bytes=output_bytes)
    return 2.0 * m * n * k / ((math_s + memory_s) * peak_flops)


def gemm_math_and_memory_seconds(m, n, k, *, ceiling, peak_flops, hbm_bytes_s, num_sms,
                                 bytes_per_element=2.0, output_bytes=2.0):
    """The two parts :func:`gemm_efficiency` adds (same arguments): the padded
    FLOPs of whole tiles in whole waves at ``peak_flops x ceiling``, and the
    compulsory bytes at ``hbm_bytes_s``; seconds each."""
    tiles = _ceil_ratio(m, GEMM_TILE_M) * _ceil_ratio(n, GEMM_TILE_N)
    waves = _ceil_ratio(tiles, num_sms)
    # Every wave costs num_sms whole tiles of T_m x T_n outputs, k deep.
    quantized = 2.0 * waves * num_sms * GEMM_TILE_M * GEMM_TILE_N * k
    math_s = quantized / (peak_flops * ceiling)
    memory_s = (bytes_per_element * (m * k + k * n) + output_bytes * m * n) / hbm_bytes_s
    return math_s, memory_s
