"""Small numerical helpers that keep values and gradients finite under jit.

The "double where" pattern: a masked-out branch is still differentiated, so
an ``x / 0`` in it would put NaN into the gradient even though ``where`` never
selects it.  Each helper first replaces the unsafe argument with a harmless one,
then masks the result (optax ``_src/numerics.py``, jax-md ``util.safe_mask``).
"""

from __future__ import annotations

from jaxmodel.deferred import jnp


def safe_div(num, den, fill=0.0):
    """``num / den`` where ``den != 0``, else ``fill``; gradient finite everywhere."""
    ok = den != 0
    safe_den = jnp.where(ok, den, jnp.ones_like(den))
    return jnp.where(ok, num / safe_den, fill)


def positive_part(x):
    """``max(0, x)`` with the one-sided convention gradient 0 at ``x == 0``.

    ``jnp.maximum`` splits the gradient 1/2 : 1/2 at a tie; for the exposed DP
    all-reduce we want "hidden" to win the tie, so the derivative at the kink is
    that of the hidden side (0).
    """
    return jnp.where(x > 0, x, jnp.zeros_like(x))


def percent(part, whole):
    """``100 part / whole`` for ``0 <= part <= whole``, never above 100.

    XLA may round ``part`` differently where it is fused into ``whole`` (a sum
    of terms) than where it stands alone, so the rounded quotient can land one
    ulp above 1 (MFU of 100.00000000000003).  The clamp uses ``where``, not
    ``minimum``, so that at the bound the derivative is the quotient's own
    rather than half of it (``minimum``'s tie rule).  There is no lower clamp:
    a non-negative part gives a non-negative quotient in any rounding, and a
    clamp at 0 would put a kink where a term is exactly zero (the bubble at
    p = 1), halving a central difference there.
    """
    q = part / whole
    return 100.0 * jnp.where(q > 1.0, jnp.ones_like(q), q)


