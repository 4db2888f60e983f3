"""Checking a declared operator's dimension rule on the host devices:
:func:`check_dims`.

Where no provider has an operator, its reference runs outside
``custom_partitioning`` and XLA partitions the reference's own code, so a
rule that does not hold gives right answers on the CPU and wrong ones on
the NPU, where each shard runs CANN's operator on its block as the rule
says. :func:`check_dims` runs what the NPU would run: inside a
``jax.shard_map`` over the host devices, each device calls the operator
(the provider's, else the reference) on its block of the operands, with
the per-shard semantics of :mod:`jax_aclnn._sharding`'s partitioner (a
partitioned factor: the block's result; an output that lacks a sharded
factor: the shards' results summed; ``local_sizes`` attributes: the
block's sizes), and compares with the unsharded call.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_aclnn import _dims, _sharding
from jax_aclnn._declared import DeclaredOperator, output_groups

#: The mesh axis of the check (one factor sharded at a time).
_AXIS = "check_dims"
#: The aval of an absent tensor's placeholder operand (see ``_declared.placeholder``).
_PLACEHOLDER = jax.ShapeDtypeStruct((0,), jnp.float32)


def check_dims(op: Callable[..., Any], *operands: Any, **params: Any) -> None:
    """Checks a declared operator's dimension rule on the host devices,
    without an NPU.

    For each factor the rule partitions (``dims=``, or every dimension of
    an ``elementwise=True`` operator; never a ``replicated`` one), runs the
    operator under the rule with that factor sharded over the host (CPU)
    devices and compares with the unsharded call: each device calls the
    operator on its block of the operands (the provider's operator where
    the CPU has one, else the reference: what CANN's operator does on each
    NPU), an output that has the factor is the devices' blocks, one that
    lacks it the sum of the devices' results, and ``local_sizes``
    attributes are the block's sizes. The results are compared with
    ``allclose`` at ``rtol = 8 * eps * sqrt(n)`` of each output's dtype and
    ``atol`` that times the output's largest magnitude (integers exactly), n the number of terms of the largest sum the
    rule implies for that output (an output lacking factors of the inputs
    sums over them; n is 1 for one that sums nothing).
    A factor whose size the device count does not divide is sharded over
    the largest count that divides it. An operator with neither ``dims=``
    nor ``elementwise=True`` is replicated under sharding: nothing to
    check. Where the CPU has no provider of the operator, the check is
    the reference's: it holds for CANN's operator as far as the reference
    computes what CANN's does. The semantics checked are those of
    :func:`jax_aclnn.declare`'s ``dims``, which the partitioner of a sharded
    ``jax.jit`` gives each NPU's call::

        jax.config.update("jax_num_cpu_devices", 8)  # before JAX starts
        aclnn.check_dims(rms_norm, x, gamma, epsilon=1e-6)

    Args:
      op: a function :func:`jax_aclnn.declare` returned.
      *operands: its input tensors as a call takes them (arrays, a tensor
        list as a sequence, None for an absent optional tensor): concrete
        values, each partitioned factor of size 0 or with a divisor from 2
        to the device count.
      **params: its other arguments, by name, as a call takes them.

    Returns:
      None when partitioning no factor changes a result.

    Raises:
      ValueError: naming the first factor (a dimension of ``...`` by its
        position) whose partitioning changes a result, the output and the
        difference; or a factor to partition whose size no count of 2 or
        more devices divides.
      TypeError: ``op`` is not a declared operator, the operands are not
        its input tensors or are traced (inside ``jax.jit``), or (as its
        call) an argument is not of its parameter's kind.
      RuntimeError: JAX has fewer than 2 host devices (the message says
        how to get more).
    """
    dop = getattr(op, "aclnn_operator", None)
    if not isinstance(dop, DeclaredOperator):
        raise TypeError(f"check_dims: op must be a function that jax_aclnn.declare returned, "
                        f"got {op!r}")
    inputs = dop.prototype.inputs
    if len(operands) != len(inputs):
        raise TypeError(f"check_dims({dop.name}): expected the {len(inputs)} input tensors "
                        f"({', '.join(p.name for p in inputs)}) positionally and the other "
                        f"arguments by name, got {len(operands)} positional arguments")
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(operands)):
        raise TypeError(f"check_dims({dop.name}): the operands are traced; check_dims runs the "
                        f"operator: call it with concrete arrays, outside jax.jit")
    devices = _host_devices()
    operands = jax.tree.map(jnp.asarray, operands)
    call = functools.partial(op, **params)
    out = jax.eval_shape(call, *operands)
    in_groups, out_groups, absent = _arrays_by_parameter(dop, operands, out)
    in_factors, out_factors = _leaf_factors(dop, in_groups, out_groups, absent)
    sizes = _sizes(in_factors, _present(in_groups))
    partitioned = list(dict.fromkeys(f for fs in in_factors for f in fs if f))
    if not partitioned:
        return
    terms = _sums(dop, in_groups, out_groups)
    labels = [f"{p.name}[{i}]" if p.kind == "tensor_list" else p.name
              for p, g in zip(dop.prototype.outputs, out_groups) for i, a in enumerate(g)
              if a is not None]
    leaves, tree = jax.tree.flatten(operands)
    expected = jax.jit(call)(*jax.device_put(operands, devices[0]))

    def local(*blocks: Any) -> list[Any]:  # one device's call, as the partitioner's lower_fn
        outs = jax.tree.leaves(call(*jax.tree.unflatten(tree, blocks)))
        return [o if f in fs else jax.lax.psum(o, _AXIS) for o, fs in zip(outs, out_factors)]

    for f in partitioned:
        count = _device_count(dop.name, f, sizes[f], len(devices))
        mesh = Mesh(np.array(devices[:count]), (_AXIS,))
        in_specs = tuple(_spec(fs, f) for fs in in_factors)
        sharded = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=in_specs,
                                        out_specs=[_spec(fs, f) for fs in out_factors],
                                        check_vma=False))
        actual = sharded(*(jax.device_put(x, NamedSharding(mesh, s))
                           for x, s in zip(leaves, in_specs)))
        for label, a, e, n in zip(labels, actual, jax.tree.leaves(expected), terms):
            problem = _difference(np.asarray(a), np.asarray(e), n)
            if problem:
                raise ValueError(
                    f"check_dims({dop.name}): partitioning {_dims.describe(f)} (size "
                    f"{sizes[f]}, over {count} devices) changes {label}: {problem}; the rule "
                    f"{_rule_text(dop, in_groups, out_groups)!r} does not hold for it (name "
                    f"it in replicated= if the operator needs it whole)")


def _host_devices() -> list[Any]:
    """JAX's CPU devices; a RuntimeError, saying how to get them, when fewer than 2."""
    try:
        devices = jax.devices("cpu")
    except RuntimeError:  # no CPU backend (JAX_PLATFORMS without cpu)
        devices = []
    if len(devices) < 2:
        raise RuntimeError(
            f"check_dims: needs at least 2 host (CPU) devices, JAX has {len(devices)}: before "
            f"JAX starts (the first computation), call "
            f"jax.config.update(\"jax_num_cpu_devices\", 8), or set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count=8 (and JAX_PLATFORMS to include "
            f"cpu)")
    return devices


