"""Differentiable forward operators whose backward runs an aclnn operator.

Each is a ``jax.custom_vjp`` function: the forward is plain ``jax.numpy``
(XLA fuses it), the backward runs the matching aclnn operator of
:mod:`jax_aclnn.ops` as one XLA FFI custom call. Forward values follow
``torch.nn.functional`` of the same name; half-precision inputs are computed
in float32 and returned in their own dtype.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_aclnn import _checks, _compat
from jax_aclnn.ops import (
    hardshrink_backward,
    logit_grad,
    smooth_l1_loss_backward,
    swish_backward,
)
from jax_aclnn.ops.batch_norm_reduce_backward import reduce_backward
from jax_aclnn.ops.hardshrink_backward import shrunk
from jax_aclnn.ops.smooth_l1_loss_backward import REDUCTIONS, reduction_code


def _cotangent_like(ct: jax.Array, primal: jax.Array) -> jax.Array:
    """``ct`` given the type of ``primal``: broadcast axes summed back to its
    shape, and, under ``shard_map``, summed over the mesh axes ``ct`` varies
    over and ``primal`` does not (a value shared by the devices collects
    every device's part, as JAX's own transposes do)."""
    lead = ct.ndim - primal.ndim
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(primal.shape) if n == 1 and ct.shape[lead + i] != 1
    )
    if axes:
        ct = ct.sum(axes).reshape(primal.shape)
    shared = _compat.varying_axes(ct) - _compat.varying_axes(primal)
    return jax.lax.psum(ct, tuple(sorted(shared))) if shared else ct


# --- smooth L1 ------------------------------------------------------------


def smooth_l1_loss(
    input: Any,  # noqa: A002 - PyTorch argument name
    target: Any,
    *,
    reduction: str | int = "mean",
    beta: float = 1.0,
) -> jax.Array:
    """Smooth L1 (Huber / beta) loss; the backward runs aclnnSmoothL1LossBackward.

    With ``d = input - target``: ``0.5 * d**2 / beta`` where ``|d| < beta``,
    else ``|d| - 0.5 * beta`` (``beta = 0``: ``|d|``), then reduced
    (``torch.nn.functional.smooth_l1_loss``). Differentiable in both
    ``input`` and ``target``, which broadcast together. For ``beta > 0`` it
    is optax's Huber loss over beta:
    ``optax.huber_loss(input, target, delta=beta).mean() / beta`` for
    ``"mean"`` (``.sum()`` for ``"sum"``, elementwise for ``"none"``).

    Args:
      input: predictions.
      target: targets.
      reduction: ``"none"``, ``"mean"`` or ``"sum"`` (or 0, 1, 2).
      beta: the L1/L2 switch point, >= 0.

    Returns:
      The loss: a scalar for ``"mean"``/``"sum"``, else the broadcast shape.

    Raises:
      TypeError: unsupported or differing dtypes.
      ValueError: shapes do not broadcast, ``beta < 0``, unknown reduction.
    """
    op = "smooth_l1_loss"
    x, y = _checks.float_arrays(op, input=input, target=target)
    _checks.broadcast_shape(op, ("input", "target"), (x, y))
    beta = _checks.real_number(op, "beta", beta)
    if not beta >= 0:
        raise ValueError(f"{op}: beta must be >= 0, got {beta}")
    return _smooth_l1_loss(x, y, reduction_code(op, reduction), beta)


@partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _smooth_l1_loss(x, y, reduction, beta):
    d = x.astype(jnp.float32) - y.astype(jnp.float32)
    ad = jnp.abs(d)
    loss = jnp.where(ad < beta, 0.5 * d * d / (beta if beta > 0 else 1.0), ad - 0.5 * beta)
    if reduction == REDUCTIONS["mean"]:
        loss = loss.mean()
    elif reduction == REDUCTIONS["sum"]:
        loss = loss.sum()
    return loss.astype(x.dtype)


def _smooth_l1_loss_fwd(x, y, reduction, beta):
    return _smooth_l1_loss(x, y, reduction, beta), (x, y)


def _smooth_l1_loss_bwd(reduction, beta, res, g):
    x, y = res
    shape = np.broadcast_shapes(x.shape, y.shape)
    # The kernel's "mean" divides by its input's size: give it the broadcast
    # input so that it matches the forward mean.
    grad = smooth_l1_loss_backward(
        g, jnp.broadcast_to(x, shape), y, reduction=reduction, beta=beta
    )
    return _cotangent_like(grad, x), _cotangent_like(-grad, y)


_smooth_l1_loss.defvjp(_smooth_l1_loss_fwd, _smooth_l1_loss_bwd)


# --- logit ----------------------------------------------------------------


def logit(x: Any, eps: float | None = None) -> jax.Array:
    """``log(z / (1 - z))`` with ``z = x``, or ``clip(x, eps, 1 - eps)`` when ``eps`` is given.

    ``torch.logit``; the backward runs aclnnLogitGrad (gradient 0 outside
    ``[eps, 1 - eps]`` when ``eps`` is given).

    Raises:
      TypeError: unsupported dtype.
    """
    (xa,) = _checks.float_arrays("logit", x=x)
    e = None if eps is None else _checks.real_number("logit", "eps", eps)
    return _logit(xa, e)


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def _logit(x, eps):
    z = x.astype(jnp.float32)
    if eps is not None:
        z = jnp.clip(z, eps, 1.0 - eps)
    return jnp.log(z / (1.0 - z)).astype(x.dtype)


def _logit_fwd(x, eps):
    return _logit(x, eps), x


def _logit_bwd(eps, x, g):
    return (logit_grad(x, g, eps=-1.0 if eps is None else eps),)


_logit.defvjp(_logit_fwd, _logit_bwd)


# --- hardshrink -------------------------------------------------------------


def hardshrink(x: Any, lambd: float = 0.5) -> jax.Array:
    """0 where ``|x| <= lambd``, else ``x`` (``torch.nn.functional.hardshrink``:
    a NaN passes through).

    The backward runs aclnnHardshrinkBackward. Both compare in float32, so
    that in float16/bfloat16 they agree on the side of ``lambd`` of every
    element. In a Flax module call it on a layer's output, e.g.
    ``aclnn.hardshrink(nn.Dense(64)(x), 0.1)``.

    Raises:
      TypeError: unsupported dtype.
    """
    (xa,) = _checks.float_arrays("hardshrink", x=x)
    return _hardshrink(xa, _checks.real_number("hardshrink", "lambd", lambd))


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def _hardshrink(x, lambd):
    return jnp.where(shrunk(x, lambd), jnp.zeros((), x.dtype), x)


def _hardshrink_fwd(x, lambd):
    return _hardshrink(x, lambd), x


def _hardshrink_bwd(lambd, x, g):
    return (hardshrink_backward(g, x, lambd=lambd),)


_hardshrink.defvjp(_hardshrink_fwd, _hardshrink_bwd)


# --- swish / silu -------------------------------------------------------------


def swish(x: Any, beta: float = 1.0) -> jax.Array:
    """``x * sigmoid(beta * x)``; the backward runs aclnnSwishBackward.

    An activation like ``flax.linen.swish``: in a Flax module,
    ``aclnn.swish(nn.Dense(64)(x), 1.5)`` (linen) or
    ``aclnn.swish(self.linear(x))`` (nnx).

    Raises:
      TypeError: unsupported dtype.
    """
    (xa,) = _checks.float_arrays("swish", x=x)
    return _swish(xa, _checks.real_number("swish", "beta", beta))


def silu(x: Any) -> jax.Array:
    """``x * sigmoid(x)`` (``torch.nn.functional.silu``, ``flax.linen.silu``): ``swish(x, 1.0)``.

    In a Flax module: ``aclnn.silu(nn.Dense(64)(x))``.
    """
    return swish(x, 1.0)


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def _swish(x, beta):
    xf = x.astype(jnp.float32)
    return (xf * jax.nn.sigmoid(beta * xf)).astype(x.dtype)


def _swish_fwd(x, beta):
    return _swish(x, beta), x


def _swish_bwd(beta, x, g):
    return (swish_backward(g, x, beta=beta),)


_swish.defvjp(_swish_fwd, _swish_bwd)


# --- batch norm -------------------------------------------------------------


def batch_norm(
    x: Any,
    weight: Any | None = None,
    bias: Any | None = None,
    *,
    channel_axis: int = -1,
    eps: float = 1e-5,
    axis_name: Any | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Training-mode batch normalization; the backward runs aclnnBatchNormReduceBackward.

    Statistics run over every axis except ``channel_axis`` (biased variance):
    ``y = (x - mean) / sqrt(var + eps) * weight + bias``. Any channel axis
    works without transposes: the backward views ``x`` as ``(outer, C,
    inner)``, which puts the channel at dim 1 for the aclnn operator. With
    ``axis_name`` the statistics and the backward sums run across that
    mapped axis too (synchronized batch norm under ``shard_map``/``pmap``,
    as PyTorch's SyncBatchNorm: ``sum_dy`` and ``sum_dy_xmu`` are
    all-reduced between the aclnn reduction and the element-wise step).
    Under ``shard_map`` the gradient of a ``weight``/``bias`` shared by the
    devices is the global one, summed once; a per-device copy (``pmap``)
    gets its local part, for the training step's own gradient all-reduce.

    Args:
      x: input of rank >= 2.
      weight: scale of shape ``(C,)``, or None.
      bias: shift of shape ``(C,)``, or None.
      channel_axis: the channel axis of ``x``.
      eps: added to the variance.
      axis_name: a mapped axis name (or tuple) to synchronize over.

    Returns:
      ``(y, batch_mean, batch_var)``; ``y`` like ``x``, the statistics of
      shape ``(C,)`` in float32 for float16/bfloat16 ``x`` (the statistics
      stay float32 end to end, also in the backward, as in PyTorch's
      SyncBatchNorm), carrying no gradient (for running averages).

    Raises:
      TypeError: unsupported or differing dtypes, ``channel_axis`` not an
        integer, ``eps`` not a real number or traced.
      ValueError: ``x`` of rank < 2, ``channel_axis`` out of range, ``eps``
        negative, NaN or infinite, or weight/bias not of shape ``(C,)``.
    """
    op = "batch_norm"
    channel_axis = _checks.integer(op, "channel_axis", channel_axis)
    eps = _checks.real_number(op, "eps", eps)
    if not 0 <= eps < math.inf:
        raise ValueError(f"{op}: eps must be a finite number >= 0, got {eps}")
    tensors = {"x": x}
    if weight is not None:
        tensors["weight"] = weight
    if bias is not None:
        tensors["bias"] = bias
    arrays = dict(zip(tensors, _checks.float_arrays(op, **tensors)))
    xa = arrays["x"]
    if xa.ndim < 2:
        raise ValueError(f"{op}: x must have rank >= 2, got shape {xa.shape}")
    if not -xa.ndim <= channel_axis < xa.ndim:
        raise ValueError(f"{op}: channel_axis {channel_axis} is out of range for shape {xa.shape}")
    axis = channel_axis % xa.ndim
    channels = xa.shape[axis]
    for name in ("weight", "bias"):
        if name in arrays and arrays[name].shape != (channels,):
            raise ValueError(
                f"{op}: {name} must have shape ({channels},) for x of shape {xa.shape} "
                f"with channel_axis={channel_axis}; got {arrays[name].shape}"
            )
    return _batch_norm(
        xa, arrays.get("weight"), arrays.get("bias"), axis, eps, axis_name
    )


