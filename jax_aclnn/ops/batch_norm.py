"""``batch_norm``: training-mode batch normalization, whose derivative runs
aclnnBatchNormReduceBackward (:mod:`jax_aclnn.ops.batch_norm_reduce_backward`)."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.core import ShapedArray

from jax_aclnn import _checks, _compat, network
from jax_aclnn.ops.batch_norm_reduce_backward import _op, reduce_backward

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

    Mixed precision (half-precision ``x`` with float32 ``weight`` and
    ``bias``: PyTorch AMP's layout, Flax's ``param_dtype=float32,
    dtype=bfloat16``): ``x``, ``weight`` and ``bias`` may each have any
    supported dtype. Everything is computed in float32; ``y`` and the
    gradient of ``x`` are in ``x``'s dtype, the gradients of ``weight`` and
    ``bias`` in theirs, as in ATen (the normalization layers keep their
    input's dtype rather than promoting).

    Args:
      x: input of rank >= 2, float32, float16 or bfloat16.
      weight: scale of shape ``(C,)`` (any of those dtypes), or None.
      bias: shift of shape ``(C,)`` (any of those dtypes), or None.
      channel_axis: the channel axis of ``x``.
      eps: added to the variance.
      axis_name: a mapped axis name (or tuple) to synchronize over.

    Returns:
      ``(y, batch_mean, batch_var)``; ``y`` like ``x``, the statistics of
      shape ``(C,)`` in float32 for float16/bfloat16 ``x`` (the statistics
      stay float32 end to end, also in the backward, as in PyTorch's
      SyncBatchNorm), carrying no gradient (for running averages).

    Raises:
      TypeError: an unsupported dtype, ``channel_axis`` not an integer,
        ``eps`` not a real number or traced.
      ValueError: ``x`` of rank < 2, ``channel_axis`` out of range, ``eps``
        negative, NaN or infinite, or weight/bias not of shape ``(C,)``.

    Transformations: all (:mod:`jax_aclnn.ops`), in ``x``, ``weight`` and
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
    # Each in its own dtype: the parameters' may differ from x's (mixed precision).
    arrays = {name: _checks.float_arrays(op, **{name: value})[0]
              for name, value in (("x", x), ("weight", weight), ("bias", bias))
              if name == "x" or value is not None}
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
    if axis_name is not None:
        _compat.repair_psum_batching()
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
    rest = _op.transpose(
        cts, [x3, mean, invstd, none if w32 is None else w32], ShapedArray(x3.shape, dtype),
        has_weight=weight is not None, input_g=True, weight_g=weight is not None,
        bias_g=bias is not None)
    ty = as3(tx).astype(jnp.float32) * _channel(scale, x3.ndim, 1) + rest.astype(jnp.float32)
    zero = jnp.zeros_like(out[1])
    return out, (back(ty.astype(dtype)), zero, zero)


def _channel_view(x, axis):
    """Functions viewing arrays shaped like ``x`` with the channel ``axis``
    at dim 1, as aclnnBatchNormReduceBackward takes them, and back.

    Nothing when ``axis`` is 1 (a reshape, even a free one, XLA compiles
    into a copy for half types); else a reshape to ``(outer, C, inner)``,
    unless it would merge a dimension sharded by ``x``'s type (explicit
    sharding) with another: then the channel axis moves to dim 1 (a
    transpose) and the dimensions keep their sharding. A dimension sharded
    alone in its group keeps its sharding through the reshape.
    """
    if axis == 1:  # already (N, C, *)
        return (lambda a: a), (lambda a: a)
    sharded = _compat.sharded_dims(x)
    merges = lambda dims: len(dims) > 1 and bool(sharded & set(dims))  # noqa: E731
    if merges(range(axis)) or merges(range(axis + 1, x.ndim)):
        return (lambda a: jnp.moveaxis(a, axis, 1)), (lambda a: jnp.moveaxis(a, 1, axis))
    shape3 = (math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:]))
    if not sharded:
        return (lambda a: a.reshape(shape3)), (lambda a: a.reshape(x.shape))
    spec = _compat.dim_specs(x)
    alone = lambda group: next((e for e in group if e is not None), None)  # noqa: E731
    spec3 = (alone(spec[:axis]), spec[axis], alone(spec[axis + 1:]))
    return (lambda a: _compat.reshape(a, shape3, spec3)), (
        lambda a: _compat.reshape(a, x.shape, spec))


# The normalization of the every-operator network (jax_aclnn.network).
network.register("batch_norm", "normalization",
                  lambda h, axis_name: batch_norm(h, axis_name=axis_name)[0],
                  lambda h, axis_name: _batch_norm.fun(h, None, None, h.ndim - 1, 1e-5,
                                                       axis_name)[0])
