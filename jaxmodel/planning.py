"""Plan a training run: for every GPU and cluster size, the best layout and
what the run takes (days, GPU-hours, dollars, energy).

Every (GPU preset, GPU count) pair gets the model's layout candidates
(``Model.layout``); the candidate tables of all pairs are stacked into one
table whose columns also carry each row's GPU inputs, and one pass of the
sweep engine (:func:`jaxmodel.searching.reduce_table`, one compiled program)
keeps the fastest valid layout of each pair (``GroupBest`` grouped by pair).
On the host, the few winners are ranked: the Pareto front of time against
cost, the cheapest plan within a deadline, the fastest within a budget, and
why a constraint cannot be met (with the nearest plan).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxmodel.errors import InputError, SpecError
from jaxmodel.models import Model, get_model
from jaxmodel.presets import GPUS, apply_presets, get_preset

RANK_BY = "train_days"
RUN_COLUMNS = ("train_days", "gpu_hours", "cost_usd", "energy_mwh", "power_mw",
               "co2_tonnes", "usd_per_million_tokens", "mfu_percent", "step_time_ms")


@dataclass
class PlanResult:
    """The best layout per (GPU, GPU count), and what the search cost.

    Attributes:
      rows: one dict per pair with a valid layout (``gpu``, every input and
        output of the model), in the order GPUs and counts were given.
      missing: ``(gpu, num_gpus, why)`` for pairs without a valid layout.
      candidates: layouts evaluated in all; compile_s, run_s, enumerate_s: seconds.
    """

    rows: list[dict[str, Any]]
    missing: list[tuple[str, int, str]]
    candidates: int
    enumerate_s: float
    compile_s: float
    run_s: float
    train_tokens: float


def parse_gpu_counts(text: str) -> list[int]:
    """``"4096,8192"``, ``"4096-32768"`` (powers of two between) or
    ``"1000-4000:1000"`` (a step), comma-separated; ascending, unique.

    Raises:
      InputError: naming the item and what is allowed.
    """
    allowed = ("N, LO-HI (powers of two from LO to HI) or LO-HI:STEP, comma-separated, "
               "whole numbers >= 1")
    out: set[int] = set()
    for item in (t.strip() for t in text.split(",")):
        try:
            if "-" in item:
                span, _, step = item.partition(":")
                lo, hi = (int(v) for v in span.split("-"))
                if lo < 1 or hi < lo:
                    raise ValueError
                if step:
                    out.update(range(lo, hi + 1, int(step)))
                else:
                    out.update(2 ** k for k in range(math.ceil(math.log2(lo)),
                                                     math.floor(math.log2(hi)) + 1))
            else:
                n = int(item)
                if n < 1:
                    raise ValueError
                out.add(n)
        except ValueError:
            raise InputError("--num-gpus", item, allowed) from None
    if not out:
        raise InputError("--num-gpus", text, allowed)
    return sorted(out)


def plan(llm: str, train_tokens: float, *, gpus: Sequence[str] | None = None,
         num_gpus: Sequence[int] = (4096, 8192, 16384, 32768),
         global_batch_tokens: int = 2**24, model: str | Model = "refined",
         overrides: Mapping[str, float] | None = None,
         prices: Mapping[str, float] | None = None, x64: bool = False) -> PlanResult:
    """The fastest valid layout for every GPU preset and GPU count (module doc).

    Args:
      llm: an LLM preset name.
      train_tokens: tokens the run trains on.
      gpus: GPU preset names (default: every one).
      num_gpus: cluster sizes.
      global_batch_tokens: tokens per optimizer step (a multiple of seq_length).
      overrides: other inputs, for every GPU (``zero_stage``, ``pue``...).
      prices: USD per GPU-hour by GPU preset (default: ``gpu_hour_usd``'s value).

    Raises:
      InputError, SpecError: a bad name or value (one line).
    """
    from jaxmodel.reduce import GroupBest
    from jaxmodel.searching import reduce_table, row_dicts

    model = get_model(model)
    if model.layout is None:
        raise SpecError(f"model {model.name!r} declares no layout space to plan with")
    gpus = list(gpus) if gpus else list(GPUS)
    for name in gpus:
        get_preset("gpu", name)
    overrides = dict(overrides or {})
    prices = dict(prices or {})
    for name in prices:
        if name not in gpus:
            raise InputError("--price", name, "a GPU in the plan: " + ", ".join(gpus))
    start = time.perf_counter()
    base = {**model.defaults, **apply_presets(model, llm=llm), **overrides,
            "train_tokens": train_tokens}
    for f in model.inputs:
        base[f.name] = f.check_scalar(base[f.name])
    space = model.layout
    hardware = sorted({k for g in gpus for k in apply_presets(model, gpu=g)} | {"gpu_hour_usd"})
    tables, groups, pairs, missing = [], [], [], []
    for g in gpus:
        values = {**base, **apply_presets(model, gpu=g), **overrides}
        if g in prices:
            values["gpu_hour_usd"] = model.input_field("gpu_hour_usd").check_scalar(prices[g])
        batch = space.global_batch(values, global_batch_tokens=global_batch_tokens)
        for n in num_gpus:
            values["num_gpus"] = float(n)
            cand = space.candidates(values, batch)
            rows = len(next(iter(cand.values())))
            if rows == 0:
                missing.append((g, n, str(space.no_layout_error(values, batch))))
                continue
            cols = {k: v for k, v in cand.items() if k in model.input_names}
            cols["num_gpus"] = np.full(rows, n, np.int64)
            for k in hardware:
                cols[k] = np.full(rows, values[k], np.float64)
            groups.append(np.full(rows, len(pairs), np.int64))
            pairs.append((g, n))
            tables.append(cols)
    if not tables:
        return PlanResult([], missing, 0, time.perf_counter() - start, 0.0, 0.0, train_tokens)
    names = sorted({k for t in tables for k in t})
    n_rows = [len(t["num_gpus"]) for t in tables]
    columns = {k: np.concatenate([t[k] if k in t else np.full(r, base[k], np.float64)
                                  for t, r in zip(tables, n_rows, strict=True)])
               for k in names}
    group_ids = np.concatenate(groups)
    enumerate_s = time.perf_counter() - start
    reducer = GroupBest(RANK_BY, ("num_gpus",), maximize=False)
    run = reduce_table(model, base, columns, reducer,
                       question={"plan": {"llm": llm, "gpus": gpus,
                                          "num_gpus": list(num_gpus),
                                          "global_batch_tokens": global_batch_tokens}},
                       x64=x64, group_by=("num_gpus",), group_ids=group_ids,
                       num_groups=len(pairs))
    best = reducer.rows(run.state)
    found = row_dicts(model, best)
    by_pair = {int(gid): row for gid, row in zip(best["group_id"], found, strict=True)}
    rows = []
    for i, (g, n) in enumerate(pairs):
        if i in by_pair:
            rows.append({"gpu": g, **by_pair[i]})
        else:
            missing.append((g, n, "no candidate layout is valid (fits in memory, splits "
                                  "the heads and layers)"))
    return PlanResult(rows, missing, int(sum(n_rows)), enumerate_s, run.compile_s, run.run_s,
                      train_tokens)


def pareto_front(rows: Sequence[Mapping[str, Any]], x: str = "train_days",
                 y: str = "cost_usd") -> list[dict[str, Any]]:
    """The rows no other row beats in both ``x`` and ``y`` (both minimised),
    by ``x`` ascending."""
    ordered = sorted(rows, key=lambda r: (r[x], r[y]))
    front, best_y = [], math.inf
    for r in ordered:
        if r[y] < best_y:
            front.append(dict(r))
            best_y = r[y]
    return front


def _money(usd: float) -> str:
    return f"${usd / 1e6:,.1f}M" if usd >= 1e6 else f"${usd:,.0f}"


def _tokens(n: float) -> str:
    return f"{n / 1e12:g}T" if n >= 1e12 else f"{n / 1e9:g}B"


@dataclass
class Choice:
    """What the constraints pick: the cheapest plan within the deadline, the
    fastest within the budget, and one line per constraint that cannot be met."""

    cheapest: dict[str, Any] | None
    fastest: dict[str, Any] | None
    problems: list[str]


def choose(rows: Sequence[Mapping[str, Any]], train_tokens: float, *,
           deadline_days: float | None = None, budget_usd: float | None = None,
           max_power_mw: float | None = None) -> Choice:
    """Apply the constraints to the plans (``max_power_mw`` drops the plans
    that draw more); each constraint that no plan meets gets a line saying why
    and what the nearest plan gives."""
    problems = []
    what = f"{_tokens(train_tokens)} tokens"
    pool = list(rows)
    if max_power_mw is not None:
        pool = [r for r in rows if r["power_mw"] <= max_power_mw]
        if rows and not pool:
            low = min(rows, key=lambda r: r["power_mw"])
            problems.append(f"no plan draws at most {max_power_mw:g} MW; the nearest draws "
                            f"{low['power_mw']:.2f} MW ({low['gpu']}, {low['num_gpus']:,} GPUs)")
    in_time = [r for r in pool if deadline_days is None or r["train_days"] <= deadline_days]
    in_budget = [r for r in pool if budget_usd is None or r["cost_usd"] <= budget_usd]
    both = [r for r in in_time if budget_usd is None or r["cost_usd"] <= budget_usd]
    cheapest = min(in_time, key=lambda r: r["cost_usd"], default=None)
    fastest = min(in_budget, key=lambda r: r["train_days"], default=None)
    if pool and not both:
        if deadline_days is not None and budget_usd is not None:
            near = []
            if in_budget:
                near.append(f"{min(r['train_days'] for r in in_budget):,.0f} days")
            if in_time:
                near.append(_money(min(r["cost_usd"] for r in in_time)))
            if not near:
                fast = min(pool, key=lambda r: r["train_days"])
                cheap = min(pool, key=lambda r: r["cost_usd"])
                near = [f"{fast['train_days']:,.0f} days", _money(cheap["cost_usd"])]
            problems.append(f"no plan meets {deadline_days:g} days for {what} under "
                            f"{_money(budget_usd)}; the nearest is " + " or ".join(near))
        elif deadline_days is not None:
            fast = min(pool, key=lambda r: r["train_days"])
            problems.append(f"no plan meets {deadline_days:g} days for {what}; the fastest "
                            f"takes {fast['train_days']:,.1f} days ({fast['gpu']}, "
                            f"{fast['num_gpus']:,} GPUs, {_money(fast['cost_usd'])})")
        elif budget_usd is not None:
            cheap = min(pool, key=lambda r: r["cost_usd"])
            problems.append(f"no plan trains {what} under {_money(budget_usd)}; the cheapest "
                            f"costs {_money(cheap['cost_usd'])} ({cheap['gpu']}, "
                            f"{cheap['num_gpus']:,} GPUs, {cheap['train_days']:,.1f} days)")
    return Choice(cheapest, fastest, problems)
