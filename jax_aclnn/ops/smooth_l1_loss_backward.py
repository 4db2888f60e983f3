"""aclnnSmoothL1LossBackward: the gradient of the smooth L1 (Huber / beta) loss."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from jax_aclnn import _checks, network
from jax_aclnn._batching import batch_broadcasting
from jax_aclnn._compat import not_mapped
from jax_aclnn._primitive import AclnnPrimitive

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
    if isinstance(count, int) and isinstance(wanted, int):
        if count == wanted or wanted == 0:
            return g
        ratio = np.float32(count / wanted)
    else:  # symbolic sizes (jax.export): the ratio is computed in the program
        ratio = jnp.asarray(count, jnp.float32) / jnp.maximum(jnp.asarray(wanted, jnp.float32), 1)
    return (g.astype(jnp.float32) * ratio).astype(g.dtype)


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

    Transformations: all (:mod:`jax_aclnn.ops`); linear in ``grad_out``
    (its transpose sums to ``grad_out``'s shape: for a scalar ``grad_out``,
    the sum of the operator on the cotangent).

    Raises:
      TypeError: a tensor is not float32/float16/bfloat16, dtypes differ, or
        ``beta`` is not a static real number.
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


# --- the differentiable operator whose derivative runs it ----------


def smooth_l1_loss(
    input: Any,  # noqa: A002 - PyTorch argument name
    target: Any,
    *,
    reduction: str | int = "mean",
    beta: float = 1.0,
) -> jax.Array:
    """Smooth L1 (Huber / beta) loss, through aclnnSmoothL1LossBackward.

    With ``d = input - target``: ``0.5 * d**2 / beta`` where ``|d| < beta``,
    else ``|d| - 0.5 * beta`` (``beta = 0``: ``|d|``), then reduced
    (``torch.nn.functional.smooth_l1_loss``). Differentiable in both
    ``input`` and ``target``, which broadcast together. For ``beta > 0`` it
    is optax's Huber loss over beta:
    ``optax.huber_loss(input, target, delta=beta).mean() / beta`` for
    ``"mean"`` (``.sum()`` for ``"sum"``, elementwise for ``"none"``).

    ``input`` and ``target`` follow JAX's type promotion, as jax.numpy
    functions and ``optax.huber_loss`` do: bfloat16 predictions with a
    float32 target give a float32 loss (and each gradient in its argument's
    dtype); a Python scalar target takes the predictions' dtype.

    Args:
      input: predictions (float32, float16 or bfloat16).
      target: targets (same dtypes; promoted together with ``input``).
      reduction: ``"none"``, ``"mean"`` or ``"sum"`` (or 0, 1, 2).
      beta: the L1/L2 switch point, >= 0.

    Returns:
      The loss in the promoted dtype, a scalar for ``"mean"``/``"sum"``,
      else of the broadcast shape.

    Raises:
      TypeError: an unsupported dtype, a tensor that is None.
      ValueError: shapes do not broadcast, ``beta < 0`` or beyond float32's
        range, unknown reduction.

    Transformations: all (:mod:`jax_aclnn.ops`). Reverse mode:
    aclnnSmoothL1LossBackward on the cotangent (a scalar for
    ``"mean"``/``"sum"``); forward mode: the same operator on ``t_input -
    t_target``, summed for ``"mean"``/``"sum"``.
    """
    op = "smooth_l1_loss"
    x, y = _checks.float_arrays(op, input=input, target=target, promote=True)
    _checks.broadcast_shape(op, ("input", "target"), (x, y))
    beta = _checks.float32_number(op, "beta", beta)
    if not beta >= 0:
        raise ValueError(f"{op}: beta must be >= 0, got {beta}")
    return _smooth_l1_loss(x, y, reduction_code(op, reduction), beta)


@partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _smooth_l1_loss(x, y, reduction, beta):
    d = x.astype(jnp.float32) - y.astype(jnp.float32)
    ad = jnp.abs(d)
    loss = jnp.where(ad < beta, 0.5 * d * d / (beta if beta > 0 else 1.0), ad - 0.5 * beta)
    if reduction == REDUCTIONS["mean"]:
        loss = loss.mean()
    elif reduction == REDUCTIONS["sum"]:
        loss = loss.sum()
    return loss.astype(x.dtype)


@_smooth_l1_loss.defjvp
def _smooth_l1_loss_jvp(reduction, beta, primals, tangents):
    x, y = primals
    shape = jnp.broadcast_shapes(x.shape, y.shape)
    # The kernel's "mean" divides by its input's size: give it the broadcast
    # input so that it matches the forward mean.
    xb = jnp.broadcast_to(x, shape)
    t = jnp.broadcast_to(tangents[0], shape) - jnp.broadcast_to(tangents[1], shape)
    if reduction == REDUCTIONS["none"]:
        dloss = smooth_l1_loss_backward(t, xb, y, reduction=reduction, beta=beta)
    else:
        # The operator's transpose in its (scalar) grad_out: the sum of the
        # operator on t; reverse mode transposes it back to one call.
        dloss = _op.transpose(
            [t], [xb, y], ShapedArray((), x.dtype), reduction=reduction, beta=beta)
    return _smooth_l1_loss(x, y, reduction, beta), dloss


# The loss of the every-operator network (jax_aclnn.network).
network.register("smooth_l1_loss", "loss", lambda p, y: smooth_l1_loss(p, y, beta=0.1),
                  lambda p, y: _smooth_l1_loss.fun(p, y, REDUCTIONS["mean"], 0.1))
