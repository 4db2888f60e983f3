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
from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn._declare import declare
from jax_aclnn.nn._common import (check_float, merge, rows_merged_past_rank, sharded_like,
                                  split, typed_like)

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
    dgamma = jnp.sum(dyf * xf * rstd, axis=tuple(range(x.ndim - 1)))
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
    return merge(x, x.ndim - weight.ndim, x.ndim), merge(weight, 0, weight.ndim)


def _unflat(y: Any, like: Any, n: int) -> Any:
    """``y``, whose last dimension merges ``like``'s last ``n``, in like's
    shape and explicit sharding (see :func:`sharded_like`)."""
    return sharded_like(split(y, y.ndim - 1, like.shape[like.ndim - n:], (None,) * n), like)


def _check(name: str, x: Any, weight: Any, x_name: str = "x") -> None:
    if weight.ndim == 0 or weight.ndim > x.ndim or x.shape[x.ndim - weight.ndim:] != weight.shape:
        raise ValueError(f"{name}: weight of shape {weight.shape} must be {x_name}'s trailing "
                         f"dimensions ({x_name} of shape {x.shape})")
    check_float(name, **{x_name: x}, weight=weight)
    if weight.dtype not in (x.dtype, jnp.float32):
        raise TypeError(f"{name}: weight must be {x_name}'s dtype ({x.dtype}) or float32 (mixed "
                        f"precision), got {weight.dtype}")


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _rms_norm(x, weight, epsilon):
    return _rms_norm_fwd(x, weight, epsilon)[0]


def _rms_norm_fwd(x, weight, epsilon):
    xf, wf = _flat(x, weight)
    y, rstd = RMS_NORM(xf, wf, epsilon=epsilon)
    return _unflat(y, x, weight.ndim), (xf, wf, rstd, x, weight)


def _rms_norm_bwd(epsilon, res, dy):
    xf, wf, rstd, x, weight = res
    dx, dgamma = RMS_NORM_GRAD(_flat(dy, weight)[0], xf, rstd, wf)
    return typed_like((_unflat(dx, x, weight.ndim),
                       _unflat(dgamma.astype(weight.dtype), weight, weight.ndim)), (x, weight))


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
      TypeError: x or weight is not float32, float16 or bfloat16 (float64
        included, under ``jax_enable_x64``: CANN takes none), or weight is
        neither x's dtype nor float32.

    Dimension rule: the rows (every dimension before weight's) are
    partitioned; the normalized dimensions stay whole; dgamma is summed over
    the rows (all-reduced where they are sharded).
    """
    x, weight = jnp.asarray(x), jnp.asarray(weight)
    _check("rms_norm", x, weight)
    if x.ndim == weight.ndim:  # one row: aclnnRmsNormGrad takes x of rank 2 to 8
        return rms_norm(x[None], weight, epsilon=epsilon)[0]
    return rows_merged_past_rank(_rms_norm, [x], x.ndim - weight.ndim, weight, float(epsilon))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _add_rms_norm(x1, x2, weight, epsilon):
    return _add_rms_norm_fwd(x1, x2, weight, epsilon)[0]


def _add_rms_norm_fwd(x1, x2, weight, epsilon):
    a, wf = _flat(x1, weight)
    # CANN's AddRmsNorm takes gamma in x1's dtype only (ops-nn
    # norm/add_rms_norm/docs/aclnnAddRmsNorm.md, its table of dtype
    # combinations): a float32 weight is cast, as Flax casts its float32
    # scale to the layer's dtype; its gradient stays float32.
    wf = wf.astype(x1.dtype)
    y, rstd, x = ADD_RMS_NORM(a, _flat(x2, weight)[0], wf, epsilon=epsilon)
    out = (_unflat(y, x1, weight.ndim), _unflat(x, x1, weight.ndim))
    return out, (x, wf, rstd, x1, weight)


def _add_rms_norm_bwd(epsilon, res, cts):
    x, wf, rstd, x1, weight = res
    dy, dsum = cts
    dx, dgamma = RMS_NORM_GRAD(_flat(dy, weight)[0], x, rstd, wf)
    d = _unflat(dx, x1, weight.ndim) + dsum  # the sum's cotangent passes to both addends
    return typed_like((d, d, _unflat(dgamma.astype(weight.dtype), weight, weight.ndim)),
                      (x1, x1, weight))


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
      weight: the scale over x1's trailing dimensions; x1's dtype or
        float32 (the usual mixed precision: float32 parameters, half
        activations). CANN's AddRmsNorm takes gamma in x1's dtype only
        (ops-nn norm/add_rms_norm/docs/aclnnAddRmsNorm.md): a float32 weight
        is cast to x1's dtype for the call, as Flax's layers cast their
        scale to the computation's dtype; its gradient is computed in
        float32 and returned in float32.
      epsilon: added to the mean square, inside the square root.

    Returns:
      ``(y, x1 + x2)``, both of x1's shape and dtype.

    Raises:
      ValueError: x1 and x2 differ in shape, or weight is not their trailing
        dimensions.
      TypeError: x1 and x2 differ in dtype, a dtype is not float32, float16
        or bfloat16 (float64 included: CANN takes none), or weight is
        neither x1's dtype nor float32.
    """
    x1, x2, weight = jnp.asarray(x1), jnp.asarray(x2), jnp.asarray(weight)
    if x1.shape != x2.shape:
        raise ValueError(f"add_rms_norm: x1 {x1.shape} and x2 {x2.shape} differ in shape")
    if x1.dtype != x2.dtype:
        raise TypeError(f"add_rms_norm: x1 ({x1.dtype}) and x2 ({x2.dtype}) must have one "
                        f"dtype (CANN's aclnnAddRmsNorm)")
    _check("add_rms_norm", x1, weight, "x1")
    if x1.ndim == weight.ndim:  # one row: aclnnRmsNormGrad takes x of rank 2 to 8
        y, x = add_rms_norm(x1[None], x2[None], weight, epsilon=epsilon)
        return y[0], x[0]
    return rows_merged_past_rank(_add_rms_norm, [x1, x2], x1.ndim - weight.ndim, weight,
                                 float(epsilon))
