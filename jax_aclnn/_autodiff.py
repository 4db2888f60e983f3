"""Autodiff rules every operator shares: JVP and transpose rules.

Each aclnn operator is a backward operator, linear in its incoming-gradient
operand (``AclnnPrimitive.linear_operand``). JAX differentiates it through

* a **transpose rule** in that operand. It binds the operator's
  *transposed* primitive ``<name>_transpose`` (class :class:`Transposed`),
  whose operands are the operator's output cotangents followed by its other
  operands and whose value is ``AclnnPrimitive.transpose_reference``. The
  transposed primitive's own transpose rule binds the operator again, so a
  linear map written with one of them turns into the other under
  ``jax.grad``: the custom-JVP rules of :mod:`jax_aclnn.ops` write their
  tangent maps this way so that reverse mode runs exactly the aclnn call
  of the old custom-VJP backward. A self-adjoint element-wise operator
  whose incoming gradient has the result's shape is its own transpose (no
  second primitive);
* a **JVP rule**: the operator itself on the incoming gradient's tangent
  (it is linear there) plus the JVP of the pure-JAX reference in the other
  operands (their second derivatives, plain XLA code). The transposed
  primitive has the same two parts.

``vmap`` of the transposed primitive is the transpose of the operator's
batching rule (``jax.linear_transpose``), so it stays one call per use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.core import ShapedArray

from jax_aclnn import _batching, _compat, _sharding

#: An operator: a :class:`jax_aclnn._primitive.AclnnPrimitive` (which
#: imports this module, so it is not imported here).
Operator = Any


def sum_to_shape(x: jax.Array, shape: Sequence[int]) -> jax.Array:
    """``x`` summed over the axes along which ``shape`` was broadcast to ``x.shape``."""
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1)
    return x.sum(axes).reshape(shape) if axes else x


def _as_list(out: Any, multiple: bool) -> list[Any]:
    return list(out) if multiple else [out]


def _jvp(bind: Callable, reference: Callable, linear: int, primals, tangents, multiple: bool):
    """The JVP of a primitive linear in its first ``linear`` operands: itself
    on their tangents plus the JVP of ``reference`` in the other operands."""
    out = bind(*primals)
    lin_t, other_t = tangents[:linear], tangents[linear:]
    parts = []
    if any(type(t) is not _compat.Zero for t in lin_t):
        lin_t = [_compat.instantiate_zeros(t) for t in lin_t]
        parts.append(_as_list(bind(*lin_t, *primals[linear:]), multiple))
    if any(type(t) is not _compat.Zero for t in other_t):
        lin_p = primals[:linear]
        _, t = jax.jvp(lambda *o: reference(*lin_p, *o), tuple(primals[linear:]),
                       tuple(_compat.instantiate_zeros(t) for t in other_t))
        parts.append(_as_list(t, multiple))
    if not parts:
        t_out = [_compat.Zero(jax.typeof(o).to_tangent_aval()) for o in _as_list(out, multiple)]
    else:
        t_out = [sum(ts[1:], ts[0]) for ts in zip(*parts)]
    return out, (t_out if multiple else t_out[0])


class Transposed:
    """The transpose of ``op`` in its incoming gradient, as a JAX primitive.

    Operands: ``num_cts`` cotangents of ``op``'s results, then ``op``'s other
    operands; parameters: ``op``'s, with ``linear_shape`` and
    ``linear_dtype``, the type of the incoming gradient it returns.
    """

    def __init__(self, op: Operator) -> None:
        self.op = op
        p = _compat.Primitive(op.name + "_transpose")
        p.def_impl(lambda *args, **params: _compat.apply_primitive(p, *args, **params))
        p.def_abstract_eval(self._abstract_eval)
        _compat.register_lowering(p, _compat.lower_fun(self._reference, multiple_results=False))
        _compat.primitive_batchers[p] = self._batch
        _compat.primitive_jvps[p] = self._jvp
        _compat.primitive_transposes[p] = self._transpose
        # Its lowering holds the operator's custom call, which may be partitioned.
        _compat.require_devices_during_lowering(p)
        self.primitive = p

    def bind(self, cts: Sequence[Any], others: Sequence[Any], linear_aval: Any,
             **params: Any) -> jax.Array:
        op = self.op
        shape, dtype = tuple(linear_aval.shape), jnp.dtype(linear_aval.dtype)
        if op.self_adjoint and tuple(cts[0].shape) == shape:
            return op.bind(*op.with_linear(cts[0], others), **params)
        if op.reference_forced():
            return op.transpose_reference(cts, others, shape, dtype, **params)
        args = _compat.match_varying_axes([*cts, *others])
        return self.primitive.bind(*args, num_cts=len(cts), linear_shape=shape,
                                   linear_dtype=dtype, **params)

    def _reference(self, *args, num_cts, linear_shape, linear_dtype, **params):
        return self.op.transpose_reference(args[:num_cts], args[num_cts:], linear_shape,
                                           linear_dtype, **params)

    def _abstract_eval(self, *avals, num_cts, linear_shape, linear_dtype, **params):
        # Sharded as the operator's incoming gradient: by the operator's
        # factors, from its results (the cotangents) and its other operands.
        op = self.op
        cts, others = avals[:num_cts], avals[num_cts:]
        lin = ShapedArray(linear_shape, linear_dtype)
        in_factors, out_factors = op.factors(op.with_linear(lin, others), cts, **params)
        lin_factors = in_factors.pop(op.linear_operand)
        axes = _sharding.factor_axes([*out_factors, *in_factors],
                                     [_compat.type_spec(a) for a in (*cts, *others)])
        return _compat.with_operand_types(lin, avals, _sharding.spec_entries(lin_factors, axes))

    def _jvp(self, primals, tangents, *, num_cts, **params):
        bind = lambda *a: self.primitive.bind(*a, num_cts=num_cts, **params)  # noqa: E731
        reference = lambda *a: self._reference(*a, num_cts=num_cts, **params)  # noqa: E731
        return _jvp(bind, reference, num_cts, primals, tangents, multiple=False)

    def _transpose(self, ct, *operands, num_cts, linear_shape, linear_dtype, **params):
        op = self.op
        others = operands[num_cts:]
        if any(_compat.is_undefined_primal(o) for o in others):
            raise NotImplementedError(f"{self.primitive.name} is linear only in its cotangents")
        if type(ct) is _compat.Zero:
            return [None] * len(operands)
        outs = _as_list(op.bind(*op.with_linear(ct, others), **params), op.multiple_results)
        return [_compat.reshard_like(o, c.aval) if _compat.is_undefined_primal(c) else None
                for o, c in zip(outs, operands[:num_cts])] + [None] * len(others)

    def _batch(self, args, dims, *, num_cts, linear_shape, linear_dtype, **params):
        # The transpose of the operator's batching rule: one call per use.
        op = self.op
        size = _batching.batch_size(args, dims)
        # New batch axes get the mapped operands' sharding of theirs (explicit
        # mesh axes): vmap refuses mapped axes sharded differently.
        place = partial(_batching.with_batch_sharding, spec=_batching.batch_spec(args, dims))
        cts = [place(jnp.broadcast_to(c, (size,) + c.shape)) if d is _compat.not_mapped
               else jnp.moveaxis(c, d, 0) for c, d in zip(args[:num_cts], dims[:num_cts])]
        others, other_dims = args[num_cts:], dims[num_cts:]

        def batched_op(g):
            return jax.vmap(lambda g, *o: op.bind(*op.with_linear(g, o), **params),
                            in_axes=(0, *other_dims))(g, *others)

        g0 = place(jnp.zeros((size,) + tuple(linear_shape), linear_dtype))
        g0 = _compat.match_varying_axes([g0, *args])[0]
        # The cotangents with the types of the batched operator's results.
        cts = [_compat.reshard_like(c, t) for c, t in
               zip(cts, _as_list(jax.eval_shape(batched_op, g0), op.multiple_results))]
        (ct_g,) = jax.linear_transpose(batched_op, g0)(cts if op.multiple_results else cts[0])
        return ct_g, 0


def register(op: Operator) -> Transposed:
    """Registers ``op``'s JVP and transpose rules; returns its transposed primitive."""
    transposed = Transposed(op)
    lin = op.linear_operand

    def to_front(args):  # the linear operand first
        return (args[lin], *args[:lin], *args[lin + 1:])

    def jvp(primals, tangents, **params):
        bind = lambda g, *o: op.primitive.bind(*op.with_linear(g, o), **params)  # noqa: E731
        reference = lambda g, *o: op.reference(*op.with_linear(g, o), **params)  # noqa: E731
        return _jvp(bind, reference, 1, to_front(primals), to_front(tangents),
                    op.multiple_results)

    def transpose(cts, *operands, **params):
        g, *others = to_front(operands)
        if any(_compat.is_undefined_primal(o) for o in others):
            raise NotImplementedError(
                f"{op.name} is linear only in operand {lin}, not in the others")
        cts = _as_list(cts, op.multiple_results)
        result: list[Any] = [None] * len(operands)
        if all(type(c) is _compat.Zero for c in cts):
            return result
        cts = [_compat.instantiate_zeros(c) for c in cts]
        result[lin] = _compat.reshard_like(transposed.bind(cts, others, g.aval, **params), g.aval)
        return result

    _compat.primitive_jvps[op.primitive] = jvp
    _compat.primitive_transposes[op.primitive] = transpose
    return transposed


__all__ = ["Transposed", "register", "sum_to_shape"]
