"""SwiGLU: aclnnSwiGlu and aclnnSwiGluGrad.

Prototypes from CANN's ops-nn sources (activation/swi_glu/docs/aclnnSwiGlu.md,
activation/swi_glu_grad/docs/aclnnSwiGluGrad.md): ``out = Swish(A) * B``, A
the first half of x along ``dim``, B the second. torch_npu's ``npu_swiglu``
and ``npu_swiglu_backward`` are generated from op-plugin's
op_plugin/config/op_plugin_functions.yaml (``exec: aclnnSwiGlu``: self, dim,
out; ``exec: aclnnSwiGluGrad``: grad_output, self, dim, out), the order of
CANN's prototypes.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn._declare import declare
from jax_aclnn.nn._common import check_float, rows_merged_past_rank, typed_like

_F32 = jnp.float32


def _swiglu_reference(x, *, dim):
    a, b = jnp.split(x.astype(_F32), 2, axis=dim)
    return (jax.nn.silu(a) * b).astype(x.dtype)


def _swiglu_grad_reference(yGrad, x, *, dim):
    a, b = jnp.split(x.astype(_F32), 2, axis=dim)
    g, s = yGrad.astype(_F32), jax.nn.sigmoid(a)
    da = g * (s + s * (1 - s) * a) * b
    db = g * s * a
    return jnp.concatenate([da, db], axis=dim).astype(x.dtype)


#: Along the last dimension (dim=-1): the leading dimensions are
#: partitioned, the split one (i in, j out) stays whole.
SWIGLU = declare(
    "aclnnStatus aclnnSwiGluGetWorkspaceSize(const aclTensor *x, int64_t dim, "
    "const aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)",
    _swiglu_reference, outputs="out", name="nn_swiglu",
    dims="... i -> ... j", replicated=("i", "j"))
SWIGLU_GRAD = declare(
    "aclnnStatus aclnnSwiGluGradGetWorkspaceSize(const aclTensor *yGrad, const aclTensor *x, "
    "int64_t dim, const aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)",
    _swiglu_grad_reference, outputs="out", name="nn_swiglu_grad",
    dims="... j, ... i -> ... i", replicated=("i", "j"))


@jax.custom_vjp
def _swiglu(x):
    return SWIGLU(x, dim=-1)


_swiglu.defvjp(lambda x: (SWIGLU(x, dim=-1), x),
               lambda x, dy: typed_like((SWIGLU_GRAD(dy, x, dim=-1),), (x,)))


def swiglu(x: Any, *, axis: int = -1) -> jax.Array:
    """SwiGLU on aclnnSwiGlu and aclnnSwiGluGrad.

    ``a, b = jnp.split(x, 2, axis); jax.nn.silu(a) * b``.

    Forward aclnnSwiGlu, backward aclnnSwiGluGrad (CANN's fused kernels,
    one call each per use where a provider has them; their pure-JAX
    references elsewhere). torch_npu's ``npu_swiglu``.

    Args:
      x: float32, float16 or bfloat16, of even size along ``axis``.
      axis: the dimension split in two halves: the first is activated.
        Another than the last is moved last around the call (XLA transposes).

    Returns:
      x's dtype, its shape with ``axis`` halved (computed in float32).

    Raises:
      ValueError: x's size along axis is odd, or axis is out of range.
      TypeError: x is not float32, float16 or bfloat16 (float64 included,
        under ``jax_enable_x64``: CANN takes none).

    Dimension rule: the dimensions other than ``axis`` are partitioned;
    ``axis`` stays whole.
    """
    x = jnp.asarray(x)
    check_float("swiglu", x=x)
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"swiglu: axis {axis} is out of range for x of shape {x.shape}")
    if x.shape[axis] % 2:
        raise ValueError(f"swiglu: x's size along axis {axis} is odd (shape {x.shape})")
    axis %= x.ndim
    last = jnp.moveaxis(x, axis, -1)  # the identity for the last axis
    return jnp.moveaxis(rows_merged_past_rank(_swiglu, [last], x.ndim - 1), -1, axis)


__all__ = ["swiglu"]
