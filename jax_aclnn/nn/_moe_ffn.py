"""The mixture-of-experts feed-forward layer over the MoE building blocks
(:func:`top_k_routing`, :func:`moe_permute`, :func:`ragged_dot`,
:func:`moe_unpermute`), on one device or expert-parallel inside
``shard_map``: tokens sent to their experts' devices in per-destination
buffers (``jax.lax.all_to_all``; XLA:CPU has no ``ragged_all_to_all``), or
every token gathered to every device and the outputs reduce-scattered
(MindSpeed's ``allgather`` dispatcher)."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn.nn._common import check_float
from jax_aclnn.nn._moe import moe_permute, moe_unpermute, top_k_routing
from jax_aclnn.nn._ragged_dot import ragged_dot

_F32, _I32 = jnp.float32, jnp.int32
_DISPATCHERS = ("all_to_all", "all_gather")


def _swiglu_experts(rows, group_sizes, w_gate, w_up, w_down):
    """Each group of ``rows`` through its expert's SwiGLU MLP (rows past the
    groups' total give zeros)."""
    h = jax.nn.silu(ragged_dot(rows, w_gate, group_sizes)) * ragged_dot(rows, w_up, group_sizes)
    return ragged_dot(h.astype(rows.dtype), w_down, group_sizes)


def _combine(x, weights, ids, num_experts, w_gate, w_up, w_down):
    """The weighted sum of each token's experts among ``num_experts`` (the
    weights' first dimension); an id equal to num_experts is no expert's
    (its choice adds 0)."""
    permuted, sorted_indices, sizes = moe_permute(x, ids, num_experts + 1)
    out = _swiglu_experts(permuted, sizes[:num_experts], w_gate, w_up, w_down)
    return moe_unpermute(out.astype(x.dtype), sorted_indices, weights)


def _positions(ids, num_experts):
    """Each choice's rank among the choices of its expert, in choice order
    (token t's choice j is choice t*k + j)."""
    flat = ids.reshape(-1)
    onehot = jax.nn.one_hot(flat, num_experts, dtype=_I32)
    ranks = jnp.cumsum(onehot, axis=0) - 1
    return jnp.take_along_axis(ranks, flat[:, None], axis=1).reshape(ids.shape)


def _capacity(capacity_factor, tokens, k, num_experts):
    """Rows each expert takes from each source device: all (at most one per
    token: a token's k experts differ) when dropless, else
    ceil(c * tokens * k / E)."""
    if capacity_factor is None:
        return tokens
    return min(tokens, math.ceil(capacity_factor * tokens * k / num_experts))


def _load_balancing(logits, ids, num_experts, axis):
    """Switch's ``E * sum_e(f_e * P_e)`` over all tokens (summed over the
    devices of ``axis``)."""
    probs = jax.nn.softmax(logits.astype(_F32), axis=-1)
    counts = jnp.bincount(ids.reshape(-1), length=num_experts).astype(_F32)
    sums, tokens = jnp.sum(probs, axis=0), logits.shape[0]
    if axis is not None:  # (one psum each: jax 0.7 cannot transpose one of mixed operands)
        counts, sums, tokens = (jax.lax.psum(counts, axis), jax.lax.psum(sums, axis),
                                tokens * jax.lax.axis_size(axis))
    return num_experts * jnp.sum(counts / (tokens * ids.shape[1]) * sums / tokens)


