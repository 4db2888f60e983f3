"""Sharding rules: each operator runs on its own shard under a sharded ``jit``.

A custom call that XLA's SPMD partitioner does not understand is run on
whole, all-gathered tensors. So on the platforms with an aclnn handler the
operator's custom call is wrapped in ``jax.experimental.custom_partitioning``
(as TransformerEngine-JAX does for its custom calls), described by *factors*,
one name per dimension, as in an einsum:

* element-wise operators: one factor per result dimension; an operand
  dimension that broadcasts (size 1) has no factor and is replicated;
* ``batch_norm_reduce_backward``: the channel factor ``c`` is kept, every
  other dimension of ``grad_out``/``input`` is a *reduction* factor.

From the factors come the Shardy sharding rule (for propagation) and the
partitioning: each factor takes the mesh axes that shard it in the first
operand where it is sharded; each device runs the aclnn operator on its local
blocks; results that are sums over a sharded reduction factor are
``psum``-ed (only the small per-channel results move between devices).
Operators whose result depends on global sizes (the ``"mean"`` of
``smooth_l1_loss_backward``) adjust their local call in
``AclnnPrimitive.local_call``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from jax_aclnn import _compat

#: An operator: a :class:`jax_aclnn._primitive.AclnnPrimitive` (which
#: imports this module, so it is not imported here).
Operator = Any

#: Factors of one array: a name per dimension, None for a dimension that is
#: never sharded (a broadcast size-1 dimension, a zero-sized placeholder).
Factors = tuple[str | None, ...]


def reduction_factors(in_factors: Sequence[Factors], out_factors: Sequence[Factors]) -> list[str]:
    """Factors of operands that no result has: summed over."""
    names = lambda arrays: {f for fs in arrays for f in fs if f}  # noqa: E731
    return sorted(names(in_factors) - names(out_factors))


def summed_factors(in_factors: Sequence[Factors], out: Factors) -> list[str]:
    """Factors of the operands that the result of factors ``out`` lacks: it
    is a sum over them."""
    return reduction_factors(in_factors, [out])


def sharding_rule(in_factors: Sequence[Factors], out_factors: Sequence[Factors]):
    """The Shardy rule string and its keyword arguments for ``def_partition``."""
    replicated: list[str] = []

    def spell(fs: Factors) -> str:
        names = []
        for f in fs:
            if f is None:
                f = f"unsharded{len(replicated)}"
                replicated.append(f)
            names.append(f)
        return " ".join(names)

    ins = ", ".join(spell(fs) for fs in in_factors)
    outs = ", ".join(spell(fs) for fs in out_factors)
    return f"{ins} -> {outs}", {"reduction_factors": tuple(reduction_factors(in_factors, out_factors)),
                                "need_replication_factors": tuple(replicated)}


def _axes(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def factor_axes(in_factors: Sequence[Factors], specs: Sequence[Any]) -> dict[str, tuple[str, ...]]:
    """Mesh axes per factor: from the first operand whose PartitionSpec
    (None: unsharded) shards it, no axis twice."""
    chosen: dict[str, tuple[str, ...]] = {}
    used: set[str] = set()
    for fs, spec in zip(in_factors, specs):
        for f, entry in zip(fs, tuple(spec or ())):
            axes = _axes(entry)
            if f is None or not axes or f in chosen or used & set(axes):
                continue
            chosen[f] = axes
            used |= set(axes)
    return chosen


def even_factor_axes(axes: dict[str, tuple[str, ...]], in_factors: Sequence[Factors],
                     in_avals: Sequence[Any], mesh: Any) -> dict[str, tuple[str, ...]]:
    """``axes`` without the factors whose size the mesh axes do not divide.

    XLA pads the blocks of an uneven dimension with values nobody reads, so
    an element-wise factor could be split unevenly; but a sum over a factor
    (a reduction factor) would add the padding in. Such a factor is left
    whole: XLA gathers the operands along it first. Uneven element-wise
    factors are left whole too, so that every block the aclnn operator sees
    holds data only.
    """
    sizes = {f: n for fs, a in zip(in_factors, in_avals) for f, n in zip(fs, a.shape) if f}
    return {f: a for f, a in axes.items()
            if sizes[f] % math.prod(mesh.shape[name] for name in a) == 0}


def spec_entries(factors: Factors, axes: dict[str, tuple[str, ...]]) -> list[Any]:
    """The PartitionSpec entries of an array with ``factors``, from :func:`factor_axes`."""
    entries = [axes.get(f) if f else None for f in factors]
    return [None if not e else e[0] if len(e) == 1 else e for e in entries]


def typed(op: Operator, out_avals: Sequence[Any], in_avals: Sequence[Any],
          **params: Any) -> list[Any]:
    """``op``'s result avals with the sharding their factors have in the
    operands (an operand dimension that broadcasts gives none; batch norm's
    (C,) results are sharded as the channel dimension) and the operands'
    varying manual axes."""
    in_factors, out_factors = op.factors(in_avals, out_avals, **params)
    axes = factor_axes(in_factors, [_compat.type_spec(a) for a in in_avals])
    return [_compat.with_operand_types(o, in_avals, spec_entries(fs, axes))
            for o, fs in zip(out_avals, out_factors)]


def _summed(x: Any, axes: tuple[str, ...], explicit: bool) -> Any:
    """``x`` summed over the devices of ``axes``: ``psum``; where the
    operands are typed on an explicit mesh at jax 0.7, the partials
    gathered and added (there XLA:CPU refuses the all-reduce that ``psum``
    lowers to inside a partitioned call: "Unsupported reduction
    computation"). The summed results are small (a norm's dgamma, batch
    norm's per-channel sums)."""
    if explicit and not _compat.PSUM_IN_PARTITIONED_CALL:
        return jnp.sum(jax.lax.all_gather(x, axes), axis=0, dtype=x.dtype)
    return jax.lax.psum(x, axes)


def partitioned(op: Operator, in_avals: Sequence[Any], out_avals: Sequence[Any],
                params: dict[str, Any]):
    """``op``'s custom call as a ``custom_partitioning`` function of its operands."""
    in_factors, out_factors = op.factors(in_avals, out_avals, **params)
    rule, rule_kwargs = sharding_rule(in_factors, out_factors)
    explicit = any(t == jax.sharding.AxisType.Explicit for a in in_avals
                   for t in getattr(getattr(getattr(a, "sharding", None), "mesh", None),
                                    "axis_types", ()))

    def call(*args):
        return op.ffi_call(*args, **params)

    def partition(mesh, arg_shapes, result_shape):
        specs = [_compat.mesh_spec(a.sharding, mesh) for a in arg_shapes]
        axes = even_factor_axes(factor_axes(in_factors, specs), in_factors, in_avals, mesh)

        def sharding(fs: Factors) -> NamedSharding:
            return NamedSharding(mesh, PartitionSpec(*spec_entries(fs, axes)))

        # Each result is summed over the sharded factors of the operands that
        # it lacks: over every operand factor for batch norm's per-channel
        # sums, over the rows for a norm's dgamma beside its row-sharded dx.
        summed = [summed_factors(in_factors, fs) for fs in out_factors]
        reduce_axes = [tuple(a for f in fs for a in axes.get(f, ())) for fs in summed]

        def lower_fn(*local_args):
            outs = op.local_call(local_args, in_avals, **params)
            return [_summed(o, r, explicit) if r else o for o, r in zip(outs, reduce_axes)]

        return (mesh, lower_fn, [sharding(fs) for fs in out_factors],
                tuple(sharding(fs) for fs in in_factors))

    fn = custom_partitioning(call)
    # The operands' shardings come undecoded: XLA may propagate one that no
    # PartitionSpec of the mesh expresses (uneven sizes after a reshape),
    # which custom_partitioning's own decoding cannot take.
    fn.def_partition(partition=partition, sharding_rule=rule, decode_shardings=False,
                     **rule_kwargs)
    return fn
