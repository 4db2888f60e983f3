"""aclnnSwishBackward: the gradient of swish / SiLU with a slope beta."""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from jax_aclnn import _checks, network
from jax_aclnn._batching import batch_same_shape
from jax_aclnn._primitive import AclnnPrimitive


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

    def arguments(self, *, beta):
        return {"betaOptional": None if beta is None else np.float32(beta)}

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

    Transformations: all (:mod:`jax_aclnn.ops`); linear in ``grad_output``.

    Raises:
      TypeError: a tensor is not float32/float16/bfloat16, dtypes differ, or
        ``beta`` is neither None nor a static real number.
      ValueError: shapes differ (any rank: past rank 8, aclnn's limit,
        dimensions are merged for the call), or ``beta`` beyond float32's range.
    """
    op = _op.name
    g, x = _checks.float_arrays(op, grad_output=grad_output, input=input)
    _checks.same_shape(op, ("grad_output", "input"), (g, x))
    b = None if beta is None else _checks.float32_number(op, "beta", beta)
    return _op.bind(g, x, beta=b)


# --- the differentiable operator whose derivative runs it ----------


def swish(x: Any, beta: float = 1.0) -> jax.Array:
    """``x * sigmoid(beta * x)``.

    The derivative is aclnnSwishBackward, on the cotangent in reverse mode
    and on the tangent in forward mode. Transformations: all (module
    docstring).

    An activation like ``flax.linen.swish``: in a Flax module,
    ``aclnn.swish(nn.Dense(64)(x), 1.5)`` (linen) or
    ``aclnn.swish(self.linear(x))`` (nnx).

    Args:
      x: the input (float32, float16 or bfloat16).
      beta: the slope.

    Returns:
      ``x * sigmoid(beta * x)``, shape and dtype of ``x`` (half types
      computed in float32).

    Raises:
      TypeError: unsupported dtype, ``x`` is None, or ``beta`` is not a
        static real number.
      ValueError: ``beta`` beyond float32's range (such as ``1e40``).
    """
    (xa,) = _checks.float_arrays("swish", x=x)
    return _swish(xa, _checks.float32_number("swish", "beta", beta))


def silu(x: Any) -> jax.Array:
    """``x * sigmoid(x)`` (``torch.nn.functional.silu``, ``flax.linen.silu``):
    ``swish(x, 1.0)``, with its transformations (aclnnSwishBackward in both
    directions). In a Flax module: ``aclnn.silu(nn.Dense(64)(x))``.

    Args:
      x: the input (float32, float16 or bfloat16).

    Returns:
      ``x * sigmoid(x)``, shape and dtype of ``x`` (half types computed in
      float32).

    Raises:
      TypeError: unsupported dtype, ``x`` is None.
    """
    (xa,) = _checks.float_arrays("silu", x=x)
    return _swish(xa, 1.0)


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def _swish(x, beta):
    xf = x.astype(jnp.float32)
    return (xf * jax.nn.sigmoid(beta * xf)).astype(x.dtype)


@_swish.defjvp
def _swish_jvp(beta, primals, tangents):
    (x,), (t,) = primals, tangents
    return _swish(x, beta), swish_backward(t, x, beta=beta)


# An activation of the every-operator network (jax_aclnn.network).
network.register("swish", "activation", lambda h: swish(h, 1.0), lambda h: _swish.fun(h, 1.0))