def _all_to_all(x, weights, ids, num_experts, capacity, axis, w_gate, w_up, w_down):
    """Expert parallel through per-destination buffers of ``capacity`` rows
    per expert: out of moe_permute's rows (grouped by expert, in token order
    within one), each expert's first ``capacity`` go to its device; the
    outputs come back to the same slots. Returns (y, dropped choices)."""
    devices, local = jax.lax.axis_size(axis), w_gate.shape[0]
    permuted, sorted_indices, sizes = moe_permute(x, ids, num_experts)
    n, hidden = permuted.shape
    expert = jnp.repeat(jnp.arange(num_experts, dtype=_I32), sizes, total_repeat_length=n)
    pos = jnp.arange(n, dtype=_I32) - (jnp.cumsum(sizes) - sizes)[expert]
    keep = pos < capacity
    slot = jnp.where(keep, expert * capacity + pos, num_experts * capacity)
    send = jnp.zeros((num_experts * capacity, hidden), permuted.dtype).at[slot].set(
        permuted, mode="drop")  # [destination, its expert, position]
    received = jax.lax.all_to_all(send, axis, 0, 0, tiled=True)  # [source, my expert, position]
    rows = _swap(received, devices, local, capacity)  # [my expert, source, position]
    sizes_here = jnp.full((local,), devices * capacity, _I32)  # empty slots are zero rows
    out = _swiglu_experts(rows, sizes_here, w_gate, w_up, w_down).astype(x.dtype)
    back = jax.lax.all_to_all(_swap(out, local, devices, capacity), axis, 0, 0, tiled=True)
    returned = jnp.where(keep[:, None], back[jnp.where(keep, slot, 0)], 0).astype(x.dtype)
    return moe_unpermute(returned, sorted_indices, weights), jnp.sum(~keep, dtype=_I32)


def _swap(a, d0, d1, capacity):
    """Rows in blocks [d0, d1, capacity] reordered to [d1, d0, capacity]."""
    return jnp.swapaxes(a.reshape(d0, d1, capacity, -1), 0, 1).reshape(d0 * d1 * capacity, -1)


def _all_gather(x, weights, ids, num_experts, capacity, axis, w_gate, w_up, w_down):
    """Expert parallel with every token on every device: each keeps its
    experts' choices, the partial outputs are reduce-scattered. Returns (y,
    dropped choices)."""
    local = w_gate.shape[0]
    keep = _positions(ids, num_experts) < capacity
    ids = jnp.where(keep, ids, num_experts)
    gathered = [jax.lax.all_gather(a, axis, tiled=True) for a in (x, weights, ids)]
    mine = gathered[2] - jax.lax.axis_index(axis) * local
    mine = jnp.where((mine >= 0) & (mine < local), mine, local)
    partial = _combine(gathered[0], gathered[1], mine, local, w_gate, w_up, w_down)
    y = jax.lax.psum_scatter(partial, axis, scatter_dimension=0, tiled=True)
    return y, jnp.sum(~keep, dtype=_I32)


def _check(x, router, w_gate, w_up, w_down, expert_axis, dispatcher, capacity_factor):
    check_float("moe_ffn", x=x, router=router, w_gate=w_gate, w_up=w_up, w_down=w_down)
    h = x.shape[1] if x.ndim == 2 else None
    e_local = w_gate.shape[0] if w_gate.ndim == 3 else None
    f = w_gate.shape[2] if w_gate.ndim == 3 else None
    if x.ndim != 2 or router.shape != (h, router.shape[-1]) or w_gate.shape != (e_local, h, f) \
            or w_up.shape != w_gate.shape or w_down.shape != (e_local, f, h):
        raise ValueError(f"moe_ffn: x (T, H), router (H, E), w_gate and w_up (E, H, F), w_down "
                         f"(E, F, H) (E over expert_axis's devices); got {x.shape}, "
                         f"{router.shape}, {w_gate.shape}, {w_up.shape}, {w_down.shape}")
    devices = 1 if expert_axis is None else jax.lax.axis_size(expert_axis)
    if e_local * devices != router.shape[1]:
        raise ValueError(f"moe_ffn: router has {router.shape[1]} experts, the weights "
                         f"{e_local} per device on {devices} device(s) (shape {w_gate.shape})")
    if dispatcher not in _DISPATCHERS:
        raise ValueError(f"moe_ffn: dispatcher must be one of {_DISPATCHERS}, got {dispatcher!r}")
    if capacity_factor is not None and not capacity_factor > 0:
        raise ValueError(f"moe_ffn: capacity_factor must be None or > 0, got {capacity_factor!r}")


