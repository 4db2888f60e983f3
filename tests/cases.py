"""The one table of operator cases the tests share: per aclnn operator, its
cases (the public function's keyword arguments, the operands' shapes and
value ranges) and its float64 NumPy oracle.

The operators themselves come from the library's registry
(``jax_aclnn.ops.OPERATOR_NAMES``); a test of every operator iterates
:data:`CASES` (or :func:`of`), so a new operator is one new block here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

import jax_aclnn as aclnn

OPERATORS = aclnn.ops.OPERATOR_NAMES


# ----- the float64 oracles (the formulas of the aclnn/ATen documentation) ------


def smooth_l1_numpy(g, x, y, reduction, beta):
    d = x - y
    with np.errstate(divide="ignore", invalid="ignore"):
        dl = np.where(np.abs(d) < beta, d / (beta if beta > 0 else 1.0), np.sign(d))
    scale = 1.0 / x.size if reduction == "mean" else 1.0
    return np.broadcast_to(g * dl * scale, np.broadcast_shapes(g.shape, x.shape, y.shape))


def logit_grad_numpy(x, dy, eps):
    with np.errstate(divide="ignore", invalid="ignore"):
        v = dy / (x * (1 - x))
        if np.isnan(eps):
            return np.full_like(v, np.nan)
        if eps < 0:
            return np.where((x < 0) | (x > 1), np.nan, v)
        lo, hi = np.float32(eps), np.float32(1 - eps)
        return np.where((x < lo) | (x > hi), 0.0, v)


def hardshrink_grad_numpy(g, x, lambd):
    return np.where(np.abs(x) <= lambd, 0.0, g) + np.zeros(np.broadcast_shapes(g.shape, x.shape))


def swish_grad_numpy(g, x, beta):
    s = 1 / (1 + np.exp(-beta * x))
    return g * (s + beta * x * s * (1 - s))


def bn_reduce_numpy(g, x, mean, invstd):
    axes = (0,) + tuple(range(2, x.ndim))
    bshape = (1, -1) + (1,) * (x.ndim - 2)
    sum_dy = g.sum(axes)
    sum_dy_xmu = (g * (x - mean.reshape(bshape))).sum(axes)
    return sum_dy, sum_dy_xmu, sum_dy_xmu * invstd, sum_dy


def _bn_oracle(g, x, mean, invstd, weight, *, input_g=True, weight_g=True, bias_g=True):
    wanted = (input_g, input_g, weight_g, bias_g)
    return tuple(o if w else None for o, w in zip(bn_reduce_numpy(g, x, mean, invstd), wanted))


#: Per operator: the float64 result from float64 operands and the public
#: function's keyword arguments (with their defaults).
ORACLES: dict[str, Callable[..., Any]] = {
    "smooth_l1_loss_backward": lambda g, x, y, reduction="mean", beta=1.0:
        smooth_l1_numpy(g, x, y, reduction, beta),
    "logit_grad": lambda x, dy, eps=-1.0: logit_grad_numpy(x, dy, eps),
    "hardshrink_backward": lambda g, x, lambd=0.5: hardshrink_grad_numpy(g, x, lambd),
    "swish_backward": lambda g, x, beta=1.0: swish_grad_numpy(g, x, 1.0 if beta is None else beta),
    "batch_norm_reduce_backward": _bn_oracle,
}


# ----- the cases -----------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One call of an operator's public function."""

    op: str
    kwargs: dict[str, Any]
    shapes: tuple[tuple[int, ...], ...]
    #: (low, high) of each operand's uniform values; default (-2, 2).
    ranges: tuple[tuple[float, float] | None, ...] = field(default=())

    @property
    def id(self) -> str:
        args = ",".join(f"{k}={v}" for k, v in self.kwargs.items())
        return f"{self.op}({args})" + "x".join(str(list(s)) for s in self.shapes)

    @property
    def same_shape(self) -> bool:
        """Element-wise on operands of one shape (no reduction to a scalar)."""
        return (self.op != "batch_norm_reduce_backward" and len(set(self.shapes)) == 1
                and self.kwargs.get("reduction", "none") == "none")

    def call(self, *operands: Any) -> Any:
        """The public function on ``operands``."""
        return getattr(aclnn, self.op)(*operands, **self.kwargs)

    def range(self, i: int) -> tuple[float, float]:
        return (self.ranges[i:i + 1] or (None,))[0] or (-2.0, 2.0)

    def operands(self, rng: np.random.Generator, dtype: Any = np.float32,
                 shapes: tuple[tuple[int, ...], ...] | None = None) -> list[jax.Array]:
        """Seeded uniform operands rounded to ``dtype`` (of ``shapes`` if given)."""
        import jax.numpy as jnp

        return [jnp.asarray(rng.uniform(*self.range(i), size=s).astype(np.float32)).astype(dtype)
                for i, s in enumerate(shapes or self.shapes)]

    def expected(self, *operands: Any) -> Any:
        """The float64 oracle on ``operands``."""
        return ORACLES[self.op](*(np.asarray(a, np.float64) for a in operands), **self.kwargs)

    def primitive_params(self, *operands: Any) -> dict[str, Any]:
        """The parameters the public function binds the operator's primitive
        with, for these operands (read from its jaxpr)."""
        jaxpr = jax.make_jaxpr(self.call)(*operands)
        (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == self.op]
        return dict(eqn.params)


