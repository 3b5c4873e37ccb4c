"""Values and gradients of the numerics helpers at their boundaries (float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmodel.numerics import percent, positive_part, ring_allreduce_bytes, safe_div
from jaxmodel.precision import computing


@pytest.fixture(autouse=True)
def _x64():
    with computing():
        yield


def grad(f, *args, argnums=0):
    return float(jax.grad(f, argnums=argnums)(*(jnp.float64(a) for a in args)))


def test_safe_div_values():
    assert float(safe_div(6.0, 3.0)) == 2.0
    assert float(safe_div(6.0, 0.0)) == 0.0
    assert float(safe_div(6.0, 0.0, fill=-1.0)) == -1.0
    assert float(safe_div(0.0, 0.0)) == 0.0  # not NaN
    got = safe_div(jnp.array([1.0, 2.0, 3.0]), jnp.array([2.0, 0.0, -3.0]))
    np.testing.assert_array_equal(got, [0.5, 0.0, -1.0])


def test_safe_div_gradients_finite_at_zero_denominator():
    # Where den == 0 the result is the constant fill: both partials are 0,
    # and, because of the "double where", not NaN (a plain where(den != 0,
    # num / den, 0) gives NaN here: checked below).
    assert grad(safe_div, 6.0, 0.0, argnums=0) == 0.0
    assert grad(safe_div, 6.0, 0.0, argnums=1) == 0.0

    def naive(n, d):
        return jnp.where(d != 0, n / d, 0.0)

    assert np.isnan(grad(naive, 6.0, 0.0, argnums=1))


def test_safe_div_gradients_away_from_zero():
    assert grad(safe_div, 6.0, 3.0, argnums=0) == pytest.approx(1 / 3)
    assert grad(safe_div, 6.0, 3.0, argnums=1) == pytest.approx(-6.0 / 9.0)


def test_positive_part_values():
    x = jnp.array([-2.0, -0.0, 0.0, 1e-300, 3.0])
    np.testing.assert_array_equal(positive_part(x), [0.0, 0.0, 0.0, 1e-300, 3.0])


def test_positive_part_gradient_one_sided_at_the_kink():
    # Documented convention: the derivative at x == 0 is that of the hidden
    # side, 0 (jnp.maximum would split the tie and give 1/2).
    assert grad(positive_part, 0.0) == 0.0
    assert grad(positive_part, -1.0) == 0.0
    assert grad(positive_part, 1e-12) == 1.0
    assert grad(positive_part, 5.0) == 1.0
    assert grad(lambda x: jnp.maximum(x, 0.0), 0.0) == 0.5
    grads = jax.vmap(jax.grad(positive_part))(jnp.array([-1.0, 0.0, 1.0]))
    np.testing.assert_array_equal(grads, [0.0, 0.0, 1.0])


def test_ring_allreduce_bytes():
    assert float(ring_allreduce_bytes(100.0, 1.0)) == 0.0
    assert float(ring_allreduce_bytes(100.0, 2.0)) == 100.0  # 2 (1/2) x bytes
    assert float(ring_allreduce_bytes(100.0, 8.0)) == pytest.approx(175.0)  # 2 x 7/8
    # ways = 0 (an invalid layout, d = 0) is clamped to 1: finite, zero, and a
    # finite gradient, so that the masked invalid rows do not poison a sweep.
    assert float(ring_allreduce_bytes(100.0, 0.0)) == 0.0
    assert np.isfinite(grad(ring_allreduce_bytes, 100.0, 0.0, argnums=1))
    # d/dn of 2 (n - 1) / n x bytes = 2 bytes / n^2
    assert grad(ring_allreduce_bytes, 100.0, 4.0, argnums=1) == pytest.approx(200.0 / 16)


def test_ring_allreduce_bytes_right_hand_derivative_at_one_way():
    # 2 (n - 1) / n x bytes has derivative 2 bytes / n^2 = 200 at n = 1 from the
    # right; the clamp below 1 must not halve it (as maximum's tie rule would).
    assert grad(ring_allreduce_bytes, 100.0, 1.0, argnums=1) == pytest.approx(200.0)
    assert grad(ring_allreduce_bytes, 100.0, 0.5, argnums=1) == 0.0


def test_percent_holds_its_bounds():
    part = jnp.array([0.0, 0.25, 1.0, 1.0 + 1e-15, -1e-300])
    np.testing.assert_array_equal(percent(part, jnp.ones(5)), [0.0, 25.0, 100.0, 100.0, 0.0])


def test_percent_derivative_at_the_bound_is_the_quotients():
    # d/dpart (100 part / whole) = 100 / whole, also at part == whole (clip would halve it).
    assert float(jax.grad(percent)(2.0, 2.0)) == 50.0
    assert float(jax.grad(percent, argnums=1)(2.0, 2.0)) == -50.0
