"""Grouped matrix products: aclnnGroupedMatmulV4.

Prototype from CANN's ops-transformer sources
(gmm/grouped_matmul/op_host/op_api/aclnn_grouped_matmul_v4.h and its page
gmm/grouped_matmul/docs/aclnnGroupedMatmulV4.md): single tensors in its
lists, the group list as per-group counts (``groupListType`` 1). torch_npu
calls it from ``npu_grouped_matmul`` (op-plugin
op_plugin/ops/opapi/GroupedMatmulKernelNpuOpApi.cpp) and registers no
backward; here the backward is two more grouped products: the groups along
M (``groupType`` 0) with the weights transposed for the rows' gradient, the
groups along K (``groupType`` 2) for the weights' gradient.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn._declare import declare
from jax_aclnn.nn._common import check_float, typed_like

try:  # the scope in which JAX has 64-bit types
    from jax import enable_x64  # jax >= 0.8
except ImportError:  # jax 0.7
    from jax.experimental import enable_x64

_F32 = jnp.float32
_PROTOTYPE = (
    "aclnnStatus aclnnGroupedMatmulV4GetWorkspaceSize(const aclTensorList *x, "
    "const aclTensorList *weight, const aclTensorList *biasOptional, "
    "const aclTensorList *scaleOptional, const aclTensorList *offsetOptional, "
    "const aclTensorList *antiquantScaleOptional, const aclTensorList *antiquantOffsetOptional, "
    "const aclTensorList *perTokenScaleOptional, const aclTensor *groupListOptional, "
    "const aclTensorList *activationInputOptional, "
    "const aclTensorList *activationQuantScaleOptional, "
    "const aclTensorList *activationQuantOffsetOptional, int64_t splitItem, int64_t groupType, "
    "int64_t groupListType, int64_t actType, aclTensorList *out, "
    "aclTensorList *activationFeatureOutOptional, aclTensorList *dynQuantScaleOutOptional, "
    "uint64_t *workspaceSize, aclOpExecutor **executor)")
_GROUP_ALONG_M, _GROUP_ALONG_K = 0, 2
_COUNTS = 1
#: The lists this module never fills (quantization, activation): empty.
_EMPTY = 9


def _groups_of(size, counts):
    """Each index's group along a dimension of ``size`` split by ``counts``
    (past their total: len(counts), no group). By comparison, not
    searchsorted: jax 0.7 lowers that one's comparison in a ``shard_map``
    with the operands' varying axes unmatched."""
    return jnp.sum(jnp.arange(size)[:, None] >= jnp.cumsum(counts)[None, :], axis=1)


@jax.custom_batching.custom_vmap
def _rows_by_group(a, w, counts):
    """``jax.lax.ragged_dot`` in float32, whose batching rule takes every
    operand batched at dimension 0 only: under ``vmap`` (reached where
    ``reference_path`` runs the references) one product per example
    (``jax.lax.map``), as the operator's own batching rule runs it. Never
    differentiated: :func:`ragged_dot`'s VJP calls the operator."""
    return jax.lax.ragged_dot(a.astype(_F32), w.astype(_F32), counts)


@_rows_by_group.def_vmap
def _rows_by_group_per_example(size, batched, *operands):
    mapped = [x for x, b in zip(operands, batched) if b]

    def one(xs):
        xs = iter(xs)
        return _rows_by_group(*(next(xs) if b else x for x, b in zip(operands, batched)))

    return jax.lax.map(one, mapped), True


def _reference(x, weight, biasOptional, scaleOptional, offsetOptional, antiquantScaleOptional,
               antiquantOffsetOptional, perTokenScaleOptional, groupListOptional,
               activationInputOptional, activationQuantScaleOptional,
               activationQuantOffsetOptional, *, splitItem, groupType, groupListType, actType):
    (a,), (w,) = x, weight
    # int64, made in a 64-bit scope (ragged_dot): computed in int32, as the
    # reference may be traced again (lowered) in JAX's 32-bit mode
    counts = groupListOptional.astype(jnp.int32)
    if groupType == _GROUP_ALONG_M:  # out[rows of e] = a[rows] @ w[e]
        out = _rows_by_group(a, w, counts)
    else:  # groups along K: out[e] = a[:, ks of e] @ w[ks of e]
        g = _groups_of(a.shape[1], counts)
        onehot = jax.nn.one_hot(g, counts.shape[0], dtype=_F32)  # (K, E)
        out = jnp.einsum("mk,ke,kn->emn", a.astype(_F32), onehot, w.astype(_F32))
    return [out.astype(a.dtype)], [], []


def _operator(group_type: int, dims: str, replicated: tuple[str, ...], name: str):
    return declare(_PROTOTYPE, _reference, name=name, dims=dims, replicated=replicated)


#: Groups along M: the rows m and the groups g stay whole (the counts are
#: global), the output columns n are partitioned, K summed over.
_ALONG_M = _operator(_GROUP_ALONG_M, "m k, g k n, g n, a, a, a, a, a, g, a, a, a -> m n, a, a",
                     ("m", "g", "a"), "nn_grouped_matmul_v4")
#: Groups along K (the weights' gradient): x is (K', M) = lhs^T, weight (M, N).
_ALONG_K = _operator(_GROUP_ALONG_K, "k m, m n, g n, a, a, a, a, a, g, a, a, a -> g k n, a, a",
                     ("m", "g", "a"), "nn_grouped_matmul_v4_along_k")


