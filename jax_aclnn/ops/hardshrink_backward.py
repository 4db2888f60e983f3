"""aclnnHardshrinkBackward: the gradient of hard shrinkage."""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from jax_aclnn import _checks, network
from jax_aclnn._batching import batch_broadcasting
from jax_aclnn._primitive import AclnnPrimitive


def shrunk(x: Any, lambd: float) -> jax.Array:
    """Where hard shrinkage zeroes ``x``: ``|x| <= lambd``, compared in
    float32 with ``lambd`` rounded to float32 and a negative (or NaN) ``lambd``
    taken as 0, as the aclnn kernel compares. A NaN ``x`` is never zeroed.
    The forward ``hardshrink`` uses the same test, so that forward and
    backward agree on every element, also in float16 and bfloat16."""
    threshold = np.float32(lambd) if lambd > 0 else np.float32(0)
    return jnp.abs(x.astype(jnp.float32)) <= threshold


class HardshrinkBackward(AclnnPrimitive):
    name = "hardshrink_backward"
    aclnn_name = "aclnnHardshrinkBackward"
    operand_names = ("grad_output", "input")
    alias_gradient = True

    def abstract_eval(self, g, x, *, lambd):
        return ShapedArray(jnp.broadcast_shapes(g.shape, x.shape), x.dtype)

    def reference(self, g, x, *, lambd):
        shape = jnp.broadcast_shapes(g.shape, x.shape)
        out = jnp.where(shrunk(x, lambd), jnp.zeros((), x.dtype), g.astype(x.dtype))
        return jnp.broadcast_to(out, shape)

    def batch(self, args, dims, *, lambd):
        return self.bind(*batch_broadcasting(args, dims), lambd=lambd), 0


_op = HardshrinkBackward()


def hardshrink_backward(grad_output: Any, input: Any, *, lambd: float = 0.5) -> jax.Array:  # noqa: A002
    """Gradient of ``hardshrink`` with respect to its input (aclnnHardshrinkBackward).

    0 where ``|input| <= lambd``, else ``grad_output`` (so a NaN input passes
    the gradient through). A negative (or NaN) ``lambd`` counts as 0.

    The comparison is in float32, with ``lambd`` rounded to float32 (never
    to a half-precision ``input``'s dtype), as CANN's HardShrinkGrad kernel
    of the Atlas A2 training products does it: it casts float16 and
    bfloat16 inputs to float32 and compares them with the float32 ``lambd``
    of the operator's attribute. ATen's ``hardshrink_backward`` rounds
    ``lambd`` to the tensor's dtype first, so the two differ only for a
    half-precision ``|input|`` between ``lambd`` and its rounding (e.g.
    float16 ``0.50048828125`` with ``lambd=0.5003``: ``grad_output`` here, 0
    in ATen).

    Args:
      grad_output: the gradient of the forward output.
      input: the forward input; broadcasts with ``grad_output``.
      lambd: the shrinkage threshold.

    Returns:
      ``grad_input`` of the broadcast shape, in the inputs' dtype.

    Transformations: all (:mod:`jax_aclnn.ops`); linear in
    ``grad_output`` (its transpose sums over the axes ``grad_output``
    broadcasts along).

    Raises:
      TypeError: a tensor is not float32/float16/bfloat16, dtypes differ, or
        ``lambd`` is not a static real number.
      ValueError: shapes do not broadcast, more than 8 dimensions that do not
        merge (past rank 8, aclnn's limit, dimensions are merged for the
        call), or ``lambd`` beyond float32's range.
    """
    op = _op.name
    g, x = _checks.float_arrays(op, grad_output=grad_output, input=input)
    _checks.broadcast_shape(op, ("grad_output", "input"), (g, x))
    return _op.bind(g, x, lambd=_checks.float32_number(op, "lambd", lambd))


# --- the differentiable operator whose derivative runs it ----------


def hardshrink(x: Any, lambd: float = 0.5) -> jax.Array:
    """0 where ``|x| <= lambd``, else ``x`` (``torch.nn.functional.hardshrink``:
    a NaN passes through).

    The derivative is aclnnHardshrinkBackward, on the cotangent in reverse
    mode and on the tangent in forward mode. Both compare in float32, so
    that in float16/bfloat16 the forward and the derivative agree on the
    side of ``lambd`` of every element. Transformations: all (module
    docstring). In a Flax module call it on a layer's output, e.g.
    ``aclnn.hardshrink(nn.Dense(64)(x), 0.1)``.

    Args:
      x: the input (float32, float16 or bfloat16).
      lambd: the shrinkage threshold; a negative (or NaN) one counts as 0.

    Returns:
      The shrunk ``x``, shape and dtype of ``x``.

    Raises:
      TypeError: unsupported dtype, ``x`` is None, or ``lambd`` is not a
        static real number.
      ValueError: ``lambd`` beyond float32's range (such as ``1e40``).
    """
    (xa,) = _checks.float_arrays("hardshrink", x=x)
    return _hardshrink(xa, _checks.float32_number("hardshrink", "lambd", lambd))


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def _hardshrink(x, lambd):
    return jnp.where(shrunk(x, lambd), jnp.zeros((), x.dtype), x)


@_hardshrink.defjvp
def _hardshrink_jvp(lambd, primals, tangents):
    (x,), (t,) = primals, tangents
    return _hardshrink(x, lambd), hardshrink_backward(t, x, lambd=lambd)


# An activation of the every-operator network (jax_aclnn.network).
network.register("hardshrink", "activation", lambda h: hardshrink(h, 0.05),
                  lambda h: _hardshrink.fun(h, 0.05))
