"""Attention: aclnnFlashAttentionScore and aclnnFlashAttentionScoreGrad.

Prototypes from CANN's ops-transformer sources
(attention/flash_attention_score/op_host/op_api/aclnn_flash_attention_score.h,
attention/flash_attention_score_grad/op_host/op_api/aclnn_flash_attention_score_grad.h,
docs/context/sparse_mode参数说明.md for the sparse modes). torch_npu's
``npu_fusion_attention`` passes them in this order (op-plugin
op_plugin/ops/opapi/FlashAttentionKernelNpuOpApi.cpp): query, key, value,
pse, drop_mask, padding_mask, atten_mask, prefix, scale, keep_prob,
pre_tokens, next_tokens, head_num, input_layout, inner_precise,
sparse_mode, softmax_max, softmax_sum, softmax_out, attention_out; the
backward query, key, value, dy, pse, drop_mask, padding_mask, atten_mask,
softmax_max, softmax_sum, softmax_in, attention_in, prefix, the same
attributes, dq, dk, dv, dpse.

CANN computes ``S = scaleValue * (Q K^T + pse)``, masks where attenMask is 1,
``P = softmax(S)``, ``Y = P V``, in layout BSND here (JAX's ``(B, T, N, H)``),
and returns the softmax statistics (row max and sum, each repeated 8 times:
``[B, N, T, 8]`` float32), which the backward takes instead of recomputing
them. ``headNum`` is the number of query heads on one card.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn._declare import declare

_F32 = jnp.float32
#: CANN's compressed causal mask of sparse modes 2-4: 1 above the diagonal.
_CAUSAL_SIZE = 2048
#: The size-1 patterns of (B, N, T, S) CANN takes (True: size 1), the most
#: broadcast first: pse [B, N, 1, S], [1, N, T, S], [B, N, T, S]; attenMask
#: [T, S] (as [1, 1, T, S]), [B, 1, T, S], [B, N, T, S].
_PSE_PATTERNS = [(False, False, True, False), (True, False, False, False), (False,) * 4]
_MASK_PATTERNS = [(True, True, False, False), (False, True, False, False), (False,) * 4]
_ALL_TOKENS = 2147483647  # preTokens/nextTokens: no band (torch_npu's default)
_SPARSE_MASK, _SPARSE_CAUSAL = 1, 2  # allMask; leftUpCausal (query i sees keys j <= i)


def _scores(query, key, realShift, attenMask, scale, sparse):
    """S (float32, (B, N, T, S)) and which entries are computed."""
    b, t, n, _ = query.shape
    s, k = key.shape[1], key.shape[2]
    kf = jnp.repeat(key.astype(_F32), n // k, axis=2)
    scores = jnp.einsum("btnh,bsnh->bnts", query.astype(_F32), kf)
    if realShift is not None:
        scores = scores + realShift.astype(_F32)
    scores = scores * _F32(scale)
    if sparse == _SPARSE_CAUSAL:
        valid = jnp.tril(jnp.ones((t, s), bool))
    elif attenMask is not None:
        valid = jnp.logical_not(attenMask.astype(bool))
    else:
        valid = jnp.ones((t, s), bool)
    return scores, jnp.broadcast_to(valid, (b, n, t, s))


def _forward_reference(query, key, value, realShiftOptional, dropMaskOptional,
                       paddingMaskOptional, attenMaskOptional, *, prefixOptional, scaleValue,
                       keepProb, preTokens, nextTokens, headNum, inputLayout, innerPrecise,
                       sparseMode):
    scores, valid = _scores(query, key, realShiftOptional, attenMaskOptional, scaleValue,
                            sparseMode)
    masked = jnp.where(valid, scores, -jnp.inf)
    row_max = jnp.max(masked, axis=-1, keepdims=True)
    any_valid = jnp.any(valid, axis=-1, keepdims=True)
    row_max = jnp.where(any_valid, row_max, 0.0)
    p = jnp.where(valid, jnp.exp(scores - row_max), 0.0)
    row_sum = jnp.sum(p, axis=-1, keepdims=True)
    n, k = query.shape[2], key.shape[2]
    vf = jnp.repeat(value.astype(_F32), n // k, axis=2)
    out = jnp.einsum("bnts,bsnv->btnv", p / jnp.where(row_sum > 0, row_sum, 1.0), vf)
    stats = lambda v: jnp.broadcast_to(v, v.shape[:-1] + (8,))  # noqa: E731
    row_max = jnp.where(any_valid, row_max, -jnp.finfo(_F32).max)
    return (stats(row_max), stats(row_sum), jnp.zeros((0,), query.dtype),
            out.astype(query.dtype))


def _grad_reference(query, keyIn, value, dy, pseShiftOptional, dropMaskOptional,
                    paddingMaskOptional, attenMaskOptional, softmaxMaxOptional,
                    softmaxSumOptional, softmaxInOptional, attentionInOptional, *,
                    prefixOptional, scaleValue, keepProb, preTokens, nextTokens, headNum,
                    inputLayout, innerPrecise, sparseMode):
    scores, valid = _scores(query, keyIn, pseShiftOptional, attenMaskOptional, scaleValue,
                            sparseMode)
    row_max, row_sum = softmaxMaxOptional[..., :1], softmaxSumOptional[..., :1]
    p = jnp.where(valid & (row_sum > 0), jnp.exp(scores - row_max) / jnp.where(
        row_sum > 0, row_sum, 1.0), 0.0)
    n, k = query.shape[2], keyIn.shape[2]
    group = n // k
    vf = jnp.repeat(value.astype(_F32), group, axis=2)
    dyf = dy.astype(_F32)
    dv = jnp.einsum("bnts,btnv->bsnv", p, dyf)
    dp = jnp.einsum("btnv,bsnv->bnts", dyf, vf)
    d = jnp.einsum("btnv,btnv->bnt", dyf, attentionInOptional.astype(_F32))[..., None]
    ds = p * (dp - d)
    kf = jnp.repeat(keyIn.astype(_F32), group, axis=2)
    dq = _F32(scaleValue) * jnp.einsum("bnts,bsnh->btnh", ds, kf)
    dk = _F32(scaleValue) * jnp.einsum("bnts,btnh->bsnh", ds, query.astype(_F32))
    heads = lambda x: x.reshape(x.shape[:2] + (k, group) + x.shape[3:]).sum(3)  # noqa: E731
    if pseShiftOptional is None:
        dpse = jnp.zeros((0,), query.dtype)
    else:
        full = _F32(scaleValue) * ds
        axes = tuple(i for i, m in enumerate(pseShiftOptional.shape) if m == 1 and full.shape[i] != 1)
        dpse = jnp.sum(full, axis=axes, keepdims=True).astype(query.dtype)
    return (dq.astype(query.dtype), heads(dk).astype(keyIn.dtype),
            heads(dv).astype(value.dtype), dpse)


_FORWARD = (
    "aclnnStatus aclnnFlashAttentionScoreGetWorkspaceSize(const aclTensor *query, "
    "const aclTensor *key, const aclTensor *value, const aclTensor *realShiftOptional, "
    "const aclTensor *dropMaskOptional, const aclTensor *paddingMaskOptional, "
    "const aclTensor *attenMaskOptional, const aclIntArray *prefixOptional, double scaleValue, "
    "double keepProb, int64_t preTokens, int64_t nextTokens, int64_t headNum, "
    "char *inputLayout, int64_t innerPrecise, int64_t sparseMode, "
    "const aclTensor *softmaxMaxOut, const aclTensor *softmaxSumOut, "
    "const aclTensor *softmaxOutOut, const aclTensor *attentionOutOut, "
    "uint64_t *workspaceSize, aclOpExecutor **executor)")
_GRAD = (
    "aclnnStatus aclnnFlashAttentionScoreGradGetWorkspaceSize(const aclTensor *query, "
    "const aclTensor *keyIn, const aclTensor *value, const aclTensor *dy, "
    "const aclTensor *pseShiftOptional, const aclTensor *dropMaskOptional, "
    "const aclTensor *paddingMaskOptional, const aclTensor *attenMaskOptional, "
    "const aclTensor *softmaxMaxOptional, const aclTensor *softmaxSumOptional, "
    "const aclTensor *softmaxInOptional, const aclTensor *attentionInOptional, "
    "const aclIntArray *prefixOptional, double scaleValue, double keepProb, int64_t preTokens, "
    "int64_t nextTokens, int64_t headNum, char *inputLayout, int64_t innerPrecise, "
    "int64_t sparseMode, const aclTensor *dqOut, const aclTensor *dkOut, "
    "const aclTensor *dvOut, const aclTensor *dpseOut, uint64_t *workspaceSize, "
    "aclOpExecutor **executor)")


def _group(pattern: tuple[bool, ...], names: str) -> str:
    return " ".join("1" if p else f for p, f in zip(pattern, names))


#: Every pse and mask group the calls pass (absent: p, m; the compressed
#: causal mask: c d).
_PSE_GROUPS = ["p"] + [_group(p, "bnts") for p in _PSE_PATTERNS]
_MASK_GROUPS = ["m", "c d", "t s"] + [_group(p, "bnts") for p in _MASK_PATTERNS[1:]]


@functools.cache
def _operators(pse: str, mask: str, grouped: bool):
    """The pair for a pse and a mask of these groups (``p`` where absent) and
    key/value heads as many as the query's (``grouped`` False: the heads are
    one factor, partitioned) or fewer (grouped-query: heads stay whole)."""
    kv = "k" if grouped else "n"
    rule = dict(q="b t n h", k=f"b s {kv} h", v=f"b s {kv} v", stats="b n t e",
                o="b t n v")
    whole = ("t", "s", "h", "v", "e", "z", "x", "y", "p", "m", "c", "d") + (
        ("n", "k") if grouped else ())
    tag = f"{pse}_{mask}_{'gqa' if grouped else 'mha'}".replace(" ", "")
    forward_dims = (f"{rule['q']}, {rule['k']}, {rule['v']}, {pse}, x, y, {mask} -> "
                    f"{rule['stats']}, {rule['stats']}, z, {rule['o']}")
    grad_dims = (f"{rule['q']}, {rule['k']}, {rule['v']}, {rule['o']}, {pse}, x, y, {mask}, "
                 f"{rule['stats']}, {rule['stats']}, z, {rule['o']} -> "
                 f"{rule['q']}, {rule['k']}, {rule['v']}, {pse}")
    used = lambda rule: tuple(f for f in whole if f in rule.replace(",", " ").split())  # noqa: E731
    forward = declare(
        _FORWARD, _forward_reference, outputs=("softmaxMaxOut", "softmaxSumOut",
                                               "softmaxOutOut", "attentionOutOut"),
        name=f"nn_flash_attention_score_{tag}", dims=forward_dims,
        replicated=used(forward_dims), local_sizes={"headNum": "n"})
    grad = declare(
        _GRAD, _grad_reference, outputs=("dqOut", "dkOut", "dvOut", "dpseOut"),
        name=f"nn_flash_attention_score_grad_{tag}", dims=grad_dims,
        replicated=used(grad_dims), local_sizes={"headNum": "n"})
    return forward, grad


def _groups(query, key, pse, mask):
    """The dims groups of pse and the mask (as they are passed)."""
    full = query.shape[:1] + query.shape[2:3] + query.shape[1:2] + key.shape[1:2]
    pse_group = "p" if pse is None else _group(tuple(m == 1 and f != 1 for m, f in
                                                      zip(pse.shape, full)), "bnts")
    if mask is None:
        mask_group = "m"
    elif mask.shape == (_CAUSAL_SIZE, _CAUSAL_SIZE):
        mask_group = "c d"
    else:
        mask_group = "t s" if mask.ndim == 2 else _group(
            tuple(m == 1 and f != 1 for m, f in zip(mask.shape, full)), "bnts")
    return pse_group, mask_group, query.shape[2] != key.shape[2]


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _attention(query, key, value, pse, mask, scale, sparse):
    return _attention_fwd(query, key, value, pse, mask, scale, sparse)[0]


def _attributes(scale, sparse):
    return dict(prefixOptional=None, scaleValue=scale, keepProb=1.0, preTokens=_ALL_TOKENS,
                nextTokens=_ALL_TOKENS, inputLayout="BSND", innerPrecise=0, sparseMode=sparse)


def _attention_fwd(query, key, value, pse, mask, scale, sparse):
    forward, _ = _operators(*_groups(query, key, pse, mask))
    row_max, row_sum, _, out = forward(query, key, value, pse, None, None, mask,
                                       **_attributes(scale, sparse))
    return out, (query, key, value, pse, mask, row_max, row_sum, out)


def _attention_bwd(scale, sparse, res, dy):
    query, key, value, pse, mask, row_max, row_sum, out = res
    _, grad = _operators(*_groups(query, key, pse, mask))
    dq, dk, dv, dpse = grad(query, key, value, dy, pse, None, None, mask, row_max, row_sum,
                            None, out, **_attributes(scale, sparse))
    return dq, dk, dv, None if pse is None else dpse, None


_attention.defvjp(_attention_fwd, _attention_bwd)

# Declared at import, every pattern: a process that runs an exported program
# registers their custom-call targets by importing this module.
for _pse in _PSE_GROUPS:
    for _mask in _MASK_GROUPS:
        for _grouped in (False, True):
            _operators(_pse, _mask, _grouped)


def _cann_shape(x: Any, full: tuple[int, ...], allowed: list[tuple[bool, ...]]) -> Any:
    """``x`` (broadcastable to ``full`` by NumPy's rules) as a 4-D array of a
    pattern of size-1 dimensions CANN takes (``allowed``, True: size 1,
    from the most broadcast to the least): its own where CANN takes it,
    else the most broadcast one it fits, its other dimensions broadcast."""
    x = x.reshape((1,) * (4 - x.ndim) + x.shape)
    ones = tuple(m == 1 and f != 1 for m, f in zip(x.shape, full))
    keep = next(a for a in allowed if all(o or not k for o, k in zip(ones, a)))
    return jnp.broadcast_to(x, tuple(1 if k else f for k, f in zip(keep, full)))


def dot_product_attention(query: Any, key: Any, value: Any, bias: Any = None, mask: Any = None,
                          *, scale: float | None = None, is_causal: bool = False) -> jax.Array:
    """Scaled dot-product attention on aclnnFlashAttentionScore.

    The contract of ``jax.nn.dot_product_attention``:
    ``softmax(scale * query @ key^T + bias, masked) @ value`` per head, with
    grouped-query attention where key and value have fewer heads. Forward
    aclnnFlashAttentionScore (layout BSND), backward
    aclnnFlashAttentionScoreGrad fed with the forward's softmax statistics
    (kept as residuals, never recomputed in JAX); their pure-JAX references
    elsewhere. torch_npu's ``npu_fusion_attention``.

    Args:
      query: ``(B, T, N, H)``, float32, float16 or bfloat16.
      key, value: ``(B, S, K, H)``, query's dtype; N a multiple of K.
      bias: added to the scaled logits, broadcastable to ``(B, N, T, S)``
        (CANN's pse: passed as ``bias / scale``, CANN adding it before the
        scale); differentiable.
      mask: boolean, broadcastable to ``(B, N, T, S)``: True where a query
        attends to a key (CANN's attenMask is its negation).
      scale: the logits' scale; default ``1 / sqrt(H)``.
      is_causal: query i attends to keys j <= i (CANN's sparse mode 2, the
        top-left causal mask; with ``mask``, both apply).

    Returns:
      ``(B, T, N, H)`` in query's dtype (computed in float32). A query that
      attends to no key gets zeros (CANN's invalid-row handling).

    Raises:
      ValueError: the shapes are not those above, or N is not a multiple
        of K.
      TypeError: the dtypes differ or are not floating, or mask is not
        boolean.

    Dimension rule: batch partitioned, and heads where key and value have
    as many as query (each shard's call gets its local head count as
    ``headNum``); sequences and head size whole. Dropout is not supported
    (CANN's needs its separate mask generator).
    """
    query, key, value = jnp.asarray(query), jnp.asarray(key), jnp.asarray(value)
    if query.ndim != 4 or key.ndim != 4 or value.shape != key.shape or \
            query.shape[0] != key.shape[0] or query.shape[3] != key.shape[3] or \
            key.shape[2] == 0 or query.shape[2] % key.shape[2]:
        raise ValueError(f"dot_product_attention: query (B, T, N, H), key and value (B, S, K, H) "
                         f"with N a positive multiple of K; got {query.shape}, {key.shape}, "
                         f"{value.shape}")
    if not (query.dtype == key.dtype == value.dtype) or not jnp.issubdtype(query.dtype,
                                                                           jnp.floating):
        raise TypeError(f"dot_product_attention: query, key and value of one floating dtype, "
                        f"got {query.dtype}, {key.dtype}, {value.dtype}")
    b, t, n, h = query.shape
    s = key.shape[1]
    scale = 1 / math.sqrt(h) if scale is None else float(scale)
    full = (b, n, t, s)
    pse = None
    if bias is not None:
        pse = _cann_shape(jnp.asarray(bias).astype(query.dtype) / jnp.asarray(scale, query.dtype),
                          full, _PSE_PATTERNS)
    masked_out = None
    if mask is not None:
        mask = jnp.asarray(mask)
        if mask.dtype != jnp.bool_:
            raise TypeError(f"dot_product_attention: mask must be boolean, got {mask.dtype}")
        keep = jnp.logical_and(mask, jnp.tril(jnp.ones((t, s), bool))) if is_causal else mask
        masked_out = _cann_shape(jnp.logical_not(keep), full, _MASK_PATTERNS)
        if masked_out.shape[:2] == (1, 1):
            masked_out = masked_out.reshape(t, s)
        sparse = _SPARSE_MASK
    elif is_causal:
        masked_out = jnp.triu(jnp.ones((_CAUSAL_SIZE, _CAUSAL_SIZE), bool), 1)
        sparse = _SPARSE_CAUSAL
    else:
        sparse = 0
    return _attention(query, key, value, pse, masked_out, scale, sparse)


__all__ = ["dot_product_attention"]
