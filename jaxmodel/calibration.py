"""Calibration by autodiff: fit a model's cluster parameters to measured runs.

A cluster's achieved efficiencies and latencies differ from the datasheet
(NCCL versions, NIC firmware, kernels).  Given a handful of measured runs (one
row per run: its inputs and one or more ``measured_<output>`` columns), this
fits a few **cluster-wide** continuous inputs (one value shared by every run,
never a value per run; by default those of the model's declared ``cluster``
set that the runs pin down, chosen by forward selection, :func:`ranked`) by
least squares on log ratios,

    min over theta   sum_runs sum_outputs w (log predicted(theta) - log measured)^2,

so that a 5% error counts the same on a 1 s and a 100 s step.

The solver is optimistix's Levenberg-Marquardt (Gauss-Newton with a trust
region), on the model's exact Jacobian from jax (forward mode through the pure
model), jit-compiled.  Bounds are the inputs' domains, kept by a change of
variables: ``x = lo + (hi - lo) sigmoid(z)`` for an input with an upper bound
(efficiencies, fractions), ``x = lo + exp(z)`` for one without (latencies,
bandwidths), so the solver runs unconstrained in ``z`` and every fitted value
is in its domain.  Where the optimum lies beyond a bound, ``z`` runs off
towards infinity and the solver creeps after it until its step limit, ending
wherever that is: so a fit that has not converged, whose objective pushes a
parameter towards a bound, is solved again with that parameter held exactly at
the bound, and counts as converged when the others are stationary there and
the objective still falls only beyond the bound (the bound-constrained
optimum's KKT condition, checked at the bound, not near it: an active-set
step, :func:`fit_bounded`).

One vmapped batch of fits does everything: the fit on all runs, one
leave-one-out fit per run (that run's weight zero), and the bootstrap
(``bootstrap`` resamples of the runs with replacement, as multinomial weights),
each a row of a weights matrix; the compiled program is the same whatever the
batch.  From them:

* fitted values, with a percentile interval (90% by default) over the
  bootstrap fits;
* per-run relative error before (the starting values), after (the fit) and
  left out (the leave-one-out fit that did not see the run: the honest figure);
* warnings for what the data cannot pin down: strongly correlated pairs
  (``|r| >= 0.95`` in the Gauss-Newton covariance), near-singular directions
  of the column-scaled Jacobian (singular value ratio < ``0.1``), parameters
  whose interval is wider than half their value, values at a domain bound;
  each naming layouts that would separate them (the candidates below where the
  weak direction moves the prediction most);
* suggestions of what to measure next: layouts of the measured jobs (the same
  GPU count and global batch, every valid tensor x pipeline x micro-batch
  split, ``Model.layout.candidates``, tensor parallelism within a
  node where the model has ``gpus_per_node``) where the bootstrap spread of
  the prediction is widest; layouts with identical predictions are suggested
  once.

Units: inputs and outputs as named; errors in percent of the measured value.
"""

from __future__ import annotations

import csv
import datetime
import functools
import hashlib
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxmodel.api import resolve_inputs
from jaxmodel.config import load_config
from jaxmodel.errors import InputError, closest
from jaxmodel.models import DEFAULT_MODEL, Model, get_model
from jaxmodel.precision import computing
from jaxmodel.spec_tables import DEFAULT_BOOTSTRAP, DEFAULT_SUGGEST
from jaxmodel.xla_options import quick_jit

MEASURED = "measured_"
LABEL_COLUMN = "run"
DEFAULT_CONFIDENCE = 0.9
# Identifiability thresholds (module docstring).
CORRELATED = 0.95
WEAK_SINGULAR_RATIO = 0.1
WIDE_INTERVAL = 0.5
EDGE = 0.005
# A fitted value further than this factor from its starting value (the preset's
# or default's) gets a warning: a cluster's achieved rates differ from the
# microbenchmarks behind the presets by tens of percent, not by more.
FAR_FROM_START = 1.15
# Why a default fit leaves some cluster parameters at their starting values.
HELD_REASON = ("these runs cannot tell them from the fitted ones; name them in --fit "
               "to fit them anyway")
# Levenberg-Marquardt tolerances in z (log or logit of the parameter) and steps.
RTOL = 1e-7
ATOL = 1e-7
MAX_STEPS = 100
# MINPACK's orthogonality test (lmder's gtol): a fit whose residual vector makes
# a cosine of at most this with every column of the Jacobian is at a stationary
# point of the sum of squares, whether or not the solver's own step test said so.
GTOL = 1e-6
# The solver variable of a parameter held at a bound: sigmoid(40) and
# 1 - sigmoid(-40) round to 1 in float32 and float64, exp(-40) to 4e-18.
Z_BOUND = 40.0
MAX_CANDIDATES = 4096
# A parameter whose largest effect on any measured output is below this (in
# log units for a change of the parameter by its own size) affects none.
NO_EFFECT = 1e-9


@dataclass(frozen=True)
class Runs:
    """Measured runs, checked against a model.

    Attributes:
      labels: one per run, ``row N`` (1-based data row) or ``row N (label)``.
      inputs: every model input, float64 arrays of shape ``(n,)`` (columns of
        the file, the rest from the defaults < presets < config < options).
      per_run: the input names given as columns of the file.
      outputs: the measured outputs, in column order.
      measured: float64 ``(n, k)``; NaN where a run did not measure an output.
      digest: sha256 of the file's bytes (or of the table's CSV form).
      source: the file name, or ``"<table>"``.
    """

    labels: tuple[str, ...]
    inputs: dict[str, np.ndarray]
    per_run: tuple[str, ...]
    outputs: tuple[str, ...]
    measured: np.ndarray
    digest: str
    source: str

    @property
    def n(self) -> int:
        return len(self.labels)


