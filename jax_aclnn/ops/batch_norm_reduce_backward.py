"""aclnnBatchNormReduceBackward: the per-channel reductions of the batch-norm backward."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from jax_aclnn import _checks, _compat
from jax_aclnn._batching import batch_size
from jax_aclnn._compat import not_mapped
from jax_aclnn._primitive import AclnnPrimitive

def _wanted(input_g: bool, weight_g: bool, bias_g: bool) -> tuple[bool, ...]:
    return (input_g, input_g, weight_g, bias_g)


class BatchNormReduceBackward(AclnnPrimitive):
    """Operands: grad_out, input (N, C, ...), mean, invstd, weight (C,).

    ``weight`` is a zero-sized placeholder when ``has_weight`` is False;
    outputs whose mask flag is off are zero-sized placeholders. The (C,)
    vectors share one dtype, the input's or float32 (float32 statistics with
    a half-precision input, as ATen's ``batch_norm_backward_reduce`` takes
    them); the outputs have the dtype of ``mean``. On the NPU platform a
    bfloat16 ``grad_out``/``input`` is computed in float32 (CANN's operator
    takes float32 and float16 only).
    """

    name = "batch_norm_reduce_backward"
    aclnn_name = "aclnnBatchNormReduceBackward"
    operand_names = ("grad_out", "input", "mean", "invstd", "weight")
    multiple_results = True
    npu_float32_dtypes = (jnp.dtype(jnp.bfloat16),)
    self_adjoint = False  # sums: the transpose broadcasts
    attributes = {"has_weight": np.bool_, "input_g": np.bool_, "weight_g": np.bool_,
                  "bias_g": np.bool_}

    def abstract_eval(self, g, x, mean, invstd, weight, *, has_weight, input_g, weight_g, bias_g):
        channels = x.shape[1]
        return [
            ShapedArray((channels if w else 0,), mean.dtype)
            for w in _wanted(input_g, weight_g, bias_g)
        ]

    def reference(self, g, x, mean, invstd, weight, *, has_weight, input_g, weight_g, bias_g):
        axes = (0,) + tuple(range(2, x.ndim))
        bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        gf = g.astype(jnp.float32)
        xmu = x.astype(jnp.float32) - mean.astype(jnp.float32).reshape(bshape)
        sum_dy = gf.sum(axes)
        sum_dy_xmu = (gf * xmu).sum(axes)
        values = (sum_dy, sum_dy_xmu, sum_dy_xmu * invstd.astype(jnp.float32), sum_dy)
        return [
            v.astype(mean.dtype) if w else jnp.zeros((0,), mean.dtype)
            for v, w in zip(values, _wanted(input_g, weight_g, bias_g))
        ]

    def transpose_reference(self, cts, others, shape, dtype, *, has_weight, input_g, weight_g,
                            bias_g):
        # Each result is a per-channel sum of grad_out times a factor (1,
        # x - mean or (x - mean) * invstd): its transpose broadcasts the
        # cotangent times that factor.
        x, mean, invstd, _ = others
        bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        ch = lambda v: v.astype(jnp.float32).reshape(bshape)  # noqa: E731
        xmu = x.astype(jnp.float32) - ch(mean)
        ct_sum_dy, ct_sum_dy_xmu, ct_weight, ct_bias = cts
        out = jnp.zeros(shape, jnp.float32)
        if input_g:
            out = out + ch(ct_sum_dy) + xmu * ch(ct_sum_dy_xmu)
        if weight_g:
            out = out + xmu * ch(ct_weight.astype(jnp.float32) * invstd.astype(jnp.float32))
        if bias_g:
            out = out + ch(ct_bias)
        return out.astype(dtype)

    def factors(self, in_avals, out_avals, **params):
        # The channel factor is kept; every other data dimension is summed
        # over (a reduction factor: sharded, the results are psum-ed).
        g = in_avals[0]
        data = tuple("c" if i == 1 else f"n{i}" for i in range(g.ndim))

        def per_channel(a):  # zero-sized placeholders are never sharded
            return ("c",) if a.shape[0] else (None,)

        return ([data, data] + [per_channel(a) for a in in_avals[2:]],
                [per_channel(o) for o in out_avals])

    def batch(self, args, dims, **params):
        # Fold the mapped axis into the channel axis: the example axis moves
        # next to the channels, (N, B, C, ...) -> (N, B*C, ...), so one call
        # computes every example's per-channel sums.
        size = batch_size(args, dims)
        g, x, mean, invstd, weight = args
        gd, xd, md, sd, wd = dims

        def fold_data(a, d):
            a = jnp.broadcast_to(a, (size,) + a.shape) if d is not_mapped else jnp.moveaxis(a, d, 0)
            a = jnp.moveaxis(a, 0, 1)
            return a.reshape((a.shape[0], size * a.shape[2]) + a.shape[3:])

        def fold_channels(a, d):
            a = jnp.broadcast_to(a, (size,) + a.shape) if d is not_mapped else jnp.moveaxis(a, d, 0)
            return a.reshape(-1)

        outs = self.bind(
            fold_data(g, gd),
            fold_data(x, xd),
            fold_channels(mean, md),
            fold_channels(invstd, sd),
            fold_channels(weight, wd) if params["has_weight"] else weight,  # placeholder
            **params,
        )
        result, out_dims = [], []
        for o in outs:
            if o.shape[0] == 0:
                result.append(o)
                out_dims.append(not_mapped)
            else:
                result.append(o.reshape(size, -1))
                out_dims.append(0)
        return result, out_dims


_op = BatchNormReduceBackward()


def batch_norm_reduce_backward(
    grad_out: Any,
    input: Any,  # noqa: A002 - PyTorch/aclnn argument name
    mean: Any,
    invstd: Any,
    weight: Any | None,
    *,
    input_g: bool = True,
    weight_g: bool = True,
    bias_g: bool = True,
) -> tuple[jax.Array | None, jax.Array | None, jax.Array | None, jax.Array | None]:
    """Per-channel reductions of the batch-norm backward (aclnnBatchNormReduceBackward).

    The channel axis is dim 1 (aclnn/PyTorch layout); sums run over every
    other axis: ``sum_dy = sum(g)``, ``sum_dy_xmu = sum(g * (x - mean))``,
    ``grad_weight = sum_dy_xmu * invstd``, ``grad_bias = sum_dy``. These are
    sums, not means, as in ATen's ``batch_norm_backward_reduce``. Half-precision
    inputs are accumulated in float32. On the NPU platform bfloat16 tensors
    are cast to float32 before the call and the results back (CANN's
    operator takes float32 and float16); the bundled host provider (the CPU)
    takes bfloat16 directly.

    Args:
      grad_out: gradient of the batch-norm output, shape ``(N, C, ...)``.
      input: the batch-norm input, same shape as ``grad_out``, rank 2 to 8,
        ``C >= 1``.
      mean: the per-channel mean used in the forward, shape ``(C,)``.
      invstd: the per-channel ``1 / sqrt(var + eps)``, shape ``(C,)``.
      weight: the scale, shape ``(C,)``, or None (ones).
      input_g: compute ``sum_dy`` and ``sum_dy_xmu``.
      weight_g: compute ``grad_weight``.
      bias_g: compute ``grad_bias``.

    Returns:
      ``(sum_dy, sum_dy_xmu, grad_weight, grad_bias)``, each of shape ``(C,)``
      in the input dtype, or None where its mask flag is False.

    Transformations: all (:mod:`jax_aclnn.ops`); linear in ``grad_out``,
    but not its own transpose: the transpose there (reverse mode)
    broadcasts and scales the cotangents in XLA code (``batch_norm``'s
    forward mode uses it, and reverse mode turns it back into this
    operator).

    Raises:
      TypeError: a tensor is not float32/float16/bfloat16, dtypes differ, or
        a mask flag is not a bool.
      ValueError: shapes break the rule above.
    """
    op = _op.name
    masks = {name: _checks.flag(op, name, value)
             for name, value in (("input_g", input_g), ("weight_g", weight_g), ("bias_g", bias_g))}
    tensors = {"grad_out": grad_out, "input": input, "mean": mean, "invstd": invstd}
    if weight is not None:
        tensors["weight"] = weight
    arrays = _checks.float_arrays(op, **tensors)
    g, x, m, s = arrays[:4]
    if x.ndim < 2:
        raise ValueError(f"{op}: input must have rank 2 to 8, got shape {x.shape}")
    _checks.same_shape(op, ("grad_out", "input"), (g, x))
    channels = x.shape[1]
    if channels < 1:
        raise ValueError(f"{op}: input needs C >= 1 channels (dim 1), got shape {x.shape}")
    for name, a in zip(tensors, arrays):
        if name in ("mean", "invstd", "weight") and a.shape != (channels,):
            raise ValueError(
                f"{op}: {name} must have shape ({channels},) for input of shape "
                f"{x.shape}; got {a.shape}"
            )
    return reduce_backward(g, x, m, s, arrays[4] if weight is not None else None, **masks)


def reduce_backward(g: jax.Array, x: jax.Array, mean: jax.Array, invstd: jax.Array,
                    weight: jax.Array | None, *, input_g: bool, weight_g: bool,
                    bias_g: bool) -> tuple[jax.Array | None, ...]:
    """The operator on checked arrays, with None for the outputs not wanted.

    Unlike the public function, the (C,) vectors may be float32 for a
    half-precision ``g``/``x`` (the outputs are then float32):
    :func:`batch_norm` keeps its statistics in float32.
    """
    w = weight if weight is not None else jnp.zeros((0,), mean.dtype)
    outs = _op.bind(g, x, mean, invstd, w, has_weight=weight is not None,
                    input_g=input_g, weight_g=weight_g, bias_g=bias_g)
    wanted = _wanted(input_g, weight_g, bias_g)
    return tuple(o if keep else None for o, keep in zip(outs, wanted))


# --- the differentiable operator whose derivative runs it ----------


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
    outer = math.prod(x.shape[:axis])
    inner = math.prod(x.shape[axis + 1 :])
    as3 = lambda a: a.reshape(outer, x.shape[axis], inner)  # noqa: E731
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
    ty = as3(tx).astype(jnp.float32) * scale.reshape(1, -1, 1) + rest.astype(jnp.float32)
    zero = jnp.zeros_like(out[1])
    return out, (ty.astype(dtype).reshape(x.shape), zero, zero)
