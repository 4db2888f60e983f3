"""The computation shared by the linen and nnx BatchNorm layers.

Training mode runs :func:`jax_aclnn.batch_norm` (whose gradient runs
aclnnBatchNormReduceBackward) on ``x`` viewed with its feature axes merged
into one channel axis; inference mode is Flax's own element-wise formula.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn import _compat
from jax_aclnn.ops import batch_norm


def feature_axes(ndim: int, axis: Any) -> tuple[int, ...]:
    """Flax's ``axis`` (an int or a sequence) as sorted, non-negative axes."""
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(sorted({a + ndim if a < 0 else a for a in axes}))


def check_supported(layer: str, *, mask: Any, axis_index_groups: Any) -> None:
    """Raises NotImplementedError for the Flax options the aclnn path lacks."""
    if mask is not None:
        raise NotImplementedError(
            f"{layer}: mask is not supported in training mode (aclnnBatchNormReduceBackward "
            "reduces over every element); use flax's BatchNorm for masked statistics"
        )
    if axis_index_groups is not None:
        raise NotImplementedError(
            f"{layer}: axis_index_groups is not supported (jax_aclnn.batch_norm synchronizes "
            "over the whole axis_name); use flax's BatchNorm for grouped statistics"
        )


def train(
    x: jax.Array,
    scale: jax.Array | None,
    bias: jax.Array | None,
    *,
    axes: tuple[int, ...],
    epsilon: float,
    axis_name: Any,
    compute_dtype: Any,
    out_dtype: Any,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Batch statistics over every axis not in ``axes``, and the normalized ``x``.

    ``x``, ``scale`` and ``bias`` are cast to ``compute_dtype`` (reductions
    run in float32 regardless); ``y`` is returned in ``out_dtype``, the
    statistics (shape: ``x``'s feature dims) carry no gradient.
    """
    ndim = x.ndim
    features = tuple(x.shape[a] for a in axes)
    moved = bool(axes) and axes != tuple(range(axes[0], axes[0] + len(axes)))
    if moved:
        # Non-adjacent feature axes: gather them at the end, then merge.
        x = jnp.moveaxis(x, axes, tuple(range(ndim - len(axes), ndim)))
    first = ndim - len(axes) if moved or not axes else axes[0]
    shape = x.shape
    merged = shape[:first] + (math.prod(features),) + shape[first + len(axes):]
    channel = first
    if len(merged) < 2:
        merged, channel = (1,) + merged, channel + 1
    flat = lambda p: None if p is None else p.astype(compute_dtype).reshape(-1)  # noqa: E731
    y, mean, var = batch_norm(
        x.astype(compute_dtype).reshape(merged), flat(scale), flat(bias),
        channel_axis=channel, eps=epsilon, axis_name=axis_name,
    )
    y = y.reshape(shape)
    if moved:
        y = jnp.moveaxis(y, tuple(range(ndim - len(axes), ndim)), axes)
    stats = lambda s: jax.lax.stop_gradient(s).reshape(features)  # noqa: E731
    return y.astype(out_dtype), stats(mean), stats(var)


def infer(x, mean, var, scale, bias, *, axes: tuple[int, ...], epsilon: float, out_dtype):
    """Flax's normalization with given statistics (inference mode), same formula and order."""
    shape = [1] * x.ndim
    for a in axes:
        shape[a] = x.shape[a]
    y = x - mean.reshape(shape)
    mul = jax.lax.rsqrt(var.reshape(shape) + epsilon)
    if scale is not None:
        mul = mul * scale.reshape(shape)
    y = y * mul
    if bias is not None:
        y = y + bias.reshape(shape)
    return jnp.asarray(y, out_dtype)


def statistics_dtype(x: jax.Array, dtype: Any, force_float32: bool = True) -> Any:
    """The dtype Flax gives batch statistics: ``dtype`` (default ``x``'s),
    promoted to at least float32 unless ``force_float32`` is False."""
    d = jnp.result_type(x) if dtype is None else dtype
    return jnp.promote_types(d, jnp.float32) if force_float32 else jnp.dtype(d)


def running_average(old: jax.Array, batch: jax.Array, momentum: float, dtype: Any) -> jax.Array:
    """Flax's update ``momentum * old + (1 - momentum) * batch``, the batch
    statistic (the biased variance, as Flax) first cast to ``dtype``
    (:func:`statistics_dtype`), whatever dtype ``jax_aclnn.batch_norm``
    returned it in; the result dtype follows JAX's promotion, as Flax's.
    The batch statistic takes ``old``'s sharding (explicit mesh axes): with
    the features sharded, the statistics of the batch are sharded as they,
    while the variable keeps its own type (Flax's nnx layer refuses to
    store the sharded update)."""
    batch = _compat.reshard_like(batch.astype(dtype), jax.typeof(old))
    return momentum * old + (1 - momentum) * batch