def moe_ffn(x: Any, router: Any, w_gate: Any, w_up: Any, w_down: Any, *, k: int,
            renormalize: bool = False, expert_axis: str | None = None,
            dispatcher: str = "all_to_all", capacity_factor: float | None = None
            ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """A SwiGLU mixture-of-experts feed-forward layer (MaxText's shape).

    ``w, ids = top_k_routing(x @ router, k)``; the tokens permuted by expert
    (:func:`moe_permute`), each expert's ``silu(p @ w_gate[e]) * (p @
    w_up[e]) @ w_down[e]`` (:func:`ragged_dot`), the outputs combined with
    the routing weights (:func:`moe_unpermute`): aclnnMoeGatingTopKSoftmaxV2,
    aclnnMoeTokenPermute, aclnnGroupedMatmulV4 and aclnnMoeTokenUnpermute
    (and their backwards) where a provider has them.

    Expert parallel (``expert_axis``, inside ``jax.shard_map`` over that
    mesh axis, tokens split over it and the experts' weights split along E
    over it): each device computes its own experts only. ``dispatcher``
    ``"all_to_all"`` sends each token to its experts' devices in
    per-destination buffers and back (``jax.lax.all_to_all``); ``"all_gather"``
    gathers every token to every device, each keeps its experts' choices
    and the outputs are reduce-scattered (``jax.lax.psum_scatter``).

    Capacity: ``capacity_factor=None`` is dropless; with ``c`` each expert
    takes at most ``ceil(c * T_local * k / E)`` rows from each source
    device (on one device, from the whole batch), later choices (in token
    order) are dropped: they add 0 to their token's output, and
    ``aux["dropped_tokens"]`` counts them over all devices.

    Args:
      x: ``(T, H)`` tokens (the device's block under ``expert_axis``).
      router: ``(H, E)``.
      w_gate, w_up: ``(E, H, F)`` (the device's E / devices experts under
        ``expert_axis``).
      w_down: ``(E, F, H)``.
      k: experts per token.
      renormalize: see :func:`top_k_routing`.
      expert_axis: the ``shard_map`` mesh axis of the experts, or None.
      dispatcher: ``"all_to_all"`` or ``"all_gather"`` (expert parallel).
      capacity_factor: None (dropless) or c > 0.

    Returns:
      ``(y, aux)``: y ``(T, H)`` in x's dtype; ``aux["load_balancing_loss"]``
      Switch's ``E * sum_e(f_e * P_e)`` over all tokens (f_e the fraction of
      the T*k choices routed to e, P_e the mean softmax probability of e;
      1.0 at perfect balance; HF's and MaxText's, with f over tokens, is k
      times it), ``aux["dropped_tokens"]`` int32.

    Raises:
      TypeError: an array is not float32, float16 or bfloat16.
      ValueError: the shapes are not those above, E is not the weights'
        experts times the devices, or dispatcher / capacity_factor is not
        one of those above.
    """
    x, router, w_gate, w_up, w_down = (jnp.asarray(a) for a in (x, router, w_gate, w_up, w_down))
    _check(x, router, w_gate, w_up, w_down, expert_axis, dispatcher, capacity_factor)
    num_experts = router.shape[1]
    logits = jnp.dot(x, router)
    weights, ids = top_k_routing(logits, k, renormalize=renormalize)
    capacity = _capacity(capacity_factor, x.shape[0], k, num_experts)
    aux = {"load_balancing_loss": _load_balancing(logits, ids, num_experts, expert_axis)}
    if expert_axis is None:
        keep = _positions(ids, num_experts) < capacity
        y = _combine(x, weights, jnp.where(keep, ids, num_experts), num_experts,
                     w_gate, w_up, w_down)
        dropped = jnp.sum(~keep, dtype=_I32)
    else:
        dispatch = _all_to_all if dispatcher == "all_to_all" else _all_gather
        y, dropped = dispatch(x, weights, ids, num_experts, capacity, expert_axis,
                              w_gate, w_up, w_down)
        dropped = jax.lax.psum(dropped, expert_axis)
    aux["dropped_tokens"] = dropped
    return y.astype(x.dtype), aux


__all__ = ["moe_ffn"]
