"""The machinery every operator shares: one class per aclnn operator holds
all JAX needs to know about it (abstract evaluation, the pure-JAX reference,
the custom-call lowering, the batching rule, the sharding factors, the
transpose in its incoming gradient); this base class registers them, and
:mod:`jax_aclnn._autodiff` derives its JVP and transpose rules.

Lowering: on the platforms with a jax_aclnn FFI handler (``"cpu"`` and the
NPU platform) the primitive becomes one XLA typed-FFI custom call; on every
other platform it lowers to its pure-JAX reference, so user code runs
anywhere. ``JAX_ACLNN_REFERENCE`` forces the reference path when a call is
traced: ``all`` (or ``1``), or a comma-separated list of operator names such
as ``swish_backward,logit_grad``. When XLA partitions the program over
several devices, the custom call is wrapped in ``custom_partitioning`` with
the rules of :mod:`jax_aclnn._sharding`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from jax.core import ShapedArray

from jax_aclnn import _autodiff, _compat, _ffi, _sharding

REFERENCE_ENV = "JAX_ACLNN_REFERENCE"


def reference_forced(name: str) -> bool:
    """True when ``$JAX_ACLNN_REFERENCE`` selects the pure-JAX path for ``name``."""
    value = os.environ.get(REFERENCE_ENV, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "all", "true", "yes"):
        return True
    return name in {v.strip() for v in value.split(",")}


class AclnnPrimitive:
    """Base class: one subclass per aclnn operator.

    Subclasses set ``name`` (the JAX primitive and public function name),
    ``aclnn_name`` (the aclnn operator) and implement ``abstract_eval``,
    ``reference``, ``ffi_attributes`` and ``batch``; ``factors``,
    ``local_call``, ``linear_operand``, ``self_adjoint`` and
    ``transpose_reference`` when the element-wise defaults do not fit.
    """

    name: ClassVar[str]
    aclnn_name: ClassVar[str]
    multiple_results: ClassVar[bool] = False
    #: The incoming-gradient operand, in which the operator is linear.
    linear_operand: ClassVar[int] = 0
    #: Element-wise in the incoming gradient: with the result's shape, the
    #: operator is its own transpose.
    self_adjoint: ClassVar[bool] = True

    def __init__(self) -> None:
        self.target = "aclnn_" + self.name
        p = _compat.Primitive(self.name)
        p.multiple_results = self.multiple_results
        p.def_impl(lambda *args, **params: _compat.apply_primitive(p, *args, **params))
        p.def_abstract_eval(self._abstract_eval)
        _compat.register_lowering(p, self._lower)
        _compat.primitive_batchers[p] = self.batch
        _compat.require_devices_during_lowering(p)
        self.primitive = p
        self.transposed = _autodiff.register(self)

    # --- to implement -----------------------------------------------------
    def abstract_eval(self, *avals: ShapedArray, **params: Any) -> Any:
        raise NotImplementedError

    def reference(self, *args: Any, **params: Any) -> Any:
        """The pure-JAX definition (same arguments and results as the primitive)."""
        raise NotImplementedError

    def ffi_attributes(self, **params: Any) -> dict[str, Any]:
        """The custom call's attributes (numpy scalars of the handler's types)."""
        raise NotImplementedError

    def batch(self, args: Sequence[Any], dims: Sequence[Any], **params: Any) -> Any:
        raise NotImplementedError

    def factors(self, in_avals: Sequence[Any], out_avals: Sequence[Any],
                **params: Any) -> tuple[list[_sharding.Factors], list[_sharding.Factors]]:
        """Sharding factors of the operands and results (see :mod:`jax_aclnn._sharding`).

        Default, for element-wise operators with numpy broadcasting: a factor
        per dimension of the (single) result; operand dimensions that
        broadcast get none.
        """
        shape = out_avals[0].shape
        names = [f"d{i}" for i in range(len(shape))]

        def operand(a: Any) -> _sharding.Factors:
            offset = len(shape) - a.ndim
            return tuple(names[offset + i] if n == shape[offset + i] else None
                         for i, n in enumerate(a.shape))

        return [operand(a) for a in in_avals], [tuple(names)]

    def local_call(self, args: Sequence[Any], global_avals: Sequence[Any], **params: Any) -> list[Any]:
        """The custom call on one device's blocks ``args`` of operands whose
        global avals are ``global_avals``. Default: the call as it is."""
        return self.ffi_call(*args, **params)

    def transpose_reference(self, cts: Sequence[Any], others: Sequence[Any],
                            shape: tuple[int, ...], dtype: Any, **params: Any) -> Any:
        """The transpose in the incoming gradient: the cotangent of that operand
        (of ``shape`` and ``dtype``) from the results' cotangents ``cts``, the
        other operands being ``others``. Default, for a self-adjoint
        element-wise operator: the operator on the cotangent, summed over the
        axes the incoming gradient was broadcast along."""
        out = self.bind(*self.with_linear(cts[0], others), **params)
        return _autodiff.sum_to_shape(out, shape).astype(dtype)

    # --- shared -------------------------------------------------------------
    def with_linear(self, g: Any, others: Sequence[Any]) -> list[Any]:
        """The operands in order, from the incoming gradient and the others."""
        others = list(others)
        return others[: self.linear_operand] + [g] + others[self.linear_operand :]

    def transpose(self, cts: Sequence[Any], others: Sequence[Any], linear_aval: Any,
                  **params: Any) -> Any:
        """The operator transposed in its incoming gradient (of type
        ``linear_aval``), applied to its results' cotangents ``cts``: a linear
        map whose own transpose is the operator (see :mod:`jax_aclnn._autodiff`)."""
        return self.transposed.bind(cts, others, linear_aval, **params)

    def bind(self, *args: Any, **params: Any) -> Any:
        if reference_forced(self.name):
            return self.reference(*args, **params)
        return self.primitive.bind(*_compat.match_varying_axes(args), **params)

    def _abstract_eval(self, *avals: ShapedArray, **params: Any) -> Any:
        out = self.abstract_eval(*avals, **params)
        if self.multiple_results:
            return [_compat.with_varying_axes(o, avals) for o in out]
        return _compat.with_varying_axes(out, avals)

    def ffi_call(self, *args: Any, **params: Any) -> list[Any]:
        """The typed-FFI custom call of this operator (a list of results)."""
        out = self.abstract_eval(*args, **params)
        out = list(out) if self.multiple_results else [out]
        call = jax.ffi.ffi_call(self.target, [jax.ShapeDtypeStruct(o.shape, o.dtype) for o in out])
        return list(call(*args, **self.ffi_attributes(**params)))

    def _lower_ffi(self, ctx: Any, *args: Any, **params: Any) -> Any:
        if _compat.spmd_partitioned(ctx):
            fn = _sharding.partitioned(self, ctx.avals_in, ctx.avals_out, params)
        else:
            fn = lambda *a: self.ffi_call(*a, **params)  # noqa: E731
        return _compat.lower_fun(fn, multiple_results=True)(ctx, *args)

    def _lower(self, ctx: Any, *args: Any, **params: Any) -> Any:
        _ffi.ensure_npu_registered()
        rules = {platform: self._lower_ffi for platform in _ffi.handler_platforms()}
        reference = _compat.lower_fun(self.reference, multiple_results=self.multiple_results)
        return _compat.lower_per_platform(ctx, self.name, rules, reference, set(), *args, **params)


# --- batching helpers shared by the element-wise operators ---------------


def batch_size(args: Sequence[Any], dims: Sequence[Any]) -> int:
    return next(a.shape[d] for a, d in zip(args, dims) if d is not _compat.not_mapped)


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