def _bn_statistics(x, axis, axis_name):
    """Mean and biased variance (float32, shape (C,)) and the element count per channel."""
    axes = tuple(i for i in range(x.ndim) if i != axis)
    xf = x.astype(jnp.float32)
    count = math.prod(x.shape[i] for i in axes)
    total = xf.sum(axes)
    if axis_name is not None:
        count = jax.lax.psum(count, axis_name)
        total = jax.lax.psum(total, axis_name)
    mean = total / count
    centered = xf - _channel(mean, x.ndim, axis)
    sq = (centered * centered).sum(axes)
    if axis_name is not None:
        sq = jax.lax.psum(sq, axis_name)
    return mean, sq / count, count


def _parameter_gradient(local, global_, param, x, axis_name):
    """The gradient of a weight or bias from this device's sums ``local``
    and, with ``axis_name``, the sums over that axis ``global_``.

    A parameter shared by the devices of ``axis_name`` (unvarying under
    ``shard_map``) gets the global sums; under ``shard_map`` it also collects
    the parts of other mesh axes over which ``x`` varies (see
    :func:`_cotangent_like`). A per-device copy (``pmap``, or a parameter
    that varies itself) gets its local part, and summing is left to the
    caller, as PyTorch's SyncBatchNorm leaves it to DDP; so does shard_map
    with ``check_vma=False``, whose transpose sums the gradients of
    replicated inputs itself.
    """
    value = local
    if axis_name is not None:
        names = set(axis_name) if isinstance(axis_name, (tuple, list)) else {axis_name}
        if names <= _compat.varying_axes(x) - _compat.varying_axes(param):
            value = global_
    return _cotangent_like(value, param)


