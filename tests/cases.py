"""The one table the tests share: a block per aclnn operator (its formula,
the oracle written once; its cases; the differentiable ops whose
derivative runs it; the operands of its programs), registered with
:func:`table.add` (tests/table.py says what each part is).

The operators themselves come from the library's registry
(``jax_aclnn.ops.OPERATOR_NAMES``); every test of every operator iterates
these tables, so a new operator is one new block here, above the line
that ends the blocks.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

import jax_aclnn as aclnn
from table import (CASES, FORMULAS, FORWARD, PAIRS, Case, Forward, add, away, elementwise,
                   ids, of, oracle, program, programs, twin)

OPERATORS = aclnn.ops.OPERATOR_NAMES


def _probability(x):
    return 0.05 + 0.9 * jax.nn.sigmoid(x)


# ----- aclnnSmoothL1LossBackward ------------------------------------------------------------


def smooth_l1_loss_backward(xp, g, x, y, reduction="mean", beta=1.0):
    d = x - y
    dloss = xp.where(xp.abs(d) < beta, d / (beta if beta > 0 else 1.0), xp.sign(d))
    scale = 1.0 / max(x.size, 1) if reduction == "mean" else 1.0
    return xp.broadcast_to(g * dloss * scale, np.broadcast_shapes(g.shape, x.shape, y.shape))


def smooth_l1_loss(x, y, reduction="mean", beta=1.0):
    d = x - y
    ad = jnp.abs(d)
    loss = jnp.where(ad < beta, 0.5 * d * d / beta, ad - 0.5 * beta) if beta > 0 else ad
    return {"mean": loss.mean(), "sum": loss.sum(), "none": loss}[reduction]


def _smooth_l1_operands(rng):
    y = rng.normal(size=(4,)).astype(np.float32)
    return away(rng, (3, 4), -2.5, 2.5, [-0.8, 0.0, 0.8]) + y, y  # |x - y| away from beta


def _smooth_l1_forward(reduction):
    return Forward(
        f"smooth_l1_loss_{reduction}", "smooth_l1_loss_backward",
        lambda x, y: aclnn.smooth_l1_loss(x, y, reduction=reduction, beta=0.8),
        lambda x, y: smooth_l1_loss(x, y, reduction, 0.8), _smooth_l1_operands,
        lambda g, x, y: aclnn.smooth_l1_loss_backward(g, x, y, reduction=reduction, beta=0.8))


add("smooth_l1_loss_backward", smooth_l1_loss_backward, cases=[
    Case("smooth_l1_loss_backward", {"reduction": "none", "beta": 0.5}, ((4, 6), (4, 6), (4, 6))),
    Case("smooth_l1_loss_backward", {"reduction": "mean", "beta": 0.5}, ((), (4, 6), (4, 6))),
    Case("smooth_l1_loss_backward", {"reduction": "mean", "beta": 0.5}, ((), (5, 3), (3,))),
    Case("smooth_l1_loss_backward", {"reduction": "none", "beta": 0.5}, ((4, 6), (4, 6), (1, 6))),
    Case("smooth_l1_loss_backward", {"reduction": "none"}, ((5, 3), (5, 3), (3,))),
    Case("smooth_l1_loss_backward", {"reduction": "sum", "beta": 0.5}, ((), (3, 1, 5), (2, 5))),
], forward=[_smooth_l1_forward(r) for r in ("none", "mean", "sum")], pairs={
    "smooth_l1_loss_backward": lambda g, x: (g, x, 0.5 * x.mean(-1, keepdims=True)),
    "smooth_l1_loss_mean": lambda a, b: (a, b),
})


# ----- aclnnLogitGrad ------------------------------------------------------------------------


def logit_grad(xp, x, dy, eps=-1.0):
    value = dy / (x * (1 - x))
    if math.isnan(eps):
        return xp.full_like(value, np.nan)
    if eps < 0:
        return xp.where((x < 0) | (x > 1), np.nan, value)
    lo = np.float32(eps)
    hi = np.float32(1) - lo  # the float32 bounds of CANN's kernel and ATen's
    return xp.where((x < lo) | (x > hi), 0.0, value)


def logit(x, eps=None):
    z = x if eps is None else jnp.clip(x, eps, 1 - eps)
    return jnp.log(z / (1 - z))


_PROBABILITY = (0.02, 0.98)

add("logit_grad", logit_grad, cases=[
    Case("logit_grad", {"eps": -1.0}, ((5, 7), (5, 7)), (_PROBABILITY,)),
    Case("logit_grad", {"eps": 0.1}, ((5, 7), (5, 7)), (_PROBABILITY,)),
    Case("logit_grad", {"eps": 0.05}, ((5, 3), (5, 3)), (_PROBABILITY,)),
], forward=[
    Forward("logit", "logit_grad", aclnn.logit, logit,
            lambda rng: (away(rng, (3, 4), 0.05, 0.95),),
            lambda g, x: aclnn.logit_grad(x, g)),
    Forward("logit_eps", "logit_grad", lambda x: aclnn.logit(x, eps=0.2),
            lambda x: logit(x, 0.2), lambda rng: (away(rng, (3, 4), 0.05, 0.95, [0.2, 0.8]),),
            lambda g, x: aclnn.logit_grad(x, g, eps=0.2)),
], pairs={
    "logit_grad": lambda g, x: (_probability(x), g),
    "logit_eps": lambda a, b: (_probability(a - b),),
})


# ----- aclnnHardshrinkBackward ---------------------------------------------------------------


def hardshrink_backward(xp, g, x, lambd=0.5):
    threshold = np.float32(lambd) if lambd > 0 else np.float32(0)  # compared in float32
    out = xp.where(xp.abs(x) <= threshold, 0.0, g)
    return xp.broadcast_to(out, np.broadcast_shapes(g.shape, x.shape))


def hardshrink(x, lambd=0.5):
    return jnp.where(jnp.abs(x) > lambd, x, 0.0)


add("hardshrink_backward", hardshrink_backward, cases=[
    Case("hardshrink_backward", {"lambd": 0.5}, ((6, 9), (6, 9))),
    Case("hardshrink_backward", {"lambd": 0.3}, ((5, 3), (3,))),
], forward=[
    Forward("hardshrink", "hardshrink_backward", aclnn.hardshrink, hardshrink,
            lambda rng: (away(rng, (3, 4), -2, 2, [-0.5, 0.5]),),
            lambda g, x: aclnn.hardshrink_backward(g, x, lambd=0.5)),
], pairs={
    "hardshrink_backward": lambda g, x: (g, x),
    "hardshrink": lambda a, b: (a * b,),
})


# ----- aclnnSwishBackward --------------------------------------------------------------------


def swish_backward(xp, g, x, beta=1.0):
    b = 1.0 if beta is None else beta
    s = 1 / (1 + xp.exp(-b * x))
    return g * (s + b * x * s * (1 - s))


def swish(x, beta=1.0):
    return x * jax.nn.sigmoid(beta * x)


def _normal(rng):
    return (rng.normal(size=(3, 4)).astype(np.float32),)


add("swish_backward", swish_backward, cases=[
    Case("swish_backward", {"beta": 1.5}, ((4, 8), (4, 8))),
    Case("swish_backward", {"beta": None}, ((4, 8), (4, 8))),
], forward=[
    Forward("swish", "swish_backward", lambda x: aclnn.swish(x, beta=1.7),
            lambda x: swish(x, 1.7), _normal, lambda g, x: aclnn.swish_backward(g, x, beta=1.7)),
    Forward("silu", "swish_backward", aclnn.silu, swish, _normal,
            lambda g, x: aclnn.swish_backward(g, x)),
], pairs={
    "swish_backward": lambda g, x: (g, x),
    "swish": lambda a, b: (a + b,),
})


# ----- aclnnBatchNormReduceBackward ----------------------------------------------------------


def batch_norm_reduce_backward(xp, g, x, mean, invstd, weight, *, input_g=True, weight_g=True,
                               bias_g=True):
    axes = (0,) + tuple(range(2, x.ndim))
    bshape = (1, -1) + (1,) * (x.ndim - 2)
    sum_dy = g.sum(axes)
    sum_dy_xmu = (g * (x - mean.reshape(bshape))).sum(axes)
    values = (sum_dy, sum_dy_xmu, sum_dy_xmu * invstd, sum_dy)
    return tuple(v if w else None for v, w in zip(values, (input_g, input_g, weight_g, bias_g)))


def batch_norm(x, weight=None, bias=None, channel_axis=-1, eps=1e-5):
    """Training-mode batch norm: ``y`` only."""
    axis = channel_axis % x.ndim
    axes = tuple(i for i in range(x.ndim) if i != axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    mean = x.mean(axes, keepdims=True)
    y = (x - mean) / jnp.sqrt(((x - mean) ** 2).mean(axes, keepdims=True) + eps)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def _batch_norm_operands(rng):
    x = (rng.normal(size=(5, 2, 3)) * 2 + 1).astype(np.float32)
    return x, rng.uniform(0.5, 2, 3).astype(np.float32), rng.normal(size=3).astype(np.float32)


def _bn_vectors(x):
    """mean, invstd and weight (C,) of x (channel at dim 1)."""
    axes = (0,) + tuple(range(2, x.ndim))
    return x.mean(axes), 1.0 / jnp.sqrt(x.var(axes) + 1e-5), 1.0 + 0.1 * jnp.arange(
        x.shape[1], dtype=x.dtype)


def _channel_mean(a):
    return a.mean(tuple(range(a.ndim - 1)))


_BN_VECTORS = ((-2.0, 2.0), (-2.0, 2.0), (-0.5, 0.5), (0.5, 2.0), (-1.0, 1.0))

add("batch_norm_reduce_backward", batch_norm_reduce_backward, cases=[
    Case("batch_norm_reduce_backward", {}, ((4, 3, 2), (4, 3, 2), (3,), (3,), (3,)), _BN_VECTORS),
    Case("batch_norm_reduce_backward", {"weight_g": False, "bias_g": False},
         ((6, 5, 7), (6, 5, 7), (5,), (5,), (5,)), _BN_VECTORS),
], forward=[
    Forward("batch_norm", "batch_norm_reduce_backward",
            lambda x, w, b: aclnn.batch_norm(x, w, b)[0], batch_norm, _batch_norm_operands),
    Forward("batch_norm_plain", "batch_norm_reduce_backward", lambda x: aclnn.batch_norm(x)[0],
            batch_norm, lambda rng: _batch_norm_operands(rng)[:1]),
], pairs={
    "batch_norm_reduce_backward": lambda g, x: (g, x, *_bn_vectors(x)),
    "batch_norm": lambda a, b: (a * b, 1.0 + _channel_mean(a), _channel_mean(b)),
})


# ----- new operators: above this line ---------------------------------------------------------

#: Each operator's float64 NumPy oracle.
ORACLES = {op: oracle(op) for op in FORMULAS}
#: Every operator and differentiable op as a program of two arrays:
#: name -> (with jax_aclnn, with its formula in jax.numpy).
PROGRAMS = programs()

for _table, _what in ((FORMULAS, "a formula"), ({c.op for c in CASES}, "cases"),
                      ({f.op for f in FORWARD}, "a differentiable op"),
                      (PAIRS, "its programs' operands")):
    assert set(_table) >= set(OPERATORS), f"every operator needs {_what} in tests/cases.py"

__all__ = ["CASES", "FORMULAS", "FORWARD", "OPERATORS", "ORACLES", "PAIRS", "PROGRAMS", "Case",
           "Forward", "away", "batch_norm", "elementwise", "ids", "of", "program", "smooth_l1_loss",
           "twin"]
