"""``flax.nnx.BatchNorm`` whose training-mode gradient runs
aclnnBatchNormReduceBackward, and ``flax.nnx.RMSNorm`` on aclnnRmsNorm /
aclnnRmsNormGrad.

Swap the import and nothing else changes::

    from jax_aclnn.flax import nnx as aclnn_nnx   # instead of flax.nnx.BatchNorm
    self.bn = aclnn_nnx.BatchNorm(64, momentum=0.9, rngs=rngs)
    self.norm = aclnn_nnx.RMSNorm(512, rngs=rngs)

See :class:`BatchNorm` and :class:`RMSNorm`.
"""

from __future__ import annotations

import jax
from flax import nnx
from flax.nnx.module import first_from
from flax.nnx.nn import dtypes as _dtypes

from jax_aclnn.flax import _batch_norm as _bn
from jax_aclnn.flax import _rms_norm as _rms


class BatchNorm(nnx.BatchNorm):
    """Drop-in ``flax.nnx.BatchNorm`` (a subclass: same constructor arguments
    and defaults, ``.train()``/``.eval()``/``nnx.view``, and the same
    variables, ``Param`` ``scale``/``bias`` and ``BatchStat`` ``mean``/``var``,
    so states interchange both ways).

    Training mode (``use_running_average=False``, the constructor default,
    ``.train()``, or the call argument) calls :func:`jax_aclnn.batch_norm`:
    ``y = (x - mean) / sqrt(var + epsilon) * scale + bias`` with the mean and
    the biased variance over every axis except ``axis`` (one int or several,
    merged into one channel axis), reduced in float32, synchronized over
    ``axis_name``; its gradient runs aclnnBatchNormReduceBackward. The
    running statistics become ``momentum * old + (1 - momentum) * batch``
    with the biased batch variance, as Flax. Inference mode (``.eval()``)
    uses them with Flax's own formula.

    dtypes as Flax: ``x``, the statistics, ``scale`` and ``bias`` are first
    promoted together by ``promote_dtype`` (to ``dtype`` when given);
    float32, float16 and bfloat16 are supported (half types computed in
    float32). The variance is always computed by the stable two-pass
    formula (``use_fast_variance`` is accepted and ignored).
    """

    def __call__(self, x, use_running_average: bool | None = None, *, mask: jax.Array | None = None):
        """Normalizes ``x`` (any shape) and returns an array of the same shape.

        Args:
          x: the input; its ``axis`` dimensions are the features.
          use_running_average: inference mode (the running statistics) if
            True, training mode if False; None: the attribute's.
          mask: Flax's mask of the elements the batch statistics count: not
            supported in training mode; inference mode ignores it, as Flax.

        Returns:
          The normalized ``x``, in the dtype ``promote_dtype`` gives ``x``,
          the statistics, ``scale`` and ``bias`` (``dtype`` when given).

        Raises:
          ValueError: ``use_running_average`` is None both here and in the
            constructor.
          NotImplementedError: in training mode, a ``mask``, or
            ``axis_index_groups`` with an ``axis_name``.
          TypeError: in training mode, a dtype other than float32, float16 or
            bfloat16 (e.g. float64).
        """
        use_running_average = first_from(
            use_running_average, self.use_running_average,
            error_msg="No `use_running_average` argument was given to BatchNorm, "
                      "neither to the constructor nor to the call.",
        )
        axes = _bn.feature_axes(x.ndim, self.axis)
        scale = self.scale[...] if self.scale is not None else None
        bias = self.bias[...] if self.bias is not None else None
        # The layer's promote_dtype (a constructor argument from flax 0.12.1;
        # flax 0.12.0, the newest for jax 0.7, has Flax's own function only)
        promote_dtype = getattr(self, "promote_dtype", _dtypes.promote_dtype)
        x, mean, var, scale, bias = promote_dtype(
            (x, self.mean[...], self.var[...], scale, bias), dtype=self.dtype
        )
        if use_running_average:
            return _bn.infer(x, mean, var, scale, bias, axes=axes, epsilon=self.epsilon,
                             out_dtype=x.dtype)
        _bn.check_supported(
            "jax_aclnn.flax.nnx.BatchNorm", mask=mask,
            axis_index_groups=None if self.axis_name is None else self.axis_index_groups,
        )
        y, mean, var = _bn.train(
            x, scale, bias, axes=axes, epsilon=self.epsilon, axis_name=self.axis_name,
            compute_dtype=x.dtype, out_dtype=x.dtype,
        )
        dtype = _bn.statistics_dtype(x, self.dtype)
        self.mean[...] = _bn.running_average(self.mean[...], mean, self.momentum, dtype)
        self.var[...] = _bn.running_average(self.var[...], var, self.momentum, dtype)
        return y


class RMSNorm(nnx.RMSNorm):
    """Drop-in ``flax.nnx.RMSNorm`` (a subclass: same constructor arguments
    and defaults, the same ``Param`` ``scale``, the same numbers within
    float32 rounding) whose forward runs aclnnRmsNorm and whose gradient
    runs aclnnRmsNormGrad (:func:`jax_aclnn.nn.rms_norm`).

    ``y = x * rsqrt(mean(x**2 over the last axis) + epsilon) * scale`` in
    the dtype Flax gives x, scale and ``dtype`` (``promote_dtype``),
    computed in float32. The fused kernels serve Flax's defaults
    (``reduction_axes=feature_axes=-1``, ``use_scale=True``, no
    ``axis_name``, no mask); other configurations run Flax's own code.
    """

    def __call__(self, x, mask: jax.Array | None = None):
        if not _rms.fused(x, self.reduction_axes, self.feature_axes, self.axis_name, mask,
                          self.use_scale):
            return super().__call__(x, mask)
        # flax >= 0.12.1 takes a promote_dtype argument; 0.12.0 promotes with this one
        promote = getattr(self, "promote_dtype", _dtypes.promote_dtype)
        x, scale = promote((x, self.scale[...]), dtype=self.dtype)
        return _rms.call(x, scale, self.epsilon, _dtypes.canonicalize_dtype(x, scale,
                                                                            dtype=self.dtype))

    __call__.__doc__ = _rms.CALL_DOC
