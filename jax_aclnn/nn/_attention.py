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
import numpy as np

from jax_aclnn import _compat
from jax_aclnn._declare import declare
from jax_aclnn.nn._common import check_float, sharded_like, typed_like

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


@functools.cache
def _causal_mask() -> np.ndarray:
    """CANN's compressed causal mask (sparse modes 2-4: 1 above the
    diagonal), made once with NumPy: a constant of the program, where
    ``jnp.triu`` was a 4 MiB computation in every step."""
    mask = np.triu(np.ones((_CAUSAL_SIZE, _CAUSAL_SIZE), bool), 1)
    mask.flags.writeable = False
    return mask


def _per_kv_head(x, k):
    """``(B, T, N, H)`` as ``(B, T, K, N / K, H)``: the query heads of each
    key/value head (a reshape, which keeps an explicit sharding of the heads;
    a repeat of the key and value would need one passed)."""
    return x.reshape(x.shape[:2] + (k, x.shape[2] // k) + x.shape[3:])


def _scores(query, key, realShift, attenMask, scale, sparse):
    """S (float32, (B, K, G, T, S): key/value head k's G query heads) and
    which entries are computed."""
    b, t, n, _ = query.shape
    s, k = key.shape[1], key.shape[2]
    scores = jnp.einsum("btkgh,bskh->bkgts", _per_kv_head(query.astype(_F32), k), key.astype(_F32))
    if realShift is not None:
        scores = scores + _grouped_heads(realShift.astype(_F32), k)
    scores = scores * _F32(scale)
    if sparse == _SPARSE_CAUSAL:
        valid = jnp.tril(jnp.ones((t, s), bool))
    elif attenMask is not None:
        valid = _grouped_heads(jnp.logical_not(attenMask.astype(bool)), k)
    else:
        valid = jnp.ones((t, s), bool)
    return scores, jnp.broadcast_to(valid, scores.shape)


def _grouped_heads(x, k):
    """A ``(B, N, T, S)``-broadcastable pse or mask as ``(B, K, G, T, S)``
    broadcastable (its head dimension split where it has one)."""
    x = x.reshape((1,) * (4 - x.ndim) + x.shape)
    if x.shape[1] == 1:
        return x[:, :, None]
    return x.reshape(x.shape[:1] + (k, x.shape[1] // k) + x.shape[2:])


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
    out = jnp.einsum("bkgts,bskv->btkgv", p / jnp.where(row_sum > 0, row_sum, 1.0),
                     value.astype(_F32))
    b, t, n = query.shape[:3]
    stats = lambda v: jnp.broadcast_to(  # noqa: E731  (B, K, G, T, 1) -> [B, N, T, 8]
        v.reshape(b, n, t, 1), (b, n, t, 8))
    row_max = jnp.where(any_valid, row_max, -jnp.finfo(_F32).max)
    return (stats(row_max), stats(row_sum), jnp.zeros((0,), query.dtype),
            out.reshape(query.shape[:3] + value.shape[3:]).astype(query.dtype))


def _grad_reference(query, keyIn, value, dy, pseShiftOptional, dropMaskOptional,
                    paddingMaskOptional, attenMaskOptional, softmaxMaxOptional,
                    softmaxSumOptional, softmaxInOptional, attentionInOptional, *,
                    prefixOptional, scaleValue, keepProb, preTokens, nextTokens, headNum,
                    inputLayout, innerPrecise, sparseMode):
    k = keyIn.shape[2]
    scores, valid = _scores(query, keyIn, pseShiftOptional, attenMaskOptional, scaleValue,
                            sparseMode)
    row_max = _grouped_heads(softmaxMaxOptional[..., :1], k)
    row_sum = _grouped_heads(softmaxSumOptional[..., :1], k)
    p = jnp.where(valid & (row_sum > 0), jnp.exp(scores - row_max) / jnp.where(
        row_sum > 0, row_sum, 1.0), 0.0)
    dyf = _per_kv_head(dy.astype(_F32), k)
    dv = jnp.einsum("bkgts,btkgv->bskv", p, dyf)
    dp = jnp.einsum("btkgv,bskv->bkgts", dyf, value.astype(_F32))
    d = jnp.einsum("btkgv,btkgv->bkgt", dyf, _per_kv_head(attentionInOptional.astype(_F32), k))
    ds = p * (dp - d[..., None])
    dq = _F32(scaleValue) * jnp.einsum("bkgts,bskh->btkgh", ds, keyIn.astype(_F32))
    dk = _F32(scaleValue) * jnp.einsum("bkgts,btkgh->bskh", ds,
                                       _per_kv_head(query.astype(_F32), k))
    if pseShiftOptional is None:
        dpse = jnp.zeros((0,), query.dtype)
    else:
        full = (_F32(scaleValue) * ds).reshape(scores.shape[:1] + (-1,) + scores.shape[3:])
        axes = tuple(i for i, m in enumerate(pseShiftOptional.shape) if m == 1 and full.shape[i] != 1)
        dpse = jnp.sum(full, axis=axes, keepdims=True).astype(query.dtype)
    return (dq.reshape(query.shape).astype(query.dtype), dk.astype(keyIn.dtype),
            dv.astype(value.dtype), dpse)


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
    """The output and the softmax statistics (without gradient: the
    log-sum-exp residual of ``jax.nn`` is ``stop_gradient``-ed)."""
    return _attention_fwd(query, key, value, pse, mask, scale, sparse)[0]


def _attributes(scale, sparse):
    return dict(prefixOptional=None, scaleValue=scale, keepProb=1.0, preTokens=_ALL_TOKENS,
                nextTokens=_ALL_TOKENS, inputLayout="BSND", innerPrecise=0, sparseMode=sparse)


def _attention_fwd(query, key, value, pse, mask, scale, sparse):
    forward, _ = _operators(*_groups(query, key, pse, mask))
    row_max, row_sum, _, out = forward(query, key, value, pse, None, None, mask,
                                       **_attributes(scale, sparse))
    return (out, row_max, row_sum), (query, key, value, pse, mask, row_max, row_sum, out)


def _attention_bwd(scale, sparse, res, cts):
    query, key, value, pse, mask, row_max, row_sum, out = res
    dy = cts[0]
    _, grad = _operators(*_groups(query, key, pse, mask))
    dq, dk, dv, dpse = grad(query, key, value, dy, pse, None, None, mask, row_max, row_sum,
                            None, out, **_attributes(scale, sparse))
    return typed_like((dq, dk, dv, None if pse is None else dpse, None),
                      (query, key, value, pse, None))


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


def _split_scale(query: Any, scale: Any, biased: bool) -> tuple[Any, float]:
    """The query and CANN's ``scaleValue`` for logits ``scale * Q K^T``.

    CANN adds pse before its scale, so a bias becomes ``bias / scaleValue``:
    with a bias, ``scale = m * 2**e`` (``1 <= |m| < 2``) passes ``m`` as
    ``scaleValue`` and ``2**e`` into the query (exact: a power of two), so
    that ``bias / m`` never exceeds the bias's magnitude (``bias / scale``
    overflows the dtype for a mask of ``finfo.min``, or any bias with
    ``scale`` 0). A traced scale multiplies the query (``scaleValue`` 1)."""
    if isinstance(scale, jax.core.Tracer):
        return query * scale.astype(query.dtype), 1.0
    scale = float(scale)
    if not biased:
        return query, scale
    if scale == 0:
        return jnp.zeros_like(query), 1.0
    mantissa, exponent = math.frexp(scale)  # scale = mantissa * 2**exponent, |mantissa| in [0.5, 1)
    return query * jnp.asarray(2.0 ** (exponent - 1), query.dtype), 2 * mantissa


def _resharded(x: Any, spec: tuple[Any, ...], like: Any) -> Any:
    """``x`` resharded to ``spec`` on the mesh of ``like`` (a sharding type)
    where its type differs: a constant (a mask made with NumPy, closed over)
    has an empty mesh, and gets the query's."""
    have = _compat.type_spec(jax.typeof(x))
    if have is not None and tuple(have) + (None,) * (x.ndim - len(have)) == spec:
        return x
    return jax.sharding.reshard(x, like.update(spec=spec))


def _rule_layout(query: Any, key: Any, value: Any, pse: Any, mask: Any) -> tuple[Any, ...]:
    """The operands resharded, on an explicit mesh, to the layout of the
    operators' rule: batch as query's, heads as query's where key and value
    have as many (else whole), sequences and head size whole; a pse and a
    mask as the scores they apply to (size-1 dimensions whole). The call's
    result goes back to query's sharding (:func:`_common.sharded_like`), and
    each cotangent to its primal's (``jax.sharding.reshard``'s transpose)."""
    spec = _compat.type_spec(jax.typeof(query))
    if spec is None:
        return query, key, value, pse, mask
    batch, heads = (tuple(spec) + (None,) * 4)[0:3:2]
    if query.shape[2] != key.shape[2]:
        heads = None
    like = jax.typeof(query).sharding
    scores = lambda x: None if x is None else _resharded(x, tuple(  # noqa: E731
        e if m != 1 else None for e, m in zip((batch, heads, None, None)[4 - x.ndim:], x.shape)),
        like)
    qkv = (_resharded(x, (batch, None, heads, None), like) for x in (query, key, value))
    return (*qkv, scores(pse), scores(mask))


def _pse_limit(dtype: Any) -> float:
    """The largest pse magnitude passed: the dtype's range, and a quarter of
    float32's, so that ``scaleValue * (Q K^T + pse)`` (``scaleValue`` below 2,
    computed in float32) stays finite: a masked row at ``-inf`` has no
    softmax (NaN), where ``jax.nn``'s ``finfo.min`` logits give a finite one."""
    return min(float(jnp.finfo(dtype).max), float(jnp.finfo(_F32).max) / 4)


def _masks(b: int, t: int, s: int, mask: Any, is_causal: bool, query_seq_lengths: Any,
           key_value_seq_lengths: Any, local_window_size: Any) -> Any:
    """The boolean mask (True: attend) of ``jax.nn.dot_product_attention``'s
    mask arguments, broadcastable to ``(B, N, T, S)``; None where only
    ``is_causal`` (CANN's causal sparse mode) or nothing applies."""
    keep = None if mask is None else jnp.asarray(mask)
    if keep is not None and keep.dtype != jnp.bool_:
        raise TypeError(f"dot_product_attention: mask must be boolean, got {keep.dtype}")
    both = lambda a, c: c if a is None else jnp.logical_and(a, c)  # noqa: E731
    rows, cols = jnp.arange(t)[:, None], jnp.arange(s)[None, :]
    if local_window_size is not None:
        left, right = ((local_window_size,) * 2 if isinstance(local_window_size, int)
                       else tuple(local_window_size))
        keep = both(keep, (rows <= cols + left) & (rows >= cols - right))
    for name, lengths, index in (("query_seq_lengths", query_seq_lengths, rows),
                                 ("key_value_seq_lengths", key_value_seq_lengths, cols)):
        if lengths is not None:
            lengths = jnp.asarray(lengths)
            if lengths.shape != (b,) or not jnp.issubdtype(lengths.dtype, jnp.integer):
                raise ValueError(f"dot_product_attention: {name} must be integers of shape "
                                 f"({b},) (the batch), got {lengths.dtype}{list(lengths.shape)}")
            keep = both(keep, (index < lengths[:, None, None])[:, None])
    if keep is not None and is_causal:
        keep = jnp.logical_and(keep, rows >= cols)
    return keep


def dot_product_attention(query: Any, key: Any, value: Any, bias: Any = None, mask: Any = None,
                          *, scale: Any = None, is_causal: bool = False,
                          query_seq_lengths: Any = None, key_value_seq_lengths: Any = None,
                          local_window_size: int | tuple[int, int] | None = None,
                          implementation: str | None = None,
                          return_residual: bool = False) -> Any:
    """Scaled dot-product attention on aclnnFlashAttentionScore.

    The contract of ``jax.nn.dot_product_attention`` (its signature):
    ``softmax(scale * query @ key^T + bias, masked) @ value`` per head, with
    grouped-query attention where key and value have fewer heads. Forward
    aclnnFlashAttentionScore (layout BSND), backward
    aclnnFlashAttentionScoreGrad fed with the forward's softmax statistics
    (kept as residuals, never recomputed in JAX); their pure-JAX references
    elsewhere. torch_npu's ``npu_fusion_attention``.

    Args:
      query: ``(B, T, N, H)`` or ``(T, N, H)``, float32, float16 or bfloat16.
      key, value: ``(B, S, K, H)`` (or ``(S, K, H)``), query's dtype; N a
        multiple of K.
      bias: added to the scaled logits, broadcastable to ``(B, N, T, S)``
        (CANN's pse, which CANN adds before its scale: passed as ``bias / m``
        with ``scale = m * 2**e``, ``1 <= m < 2``, the power of two applied
        to the query, exactly; clipped to the dtype's range and to a quarter
        of float32's, so that a mask of ``finfo(dtype).min`` leaves CANN's
        float32 logits finite, masking as in ``jax.nn``); differentiable.
      mask: boolean, broadcastable to ``(B, N, T, S)``: True where a query
        attends to a key (CANN's attenMask is its negation).
      scale: the logits' scale, a float or a traced scalar (which multiplies
        the query in its dtype); default ``1 / sqrt(H)``.
      is_causal: query i attends to keys j <= i (CANN's sparse mode 2, the
        top-left causal mask; with a mask, both apply).
      query_seq_lengths, key_value_seq_lengths: ``(B,)`` integers: query i
        of example b attends only if ``i < query_seq_lengths[b]``, to keys
        ``j < key_value_seq_lengths[b]`` (as ``jax.nn``; passed to CANN as
        its attenMask, since CANN's actual-length arguments are static host
        arrays).
      local_window_size: ``(left, right)`` or an int for both: query i
        attends to keys ``i - left <= j <= i + right`` (as a mask).
      implementation: None (CANN's operator; ``"xla"`` and ``"cudnn"`` are
        ``jax.nn``'s backends and a ValueError here).
      return_residual: also return the softmax's log-sum-exp, ``(B, T, N)``
        in key's dtype, without gradient (``jax.nn``'s residual; from CANN's
        statistics: ``softmaxMax + log(softmaxSum)``, ``-inf`` for a query
        that attends to no key).

    Returns:
      ``query``'s shape and dtype (computed in float32), and with
      ``return_residual`` the log-sum-exp. A query that attends to no key
      gets zeros (CANN's invalid-row handling; ``jax.nn`` gives the mean of
      the values), with no gradient through that row; so does every query
      when S or H is 0.

    Raises:
      ValueError: the shapes are not those above, N is not a multiple of K,
        a sequence length is not ``(B,)`` integers, or ``implementation`` is
        not None.
      TypeError: the dtypes differ or are not float32, float16 or bfloat16,
        or mask is not boolean.

    Dimension rule: batch partitioned, and heads where key and value have
    as many as query (each shard's call gets its local head count as
    ``headNum``); sequences and head size whole. Dropout is not supported
    (CANN's needs its separate mask generator).
    """
    if implementation is not None:
        raise ValueError(f"dot_product_attention: implementation must be None (this is "
                         f"CANN's aclnnFlashAttentionScore; 'xla' and 'cudnn' are "
                         f"jax.nn.dot_product_attention's), got {implementation!r}")
    query, key, value = jnp.asarray(query), jnp.asarray(key), jnp.asarray(value)
    if query.ndim == key.ndim == value.ndim == 3:  # (T, N, H): jax.nn's unbatched form
        out = dot_product_attention(
            query[None], key[None], value[None], None if bias is None else jnp.asarray(bias),
            None if mask is None else jnp.asarray(mask), scale=scale, is_causal=is_causal,
            query_seq_lengths=query_seq_lengths, key_value_seq_lengths=key_value_seq_lengths,
            local_window_size=local_window_size, return_residual=return_residual)
        return jax.tree.map(lambda a: a[0], out)
    if query.ndim != 4 or key.ndim != 4 or value.shape != key.shape or \
            query.shape[0] != key.shape[0] or query.shape[3] != key.shape[3] or \
            key.shape[2] == 0 or query.shape[2] % key.shape[2]:
        raise ValueError(f"dot_product_attention: query (B, T, N, H), key and value (B, S, K, H) "
                         f"with N a positive multiple of K; got {query.shape}, {key.shape}, "
                         f"{value.shape}")
    check_float("dot_product_attention", query=query)
    if not query.dtype == key.dtype == value.dtype:
        raise TypeError(f"dot_product_attention: query, key and value of one dtype, got "
                        f"{query.dtype}, {key.dtype}, {value.dtype}")
    b, t, n, h = query.shape
    s = key.shape[1]
    full = (b, n, t, s)
    keep = _masks(b, t, s, mask, is_causal, query_seq_lengths, key_value_seq_lengths,
                  local_window_size)
    if 0 in (b, t, n, s, h):  # no key, or nothing to compute: CANN's zeros
        out = jnp.zeros(query.shape, query.dtype)
        lse = jnp.full((b, t, n), -jnp.inf, key.dtype)
        return (out, lse) if return_residual else out
    if scale is None:
        scale = 1 / math.sqrt(h)
    query, scale = _split_scale(query, scale, bias is not None)
    pse = None
    if bias is not None:
        limit = _pse_limit(query.dtype)
        pse = jnp.asarray(bias).astype(_F32) / _F32(scale)
        # clipped in value only: the bias's gradient passes whole (jax.nn's)
        pse = pse + jax.lax.stop_gradient(jnp.clip(pse, -limit, limit) - pse)
        pse = _cann_shape(pse.astype(query.dtype), full, _PSE_PATTERNS)
    masked_out = None
    if keep is not None:
        masked_out = _cann_shape(jnp.logical_not(keep), full, _MASK_PATTERNS)
        if masked_out.shape[:2] == (1, 1):
            masked_out = masked_out.reshape(t, s)
        sparse = _SPARSE_MASK
    elif is_causal:
        masked_out = _causal_mask()
        sparse = _SPARSE_CAUSAL
    else:
        sparse = 0
    user_query = query
    out, row_max, row_sum = _attention(*_rule_layout(query, key, value, pse, masked_out), scale,
                                       sparse)
    out = sharded_like(out, user_query)
    if not return_residual:
        return out
    lse = jax.lax.stop_gradient(row_max[..., 0] + jnp.log(row_sum[..., 0]))  # (B, N, T)
    return out, jnp.transpose(lse, (0, 2, 1)).astype(key.dtype)


__all__ = ["dot_product_attention"]
