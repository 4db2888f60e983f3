"""The batching rule (``vmap``) of declared operators
(:class:`jax_aclnn._declared.DeclaredOperator`): one aclnn call wherever the
operator's dimension rule lets the mapped dimension join its operands'
dimensions, one call per example otherwise."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn import _batching, _checks, _compat, _dims


def batch(op: Any, args: Sequence[Any], dims: Sequence[Any], **params: Any):
    """vmap's rule of a declared operator ``op``: one call where the
    operator is element-wise, where vmap's dimension merges into a leading
    factor every output has, or where it joins ``...`` (the results whose
    groups lack ``...``, sums over the rows, then come per example from the
    reference); else one call per example (``jax.lax.map``)."""
    size = _batching.batch_size(args, dims)
    placeholders = op.absent_operands(params["absent"], params["list_sizes"])
    if op.elementwise:  # one call on operands broadcast to (batch, *result shape)
        present = [i for i in range(len(args)) if i not in placeholders]
        rank = max(jnp.ndim(args[i]) - (dims[i] is not _compat.not_mapped) for i in present)
        moved = list(args)
        for i in present:
            a, d = args[i], dims[i]
            if d is not _compat.not_mapped:
                a = jnp.moveaxis(a, d, 0)
                a = jnp.reshape(a, (size,) + (1,) * (rank + 1 - a.ndim) + a.shape[1:])
            moved[i] = a
        shape = jnp.broadcast_shapes(*(jnp.shape(moved[i]) for i in present))
        shape = (size,) + shape[len(shape) - rank:]
        # CANN's element-wise operators may take same-shape operands only
        for i in present:
            moved[i] = jnp.broadcast_to(moved[i], shape)
        out = op.bind(*moved, **params)
        return out, [0] * len(out)
    leading = _leading_factor(op, args, dims, **params)
    if leading is not None:  # the mapped dimension merged into a leading factor
        return _into_leading_factor(op, args, dims, leading, **params)
    if op.rule is not None and _in_one_call(op, args, dims, **params):
        # the mapped dimension joins '...': moved in front, and the
        # unmapped operands that have '...' broadcast along it
        groups = op.operand_groups(params["list_sizes"])
        moved = [jnp.moveaxis(a, d, 0) if d is not _compat.not_mapped else
                 jnp.broadcast_to(a, (size,) + a.shape)
                 if op.rule.inputs[groups[i]][:1] == (_dims.ELLIPSIS,)
                 and i not in placeholders else a
                 for i, (a, d) in enumerate(zip(args, dims))]
        out = op.bind(*moved, **params)
        summed = _summed_over_ellipsis(op, args, dims, **params)
        if any(summed):  # per example from the reference (XLA drops it where unused)
            per_example = jax.vmap(functools.partial(op.reference, **params),
                                   in_axes=tuple(dims))(*args)
            out = [r if s else o for o, r, s in zip(out, per_example, summed)]
        return out, [0] * len(out)
    # otherwise: one call per example (jax.lax.map), never merged
    mapped = [i for i, d in enumerate(dims) if d is not _compat.not_mapped]

    def one(xs):
        full = list(args)
        for i, x in zip(mapped, xs):
            full[i] = x
        return op.bind(*full, **params)

    # jax.lax.map scans the leading axis, which must not be sharded (explicit
    # axes): gathered for the scan, the results sharded back as the operands
    spec = _batching.batch_spec(args, dims)
    xs = [_unsharded_leading(jnp.moveaxis(args[i], dims[i], 0)) for i in mapped]
    out = jax.lax.map(one, xs)
    return [_batching.with_batch_sharding(o, spec) for o in out], [0] * len(out)


def _example(args: Sequence[Any], dims: Sequence[Any]) -> list[Any]:
    """One example's operands (abstract)."""
    return [jax.ShapeDtypeStruct(
        a.shape if d is _compat.not_mapped else a.shape[:d] + a.shape[d + 1:], a.dtype)
        for a, d in zip(args, dims)]


