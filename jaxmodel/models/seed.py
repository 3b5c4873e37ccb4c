"""The seed model: reduced-order 3D-parallel (TP x PP x DP) training cost.

Formulas, rounding and conventions: ``shared/reference/SEED_MODEL.md``; this
module reproduces ``seed_example.json`` exactly.  One link bandwidth for every
collective, bf16 (2-byte) activations and gradients, ring collectives, no
latency term.  Kept exactly as stated; refinements live in other models.

Validity rule (``valid_layout``), all three must hold:

* ``d = floor(num_gpus / (t p)) >= 1``: at least one full model replica fits.
  GPUs left over (``idle_gpus``) are allowed and reported, not an error.
* ``num_layers % p == 0``: every pipeline stage holds the same whole number of
  layers.  The bubble term ``(p - 1) / m * compute`` assumes balanced stages;
  with a remainder the slowest stage sets the pace and the model would be
  optimistic.
* ``hidden_dim % t == 0``: Megatron-style tensor parallelism splits the hidden
  (and 4h feed-forward) dimension evenly over ``t`` ranks; the TP all-reduce
  cost assumes equal shards.

An invalid layout is not an error: ``valid_layout`` is false, every timing and
rate is NaN, ``bottleneck`` and ``regime`` are ``invalid``, and the verdict
says what is wrong and how to fix it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, NamedTuple

from jaxmodel.collectives import ring_allreduce_bytes
from jaxmodel.deferred import jnp
from jaxmodel.fields import InputField, OutputField
from jaxmodel.models.base import Model
from jaxmodel.models.common import count, masked, positive, whole
from jaxmodel.models.layout import GPUS, PIPELINE, TENSOR, LayoutSpace, replica_step
from jaxmodel.models.outputs import SHARED_OUTPUTS
from jaxmodel.models.terms import (
    COMPUTE,
    DP_ALLREDUCE,
    PIPELINE_BUBBLE,
    PP_COMM,
    TP_COMM,
    bottleneck_output,
)
from jaxmodel.models.verdicts import (
    _divisors_near,
    _multiples_near,
    bottleneck_and_regime,
    render_verdict,
)
from jaxmodel.numerics import percent, positive_part

DESCRIPTION = (
    "reduced-order 3D-parallelism (TP x PP x DP) communication model -- compute roofline "
    "+ TP/PP/DP collective costs, pipeline bubble, backward overlap (educational)"
)



# The step-time terms, in stacking and tie-break order.
TERMS = (COMPUTE, TP_COMM, PP_COMM, PIPELINE_BUBBLE, DP_ALLREDUCE)

INPUTS: tuple[InputField, ...] = (
    positive("model_params_b", "billions of parameters", "model size P / 1e9", 70),
    count("num_gpus", "GPUs", "GPUs available to the job (N)", 64),
    count("tensor_parallel", "ways", "tensor-parallel degree t", 8),
    count("pipeline_parallel", "stages", "pipeline-parallel stages p", 4),
    count("micro_batch", "sequences", "sequences per micro-batch b", 1),
    count("gradient_accum_steps", "micro-batches", "micro-batches per step m", 16),
    count("seq_length", "tokens", "sequence length s", 4096),
    count("hidden_dim", "", "hidden size h", 8192),
    count("num_layers", "", "transformer layers L", 80),
    positive(
        "link_bandwidth_gb_s", "GB/s (1 GB = 1e9 bytes)", "bandwidth of every link (B)", 450
    ),
    positive("compute_tflops", "TFLOP/s (1 T = 1e12)", "dense FLOP/s per GPU (F)", 500),
)

OUTPUTS: tuple[OutputField, ...] = (
    SHARED_OUTPUTS["data_parallel"],
    SHARED_OUTPUTS["used_gpus"],
    SHARED_OUTPUTS["idle_gpus"],
    OutputField("valid_layout", "", "the layout satisfies the validity rule", "bool"),
    SHARED_OUTPUTS["tokens_per_step"],
    OutputField("compute_time_ms", "ms", "6 P tokens / (used_gpus F)", "float"),
    OutputField("tp_comm_ms", "ms", "tensor-parallel all-reduces, all L layers", "float"),
    OutputField("pp_comm_ms", "ms", "pipeline point-to-point sends", "float"),
    OutputField("pipeline_bubble_ms", "ms", "(p - 1) / m of compute", "float"),
    OutputField("dp_allreduce_ms", "ms", "exposed DP gradient all-reduce", "float"),
    OutputField("dp_allreduce_raw_ms", "ms", "DP gradient all-reduce before overlap", "float"),
    SHARED_OUTPUTS["step_time_ms"],
    SHARED_OUTPUTS["comm_fraction_percent"],
    SHARED_OUTPUTS["bubble_fraction_percent"],
    OutputField("scaling_efficiency_percent", "%", "compute / step (equals mfu)", "float"),
    OutputField("mfu_percent", "%", "model-FLOPs utilisation, compute / step", "float"),
    OutputField("achieved_tflops_per_gpu", "TFLOP/s", "compute_tflops * mfu", "float"),
    SHARED_OUTPUTS["throughput_tokens_s"],
    SHARED_OUTPUTS["per_gpu_tokens_s"],
    bottleneck_output(TERMS),
    SHARED_OUTPUTS["regime"],
)


class SeedInputs(NamedTuple):
    """One configuration (scalars; vmap for batches).  Units as in the names."""

    model_params_b: Any
    num_gpus: Any
    tensor_parallel: Any
    pipeline_parallel: Any
    micro_batch: Any
    gradient_accum_steps: Any
    seq_length: Any
    hidden_dim: Any
    num_layers: Any
    link_bandwidth_gb_s: Any
    compute_tflops: Any


class SeedOutputs(NamedTuple):
    """Outputs of one configuration.  Integers int64, floats in the input dtype."""

    data_parallel: Any
    used_gpus: Any
    idle_gpus: Any
    valid_layout: Any
    tokens_per_step: Any
    compute_time_ms: Any
    tp_comm_ms: Any
    pp_comm_ms: Any
    pipeline_bubble_ms: Any
    dp_allreduce_ms: Any
    dp_allreduce_raw_ms: Any
    step_time_ms: Any
    comm_fraction_percent: Any
    bubble_fraction_percent: Any
    scaling_efficiency_percent: Any
    mfu_percent: Any
    achieved_tflops_per_gpu: Any
    throughput_tokens_s: Any
    per_gpu_tokens_s: Any
    bottleneck: Any
    regime: Any


def _floor_div(a, b):
    """``floor(a / b)`` of counts as an exact int64, computed in floating point.

    Integer division is slow on CPUs and emulated on GPUs; the float quotient
    is exact here: for whole ``a <= 2**24`` (the counts' domain) and ``b``, a
    quotient ``k - r / b`` (``r >= 1``) lies at least ``1 / b`` below ``k`` while
    float32's rounding error is at most ``k 2**-24 <= 1 / b``, so the floor is
    never pushed up to ``k``.
    """
    a, b = jnp.round(a), jnp.round(b)
    return jnp.floor(a / b).astype(jnp.int64)


def _divides(b, a):
    """Whether count ``b`` divides count ``a`` exactly (see ``_floor_div``)."""
    a, b = jnp.round(a), jnp.round(b)
    return jnp.floor(a / b) * b == a


def seed_model(x: SeedInputs) -> SeedOutputs:
    """Cost of one training step for one configuration (SEED_MODEL.md).

    Args:
      x: ``SeedInputs`` of floating-point scalars, all of one dtype.  Counts
        are whole numbers; where one is used as a smooth factor (``m``, ``t``,
        ``p``, ...) it is differentiable as a continuous relaxation, while
        ``d = floor(N / (t p))`` is held fixed (it is a step function).

    Returns:
      ``SeedOutputs``.  Timings are NaN for an invalid layout.
    """
    n_i, t_i, p_i = whole(x.num_gpus), whole(x.tensor_parallel), whole(x.pipeline_parallel)
    d_i = _floor_div(x.num_gpus, x.tensor_parallel * x.pipeline_parallel)
    used_i = d_i * t_i * p_i
    # t p beyond 2**24 is inexact as a float: one integer correction step.
    d_i = d_i - (used_i > n_i)
    used_i = d_i * t_i * p_i
    tokens_i = whole(x.micro_batch) * whole(x.gradient_accum_steps) * whole(x.seq_length) * d_i
    valid = (
        (d_i >= 1)
        & (_divides(x.pipeline_parallel, x.num_layers))
        & (_divides(x.tensor_parallel, x.hidden_dim))
    )

    fdt = jnp.result_type(x.model_params_b)
    # An invalid layout (d = 0) is computed with d = 1 and masked afterwards,
    # so that neither values nor gradients see a division by zero.
    d = jnp.maximum(d_i, 1).astype(fdt)
    t, p, m = x.tensor_parallel, x.pipeline_parallel, x.gradient_accum_steps

    # Terms are formed directly in milliseconds from the inputs' own units, so
    # the 1e9 / 1e12 / 1e3 scale factors cancel instead of each rounding: the
    # step time is printed to 7 significant digits, about all float32 holds.
    #   FLOPs: 1e9 params x tokens / (1e12 FLOP/s) -> 1e-3 s = 1 ms.
    #   bytes / (1e9 B/s) -> s, so ms = bytes / (bandwidth_gb_s x 1e6).
    bytes_per_ms = x.link_bandwidth_gb_s * 1e6
    tokens = x.micro_batch * m * x.seq_length * d
    used = d * t * p
    compute = 6.0 * x.model_params_b * tokens / (used * x.compute_tflops)
    activation_bytes = x.micro_batch * x.seq_length * x.hidden_dim * 2.0
    tp = x.num_layers * 4.0 * m * ring_allreduce_bytes(activation_bytes, t) / bytes_per_ms
    pp = jnp.where(p_i > 1, 2.0 * m * activation_bytes / bytes_per_ms, jnp.zeros_like(compute))
    bubble = (p - 1.0) / m * compute
    # Gradients: 2 bytes x 1e9 params_b / (t p); in GB over GB/s, x 1e3 for ms.
    dp_raw = ring_allreduce_bytes(2.0 * x.model_params_b / (t * p), d) / x.link_bandwidth_gb_s * 1e3
    backward = 2.0 / 3.0 * compute
    dp = positive_part(dp_raw - backward)
    step = compute + tp + pp + bubble + dp

    # percent() holds MFU in [0, 100] although XLA may round compute one ulp
    # differently inside the fused step sum than on its own.
    mfu = percent(compute, step)
    throughput = tokens / step * 1e3
    bottleneck, regime = bottleneck_and_regime(TERMS, (compute, tp, pp, bubble, dp), mfu, valid)

    valid_only = partial(masked, valid, dtype=fdt)

    return SeedOutputs(
        data_parallel=d_i,
        used_gpus=used_i,
        idle_gpus=n_i - used_i,
        valid_layout=valid,
        tokens_per_step=tokens_i,
        compute_time_ms=valid_only(compute),
        tp_comm_ms=valid_only(tp),
        pp_comm_ms=valid_only(pp),
        pipeline_bubble_ms=valid_only(bubble),
        dp_allreduce_ms=valid_only(dp),
        dp_allreduce_raw_ms=valid_only(dp_raw),
        step_time_ms=valid_only(step),
        comm_fraction_percent=valid_only(percent(tp + pp + dp, step)),
        bubble_fraction_percent=valid_only(percent(bubble, step)),
        scaling_efficiency_percent=valid_only(mfu),
        mfu_percent=valid_only(mfu),
        achieved_tflops_per_gpu=valid_only(x.compute_tflops * mfu / 100.0),
        throughput_tokens_s=valid_only(throughput),
        per_gpu_tokens_s=valid_only(throughput / used),
        bottleneck=bottleneck,
        regime=regime,
    )


def invalid_layout_reasons(inputs: Mapping[str, float]) -> list[tuple[str, str]]:
    """(problem, fix) pairs for each broken part of the layout validity rule."""
    n, t, p = int(inputs["num_gpus"]), int(inputs["tensor_parallel"]), int(
        inputs["pipeline_parallel"]
    )
    layers, hidden = int(inputs["num_layers"]), int(inputs["hidden_dim"])
    reasons = []
    if t * p > n:
        reasons.append(
            (
                f"tensor x pipeline = {t} x {p} = {t * p} GPUs per replica, "
                f"more than the {n} available",
                f"Use at least {t * p} GPUs, or lower tensor or pipeline parallelism "
                f"so that t x p <= {n}.",
            )
        )
    if layers % p:
        reasons.append(
            (
                f"{layers} layers do not split evenly into {p} pipeline stages",
                f"Choose a pipeline depth that divides {layers} "
                f"(nearest: {_divisors_near(layers, p)}), or a layer count that is a "
                f"multiple of {p} ({_multiples_near(layers, p)}).",
            )
        )
    if hidden % t:
        reasons.append(
            (
                f"hidden size {hidden} does not split evenly over {t} tensor-parallel ranks",
                f"Choose a tensor-parallel degree that divides {hidden} "
                f"(nearest: {_divisors_near(hidden, t)}), or a hidden size that is a "
                f"multiple of {t} ({_multiples_near(hidden, t)}).",
            )
        )
    return reasons


def seed_verdict(inputs: Mapping[str, float], outputs: Mapping[str, Any]) -> str:
    """The verdict sentence for one evaluated configuration."""
    return render_verdict(TERMS, inputs, outputs, invalid_layout_reasons(inputs))


SEED = Model(
    name="seed",
    description=DESCRIPTION,
    inputs=INPUTS,
    outputs=OUTPUTS,
    inputs_type=SeedInputs,
    outputs_type=SeedOutputs,
    apply=seed_model,
    verdict=seed_verdict,
    terms=TERMS,
    # d = floor(N / (t p)): N is stepped; the seed has no switches.
    steps={GPUS: replica_step((TENSOR, PIPELINE))},
    layout=LayoutSpace(),
    layout_reasons=lambda inputs, outputs: invalid_layout_reasons(inputs),
    # tokens_per_step = b m s d, and d <= num_gpus.
    exact_products=(("tokens_per_step", ("micro_batch", "gradient_accum_steps", "seq_length",
                                         "num_gpus")),),
    # The seed has no efficiencies: a cluster is its effective GPU rate and link
    # bandwidth (what ``jaxmodel calibrate`` fits by default).
    cluster=("compute_tflops", "link_bandwidth_gb_s"),
    hardware=("compute_tflops", "link_bandwidth_gb_s"),
    on_host=True,  # tests/test_host_eval.py
    physics=("jaxmodel.models.seed",),
)
