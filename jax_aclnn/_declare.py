"""Any aclnn operator from its CANN prototype: :func:`declare`.

A declared operator is an :class:`~jax_aclnn._primitive.AclnnPrimitive`
like the built-in ones: one custom call (``aclnn_<name>``) served by the
handler that serves every operator, carrying the argument list its
prototype gives (:mod:`jax_aclnn._arguments`). What the built-in operators
write by hand comes from the reference here: the outputs' shapes and dtypes
(``jax.eval_shape``), the derivative (the reference's JVP), the lowering
where no provider has the operator.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.core import ShapedArray

from jax_aclnn import _arguments, _batching, _compat, _prototype, _registration
from jax_aclnn._loading import _aclnn_ffi
from jax_aclnn._primitive import OPERATORS, AclnnPrimitive


def _snake_case(aclnn_name: str) -> str:
    """``aclnnSoftplusBackward`` -> ``softplus_backward``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_",
                  aclnn_name[len("aclnn"):]).lower()


class DeclaredOperator(AclnnPrimitive):
    """An operator made by :func:`declare`. Its primitive's operands are the
    input tensors (a tensor list's tensors in a row, an absent optional
    tensor as a zero-sized placeholder); its parameters the non-tensor
    arguments by prototype name, ``absent`` (the absent inputs' names) and
    ``list_sizes`` (the tensor lists' lengths, inputs then outputs)."""

    multiple_results = True
    self_adjoint = False

    def __init__(self, prototype: _prototype.Prototype, reference: Callable[..., Any], *,
                 name: str, library: str, elementwise: bool) -> None:
        self.name = name
        self.aclnn_name = prototype.name
        self.operand_names = tuple(p.name for p in prototype.inputs)
        self.library = library
        self.elementwise = elementwise
        self.user_reference = reference
        super().__init__(prototype)
        # Derivatives: the reference's (an attached VJP replaces them, see declare).
        _compat.primitive_jvps[self.primitive] = self._jvp
        _compat.primitive_transposes.pop(self.primitive, None)
        _aclnn_ffi.add_operator(self.aclnn_name)

    # --- the reference, with the primitive's operands and parameters ---------
    def _reference_arguments(self, operands: Sequence[Any], params: dict[str, Any]):
        absent, sizes = params["absent"], iter(params["list_sizes"])
        it = iter(operands)
        inputs = []
        for p in self.prototype.inputs:
            if p.kind == "tensor_list":
                inputs.append([next(it) for _ in range(next(sizes))])
            else:
                operand = next(it)
                inputs.append(None if p.name in absent else operand)
        attrs = {p.name: params[p.name] for p in self.prototype.attributes}
        return inputs, attrs

    def reference(self, *operands: Any, **params: Any) -> list[Any]:
        inputs, attrs = self._reference_arguments(operands, params)
        out = self.user_reference(*inputs, **attrs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        declared = self.prototype.outputs
        if len(outs) != len(declared):
            raise ValueError(
                f"declare({self.aclnn_name}): the reference returns {len(outs)} outputs, the "
                f"prototype has {len(declared)} output tensors "
                f"({', '.join(p.name for p in declared)})")
        flat = []
        for p, o in zip(declared, outs):
            flat.extend(o if p.kind == "tensor_list" else [o])
        return flat

    def abstract_eval(self, *avals: Any, **params: Any) -> list[Any]:
        shapes = jax.eval_shape(functools.partial(self.reference, **params),
                                *(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals))
        return [ShapedArray(s.shape, s.dtype) for s in shapes]

    def arguments(self, **params: Any) -> dict[str, Any]:
        sizes = iter(params["list_sizes"])
        values: dict[str, Any] = {p.name: params[p.name] for p in self.prototype.attributes}
        values.update({name: _arguments.ABSENT for name in params["absent"]})
        for p in self.prototype.parameters:  # inputs, then outputs: the order of list_sizes
            if p.kind == "tensor_list" and not p.output:
                values[p.name] = next(sizes)
        for p in self.prototype.outputs:
            if p.kind == "tensor_list":
                values[p.name] = next(sizes)
        return values

    def ffi_platforms(self) -> tuple[str, ...]:
        # On the CPU only where the host provider (or the library) has it.
        cpu = _aclnn_ffi.provides(self.aclnn_name, self.library)
        return tuple(p for p in _registration.handler_platforms() if cpu or p != "cpu")

    # --- transformations -------------------------------------------------------
    def _jvp(self, primals: Sequence[Any], tangents: Sequence[Any], **params: Any):
        out = self.primitive.bind(*primals, **params)
        tangents = [_compat.instantiate_zeros(t) for t in tangents]
        _, t_out = jax.jvp(functools.partial(self.reference, **params), tuple(primals),
                           tuple(tangents))
        return out, list(t_out)

    def batch(self, args: Sequence[Any], dims: Sequence[Any], **params: Any):
        size = _batching.batch_size(args, dims)
        if self.elementwise:  # one call on operands broadcast to (batch, *result shape)
            rank = max(jnp.ndim(a) - (d is not _compat.not_mapped) for a, d in zip(args, dims))
            moved = [a if d is _compat.not_mapped else
                     jnp.reshape(jnp.moveaxis(a, d, 0),
                                 (size,) + (1,) * (rank + 1 - jnp.ndim(a)) + a.shape[:d] + a.shape[d + 1:])
                     for a, d in zip(args, dims)]
            shape = jnp.broadcast_shapes(*(jnp.shape(a) for a in moved))
            shape = (size,) + shape[len(shape) - rank:]
            # CANN's element-wise operators may take same-shape operands only
            moved = [jnp.broadcast_to(a, shape) for a in moved]
            return self.bind(*moved, **params), [0] * len(self.prototype.outputs)
        # any other operator: one call per example (jax.lax.map), never merged
        mapped = [i for i, d in enumerate(dims) if d is not _compat.not_mapped]

        def one(xs):
            full = list(args)
            for i, x in zip(mapped, xs):
                full[i] = x
            return self.bind(*full, **params)

        xs = [jnp.moveaxis(args[i], dims[i], 0) for i in mapped]
        return jax.lax.map(one, xs), [0] * len(self.prototype.outputs)

    def factors(self, in_avals, out_avals, **params):
        if self.elementwise:  # a factor per dimension of the broadcast result
            ins, (out,) = super().factors(in_avals, out_avals[:1], **params)
            return ins, [out] * len(out_avals)
        # any other operator: replicated (its dimensions' meaning is not declared)
        return ([(None,) * a.ndim for a in in_avals], [(None,) * a.ndim for a in out_avals])

    def bind_merged(self, operands, **params):
        if self.elementwise and len(self.prototype.outputs) == 1:
            return [super().bind_merged(operands, **params)[0]]
        raise ValueError(f"{self.name}: operands of rank above aclnn's 8 "
                         f"({[jnp.shape(a) for a in operands]})")


def declare(prototype: str, reference: Callable[..., Any], *, outputs: Iterable[str] = (),
            name: str | None = None, library: str | os.PathLike[str] | None = None,
            elementwise: bool = False, vjp: Callable[..., Any] | None = None
            ) -> Callable[..., Any]:
    """An aclnn operator from its CANN prototype, as a JAX function.

    ``prototype`` is the operator's first phase as CANN's documentation
    prints it, e.g.::

        softplus_backward = aclnn.declare(
            "aclnnStatus aclnnSoftplusBackwardGetWorkspaceSize(const aclTensor *gradOutput, "
            "const aclTensor *self, const aclScalar *beta, const aclScalar *threshold, "
            "aclTensor *gradInput, uint64_t *workspaceSize, aclOpExecutor **executor)",
            reference, elementwise=True)

    and ``reference`` the operator in pure JAX: the input tensors
    positionally in prototype order (a tensor list as a sequence; None for
    an optional tensor not given), every other parameter as a keyword named
    as in the prototype; it returns the output tensors in prototype order
    (one array, or a tuple). The returned function has the reference's
    signature and runs one aclnn custom call wherever a provider has the
    operator: CANN on the NPU, on the CPU the host provider or ``library``;
    elsewhere (or on a CPU without it) the reference.

    Parameter kinds: ``const aclTensor*`` (input; None passes a null
    pointer), ``aclTensor*`` (output), ``const aclTensorList*`` /
    ``aclTensorList*``, ``const aclScalar*`` (a Python float is an ACL_FLOAT
    scalar, an int ACL_INT64, a NumPy scalar its own dtype; None passes a
    null pointer), ``bool``, ``int8_t``, ``int32_t``, ``int64_t``,
    ``double``, ``float``, ``const aclIntArray*``, ``const aclBoolArray*``,
    ``const aclFloatArray*`` (sequences) and ``const char*``. Non-tensor
    arguments are static: a traced value is refused by JAX.

    Transformations: ``jit``; ``grad``/``jvp`` through the reference's
    derivative, or ``vjp`` when given; ``vmap`` in one call when
    ``elementwise`` (else one call per example, ``jax.lax.map``); sharding
    along every dimension when ``elementwise`` (the outputs have the
    operands' broadcast shape), else the operands are replicated (the
    dimensions' meaning is not declared); ``jax.export`` for
    ``["cpu", "npu"]`` (the importing process declares the same operator).

    Args:
      prototype: the first-phase prototype (``aclnnStatus`` and a final
        ``;`` may be left out).
      reference: the operator in pure JAX, as above.
      outputs: tensors that CANN's page prints as ``const aclTensor*`` but
        the operator writes (aclnnLogitGrad's ``out``).
      name: the operator's name (its custom-call target is
        ``aclnn_<name>``, ``reference_path`` takes it); default the aclnn
        name in snake case (``softplus_backward``).
      library: the absolute path of a library exporting the operator's two
        phases (and, if it is a provider of its own, the descriptor
        functions; those it lacks come from the platform's provider).
      elementwise: the outputs have the inputs' broadcast shape and each
        element depends on the same element of the inputs only.
      vjp: ``vjp(inputs, outputs, cotangents, **arguments)``, the input
        tensors' cotangents (a tuple, None for an input without one) from
        the inputs, the outputs and their cotangents (single arrays for a
        single output), e.g. a declared backward operator's call.

    Returns:
      The operator as a function with the reference's signature.

    Raises:
      ValueError: the prototype does not parse (naming the token), the
        reference's parameters are not the prototype's (its inputs
        positionally, the others by name), ``name`` is taken, or (when
        first traced) the reference's outputs are not the prototype's.
      TypeError: ``reference`` or ``vjp`` is not callable.
    """
    if not callable(reference):
        raise TypeError(f"declare: reference must be callable, got {type(reference).__name__}")
    if vjp is not None and not callable(vjp):
        raise TypeError(f"declare: vjp must be callable, got {type(vjp).__name__}")
    proto = _prototype.parse(prototype, outputs)
    name = name or _snake_case(proto.name)
    if name in OPERATORS:
        raise ValueError(f"declare: an operator named {name!r} exists already; pass name=")
    lib = "" if library is None else os.fspath(library)
    if lib and not os.path.isabs(lib):
        raise ValueError(f"declare: library must be an absolute path, got {lib!r}")
    signature = inspect.signature(reference)
    _check_signature(proto, signature)
    op = DeclaredOperator(proto, reference, name=name, library=lib, elementwise=elementwise)

    def apply(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = list(bound.args)
        inputs = values[: len(proto.inputs)]
        given = {**bound.kwargs, **bound.arguments}
        missing = [p.name for p in proto.attributes if p.name not in given]
        if missing:
            raise TypeError(f"{name}: missing argument(s) {', '.join(missing)}")
        attrs = {p.name: _static(given[p.name]) for p in proto.attributes}
        single = len(proto.outputs) == 1
        if vjp is None:
            out = _call(op, proto, inputs, attrs)
            return out[0] if single else tuple(out)

        @jax.custom_vjp
        def f(*xs):
            out = _call(op, proto, list(xs), attrs)
            return out[0] if single else tuple(out)

        def fwd(*xs):
            out = f(*xs)
            return out, (xs, out)

        def bwd(res, ct):
            xs, out = res
            return tuple(vjp(xs, out, ct, **attrs))

        f.defvjp(fwd, bwd)
        return f(*inputs)

    functools.update_wrapper(apply, reference)
    apply.__signature__ = signature  # type: ignore[attr-defined]
    apply.aclnn_operator = op  # type: ignore[attr-defined]
    return apply


def _static(value: Any) -> Any:
    """A hashable primitive parameter (sequences as tuples)."""
    return tuple(value) if isinstance(value, list) else value


def _call(op: DeclaredOperator, proto: _prototype.Prototype, inputs: list[Any],
          attrs: dict[str, Any]) -> list[Any]:
    operands, absent, sizes = [], [], []
    for p, x in zip(proto.inputs, inputs):
        if p.kind == "tensor_list":
            operands.extend(jnp.asarray(t) for t in x)
            sizes.append(len(x))
        elif x is None:
            absent.append(p.name)
            operands.append(jnp.zeros((0,), jnp.float32))
        else:
            operands.append(jnp.asarray(x))
    # output lists' sizes: from the reference's result
    out_lists = [p for p in proto.outputs if p.kind == "tensor_list"]
    if out_lists:
        shapes = jax.eval_shape(lambda *a: op.user_reference(*a, **attrs), *inputs)
        shapes = shapes if isinstance(shapes, (tuple, list)) else [shapes]
        sizes.extend(len(s) for p, s in zip(proto.outputs, shapes) if p.kind == "tensor_list")
    return op.bind(*operands, absent=tuple(absent), list_sizes=tuple(sizes), **attrs)


def _check_signature(proto: _prototype.Prototype, signature: inspect.Signature) -> None:
    params = list(signature.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    named = {p.name for p in params}
    var_positional = any(p.kind == p.VAR_POSITIONAL for p in params)
    var_keyword = any(p.kind == p.VAR_KEYWORD for p in params)
    problems = []
    if len(positional) < len(proto.inputs) and not var_positional:
        problems.append(f"takes {len(positional)} positional inputs, the prototype has "
                        f"{len(proto.inputs)} ({', '.join(p.name for p in proto.inputs)})")
    missing = [] if var_keyword else [p.name for p in proto.attributes if p.name not in named]
    if missing:
        problems.append(f"has no parameter for {', '.join(missing)}")
    if problems:
        raise ValueError(f"declare({proto.name}): the reference {'; '.join(problems)}")


__all__ = ["DeclaredOperator", "declare"]
