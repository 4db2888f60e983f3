"""RMSNorm and the residual add + RMSNorm of a pre-norm block: aclnnRmsNorm,
aclnnAddRmsNorm, and aclnnRmsNormGrad for both backwards.

Prototypes from CANN's ops-nn sources (norm/rms_norm/docs/aclnnRmsNorm.md,
norm/add_rms_norm/op_host/op_api/aclnn_add_rms_norm.h,
norm/rms_norm_grad/docs/aclnnRmsNormGrad.md); argument order checked against
torch_npu's call sites (op-plugin op_plugin/ops/opapi/RmsNormKernelOpApi.cpp:
``EXEC_NPU_CMD(aclnnRmsNorm, self, gamma, epsilon, y, rstd)``;
RmsNormBackwardKernelOpApi.cpp: ``EXEC_NPU_CMD(aclnnRmsNormGrad, dy, self,
rstd, gamma, dx, dgamma)``, where torch_npu's own
``npu_rms_norm_backward(dy, self, gamma, rstd)`` takes gamma before rstd:
we follow the aclnn prototype, which is what the call passes).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn._declare import declare

#: CANN computes in float32; y in x's dtype, rstd and dgamma in float32.
_F32 = jnp.float32


def _rms_norm_reference(x, gamma, *, epsilon):
    xf = x.astype(_F32)
    rstd = jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + _F32(epsilon))
    return (xf * rstd * gamma.astype(_F32)).astype(x.dtype), rstd


def _add_rms_norm_reference(x1, x2, gamma, *, epsilon):
    x = x1 + x2
    y, rstd = _rms_norm_reference(x, gamma, epsilon=epsilon)
    return y, rstd, x


def _rms_norm_grad_reference(dy, x, rstd, gamma):
    dyf, xf, g = dy.astype(_F32), x.astype(_F32), gamma.astype(_F32)
    dgamma = jnp.sum((dyf * xf * rstd).reshape(-1, x.shape[-1]), axis=0)
    mean = jnp.mean(dyf * g * xf, axis=-1, keepdims=True)
    return (rstd * g * dyf - xf * rstd ** 3 * mean).astype(x.dtype), dgamma


#: the normalized dimension h stays whole; the rows (...) are partitioned;
#: dgamma lacks them: a sum over the rows.
RMS_NORM = declare(
    "aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, "
    "double epsilon, const aclTensor *yOut, const aclTensor *rstdOut, "
    "uint64_t *workspaceSize, aclOpExecutor **executor)",
    _rms_norm_reference, outputs=("yOut", "rstdOut"), name="nn_rms_norm",
    dims="... h, h -> ... h, ... 1", replicated="h")
ADD_RMS_NORM = declare(
    "aclnnStatus aclnnAddRmsNormGetWorkspaceSize(const aclTensor *x1, const aclTensor *x2, "
    "const aclTensor *gamma, double epsilon, aclTensor *yOut, aclTensor *rstdOut, "
    "aclTensor *xOut, uint64_t *workspaceSize, aclOpExecutor **executor)",
    _add_rms_norm_reference, name="nn_add_rms_norm",
    dims="... h, ... h, h -> ... h, ... 1, ... h", replicated="h")
RMS_NORM_GRAD = declare(
    "aclnnStatus aclnnRmsNormGradGetWorkspaceSize(const aclTensor *dy, const aclTensor *x, "
    "const aclTensor *rstd, const aclTensor *gamma, const aclTensor *dxOut, "
    "const aclTensor *dgammaOut, uint64_t *workspaceSize, aclOpExecutor **executor)",
    _rms_norm_grad_reference, outputs=("dxOut", "dgammaOut"), name="nn_rms_norm_grad",
    dims="... h, ... h, ... 1, h -> ... h, h", replicated="h")


def _flat(x: Any, weight: Any) -> tuple[Any, Any]:
    """x and weight with weight's dimensions merged into one (CANN normalizes
    over weight's trailing dimensions; the rules name one)."""
    lead = x.shape[: x.ndim - weight.ndim]
    return x.reshape(lead + (math.prod(weight.shape),)), weight.reshape(-1)


def _check(name: str, x: Any, weight: Any) -> None:
    if weight.ndim == 0 or weight.ndim > x.ndim or x.shape[x.ndim - weight.ndim:] != weight.shape:
        raise ValueError(f"{name}: weight of shape {weight.shape} must be x's trailing "
                         f"dimensions (x of shape {x.shape})")
    for arg, v in (("x", x), ("weight", weight)):
        if not jnp.issubdtype(v.dtype, jnp.floating):
            raise TypeError(f"{name}: {arg} must be float32, float16 or bfloat16, got {v.dtype}")
    if weight.dtype not in (x.dtype, jnp.float32):
        raise TypeError(f"{name}: weight must be x's dtype ({x.dtype}) or float32 (CANN's mixed "
                        f"precision), got {weight.dtype}")


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _rms_norm(x, weight, epsilon):
    xf, wf = _flat(x, weight)
    return RMS_NORM(xf, wf, epsilon=epsilon)[0].reshape(x.shape)


