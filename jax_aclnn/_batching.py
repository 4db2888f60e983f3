"""Batching helpers shared by the operators' batching rules (``vmap``):
moving the batch axis in front; and merging dimensions of operands past
aclnn's rank limit (of any rank, or taken past it by the batch axis)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn import _checks, _compat


def merged_shapes(op: str, names: Sequence[str], shapes: Sequence[tuple[int, ...]],
                  whole: frozenset[int] = frozenset()) -> list[tuple[int, ...]]:
    """Shapes of broadcasting operands with as few dimensions as broadcasting allows.

    Dimensions of size 1 in the broadcast shape are dropped, and a run of
    adjacent dimensions merges into one where every operand either has all
    of them or broadcasts along all of them (size 1); a dimension in
    ``whole`` (indices into the broadcast shape: the sharded ones) merges
    with none. Every operand gets the merged rank; reshaped to these shapes,
    the operands broadcast to the merged broadcast shape, whose elements are
    those of the original one in the same (row-major) order.

    Raises:
      ValueError: more than 8 dimensions remain (aclnn's rank limit), naming
        ``op`` and the operands' shapes.
    """
    shape = tuple(jnp.broadcast_shapes(*shapes))
    padded = [(1,) * (len(shape) - len(s)) + tuple(s) for s in shapes]
    groups: list[tuple[tuple[bool, ...], int, bool]] = []  # (which operands have it, size, whole)
    for i, n in enumerate(shape):
        if n == 1 and i not in whole:
            continue
        has = tuple(p[i] != 1 for p in padded)
        if groups and groups[-1][0] == has and not groups[-1][2] and i not in whole:
            groups[-1] = (has, groups[-1][1] * n, False)
        else:
            groups.append((has, n, i in whole))
    if len(groups) > _checks.MAX_RANK:
        listing = ", ".join(f"{n}{tuple(s)}" for n, s in zip(names, shapes))
        too_long = ", ".join(n for n, s in zip(names, shapes) if len(s) > _checks.MAX_RANK)
        raise ValueError(
            f"{op}: {too_long} has rank {len(shape)} (shapes {listing}); broadcasting"
            f"{' and sharding leave' if whole else ' leaves'} {len(groups)} dimensions that "
            f"cannot be merged, and the aclnn operator takes at most {_checks.MAX_RANK}"
        )
    return [tuple(size if has[k] else 1 for has, size, _ in groups) for k in range(len(shapes))]


def bind_merged(op: str, names: Sequence[str], call: Callable[..., Any],
                operands: Sequence[Any]) -> Any:
    """``call`` (an element-wise operator's bind) on operands past aclnn's
    rank limit: it runs on the operands with their dimensions merged
    (:func:`merged_shapes`; a dimension sharded by an operand's type stays
    whole) and each result gets the broadcast shape back. ``call`` returns
    one result or a list of them."""
    shape = tuple(jnp.broadcast_shapes(*(jnp.shape(a) for a in operands)))
    sharded = frozenset().union(*(
        {i + len(shape) - jnp.ndim(a) for i in _compat.sharded_dims(a)} for a in operands))
    shapes = merged_shapes(op, names, [jnp.shape(a) for a in operands], sharded)
    out = call(*(jnp.reshape(a, s) for a, s in zip(operands, shapes)))
    if isinstance(out, (list, tuple)):
        return [jnp.reshape(o, shape) for o in out]
    return jnp.reshape(out, shape)


def batch_size(args: Sequence[Any], dims: Sequence[Any]) -> int:
    return next(a.shape[d] for a, d in zip(args, dims) if d is not _compat.not_mapped)


def batch_spec(args: Sequence[Any], dims: Sequence[Any]) -> Any:
    """The PartitionSpec entry of the mapped axis: the explicit mesh axes
    sharding it in the first mapped operand that shards it, or None."""
    for a, d in zip(args, dims):
        if d is not _compat.not_mapped and _compat.dim_specs(a)[d] is not None:
            return _compat.dim_specs(a)[d]
    return None


def with_batch_sharding(x: Any, spec: Any) -> Any:
    """``x`` (batch axis at 0) with its batch axis sharded as ``spec``
    (:func:`batch_spec`), the other axes as they are."""
    if spec is None or _compat.dim_specs(x)[0] == spec:
        return x
    return jax.sharding.reshard(x, jax.sharding.PartitionSpec(spec, *_compat.dim_specs(x)[1:]))


def batch_broadcasting(args: Sequence[Any], dims: Sequence[Any]) -> list[Any]:
    """Operands of a broadcasting operator with the batch axis in front.

    Mapped operands get their batch axis moved to 0 and size-1 axes after it
    up to the largest per-example rank, so that numpy broadcasting still
    aligns the per-example axes; unmapped operands broadcast as they are.
    The result has the batch axis at 0.
    """
    size = batch_size(args, dims)
    rank = max(a.ndim - (d is not _compat.not_mapped) for a, d in zip(args, dims))
    out = []
    for a, d in zip(args, dims):
        if d is not _compat.not_mapped:
            a = jnp.moveaxis(a, d, 0)
            a = a.reshape((size,) + (1,) * (rank - a.ndim + 1) + a.shape[1:])
        out.append(a)
    return out


def batch_same_shape(args: Sequence[Any], dims: Sequence[Any]) -> list[Any]:
    """Operands of a same-shape operator, all with the batch axis at 0."""
    size = batch_size(args, dims)
    return [
        jnp.broadcast_to(a, (size,) + a.shape)
        if d is _compat.not_mapped
        else jnp.moveaxis(a, d, 0)
        for a, d in zip(args, dims)
    ]
