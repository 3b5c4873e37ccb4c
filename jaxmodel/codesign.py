"""Co-design by gradient: what a change of the hardware is worth once the layout
is re-optimised.

A search picks the layout ``x*`` that maximises (or minimises) an objective
``f(x; h)`` for hardware inputs ``h``.  Where the argmax is unique and does not
move, the best objective ``F(h) = f(x*(h); h)`` has the derivative
``dF/dh = df/dh (x*; h)``: the layout's own response is second order (the
envelope theorem; Milgrom and Segal, Econometrica 70(2), 2002).  So the
co-design gradient is the plain gradient at the argmax row, taken by the
forward-mode machinery of :mod:`jaxmodel.sensitivity`.

It breaks where the argmax jumps (a kink of ``F``): every input is also
re-searched at ``FACTORS`` (0.9x and 1.1x), all copies of the candidate table
in one compiled program (one group per copy and search group), and the
result says whether the argmax layout moved.

Inputs that act only by steps (the model's stepped inputs, and its memory
capacity, which decides which layouts fit and nothing else) have a zero
gradient at the argmax; for them the derivative given is the re-searched
difference at +10%, ``(F(1.1 h) - F(h)) / (0.1 h)``.

Dollars: with a ``cost_usd`` output, ``d cost_usd / d h`` at the argmax (again
the envelope: the cost is a function of the objective at a fixed GPU count and
price) gives "+10% of h is worth ``-0.1 h dcost/dh`` dollars on this plan",
and the re-searched cost at 1.1x gives the same across any kink.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxmodel.errors import SpecError, closest
from jaxmodel.models import Model, get_model
from jaxmodel.reduce import CONFIG_ID, GroupBest

FACTORS = (0.9, 1.1)
COST = "cost_usd"


@dataclass(frozen=True)
class Weight:
    """What one hardware input is worth at one optimum.

    Attributes:
      input: the input's name; value: its value at the optimum.
      gradient: d(best objective) / d(input), in the objective's units per the
        input's unit: the envelope gradient, or for a ``stepped`` input the
        re-searched difference at +10% over ``0.1 value``.
      stepped: the input acts by steps (see the module doc).
      best_at: factor -> the re-searched best objective at ``factor x value``
        (NaN: no valid layout there).
      moved: factor -> the argmax layout there differs from the optimum's.
      usd_gradient: d cost_usd / d input (the same treatment), or None
        without a cost output.
      usd_at: factor -> the re-searched best layout's cost_usd, or empty.
    """

    input: str
    value: float
    gradient: float
    stepped: bool
    best_at: dict[float, float]
    moved: dict[float, bool]
    usd_gradient: float | None
    usd_at: dict[float, float]

    @property
    def usd_per_10_percent(self) -> float | None:
        """Dollars +10% of the input saves, to first order (negative: costs more)."""
        return None if self.usd_gradient is None else -0.1 * self.value * self.usd_gradient

    @property
    def argmax_moves(self) -> bool:
        """The argmax changes somewhere within +-10%."""
        return any(self.moved.values())

    def document(self) -> dict[str, Any]:
        return {"input": self.input, "value": self.value, "gradient": self.gradient,
                "stepped": self.stepped, "argmax_moves_within_10_percent": self.argmax_moves,
                "best_at": {f"{f:g}x": _num(v) for f, v in self.best_at.items()},
                "argmax_moved_at": {f"{f:g}x": m for f, m in self.moved.items()},
                "usd_gradient": self.usd_gradient,
                "usd_saved_by_plus_10_percent": self.usd_per_10_percent,
                "usd_at": {f"{f:g}x": _num(v) for f, v in self.usd_at.items()}}


def _num(v: float) -> float | None:
    return None if not np.isfinite(v) else float(v)


def check_wrt(model: Model, wrt: Sequence[str] | None, by: str) -> tuple[str, ...]:
    """The inputs to weigh (default: the model's ``hardware``), checked.

    Raises:
      SpecError: an unknown input, none to weigh, or an objective that is not a
        float output (one line).
    """
    if by not in model.output_names or model.output_field(by).kind != "float":
        raise SpecError(f"--sensitivity: the objective {by!r} has no derivative; allowed: "
                        "a float output such as throughput_tokens_s or train_days")
    wrt = tuple(wrt) if wrt else model.hardware
    if not wrt:
        raise SpecError(f"--sensitivity: model {model.name!r} declares no hardware inputs; "
                        "name them with --sensitivity-wrt")
    for name in wrt:
        if name not in model.input_names:
            raise SpecError(f"--sensitivity-wrt: {name!r} is not an input of model "
                            f"{model.name!r}{closest(name, model.input_names)}")
        if model.input_field(name).integer:
            # (10% of a count, a switch or a layout axis is not a value it can take)
            raise SpecError(f"--sensitivity-wrt: {name!r} is a whole number; allowed: "
                            "inputs with real values, e.g. " + ", ".join(model.hardware))
    return wrt


def weigh(model: str | Model, values: Mapping[str, float], columns: Mapping[str, np.ndarray],
          best: Sequence[Mapping[str, Any]], *, by: str, maximize: bool,
          wrt: Sequence[str] | None = None, group_ids: np.ndarray | None = None,
          num_groups: int = 1, x64: bool = False) -> list[dict[str, Weight]]:
    """What each hardware input is worth at the optimum of each search group.

    Args:
      values: every input (those not in ``columns``).
      columns: the searched candidate table (equal-length input columns; row
        ``i`` is ``config_id`` ``i``), as :func:`jaxmodel.searching.reduce_table`
        takes it.
      best: the optimum of each group, as ``row_dicts`` gives it (every input
        and output, and ``config_id``), in group order; ``None`` for a group
        without a valid layout.
      by, maximize: the objective the search ranked by.
      wrt: the inputs to weigh (default: the model's ``hardware``).
      group_ids, num_groups: the search groups (default: one).

    Returns:
      Per group, ``{input: Weight}`` (empty for a group without an optimum).
    """
    from jaxmodel.searching import reduce_table
    from jaxmodel.sensitivity import sensitivities

    model = get_model(model)
    wrt = check_wrt(model, wrt, by)
    stepped = set(model.steps) | ({model.memory_capacity} if model.memory_capacity else set())
    smooth = [w for w in wrt if w not in stepped]
    of = (by, COST) if COST in model.output_names and by != COST else (by,)
    found = [i for i, row in enumerate(best) if row is not None]
    grads: dict[tuple[str, str], np.ndarray] = {}
    if smooth and found:
        at = {f.name: np.array([float(best[i][f.name]) for i in found]) for f in model.inputs}
        s = sensitivities(at, of=of, wrt=smooth, model=model, x64=x64)
        grads = {(o, w): s.gradient(o, w) for o in of for w in smooth}

    # Every input at every factor: copies of the table, one group per (copy, group).
    n = len(next(iter(columns.values())))
    gids = np.zeros(n, np.int64) if group_ids is None else np.asarray(group_ids, np.int64)
    scenarios = [(w, f) for w in wrt for f in FACTORS]
    names = sorted(set(columns) | set(wrt))
    base = {k: np.asarray(columns[k], np.float64) if k in columns
            else np.full(n, float(values[k])) for k in names}
    table = {k: np.concatenate([base[k] * (f if k == w else 1.0) for w, f in scenarios])
             for k in names}
    group_key = model.layout.gpus if model.layout is not None else names[0]
    if group_key not in table:
        table[group_key] = np.tile(np.full(n, float(values[group_key])), len(scenarios))
    stacked_ids = np.concatenate([gids + s * num_groups for s in range(len(scenarios))])
    reducer = GroupBest(by, (group_key,), maximize=maximize)
    run = reduce_table(model, values, table, reducer,
                       question={"weigh": {"by": by, "maximize": maximize, "wrt": list(wrt),
                                           "factors": list(FACTORS)}},
                       x64=x64, group_by=(group_key,), group_ids=stacked_ids,
                       num_groups=len(scenarios) * num_groups)
    rows = reducer.rows(run.state)
    again = {int(g): i for i, g in enumerate(rows["group_id"])}

    out: list[dict[str, Weight]] = []
    for g in range(num_groups):
        row = best[g] if g < len(best) else None
        if row is None:
            out.append({})
            continue
        weights = {}
        for w in wrt:
            best_at, moved, usd_at = {}, {}, {}
            for f in FACTORS:
                s = scenarios.index((w, f))
                i = again.get(s * num_groups + g)
                best_at[f] = float(rows[by][i]) if i is not None else float("nan")
                moved[f] = i is None or int(rows[CONFIG_ID][i]) - s * n != row[CONFIG_ID]
                if COST in of:
                    usd_at[f] = float(rows[COST][i]) if i is not None else float("nan")
            value = float(row[w])
            if w in smooth:
                k = found.index(g)
                gradient = float(grads[by, w][k])
                usd = float(grads[COST, w][k]) if COST in of else None
            else:
                up = FACTORS[-1]
                step = (up - 1.0) * value
                gradient = (best_at[up] - float(row[by])) / step
                usd = (usd_at[up] - float(row[COST])) / step if COST in of else None
            weights[w] = Weight(w, value, gradient, w not in smooth, best_at, moved, usd, usd_at)
        out.append(weights)
    return out


def lines(weights: Mapping[str, Weight], by: str, model: Model) -> list[str]:
    """The weights as a table: gradient, argmax movement, dollars."""
    from jaxmodel.sensitivity import gradient_unit

    heads = ["input", "value", f"d {by} / d input", "unit", "argmax within +-10%",
             "+10% saves"]
    cells = []
    for w in weights.values():
        unit = gradient_unit(model, by, w.input) + (" (re-searched +10%)" if w.stepped else "")
        moved = ", ".join(f"{f:g}x" for f, m in w.moved.items() if m)
        dollars = w.usd_per_10_percent
        cells.append([w.input, f"{w.value:,.4g}", f"{w.gradient:,.4g}", unit,
                      f"moves at {moved}" if moved else "stays",
                      "-" if dollars is None else f"${round(dollars) + 0:,}"])
    widths = [max(len(h), *(len(c[j]) for c in cells)) for j, h in enumerate(heads)]
    return ["  ".join(h.rjust(wd) for h, wd in zip(heads, widths, strict=True))] + [
        "  ".join(c.rjust(wd) for c, wd in zip(row, widths, strict=True)) for row in cells]