def _rms_norm_fwd(x, weight, epsilon):
    xf, wf = _flat(x, weight)
    y, rstd = RMS_NORM(xf, wf, epsilon=epsilon)
    return y.reshape(x.shape), (xf, wf, rstd, x, weight)


def _rms_norm_bwd(epsilon, res, dy):
    xf, wf, rstd, x, weight = res
    dx, dgamma = RMS_NORM_GRAD(dy.reshape(xf.shape), xf, rstd, wf)
    return dx.reshape(x.shape), dgamma.reshape(weight.shape).astype(weight.dtype)


_rms_norm.defvjp(_rms_norm_fwd, _rms_norm_bwd)


def rms_norm(x: Any, weight: Any, *, epsilon: float = 1e-6) -> jax.Array:
    """RMSNorm on aclnnRmsNorm and aclnnRmsNormGrad.

    ``x * rsqrt(mean(x**2 over weight's dimensions) + epsilon) * weight``.

    Forward aclnnRmsNorm, backward aclnnRmsNormGrad (CANN's fused kernels,
    one call each per use where a provider has them; their pure-JAX
    references elsewhere). The math of ``flax.nnx.RMSNorm`` and
    ``torch_npu.npu_rms_norm``.

    Args:
      x: ``(..., *weight.shape)``, float32, float16 or bfloat16.
      weight: the scale over x's trailing dimensions (``(h,)`` for a
        hidden size h); x's dtype or float32 (CANN's mixed precision: half
        activations with a float32 weight).
      epsilon: added to the mean square, inside the square root (CANN's
        ``double epsilon``).

    Returns:
      ``y`` of x's shape and dtype (computed in float32). Its gradient in
      ``weight`` is computed in float32 and returned in weight's dtype.

    Raises:
      ValueError: weight is not x's trailing dimensions.
      TypeError: x or weight is not floating.

    Dimension rule: the rows (every dimension before weight's) are
    partitioned; the normalized dimensions stay whole; dgamma is summed over
    the rows (all-reduced where they are sharded).
    """
    x, weight = jnp.asarray(x), jnp.asarray(weight)
    _check("rms_norm", x, weight)
    return _rms_norm(x, weight, float(epsilon))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _add_rms_norm(x1, x2, weight, epsilon):
    return _add_rms_norm_fwd(x1, x2, weight, epsilon)[0]


def _add_rms_norm_fwd(x1, x2, weight, epsilon):
    a, _ = _flat(x1, weight)
    b, wf = _flat(x2, weight)
    y, rstd, x = ADD_RMS_NORM(a, b, wf, epsilon=epsilon)
    out = (y.reshape(x1.shape), x.reshape(x1.shape))
    return out, (x, wf, rstd, x1, weight)


def _add_rms_norm_bwd(epsilon, res, cts):
    x, wf, rstd, x1, weight = res
    dy, dsum = cts
    dx, dgamma = RMS_NORM_GRAD(dy.reshape(x.shape), x, rstd, wf)
    d = dx.reshape(x1.shape) + dsum  # the sum's cotangent passes to both addends
    return d, d, dgamma.reshape(weight.shape).astype(weight.dtype)


_add_rms_norm.defvjp(_add_rms_norm_fwd, _add_rms_norm_bwd)


def add_rms_norm(x1: Any, x2: Any, weight: Any, *, epsilon: float = 1e-6
                 ) -> tuple[jax.Array, jax.Array]:
    """Residual add and RMSNorm on aclnnAddRmsNorm.

    ``(rms_norm(x1 + x2, weight), x1 + x2)``.

    Forward aclnnAddRmsNorm (one kernel for the add and the norm), backward
    aclnnRmsNormGrad (the sum's cotangent added in JAX, to both addends);
    their references elsewhere. torch_npu's ``npu_add_rms_norm``.

    Args:
      x1, x2: ``(..., *weight.shape)``, the same shape and dtype (float32,
        float16 or bfloat16).
      weight: the scale, x1's dtype (CANN's AddRmsNorm takes one dtype).
      epsilon: added to the mean square, inside the square root.

    Returns:
      ``(y, x1 + x2)``, both of x1's shape and dtype.

    Raises:
      ValueError: x1 and x2 differ in shape, or weight is not their trailing
        dimensions.
      TypeError: the dtypes differ or are not floating.
    """
    x1, x2, weight = jnp.asarray(x1), jnp.asarray(x2), jnp.asarray(weight)
    if x1.shape != x2.shape:
        raise ValueError(f"add_rms_norm: x1 {x1.shape} and x2 {x2.shape} differ in shape")
    if not x1.dtype == x2.dtype == weight.dtype:
        raise TypeError(f"add_rms_norm: x1 ({x1.dtype}), x2 ({x2.dtype}) and weight "
                        f"({weight.dtype}) must have one dtype (CANN's aclnnAddRmsNorm)")
    _check("add_rms_norm", x1, weight)
    return _add_rms_norm(x1, x2, weight, float(epsilon))
