"""The machinery every operator shares: one class per aclnn operator holds
all JAX needs to know about it (abstract evaluation, the pure-JAX reference,
the custom-call lowering, the batching rule, the sharding factors, the
transpose in its incoming gradient); this base class registers them, and
:mod:`jax_aclnn._autodiff` derives its JVP and transpose rules.

Lowering: on the platforms with a jax_aclnn FFI handler (``"cpu"`` and the
NPU platform) the primitive becomes one XLA typed-FFI custom call; on every
other platform it lowers to its pure-JAX reference, so user code runs
anywhere. ``JAX_ACLNN_REFERENCE`` and :func:`reference_path` force the
reference path (:mod:`jax_aclnn._switches`). When XLA partitions the program over
several devices, the custom call is wrapped in ``custom_partitioning`` with
the rules of :mod:`jax_aclnn._sharding`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from jax.core import ShapedArray

from jax_aclnn import (
    _arguments,
    _autodiff,
    _batching,
    _checks,
    _compat,
    _dims,
    _prototype,
    _registration,
    _sharding,
    _switches,
)
from jax_aclnn._loading import _aclnn_ffi


#: The operators by name (``AclnnPrimitive.name``), in the order their
#: modules define them; each operator adds itself when it is created.
OPERATORS: dict[str, AclnnPrimitive] = {}


class AclnnPrimitive:
    """Base class: one subclass per aclnn operator.

    Subclasses set ``name`` (the JAX primitive and public function name),
    ``aclnn_name`` (the aclnn operator) and ``operand_names`` (the public
    argument names of the operands, for error messages), and implement
    ``abstract_eval``, ``reference`` and ``batch``; ``arguments``,
    ``factors``, ``local_call``, ``linear_operand``, ``self_adjoint`` and
    ``transpose_reference`` when the defaults do not fit. The operator's
    first-phase prototype (``prototype``, by default the compiled operator
    list's) says how the custom call carries its arguments.
    """

    name: ClassVar[str]
    aclnn_name: ClassVar[str]
    operand_names: ClassVar[tuple[str, ...]]
    #: Tensor parameters that the prototype prints as ``const aclTensor*``
    #: but that the operator writes (see :func:`jax_aclnn._prototype.parse`).
    outputs: ClassVar[tuple[str, ...]] = ()
    #: "" or the absolute path of a library that exports the operator.
    library: str = ""
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

    def __init__(self, prototype: _prototype.Prototype | None = None) -> None:
        self.target = "aclnn_" + self.name
        #: The parsed first phase: the order and kinds of the custom call's arguments.
        self.prototype = prototype or _prototype.parse(
            _aclnn_ffi.operator_prototypes()[self.name], self.outputs)
        _registration.register_target(self.target)
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
        OPERATORS[self.name] = self

    # --- to implement -----------------------------------------------------
    def abstract_eval(self, *avals: ShapedArray, **params: Any) -> Any:
        raise NotImplementedError

    def reference(self, *args: Any, **params: Any) -> Any:
        """The pure-JAX definition (same arguments and results as the primitive)."""
        raise NotImplementedError

    def arguments(self, **params: Any) -> dict[str, Any]:
        """The first phase's non-tensor arguments from the primitive's
        parameters, by the prototype's parameter names (a tensor parameter
        mapped to None is absent: its operand or result is a placeholder).
        Default: the parameters of the same names."""
        return {p.name: params[p.name] for p in self.prototype.attributes}

    def batch(self, args: Sequence[Any], dims: Sequence[Any], **params: Any) -> Any:
        raise NotImplementedError

    def dims(self, in_avals: Sequence[Any], out_avals: Sequence[Any], **params: Any) -> str:
        """The dimension rule of the operands and results of these avals
        (:mod:`jax_aclnn._dims`'s notation). Default, for element-wise
        operators with numpy broadcasting: a factor per dimension of the
        (first) result, every result of its shape; an operand dimension that
        broadcasts is a ``1``."""
        return _dims.elementwise([a.shape for a in in_avals], out_avals[0].shape,
                                 len(out_avals))

    def output_aliases(self, **params: Any) -> dict[int, int]:
        """{operand: result}: results that take an operand's buffer because
        the operator updates it in place. Default: none."""
        return {}

    def cpu_alias_operand(self) -> int | None:
        """The operand whose buffer the (first) result may take on the CPU
        where it has the result's shape and dtype (XLA's
        ``input_output_aliases``; XLA copies the operand first if it is still
        needed), or None: the incoming gradient where ``alias_gradient``
        allows it. Never on the NPU platform (see ``alias_gradient``)."""
        return self.linear_operand if self.alias_gradient else None

    def placeholders(self, **params: Any) -> tuple[frozenset[int], frozenset[int]]:
        """The operands and results that are zero-sized placeholders (absent
        tensors): they are never sharded. Default: none."""
        return frozenset(), frozenset()

    def factors(self, in_avals: Sequence[Any], out_avals: Sequence[Any],
                **params: Any) -> tuple[list[_sharding.Factors], list[_sharding.Factors]]:
        """Sharding factors of the operands and results (see
        :mod:`jax_aclnn._sharding`), from :meth:`dims`."""
        rule = _dims.parse(self.dims(in_avals, out_avals, **params), len(in_avals),
                           len(out_avals), where=self.name)
        ins, outs = self.placeholders(**params)
        return rule.factors([[None if i in ins else a] for i, a in enumerate(in_avals)],
                            [[None if i in outs else o] for i, o in enumerate(out_avals)],
                            where=self.name)

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
    def ffi_attributes(self, **params: Any) -> dict[str, Any]:
        """The custom call's attributes: the operator and its argument list
        (:func:`jax_aclnn._arguments.encode` of :meth:`arguments`)."""
        return _arguments.encode(self.prototype, self.arguments(**params), self.library)

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

    def reference_forced(self) -> bool:
        """Whether this operator runs its pure-JAX reference where it is
        traced now (:func:`reference_path`, ``$JAX_ACLNN_REFERENCE``)."""
        return _switches.reference_forced(self.name, OPERATORS)

    def bind(self, *args: Any, **params: Any) -> Any:
        if self.reference_forced():
            return self.reference(*args, **params)
        if max(jnp.ndim(a) for a in args) > _checks.MAX_RANK:
            return self.bind_merged(args, **params)
        return self.primitive.bind(*_compat.match_varying_axes(args), **params)

    def bind_merged(self, operands: Sequence[Any], **params: Any) -> Any:
        """Binds the operator to operands past aclnn's rank limit (of any
        rank, or taken past it by vmap's batch axis): see
        :func:`jax_aclnn._batching.bind_merged`. Default, for an element-wise
        operator whose results have the operands' broadcast shape."""
        return _batching.bind_merged(self.name, self.operand_names,
                                     lambda *merged: self.bind(*merged, **params), operands)

    def _abstract_eval(self, *avals: ShapedArray, **params: Any) -> Any:
        out = self.abstract_eval(*avals, **params)
        typed = _sharding.typed(self, list(out) if self.multiple_results else [out], avals,
                                **params)
        return typed if self.multiple_results else typed[0]

    def ffi_call(self, *args: Any, alias: bool = False, **params: Any) -> list[Any]:
        """The typed-FFI custom call of this operator (a list of results);
        with ``alias``, its result takes the buffer of
        :meth:`cpu_alias_operand` where it has the result's shape and dtype
        (XLA copies that operand first if it is still needed)."""
        out = self.abstract_eval(*args, **params)
        out = list(out) if self.multiple_results else [out]
        aliases = self.output_aliases(**params)
        operand = self.cpu_alias_operand() if alias else None
        if operand is not None:
            a = args[operand]
            if (a.shape, a.dtype) == (out[0].shape, out[0].dtype):
                aliases = {operand: 0}
        call = jax.ffi.ffi_call(self.target, [jax.ShapeDtypeStruct(o.shape, o.dtype) for o in out],
                                input_output_aliases=aliases)
        return list(call(*args, **self.ffi_attributes(**params)))

    def _lower_ffi(self, ctx: Any, *args: Any, platform: str, **params: Any) -> Any:
        if _compat.spmd_partitioned(ctx) and not _compat.for_export(ctx):
            call = _sharding.partitioned(self, ctx.avals_in, ctx.avals_out, params)
        else:
            # Aliasing on the CPU only (see alias_gradient), and not where the
            # operand is a function argument: a jit parameter would need a copy.
            operand = self.cpu_alias_operand()
            alias = (platform == "cpu" and operand is not None
                     and not _compat.is_function_argument(args[operand]))
            call = lambda *a: self.ffi_call(*a, alias=alias, **params)  # noqa: E731

        def fn(*a: Any) -> list[Any]:
            if platform != "cpu":  # CANN: dtypes it refuses are computed in float32
                a = tuple(v.astype(jnp.float32) if v.dtype in self.npu_float32_dtypes else v
                          for v in a)
            return [o.astype(aval.dtype) for o, aval in zip(call(*a), ctx.avals_out)]

        return _compat.lower_fun(fn, multiple_results=True)(ctx, *args)

    def ffi_platforms(self) -> tuple[str, ...]:
        """The platforms on which this operator lowers to its custom call
        (elsewhere: its reference)."""
        return _registration.handler_platforms()

    def _lower(self, ctx: Any, *args: Any, **params: Any) -> Any:
        _registration.ensure_npu_registered()
        rules = {platform: partial(self._lower_ffi, platform=platform)
                 for platform in self.ffi_platforms()}
        reference = _compat.lower_fun(self.reference, multiple_results=self.multiple_results)
        return _compat.lower_per_platform(ctx, self.name, rules, reference, set(), *args, **params)


