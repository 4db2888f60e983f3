"""What the linen and nnx RMSNorm layers share: when CANN's fused RMSNorm
serves a layer's call, the call, and its docstring."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from jax_aclnn.nn import rms_norm


#: The docstring of both layers' ``__call__``.
CALL_DOC = """Normalizes ``x`` over its last axis; returns an array of its shape.

        Args:
          x: the input, ``(..., features)``.
          mask: Flax's mask of the elements the statistics count (Flax's
            code runs when it is given).

        Returns:
          The normalized ``x`` in Flax's result dtype.
        """


def fused(x: Any, reduction_axes: Any, feature_axes: Any, axis_name: Any, mask: Any,
          use_scale: bool) -> bool:
    """Whether :func:`jax_aclnn.nn.rms_norm` computes the layer: the last
    axis normalized and scaled (Flax's defaults), one device's statistics, no
    mask, a scale; otherwise the layer runs Flax's own code."""
    last = lambda axes: tuple(int(a) % x.ndim for a in np.atleast_1d(axes))  # noqa: E731
    return (use_scale and axis_name is None and mask is None and x.ndim >= 1
            and last(reduction_axes) == (x.ndim - 1,) and last(feature_axes) == (x.ndim - 1,))


def call(x: Any, scale: Any, epsilon: float, dtype: Any) -> Any:
    """The layer's result: x and scale in ``dtype`` (Flax's result dtype of
    x, scale and the layer's ``dtype``), normalized by aclnnRmsNorm."""
    return rms_norm(jnp.asarray(x, dtype), jnp.asarray(scale, dtype), epsilon=epsilon)
