"""Small numerical helpers that keep values and gradients finite under jit.

The "double where" pattern: a masked-out branch is still differentiated, so
an ``x / 0`` in it would put NaN into the gradient even though ``where`` never
selects it.  Each helper first replaces the unsafe argument with a harmless one,
then masks the result (optax ``_src/numerics.py``, jax-md ``util.safe_mask``).
"""

from __future__ import annotations

import jax.numpy as jnp


def safe_div(num, den, fill=0.0):
    """``num / den`` where ``den != 0``, else ``fill``; gradient finite everywhere."""
    ok = den != 0
    safe_den = jnp.where(ok, den, jnp.ones_like(den))
    return jnp.where(ok, num / safe_den, fill)


def ring_allreduce_bytes(message_bytes, ways):
    """Bytes each rank sends in a ring all-reduce of ``message_bytes`` over ``ways``.

    ``2 (n - 1) / n * bytes``: each rank sends ``(n - 1) / n`` of the message
    twice (reduce-scatter, then all-gather), Patarasuk & Yuan (2009); divide by
    the link bandwidth for the time.  Zero when ``ways == 1``.  ``ways`` is
    clamped to >= 1 so that an invalid layout (d = 0) stays finite; the caller
    masks it.
    """
    # where, not maximum: at ways == 1 the derivative is the right-hand one
    # (2 bytes per unit of ways), as for positive_part; maximum would halve it.
    n = jnp.where(ways >= 1.0, ways, jnp.ones_like(ways))
    return 2.0 * (n - 1.0) / n * message_bytes


def positive_part(x):
    """``max(0, x)`` with the one-sided convention gradient 0 at ``x == 0``.

    ``jnp.maximum`` splits the gradient 1/2 : 1/2 at a tie; for the exposed DP
    all-reduce we want "hidden" to win the tie, so the derivative at the kink is
    that of the hidden side (0).
    """
    return jnp.where(x > 0, x, jnp.zeros_like(x))


def percent(part, whole):
    """``100 part / whole`` for ``0 <= part <= whole`` in exact arithmetic, held in [0, 100].

    XLA may round ``part`` differently where it is fused into ``whole`` (a sum
    of terms) than where it stands alone, so the rounded quotient can land one
    ulp outside [0, 1] (MFU of 100.00000000000003).  The clamp uses ``where``,
    not ``clip``, so that at the bound the derivative is the quotient's own
    rather than half of it (``clip``'s tie rule).
    """
    q = part / whole
    q = jnp.where(q > 1.0, jnp.ones_like(q), q)
    q = jnp.where(q < 0.0, jnp.zeros_like(q), q)
    return 100.0 * q
