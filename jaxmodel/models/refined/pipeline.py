"""Pipeline parallelism: the split into stages, the busiest stage, transfers and bubble.

* **Split**: ``L`` layers (+ 2 units with ``pipeline_split_embedding``, the
  input embedding and the output layer + loss counted as one layer each,
  Megatron-LM ``--account-for-embedding/loss-in-pipeline-split``; + one unit
  per multi-token-prediction module with ``mtp_in_pipeline_split``, see
  below) over ``p v`` chunks, the ceiling of the quotient per chunk; the
  busiest stage sets the pace: the last (its layers and the output layer) or,
  with an uneven split, a middle one holding a whole unit more.
* **MTP in the split** (``mtp_in_pipeline_split``): Megatron-Core places the
  ``mtp_layers`` modules on the last stage beside its share of the decoder
  layers (0, the default); a custom layout
  (``--pipeline-model-parallel-layout``, parsed by
  ``megatron/core/transformer/pipeline_parallel_layer_layout.py``: ``E``
  embedding, ``t`` decoder layer, ``m`` MTP module, ``L`` loss, ``|`` between
  the ``p v`` chunks) can give each module a unit of the split instead (1):
  Megatron-LM's DeepSeek-V3 guide (docs/discussions, "Use flexible PP layout")
  and Megatron-Bridge's H100 DeepSeek-V3 recipe run ``Et|(tt|)*30mL``,
  Megatron-LM's MoE recipes (examples/moe_recipes) ``Et*4|(tttt|)*14tmL`` and
  ``Et*3|(tt|)*29m|L``.  The modules then take the place of decoder layers on
  the last stage: it holds ``v q - e - mtp_layers`` of them (never fewer than 0)
  and the modules. The even split is exact for ``Et|(tt|)*30mL``;
  ``Et*4|(tttt|)*14tmL`` loads its first chunk more (the embedding and 4 layers)
  and its last less (1 layer, the module and the loss), which
  ``last_stage_layers`` below reads exactly, and ``Et*3|(tt|)*29m|L`` puts the
  module in a chunk before the loss's (on the stage before the last), which the
  split approximates. DeepSeek-V3, 61 layers + embedding + loss + 1 module over
  32 chunks (p 16, v 2): 64 units, 2 a chunk, 4 a stage; the first stage 3
  layers and the embedding, the last 2 layers, the module and the loss, the
  others 4 layers (without the switch, 63 units: 2 a chunk, the last stage 3
  layers and the module, 4 blocks beside the loss).
* **Last stage's layers** (``last_stage_layers`` ``Z`` > 0; Megatron-Core's
  ``num_layers_in_last_pipeline_stage``, ``--decoder-last-pipeline-num-layers``):
  the last stage holds ``Z`` decoder layers over its ``v`` chunks, beside the
  output layer, the loss and the MTP modules, and the other ``p - 1`` stages
  split the other ``L - Z``: ``ceil((L - Z) / (p - 1))`` each, the first the
  rest (Megatron-Core splits them evenly and asks that they divide; where they
  do not, the first stage taking the rest is what a custom layout such as
  ``Et|(tt|)*30mL`` below does).  It overrides the two
  switches above, as it does in Megatron-Core, and it is how a custom layout
  whose chunks before the last hold the same layers reads exactly:
  Megatron-Bridge's DeepSeek-V3 layout ``Et*4|(t*4|)*14tmL``
  (``set_deepseek_v3_pipeline_model_parallel_layout``) on p 16 is ``Z`` 1
  (60 layers, 4 on each other stage); on p 8 v 2, ``Z`` 5 (the last stage
  holds chunks 7 and 15, 4 + 1 layers; 56 layers, 8 on each other stage);
  ``Et|(tt|)*30mL`` on p 8 v 4, ``Z`` 6 (55 layers, 8 a stage, the first 7).
  The busiest stage is then the last or a middle one (the first holds no
  more than a middle one).
* **Transfers**: 1F1B with ``v`` virtual stages per GPU (interleaved when
  ``v > 1``, Narayanan et al. 2021 sec. 2.2.2) makes ``2 v m``
  point-to-point transfers per step, each ``2 b s h / t`` bytes per GPU with
  the scatter/gather optimisation (sec. 4.1) then an all-gather in the node
  (none with sequence parallelism: the activation is already sharded);
  inter-node unless the job is one node, and half of them where stages share
  a node (``crossing_share``: an NVL72 domain holds several stages of a large
  job, so the busiest stage sends only one direction across racks).  The
  interleaved schedule hides its steady-state transfers under the chunk passes
  (``pp_overlap``, Megatron-Core's ``overlap_p2p_comm``) unless every stream
  shares one hardware queue (``serial_streams``); the warm-up and flush ones
  stay exposed (``transfer_seconds``).
* **Bubble**: 1F1B ``(p - 1) / (v m)`` of the busy time of the busiest stage;
  the zero-bubble schedules (Qi et al. 2023, sec. 2 and 6) fill it with
  weight-gradient passes: ZB-H1 ``(p - 1)(F + B - W)``, ZB-V the ZB-H2
  expression ``(p - 1)(F + B - 2W)`` on chunks of half a stage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from jaxmodel.collectives import all_gather, hidden_second_costs, point_to_point
from jaxmodel.deferred import jax, jnp
from jaxmodel.models.common import whole
from jaxmodel.numerics import positive_part


def mtp_units(x):
    """Units of the split the multi-token-prediction modules take (module doc)."""
    return x.mtp_in_pipeline_split * x.mtp_layers


def layers_per_stage(x, g):
    """``(layers_mid, layers_end, layers_last)``: decoder layers of a middle stage,
    of the first and of the last (``layers_end`` less the modules' units with
    ``mtp_in_pipeline_split``; the modules come on top, ``busiest_stage``).

    The ceil is a step: its gradient is that of the quotient (the relaxation).
    """
    L, p, v, one_stage = g.L, g.p, g.v, g.one_stage
    mtp = mtp_units(x)
    q_exact = (L + 2.0 * x.pipeline_split_embedding + mtp) / (p * v)
    q = q_exact + jax.lax.stop_gradient(jnp.ceil(q_exact - 1e-9) - q_exact)
    layers_mid = v * q
    layers_end = jnp.where(one_stage > 0.5, L, v * q - x.pipeline_split_embedding)
    layers_last = jnp.where(one_stage > 0.5, L, jnp.maximum(layers_end - mtp, 0.0))
    # The last stage's layers given (last_stage_layers): the rest over p - 1 stages.
    z = x.last_stage_layers
    given = (z > 0.5) & (one_stage < 0.5)
    others = jnp.maximum(p - 1.0, 1.0)
    r_exact = (L - z) / others
    r = r_exact + jax.lax.stop_gradient(jnp.ceil(r_exact - 1e-9) - r_exact)
    layers_mid = jnp.where(given, r, layers_mid)
    layers_end = jnp.where(given, L - z - (p - 2.0) * r, layers_end)
    layers_last = jnp.where(given, z, layers_last)
    return layers_mid, layers_end, layers_last


class Stage(NamedTuple):
    """The busiest stage, one micro-batch (seconds; ``stage_layers`` its layers).

    ``stage_f``, ``stage_b``, ``stage_w``: its forward, input-gradient and
    weight-gradient passes (the zero-bubble schedules fill the bubble with W).
    """

    last_busiest: object
    micro_compute: object
    stage_layers: object
    stage_f: object
    stage_w: object
    stage_b: object


def busiest_stage(g, layers_mid, layers_end, layers_last, lt, end_extra) -> Stage:
    """The last stage or a middle one, whichever takes longer (``lt``: ``LayerTimes``).

    ``end_extra``: ``(layers, forward_s, total_s)`` the last stage runs beyond its
    layers and the output layer, one micro-batch: the multi-token-prediction modules
    (``jaxmodel.models.refined.mtp``), their blocks timed as the stage's layers.
    """
    has_mid = g.has_mid
    layer_s, logit_s, embed_grad_s = lt.layer_s, lt.logit_s, lt.embed_grad_s
    layer_f, layer_w, logit_fwd_s = lt.layer_f, lt.layer_w, lt.logit_fwd_s
    extra_layers, extra_f, extra_s = end_extra
    last_layers = layers_last + extra_layers
    last_s = last_layers * layer_s + logit_s + embed_grad_s + extra_s
    # A middle stage, or the first where it is the only other one (p = 2): it never
    # holds more layers than a middle stage when there is one (layers_per_stage).
    mid_layers = jnp.where(has_mid > 0.5, layers_mid, g.pp_active * layers_end)
    mid_s = mid_layers * layer_s
    last_busiest = last_s >= mid_s
    micro_compute = jnp.maximum(last_s, mid_s)
    stage_layers = jnp.where(last_busiest, last_layers, mid_layers)
    # Forward / input-gradient / weight-gradient split of the busiest stage
    # (the zero-bubble schedules fill the bubble with W passes).
    logit_f = jnp.where(last_busiest, logit_fwd_s + extra_f, 0.0)
    stage_f = stage_layers * layer_f + logit_f
    stage_w = stage_layers * layer_w
    stage_b = micro_compute - stage_f - stage_w
    return Stage(last_busiest, micro_compute, stage_layers, stage_f, stage_w, stage_b)


def crossing_share(g):
    """The share of the busiest stage's sends that leave its node (0, 1/2 or 1).

    Stages are ``t c d`` ranks apart (the pipeline rank is the outermost).  A job
    in one node sends nothing across; where two stages or more share a node
    (``2 t c d <= G``) no stage has node boundaries on both sides (two of them
    lie ``G`` apart, its two neighbours within ``2 t c d``), so the busiest
    stage sends one direction (its forward activations or its backward
    gradients) across and the other in the node: half; otherwise all of them.
    """
    G = whole(g.G)
    stride = g.t_i * g.c_i * g.d_i
    across = jnp.where(2 * stride <= G, 0.5, 1.0)
    return jnp.where(g.used_i > G, across, 0.0).astype(g.fdt)


def warmup_chunks(g):
    """Forward chunk passes the first stage runs before its first backward in
    the interleaved schedule, at most its ``v m``: Megatron-Core's
    ``num_warmup_microbatches`` for pipeline rank 0, ``2 (p - 1) + (v - 1) p``
    (``forward_backward_pipelining_with_interleaving``, with
    ``microbatch_group_size_per_vp_stage`` at its default, ``p``); the flush
    runs as many backward passes after the last forward."""
    p, v, m = g.p, g.v, g.m
    return jnp.minimum(2.0 * (p - 1.0) + (v - 1.0) * p, v * m)


def transfer_seconds(x, g, act_bytes, micro_compute):
    """Exposed point-to-point seconds a step: ``2 v m`` sends of the ``[s / c,
    b, h]`` activation, ``crossing_share`` of them over the network.

    With ``pp_overlap`` (Megatron-Core's ``overlap_p2p_comm``, on by default
    where ``v > 1``) the interleaved schedule's steady-state sends and receives
    are asynchronous: each 1F1B pair posts its forward's and its backward's and
    waits for them only before the chunk that needs them, so a pair's two
    transfers run under its chunk passes (``micro_compute / v``) and only what
    they exceed it by is exposed.  The NCCL kernels that move them run on the
    SMs beside those passes and slow them as the hidden data-parallel
    collectives do (``overlap_slowdown`` over NVLink, in proportion to the rate
    over the network; ``data.overlap_seconds``).  The warm-up and flush
    transfers (``warmup_chunks`` of each) stay synchronous, as they are unless
    ``--overlap-p2p-communication-warmup-flush`` is set.  Megatron-Core
    overlaps only the interleaved 1F1B schedule (``v > 1``,
    ``pipeline_schedule`` 0); elsewhere every transfer is exposed.  Nor does it
    hide them where every stream shares one hardware queue
    (``CUDA_DEVICE_MAX_CONNECTIONS=1``, :func:`serial_streams`): Megatron-
    Bridge's launcher gives Blackwell 32 queues "to avoid serialization of
    streams" with data or pipeline parallelism, and keeps 1 on Hopper with TP
    or CP for the TP overlap's kernel order."""
    sp, t, net, G = g.sp, g.t, g.net, g.G
    pp_active, v, m = g.pp_active, g.v, g.m
    share = crossing_share(g)
    gather = (1.0 - sp) * all_gather(act_bytes, t, jnp.minimum(t, G), net)
    across = share * point_to_point(act_bytes / t, 1.0, net)
    inside = (1.0 - share) * point_to_point(act_bytes / t, 0.0, net) + gather
    p2p_one = across + inside
    every = 2.0 * v * m * p2p_one
    # Of each second a transfer runs hidden, the seconds the compute beside it loses.
    cost_in, cost_out = hidden_second_costs(x.overlap_slowdown, net)
    lost = inside * cost_in + across * cost_out
    growth = lost / jnp.where(p2p_one > 0.0, p2p_one, 1.0)
    edge = warmup_chunks(g)
    pair = 2.0 * p2p_one
    chunk = micro_compute / v
    steady = positive_part(pair - chunk) + growth * jnp.minimum(pair, chunk)
    hidden = 2.0 * edge * p2p_one + (v * m - edge) * steady
    overlapped = ((x.pp_overlap > 0.5) & ~serial_streams(x, g) & (v > 1.5)
                  & (g.schedule == 0))
    return pp_active * jnp.where(overlapped, hidden, every)


