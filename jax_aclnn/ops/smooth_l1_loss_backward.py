"""aclnnSmoothL1LossBackward: the gradient of the smooth L1 (Huber / beta) loss."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from jax_aclnn import _checks
from jax_aclnn._compat import not_mapped
from jax_aclnn._primitive import AclnnPrimitive, batch_broadcasting

#: aclnn's reduction codes.
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def reduction_code(op: str, reduction: str | int) -> int:
    """``"none"``/``"mean"``/``"sum"`` or aclnn's 0/1/2 as aclnn's code; ValueError otherwise."""
    if isinstance(reduction, str) and reduction in REDUCTIONS:
        return REDUCTIONS[reduction]
    if isinstance(reduction, (int, np.integer)) and not isinstance(reduction, bool):
        if int(reduction) in REDUCTIONS.values():
            return int(reduction)
    raise ValueError(
        f"{op}: reduction must be 'none', 'mean', 'sum' (or 0, 1, 2), got {reduction!r}"
    )


class SmoothL1LossBackward(AclnnPrimitive):
    name = "smooth_l1_loss_backward"
    aclnn_name = "aclnnSmoothL1LossBackward"
    operand_names = ("grad_out", "input", "target")
    alias_gradient = True

    def abstract_eval(self, g, x, y, *, reduction, beta):
        return ShapedArray(jnp.broadcast_shapes(g.shape, x.shape, y.shape), x.dtype)

    def reference(self, g, x, y, *, reduction, beta):
        shape = jnp.broadcast_shapes(g.shape, x.shape, y.shape)
        d = x.astype(jnp.float32) - y.astype(jnp.float32)
        quadratic = d / beta if beta > 0 else jnp.zeros_like(d)
        dloss = jnp.where(jnp.abs(d) < beta, quadratic, jnp.sign(d))
        scale = 1.0 / max(x.size, 1) if reduction == REDUCTIONS["mean"] else 1.0
        out = g.astype(jnp.float32) * jnp.asarray(scale, jnp.float32) * dloss  # symbolic sizes too
        return jnp.broadcast_to(out, shape).astype(x.dtype)

    def ffi_attributes(self, *, reduction, beta):
        return {"reduction": np.int64(reduction), "beta": np.float32(beta)}

    def batch(self, args, dims, *, reduction, beta):
        g, x, y = batch_broadcasting(args, dims)
        if reduction == REDUCTIONS["mean"]:
            # Each example is divided by its own element count.
            per_example = math.prod(args[1].shape) // (
                args[1].shape[dims[1]] if dims[1] is not not_mapped else 1
            )
            g = rescale_mean(g, x.size, per_example)
        return self.bind(g, x, y, reduction=reduction, beta=beta), 0

    def local_call(self, args, global_avals, *, reduction, beta):
        g, x, y = args
        if reduction == REDUCTIONS["mean"]:  # one shard: still the global mean
            g = rescale_mean(g, x.size, math.prod(global_avals[1].shape))
        return self.ffi_call(g, x, y, reduction=reduction, beta=beta)


def rescale_mean(g: Any, count: int, wanted: int) -> Any:
    """``g`` scaled so that a "mean" kernel dividing by ``count`` divides by ``wanted``.

    The ratio is applied to ``grad_out`` (not 1 / wanted to a "sum") so that
    float16 does not underflow.
    """
    if count == wanted or wanted == 0:
        return g
    return (g.astype(jnp.float32) * np.float32(count / wanted)).astype(g.dtype)


_op = SmoothL1LossBackward()


def smooth_l1_loss_backward(
    grad_out: Any,
    input: Any,  # noqa: A002 - PyTorch/aclnn argument name
    target: Any,
    *,
    reduction: str | int = "mean",
    beta: float = 1.0,
) -> jax.Array:
    """Gradient of the smooth L1 loss with respect to ``input`` (aclnnSmoothL1LossBackward).

    With ``d = input - target``, per element ``grad_out * d / beta`` where
    ``|d| < beta``, else ``grad_out * sign(d)``; for ``reduction="mean"`` the
    result is divided by ``input.size`` (as aclnn and ATen do). ``beta == 0``
    is pure L1. Same formula as ATen's ``smooth_l1_loss_backward``.

    Args:
      grad_out: incoming gradient; broadcasts with ``input`` and ``target``
        (a scalar for ``"mean"``/``"sum"``).
      input: the loss's input ``x``.
      target: the loss's target ``y``.
      reduction: ``"none"``, ``"mean"`` or ``"sum"`` (or aclnn's 0, 1, 2) of
        the forward loss.
      beta: the L1/L2 switch point, >= 0.

    Returns:
      ``grad_input`` of the broadcast shape of the three tensors, in their
      dtype (float32, float16 or bfloat16; half types are computed in float32).

    Transformations: all of :mod:`jax_aclnn.nn`'s. Linear in ``grad_out``:
    the transpose there (reverse mode) and the JVP in it (forward mode) run
    aclnnSmoothL1LossBackward again (summed to ``grad_out``'s shape: for a
    scalar ``grad_out``, the sum of the operator on the cotangent); the
    derivatives in the other operands are XLA code.

    Raises:
      TypeError: a tensor is not float32/float16/bfloat16, dtypes differ
        (Python scalars take the arrays' dtype), or ``beta`` is not a static
        real number (a string such as ``'1.5'`` is not).
      ValueError: shapes do not broadcast, more than 8 dimensions that do not
        merge (past rank 8, aclnn's limit, dimensions are merged for the
        call), ``beta < 0`` or beyond float32's range, or an
        unknown ``reduction``.
    """
    op = _op.name
    g, x, y = _checks.float_arrays(op, grad_out=grad_out, input=input, target=target)
    _checks.broadcast_shape(op, ("grad_out", "input", "target"), (g, x, y))
    code = reduction_code(op, reduction)
    beta = _checks.float32_number(op, "beta", beta)
    if not beta >= 0:
        raise ValueError(f"{op}: beta must be >= 0, got {beta}")
    return _op.bind(g, x, y, reduction=code, beta=beta)