@contextmanager
def reference_path(ops: str | Iterable[str] = "all") -> Iterator[None]:
    """Within the block, jax_aclnn operators traced run their pure-JAX
    reference instead of the aclnn custom call (on every platform), as
    ``JAX_ACLNN_REFERENCE`` does for the whole process; for debugging and
    comparison::

        with aclnn.reference_path():
            compiled = jax.jit(jax.grad(loss)).lower(params, x, y).compile()

    The setting is part of what JAX keys its trace and compilation caches
    on, as JAX's own configuration contexts are: a ``jax.jit`` function
    called (or lowered) inside the block is traced anew with the reference,
    and again with the aclnn custom calls outside it. It belongs to the
    current thread.

    Args:
      ops: ``"all"``, or operator names (e.g. ``["swish_backward",
        "logit_grad"]``; differentiable operators use the aclnn operator of
        their derivative).

    Returns:
      A context manager, for a ``with`` statement.

    Raises:
      TypeError: ``ops`` is neither a string nor an iterable of strings.
      ValueError: a name is not one of jax_aclnn's aclnn operators.
    """
    names = [ops] if isinstance(ops, str) else ops
    try:
        names = frozenset(names)
    except TypeError:
        raise TypeError(f"reference_path: ops must be 'all' or operator names, got {ops!r}") from None
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"reference_path: ops must be 'all' or operator names, got {ops!r}")
    _switches.check_names(names, OPERATORS, "reference_path")
    with _switches.forced_in_context(_switches.forced_in_context.value | names):
        yield
