"""aclnnSwishBackward: the gradient of swish / SiLU with a slope beta."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from jax_aclnn import _checks
from jax_aclnn._primitive import AclnnPrimitive, batch_same_shape


class SwishBackward(AclnnPrimitive):
    name = "swish_backward"
    aclnn_name = "aclnnSwishBackward"
    operand_names = ("grad_output", "input")
    alias_gradient = True

    def abstract_eval(self, g, x, *, beta):
        return ShapedArray(x.shape, x.dtype)

    def reference(self, g, x, *, beta):
        b = np.float32(1.0 if beta is None else beta)
        bx = b * x.astype(jnp.float32)
        s = jax.nn.sigmoid(bx)
        return (g.astype(jnp.float32) * s * (1.0 + bx * (1.0 - s))).astype(x.dtype)

    def ffi_attributes(self, *, beta):
        return {"has_beta": np.bool_(beta is not None), "beta": np.float32(beta or 0.0)}

    def batch(self, args, dims, *, beta):
        return self.bind(*batch_same_shape(args, dims), beta=beta), 0


_op = SwishBackward()


def swish_backward(grad_output: Any, input: Any, *, beta: float | None = 1.0) -> jax.Array:  # noqa: A002
    """Gradient of ``swish(x) = x * sigmoid(beta * x)`` (aclnnSwishBackward).

    With ``s = sigmoid(beta * input)``:
    ``grad_output * (s + beta * input * s * (1 - s))``. ``beta=None`` means
    1.0 (aclnn's null ``betaOptional``); with beta = 1 this is ATen's
    ``silu_backward``.

    Args:
      grad_output: the gradient of the forward output.
      input: the forward input; same shape as ``grad_output``.
      beta: the slope, or None for 1.0.

    Returns:
      ``grad_input``, shape and dtype of ``input``.

    Transformations: all of :mod:`jax_aclnn.nn`'s. Linear in ``grad_output``:
    the transpose there (reverse mode) and the JVP in it (forward mode) run
    aclnnSwishBackward again; the derivatives in the other
    operands are XLA code.

    Raises:
      TypeError: a tensor is not float32/float16/bfloat16, dtypes differ
        (Python scalars take the arrays' dtype), or ``beta`` is not a static
        real number (a string such as ``'1.5'`` is not).
      ValueError: shapes differ (any rank: past rank 8, aclnn's limit,
        dimensions are merged for the call), or ``beta`` beyond float32's range.
    """
    op = _op.name
    g, x = _checks.float_arrays(op, grad_output=grad_output, input=input)
    _checks.same_shape(op, ("grad_output", "input"), (g, x))
    b = None if beta is None else _checks.float32_number(op, "beta", beta)
    return _op.bind(g, x, beta=b)
