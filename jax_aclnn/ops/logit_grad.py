"""aclnnLogitGrad: the gradient of logit (the inverse sigmoid)."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from jax_aclnn import _checks, network
from jax_aclnn._batching import batch_same_shape
from jax_aclnn._primitive import AclnnPrimitive


class LogitGrad(AclnnPrimitive):
    name = "logit_grad"
    aclnn_name = "aclnnLogitGrad"
    operand_names = ("x", "dy")
    alias_gradient = True
    linear_operand = 1  # dy
    outputs = ("out",)  # CANN's prototype prints it as const aclTensor*

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
            lo = np.float32(eps)
            hi = np.float32(1.0) - lo  # in float32, as CANN's kernel and ATen
            out = jnp.where((xf < lo) | (xf > hi), 0.0, value)
        return out.astype(x.dtype)

    def batch(self, args, dims, *, eps):
        return self.bind(*batch_same_shape(args, dims), eps=eps), 0


_op = LogitGrad()


def logit_grad(x: Any, dy: Any, *, eps: float = -1.0) -> jax.Array:
    """Gradient of ``logit`` with respect to its input (aclnnLogitGrad).

    ``dx = dy / (x * (1 - x))``. With ``eps < 0`` nothing is clamped: x
    outside [0, 1] gives NaN, x = 0 or 1 gives inf. With ``eps >= 0`` the
    result is 0 where x is outside ``[eps, 1 - eps]`` (the clamp's gradient),
    both bounds in float32: ``eps`` rounded to float32 and ``1 - eps``
    computed in float32 from it (``1.0f - float(eps)``), as CANN's LogitGrad
    kernel and ATen's ``logit_backward`` do. A NaN ``eps`` gives NaN
    everywhere (aclnn constraint). Same formula as ATen's
    ``logit_backward``. Note the aclnn argument order: ``x`` first.

    Args:
      x: the forward input.
      dy: the gradient of the forward output; same shape as ``x``.
      eps: the forward's clamping bound; ``-1`` (default) for none.

    Returns:
      ``dx``, shape and dtype of ``x`` (float32, float16 or bfloat16).

    Transformations: all (:mod:`jax_aclnn.ops`); linear in ``dy``.

    Raises:
      TypeError: a tensor is not float32/float16/bfloat16, dtypes differ, or
        ``eps`` is not a static real number.
      ValueError: ``x`` and ``dy`` differ in shape (any rank: past rank 8,
        aclnn's limit, dimensions are merged for the call).
    """
    op = _op.name
    xa, dya = _checks.float_arrays(op, x=x, dy=dy)
    _checks.same_shape(op, ("x", "dy"), (xa, dya))
    return _op.bind(xa, dya, eps=_checks.real_number(op, "eps", eps))


# --- the differentiable operator whose derivative runs it ----------


def logit(x: Any, eps: float | None = None) -> jax.Array:
    """``log(z / (1 - z))`` with ``z = x``, or ``clip(x, eps, 1 - eps)`` when ``eps`` is given.

    ``torch.logit``; the derivative is aclnnLogitGrad (0 outside ``[eps, 1 -
    eps]`` when ``eps`` is given), on the cotangent in reverse mode and on
    the tangent in forward mode. Transformations: all (:mod:`jax_aclnn.ops`).

    Args:
      x: probabilities (float32, float16 or bfloat16); without ``eps``, x
        outside [0, 1] gives NaN and x = 0 or 1 gives -inf or inf.
      eps: the clamping bound (rounded to float32, as the derivative's), or
        None for no clamping.

    Returns:
      The logit, shape and dtype of ``x`` (half types computed in float32).

    Raises:
      TypeError: unsupported dtype, ``x`` is None, or ``eps`` is neither None
        nor a static real number.
    """
    (xa,) = _checks.float_arrays("logit", x=x)
    e = None if eps is None else _checks.real_number("logit", "eps", eps)
    return _logit(xa, e)


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def _logit(x, eps):
    z = x.astype(jnp.float32)
    if eps is not None:  # the float32 bounds of the backward's clamp
        lo = np.float32(eps)
        z = jnp.clip(z, lo, np.float32(1.0) - lo)
    return jnp.log(z / (1.0 - z)).astype(x.dtype)


@_logit.defjvp
def _logit_jvp(eps, primals, tangents):
    (x,), (t,) = primals, tangents
    return _logit(x, eps), logit_grad(x, t, eps=-1.0 if eps is None else eps)


# An activation of the every-operator network (jax_aclnn.network): the
# logit of a sigmoid, clamped.
network.register("logit", "activation", lambda h: logit(jax.nn.sigmoid(h), 1e-4),
                  lambda h: _logit.fun(jax.nn.sigmoid(h), 1e-4))
