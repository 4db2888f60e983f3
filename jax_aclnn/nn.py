"""Differentiable forward operators whose backward runs an aclnn operator.

Each is a ``jax.custom_jvp`` function: the forward is plain ``jax.numpy``
(XLA fuses it); its tangent map is written with the matching aclnn operator
of :mod:`jax_aclnn.ops` (or that operator's transpose, see
:mod:`jax_aclnn._autodiff`) so that

* reverse mode (``grad``, ``vjp``, ``jacrev``) runs the aclnn backward
  operator as one XLA FFI custom call per use, exactly as a hand-written VJP;
* forward mode (``jvp``, ``linearize``, ``jacfwd``) runs the same aclnn
  operator on the tangent (swish, silu, hardshrink, logit, smooth L1 with
  ``reduction="none"``: the tangent map is the operator; smooth L1
  ``"mean"``/``"sum"``: the operator then a sum; batch norm: the reduce
  operator on the tangent, then element-wise XLA code);
* higher orders (``hessian``, ``grad`` of ``grad``) differentiate those
  operators through their own JVP rules (second derivatives of the
  operators are XLA code), and every one of these composes with ``jit``,
  ``vmap`` (one custom call per operator use) and the sharding rules.

So each operator supports ``jit``, ``grad``, ``vjp``, ``jvp``,
``linearize``, ``jacfwd``, ``jacrev``, ``hessian``, ``vmap`` and derivatives
of any order; each docstring says which aclnn operator runs in each
direction.

Forward values follow ``torch.nn.functional`` of the same name;
half-precision inputs are computed in float32 and returned in their own
dtype.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from jax.core import ShapedArray

from jax_aclnn import _checks, _compat
from jax_aclnn.ops import (
    hardshrink_backward,
    logit_grad,
    primitive,
    smooth_l1_loss_backward,
    swish_backward,
)
from jax_aclnn.ops.batch_norm_reduce_backward import reduce_backward
from jax_aclnn.ops.hardshrink_backward import shrunk
from jax_aclnn.ops.smooth_l1_loss_backward import REDUCTIONS, reduction_code


# --- smooth L1 ------------------------------------------------------------


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

    Args:
      input: predictions.
      target: targets.
      reduction: ``"none"``, ``"mean"`` or ``"sum"`` (or 0, 1, 2).
      beta: the L1/L2 switch point, >= 0.

    Returns:
      The loss: a scalar for ``"mean"``/``"sum"``, else the broadcast shape.

    Raises:
      TypeError: unsupported or differing dtypes, a tensor that is None.
      ValueError: shapes do not broadcast, ``beta < 0`` or beyond float32's
        range, unknown reduction.

    Transformations: all (module docstring). Reverse mode:
    aclnnSmoothL1LossBackward on the cotangent (a scalar for
    ``"mean"``/``"sum"``); forward mode: the same operator on ``t_input -
    t_target``, summed for ``"mean"``/``"sum"``.
    """
    op = "smooth_l1_loss"
    x, y = _checks.float_arrays(op, input=input, target=target)
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
        dloss = primitive("smooth_l1_loss_backward").transpose(
            [t], [xb, y], ShapedArray((), x.dtype), reduction=reduction, beta=beta)
    return _smooth_l1_loss(x, y, reduction, beta), dloss


# --- logit ----------------------------------------------------------------


def logit(x: Any, eps: float | None = None) -> jax.Array:
    """``log(z / (1 - z))`` with ``z = x``, or ``clip(x, eps, 1 - eps)`` when ``eps`` is given.

    ``torch.logit``; the derivative is aclnnLogitGrad (0 outside ``[eps, 1 -
    eps]`` when ``eps`` is given), on the cotangent in reverse mode and on
    the tangent in forward mode. Transformations: all (module docstring).

    Raises:
      TypeError: unsupported dtype, ``x`` is None.
    """
    (xa,) = _checks.float_arrays("logit", x=x)
    e = None if eps is None else _checks.real_number("logit", "eps", eps)
    return _logit(xa, e)


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def _logit(x, eps):
    z = x.astype(jnp.float32)
    if eps is not None:
        z = jnp.clip(z, eps, 1.0 - eps)
    return jnp.log(z / (1.0 - z)).astype(x.dtype)