def _summed_over_ellipsis(op, args: Sequence[Any], dims: Sequence[Any], **params: Any
                          ) -> list[bool]:
    """For each result, whether its group lacks ``...`` (a sum over the rows,
    as a norm's dgamma): one call over every example would sum over all."""
    example = _example(args, dims)
    outs = op.abstract_eval(*example, **params)
    _, out_groups = op.arrays_by_parameter(example, outs, absent=params["absent"],
                                             list_sizes=params["list_sizes"])
    return [op.rule.outputs[i][:1] != (_dims.ELLIPSIS,)
            for i, arrays in enumerate(out_groups) for _ in arrays]


def _in_one_call(op, args: Sequence[Any], dims: Sequence[Any], **params: Any) -> bool:
    """Whether the rule lets vmap run one call (see :meth:`Rule.batchable`)
    within aclnn's rank limit."""
    groups = op.operand_groups(params["list_sizes"])
    mapped = [groups[i] for i, d in enumerate(dims) if d is not _compat.not_mapped]
    if not op.rule.batchable(mapped):
        return False
    example = _example(args, dims)
    ranks = [len(e.shape) + 1 for e in example] + [
        o.ndim + 1 for o in op.abstract_eval(*example, **params)]
    return max(ranks) <= _checks.MAX_RANK

def _leading_factor(op, args: Sequence[Any], dims: Sequence[Any], **params: Any
                    ) -> str | None:
    """The named factor that leads every mapped operand's group and every
    output's (zero-sized outputs aside), into which vmap's dimension can
    merge (FlashAttentionScore's batch ``b``); None where there is none."""
    if op.rule is None:
        return None
    groups = op.operand_groups(params["list_sizes"])
    mapped = {groups[i] for i, d in enumerate(dims) if d is not _compat.not_mapped}
    leads = {op.rule.inputs[g][0] if op.rule.inputs[g] else None for g in mapped}
    example = _example(args, dims)
    outs = op.abstract_eval(*example, **params)
    _, out_groups = op.arrays_by_parameter(example, outs, absent=params["absent"],
                                             list_sizes=params["list_sizes"])
    leads |= {op.rule.outputs[i][0] if op.rule.outputs[i] else None
              for i, arrays in enumerate(out_groups)
              if any(a is not None and a.size for a in arrays)}
    if len(leads) != 1:
        return None
    (lead,) = leads
    # every operand that has the factor must have it first (the merge reshapes there)
    placeholders = op.absent_operands(params["absent"], params["list_sizes"])
    if any(lead in op.rule.inputs[groups[i]][1:] for i in range(len(args))
           if i not in placeholders):
        return None
    ok = lead not in (None, "1", _dims.ELLIPSIS) and lead not in op.rule.replicated
    return lead if ok and lead not in op.local_sizes.values() else None

def _into_leading_factor(op, args, dims, factor, **params):
    """One call with vmap's dimension merged into ``factor``: mapped
    operands ``(batch, f, ...) -> (batch * f, ...)``, unmapped ones that
    lead with it broadcast first; outputs split back."""
    size = _batching.batch_size(args, dims)
    groups = op.operand_groups(params["list_sizes"])
    placeholders = op.absent_operands(params["absent"], params["list_sizes"])
    merged = []
    for i, (a, d) in enumerate(zip(args, dims)):
        leads = op.rule.inputs[groups[i]][:1] == (factor,) and i not in placeholders
        if d is _compat.not_mapped and not leads:
            merged.append(a)
            continue
        a = jnp.broadcast_to(a, (size,) + a.shape) if d is _compat.not_mapped else \
            jnp.moveaxis(a, d, 0)
        merged.append(a.reshape((size * a.shape[1],) + a.shape[2:]))
    out = op.bind(*merged, **params)
    return ([o.reshape((size, o.shape[0] // size) + o.shape[1:]) if o.size else
             jnp.zeros((size,) + o.shape, o.dtype) for o in out], [0] * len(out))


def _unsharded_leading(x: Any) -> Any:
    """``x`` with its leading axis unsharded (gathered where an explicit mesh
    axis shards it)."""
    spec = _compat.dim_specs(x)
    if spec[0] is None:
        return x
    return jax.sharding.reshard(x, jax.sharding.PartitionSpec(None, *spec[1:]))


__all__ = ["batch"]
