"""The quantities every term of the refined model uses, derived once per configuration.

The layout as exact integers (``d = N / (t c p)`` replicas, the switches as
codes), the validity of the layout (``jaxmodel.models.refined.validity``), the
switches as 0/1 floats, the smooth (relaxed) counts under their short names
(``t c p v m b s h L V a kv f G``, as the papers write them), and the achieved
rates in SI: peak FLOP/s, HBM bytes/s and the network.  Each concern's module
takes a :class:`Derived` and the model's inputs ``x``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from jaxmodel.deferred import jnp
from jaxmodel.models.common import whole
from jaxmodel.models.refined import moe
from jaxmodel.models.refined.rates import network
from jaxmodel.models.refined.validity import layout_ok


class Derived(NamedTuple):
    """Shared quantities of one configuration (jax scalars; ``_i``: int64 exact).

    Attributes:
      fdt: the floating-point dtype of the inputs.
      n_i, t_i, p_i, c_i, v_i, m_i: GPUs, tensor, pipeline, context degrees,
        virtual stages and micro-batches per step, exact.
      d_i, used_i, tokens_i: replicas ``N // (t c p)``, GPUs used, tokens a step.
      schedule, zero_i, recompute: the pipeline schedule, ZeRO stage and
        recompute codes.
      well_formed: the layout rule without the memory fit.
      full, selective, sp, flash, fp8: recompute kinds and switches, 0/1 floats.
      one_stage, pp_active, has_mid: ``p = 1``, ``p > 1``, ``p >= 3``, 0/1 floats.
      d, t, c, p, v, m, b, s, h, L, V, a, kv, f, G: the counts as floats
        (``d`` at least 1, so that an invalid layout divides by no zero).
      net: the achieved network (``rates.network``).
      peak: the dense bf16 peak, FLOP/s.  hbm_rate: achieved HBM bytes/s.
      rep_split: ``t`` with sequence parallelism, else 1 (the replicated part).
      tok: tokens of one micro-batch on one GPU, ``b s / c``.
      plain: a dense model with standard attention (``moe.is_plain``).
      has_experts: MoE layers present.  e, etp: expert and expert-tensor degrees.
    """

    fdt: Any
    n_i: Any
    t_i: Any
    p_i: Any
    c_i: Any
    v_i: Any
    m_i: Any
    d_i: Any
    used_i: Any
    tokens_i: Any
    schedule: Any
    zero_i: Any
    well_formed: Any
    recompute: Any
    full: Any
    selective: Any
    sp: Any
    flash: Any
    fp8: Any
    one_stage: Any
    pp_active: Any
    has_mid: Any
    d: Any
    t: Any
    c: Any
    p: Any
    v: Any
    m: Any
    b: Any
    s: Any
    h: Any
    L: Any
    V: Any
    a: Any
    kv: Any
    f: Any
    G: Any
    net: Any
    peak: Any
    hbm_rate: Any
    rep_split: Any
    tok: Any
    plain: Any
    has_experts: Any
    e: Any
    etp: Any


def derive(x) -> Derived:
    """The shared quantities of configuration ``x`` (``RefinedInputs``)."""
    fdt = jnp.result_type(x.hidden_dim)
    n_i, t_i, p_i = whole(x.num_gpus), whole(x.tensor_parallel), whole(x.pipeline_parallel)
    c_i = whole(x.context_parallel)
    v_i, m_i = whole(x.virtual_stages), whole(x.gradient_accum_steps)
    d_i = n_i // (t_i * c_i * p_i)
    used_i = d_i * t_i * c_i * p_i
    tokens_i = whole(x.micro_batch) * m_i * whole(x.seq_length) * d_i
    schedule = whole(x.pipeline_schedule)
    zero_i = whole(x.zero_stage)
    well_formed = layout_ok(x, d_i, t_i, c_i, p_i, v_i, m_i, schedule)
    recompute = whole(x.recompute)
    full = (recompute == 2).astype(fdt)
    selective = (recompute == 1).astype(fdt)
    sp = x.sequence_parallel
    one_stage = (p_i == 1).astype(fdt)

    # An invalid layout (d = 0) is computed with d = 1 and masked afterwards,
    # so that neither values nor gradients see a division by zero.
    d = jnp.maximum(d_i, 1).astype(fdt)
    t = x.tensor_parallel
    return Derived(
        fdt=fdt, n_i=n_i, t_i=t_i, p_i=p_i, c_i=c_i, v_i=v_i, m_i=m_i, d_i=d_i,
        used_i=used_i, tokens_i=tokens_i, schedule=schedule, zero_i=zero_i,
        well_formed=well_formed, recompute=recompute, full=full, selective=selective,
        sp=sp, flash=x.flash_attention, fp8=x.fp8, one_stage=one_stage,
        pp_active=1.0 - one_stage, has_mid=(p_i >= 3).astype(fdt),
        d=d, t=t, c=x.context_parallel, p=x.pipeline_parallel, v=x.virtual_stages,
        m=x.gradient_accum_steps, b=x.micro_batch, s=x.seq_length, h=x.hidden_dim,
        L=x.num_layers, V=x.vocab_size, a=x.num_heads, kv=x.num_kv_heads,
        f=x.ffn_hidden_dim, G=x.gpus_per_node, net=network(x),
        peak=x.compute_tflops * 1e12,
        hbm_rate=x.hbm_bandwidth_tb_s * 1e12 * x.hbm_efficiency,
        rep_split=jnp.where(sp > 0.5, t, jnp.ones_like(t)),
        tok=x.micro_batch * x.seq_length / x.context_parallel,
        # MoE and MLA (moe) enter by where: a dense model with standard
        # attention keeps its expressions bit for bit (XLA may fuse a sum with
        # a zero term differently).
        plain=moe.is_plain(x), has_experts=moe.moe_layers(x) > 0.5,
        e=x.expert_parallel, etp=x.expert_tensor_parallel,
    )
