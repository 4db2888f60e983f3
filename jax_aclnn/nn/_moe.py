"""Mixture-of-experts routing: aclnnMoeGatingTopKSoftmaxV2,
aclnnMoeTokenPermute / aclnnMoeTokenPermuteGrad and aclnnMoeTokenUnpermute /
aclnnMoeTokenUnpermuteGrad.

Prototypes from CANN's ops-transformer sources (the pages
moe/moe_gating_top_k_softmax_v2/docs/aclnnMoeGatingTopKSoftmaxV2.md,
moe/moe_token_permute/docs/aclnnMoeTokenPermute.md,
moe/moe_token_permute_grad/docs/aclnnMoeTokenPermuteGrad_en.md,
moe/moe_token_unpermute/docs/aclnnMoeTokenUnpermute_en.md,
moe/moe_token_unpermute_grad/docs/aclnnMoeTokenUnpermuteGrad_en.md), with
their formulas as the references. Argument orders as torch_npu passes them
(op-plugin op_plugin/ops/opapi): ``npu_moe_gating_top_k_softmax_v2`` calls
``EXEC_NPU_CMD(aclnnMoeGatingTopKSoftmaxV2, x, finished, k, renorm,
softmaxFlag, y, expert_idx, softmax_result)`` (and no operator when k or a
dimension of x is 0); aclnnMoeTokenPermute as its page's example calls it
(``tokens, indices, numOutTokens, paddedMode, permuteTokensOut,
sortedIndicesOut``); ``EXEC_NPU_CMD(aclnnMoeTokenPermuteGrad, grad_permuted_tokens,
sorted_indices, num_topK, padded_mode, grad_tokens)``;
MoeTokenUnpermuteKernelNpuOpApi.cpp: ``EXEC_NPU_CMD(aclnnMoeTokenUnpermute,
permuted_tokens, sorted_indices, probs, padded_mode, restore_shape,
unpermuted_tokens)``; its backward ``EXEC_NPU_CMD(aclnnMoeTokenUnpermuteGrad,
permuted_tokens, grad_unpermuted_tokens, sorted_indices, probs, padded_mode,
restore_shape, grad_permuted_tokens, grad_probs)``. CANN's pages say
``paddedMode`` must be false and ``restoreShapeOptional`` null (torch_npu
passes ``[1]``, unused when paddedMode is false); the softmax
output of the gating operator is not asked for (``outputSoftmaxResultFlag``
false, a 0-element tensor, as torch_npu passes it). CANN's gating
operator has no backward: its gradient is computed in JAX.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn import _compat
from jax_aclnn._declare import declare
from jax_aclnn.nn._common import check_float, merge, split, typed_like

_F32, _I32 = jnp.float32, jnp.int32
#: CANN's limits: k of the gating operator (aclnnMoeGatingTopKSoftmaxV2.md).
_MAX_K = 1024


def _gating_reference(x, finishedOptional, *, k, renorm, outputSoftmaxResultFlag):
    if renorm:  # top k of the logits, softmax over them (Mixtral)
        top, idx = jax.lax.top_k(x, k)
        y = jax.nn.softmax(top.astype(_F32), axis=-1)
    else:  # softmax, then its top k (DeepSeek, Qwen)
        y, idx = jax.lax.top_k(jax.nn.softmax(x.astype(_F32), axis=-1), k)
    return y.astype(x.dtype), idx.astype(_I32), jnp.zeros((0,), _F32)


def _permute_reference(tokens, indices, *, numOutTokens, paddedMode):
    k = indices.shape[1]
    first = jnp.argsort(indices.reshape(-1), stable=True)
    sorted_indices = jnp.argsort(first, stable=True).astype(_I32)
    return tokens[first // k], sorted_indices


def _permute_grad_reference(permutedOutputGrad, sortedIndices, *, numTopk, paddedMode):
    g = permutedOutputGrad.astype(_F32)[sortedIndices]
    return g.reshape(-1, numTopk, g.shape[-1]).sum(1).astype(permutedOutputGrad.dtype)


def _unpermute_reference(permutedTokens, sortedIndices, probsOptional, *, paddedMode,
                         restoreShapeOptional):
    t, k = probsOptional.shape
    rows = permutedTokens.astype(_F32)[sortedIndices].reshape(t, k, -1)
    out = jnp.einsum("tkh,tk->th", rows, probsOptional.astype(_F32))
    return out.astype(permutedTokens.dtype)


def _unpermute_grad_reference(permuteTokens, unpermutedTokensGrad, sortedIndices, probsOptional,
                              *, paddedMode, restoreShapeOptional):
    t, k = probsOptional.shape
    g = unpermutedTokensGrad.astype(_F32)
    rows = permuteTokens.astype(_F32)[sortedIndices].reshape(t, k, -1)
    probs_grad = jnp.einsum("tkh,th->tk", rows, g)
    spread = (g[:, None, :] * probsOptional.astype(_F32)[..., None]).reshape(t * k, -1)
    permuted_grad = jnp.zeros_like(spread).at[sortedIndices].set(spread)
    return permuted_grad.astype(permuteTokens.dtype), probs_grad.astype(probsOptional.dtype)


#: Rows t partitioned; experts e and choices k whole (z: the 0-element
#: softmax output).
GATING = declare(
    "aclnnStatus aclnnMoeGatingTopKSoftmaxV2GetWorkspaceSize(const aclTensor *x, "
    "const aclTensor *finishedOptional, int64_t k, int64_t renorm, bool outputSoftmaxResultFlag, "
    "const aclTensor *yOut, const aclTensor *expertIdxOut, const aclTensor *softmaxResultOutOptional, "
    "uint64_t *workspaceSize, aclOpExecutor **executor)",
    _gating_reference, outputs=("yOut", "expertIdxOut", "softmaxResultOutOptional"),
    name="nn_moe_gating_top_k_softmax_v2", dims="t e, t -> t k, t k, z",
    replicated=("e", "k", "z"))
#: Whole: tokens t, choices k and rows n (a sort over all of them), and the
#: hidden dimension h too: sortedIndicesOut lacks it, so a sharded h would
#: sum the shards' identical indices (check_dims finds it).
PERMUTE = declare(
    "aclnnStatus aclnnMoeTokenPermuteGetWorkspaceSize(const aclTensor *tokens, "
    "const aclTensor *indices, int64_t numOutTokens, bool paddedMode, "
    "const aclTensor *permuteTokensOut, const aclTensor *sortedIndicesOut, "
    "uint64_t *workspaceSize, aclOpExecutor **executor)",
    _permute_reference, outputs=("permuteTokensOut", "sortedIndicesOut"),
    name="nn_moe_token_permute", dims="t h, t k -> n h, n", replicated=("t", "k", "n", "h"))
PERMUTE_GRAD = declare(
    "aclnnStatus aclnnMoeTokenPermuteGradGetWorkspaceSize(const aclTensor *permutedOutputGrad, "
    "const aclTensor *sortedIndices, int64_t numTopk, bool paddedMode, aclTensor *out, "
    "uint64_t *workspaceSize, aclOpExecutor **executor)",
    _permute_grad_reference, name="nn_moe_token_permute_grad", dims="n h, n -> t h",
    replicated=("n", "t"))
UNPERMUTE = declare(
    "aclnnStatus aclnnMoeTokenUnpermuteGetWorkspaceSize(const aclTensor *permutedTokens, "
    "const aclTensor *sortedIndices, const aclTensor *probsOptional, bool paddedMode, "
    "const aclIntArray *restoreShapeOptional, aclTensor *out, uint64_t *workspaceSize, "
    "aclOpExecutor **executor)",
    _unpermute_reference, name="nn_moe_token_unpermute", dims="n h, n, t k -> t h",
    replicated=("n", "t", "k"))
#: probsGradOut lacks h: summed over the blocks of a sharded h.
UNPERMUTE_GRAD = declare(
    "aclnnStatus aclnnMoeTokenUnpermuteGradGetWorkspaceSize(const aclTensor* permuteTokens, "
    "const aclTensor* unpermutedTokensGrad, const aclTensor* sortedIndices, "
    "const aclTensor* probsOptional, bool paddedMode, const aclIntArray* restoreShapeOptional, "
    "aclTensor* permutedTokensGradOut, aclTensor* probsGradOut, uint64_t* workspaceSize, "
    "aclOpExecutor** executor)",
    _unpermute_grad_reference, name="nn_moe_token_unpermute_grad",
    dims="n h, t h, n, t k -> n h, t k", replicated=("n", "t", "k"))

_UNPADDED = dict(paddedMode=False, restoreShapeOptional=None)


def _check_int(where: str, name: str, x: Any) -> None:
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(f"{where}: {name} must be integers (int32), got {x.dtype}")


# -- top_k_routing ---------------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _routing(logits, k, renorm):
    return _routing_fwd(logits, k, renorm)[0]


def _routing_fwd(logits, k, renorm):
    w, ids, _ = GATING(logits, None, k=k, renorm=int(renorm), outputSoftmaxResultFlag=False)
    return (w, ids), (logits, ids)


def _routing_bwd(k, renorm, res, cts):
    logits, ids = res
    dw = cts[0].astype(_F32)
    onehot = jax.nn.one_hot(ids, logits.shape[-1], dtype=_F32)  # (t, k, e)
    if renorm:  # w = softmax(logits[ids])
        s = jax.nn.softmax(jnp.take_along_axis(logits, ids, axis=-1).astype(_F32), axis=-1)
        dv = s * (dw - jnp.sum(s * dw, axis=-1, keepdims=True))
        dlogits = jnp.einsum("tk,tke->te", dv, onehot)
    else:  # w = softmax(logits)[ids]
        p = jax.nn.softmax(logits.astype(_F32), axis=-1)
        dp = jnp.einsum("tk,tke->te", dw, onehot)
        dlogits = p * (dp - jnp.sum(p * dp, axis=-1, keepdims=True))
    return typed_like((dlogits.astype(logits.dtype),), (logits,))


_routing.defvjp(_routing_fwd, _routing_bwd)


def top_k_routing(logits: Any, k: int, *, renormalize: bool = False
                  ) -> tuple[jax.Array, jax.Array]:
    """Top-k expert routing on aclnnMoeGatingTopKSoftmaxV2.

    ``renormalize=False`` (DeepSeek, Qwen): ``jax.lax.top_k(
    jax.nn.softmax(logits, -1), k)``; ``True`` (Mixtral): ``jax.nn.softmax``
    over the values of ``jax.lax.top_k(logits, k)``. The softmax is computed
    in float32; ties are broken as ``jax.lax.top_k`` breaks them (the lower
    expert first) on the CPU providers (CANN does not document its order).

    Forward one aclnnMoeGatingTopKSoftmaxV2 (``renorm`` 0 or 1; CANN's page
    ops-transformer moe/moe_gating_top_k_softmax_v2/docs/
    aclnnMoeGatingTopKSoftmaxV2.md; torch_npu's
    ``npu_moe_gating_top_k_softmax_v2``); CANN has no backward for it: the
    gradient in ``logits`` is computed in JAX.

    Args:
      logits: ``(..., E)`` router logits (usually ``(T, E)``), float32,
        float16 or bfloat16.
      k: the number of experts per token, ``0 <= k <= E`` and at most
        1024 (CANN's limit).
      renormalize: softmax over the top k logits instead of the top k of
        the softmax.

    Returns:
      ``(weights, expert_ids)``, both ``(..., k)``: weights in logits'
      dtype, expert ids int32, each row in decreasing weight.

    Raises:
      TypeError: logits is not float32, float16 or bfloat16, or k is not
        an int.
      ValueError: logits is a scalar, or k is out of range.

    Dimension rule: the tokens partitioned; experts and choices whole.
    """
    logits = jnp.asarray(logits)
    check_float("top_k_routing", logits=logits)
    if not isinstance(k, int) or isinstance(k, bool):
        raise TypeError(f"top_k_routing: k must be an int, got {type(k).__name__}")
    if logits.ndim < 1:
        raise ValueError("top_k_routing: logits must have an expert dimension, got a scalar")
    if not 0 <= k <= min(logits.shape[-1], _MAX_K):
        raise ValueError(f"top_k_routing: k={k} must be in [0, min(E, {_MAX_K})] for logits of "
                         f"shape {logits.shape}")
    if k == 0 or logits.size == 0:  # no operator call (as torch_npu)
        shape = logits.shape[:-1] + (k,)
        return jnp.zeros(shape, logits.dtype), jnp.zeros(shape, _I32)
    w, ids = _routing(merge(logits, 0, logits.ndim - 1), k, bool(renormalize))
    lead, specs = logits.shape[:-1], _compat.dim_specs(logits)[:-1]
    return split(w, 0, lead, specs), split(ids, 0, lead, specs)


# -- moe_permute -------------------------------------------------------------


@jax.custom_vjp
def _permute(tokens, ids):
    return _permute_fwd(tokens, ids)[0]


def _permute_fwd(tokens, ids):
    permuted, sorted_indices = PERMUTE(tokens, ids, numOutTokens=0, paddedMode=False)
    return (permuted, sorted_indices), (sorted_indices, ids.shape[1], tokens)


def _permute_bwd(res, cts):
    sorted_indices, k, tokens = res
    d = PERMUTE_GRAD(cts[0], sorted_indices, numTopk=k, paddedMode=False)
    return typed_like((d.astype(tokens.dtype), None), (tokens, None))


_permute.defvjp(_permute_fwd, _permute_bwd)


def moe_permute(tokens: Any, expert_ids: Any, num_experts: int
                ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Tokens ordered by expert, on aclnnMoeTokenPermute.

    MaxText's permutation: ``order = argsort(expert_ids.reshape(-1),
    stable=True)``, ``permuted = tokens[order // k]`` (each token once per
    choice, grouped by expert, in token order within an expert),
    ``sorted_indices = argsort(order)`` (CANN's convention: the row of
    ``permuted`` that holds choice ``t*k + j``), ``group_sizes =
    bincount(expert_ids, length=num_experts)``, ready for
    :func:`ragged_dot`.

    Forward one aclnnMoeTokenPermute, backward one aclnnMoeTokenPermuteGrad
    (ops-transformer moe/moe_token_permute/docs/aclnnMoeTokenPermute.md;
    torch_npu's ``npu_moe_token_permute``); the group sizes are a bincount
    in JAX.

    Args:
      tokens: ``(T, H)``, float32, float16 or bfloat16.
      expert_ids: ``(T, k)`` integers in ``[0, num_experts)`` (ids outside
        it are sorted by value but counted in no group).
      num_experts: E, the length of ``group_sizes``.

    Returns:
      ``(permuted (T*k, H), sorted_indices (T*k,) int32, group_sizes (E,)
      int32)``; differentiable in tokens.

    Raises:
      TypeError: tokens is not float32, float16 or bfloat16, or expert_ids
        are not integers.
      ValueError: the shapes are not those above, or num_experts < 1.
    """
    tokens, expert_ids = jnp.asarray(tokens), jnp.asarray(expert_ids)
    check_float("moe_permute", tokens=tokens)
    _check_int("moe_permute", "expert_ids", expert_ids)
    if tokens.ndim != 2 or expert_ids.ndim != 2 or expert_ids.shape[0] != tokens.shape[0]:
        raise ValueError(f"moe_permute: tokens (T, H) and expert_ids (T, k); got {tokens.shape} "
                         f"and {expert_ids.shape}")
    if not isinstance(num_experts, int) or num_experts < 1:
        raise ValueError(f"moe_permute: num_experts must be a positive int, got {num_experts!r}")
    ids = expert_ids.astype(_I32)
    permuted, sorted_indices = _permute(tokens, ids)
    sizes = jnp.bincount(ids.reshape(-1), length=num_experts).astype(_I32)
    return permuted, sorted_indices, sizes


# -- moe_unpermute -----------------------------------------------------------


@jax.custom_vjp
def _unpermute(permuted, sorted_indices, weights):
    return UNPERMUTE(permuted, sorted_indices, weights, **_UNPADDED)


def _unpermute_fwd(permuted, sorted_indices, weights):
    return _unpermute(permuted, sorted_indices, weights), (permuted, sorted_indices, weights)


def _unpermute_bwd(res, dy):
    permuted, sorted_indices, weights = res
    dp, dw = UNPERMUTE_GRAD(permuted, dy, sorted_indices, weights, **_UNPADDED)
    return typed_like((dp, None, dw), (permuted, None, weights))


_unpermute.defvjp(_unpermute_fwd, _unpermute_bwd)


def moe_unpermute(permuted: Any, sorted_indices: Any, weights: Any) -> jax.Array:
    """The experts' outputs combined per token, on aclnnMoeTokenUnpermute.

    ``y[t] = sum_j weights[t, j] * permuted[sorted_indices[t*k + j]]``,
    accumulated in float32, in permuted's dtype: the inverse of
    :func:`moe_permute` weighted by the routing weights.

    Forward one aclnnMoeTokenUnpermute, backward one
    aclnnMoeTokenUnpermuteGrad (gradients in permuted and weights;
    ops-transformer moe/moe_token_unpermute/docs/aclnnMoeTokenUnpermute.md;
    torch_npu's ``npu_moe_token_unpermute``).

    Args:
      permuted: ``(T*k, H)``, float32, float16 or bfloat16.
      sorted_indices: ``(T*k,)`` integers, a permutation of ``range(T*k)``
        (as :func:`moe_permute` returns it).
      weights: ``(T, k)`` float, cast to permuted's dtype for the call
        (CANN's operator takes one dtype); its gradient in its own dtype.

    Returns:
      ``(T, H)`` in permuted's dtype; differentiable in permuted and weights.

    Raises:
      TypeError: permuted or weights is not float32, float16 or bfloat16,
        or sorted_indices are not integers.
      ValueError: the shapes are not those above.
    """
    permuted, sorted_indices, weights = (jnp.asarray(a) for a in (permuted, sorted_indices,
                                                                   weights))
    check_float("moe_unpermute", permuted=permuted, weights=weights)
    _check_int("moe_unpermute", "sorted_indices", sorted_indices)
    if permuted.ndim != 2 or weights.ndim != 2 or \
            sorted_indices.shape != (permuted.shape[0],) or weights.size != permuted.shape[0]:
        raise ValueError(f"moe_unpermute: permuted (T*k, H), sorted_indices (T*k,), weights "
                         f"(T, k); got {permuted.shape}, {sorted_indices.shape}, {weights.shape}")
    return _unpermute(permuted, sorted_indices.astype(_I32), weights.astype(permuted.dtype))


__all__ = ["moe_permute", "moe_unpermute", "top_k_routing"]
