"""``flax.linen.BatchNorm`` whose training-mode gradient runs
aclnnBatchNormReduceBackward, and ``flax.linen.RMSNorm`` on aclnnRmsNorm /
aclnnRmsNormGrad.

Swap the import and nothing else changes::

    from jax_aclnn.flax import linen as aclnn_nn   # instead of flax.linen.BatchNorm
    x = aclnn_nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
    x = aclnn_nn.RMSNorm()(x)

See :class:`BatchNorm` and :class:`RMSNorm`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax.linen import dtypes, module

from jax_aclnn.flax import _batch_norm as _bn
from jax_aclnn.flax import _rms_norm as _rms


class BatchNorm(nn.BatchNorm):
    """Drop-in ``flax.linen.BatchNorm`` (a subclass: same fields, defaults,
    variables and auto-generated name, so checkpoints interchange both ways).

    Variables: ``params`` ``scale``/``bias`` (feature shape, ``param_dtype``)
    and ``batch_stats`` ``mean``/``var`` (float32; ``param_dtype`` when
    ``force_float32_reductions=False``), as Flax.

    Training mode (``use_running_average=False``, the field or the call
    argument) calls :func:`jax_aclnn.batch_norm`: ``y = (x - mean) /
    sqrt(var + epsilon) * scale + bias`` with the mean and the biased variance
    over every axis except ``axis`` (one int or several; several are merged
    into one channel axis, non-adjacent ones moved together first), reduced in
    float32, synchronized over ``axis_name`` (not while initializing, as
    Flax). Its gradient runs aclnnBatchNormReduceBackward. The running
    statistics become ``momentum * old + (1 - momentum) * batch``, with the
    biased batch variance, as Flax (PyTorch averages the unbiased one), and
    are not updated while initializing. Inference mode uses the running
    statistics with Flax's own formula.

    dtypes as Flax: ``x``, ``scale`` and ``bias`` are combined in their
    promoted dtype (float32, float16 or bfloat16; half types computed in
    float32) and ``y`` has ``dtype``, or that promoted dtype when ``dtype``
    is None.

    Differences from Flax: the variance is always computed by the stable
    two-pass formula (``use_fast_variance`` is accepted and ignored, the
    numbers differ by rounding only), and reductions run in float32 even
    with ``force_float32_reductions=False``.
    """

    @nn.compact
    def __call__(self, x, use_running_average: bool | None = None, *, mask: jax.Array | None = None):
        """Normalizes ``x`` (any shape) and returns an array of the same shape.

        Args:
          x: the input; its ``axis`` dimensions are the features.
          use_running_average: inference mode (the running statistics) if
            True, training mode if False; given here or as the field, once.
          mask: Flax's mask of the elements the batch statistics count: not
            supported in training mode; inference mode ignores it, as Flax.

        Returns:
          The normalized ``x`` in ``dtype`` (when None, the promoted dtype of
          ``x``, ``scale`` and ``bias``).

        Raises:
          ValueError: ``use_running_average`` given both as the field and
            here, or neither (Flax's ``merge_param``).
          NotImplementedError: in training mode, a ``mask``, or
            ``axis_index_groups`` with an ``axis_name``.
          TypeError: in training mode, a dtype other than float32, float16 or
            bfloat16 (e.g. float64).
        """
        use_running_average = module.merge_param(
            "use_running_average", self.use_running_average, use_running_average
        )
        axes = _bn.feature_axes(x.ndim, self.axis)
        feature_shape = [x.shape[a] for a in axes]
        stat_dtype = jnp.float32 if self.force_float32_reductions else self.param_dtype
        ra_mean = self.variable(
            "batch_stats", "mean", lambda s: jnp.zeros(s, stat_dtype), feature_shape
        )
        ra_var = self.variable("batch_stats", "var", lambda s: jnp.ones(s, stat_dtype), feature_shape)
        scale = bias = None
        if self.use_scale:
            scale = self.param("scale", self.scale_init, feature_shape, self.param_dtype)
        if self.use_bias:
            bias = self.param("bias", self.bias_init, feature_shape, self.param_dtype)
        if not self.force_float32_reductions:
            scale, bias = (None if p is None else jnp.asarray(p, self.param_dtype) for p in (scale, bias))
        out_dtype = dtypes.canonicalize_dtype(x, scale, bias, dtype=self.dtype)

        if use_running_average:
            mean, var = ra_mean.value, ra_var.value
            if not self.force_float32_reductions:
                mean, var = jnp.asarray(mean, self.param_dtype), jnp.asarray(var, self.param_dtype)
            return _bn.infer(x, mean, var, scale, bias, axes=axes, epsilon=self.epsilon,
                             out_dtype=out_dtype)

        axis_name = None if self.is_initializing() else self.axis_name
        _bn.check_supported(
            "jax_aclnn.flax.linen.BatchNorm", mask=mask,
            axis_index_groups=None if axis_name is None else self.axis_index_groups,
        )
        y, mean, var = _bn.train(
            x, scale, bias, axes=axes, epsilon=self.epsilon, axis_name=axis_name,
            compute_dtype=dtypes.canonicalize_dtype(x, scale, bias), out_dtype=out_dtype,
        )
        if not self.is_initializing():
            dtype = _bn.statistics_dtype(x, self.dtype, self.force_float32_reductions)
            ra_mean.value = _bn.running_average(ra_mean.value, mean, self.momentum, dtype)
            ra_var.value = _bn.running_average(ra_var.value, var, self.momentum, dtype)
        return y


class RMSNorm(nn.RMSNorm):
    """Drop-in ``flax.linen.RMSNorm`` (a subclass: same fields, defaults,
    ``params`` ``scale`` and auto-generated name; the same numbers within
    float32 rounding) whose forward runs aclnnRmsNorm and whose gradient
    runs aclnnRmsNormGrad (:func:`jax_aclnn.nn.rms_norm`).

    ``y = x * rsqrt(mean(x**2 over the last axis) + epsilon) * scale`` in
    the dtype Flax gives x, scale and ``dtype``, computed in float32. The
    fused kernels serve Flax's defaults (``reduction_axes=feature_axes=-1``,
    ``use_scale=True``, no ``axis_name``, no mask); other configurations
    run Flax's own code.
    """

    @module.compact
    def __call__(self, x, *, mask: jax.Array | None = None):
        if not _rms.fused(x, self.reduction_axes, self.feature_axes, self.axis_name, mask,
                          self.use_scale):
            return nn.RMSNorm.__call__.__wrapped__(self, x, mask=mask)
        scale = self.param("scale", self.scale_init, (x.shape[-1],), self.param_dtype)
        return _rms.call(x, scale, self.epsilon,
                         dtypes.canonicalize_dtype(x, scale, dtype=self.dtype))

    __call__.__doc__ = _rms.CALL_DOC