@dataclass
class Calibration:
    """What ``calibrate`` found (see the module docstring).

    Attributes:
      model: the model's name; fit: the fitted input names, in order.
      start, values: starting and fitted values by name;
      intervals: ``name -> (low, high)``, the ``confidence`` bootstrap interval.
      runs: per run, ``label``, the run's ``layout`` inputs, and per measured
        output ``measured_<o>``, ``before_<o>``, ``after_<o>``, ``loo_<o>``
        (predictions) and ``*_error_percent`` for the three.
      errors: ``before``, ``after``, ``leave_one_out`` -> mean and max absolute
        error in percent over every measurement.
      warnings: sentences, one per problem.
      suggestions: candidate runs to measure next, widest spread first.
      bootstrap: resamples asked, converged; converged: the main fit's status.
      presets: the ``gpu`` / ``llm`` presets the fit assumed; fixed: the other
        inputs it assumed that are neither a preset's nor a default value (from
        ``config`` or ``**inputs``), not the runs' own columns.
      held: the model's cluster parameters left at their starting values by a
        default fit (no ``fit`` given) because the runs cannot tell them from
        the fitted ones (:func:`ranked`); empty when ``fit`` was given.
    """

    model: str
    fit: tuple[str, ...]
    outputs: tuple[str, ...]
    start: dict[str, float]
    values: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    confidence: float
    runs: list[dict[str, Any]]
    errors: dict[str, dict[str, float]]
    warnings: list[str]
    suggestions: list[dict[str, Any]]
    bootstrap: dict[str, int]
    converged: bool
    digest: str
    source: str
    context: dict[str, Any] = field(default_factory=dict)
    fit_s: float = 0.0
    presets: dict[str, str] = field(default_factory=dict)
    fixed: dict[str, float] = field(default_factory=dict)
    held: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN as None)."""
        def clean(v):
            if isinstance(v, float):
                return v if math.isfinite(v) else None
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v
        return clean({
            "model": self.model, "fit": list(self.fit), "held": list(self.held),
            "outputs": list(self.outputs),
            "start": self.start, "values": self.values,
            "intervals": {k: list(v) for k, v in self.intervals.items()},
            "confidence": self.confidence, "runs": self.runs, "errors": self.errors,
            "warnings": self.warnings, "suggestions": self.suggestions,
            "bootstrap": self.bootstrap, "converged": self.converged,
            "runs_digest": self.digest, "runs_source": self.source,
            "context": self.context,
        })

    def to_toml(self) -> str:
        """``calibrated.toml``: what the fit assumed and found, as a ``--config``.

        Keys: the model, the presets and fixed inputs the fit assumed, then the
        fitted values, so that ``--config calibrated.toml`` alone evaluates the
        runs' layouts as the fit did (the command line still wins); the figures
        are comments.
        """
        pct = int(round(self.confidence * 100))
        lines = [
            f"# Calibrated by jaxmodel calibrate ({_now()}), model {self.model!r}.",
            f"# Runs: {self.source}, {len(self.runs)} runs, sha256 {self.digest}",
            "# Measured: " + ", ".join(self.outputs),
        ]
        for k, v in self.context.items():
            lines.append(f"# Fitted with {k}: {v}")
        e = self.errors
        lines.append(
            "# Error (mean / max |%|): before {:.2f} / {:.2f}, after {:.2f} / {:.2f}, "
            "leave-one-out {:.2f} / {:.2f}".format(
                e["before"]["mean_abs_percent"], e["before"]["max_abs_percent"],
                e["after"]["mean_abs_percent"], e["after"]["max_abs_percent"],
                e["leave_one_out"]["mean_abs_percent"],
                e["leave_one_out"]["max_abs_percent"]))
        lines.append(f"# Bootstrap: {self.bootstrap['converged']} of "
                     f"{self.bootstrap['resamples']} resamples converged; {pct}% intervals "
                     "below.")
        if self.held:
            lines.append("# Held at the presets' values (" + HELD_REASON + "): "
                         + ", ".join(self.held))
        for w in self.warnings:
            lines.append("# Warning: " + w)
        lines += ["", f"model = {json.dumps(self.model)}"]
        lines += [f"{k} = {json.dumps(v)}" for k, v in self.presets.items()]
        if self.fixed:
            lines.append("# inputs the fit assumed, beyond the presets")
            lines += [f"{k} = {int(v) if float(v).is_integer() else repr(float(v))}"
                      for k, v in self.fixed.items()]
        lines.append("# fitted")
        for name in self.fit:
            lo, hi = self.intervals[name]
            lines.append(f"{name} = {_toml_float(self.values[name])}"
                         f"  # {pct}% {lo:.4g} .. {hi:.4g}; was {self.start[name]:.4g}")
        return "\n".join(_one_line(line) for line in lines) + "\n"

    def write(self, path: str | Path) -> None:
        """Write ``to_toml()`` atomically (a temporary file renamed into place)."""
        write_atomic(path, self.to_toml())


def _at_bound(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Which of ``x`` are at a bound: the change of variables approaches one only
    slowly, so within ``EDGE`` of the range (of the starting value, for an input
    without an upper bound) counts as on it."""
    return (np.abs(x - lo) <= EDGE * scale) | (np.isfinite(hi) & (np.abs(hi - x) <= EDGE * scale))


def _one_line(text: str) -> str:
    """A line of ``calibrated.toml`` with every character TOML forbids there
    escaped as ``\\xNN``: control characters but tab (a newline in a run label
    or a path would end the comment and inject keys, ``num_gpus = 7``) and
    what UTF-8 cannot encode (a path's undecodable bytes)."""
    def safe(c: str) -> bool:
        if c != "\t" and (c < " " or c == "\x7f"):
            return False
        try:
            c.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True

    return "".join(c if safe(c) else f"\\x{ord(c) & 0xFF:02x}" for c in text)


def _factor(x: float, start: float) -> str:
    """``1.2x up`` / ``1.3x down``: how far ``x`` moved from ``start``."""
    return f"{x / start:.3g}x up" if x >= start else f"{start / x:.3g}x down"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _toml_float(v: float) -> str:
    return repr(float(f"{v:.6g}"))


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder.

    Raises:
      InputError: the folder is missing or not writable.
    """
    p = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent or ".")
    except OSError as e:
        raise InputError("output", str(path), f"a writable path ({e.strerror})") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as e:
        os.unlink(tmp)
        raise InputError("output", str(path), f"a writable path ({e.strerror})") from None


# --------------------------------------------------------------------------- runs


def _read_csv(data: bytes):
    """A CSV file as a pyarrow table of text columns (an empty cell: null).

    Read with Python's ``csv`` on this thread, every cell as text, parsed by
    :func:`read_runs` (:func:`_number`): pyarrow's reader takes "0x10" for 16,
    and starts thread pools that could abort the process at exit after a
    one-line error ("terminate called without an active exception", 134).

    Raises:
      ValueError: not UTF-8, or a row with another number of cells than the header.
    """
    import pyarrow as pa

    rows = list(csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")))
    rows = [r for r in rows if r]  # blank lines
    header, body = rows[0], rows[1:]
    for i, r in enumerate(body, 2):
        if len(r) != len(header):
            raise ValueError(f"line {i} has {len(r)} cells, the header {len(header)}")
    columns = [pa.array([r[j] if r[j] != "" else None for r in body], type=pa.string())
               for j in range(len(header))]
    return pa.Table.from_arrays(columns, names=header)


def _read_table(source) -> tuple[Any, str, str]:
    """A pyarrow table, its digest and a name, from a path or in-memory data."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if isinstance(source, (str, Path)):
        p = Path(source)
        try:
            data = p.read_bytes()
        except OSError as e:
            raise InputError("runs", str(source), f"a readable file ({e.strerror})") from None
        if not data.strip():
            raise InputError("runs", str(source), "a CSV or Parquet file with a header row "
                             "and at least one run (the file is empty)")
        digest = hashlib.sha256(data).hexdigest()
        try:
            if data[:4] == b"PAR1":
                table = pq.read_table(io.BytesIO(data), use_threads=False)
            else:
                # Only an empty cell is missing ("not measured"); "nan" is a value, refused below.
                table = _read_csv(data)
        except (pa.ArrowException, OSError, ValueError, csv.Error) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise InputError("runs", str(source),
                             f"a CSV or Parquet file with a header row ({first})") from None
        return table, digest, str(source)
    try:
        if isinstance(source, pa.Table):
            table = source
        elif isinstance(source, Mapping):
            table = pa.table({k: np.atleast_1d(np.asarray(v)) for k, v in source.items()})
        else:
            table = pa.Table.from_pylist(list(source))
    except (pa.ArrowException, TypeError, ValueError) as e:
        raise InputError("runs", type(source).__name__,
                         f"a file path, a table or a mapping of columns ({e})") from None
    buf = io.BytesIO()
    pacsv.write_csv(table, buf)
    return table, hashlib.sha256(buf.getvalue()).hexdigest(), "<table>"


_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)",
                     re.IGNORECASE)


def _number(text: str) -> int | float | None:
    """A CSV cell as a number, read strictly: decimal digits with an optional
    sign, point and exponent (and the words nan and inf, refused later with
    their own reason); None for anything else ("0x10", "1_000", "abc")."""
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        return None
    try:
        return int(text)
    except ValueError:
        return float(text)


