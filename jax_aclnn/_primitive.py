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
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from jax.core import ShapedArray

from jax_aclnn import _autodiff, _checks, _compat, _ffi, _sharding

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
    ``aclnn_name`` (the aclnn operator), ``operand_names`` (the public
    argument names of the operands, for error messages) and implement
    ``abstract_eval``, ``reference``, ``ffi_attributes`` and ``batch``;
    ``factors``, ``local_call``, ``linear_operand``, ``self_adjoint`` and
    ``transpose_reference`` when the element-wise defaults do not fit.
    """

    name: ClassVar[str]
    aclnn_name: ClassVar[str]
    operand_names: ClassVar[tuple[str, ...]]
    multiple_results: ClassVar[bool] = False
    #: Operand dtypes CANN's operator refuses: on the NPU platform such
    #: operands are cast to float32 before the call, results cast back.
    npu_float32_dtypes: ClassVar[tuple[Any, ...]] = ()
    #: The incoming-gradient operand, in which the operator is linear.
    linear_operand: ClassVar[int] = 0
    #: Element-wise in the incoming gradient: with the result's shape, the
    #: operator is its own transpose.
    self_adjoint: ClassVar[bool] = True
    #: Whether the result may take the incoming gradient's buffer (XLA's
    #: ``input_output_aliases``) where that operand has the result's shape
    #: and dtype, so that a training step's backward needs no fresh buffer
    #: for it. Only on the CPU: the host provider's element-wise kernels
    #: read each chunk of their inputs before writing that chunk of the
    #: output (csrc/host/kernels.cc). Never on the NPU platform: CANN does not
    #: document that its operators tolerate ``out == in``, and we cannot
    #: verify it there.
    alias_gradient: ClassVar[bool] = False

    def __init__(self) -> None:
        self.target = "aclnn_" + self.name
        p = _compat.Primitive(self.name)
        p.multiple_results = self.multiple_results
        p.def_impl(lambda *args, **params: _compat.apply_primitive(p, *args, **params))
        p.def_abstract_eval(self._abstract_eval)
        # Per use: whether to alias depends on where the incoming gradient
        # comes from (see _lower_ffi).
        _compat.register_lowering_per_use(p, self._lower)
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
        if max(jnp.ndim(a) for a in args) > _checks.MAX_RANK:
            return self.bind_merged(args, **params)
        return self.primitive.bind(*_compat.match_varying_axes(args), **params)

    def bind_merged(self, operands: Sequence[Any], **params: Any) -> Any:
        """Binds the operator to operands past aclnn's rank limit (of any
        rank, or taken past it by vmap's batch axis): the call runs on the
        operands with their dimensions merged (:func:`merged_shapes`; a
        dimension sharded by an operand's type stays whole) and the result
        gets its shape back. Default, for an element-wise operator with one
        result of the operands' broadcast shape."""
        shape = tuple(jnp.broadcast_shapes(*(a.shape for a in operands)))
        sharded = frozenset().union(*(
            {i + len(shape) - jnp.ndim(a) for i in _compat.sharded_dims(a)} for a in operands))
        shapes = merged_shapes(self.name, self.operand_names, [a.shape for a in operands],
                               sharded)
        merged = [jnp.reshape(a, s) for a, s in zip(operands, shapes)]
        return jnp.reshape(self.bind(*merged, **params), shape)

    def _abstract_eval(self, *avals: ShapedArray, **params: Any) -> Any:
        out = self.abstract_eval(*avals, **params)
        typed = _sharding.typed(self, list(out) if self.multiple_results else [out], avals,
                                **params)
        return typed if self.multiple_results else typed[0]

    def ffi_call(self, *args: Any, alias: bool = False, **params: Any) -> list[Any]:
        """The typed-FFI custom call of this operator (a list of results);
        with ``alias``, its result takes the incoming gradient's buffer where
        ``alias_gradient`` allows it (XLA copies that operand first if it is
        still needed)."""
        out = self.abstract_eval(*args, **params)
        out = list(out) if self.multiple_results else [out]
        aliases = {}
        if alias and self.alias_gradient:
            g = args[self.linear_operand]
            if (g.shape, g.dtype) == (out[0].shape, out[0].dtype):
                aliases = {self.linear_operand: 0}
        call = jax.ffi.ffi_call(self.target, [jax.ShapeDtypeStruct(o.shape, o.dtype) for o in out],
                                input_output_aliases=aliases)
        return list(call(*args, **self.ffi_attributes(**params)))

    def _lower_ffi(self, ctx: Any, *args: Any, platform: str, **params: Any) -> Any:
        if _compat.spmd_partitioned(ctx):
            call = _sharding.partitioned(self, ctx.avals_in, ctx.avals_out, params)
        else:
            # Aliasing on the CPU only (see alias_gradient), and not where the
            # gradient is a function argument: a jit parameter would need a copy.
            alias = platform == "cpu" and not _compat.is_function_argument(
                args[self.linear_operand])
            call = lambda *a: self.ffi_call(*a, alias=alias, **params)  # noqa: E731

        def fn(*a: Any) -> list[Any]:
            if platform != "cpu":  # CANN: dtypes it refuses are computed in float32
                a = tuple(v.astype(jnp.float32) if v.dtype in self.npu_float32_dtypes else v
                          for v in a)
            return [o.astype(aval.dtype) for o, aval in zip(call(*a), ctx.avals_out)]

        return _compat.lower_fun(fn, multiple_results=True)(ctx, *args)

    def _lower(self, ctx: Any, *args: Any, **params: Any) -> Any:
        _ffi.ensure_npu_registered()
        rules = {platform: partial(self._lower_ffi, platform=platform)
                 for platform in _ffi.handler_platforms()}
        reference = _compat.lower_fun(self.reference, multiple_results=self.multiple_results)
        return _compat.lower_per_platform(ctx, self.name, rules, reference, set(), *args, **params)


# --- batching helpers shared by the element-wise operators ---------------


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