def _arrays_by_parameter(dop: DeclaredOperator, operands: Sequence[Any], out: Any):
    """The input and output arrays grouped by tensor parameter (a tensor
    list's several, an absent tensor's None), as
    :meth:`jax_aclnn._dims.Rule.factors` takes them, and the absent inputs' names."""
    proto = dop.prototype
    absent = tuple(p.name for p, x in zip(proto.inputs, operands)
                   if p.kind == "tensor" and x is None)
    ins = [list(x) if p.kind == "tensor_list" else [x] for p, x in zip(proto.inputs, operands)]
    outs = [[None] if p.name in absent else g
            for p, g in zip(proto.outputs, output_groups(proto, out, absent))]
    return ins, outs, absent


def _flat(groups: Sequence[Sequence[Any]]) -> list[Any]:
    """The arrays of the groups in a row (an absent tensor's None included)."""
    return [a for g in groups for a in g]


def _present(groups: Sequence[Sequence[Any]]) -> list[Any]:
    """The arrays of the groups without the absent tensors' Nones: the
    pytree leaves of the operands or results."""
    return [a for a in _flat(groups) if a is not None]


def _leaf_factors(dop: DeclaredOperator, ins, outs, absent):
    """The operator's sharding factors (:meth:`DeclaredOperator.factors`)
    of the operands' and the results' pytree leaves."""
    avals = lambda groups: [_PLACEHOLDER if a is None else a for a in _flat(groups)]  # noqa: E731
    list_sizes = tuple(len(g) for p, g in zip(dop.prototype.inputs + dop.prototype.outputs,
                                              ins + outs) if p.kind == "tensor_list")
    in_factors, out_factors = dop.factors(avals(ins), avals(outs), attrs=(), absent=absent,
                                          list_sizes=list_sizes)
    keep = lambda factors, groups: [fs for fs, a in zip(factors, _flat(groups))  # noqa: E731
                                    if a is not None]
    return keep(in_factors, ins), keep(out_factors, outs)


