"""The quick compile options for short programs (jaxmodel.xla_options) change no output
beyond its last bits (an FMA contracted or not)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import jaxmodel
from jaxmodel.api import batched, resolve_inputs
from jaxmodel.deferred import jax
from jaxmodel.precision import computing
from jaxmodel.xla_options import (
    QUICK_OPTIONS,
    QUICK_ROWS,
    SAFE_CPU_FLAG,
    compiler_options,
    guard_cpu_scheduler,
    quick_options,
)


def random_inputs(model, n: int, seed: int) -> dict[str, np.ndarray]:
    """Every float input spread around its default (inside its domain); counts at defaults."""
    rng = np.random.default_rng(seed)
    out = {f.name: np.full(n, float(f.default)) for f in model.inputs}
    for f in model.inputs:
        if f.integer:
            continue
        if f.high is not None:
            out[f.name] = rng.uniform(max(f.low, 0.3 * f.high), f.high, n)
        else:
            out[f.name] = np.maximum(f.default * np.exp(rng.uniform(-1.0, 1.0, n)), f.low)
    for name, lower in model.at_least:
        out[name] = np.maximum(out[name], out[lower] * rng.uniform(1.0, 2.0, n))
    return out


# XLA's own defaults for the quick options (its DebugOptions: LLVM at -O3, the MLIR
# fusion emitters on), given explicitly because the suite's XLA_FLAGS
# (tests/conftest.py) make the quick ones every program's default.
XLA_DEFAULTS = {"xla_backend_optimization_level": 3, "xla_cpu_use_fusion_emitters": True}


def outputs_both_ways(model_name: str, n: int = 512, x64: bool = False):
    """The model over one batch compiled with XLA's defaults and with the quick options."""
    model = jaxmodel.get_model(model_name)
    arrays = resolve_inputs(model, random_inputs(model, n, seed=26))
    dtype = np.float64 if x64 else np.float32
    with computing():
        flat = model.inputs_type(*(a.astype(dtype) for a in arrays.values()))
        options = XLA_DEFAULTS if jax.default_backend() == "cpu" else None
        default = jax.device_get(jax.jit(jax.vmap(model.apply), compiler_options=options)(flat))
        quick = jax.device_get(batched(model, quick=True)(flat))
    return model, default, quick


def assert_last_bits_equal(model, default, quick):
    """Floats to within 4 units in the last place (an FMA contracted or not; NaN
    rows alike), every count, flag and category exactly."""
    for field, a, b in zip(model.outputs, default, quick, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, field.name
        if a.dtype.kind != "f":
            np.testing.assert_array_equal(a, b, err_msg=field.name)
            continue
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=field.name)
        ulp = np.spacing(np.maximum(np.abs(a), np.abs(b)))
        ok = np.isnan(a) | (np.abs(a - b) <= 4 * ulp)
        assert ok.all(), (field.name, a[~ok][:3], b[~ok][:3])


@pytest.mark.parametrize("x64", [False, True])
def test_quick_options_change_no_bit_of_the_seed_model(x64):
    assert_last_bits_equal(*outputs_both_ways("seed", x64=x64))


@pytest.mark.slow
def test_quick_options_change_no_bit_of_the_refined_model():
    assert_last_bits_equal(*outputs_both_ways("refined"))


def test_options_by_size_and_backend():
    with computing():
        quick = dict(quick_options())
    # On the CPU this jax knows both options; a large program keeps XLA's defaults.
    assert jax.default_backend() != "cpu" or quick == QUICK_OPTIONS
    assert compiler_options(QUICK_ROWS) == (quick or None)
    assert compiler_options(QUICK_ROWS + 1) is None


def test_the_cpu_scheduler_flag_joins_xla_flags_unless_the_caller_chose():
    """The flag that keeps XLA's CPU backend from computing wrong elements
    (jaxmodel.xla_options.SAFE_CPU_FLAG) is added to what XLA_FLAGS holds; a
    caller's own setting of the same option stands."""
    env = {}
    guard_cpu_scheduler(env)
    assert env["XLA_FLAGS"] == "--xla_cpu_enable_concurrency_optimized_scheduler=false"
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    guard_cpu_scheduler(env)
    assert env["XLA_FLAGS"] == ("--xla_force_host_platform_device_count=4 "
                                "--xla_cpu_enable_concurrency_optimized_scheduler=false")
    guard_cpu_scheduler(env)  # once
    assert env["XLA_FLAGS"].count("concurrency_optimized") == 1
    mine = {"XLA_FLAGS": "--xla_cpu_enable_concurrency_optimized_scheduler=true"}
    guard_cpu_scheduler(mine)
    assert mine["XLA_FLAGS"] == "--xla_cpu_enable_concurrency_optimized_scheduler=true"


def test_importing_jaxmodel_sets_the_flag_before_jax_starts():
    """In a fresh process without XLA_FLAGS, ``import jaxmodel`` sets the flag and
    XLA accepts it (an unknown flag would abort the backend's start)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    code = ("import os, jaxmodel, jax; jax.numpy.zeros(1).block_until_ready(); "
            "print(os.environ['XLA_FLAGS'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.split() == [SAFE_CPU_FLAG]
