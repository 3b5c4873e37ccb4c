"""The refined model: a higher-fidelity 3D-parallel training cost beside ``seed``.

``refined_model`` (``REFINED.apply``) is a pure function of one configuration:
``RefinedInputs`` of scalars in, ``RefinedOutputs`` out; callers ``jax.vmap``
it.  This module only assembles the step from the package's modules, one per
concern, each with the physics and the sources of its terms:

* ``fields``: the inputs, outputs, terms and cluster parameters;
* ``derived``: the integer layout, switches and SI rates every term uses;
* ``validity``: the layout rule, on the device and in words (the verdict);
* ``rates``: achievable GEMM, attention, HBM and network rates;
* ``layer``: one layer's parameters, GEMM shapes, FLOPs, bytes and kernels;
* ``memory``: model state and activations per GPU;
* ``tensor``, ``context``, ``pipeline``, ``data``: tensor, context, pipeline,
  and data (ZeRO) parallelism;
* ``moe``: mixture of experts, expert parallelism and multi-head latent
  attention;
* ``mtp``: multi-token prediction (DeepSeek-V3's MTP modules);
* ``mamba``: Mamba-2 layers of hybrid models (Nemotron-H, Nemotron-3);
* ``muon``: the Muon optimizer's Newton-Schulz steps and state (``optimizer`` 1).

The step of the busiest pipeline stage:

``step = m x micro-batch compute + optimizer + TP + CP + PP + bubble + DP
(+ expert all-to-all)``,

each communication term the part its overlap leaves exposed.  With the 2026
switches at values that turn them off (``gemm_shape_model`` 0,
``attention_efficiency`` = ``matmul_efficiency``, ``causal_mask`` 0,
``grad_buffer_bytes`` 2, ``reserved_memory_gb`` 0, ``kernel_overhead_us`` 0,
``grad_buffer_traffic`` 0, ``dp_bucket_params`` 0) the model is that of
Narayanan et al. 2021 and Korthikanti et al. 2022 (module docstrings of
``layer``, ``tensor``, ``pipeline``, ``data`` and ``memory``).

Units: inputs as named; inside, SI (seconds, bytes, FLOP, FLOP/s); outputs in
ms, GB (1e9 bytes) and percent.  Hardware defaults are an H100 SXM node
(``jaxmodel.presets``); model defaults are Llama-2-70B.
"""

from __future__ import annotations

from functools import partial

from jaxmodel.deferred import jnp
from jaxmodel.models.base import Model
from jaxmodel.models.common import masked, next_whole_value, switch_steps, whole
from jaxmodel.models.layout import CONTEXT, GPUS, PIPELINE, TENSOR, LayoutSpace, replica_step
from jaxmodel.models.refined import mamba, moe, mtp, muon, space
from jaxmodel.models.refined.context import cp_seconds
from jaxmodel.models.refined.data import (
    dp_seconds,
    fsdp_copy_seconds,
    optimizer_seconds,
    overlap_seconds,
)
from jaxmodel.models.refined.derived import derive
from jaxmodel.models.refined.fields import (
    CLUSTER,
    DESCRIPTION,
    FIT_RANGES,
    HARDWARE,
    INPUTS,
    MOE_COMM,
    OUTPUTS,
    RETIRED,
    TERMS,
    RefinedInputs,
    RefinedOutputs,
)
from jaxmodel.models.refined.layer import layer_flops, layer_times, model_params
from jaxmodel.models.refined.memory import offload_seconds, stage_memory, stage_params
from jaxmodel.models.refined.pipeline import (
    bubble_seconds,
    busiest_stage,
    layers_per_stage,
    transfer_seconds,
)
from jaxmodel.models.refined.tensor import tp_seconds
from jaxmodel.models.refined.validity import layout_reasons, refined_verdict
from jaxmodel.models.run import run_totals
from jaxmodel.models.verdicts import bottleneck_and_regime
from jaxmodel.numerics import percent


