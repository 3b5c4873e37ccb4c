"""Forward-mode autodiff on the host: NumPy arrays that carry their tangents.

A model that runs on the host (``Model.on_host``: NumPy in place of
``jax.numpy``, :func:`jaxmodel.deferred.on_host`) is differentiated there by
running it on :class:`Dual` inputs: each holds its value (``primal``, any
shape) and its derivatives along ``k`` directions at once (``tangent``, shape
``[k, *primal.shape]``).  NumPy hands every ufunc and array function called
on a ``Dual`` to :meth:`Dual.__array_ufunc__` / :meth:`Dual.__array_function__`,
which apply the chain rule.  One pass gives the derivatives of every output
along every input asked for: for one configuration of the refined model and
its 50-odd continuous inputs, milliseconds, where jax traced and compiled the
same derivatives for minutes (issue 26, ``jaxmodel.sensitivity``).

The rules are jax's, so that the numbers are jax's (``tests/test_host_eval.py``):
``maximum``/``minimum`` split the tangent half and half at a tie (jax's
balanced rule), ``floor``, ``ceil``, ``round``, ``sign`` and comparisons have
none, ``where``/``select`` pick the chosen branch's, ``abs`` takes the sign
of ``x`` (+1 at 0), and ``stop_gradient`` (:func:`stop_gradient`) drops it.  A ufunc
without a rule raises ``TypeError`` naming it: no silent zero.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def primal(v: Any) -> Any:
    """The value of ``v`` (a :class:`Dual`'s primal, anything else as it is)."""
    return v.primal if isinstance(v, Dual) else v


def stop_gradient(v: Any) -> Any:
    """``jax.lax.stop_gradient`` on the host: the value without its tangent."""
    return primal(v)


class Dual:
    """A NumPy array (``primal``) with its derivatives along ``k`` directions
    (``tangent``, ``[k, *primal.shape]``)."""

    __slots__ = ("primal", "tangent")
    __array_priority__ = 1000

    def __init__(self, value: Any, tangent: Any):
        self.primal = np.asarray(value)
        self.tangent = np.asarray(tangent)

    # -- what code reads of an array ------------------------------------------------------
    @property
    def shape(self):
        return self.primal.shape

    @property
    def ndim(self):
        return self.primal.ndim

    @property
    def dtype(self):
        return self.primal.dtype

    def __len__(self):
        return len(self.primal)

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        return Dual(self.primal[index], self.tangent[(slice(None), *index)])

    def astype(self, dtype, *args, **kwargs):
        """A float cast keeps the tangent; a cast to a count or a flag has none."""
        out = self.primal.astype(dtype, *args, **kwargs)
        if np.issubdtype(out.dtype, np.inexact):
            return Dual(out, self.tangent.astype(dtype))
        return out

    def __repr__(self):
        return f"Dual({self.primal!r}, tangent shape {self.tangent.shape})"

    # -- operators: NumPy's ufuncs --------------------------------------------------------
    def __add__(self, o): return np.add(self, o)          # noqa: E704
    def __radd__(self, o): return np.add(o, self)         # noqa: E704
    def __sub__(self, o): return np.subtract(self, o)     # noqa: E704
    def __rsub__(self, o): return np.subtract(o, self)    # noqa: E704
    def __mul__(self, o): return np.multiply(self, o)     # noqa: E704
    def __rmul__(self, o): return np.multiply(o, self)    # noqa: E704
    def __truediv__(self, o): return np.true_divide(self, o)   # noqa: E704
    def __rtruediv__(self, o): return np.true_divide(o, self)  # noqa: E704
    def __pow__(self, o): return np.power(self, o)        # noqa: E704
    def __rpow__(self, o): return np.power(o, self)       # noqa: E704
    def __mod__(self, o): return np.remainder(self, o)    # noqa: E704
    def __rmod__(self, o): return np.remainder(o, self)   # noqa: E704
    def __floordiv__(self, o): return np.floor_divide(self, o)   # noqa: E704
    def __neg__(self): return np.negative(self)           # noqa: E704
    def __pos__(self): return self                        # noqa: E704
    def __abs__(self): return np.absolute(self)           # noqa: E704
    def __gt__(self, o): return np.greater(self, o)       # noqa: E704
    def __ge__(self, o): return np.greater_equal(self, o)  # noqa: E704
    def __lt__(self, o): return np.less(self, o)          # noqa: E704
    def __le__(self, o): return np.less_equal(self, o)    # noqa: E704
    def __eq__(self, o): return np.equal(self, o)         # noqa: E704
    def __ne__(self, o): return np.not_equal(self, o)     # noqa: E704
    __hash__ = None

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None:
            raise TypeError(f"Dual: numpy.{ufunc.__name__}.{method} has no rule")
        values = [primal(v) for v in inputs]
        out = ufunc(*values, **kwargs)
        if ufunc in _NO_TANGENT:
            return out
        rule = _RULES.get(ufunc)
        if rule is None:
            raise TypeError(f"Dual: numpy.{ufunc.__name__} has no derivative rule")
        k = _directions(inputs)
        tangents = [_tangent(v, k, out.shape) for v in inputs]
        return Dual(out, rule(out, values, tangents))

    def __array_function__(self, func, types, args, kwargs):
        rule = _FUNCTIONS.get(func)
        if rule is None:
            raise TypeError(f"Dual: numpy.{func.__name__} has no rule")
        return rule(*args, **kwargs)


def _directions(values) -> int:
    return next(v.tangent.shape[0] for v in values if isinstance(v, Dual))


def _tangent(v: Any, k: int, shape: tuple[int, ...]) -> np.ndarray | None:
    """``v``'s tangent broadcast to ``[k, *shape]``, or None (a constant)."""
    if not isinstance(v, Dual):
        return None
    t = v.tangent.reshape((k,) + (1,) * (len(shape) - v.primal.ndim) + v.primal.shape)
    return np.broadcast_to(t, (k, *shape))


def _sum(*terms):
    """The sum of the terms that are not None (zero tangents), 0.0 if none."""
    out = None
    for term in terms:
        if term is not None:
            out = term if out is None else out + term
    return 0.0 if out is None else out


def _scale(t, factor):
    return None if t is None else t * factor


def _balanced(x, y, out):
    """jax's rule for max / min: the tangent of the side equal to the result, half
    of each at a tie (``jax._src.lax.lax._balanced_eq``)."""
    x_is, y_is = x == out, y == out
    return np.where(x_is, np.where(y_is, 0.5, 1.0), 0.0), np.where(
        y_is, np.where(x_is, 0.5, 1.0), 0.0)


def _maximum(out, v, t):
    wx, wy = _balanced(v[0], v[1], out)
    return _sum(_scale(t[0], wx), _scale(t[1], wy))


def _power(out, v, t):
    x, y = v
    with np.errstate(all="ignore"):
        # jax's pow: d/dx = y x^(y-1) (0 where y == 0), d/dy = log(x) x^y (0 where x == 0)
        dx = np.where(y == 0, 0.0, y * np.power(x, y - 1.0))
        dy = np.where(x == 0, 0.0, np.log(np.where(x == 0, 1.0, x)) * out)
    return _sum(_scale(t[0], dx), _scale(t[1], dy))


def _divide(out, v, t):
    x, y = v
    return _sum(_scale(t[0], 1.0 / y), _scale(t[1], -out / y))


def _remainder(out, v, t):
    # x mod y = x - y floor(x / y)
    return _sum(t[0], _scale(t[1], -np.floor(v[0] / v[1])))


_RULES = {
    np.add: lambda out, v, t: _sum(t[0], t[1]),
    np.subtract: lambda out, v, t: _sum(t[0], _scale(t[1], -1.0)),
    np.multiply: lambda out, v, t: _sum(_scale(t[0], v[1]), _scale(t[1], v[0])),
    np.true_divide: _divide,
    np.power: _power,
    np.negative: lambda out, v, t: -t[0],
    np.positive: lambda out, v, t: t[0],
    np.absolute: lambda out, v, t: t[0] * np.where(v[0] >= 0, 1.0, -1.0),  # jax: +1 at 0
    np.sqrt: lambda out, v, t: t[0] * (0.5 / out),
    np.exp: lambda out, v, t: t[0] * out,
    np.log: lambda out, v, t: t[0] / v[0],
    np.log2: lambda out, v, t: t[0] / (v[0] * np.log(2.0)),
    np.square: lambda out, v, t: t[0] * (2.0 * v[0]),
    np.maximum: _maximum,
    np.minimum: _maximum,  # the same rule: the side equal to the result
    np.remainder: _remainder,
    np.floor: lambda out, v, t: np.zeros_like(t[0]),
    np.ceil: lambda out, v, t: np.zeros_like(t[0]),
    np.rint: lambda out, v, t: np.zeros_like(t[0]),
    np.floor_divide: lambda out, v, t: np.zeros_like(t[0] if t[0] is not None else t[1]),
    np.sign: lambda out, v, t: np.zeros_like(t[0]),
}
_NO_TANGENT = {np.greater, np.greater_equal, np.less, np.less_equal, np.equal, np.not_equal,
               np.isfinite, np.isnan, np.isinf, np.logical_and, np.logical_or, np.logical_not,
               np.signbit}


def _where(condition, x=None, y=None):
    if x is None:
        return np.where(primal(condition))
    out = np.where(primal(condition), primal(x), primal(y))
    k = _directions((x, y))
    tx, ty = _tangent(x, k, out.shape), _tangent(y, k, out.shape)
    zero = np.zeros((k, *out.shape))
    return Dual(out, np.where(primal(condition), zero if tx is None else tx,
                              zero if ty is None else ty))


def _select(condlist, choicelist, default=0):
    conds = [primal(c) for c in condlist]
    out = np.select(conds, [primal(c) for c in choicelist], primal(default))
    k = _directions((*choicelist, default))
    zero = np.zeros((k, *out.shape))

    def tan(v):
        t = _tangent(v, k, out.shape)
        return zero if t is None else t

    return Dual(out, np.select(conds, [tan(c) for c in choicelist], tan(default)))


def _joined(join):
    def rule(arrays, axis=0, **kwargs):
        arrays = list(arrays)
        out = join([primal(a) for a in arrays], axis=axis, **kwargs)
        k = _directions(arrays)
        tangents = [np.zeros((k, *np.shape(primal(a)))) if not isinstance(a, Dual)
                    else a.tangent for a in arrays]
        return Dual(out, join(tangents, axis=axis + 1 if axis >= 0 else axis, **kwargs))
    return rule


def _clip(a, a_min=None, a_max=None, **kwargs):
    # jnp.clip is minimum(a_max, maximum(a_min, a))
    out = a
    if a_min is not None:
        out = np.maximum(a_min, out)
    if a_max is not None:
        out = np.minimum(a_max, out)
    return out


def _round(a, decimals=0, out=None):
    if decimals != 0 or out is not None:
        raise TypeError("Dual: numpy.round with decimals or out has no rule")
    return np.rint(a)


def _broadcast_to(array, shape, **kwargs):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    out = np.broadcast_to(primal(array), shape, **kwargs)
    if not isinstance(array, Dual):
        return out
    return Dual(out, _tangent(array, array.tangent.shape[0], shape))


def _like(func):
    def rule(a, *args, **kwargs):
        return func(primal(a), *args, **kwargs)
    return rule


_FUNCTIONS = {
    np.where: _where,
    np.select: _select,
    np.stack: _joined(np.stack),
    np.concatenate: _joined(np.concatenate),
    np.broadcast_to: _broadcast_to,
    np.clip: _clip,
    np.round: _round,
    np.around: _round,
    np.ones_like: _like(np.ones_like),
    np.zeros_like: _like(np.zeros_like),
    np.full_like: _like(np.full_like),
    np.shape: _like(np.shape),
    np.ndim: _like(np.ndim),
    np.result_type: lambda *arrays_and_dtypes: np.result_type(
        *(primal(a) for a in arrays_and_dtypes)),
}


def seeded(values: np.ndarray, direction: int, directions: int) -> Dual:
    """``values`` as a :class:`Dual` with tangent 1 along ``direction`` of
    ``directions``, 0 along the others."""
    values = np.asarray(values)
    tangent = np.zeros((directions, *values.shape), dtype=values.dtype)
    tangent[direction] = 1.0
    return Dual(values, tangent)