@_logit.defjvp
def _logit_jvp(eps, primals, tangents):
    (x,), (t,) = primals, tangents
    return _logit(x, eps), logit_grad(x, t, eps=-1.0 if eps is None else eps)


# --- hardshrink -------------------------------------------------------------


def hardshrink(x: Any, lambd: float = 0.5) -> jax.Array:
    """0 where ``|x| <= lambd``, else ``x`` (``torch.nn.functional.hardshrink``:
    a NaN passes through).

    The derivative is aclnnHardshrinkBackward, on the cotangent in reverse
    mode and on the tangent in forward mode. Both compare in float32, so
    that in float16/bfloat16 the forward and the derivative agree on the
    side of ``lambd`` of every element. Transformations: all (module
    docstring). In a Flax module call it on a layer's output, e.g.
    ``aclnn.hardshrink(nn.Dense(64)(x), 0.1)``.

    Raises:
      TypeError: unsupported dtype, ``x`` is None.
      ValueError: ``lambd`` beyond float32's range (such as ``1e40``).
    """
    (xa,) = _checks.float_arrays("hardshrink", x=x)
    return _hardshrink(xa, _checks.float32_number("hardshrink", "lambd", lambd))


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def _hardshrink(x, lambd):
    return jnp.where(shrunk(x, lambd), jnp.zeros((), x.dtype), x)


@_hardshrink.defjvp
def _hardshrink_jvp(lambd, primals, tangents):
    (x,), (t,) = primals, tangents
    return _hardshrink(x, lambd), hardshrink_backward(t, x, lambd=lambd)


# --- swish / silu -------------------------------------------------------------


def swish(x: Any, beta: float = 1.0) -> jax.Array:
    """``x * sigmoid(beta * x)``.

    The derivative is aclnnSwishBackward, on the cotangent in reverse mode
    and on the tangent in forward mode. Transformations: all (module
    docstring).

    An activation like ``flax.linen.swish``: in a Flax module,
    ``aclnn.swish(nn.Dense(64)(x), 1.5)`` (linen) or
    ``aclnn.swish(self.linear(x))`` (nnx).

    Raises:
      TypeError: unsupported dtype, ``x`` is None.
      ValueError: ``beta`` beyond float32's range (such as ``1e40``).
    """
    (xa,) = _checks.float_arrays("swish", x=x)
    return _swish(xa, _checks.float32_number("swish", "beta", beta))


def silu(x: Any) -> jax.Array:
    """``x * sigmoid(x)`` (``torch.nn.functional.silu``, ``flax.linen.silu``):
    ``swish(x, 1.0)``, with its transformations (aclnnSwishBackward in both
    directions). In a Flax module: ``aclnn.silu(nn.Dense(64)(x))``.
    """
    return swish(x, 1.0)


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def _swish(x, beta):
    xf = x.astype(jnp.float32)
    return (xf * jax.nn.sigmoid(beta * xf)).astype(x.dtype)


