"""Rotary position embedding: aclnnRotaryPositionEmbedding and
aclnnRotaryPositionEmbeddingGrad.

Prototypes from CANN's ops-transformer sources
(posembedding/rotary_position_embedding/op_host/op_api/aclnn_rotary_position_embedding.h,
posembedding/rotary_position_embedding_grad/docs/aclnnRotaryPositionEmbeddingGrad.md):
``out = x * cos + rotate(x) * sin`` with cos and sin of the full head size D,
mode 0 ("half", LLaMA/GPT-NeoX: ``rotate(x) = cat(-x2, x1)`` of x's two
halves) or 1 ("interleave", GPT-J: pairs ``(a, b) -> (-b, a)``); the grad
returns dx, dcos and dsin (not computed without x). torch_npu's
``npu_rotary_mul`` calls them (op-plugin RotaryMulKernelNpuOpApi.cpp:
``EXEC_NPU_CMD(aclnnRotaryPositionEmbedding, self, r1, r2, mode, result)``;
RotaryMulBackwardKernelNpuOpApi.cpp: ``EXEC_NPU_CMD(
aclnnRotaryPositionEmbeddingGrad, grad, r1, r2, x, mode, dx, dcos, dsin)``),
in CANN's order.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn._declare import declare
from jax_aclnn.nn._common import check_float, sharded_like, typed_like

_F32 = jnp.float32
MODES = {"half": 0, "interleave": 1}
#: The broadcast patterns of cos/sin over x's (B, S, N) that CANN takes
#: (True: broadcast); others are broadcast in JAX first.
_PATTERNS = {(True, True, True), (False, False, False), (False, True, False),
             (False, False, True), (True, True, False), (True, False, True),
             (False, True, True)}


def _rotate(x, mode):
    if mode == 0:
        x1, x2 = jnp.split(x, 2, axis=-1)
        return jnp.concatenate([-x2, x1], axis=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return jnp.stack([-x2, x1], axis=-1).reshape(x.shape)


def _rope_reference(x, cos, sin, *, mode):
    xf = x.astype(_F32)
    return (xf * cos.astype(_F32) + _rotate(xf, mode) * sin.astype(_F32)).astype(x.dtype)


def _sum_to(x, shape):
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return jnp.sum(x, axis=axes, keepdims=True)


def _rope_grad_reference(dy, cos, sin, xOptional, *, mode):
    dyf, c, s = dy.astype(_F32), cos.astype(_F32), sin.astype(_F32)
    # rotate's transpose is minus rotate: <rotate(u), v> = -<u, rotate(v)>
    dx = (dyf * c - _rotate(dyf * s, mode)).astype(dy.dtype)
    if xOptional is None:
        return dx, jnp.zeros(cos.shape, dy.dtype), jnp.zeros(sin.shape, dy.dtype)
    xf = xOptional.astype(_F32)
    return (dx, _sum_to(dyf * xf, cos.shape).astype(dy.dtype),
            _sum_to(dyf * _rotate(xf, mode), sin.shape).astype(dy.dtype))


@functools.cache
def _operators(pattern: tuple[bool, bool, bool]):
    """The pair declared for cos/sin broadcast over x's (B, S, N) as
    ``pattern`` says: their rules mark those dimensions ``1``."""
    cs = " ".join("1" if p else f for p, f in zip(pattern, "bsn")) + " d"
    tag = "".join("1" if p else f for p, f in zip(pattern, "bsn"))
    forward = declare(
        "aclnnStatus aclnnRotaryPositionEmbeddingGetWorkspaceSize(const aclTensor *x, "
        "const aclTensor *cos, const aclTensor *sin, int64_t mode, aclTensor *out, "
        "uint64_t *workspaceSize, aclOpExecutor **executor)",
        _rope_reference, name=f"nn_rotary_position_embedding_{tag}d",
        dims=f"b s n d, {cs}, {cs} -> b s n d", replicated="d")
    grad = declare(
        "aclnnStatus aclnnRotaryPositionEmbeddingGradGetWorkspaceSize(const aclTensor *dy, "
        "const aclTensor *cos, const aclTensor *sin, const aclTensor *xOptional, int64_t mode, "
        "const aclTensor *dxOut, const aclTensor *dcosOut, const aclTensor *dsinOut, "
        "uint64_t *workspaceSize, aclOpExecutor **executor)",
        _rope_grad_reference, outputs=("dxOut", "dcosOut", "dsinOut"),
        name=f"nn_rotary_position_embedding_grad_{tag}d",
        dims=f"b s n d, {cs}, {cs}, b s n d -> b s n d, {cs}, {cs}", replicated="d")
    return forward, grad


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _rope(x, cos, sin, mode):
    # in x's sharding (the rule keeps the head size whole: where x shards
    # it, each device takes its own block back), which dy then has too
    return sharded_like(_operators(_pattern(x, cos))[0](x, cos, sin, mode=mode), x)


def _rope_fwd(x, cos, sin, mode):
    # symbolic zeros: whether cos and sin need a gradient at all
    needs = cos.perturbed or sin.perturbed
    x, cos, sin = x.value, cos.value, sin.value
    return _rope(x, cos, sin, mode), (x if needs else None, cos, sin)


def _rope_bwd(mode, res, dy):
    x, cos, sin = res
    dx, dcos, dsin = _operators(_pattern(dy, cos))[1](dy, cos, sin, x, mode=mode)
    return typed_like((dx, dcos, dsin) if x is not None else (dx, None, None), (dy, cos, sin))


_rope.defvjp(_rope_fwd, _rope_bwd, symbolic_zeros=True)

# Declared at import, every pattern: a process that runs an exported program
# registers their custom-call targets by importing this module.
for _p in sorted(_PATTERNS):
    _operators(_p)


def _pattern(x, cos) -> tuple[bool, bool, bool]:
    return tuple(cos.shape[i] == 1 and x.shape[i] != 1 for i in range(3))


def rotary_embedding(x: Any, cos: Any, sin: Any, *, mode: str = "half") -> jax.Array:
    """Rotary position embedding on aclnnRotaryPositionEmbedding.

    ``x * cos + rotate(x) * sin``.

    ``mode="half"`` (LLaMA, GPT-NeoX): ``rotate(x) = concatenate([-x2, x1])``
    of x's two halves along the head size; ``mode="interleave"`` (GPT-J): on
    (even, odd) pairs, ``(a, b) -> (-b, a)``. cos and sin cover the whole
    head size D (each frequency twice: ``concatenate([c, c])`` for "half",
    ``repeat(c, 2)`` for "interleave").

    Forward aclnnRotaryPositionEmbedding, backward
    aclnnRotaryPositionEmbeddingGrad (dcos and dsin only where cos or sin
    need a gradient); their pure-JAX references elsewhere. torch_npu's
    ``npu_rotary_mul``.

    Args:
      x: ``(B, S, N, D)`` (batch, sequence, heads, head size), float32,
        float16 or bfloat16; D even.
      cos, sin: broadcastable to x by NumPy's rules, D last (``(1, S, 1,
        D)``, ``(B, S, 1, D)``, ...: a table of shape ``(S, D)`` is
        ``table[:, None]``); cast to x's dtype (CANN takes one dtype).
      mode: ``"half"`` or ``"interleave"``.

    Returns:
      x's shape and dtype (computed in float32).

    Raises:
      ValueError: x is not 4-D, D is odd, cos/sin do not broadcast to x or
        differ in shape, or mode is another.
      TypeError: x is not float32, float16 or bfloat16 (float64 included,
        under ``jax_enable_x64``: CANN takes none).

    Dimension rule: batch, sequence and heads partitioned (cos/sin's
    broadcast dimensions never), the head size whole; dcos/dsin are summed
    over the dimensions they broadcast along.
    """
    x, cos, sin = jnp.asarray(x), jnp.asarray(cos), jnp.asarray(sin)
    if mode not in MODES:
        raise ValueError(f"rotary_embedding: mode must be one of {sorted(MODES)}, got {mode!r}")
    check_float("rotary_embedding", x=x)
    if x.ndim != 4 or x.shape[-1] % 2:
        raise ValueError(f"rotary_embedding: x must be (B, S, N, D) with D even, got {x.shape}")
    if cos.shape != sin.shape or cos.ndim > 4 or cos.shape[-1:] != x.shape[-1:]:
        raise ValueError(f"rotary_embedding: cos {cos.shape} and sin {sin.shape} must have one "
                         f"shape ending in x's head size {x.shape[-1]}")
    shape = (1,) * (4 - cos.ndim) + cos.shape
    if any(n not in (1, m) for n, m in zip(shape, x.shape)):
        raise ValueError(f"rotary_embedding: cos/sin of shape {cos.shape} do not broadcast to "
                         f"x's {x.shape}")
    cos, sin = (v.reshape(shape).astype(x.dtype) for v in (cos, sin))
    if _pattern(x, cos) not in _PATTERNS:
        cos, sin = (jnp.broadcast_to(v, x.shape) for v in (cos, sin))
    return _rope(x, cos, sin, MODES[mode])


__all__ = ["rotary_embedding"]
