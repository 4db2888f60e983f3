"""aclnnHardshrinkBackward: the gradient of hard shrinkage."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray

from jax_aclnn import _checks
from jax_aclnn._primitive import AclnnPrimitive, batch_broadcasting


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

    def ffi_attributes(self, *, lambd):
        return {"lambd": np.float32(lambd)}

    def batch(self, args, dims, *, lambd):
        return self.bind(*batch_broadcasting(args, dims), lambd=lambd), 0


_op = HardshrinkBackward()


def hardshrink_backward(grad_output: Any, input: Any, *, lambd: float = 0.5) -> jax.Array:  # noqa: A002
    """Gradient of ``hardshrink`` with respect to its input (aclnnHardshrinkBackward).

    0 where ``|input| <= lambd``, else ``grad_output`` (so a NaN input passes
    the gradient through), compared in float32. A negative (or NaN) ``lambd``
    counts as 0. Same formula as ATen's ``hardshrink_backward``.

    Args:
      grad_output: the gradient of the forward output.
      input: the forward input; broadcasts with ``grad_output``.
      lambd: the shrinkage threshold.

    Returns:
      ``grad_input`` of the broadcast shape, in the inputs' dtype.

    Transformations: all of :mod:`jax_aclnn.nn`'s. Linear in ``grad_output``:
    the transpose there (reverse mode) and the JVP in it (forward mode) run
    aclnnHardshrinkBackward again (summed over the axes ``grad_output``
    broadcasts along); the derivatives in the other operands are XLA code.

    Raises:
      TypeError: a tensor is not float32/float16/bfloat16, dtypes differ
        (Python scalars take the arrays' dtype), or ``lambd`` is not a static
        real number (a string such as ``'1.5'`` is not).
      ValueError: shapes do not broadcast, more than 8 dimensions that do not
        merge (past rank 8, aclnn's limit, dimensions are merged for the
        call), or ``lambd`` beyond float32's range.
    """
    op = _op.name
    g, x = _checks.float_arrays(op, grad_output=grad_output, input=input)
    _checks.broadcast_shape(op, ("grad_output", "input"), (g, x))
    return _op.bind(g, x, lambd=_checks.float32_number(op, "lambd", lambd))