def _sums(dop: DeclaredOperator, ins, outs) -> list[int]:
    """For each output with elements (the results' pytree leaves), the
    number of terms of the sum the rule says it is: the product of the sizes
    of the inputs' factors (replicated ones included) that it lacks; 1 for
    an output that is no sum."""
    present = [a for a in _flat(outs) if a is not None]
    if dop.rule is None:  # element-wise, or replicated: no sums
        return [1] * len(present)
    rule = dataclasses.replace(dop.rule, replicated=frozenset())
    in_factors, out_factors = rule.factors(ins, outs, where=dop.name)
    sizes = _sizes(in_factors, _flat(ins))
    return [math.prod(sizes[f] for f in _sharding.summed_factors(in_factors, fs))
            for fs, a in zip(out_factors, _flat(outs)) if a is not None]


def _sizes(factors: Sequence[_dims.Factors], arrays: Sequence[Any]) -> dict[str, int]:
    """Each factor's size in ``arrays`` (None: an absent tensor's placeholder)."""
    return {f: n for fs, a in zip(factors, arrays) if a is not None
            for f, n in zip(fs, a.shape) if f}


def _device_count(name: str, factor: str, size: int, devices: int) -> int:
    """The most devices, at most ``devices``, whose count divides ``size``;
    a ValueError when no count of 2 or more does."""
    count = next((n for n in range(devices, 1, -1) if size % n == 0), None)
    if count is None:
        raise ValueError(f"check_dims({name}): {_dims.describe(factor)} has size {size}, which "
                         f"no count of 2 to {devices} devices divides: give operands where it "
                         f"does")
    return count


def _spec(factors: _dims.Factors, factor: str) -> P:
    """The PartitionSpec of an array of ``factors`` with ``factor`` sharded."""
    return P(*(_AXIS if f == factor else None for f in factors))


def _difference(actual: np.ndarray, expected: np.ndarray, terms: int) -> str:
    """"" when ``actual`` equals ``expected`` within the tolerance of
    their dtype for sums of ``terms`` terms (integers: exactly), else how
    they differ."""
    if not jnp.issubdtype(expected.dtype, jnp.inexact):
        count = np.count_nonzero(actual != expected)
        return f"{count} of {expected.size} elements differ" if count else ""
    tol = 8 * float(jnp.finfo(expected.dtype).eps) * math.sqrt(terms)
    wide = np.complex128 if jnp.issubdtype(expected.dtype, jnp.complexfloating) else np.float64
    a, e = actual.astype(wide), expected.astype(wide)
    finite = np.abs(e[np.isfinite(e)])
    scale = float(finite.max()) if finite.size else 1.0  # atol relative to the output's magnitude
    differ = ~np.isclose(a, e, rtol=tol, atol=tol * scale, equal_nan=True)
    if not differ.any():
        return ""
    with np.errstate(invalid="ignore"):  # inf - inf
        error = np.max(np.abs(a - e)[differ])
    return (f"{np.count_nonzero(differ)} of {e.size} elements differ, by up to {error:.3g} "
            f"(tolerance {tol:.3g}, relative and times the largest magnitude {scale:.3g})")


def _rule_text(dop: DeclaredOperator, ins, outs) -> str:
    """The rule that was checked: ``dims=``, or an element-wise operator's own."""
    return dop.rule.text if dop.rule is not None else dop.dims(_present(ins), _present(outs))


__all__ = ["check_dims"]