def refined_model(x: RefinedInputs) -> RefinedOutputs:
    """Cost and memory of one training step for one configuration (module doc).

    Args:
      x: ``RefinedInputs`` of floating-point scalars, all of one dtype.  Counts
        and switches are whole numbers; counts used as smooth factors are
        differentiable relaxations, while ``d``, the validity rule and the
        switches are held fixed (they are step functions).

    Returns:
      ``RefinedOutputs``.  Timings are NaN for an invalid layout.
    """
    # A hybrid model's mixer layers have no MoE FFN (mamba.moe_view).
    x = mamba.moe_view(x)
    g = derive(x)
    n_i, t_i, c_i, d_i, used_i, tokens_i = g.n_i, g.t_i, g.c_i, g.d_i, g.used_i, g.tokens_i
    fdt, well_formed, has_experts, plain = g.fdt, g.well_formed, g.has_experts, g.plain
    d, t, c, p, m, b, s, h, L, V = g.d, g.t, g.c, g.p, g.m, g.b, g.s, g.h, g.L, g.V
    e, etp, peak, hbm_rate = g.e, g.etp, g.peak, g.hbm_rate
    layers_mid, layers_end, layers_last = layers_per_stage(x, g)

    # --- one micro-batch: a layer and the output layer, the busiest stage ----
    lt = layer_times(x, g)
    # Multi-token prediction on the last stage: each module's block timed as a
    # layer, its projection, and the output layer and loss again.
    # (Selected by where, so that a sweep that fixes mtp_layers at 0 compiles
    # the projection's GEMMs away.)
    n_mtp = mtp.modules(x)
    proj_f, proj_s = mtp.projection_seconds(x, g)
    has_mtp = n_mtp > 0.5
    stage = busiest_stage(g, layers_mid, layers_end, layers_last, lt,
                          (n_mtp, jnp.where(has_mtp, n_mtp * (proj_f + lt.logit_fwd_s), 0.0),
                           jnp.where(has_mtp, n_mtp * (proj_s + lt.logit_s), 0.0)))
    micro_compute, stage_layers = stage.micro_compute, stage.stage_layers
    params = stage_params(x, g, layers_mid, layers_end, layers_last)
    active_w, attn_core, layer_hw_flops = layer_flops(x, g, lt.moe_layer_again)

    # --- data parallelism and the optimizer step ------------------------------
    z, edp, dp_raw, dp = dp_seconds(x, g, params, stage, layer_hw_flops, active_w, attn_core)
    optimizer_s = optimizer_seconds(x, g, params, stage_layers, z, edp)
    # Muon's Newton-Schulz GEMMs (optimizer 1; 0 with Adam).
    orthogonalise_s = muon.orthogonalise_seconds(x, g, stage_layers, z, edp)
    # FSDP2's copies around its collectives (memory-bound, on the compute stream).
    copies_s = fsdp_copy_seconds(x, g, params, stage_layers, z)

    # The compute the hidden data-parallel collectives slow (NCCL on the SMs).
    contention_s = overlap_seconds(x, g, dp_raw, dp)

    compute = m * micro_compute + optimizer_s + orthogonalise_s + copies_s + contention_s
    stage_recompute = stage_layers * lt.layer_recompute
    recompute_s = m * stage_recompute
    stage_memory_s = (stage_layers * (lt.fwd_bytes + lt.bwd_bytes + lt.recompute_bytes
                                      + lt.accum_layer_bytes) / hbm_rate
                      + jnp.where(stage.last_busiest,
                                  (1.0 + n_mtp) * (lt.logit_bytes + lt.accum_logit_bytes)
                                  / hbm_rate + lt.embed_grad_s, 0.0))
    memory_bound = m * stage_memory_s + optimizer_s + copies_s

    # --- model-parallel collectives, the pipeline, the experts ---------------
    act_bytes, tp = tp_seconds(x, g, lt, stage_layers)
    kv_bytes, cp = cp_seconds(x, g, lt, stage_layers)
    pp = transfer_seconds(x, g, act_bytes, stage.micro_compute)
    bubble = bubble_seconds(g, stage, tp, cp)
    moe_raw, moe_comm = moe.exposed_comm_seconds(x, g, stage_layers, lt.moe_layer_again,
                                                 compute, lt.ep_partners)

    # The activation offload's host copies (memory.offload_seconds).
    offload = offload_seconds(x, g, stage_layers, micro_compute)

    step = compute + tp + cp + pp + bubble + dp + offload
    step = jnp.where(has_experts, step + moe_comm, step)

    # --- memory of each stage kind; the fullest one is reported ------------
    mem = stage_memory(x, g, params, layers_mid, layers_end, layers_last, z, edp,
                       lt.score_bytes, kv_bytes, act_bytes)
    fits = mem.fits
    valid = well_formed & fits
    state, activations, other, memory_gb = mem.state, mem.activations, mem.other, mem.memory_gb

    # --- rates ----------------------------------------------------------------
    layer_model_flops = 3.0 * (2.0 * b * s * active_w + attn_core)
    logit_flops = 3.0 * 2.0 * b * s * h * V
    used = d * t * c * p
    # MFU as (ideal seconds per GPU) / step, each factor near 1: the job's
    # FLOPs (~1e20) times the tangent of used x step x peak (~1e19) overflows
    # float32 in the derivative of the quotient, though the value does not.
    mtp_flops = mtp.model_flops(x, g, attn_core, logit_flops)
    mtp_hw_flops = n_mtp * (layer_hw_flops + logit_flops
                            + 3.0 * 2.0 * b * s * mtp.projection_params(x))
    ideal_s = m * (L * layer_model_flops + logit_flops + mtp_flops) / (t * c * p) / peak
    hw_ideal_s = m * (L * layer_hw_flops + logit_flops + mtp_hw_flops) / (t * c * p) / peak
    # The reported terms (ms, NaN where invalid).  The shares, rates and the
    # bottleneck are computed from these, not from the seconds above: a sweep
    # writes them anyway, and XLA's CPU backend then reads those materialised
    # columns instead of recomputing the whole step inside every derived
    # output's fused loop (bench/README.md).
    valid_only = partial(masked, valid, dtype=fdt)
    ms = 1e3
    compute_ms, tp_ms, cp_ms, pp_ms, bubble_ms, dp_ms, moe_ms, offload_ms, step_ms = (
        valid_only(v * ms) for v in (compute, tp, cp, pp, bubble, dp, moe_comm, offload, step))
    step_reported = step_ms / ms
    mfu = 100.0 * ideal_s / step_reported
    hfu = 100.0 * hw_ideal_s / step_reported
    tokens = b * m * s * d
    throughput = tokens / step_reported
    share = percent(compute_ms, step_ms)
    # The regime's "compute-bound" test uses MFU, as every model does
    # (jaxmodel.models.verdicts).  Context-parallel traffic counts with the tensor-
    # parallel term (both are model-parallel collectives inside each layer).
    bottleneck, regime = bottleneck_and_regime(
        TERMS, (compute_ms, tp_ms + cp_ms, pp_ms, bubble_ms, dp_ms, moe_ms, offload_ms), mfu,
        valid
    )

    formed = partial(masked, well_formed, dtype=fdt)
    hybrid = mamba.hybrid(x)
    total = jnp.where(hybrid, mamba.total_params(x), moe.total_params(x))
    active = jnp.where(hybrid, mamba.active_params(x), moe.active_params(x))
    # The run: a used GPU computes for compute / step of each step and waits
    # the rest; idle GPUs and the job's nodes are paid and powered too.
    run = run_totals(x, num_gpus=n_i.astype(fdt), used_gpus=used_i.astype(fdt),
                     step_s=step_reported, tokens_per_step=tokens,
                     busy_fraction=compute_ms / step_ms)

    return RefinedOutputs(
        data_parallel=d_i,
        used_gpus=used_i,
        idle_gpus=n_i - used_i,
        valid_layout=valid,
        fits_in_memory=fits & well_formed,
        tokens_per_step=tokens_i,
        model_params_b=((jnp.where(plain, model_params(x), total) + mtp.params(x))
                        / 1e9).astype(fdt),
        total_params_b=((jnp.where(plain, model_params(x), total) + mtp.params(x))
                        / 1e9).astype(fdt),
        active_params_b=((jnp.where(plain, model_params(x), active) + mtp.active_params(x))
                         / 1e9).astype(fdt),
        expert_data_parallel=jnp.where(
            well_formed, (t_i * c_i * d_i) // jnp.where(
                whole(x.num_experts) == 1, 1, whole(etp) * whole(e)), 0),
        compute_time_ms=compute_ms,
        recompute_ms=valid_only(recompute_s * ms),
        memory_bound_ms=valid_only(memory_bound * ms),
        tp_comm_ms=tp_ms,
        cp_comm_ms=cp_ms,
        pp_comm_ms=pp_ms,
        pipeline_bubble_ms=bubble_ms,
        dp_allreduce_ms=dp_ms,
        dp_allreduce_raw_ms=valid_only(dp_raw * ms),
        moe_comm_ms=moe_ms,
        moe_comm_raw_ms=valid_only(moe_raw * ms),
        offload_ms=offload_ms,
        step_time_ms=step_ms,
        comm_fraction_percent=valid_only(percent(
            jnp.where(has_experts, tp_ms + cp_ms + pp_ms + dp_ms + moe_ms + offload_ms,
                      tp_ms + cp_ms + pp_ms + dp_ms + offload_ms), step_ms)),
        bubble_fraction_percent=valid_only(percent(bubble_ms, step_ms)),
        scaling_efficiency_percent=valid_only(share),
        mfu_percent=valid_only(mfu),
        hfu_percent=valid_only(hfu),
        achieved_tflops_per_gpu=valid_only(x.compute_tflops * mfu / 100.0),
        hardware_tflops_per_gpu=valid_only(x.compute_tflops * hfu / 100.0),
        throughput_tokens_s=valid_only(throughput),
        per_gpu_tokens_s=valid_only(throughput / used),
        memory_gb_per_gpu=formed(memory_gb),
        model_state_gb_per_gpu=formed(state / 1e9),
        activation_gb_per_gpu=formed(activations / 1e9),
        other_memory_gb_per_gpu=formed(other / 1e9),
        bottleneck=bottleneck,
        regime=regime,
        **{k: v.astype(fdt) for k, v in run.items()},
    )


