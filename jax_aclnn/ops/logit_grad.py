"""aclnnLogitGrad: the gradient of logit (the inverse sigmoid)."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from jax_aclnn import _checks
from jax_aclnn._primitive import AclnnPrimitive, batch_same_shape


class LogitGrad(AclnnPrimitive):
    name = "logit_grad"
    aclnn_name = "aclnnLogitGrad"
    operand_names = ("x", "dy")
    alias_gradient = True
    linear_operand = 1  # dy

    def abstract_eval(self, x, dy, *, eps):
        return ShapedArray(x.shape, x.dtype)

    def reference(self, x, dy, *, eps):
        xf, dyf = x.astype(jnp.float32), dy.astype(jnp.float32)
        value = dyf / (xf * (1.0 - xf))
        if math.isnan(eps):
            out = jnp.full_like(value, jnp.nan)
        elif eps < 0:
            out = jnp.where((xf < 0) | (xf > 1), jnp.nan, value)
        else:
            lo, hi = np.float32(eps), np.float32(1.0 - eps)
            out = jnp.where((xf < lo) | (xf > hi), 0.0, value)
        return out.astype(x.dtype)

    def ffi_attributes(self, *, eps):
        return {"eps": np.float64(eps)}

    def batch(self, args, dims, *, eps):
        return self.bind(*batch_same_shape(args, dims), eps=eps), 0


_op = LogitGrad()


def logit_grad(x: Any, dy: Any, *, eps: float = -1.0) -> jax.Array:
    """Gradient of ``logit`` with respect to its input (aclnnLogitGrad).

    ``dx = dy / (x * (1 - x))``. With ``eps < 0`` nothing is clamped: x
    outside [0, 1] gives NaN, x = 0 or 1 gives inf. With ``eps >= 0`` the
    result is 0 where x is outside ``[eps, 1 - eps]`` (the clamp's gradient).
    A NaN ``eps`` gives NaN everywhere (aclnn constraint). Same formula as
    ATen's ``logit_backward``. Note the aclnn argument order: ``x`` first.

    Args:
      x: the forward input.
      dy: the gradient of the forward output; same shape as ``x``.
      eps: the forward's clamping bound; ``-1`` (default) for none.

    Returns:
      ``dx``, shape and dtype of ``x`` (float32, float16 or bfloat16).

    Transformations: all of :mod:`jax_aclnn.nn`'s. Linear in ``dy``:
    the transpose there (reverse mode) and the JVP in it (forward mode) run
    aclnnLogitGrad again; the derivatives in the other
    operands are XLA code.

    Raises:
      TypeError: a tensor is not float32/float16/bfloat16, dtypes differ
        (Python scalars take the arrays' dtype), or ``eps`` is not a static
        real number (a string such as ``'1.5'`` is not).
      ValueError: ``x`` and ``dy`` differ in shape (any rank: past rank 8,
        aclnn's limit, dimensions are merged for the call).
    """
    op = _op.name
    xa, dya = _checks.float_arrays(op, x=x, dy=dy)
    _checks.same_shape(op, ("x", "dy"), (xa, dya))
    return _op.bind(xa, dya, eps=_checks.real_number(op, "eps", eps))
