"""What the catalogue's functions share: cotangents typed like their
primals, reshapes that keep explicit sharding types, and the dtype check
CANN's operators need."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn import _checks, _compat
from jax_aclnn._declare import _typed_like

#: The floating dtypes CANN's fused operators of the catalogue take (their
#: pages list float32, float16 and bfloat16; never float64).
CANN_FLOATS = (jnp.float32, jnp.float16, jnp.bfloat16)


def typed_like(cts: Any, primals: Any) -> Any:
    """Cotangents with their primals' types (pytrees of one structure: a
    custom VJP bwd rule's tuples, None for a primal without a cotangent; or
    one array), as ``jax.custom_vjp`` requires of a bwd rule: resharded
    to the primal's explicit sharding (a declared operator's results are
    sharded as its rule says, which keeps a replicated factor whole: dx of a
    norm whose hidden dimension was sharded, dgamma of a sharded weight) and
    summed over the ``shard_map`` axes the primal does not vary over."""
    return jax.tree.map(_typed_like, cts, primals, is_leaf=lambda c: c is None)


def sharded_like(y: Any, x: Any) -> Any:
    """A forward result ``y`` resharded to ``x``'s explicit sharding (an
    operator whose rule keeps a dimension whole that x shards: each device
    takes its own block back, with no communication, as the same math in
    jax.numpy leaves it)."""
    return _compat.reshard_like(y, jax.typeof(x))


def check_float(where: str, **arrays: Any) -> None:
    """TypeError naming the first of ``arrays`` whose dtype is not one CANN
    takes (float64 under ``jax_enable_x64`` included): refused at trace time,
    never lowered into an aclnn call that fails at run time."""
    for name, x in arrays.items():
        if jnp.dtype(x.dtype) not in CANN_FLOATS:
            raise TypeError(f"{where}: {name} must be float32, float16 or bfloat16, got "
                            f"{x.dtype} (CANN's operator takes these only)")


def _entries(specs: Sequence[Any]) -> tuple[str, ...]:
    """The mesh axes of PartitionSpec entries, in order."""
    return tuple(a for e in specs if e is not None for a in (e if isinstance(e, tuple) else (e,)))


def merge(x: Any, start: int, stop: int) -> Any:
    """``x`` with dimensions ``start:stop`` merged into one, under explicit
    sharding too: the merged dimension is sharded over their mesh axes in
    order. JAX infers that type where the sharded dimensions lead the
    merged ones and asks for it otherwise (the data then moves: callers
    merge dimensions whose order they do not need, e.g. the rows of a
    per-row operator, with :func:`rows_first` first)."""
    shape = x.shape[:start] + (math.prod(x.shape[start:stop]),) + x.shape[stop:]
    specs = _compat.dim_specs(x)
    axes = _entries(specs[start:stop])
    entry = None if not axes else axes[0] if len(axes) == 1 else axes
    return _compat.reshape(x, shape, specs[:start] + (entry,) + specs[stop:])


def split(x: Any, axis: int, sizes: Sequence[int], specs: Sequence[Any]) -> Any:
    """The inverse of :func:`merge`: dimension ``axis`` of ``x`` split into
    ``sizes``, sharded as ``specs`` (the merged dimensions' entries)."""
    shape = x.shape[:axis] + tuple(sizes) + x.shape[axis + 1:]
    own = _compat.dim_specs(x)
    return _compat.reshape(x, shape, own[:axis] + tuple(specs) + own[axis + 1:])


def rows_first(x: Any, n: int) -> tuple[int, ...]:
    """The order of ``x``'s first ``n`` dimensions (rows a per-row operator
    treats alike) that puts those its type shards first, so that merging
    them moves no data (the identity where none is sharded or they lead
    already)."""
    sharded = _compat.sharded_dims(x)
    return tuple(sorted(range(n), key=lambda d: d not in sharded))


def to_rows(x: Any, order: Sequence[int]) -> Any:
    """``x``'s first ``len(order)`` dimensions, taken in ``order``
    (:func:`rows_first`), merged into one."""
    n = len(order)
    return merge(jnp.transpose(x, tuple(order) + tuple(range(n, x.ndim))), 0, n)


def from_rows(y: Any, like: Any, order: Sequence[int]) -> Any:
    """The inverse of :func:`to_rows`: ``y``'s first dimension split into
    ``like``'s first ``len(order)`` (taken in ``order``), sharded as like's,
    and put back in like's order."""
    n = len(order)
    specs = _compat.dim_specs(like)
    moved = split(y, 0, [like.shape[d] for d in order], [specs[d] for d in order])
    back = tuple(order.index(d) for d in range(n))
    return jnp.transpose(moved, back + tuple(range(n, y.ndim - 1 + n)))


def rows_merged_past_rank(fn: Any, rows: Sequence[Any], n: int, *others: Any) -> Any:
    """``fn(*rows, *others)``; where the arrays ``rows`` (whose first ``n``
    dimensions are rows a per-row operator treats alike) pass aclnn's rank
    limit, those dimensions merged into one for the call and the results'
    first dimension split back."""
    if rows[0].ndim <= _checks.MAX_RANK:
        return fn(*rows, *others)
    order = rows_first(rows[0], n)
    out = fn(*(to_rows(x, order) for x in rows), *others)
    return jax.tree.map(lambda y: from_rows(y, rows[0], order), out)


__all__ = ["CANN_FLOATS", "check_float", "from_rows", "merge", "rows_first",
           "rows_merged_past_rank", "sharded_like", "split", "to_rows", "typed_like"]