def read_runs(source, model: Model, base: Mapping[str, float]) -> Runs:
    """Measured runs from a CSV or Parquet file (or a table), checked.

    Columns: model inputs (per-run values; the others come from ``base``), one
    or more ``measured_<float output>``, and optionally ``run`` (a label).  An
    empty cell in a measured column means "not measured"; every run measures at
    least one output.

    Raises:
      InputError: one line naming the file, row and column: an empty file, an
        unknown column, a measurement of an integer output, a bad or NaN value.
    """
    import pyarrow as pa

    table, digest, name = _read_table(source)
    twice = next((c for c in table.column_names if table.column_names.count(c) > 1), None)
    if twice is not None:
        raise InputError("runs column", twice, "each column once (it appears "
                         f"{table.column_names.count(twice)} times)")
    if table.num_rows == 0:
        raise InputError("runs", name, "at least one run (the file has a header and no rows)")
    float_outputs = [f.name for f in model.outputs if f.kind == "float"]
    inputs, outputs, label = [], [], None
    for col in table.column_names:
        if col == LABEL_COLUMN:
            label = col
        elif col in model.input_names:
            inputs.append(col)
        elif col.startswith(MEASURED):
            out = col[len(MEASURED):]
            if out not in model.output_names:
                raise InputError("runs column", col, "measured_<output> for a float output "
                                 f"of model {model.name!r}"
                                 f"{closest(col, [MEASURED + o for o in float_outputs])}")
            kind = model.output_field(out).kind
            if kind != "float":
                raise InputError("runs column", col, f"a float output ({out} is "
                                 f"{'an integer' if kind == 'int' else 'a ' + kind} output, "
                                 "which a fit cannot use); float outputs: "
                                 + ", ".join(float_outputs))
            outputs.append(out)
        else:
            hint = closest(col, [*model.input_names,
                                 *(MEASURED + o for o in float_outputs), LABEL_COLUMN])
            if not hint and col in model.output_names:
                hint = f" (did you mean {MEASURED + col!r}?)"
            raise InputError("runs column", col, f"an input of model {model.name!r}, "
                             f"measured_<output> or {LABEL_COLUMN!r}{hint}")
    if not outputs:
        raise InputError("runs", name, "at least one measured_<output> column, e.g. "
                         "measured_step_time_ms")
    n = table.num_rows
    names = table.column(label).to_pylist() if label else [None] * n
    labels = tuple(f"row {i + 1}" + (f" ({v})" if v not in (None, "") else "")
                   for i, v in enumerate(names))

    def numeric(col: str) -> list:
        column = table.column(col)
        values = column.to_pylist()
        text = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
        if text or not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
                        or pa.types.is_null(column.type)):
            # The first cell that is not a number: the one to name.
            parsed = [_number(v) if isinstance(v, str) else None for v in values]
            for i, (v, x) in enumerate(zip(values, parsed, strict=True)):
                if v is not None and x is None:
                    raise InputError(f"runs {labels[i]} {col}", v, "a number")
            return parsed
        return values

    per_run: dict[str, np.ndarray] = {}
    for col in inputs:
        f = model.input_field(col)
        values = numeric(col)
        checked = []
        for i, v in enumerate(values):
            try:
                if v is None:
                    raise InputError(col, v, f.allowed() + " (or leave the column out)")
                checked.append(f.check_scalar(v))
            except InputError as e:
                raise InputError(f"runs {labels[i]} {col}", e.value, e.allowed) from None
        per_run[col] = np.asarray(checked, np.float64)
    measured = np.full((n, len(outputs)), np.nan)
    for j, out in enumerate(outputs):
        col = MEASURED + out
        for i, v in enumerate(numeric(col)):
            if v is None:
                continue
            x = float(v)
            if not math.isfinite(x) or x <= 0:
                raise InputError(f"runs {labels[i]} {col}", x, "a finite number > 0 (a fit "
                                 "compares log ratios; leave the cell empty if not measured)")
            measured[i, j] = x
    for i in range(n):
        if np.all(np.isnan(measured[i])):
            raise InputError(f"runs {labels[i]}", "no measurement",
                             "at least one of " + ", ".join(MEASURED + o for o in outputs))
    full = {k: np.full(n, float(base[k])) for k in model.input_names}
    full.update(per_run)
    return Runs(labels=labels, inputs=full, per_run=tuple(inputs), outputs=tuple(outputs),
                measured=measured, digest=digest, source=name)


# --------------------------------------------------------------------------- fit


def _from_z(z, lo, hi):
    """Parameters from the solver's unconstrained variables (module docstring)."""
    bounded = jnp.isfinite(hi)
    zb = jnp.where(bounded, z, 0.0)
    zu = jnp.where(bounded, 0.0, z)  # no exp overflow on the branch not taken
    span = jnp.where(bounded, hi - lo, 1.0)
    return jnp.where(bounded, lo + span * jax.nn.sigmoid(zb), lo + jnp.exp(zu))


