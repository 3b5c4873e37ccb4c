"""XLA options chosen by how many rows a program will run: a short run compiles quickly.

A single evaluation of the refined model (one configuration and its two
profile curves, 97 rows) ran for milliseconds after a compile of seconds, most
of it in LLVM (bench/README.md, issue 26).  For such programs two of XLA's CPU
options trade code quality for compile time:

* ``xla_backend_optimization_level=0``: LLVM without its optimisation passes
  (XLA's own HLO passes, the fusion decisions included, are unchanged);
* ``xla_cpu_use_fusion_emitters=False``: XLA's elemental IR emitters instead of
  its MLIR fusion emitters, which spend the rest of the time lowering each
  fusion through MLIR.

Neither changes the HLO or the order of operations, but the machine code
differs (e.g. whether a multiply and an add become one FMA), so a float output
may differ from the default program's in its last bits (within 4 units in the
last place on random configurations of both models, float32 and float64:
tests/test_xla_options.py); counts, flags and categories agree.
Measured on the refined model's ``jit(vmap(apply))``: the compile took 15.6
CPU-seconds by default, 8.1 with the first option and 5.4 with both; at 262,144
rows the run took 2.5 s by default, 7.2 s with the first option alone and 1.9 s
with both.  A program that will run more rows than :data:`QUICK_ROWS` (a
sweep) keeps XLA's defaults, and so does any backend but the CPU.
"""

from __future__ import annotations

import functools
from typing import Any

from jaxmodel.deferred import jax

# Rows up to which a program compiles with QUICK_OPTIONS: at 262,144 rows of
# the refined model the quick program's compile and run (4.6 s) were still well
# under the default's (32 s), and a 10^7-row sweep stays on the defaults.
QUICK_ROWS = 1 << 18

QUICK_OPTIONS: dict[str, Any] = {
    "xla_backend_optimization_level": 0,
    "xla_cpu_use_fusion_emitters": False,
}


@functools.cache
def quick_options() -> tuple[tuple[str, Any], ...]:
    """:data:`QUICK_OPTIONS` this jax accepts, on the CPU only (else none).

    jaxmodel allows any jax from 0.4.35; an option that jax's XLA does not
    know is refused at compile time, so each is tried once on a one-operation
    program and kept only if it compiles.
    """
    if jax.default_backend() != "cpu":
        return ()
    if _compiles(QUICK_OPTIONS):  # one probe when all are known (the usual case)
        return tuple(QUICK_OPTIONS.items())
    return tuple((k, v) for k, v in QUICK_OPTIONS.items() if _compiles({k: v}))


def _compiles(options: dict[str, Any]) -> bool:
    try:
        jax.jit(lambda x: x + 1, compiler_options=options).lower(1.0).compile()
    except Exception:  # noqa: BLE001 - an unknown option; XLA's error type varies by version
        return False
    return True


def quick_compile(quick: bool) -> dict[str, Any] | None:
    """``jax.jit``'s ``compiler_options``: the quick ones, or None (XLA's defaults)."""
    return (dict(quick_options()) or None) if quick else None


def compiler_options(rows: int) -> dict[str, Any] | None:
    """``jax.jit``'s ``compiler_options`` for a program that will run ``rows`` rows in all."""
    return quick_compile(rows <= QUICK_ROWS)


def quick_jit(**jit_kwargs):
    """A decorator: ``jax.jit(fun, **jit_kwargs)`` with the quick options, for a
    program that runs few rows wherever it is called (a calibration's fits: a
    few hundred rows a solver step).  The jit is built at the first call, when
    the options are probed, so importing the module compiles nothing."""

    def decorate(fun):
        jitted = None

        @functools.wraps(fun)
        def call(*args, **kwargs):
            nonlocal jitted
            if jitted is None:
                jitted = jax.jit(fun, compiler_options=quick_compile(True), **jit_kwargs)
            return jitted(*args, **kwargs)

        return call

    return decorate


# XLA's CPU backend, with more than one thread, computed some elements of a
# program wrong when its concurrency-optimised scheduler (BFS order) was on:
# the refined model's float32 sensitivities over the 19,584 rows of
# tests/test_sensitivity_float32.py's preset grid came back 0.1-1.7 % off
# float64 in about 40 columns (d hfu_percent / d tensor_parallel on
# nemotron3-super at A100 40 GB: -20.0444 against -20.0190), where the same
# program pinned to one core, the same rows in any smaller batch, NumPy in
# float32 and XLA's DFS scheduler all agree to 7 digits (jax 0.10.2, quick
# options; issue 24's notes).  Passed as a compile option it did not take
# effect; XLA reads it from XLA_FLAGS when the backend starts.
SAFE_CPU_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def guard_cpu_scheduler(environ=None) -> None:
    """Add :data:`SAFE_CPU_FLAG` to ``XLA_FLAGS`` unless it names the option
    already (a caller's own choice stands).  Called on ``import jaxmodel``; it
    takes effect if jax's backend has not started yet, the usual case.  The
    flag is the CPU's only (GPU and TPU backends ignore it)."""
    import os

    environ = os.environ if environ is None else environ
    flags = environ.get("XLA_FLAGS", "")
    name = SAFE_CPU_FLAG.split("=")[0]
    if name not in flags:
        environ["XLA_FLAGS"] = f"{flags} {SAFE_CPU_FLAG}".strip()