def _channel(v, ndim, axis):
    """A (C,) vector shaped to broadcast along ``axis``."""
    return v.reshape((1,) * axis + (-1,) + (1,) * (ndim - axis - 1))


@partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _batch_norm(x, weight, bias, axis, eps, axis_name):
    return _batch_norm_fwd(x, weight, bias, axis, eps, axis_name)[0]


def _batch_norm_fwd(x, weight, bias, axis, eps, axis_name):
    mean, var, count = _bn_statistics(x, axis, axis_name)
    invstd = jax.lax.rsqrt(var + eps)
    y = (x.astype(jnp.float32) - _channel(mean, x.ndim, axis)) * _channel(invstd, x.ndim, axis)
    if weight is not None:
        y = y * _channel(weight.astype(jnp.float32), x.ndim, axis)
    if bias is not None:
        y = y + _channel(bias.astype(jnp.float32), x.ndim, axis)
    out = (y.astype(x.dtype), mean, var)
    return out, (x, weight, bias, mean, invstd, jnp.float32(count))


def _batch_norm_bwd(axis, eps, axis_name, res, cts):
    x, weight, bias, mean, invstd, count = res
    gy = cts[0]
    dtype = x.dtype
    outer = math.prod(x.shape[:axis])
    inner = math.prod(x.shape[axis + 1 :])
    channels = x.shape[axis]
    as3 = lambda a: a.reshape(outer, channels, inner)  # noqa: E731
    # The statistics (and so the sums) stay float32 for half-precision x.
    sum_dy, sum_dy_xmu, grad_weight, grad_bias = reduce_backward(
        as3(gy),
        as3(x),
        mean,
        invstd,
        None if weight is None else weight.astype(jnp.float32),
        input_g=True,
        weight_g=weight is not None,
        bias_g=bias is not None,
    )
    if axis_name is not None:
        # SyncBatchNorm: the element-wise step needs the global sums.
        sum_dy, sum_dy_xmu = jax.lax.psum((sum_dy, sum_dy_xmu), axis_name)
    if grad_weight is not None:
        grad_weight = _parameter_gradient(
            grad_weight, sum_dy_xmu * invstd, weight, x, axis_name).astype(weight.dtype)
    if grad_bias is not None:
        grad_bias = _parameter_gradient(grad_bias, sum_dy, bias, x, axis_name).astype(bias.dtype)
    scale = invstd if weight is None else invstd * weight.astype(jnp.float32)
    ch = lambda v: _channel(v, x.ndim, axis)  # noqa: E731
    xmu = x.astype(jnp.float32) - ch(mean)
    grad_x = (
        gy.astype(jnp.float32)
        - ch(sum_dy / count)
        - xmu * ch(invstd * invstd * sum_dy_xmu / count)
    ) * ch(scale)
    return grad_x.astype(dtype), grad_weight, grad_bias


_batch_norm.defvjp(_batch_norm_fwd, _batch_norm_bwd)