def _dx_dz(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``dx / dz`` of ``_from_z`` at ``x``: ``(x - lo)(hi - x) / (hi - lo)`` on a
    bounded range, ``x - lo`` on an unbounded one (0 at a bound)."""
    bounded = np.isfinite(hi)
    return np.where(bounded, (x - lo) * (hi - x) / np.where(bounded, hi - lo, 1.0), x - lo)


def _jacobian_x(z, lo: np.ndarray, hi: np.ndarray, rows, static) -> tuple[np.ndarray, np.ndarray]:
    """``(d log prediction / d parameter (C, k, P), the parameters x)`` at solver
    variables ``z`` over ``rows`` (``_jacobian_z`` divided by ``dx / dz``; 0 at a
    bound, where the parameter no longer moves)."""
    lo_j, hi_j = jnp.asarray(lo), jnp.asarray(hi)
    x = np.asarray(_from_z(jnp.asarray(z), lo_j, hi_j))
    dx = _dx_dz(x, lo, hi)
    jac = np.asarray(_jacobian_z(jnp.asarray(z), lo_j, hi_j, rows, **static))
    return jac / np.where(dx > 0, dx, np.inf), x


def fit_start(m: Model, names: Sequence[str], x0: np.ndarray):
    """``(lo, hi, z0, x0, scale)`` of a fit of ``names`` from ``x0``: the model's
    physical range of each (``Model.fit_ranges``), else its domain (``hi`` inf where
    it has no top); the solver's start (``_to_z``, nudged off the bounds); ``x0``
    clipped to the range; and the scale of "at a bound" and of a parameter's effect
    (the range, or the start's size where the range has no top)."""
    fields = [m.input_field(n) for n in names]
    lo = np.array([m.fit_ranges.get(f.name, (f.low, None))[0] for f in fields], np.float64)
    hi = np.array([m.fit_ranges[f.name][1] if f.name in m.fit_ranges else
                   (np.inf if f.high is None else f.high) for f in fields], np.float64)
    x0 = np.asarray(x0, np.float64)
    z0 = _to_z(x0, lo, hi)
    x0 = np.clip(x0, lo, hi)
    scale = np.where(np.isfinite(hi), hi - lo, np.maximum(np.abs(x0), 1e-12))
    return lo, hi, z0, x0, scale


def fit_named(fit: str | Sequence[str] | None) -> bool:
    """Whether ``fit`` names inputs (else the default set, chosen by selection)."""
    return not (fit is None or fit == "" or fit == [])


def _to_z(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Inverse of ``_from_z``, starting values nudged off the bounds."""
    bounded = np.isfinite(hi)
    span = np.where(bounded, hi - lo, 1.0)
    frac = np.clip((x - lo) / span, 1e-6, 1.0 - 1e-6)
    gap = np.maximum(x - lo, 1e-6 * np.maximum(np.abs(x), 1.0))
    return np.where(bounded, np.log(frac) - np.log1p(-frac), np.log(gap))


def _columns(model: Model, fit_index: tuple[int, ...], x, base):
    """Inputs of every run (``base``: ``(n, I)``) with the fitted columns set to ``x``."""
    n = base.shape[0]
    cols = [base[:, i] for i in range(base.shape[1])]
    for j, i in enumerate(fit_index):
        cols[i] = jnp.broadcast_to(x[j], (n,))
    return model.inputs_type(*cols)


def _predict_log_x(x, base, model: Model, fit_index, out_names, use):
    """Log of the measured outputs, ``(n, k)``; 0 where ``use`` is false.

    The double ``where`` keeps gradients finite where an output is not
    measured and its prediction may be 0 (log 0).
    """
    out = model.apply_rows(_columns(model, fit_index, x, base), base.shape[0])
    pred = jnp.stack([getattr(out, o) for o in out_names], axis=-1)
    return jnp.where(use, jnp.log(jnp.where(use, pred, 1.0)), 0.0)


def _params(z, args):
    """The parameters at solver variables ``z``: held ones (not ``free``) at their
    start ``z0``, pinned ones (``pinned`` +1 / -1) exactly at their upper / lower
    bound."""
    lo, hi, _, _, _, z0, free, pinned = args
    x = _from_z(jnp.where(free, z, z0), lo, hi)
    return jnp.where(pinned > 0, hi, jnp.where(pinned < 0, lo, x))


def _residuals_x(x, args, *, model, fit_index, out_names):
    """Weighted log residuals of every run and output, flat, at parameters ``x``."""
    base, log_measured, weights = args[2:5]
    use = weights > 0
    pred = _predict_log_x(x, base, model, fit_index, out_names, use)
    return (jnp.where(use, pred - log_measured, 0.0) * jnp.sqrt(weights)).reshape(-1)


def _residuals(z, args, **static):
    return _residuals_x(_params(z, args), args, **static)


@quick_jit(static_argnames=("model", "fit_index", "out_names"))
def fit_batch(z0, lo, hi, base, log_measured, weights, free=None, pinned=None, *,
              model: Model, fit_index: tuple[int, ...], out_names: tuple[str, ...]):
    """Every fit at once: ``vmap`` of one Levenberg-Marquardt solve over weights.

    Args:
      z0: ``(P,)`` or ``(F, P)`` starting point in solver variables; lo, hi:
        ``(P,)`` domains.
      base: ``(n, I)`` inputs of the runs; log_measured: ``(n, k)`` (0 where
        unmeasured); weights: ``(F, n, k)``, one row per fit (0: not used).
      free: ``(P,)`` or ``(F, P)`` bool, the parameters fitted; the others stay
        at ``z0`` (default all).  An array, so that any subset of ``fit_index``
        runs in the same compiled program.
      pinned: ``(F, P)`` int, +1 / -1 for a parameter held exactly at its upper /
        lower bound (not ``free``), else 0 (default none).

    Returns:
      ``(z (F, P), converged (F,), steps (F,), snap (F, P))``; ``snap`` is +1 / -1
      where a fit that has not converged has a free parameter that the objective
      pushes towards its upper / lower bound (:func:`fit_bounded` tries it
      there).

    A fit has converged when the solver says so, or when its last iterate passes
    MINPACK's orthogonality test (:func:`_stationary`): there the trust region can
    keep rejecting steps whose gain is below the objective's rounding, so the
    solver's own test on accepted steps never fires and it runs to the step limit
    at the optimum (2 of the 200 bootstrap fits of ``tests/test_calibrate.py`` do
    so on an AVX-512 CPU); and, either way, when every pinned parameter meets the
    KKT condition at its bound.
    """
    import optimistix as optx

    static = {"model": model, "fit_index": fit_index, "out_names": out_names}
    residuals = functools.partial(_residuals, **static)
    solver = optx.LevenbergMarquardt(rtol=RTOL, atol=ATOL)
    shape = (weights.shape[0], z0.shape[-1])
    z0 = jnp.broadcast_to(z0, shape)
    free = jnp.ones(shape, bool) if free is None else jnp.broadcast_to(free, shape)
    pinned = jnp.zeros(shape, jnp.int8) if pinned is None else pinned

    def one(z0, free, pinned, w):
        args = (lo, hi, base, log_measured, w, z0, free, pinned)
        sol = optx.least_squares(residuals, solver, z0, args=args, max_steps=MAX_STEPS,
                                 throw=False)
        cos, grad = _stationary(sol.value, args, **static)
        # At a pinned bound the objective may fall only outwards: pinned * grad <= 0.
        kkt = jnp.all(jnp.where(pinned != 0, pinned * grad <= 0, True))
        ok = ((sol.result == optx.RESULTS.successful) | cos) & kkt
        up = jnp.isfinite(hi) & (grad < 0)
        snap = jnp.where(free & ~ok, jnp.where(up, 1, jnp.where(grad > 0, -1, 0)), 0)
        return sol.value, ok, sol.stats["num_steps"], snap.astype(jnp.int8)

    return jax.vmap(one)(z0, free, pinned, weights)


def _stationary(z, args, **static):
    """MINPACK's (lmder) orthogonality test at ``z``, on the parameters:
    ``|J_j . r| <= GTOL |J_j| |r|`` for every column ``J_j`` of the Jacobian of the
    residuals ``r`` of a free parameter (a held or pinned one passes; a zero
    residual passes, a zero column, a parameter that moves nothing there, does
    not).  The cosine is the same in ``x`` and in ``z`` (a column's scale cancels);
    in ``x`` it also exists at a bound, where ``dx/dz`` is 0.

    Returns:
      ``(passes, gradient of the half sum of squares in x (P,))``.
    """
    x = _params(z, args)
    r = _residuals_x(x, args, **static)
    jac = jax.jacfwd(functools.partial(_residuals_x, **static))(x, args)
    rnorm = jnp.linalg.norm(r)
    grad = jac.T @ r
    cos = jnp.abs(grad) / (jnp.linalg.norm(jac, axis=0) * rnorm)
    free = args[6]
    return (rnorm == 0) | jnp.all((cos <= GTOL) | ~free), grad


def fit_bounded(z0, lo, hi, base, log_measured, weights, free, **static):
    """``fit_batch``, then active-set steps for the fits that ran off a bound.

    A fit whose optimum lies beyond a bound never converges in ``z`` (module
    docstring).  Each round solves again the fits that have not converged, with
    the parameters ``fit_batch`` proposes to ``snap`` (and those of earlier
    rounds) pinned exactly at their bound, from where the last round left them;
    a fit takes the new solution when it converges there (the others stationary,
    the objective falling only beyond every pinned bound).  The KKT test at the
    bound decides, not how near the last iterate came to it; a fit it rejects
    keeps its first iterate, not converged.  At most one round per parameter,
    each in the same compiled program.

    Args:
      as :func:`fit_batch`, with ``z0`` and ``free`` ``(P,)``.

    Returns:
      ``(z (F, P), converged (F,))`` as numpy arrays; a pinned parameter's ``z`` is
      ``+-Z_BOUND``, its value exactly the bound.
    """
    shape = (weights.shape[0], np.shape(z0)[-1])
    free = np.broadcast_to(np.asarray(free, bool), shape)
    trial = np.zeros(shape, np.int8)

    def run(z, pinned):
        out = jax.device_get(fit_batch(
            jnp.asarray(z), lo, hi, base, log_measured, weights,
            free=jnp.asarray(free & (pinned == 0)), pinned=jnp.asarray(pinned), **static))
        return np.array(out[0]), np.array(out[1]), np.asarray(out[3])

    zs, ok, snap = run(np.broadcast_to(np.asarray(z0), shape), trial)
    z_cur, open_ = zs, ~ok
    for _ in range(shape[1]):
        rows = open_ & np.any(snap != 0, axis=1)
        if not rows.any():
            break
        trial = np.where(rows[:, None] & (snap != 0), snap, trial).astype(np.int8)
        z_try = np.where(trial != 0, Z_BOUND * trial, z_cur)
        zs_t, ok_t, snap = run(z_try, np.where(rows[:, None], trial, 0).astype(np.int8))
        take = rows & ok_t
        zs[take] = np.where(trial != 0, Z_BOUND * trial, zs_t)[take]
        ok[take] = True
        open_ = rows & ~ok_t
        z_cur = np.where(open_[:, None], zs_t, z_cur)
    return zs, ok


@quick_jit(static_argnames=("model", "fit_index", "out_names"))
def _predict_many(zs, lo, hi, base, *, model, fit_index, out_names):
    """Log predictions ``(S, C, k)`` for parameter samples ``zs (S, P)``."""
    use = jnp.ones((base.shape[0], len(out_names)), bool)
    return jax.vmap(lambda z: _predict_log_x(_from_z(z, lo, hi), base, model, fit_index,
                                             out_names, use))(zs)


@quick_jit(static_argnames=("model", "fit_index", "out_names"))
def _jacobian_z(z, lo, hi, base, *, model, fit_index, out_names):
    """d log prediction / dz, ``(C, k, P)``."""
    use = jnp.ones((base.shape[0], len(out_names)), bool)
    return jax.jacfwd(lambda zz: _predict_log_x(_from_z(zz, lo, hi), base, model, fit_index,
                                                out_names, use))(z)


@quick_jit(static_argnames=("model", "fit_index"))
def _evaluate(x, base, *, model, fit_index):
    return model.apply_rows(_columns(model, fit_index, x, base), base.shape[0])


# --------------------------------------------------------------------------- API


def check_fit(model: Model, fit: str | Sequence[str] | None, per_run: Sequence[str]
              ) -> tuple[str, ...]:
    """The fitted names: known, continuous, cluster-wide (not a per-run column).

    Raises:
      InputError: naming the offending name and what is allowed.
    """
    if not fit_named(fit):
        if not model.cluster:
            raise InputError("--fit", "", f"names of continuous inputs (model {model.name!r} "
                             "declares no cluster parameters)")
        names = [n for n in model.cluster if n not in per_run]
    else:
        names = [s.strip() for s in fit.split(",")] if isinstance(fit, str) else list(fit)
    continuous = [f.name for f in model.inputs if not f.integer and f.name not in per_run]
    if not names:
        raise InputError("--fit", ",".join(fit or ()), "at least one of " + ", ".join(continuous))
    seen = set()
    for name in names:
        if name in seen:
            raise InputError("--fit", name, "each name once")
        seen.add(name)
        if name not in model.input_names:
            raise InputError("--fit", name, f"a continuous input of model {model.name!r}"
                             f"{closest(name, continuous)}: " + ", ".join(continuous))
        if model.input_field(name).integer:
            raise InputError("--fit", name, "a continuous input (this one is a whole-number "
                             "count or switch); continuous: " + ", ".join(continuous))
        if name in per_run:
            raise InputError("--fit", name, "a cluster-wide input (it is a column of the runs, "
                             "a value per run; a fit gives one value for every run)")
    return tuple(names)


def calibrate(runs, fit: str | Sequence[str] | None = None, *,
              model: str | Model = DEFAULT_MODEL, gpu: str | None = None,
              llm: str | None = None, config: str | Path | None = None,
              bootstrap: int = DEFAULT_BOOTSTRAP, seed: int = 0,
              confidence: float = DEFAULT_CONFIDENCE, suggest: int = DEFAULT_SUGGEST,
              **inputs: Any) -> Calibration:
    """Fit a model's cluster parameters to measured runs (module docstring).

    Args:
      runs: a CSV or Parquet path, a pyarrow table, a mapping of columns or a
        list of row dicts (``read_runs``).
      fit: the inputs to fit (names, or one comma-separated string); default
        the model's ``cluster`` set (those not given per run).
      model, gpu, llm, config, **inputs: the values of inputs the runs do not
        give: defaults < presets < config file < ``inputs``.
      bootstrap: resamples for the intervals (>= 20); seed: their random seed.
      confidence: the interval's coverage, in (0, 1).
      suggest: how many layouts to suggest measuring next (0: none).

    Returns:
      A ``Calibration``; ``.write(path)`` saves ``calibrated.toml``.

    Raises:
      InputError: bad runs, names or values (one line).
    """
    import time

    from jaxmodel.presets import apply_presets

    m = get_model(model)
    if not isinstance(bootstrap, int) or isinstance(bootstrap, bool) or bootstrap < 20:
        raise InputError("bootstrap", bootstrap, "a whole number of resamples >= 20")
    if not isinstance(suggest, int) or isinstance(suggest, bool) or suggest < 0:
        raise InputError("suggest", suggest, "a whole number >= 0")
    if not (isinstance(confidence, (int, float)) and 0.5 <= confidence < 1.0):
        raise InputError("confidence", confidence, "a fraction in [0.5, 1)")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise InputError("seed", seed, "a whole number >= 0")
    values: dict[str, Any] = dict(m.defaults)
    values.update(apply_presets(m, gpu=gpu, llm=llm))
    if config is not None:
        values.update(load_config(config, m))
    values.update({k: v for k, v in inputs.items() if v is not None})
    base = {k: float(v) for k, v in resolve_inputs(m, values).items()}
    data = read_runs(runs, m, base)
    names = check_fit(m, fit, data.per_run)
    context = {}
    if gpu:
        context["gpu"] = gpu
    if llm:
        context["llm"] = llm
    if config is not None:
        context["config"] = str(config)
    fixed = [f"{n} = {base[n]:g}" for n in m.input_names
             if n not in data.per_run and n not in names and base[n] != m.defaults[n]]
    if fixed:
        context["inputs"] = ", ".join(fixed)
    preset_base = {k: float(v) for k, v in resolve_inputs(
        m, {**m.defaults, **apply_presets(m, gpu=gpu, llm=llm)}).items()}
    assumed = {n: base[n] for n in m.input_names if n not in data.per_run
               and n not in names and base[n] != preset_base[n]}

    fit_index = tuple(m.input_names.index(n) for n in names)
    lo, hi, z0, x0, scale = fit_start(m, names, [base[n] for n in names])
    base_matrix = np.stack([data.inputs[n] for n in m.input_names], axis=1)
    mask = ~np.isnan(data.measured)
    log_measured = np.where(mask, np.log(np.where(mask, data.measured, 1.0)), 0.0)
    out_names = data.outputs
    static = {"model": m, "fit_index": fit_index, "out_names": out_names}

    n_meas = int(mask.sum())
    chosen = fit_named(fit)
    if chosen and n_meas < len(names):
        raise InputError("--fit", ",".join(names), f"at most {n_meas} parameters: "
                         f"{n_meas} measurements cannot pin down {len(names)}")
    start = time.perf_counter()
    n = data.n
    candidates = _candidates(m, data)
    rows_all = base_matrix if candidates is None else np.concatenate(
        [base_matrix, candidates["rows"]])
    with computing():
        lo_j, hi_j, rows_j = jnp.asarray(lo), jnp.asarray(hi), jnp.asarray(rows_all)
        # Layouts the model calls invalid, and predictions a log cannot take;
        # runs and candidates in one evaluation.
        out0 = jax.device_get(_evaluate(jnp.asarray(x0), rows_j, model=m, fit_index=fit_index))
        _check_runs(m, data, out0)
        if candidates is not None:
            candidates = _valid_candidates(candidates, out0, n, out_names)
            rows_all = base_matrix if candidates is None else np.concatenate(
                [base_matrix, candidates["rows"]])
            rows_j = jnp.asarray(rows_all)
        def x_jacobian(z):
            """d log prediction / d parameter over the measurements,
            ``(measurements, P)``, and the parameters at ``z``."""
            jac, x = _jacobian_x(z, lo, hi, rows_j, static)
            jac = np.where(mask[..., None], jac[:n], 0.0)
            return jac.reshape(-1, len(names)), x

        # A parameter that moves no measured output (over its range, or the
        # size of its start) cannot be fitted.
        effect = np.max(np.abs(x_jacobian(z0)[0]), axis=0) * scale
        for j, name in enumerate(names):
            if chosen and not effect[j] > NO_EFFECT:
                raise InputError("--fit", name, "an input that affects a measured "
                                 "output (it does not move " + ", ".join(out_names)
                                 + " for any of these runs)")
        if not np.any(effect > NO_EFFECT):
            raise InputError("--fit", "", "an input that affects a measured output (none "
                             f"of {', '.join(names)} moves {', '.join(out_names)} for any "
                             "of these runs)")

        # One batch: the fit on every run, the leave-one-out fits, the bootstrap.
        rng = np.random.default_rng(seed)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=bootstrap).astype(np.float64)
        loo = 1.0 - np.eye(n)
        weights = np.concatenate([np.ones((1, n)), loo, counts])[:, :, None] * mask[None]
        batch = [jnp.asarray(a) for a in (z0, lo, hi, base_matrix, log_measured, weights)]

        def solve(free):
            return fit_bounded(*batch, free, **static)

        def log_jacobian(z):
            """d log prediction / d log parameter, ``(measurements, P)``."""
            jac, x = x_jacobian(z)
            return jac * x

        if chosen:
            free = np.ones(len(names), bool)
            zs, ok = solve(free)
        else:
            # The default set, by forward selection (forward_select): one
            # selection that every fit of the batch shares, judged by the fit on
            # every run (row 0) over every measurement.
            limit = max(1, min(len(names), n_meas - 1))
            free, zs, ok = forward_select(
                solve, log_jacobian, z0, lo, hi, scale, usable=effect > NO_EFFECT,
                owner=np.zeros(weights.shape[0], int), head=np.array([0]),
                seen=np.ones((1, n * len(out_names)), bool), limit=np.array([limit]))
            free = free[0]
        sel = np.flatnonzero(free)
        finite = np.all(np.isfinite(zs), axis=1)
        z_hat, z_boot = zs[0], zs[1 + n:][finite[1 + n:]]
        xs = np.asarray(_from_z(jnp.asarray(zs), lo_j, hi_j))
        x_hat, x_boot = xs[0], xs[1 + n:][finite[1 + n:]]
        # Every prediction in one program: (start, fit, leave-one-out, bootstrap)
        # x (runs, candidates).
        preds = np.asarray(_predict_many(jnp.asarray(np.concatenate([z0[None], zs[:1 + n],
                                                                     z_boot])),
                                         lo_j, hi_j, rows_j, **static))
        jz = np.asarray(_jacobian_z(jnp.asarray(z_hat), lo_j, hi_j, rows_j, **static))
    fit_s = time.perf_counter() - start
    held = tuple(nm for j, nm in enumerate(names) if j not in sel)
    names = tuple(names[j] for j in sel)
    lo, hi, x0, scale, jz = lo[sel], hi[sel], x0[sel], scale[sel], jz[..., sel]
    x_hat, x_boot = x_hat[sel], x_boot[:, sel]

    before, after = preds[0, :n], preds[1, :n]
    left_out = preds[2:2 + n, :n][np.arange(n), np.arange(n)]
    tail = (1.0 - confidence) / 2.0
    if len(x_boot):
        q = np.quantile(x_boot, [tail, 1.0 - tail], axis=0)
    else:
        q = np.full((2, len(names)), np.nan)
    intervals = {nm: (float(q[0, j]), float(q[1, j])) for j, nm in enumerate(names)}

    warnings = []
    if not bool(ok[0]):
        warnings.append(f"the fit stopped at the step limit ({MAX_STEPS}) before converging; "
                        "the values are its last iterate")
    if n_meas <= len(names):
        warnings.append(f"{n_meas} measurements for {len(names)} parameters: the fit "
                        "matches them exactly and says nothing about its error")
    cand_jac = None if candidates is None else jz[n:]
    warnings += _identifiability(names, jz[:n], mask, candidates, cand_jac)
    pct = int(round(confidence * 100))
    for j, nm in enumerate(names):
        lo_q, hi_q = intervals[nm]
        # The change of variables approaches a bound only slowly: within 0.5%
        # of the range (or of the starting value, for an unbounded input) is at it.
        at_bound = bool(_at_bound(x_hat, lo, hi, scale)[j])
        ratio = x_hat[j] / x0[j] if x0[j] > 0 else math.inf
        if at_bound:
            edge = "physical range" if nm in m.fit_ranges else "domain"
            warnings.append(f"{nm} ran to the edge of its {edge} ({x_hat[j]:.4g}, allowed "
                            f"{lo[j]:.4g} .. {hi[j]:.4g}): the model matches the runs no "
                            "better inside it; check the runs or fit other parameters")
        elif nm in m.fit_ranges and max(ratio, 1.0 / ratio) > FAR_FROM_START:
            warnings.append(f"{nm} moved {_factor(x_hat[j], x0[j])} from its starting value "
                            f"{x0[j]:.4g} (preset or default) to {x_hat[j]:.4g}, more than "
                            f"the {FAR_FROM_START:g}x a cluster differs from the datasheet "
                            "figures: another term may be wrong, or the runs (check them)")
        if not at_bound and math.isfinite(lo_q) and \
                (hi_q - lo_q) > WIDE_INTERVAL * abs(x_hat[j]):
            where = _separating(candidates, cand_jac, np.eye(len(names))[j])
            warnings.append(f"{nm} is not pinned down by these runs ({pct}% interval "
                            f"{lo_q:.4g} .. {hi_q:.4g} around {x_hat[j]:.4g})"
                            + (f"; runs where it matters most: {where}" if where else ""))
    suggestions = []
    if candidates is not None and suggest and len(z_boot):
        cand = preds[:, n:]  # (2 + n + B, C, k)
        boot_pred = cand[2 + n:]
        band = np.quantile(boot_pred, [tail, 1.0 - tail], axis=0)
        spread = np.max(band[1] - band[0], axis=-1)
        ok_c = np.all(np.isfinite(cand[1]), axis=-1) & np.isfinite(spread)
        order, shown = [], []
        # Layouts the model cannot tell apart (the same prediction) are suggested once.
        for c in np.argsort(-np.where(ok_c, spread, -np.inf), kind="stable"):
            if len(order) == suggest or not ok_c[c]:
                break
            if any(np.allclose(cand[1, c], cand[1, o], rtol=1e-9, atol=0) for o in shown):
                continue
            order.append(c)
            shown.append(c)
        for c in order:
            suggestions.append({
                "run": candidates["text"][c],
                "spread_percent": float(100.0 * (np.exp(spread[c]) - 1.0)),
                **{f"predicted_{o}": float(np.exp(cand[1, c, k]))
                   for k, o in enumerate(out_names)},
                **{f"low_{o}": float(np.exp(band[0, c, k])) for k, o in enumerate(out_names)},
                **{f"high_{o}": float(np.exp(band[1, c, k])) for k, o in enumerate(out_names)},
            })
    converged = int(np.sum(ok[1 + n:] & finite[1 + n:]))
    if converged < bootstrap:
        warnings.append(f"{bootstrap - converged} of {bootstrap} bootstrap fits stopped at the "
                        f"step limit ({MAX_STEPS}) before converging; their last iterates are "
                        "in the intervals")

    rows, errs = [], {"before": [], "after": [], "leave_one_out": []}
    for i in range(data.n):
        row: dict[str, Any] = {"label": data.labels[i],
                               "layout": {k: float(data.inputs[k][i]) for k in data.per_run}}
        for k, o in enumerate(out_names):
            meas = data.measured[i, k]
            row[MEASURED + o] = float(meas)
            for key, pred in (("before", before), ("after", after), ("leave_one_out", left_out)):
                val = float(np.exp(pred[i, k]))
                err = 100.0 * (val / meas - 1.0) if mask[i, k] else float("nan")
                row[f"{key}_{o}"] = val
                row[f"{key}_{o}_error_percent"] = err
                if mask[i, k]:
                    errs[key].append(abs(err))
        rows.append(row)
    errors = {k: {"mean_abs_percent": float(np.mean(v)), "max_abs_percent": float(np.max(v))}
              for k, v in errs.items()}
    return Calibration(
        model=m.name, fit=names, outputs=out_names,
        start={nm: float(x0[j]) for j, nm in enumerate(names)},
        values={nm: float(x_hat[j]) for j, nm in enumerate(names)},
        intervals=intervals, confidence=float(confidence), runs=rows, errors=errors,
        warnings=warnings, suggestions=suggestions,
        bootstrap={"resamples": bootstrap, "converged": converged},
        converged=bool(ok[0]), digest=data.digest, source=data.source, context=context,
        fit_s=fit_s, presets={k: v for k, v in (("gpu", gpu), ("llm", llm)) if v},
        fixed=assumed, held=held)


def _check_runs(model: Model, data: Runs, out0) -> None:
    """Every run a valid layout whose measured outputs are positive predictions."""
    # (out0 holds the runs, then the candidate layouts evaluated with them.)
    valid = np.asarray(getattr(out0, "valid_layout", np.ones(data.n, bool)))[:data.n]
    invalid = []
    for i in np.flatnonzero(~valid):
        row = {k: float(v[i]) for k, v in data.inputs.items()}
        outs = {f.name: np.asarray(getattr(out0, f.name))[i].item() for f in model.outputs}
        invalid.append(f"{data.labels[i]} ({model.verdict(row, outs).split(' -- ', 1)[-1]})")
    if invalid:
        # Every invalid run in one message, so that one edit of the file fixes them all.
        raise InputError("runs " + ", ".join(data.labels[i] for i in np.flatnonzero(~valid)),
                         f"{len(invalid)} invalid layout{'s' * (len(invalid) != 1)}",
                         "runs the model can evaluate: " + "; ".join(invalid))
    for i in range(data.n):
        for k, o in enumerate(data.outputs):
            pred = float(np.asarray(getattr(out0, o))[i])
            if not np.isnan(data.measured[i, k]) and not (math.isfinite(pred) and pred > 0):
                raise InputError(f"runs {data.labels[i]} {MEASURED + o}", data.measured[i, k],
                                 f"an output the model predicts as positive (it predicts "
                                 f"{pred:g} here; a log-ratio fit cannot use it)")


def _candidates(model: Model, data: Runs) -> dict | None:
    """Layouts of the measured jobs not measured yet (module docstring).

    Returns ``{"rows": (C, I) inputs, "text": descriptions}`` or None (the
    model has no layout inputs, or no other layout exists).  Validity is
    judged later, with the runs, in one evaluation.
    """
    space = model.layout
    if space is None:
        return None
    names = model.input_names
    rows, text = [], []
    seen = {tuple(float(data.inputs[k][i]) for k in names) for i in range(data.n)}
    for i in range(data.n):
        run = {k: float(data.inputs[k][i]) for k in names}
        lay = space.candidates(run, space.global_batch(run), extra=False)
        for c in np.flatnonzero(space.practised(run, lay)):
            cand = {**run, **{k: float(lay[k][c]) for k in space.axes}}
            key = tuple(cand[k] for k in names)
            if key in seen:
                continue
            seen.add(key)
            rows.append(key)
            text.append(f"{data.labels[i]} with " + " ".join(
                f"{k}={int(cand[k])}" for k in space.axes if cand[k] != run[k]))
    if not rows:
        return None
    return {"rows": np.asarray(rows, np.float64), "text": text}


def _valid_candidates(candidates, out0, n: int, outputs) -> dict | None:
    """The candidates the model calls valid, with positive predictions; at most
    ``MAX_CANDIDATES`` of them."""
    keep = np.array(getattr(out0, "valid_layout", np.ones(n + len(candidates["text"]), bool)),
                    bool)[n:]
    for o in outputs:
        v = np.asarray(getattr(out0, o))[n:]
        keep &= np.isfinite(v) & (v > 0)
    idx = np.flatnonzero(keep)[:MAX_CANDIDATES]
    if not len(idx):
        return None
    return {"rows": candidates["rows"][idx], "text": [candidates["text"][i] for i in idx]}


def _separating(candidates, cand_jac, direction: np.ndarray, top: int = 3) -> str:
    """The candidate runs where moving along ``direction`` (in z) moves a prediction most."""
    if candidates is None:
        return ""
    score = np.max(np.abs(cand_jac @ direction), axis=-1)
    best = np.argsort(-score, kind="stable")[:top]
    return "; ".join(candidates["text"][c] for c in best if score[c] > 0)


def _correlation(jn: np.ndarray) -> np.ndarray:
    """Correlation matrix ``(P, P)`` of the Gauss-Newton covariance of the
    column-normalised Jacobian ``jn`` ``(M, P)``."""
    cov = np.linalg.pinv(jn.T @ jn)
    sd = np.sqrt(np.maximum(np.diag(cov), 1e-300))
    return cov / np.outer(sd, sd)


def _separable(jac: np.ndarray) -> bool:
    """Whether the columns of ``jac`` ``(M, P)`` pass the identifiability tests
    behind the warnings: no pair correlated at ``CORRELATED`` or more, and a
    smallest-to-largest singular value ratio of the column-normalised
    Jacobian of at least ``WEAK_SINGULAR_RATIO``."""
    norms = np.linalg.norm(jac, axis=0)
    if not (np.all(np.isfinite(jac)) and np.all(norms > 0)):
        return False
    jn = jac / norms
    s = np.linalg.svd(jn, compute_uv=False)
    corr = np.abs(_correlation(jn) - np.eye(jac.shape[1]))
    return bool(s[-1] >= WEAK_SINGULAR_RATIO * s[0] and np.all(corr < CORRELATED))


def forward_select(solve, log_jacobian, z0, lo, hi, scale, *, usable, owner, head, seen,
                   limit):
    """Forward selection of the fitted parameters: ``calibrate``'s default set,
    and ``cross_validate``'s, one selection per fold.

    Each selection ``g`` starts from none: the parameter that explains most of
    what its fitted ones do not (:func:`ranked`) joins while every fit the
    selection owns still converges, inside the physical range, with the set
    :func:`_separable` (the warnings' tests); the first joins whatever those
    say; at most ``limit[g]`` join.  The selections run side by side, one
    batched ``solve`` a round.

    Args:
      solve: ``free (R, P) -> (zs (R, P), converged (R,))``, the batch of fits
        (:func:`fit_bounded` over the rows of a weights matrix).
      log_jacobian: ``z (P,) -> (M, P)``, d log prediction / d log parameter
        over the measurements at ``z``.
      z0, lo, hi, scale: ``(P,)`` start (solver variables), range, and the scale
        of "at a bound" (:func:`_at_bound`).
      usable: ``(P,)`` the parameters that move some measurement.
      owner: ``(R,)`` the selection each fit belongs to.
      head: ``(G,)`` the fit whose parameters each selection's Jacobian and
        range test use; seen: ``(G, M)`` the measurements it fits.
      limit: ``(G,)`` the most parameters each selection may take.

    Returns:
      ``(free (G, P), zs (R, P), converged (R,))``; a selection that takes no
      parameter keeps ``z0`` in its fits.
    """
    groups, p = len(head), len(z0)
    free = np.zeros((groups, p), bool)
    tried = np.broadcast_to(~np.asarray(usable, bool), (groups, p)).copy()
    zs = np.broadcast_to(np.asarray(z0), (len(owner), p)).copy()
    ok = np.ones(len(owner), bool)
    first = np.ones(groups, bool)
    open_ = np.ones(groups, bool)
    lo_j, hi_j = jnp.asarray(lo), jnp.asarray(hi)
    # Each selection's Jacobian at its current parameters, computed once: every
    # selection starts at z0, and an accepted trial's is the one its test took.
    start = log_jacobian(z0)
    jacs = [start] * groups
    while True:
        trial, moved = free.copy(), np.zeros(groups, bool)
        for g in np.flatnonzero(open_):
            order = [] if free[g].sum() >= limit[g] else ranked(
                jacs[g][seen[g]], ~tried[g], list(np.flatnonzero(free[g])))
            if not order:
                open_[g] = False
                continue
            trial[g, order[0]] = tried[g, order[0]] = moved[g] = True
        if not moved.any():
            return free, zs, ok
        zs_t, ok_t = solve(trial[owner])
        for g in np.flatnonzero(moved):
            rows = owner == g
            z_h = zs_t[head[g]]
            x_t = np.asarray(_from_z(jnp.asarray(z_h), lo_j, hi_j))
            inside = ~_at_bound(x_t, lo, hi, scale)[trial[g]]
            if first[g] or (ok_t[rows].all() and inside.all()):
                jac = log_jacobian(z_h)
                if first[g] or _separable(jac[seen[g]][:, trial[g]]):
                    free[g], zs[rows], ok[rows], first[g] = (trial[g], zs_t[rows], ok_t[rows],
                                                             False)
                    jacs[g] = jac


def ranked(jac: np.ndarray, usable: np.ndarray, chosen: Sequence[int]) -> list[int]:
    """The columns of ``jac`` that could join ``chosen``, best first.

    Subset selection by pivoted Gram-Schmidt (Golub and Van Loan, Matrix
    Computations, section 5.4.1; in calibration, Brun et al. 2001, "Practical
    identifiability analysis of large environmental simulation models", Water
    Resources Research 37(4)): the usable columns that keep the set
    :func:`_separable`, by the norm of what of them the chosen columns do not
    explain (their component orthogonal to the chosen ones), largest first.

    Args:
      jac: ``(M, P)`` d log prediction / d log parameter over the measurements.
      usable: ``(P,)`` the parameters that may join (not tried yet, moving something).
      chosen: indices of the parameters already in the set.
    """
    # A chosen parameter held at a bound (its column 0 there: fit_bounded pins
    # it) moves nothing any more, and competes with none.
    chosen = [c for c in chosen if np.linalg.norm(jac[:, c]) > 0]
    basis = np.linalg.qr(jac[:, chosen])[0] if chosen else np.zeros((jac.shape[0], 0))
    rest = np.linalg.norm(jac - basis @ (basis.T @ jac), axis=0)
    score = np.where(usable, rest, 0.0)
    score[chosen] = 0.0
    return [int(j) for j in np.argsort(-score, kind="stable")
            if score[j] > NO_EFFECT and _separable(jac[:, [*chosen, j]])]


def _identifiability(names, jz, mask, candidates, cand_jac) -> list[str]:
    """Warnings for correlated pairs and near-singular directions (module doc)."""
    if len(names) < 2:
        return []
    J = np.where(mask[..., None], jz, 0.0).reshape(-1, len(names))
    norms = np.linalg.norm(J, axis=0)
    Jn = J / np.where(norms > 0, norms, 1.0)
    out, reported = [], []
    corr = _correlation(Jn)
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            r = float(corr[a, b])
            if abs(r) >= CORRELATED:
                _, _, vt = np.linalg.svd(Jn[:, [a, b]], full_matrices=True)
                direction = np.zeros(len(names))
                direction[[a, b]] = vt[-1] / norms[[a, b]].clip(1e-300)
                where = _separating(candidates, cand_jac, direction)
                out.append(f"{names[a]} and {names[b]} are strongly correlated (r = {r:+.2f}): "
                           "these runs cannot tell them apart"
                           + (f"; runs that would separate them: {where}" if where else ""))
                reported.append({a, b})
    _, s, vt = np.linalg.svd(Jn, full_matrices=True)
    s = np.concatenate([s, np.zeros(len(names) - len(s))])
    for k in range(len(names)):
        ratio = s[k] / s[0] if s[0] > 0 else 0.0
        if ratio >= WEAK_SINGULAR_RATIO:
            continue
        involved = {j for j in range(len(names)) if abs(vt[k, j]) >= 0.3}
        if any(involved <= pair for pair in reported):
            continue
        reported.append(involved)
        direction = vt[k] / norms.clip(1e-300)
        where = _separating(candidates, cand_jac, direction)
        out.append(", ".join(names[j] for j in sorted(involved)) + " are not pinned down "
                   f"together (near-singular Jacobian, singular value ratio {ratio:.1e})"
                   + (f"; runs that would separate them: {where}" if where else ""))
    return out


def calibrate_runs(runs: Sequence[Any] | None = None, fit=None, *,
                   overrides: Mapping[str, float] | None = None, bootstrap: int = 200,
                   seed: int = 0):
    """Fit the refined model's cluster parameters to the runs' measured TFLOP/s.

    ``runs``: ``jaxmodel.models.validation.Run`` rows (default SC21 Table 1,
    ``sc21_runs``).  The inputs every run shares (the settings, ``overrides``) are the fit's
    fixed values and the rest are per-run columns, so ``fit`` may name any
    shared continuous input.  Returns a ``jaxmodel.calibration.Calibration``;
    its ``errors["leave_one_out"]`` is the honest figure.
    """
    from jaxmodel.models.validation import sc21_runs

    runs = sc21_runs() if runs is None else list(runs)
    inputs = [r.inputs(overrides) for r in runs]
    shared = {k: v for k, v in inputs[0].items() if all(row[k] == v for row in inputs)}
    table = {k: np.array([row[k] for row in inputs]) for k in inputs[0] if k not in shared}
    table["run"] = np.array([f"{r.params_b:g}B" for r in runs])
    table["measured_hardware_tflops_per_gpu"] = np.array([r.measured_tflops for r in runs])
    return calibrate(table, fit, model="refined", bootstrap=bootstrap, seed=seed, suggest=0,
                     **shared)


def cross_validate(inputs: Mapping[str, np.ndarray], measured: np.ndarray, folds: np.ndarray,
                   output: str, fit: str | Sequence[str] | None = None, *,
                   model: str | Model = DEFAULT_MODEL, rows: int | None = None,
                   num_folds: int | None = None, select: bool | None = None) -> np.ndarray:
    """k-fold predictions: for each fold, calibrate on the runs of the other folds
    as :func:`calibrate` does, and predict the runs of that fold.

    As :func:`calibrate`: the parameters are bounded by their physical range
    (``Model.fit_ranges``), and by default the fitted set is chosen by forward
    selection (:func:`forward_select`), here on each fold's training runs alone,
    so that the held-out runs choose nothing.  The fits are vmapped batches of
    Levenberg-Marquardt solves (``fit_bounded``: a fold is a row of weights, 0
    for its own runs), from the runs' shared starting values.

    Args:
      inputs: every input of ``model`` by name, arrays of shape ``(n,)``.
      measured: ``(n,)`` measured values of ``output`` (a float output, > 0).
      folds: ``(n,)`` the fold of each run, 0 .. F - 1.
      fit: the inputs to fit, or to choose from with ``select`` (default: the
        model's ``cluster`` set); their values must be the same for every run
        (the starting point).
      select: choose the fitted set from ``fit`` per fold (default: when ``fit``
        is not given, as :func:`calibrate`); False fits all of ``fit``.
      rows, num_folds: pad the runs (with zero-weighted copies) and the folds
        (with fits that see no run) to these sizes, so that calls of different
        sizes share one compiled program.

    Returns:
      ``(n,)`` the prediction of ``output`` for each run by the fit that did not
      see it.

    Raises:
      InputError: unknown names, or a fitted input that differs between runs.
    """
    m = get_model(model)
    names = check_fit(m, fit, ())
    if select is None:
        select = not fit_named(fit)
    measured = np.asarray(measured, np.float64)
    folds = np.asarray(folds, np.int64)
    n = measured.shape[0]
    base = np.stack([np.asarray(inputs[k], np.float64).reshape(n) for k in m.input_names],
                    axis=1)
    fit_index = tuple(m.input_names.index(k) for k in names)
    for j, name in zip(fit_index, names, strict=True):
        if np.any(base[:, j] != base[0, j]):
            raise InputError(name, sorted(set(base[:, j].tolist())),
                             "one value for every run (a fit starts from it)")
    lo, hi, z0, _, scale = fit_start(m, names, base[0, list(fit_index)])
    size = max(rows or n, n)
    count = max(num_folds or 0, int(folds.max()) + 1)
    padded = np.concatenate([base, np.repeat(base[:1], size - n, axis=0)])
    log_measured = np.zeros((size, 1))
    log_measured[:n, 0] = np.log(measured)
    weights = np.zeros((count, size, 1))
    for f in range(int(folds.max()) + 1):
        weights[f, :n, 0] = folds != f
    static = {"model": m, "fit_index": fit_index, "out_names": (output,)}
    with computing():
        lo_j, hi_j, base_j = jnp.asarray(lo), jnp.asarray(hi), jnp.asarray(padded)
        batch = (z0, lo_j, hi_j, base_j, jnp.asarray(log_measured), jnp.asarray(weights))
        if select:
            def log_jacobian(z):
                jac, x = _jacobian_x(z, lo, hi, base_j, static)
                return jac.reshape(size, len(names)) * x

            train = weights[:, :, 0] > 0
            _, zs, _ = forward_select(
                lambda free: fit_bounded(*batch, free, **static), log_jacobian, z0, lo, hi,
                scale, usable=np.ones(len(names), bool), owner=np.arange(count),
                head=np.arange(count), seen=train,
                limit=np.maximum(1, np.minimum(len(names), train.sum(axis=1) - 1)))
        else:
            zs, _ = fit_bounded(*batch, np.ones(len(names), bool), **static)
        preds = np.asarray(_predict_many(jnp.asarray(zs), lo_j, hi_j, base_j, **static))
    return np.exp(preds[folds, np.arange(n), 0])