@_swish.defjvp
def _swish_jvp(beta, primals, tangents):
    (x,), (t,) = primals, tangents
    return _swish(x, beta), swish_backward(t, x, beta=beta)


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
    """Training-mode batch normalization, through aclnnBatchNormReduceBackward.

    Statistics run over every axis except ``channel_axis`` (biased variance):
    ``y = (x - mean) / sqrt(var + eps) * weight + bias``. Any channel axis
    works without transposes: the backward views ``x`` as ``(outer, C,
    inner)``, which puts the channel at dim 1 for the aclnn operator (under
    explicit sharding, where that view would merge a sharded dimension with
    another, it moves the channel axis to dim 1 instead). Any rank works. With
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

    Transformations: all (module docstring), in ``x``, ``weight`` and
    ``bias``. Reverse mode: one aclnnBatchNormReduceBackward of the
    cotangent (every result the parameters need), then XLA element-wise
    code; forward mode: aclnnBatchNormReduceBackward of the tangent of
    ``x`` (its per-channel sums), then XLA element-wise code.
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


def _channel(v, ndim, axis):
    """A (C,) vector shaped to broadcast along ``axis``."""
    return v.reshape((1,) * axis + (-1,) + (1,) * (ndim - axis - 1))


@partial(jax.custom_jvp, nondiff_argnums=(3, 4, 5))
def _batch_norm(x, weight, bias, axis, eps, axis_name):
    return _batch_norm_forward(x, weight, bias, axis, eps, axis_name)[0]


def _batch_norm_forward(x, weight, bias, axis, eps, axis_name):
    """The outputs, then mean and invstd (float32) and the count per channel."""
    mean, var, count = _bn_statistics(x, axis, axis_name)
    invstd = jax.lax.rsqrt(var + eps)
    y = (x.astype(jnp.float32) - _channel(mean, x.ndim, axis)) * _channel(invstd, x.ndim, axis)
    if weight is not None:
        y = y * _channel(weight.astype(jnp.float32), x.ndim, axis)
    if bias is not None:
        y = y + _channel(bias.astype(jnp.float32), x.ndim, axis)
    out = (y.astype(x.dtype), mean, var)
    return out, mean, invstd, count


@_batch_norm.defjvp
def _batch_norm_jvp(axis, eps, axis_name, primals, tangents):
    """``dy = scale * (dx - mean(dx) - xhat * mean(dx * xhat)) + dw * xhat + db``
    (``scale = invstd * weight``, means per channel, over ``axis_name`` too).

    Viewed as ``(outer, C, inner)``, the per-channel sums of ``dx`` are
    aclnnBatchNormReduceBackward on ``dx``, and everything after ``scale *
    dx`` is that operator's transpose in ``grad_out`` applied to per-channel
    vectors, one per result (``sum_dy``, ``sum_dy_xmu``, ``grad_weight``,
    ``grad_bias``). Reverse mode transposes the transpose back into one
    aclnnBatchNormReduceBackward of the incoming gradient with every mask the
    parameters need; the all-reduces of synchronized batch norm and the
    summing of a shared parameter's gradient over the devices are the
    transposes of the forward's ``psum`` and of JAX's own varying-axes casts.
    The statistics carry no tangent.
    """
    x, weight, bias = primals
    tx, tw, tb = tangents
    out, mean, invstd, count = _batch_norm_forward(x, weight, bias, axis, eps, axis_name)
    dtype = x.dtype
    as3, back = _channel_view(x, axis)
    x3 = as3(x)
    # The statistics, the weight and so the sums stay float32 for
    # half-precision x (the operator's outputs take mean's dtype).
    w32 = None if weight is None else weight.astype(jnp.float32)
    sums = reduce_backward(as3(tx), x3, mean, invstd, None,
                           input_g=True, weight_g=False, bias_g=False)[:2]
    if axis_name is not None:
        sums = jax.lax.psum(sums, axis_name)
    scale = invstd if weight is None else invstd * weight.astype(jnp.float32)
    none = jnp.zeros((0,), jnp.float32)  # the operator's placeholder of an absent tensor
    cts = [-scale * sums[0] / count,
           -scale * invstd * invstd * sums[1] / count,
           none if weight is None else tw.astype(jnp.float32),
           none if bias is None else tb.astype(jnp.float32)]
    rest = primitive("batch_norm_reduce_backward").transpose(
        cts, [x3, mean, invstd, none if w32 is None else w32], ShapedArray(x3.shape, dtype),
        has_weight=weight is not None, input_g=True, weight_g=weight is not None,
        bias_g=bias is not None)
    ty = as3(tx).astype(jnp.float32) * _channel(scale, x3.ndim, 1) + rest.astype(jnp.float32)
    zero = jnp.zeros_like(out[1])
    return out, (back(ty.astype(dtype)), zero, zero)


def _channel_view(x, axis):
    """Functions viewing arrays shaped like ``x`` with the channel ``axis``
    at dim 1, as aclnnBatchNormReduceBackward takes them, and back.

    A reshape to ``(outer, C, inner)`` (free), unless it would merge a
    dimension sharded by ``x``'s type (explicit sharding) with another: then
    the channel axis moves to dim 1 (a transpose) and the dimensions keep
    their sharding.
    """
    sharded = _compat.sharded_dims(x)
    merges = lambda dims: len(dims) > 1 and bool(sharded & set(dims))  # noqa: E731
    if merges(range(axis)) or merges(range(axis + 1, x.ndim)):
        return (lambda a: jnp.moveaxis(a, axis, 1)), (lambda a: jnp.moveaxis(a, 1, axis))
    shape3 = (math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:]))
    return (lambda a: a.reshape(shape3)), (lambda a: a.reshape(x.shape))