def _unused(values) -> tuple[str, ...]:
    """Inputs (and terms) a configuration does not use: a dense model's MoE inputs and
    expert all-to-all; the Mamba-2 inputs without Mamba-2 layers; the windowed
    share without a sliding window."""
    dense = (*moe.DENSE_UNUSED, MOE_COMM.output) if round(values["num_experts"]) == 1 else ()
    ssm = mamba.HYBRID_INPUTS if round(values["mamba_layers"]) == 0 else ()
    return dense + ssm + (("sliding_window_share",) if round(values["sliding_window"]) == 0
                          else ())


REFINED = Model(
    name="refined",
    description=DESCRIPTION,
    inputs=INPUTS,
    outputs=OUTPUTS,
    inputs_type=RefinedInputs,
    outputs_type=RefinedOutputs,
    apply=refined_model,
    verdict=refined_verdict,
    terms=TERMS,
    # d = floor(N / (t p c)): N is stepped, and so is every switch; num_sms acts
    # through the GEMMs' wave count ceil(tiles / num_sms), a staircase.
    steps={GPUS: replica_step((TENSOR, PIPELINE, CONTEXT)), **switch_steps(INPUTS),
           "num_sms": next_whole_value("num_sms")},
    layout=LayoutSpace(context=True, extra=space.layout_axes, uneven_pipeline=True,
                       meaningless=space.meaningless, admissible=space.admissible,
                       rule_columns=space.RULE_COLUMNS),
    layout_reasons=layout_reasons,
    # tokens_per_step = b m s d, and d <= num_gpus.
    at_least=(("fp8_peak_tflops", "compute_tflops"), ("mxfp8_peak_tflops", "compute_tflops"),
              ("fp4_peak_tflops", "compute_tflops"), ("num_layers", "dense_layers")),
    exact_products=(("tokens_per_step", ("micro_batch", "gradient_accum_steps", "seq_length",
                                         "num_gpus")),),
    cluster=CLUSTER,
    memory_capacity="gpu_memory_gb",
    retired=RETIRED,
    fit_ranges=FIT_RANGES,
    unused=_unused,
    hardware=HARDWARE,
    on_host=True,  # tests/test_host_eval.py
    physics=tuple(f"jaxmodel.models.refined.{name}" for name in (
        "model", "layer", "rates", "memory", "tensor", "context", "pipeline", "data", "moe",
        "mtp", "mamba", "muon", "validity", "space", "derived", "fields"))
    + ("jaxmodel.collectives",),
)