_PROBABILITY = (0.02, 0.98)
_BN_VECTORS = ((-2.0, 2.0), (-2.0, 2.0), (-0.5, 0.5), (0.5, 2.0), (-1.0, 1.0))

#: Every operator's cases: broadcasting, every reduction, each attribute's
#: special values (``eps < 0``, ``beta=None``), the batch-norm masks.
CASES: list[Case] = [
    Case("smooth_l1_loss_backward", {"reduction": "mean", "beta": 0.5}, ((), (4, 6), (4, 6))),
    Case("smooth_l1_loss_backward", {"reduction": "mean", "beta": 0.5}, ((), (5, 3), (3,))),
    Case("smooth_l1_loss_backward", {"reduction": "none", "beta": 0.5}, ((4, 6), (4, 6), (1, 6))),
    Case("smooth_l1_loss_backward", {"reduction": "none"}, ((5, 3), (5, 3), (3,))),
    Case("smooth_l1_loss_backward", {"reduction": "sum", "beta": 0.5}, ((), (3, 1, 5), (2, 5))),
    Case("logit_grad", {"eps": -1.0}, ((5, 7), (5, 7)), (_PROBABILITY,)),
    Case("logit_grad", {"eps": 0.1}, ((5, 7), (5, 7)), (_PROBABILITY,)),
    Case("logit_grad", {"eps": 0.05}, ((5, 3), (5, 3)), (_PROBABILITY,)),
    Case("hardshrink_backward", {"lambd": 0.5}, ((6, 9), (6, 9))),
    Case("hardshrink_backward", {"lambd": 0.3}, ((5, 3), (3,))),
    Case("swish_backward", {"beta": 1.5}, ((4, 8), (4, 8))),
    Case("swish_backward", {"beta": None}, ((4, 8), (4, 8))),
    Case("batch_norm_reduce_backward", {}, ((4, 3, 2), (4, 3, 2), (3,), (3,), (3,)), _BN_VECTORS),
    Case("batch_norm_reduce_backward", {"weight_g": False, "bias_g": False},
         ((6, 5, 7), (6, 5, 7), (5,), (5,), (5,)), _BN_VECTORS),
]

assert {c.op for c in CASES} == set(OPERATORS), "every operator needs cases here"


def of(op: str) -> list[Case]:
    """The cases of one operator."""
    return [c for c in CASES if c.op == op]


def ids(cases: list[Case]) -> list[str]:
    return [c.id for c in cases]