def _call(op, a, w, counts, group_type):
    (out,), _, _ = op([a], [w], [], [], [], [], [], [], counts, [], [], [], splitItem=3,
                      groupType=group_type, groupListType=_COUNTS, actType=0)
    return out


@jax.custom_vjp
def _ragged_dot(lhs, rhs, counts):
    return _ragged_dot_fwd(lhs, rhs, counts)[0]


def _ragged_dot_fwd(lhs, rhs, counts):
    out = _call(_ALONG_M, lhs, rhs, counts, _GROUP_ALONG_M)
    # rows past the groups' total: CANN leaves them unwritten, JAX's contract is 0
    covered = jnp.arange(lhs.shape[0]) < jnp.sum(counts)
    return jnp.where(covered[:, None], out, 0).astype(out.dtype), (lhs, rhs, counts, covered)


def _ragged_dot_bwd(res, g):
    lhs, rhs, counts, covered = res
    g = jnp.where(covered[:, None], g, 0).astype(g.dtype)
    dlhs = _call(_ALONG_M, g, jnp.swapaxes(rhs, 1, 2), counts, _GROUP_ALONG_M)
    dlhs = jnp.where(covered[:, None], dlhs, 0).astype(lhs.dtype)
    drhs = _call(_ALONG_K, lhs.T, g, counts, _GROUP_ALONG_K).astype(rhs.dtype)
    return typed_like((dlhs, drhs, None), (lhs, rhs, None))


_ragged_dot.defvjp(_ragged_dot_fwd, _ragged_dot_bwd)


def ragged_dot(lhs: Any, rhs: Any, group_sizes: Any, *,
               preferred_element_type: Any = None) -> jax.Array:
    """Grouped matrix product on aclnnGroupedMatmulV4.

    The contract of ``jax.lax.ragged_dot``: the rows of ``lhs`` fall into
    consecutive groups of ``group_sizes`` rows, group ``e`` multiplied by
    ``rhs[e]``; rows past the groups' total give zeros. Forward one
    aclnnGroupedMatmulV4 (groups along M), backward two (the rows' gradient
    along M with ``rhs`` transposed, the weights' along K).

    CANN's group list is int64: ``group_sizes`` is passed as int64 in JAX's
    default 32-bit mode too (made in a 64-bit scope; no ``jax_enable_x64``
    needed). ``jax.lax.ragged_dot`` computes a ``preferred_element_type``
    other than the operands' (promoted) dtype: CANN's unquantized grouped
    product returns x's dtype (ops-transformer
    gmm/grouped_matmul/docs/aclnnGroupedMatmulV4.md). Under ``vmap`` (an MoE
    layer evaluated per example, where ``jax.lax.ragged_dot`` raises
    ``NotImplementedError`` for batched rows and unbatched weights) it runs
    once per example (``jax.lax.map``).

    Args:
      lhs: ``(m, k)``, float32, float16 or bfloat16.
      rhs: ``(g, k, n)``, float32, float16 or bfloat16; operands of two
        dtypes are computed in their promoted dtype, as JAX does.
      group_sizes: ``(g,)`` non-negative integers (CANN's group list holds
        counts; where one is negative, jax.lax.ragged_dot's groups overlap
        and this function's result is unspecified), summing to at most m.
      preferred_element_type: the result's dtype, as jax.lax.ragged_dot's.

    Returns:
      ``(m, n)`` in ``preferred_element_type``, else the operands' promoted
      dtype.

    Raises:
      ValueError: the shapes are not those above.
      TypeError: lhs or rhs is not float32, float16 or bfloat16 (float64
        included: CANN takes none), or group_sizes are not integers.

    Dimension rule: the output columns partitioned, k summed over; rows and
    groups whole.
    """
    lhs, rhs, group_sizes = jnp.asarray(lhs), jnp.asarray(rhs), jnp.asarray(group_sizes)
    if lhs.ndim != 2 or rhs.ndim != 3 or rhs.shape[1] != lhs.shape[1] or \
            group_sizes.shape != rhs.shape[:1]:
        raise ValueError(f"ragged_dot: lhs (m, k), rhs (g, k, n), group_sizes (g,); got "
                         f"{lhs.shape}, {rhs.shape}, {group_sizes.shape}")
    check_float("ragged_dot", lhs=lhs, rhs=rhs)
    if not jnp.issubdtype(group_sizes.dtype, jnp.integer):
        raise TypeError(f"ragged_dot: group_sizes must be integers, got {group_sizes.dtype}")
    dtype = jnp.promote_types(lhs.dtype, rhs.dtype)
    if preferred_element_type is not None and jnp.dtype(preferred_element_type) != dtype:
        return jax.lax.ragged_dot(lhs, rhs, group_sizes,
                                  preferred_element_type=preferred_element_type)
    # CANN's group list is int64: made in a 64-bit scope in JAX's default
    # 32-bit mode too (only the group list is 64-bit: the custom call's
    # operand; everything else keeps its dtype)
    with enable_x64(True):
        return _ragged_dot(lhs.astype(dtype), rhs.astype(dtype), group_sizes.astype(jnp.int64))


__all__ = ["ragged_dot"]