def serial_streams(x, g):
    """Whether every stream shares one hardware queue (``serial_streams``; 2:
    Megatron-LM's rule).  Megatron-LM asserts ``CUDA_DEVICE_MAX_CONNECTIONS=1``
    before Blackwell (``get_device_arch_version() < 10``) with TP or CP > 1,
    except with FSDP ("requires not setting CUDA_DEVICE_MAX_CONNECTIONS=1 for
    better parallelization") or the expert all-to-all overlap ("requires setting
    a larger CUDA_DEVICE_MAX_CONNECTIONS"; megatron/training/arguments.py);
    Megatron-Bridge's launcher sets the same on Hopper (1 with TP or CP and no
    all-to-all overlap) and 32 on Blackwell (scripts/performance/perf_plugins.py,
    ``PerfEnvPlugin._set_num_cuda_device_max_connections``)."""
    mode = whole(x.serial_streams)
    split = (g.t > 1.5) | (g.c > 1.5)
    exempt = (g.zero_i == 3) | (g.has_experts & (x.ep_overlap > 0.5))
    rule = (whole(x.compute_capability_major) < 10) & split & ~exempt
    return jnp.where(mode == 2, rule, mode == 1)


def bubble_seconds(g, stage, tp, cp):
    """Fill and drain of the busiest stage's busy time (its compute, ``tp`` and ``cp``)."""
    m, p, v, schedule = g.m, g.p, g.v, g.schedule
    micro_compute, stage_f, stage_b, stage_w = (stage.micro_compute, stage.stage_f,
                                                stage.stage_b, stage.stage_w)
    busy = m * micro_compute + tp + cp
    bubble_1f1b = (p - 1.0) / (v * m) * busy
    comm_share = busy / (m * micro_compute)
    zb_h1 = (p - 1.0) * positive_part(stage_f + stage_b - stage_w) * comm_share
    zb_v = (p - 1.0) / v * positive_part(stage_f + stage_b - 2.0 * stage_w) * comm_share
    bubble = jnp.where(schedule == 1, zb_h1, jnp.where(schedule == 2, zb_v, bubble_1f1b))
    return bubble


def split_mtp_units(inputs: Mapping[str, float]) -> int:
    """``mtp_units`` host side, for one configuration."""
    return int(inputs.get("mtp_in_pipeline_split", 0)) * int(inputs.get("mtp_layers", 0))


def _stage_split(inputs: Mapping[str, float]) -> tuple[int, int, int, int]:
    """(layers per middle stage, layers on the first, on the last, MTP units)."""
    p, v = int(inputs["pipeline_parallel"]), int(inputs["virtual_stages"])
    layers, e = int(inputs["num_layers"]), int(inputs.get("pipeline_split_embedding", 0))
    mtp = split_mtp_units(inputs)
    q = -(-(layers + 2 * e + mtp) // (p * v))
    if p == 1:
        return v * q, layers, layers, mtp
    z = int(inputs.get("last_stage_layers", 0))
    if z:
        r = -(-(layers - z) // (p - 1))
        return r, layers - z - (p - 2) * r, z, mtp
    return v * q, v * q - e, max(v * q - e - mtp, 0), mtp


def uneven_note(inputs: Mapping[str, float]) -> str:
    """A sentence on an uneven pipeline split ("" when every stage holds the same)."""
    p, layers = int(inputs["pipeline_parallel"]), int(inputs["num_layers"])
    if p == 1:
        return ""
    mid, end, last, mtp = _stage_split(inputs)
    e = int(inputs.get("pipeline_split_embedding", 0))
    if mid == end == last == layers / p:
        return ""
    others = f", the others {mid}" if p > 2 else ""
    if mtp:
        what = (f"the first stage holds {end} layer{'s' * (end != 1)}"
                f"{' (+ embedding)' * bool(e)}, the last {last} (+ MTP module"
                f"{'s' * (mtp > 1)}{' / output layer' * bool(e)}){others}")
    elif e:
        what = (f"the first and last stages hold {end} layer{'s' * (end != 1)} (+ "
                f"embedding / output layer){others}")
    else:
        what = f"the busiest stage holds {mid} layers"
    return (f" Uneven pipeline: {layers} layers over {p} stages ({layers / p:.2f} on "
            f"average); {what}, and the busiest sets the pace.")
