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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.core import ShapedArray

from jax_aclnn import _arguments, _batching, _checks, _compat, _dims, _prototype, _registration
from jax_aclnn._loading import _aclnn_ffi
from jax_aclnn._primitive import OPERATORS, AclnnPrimitive


def _snake_case(aclnn_name: str) -> str:
    """``aclnnSoftplusBackward`` -> ``softplus_backward``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_",
                  aclnn_name[len("aclnn"):]).lower()


class DeclaredOperator(AclnnPrimitive):
    """An operator made by :func:`declare`. Its primitive's operands are the
    input tensors (a tensor list's tensors in a row, an absent optional
    tensor as a zero-sized placeholder) and its results the output tensors
    (a tensor list's in a row). Its parameters: ``attrs``, the non-tensor
    arguments as ``(name, value)`` pairs (:func:`jax_aclnn._arguments.static_value`;
    one parameter, so that no prototype name can collide with JAX's or this
    class's own), ``absent`` (the absent inputs' names) and ``list_sizes``
    (the tensor lists' lengths, inputs then outputs)."""

    multiple_results = True
    self_adjoint = False

    def __init__(self, prototype: _prototype.Prototype, reference: Callable[..., Any], *,
                 name: str, library: str, elementwise: bool, rule: _dims.Rule | None = None,
                 local_sizes: Mapping[str, str] | None = None) -> None:
        self.name = name
        #: The dimension rule (``dims=``), or None.
        self.rule = rule
        #: {attribute: factor}: attributes set to the factor's size in each call's operands.
        self.local_sizes = dict(local_sizes or {})
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
    def user_inputs(self, operands: Sequence[Any], absent: Sequence[str],
                    list_sizes: Sequence[int]) -> list[Any]:
        """The reference's inputs from the primitive's operands: a tensor
        list as a list, an absent tensor as None."""
        sizes, it = iter(list_sizes), iter(operands)
        inputs = []
        for p in self.prototype.inputs:
            if p.kind == "tensor_list":
                inputs.append([next(it) for _ in range(next(sizes))])
            else:
                operand = next(it)
                inputs.append(None if p.name in absent else operand)
        return inputs

    def reference(self, *operands: Any, attrs: tuple, absent: tuple, list_sizes: tuple
                  ) -> list[Any]:
        inputs = self.user_inputs(operands, absent, list_sizes)
        out = self.user_reference(*inputs, **reference_attributes(attrs))
        return [o for group in output_groups(self.prototype, out, absent) for o in group]

    def abstract_eval(self, *avals: Any, **params: Any) -> list[Any]:
        shapes = jax.eval_shape(functools.partial(self.reference, **params),
                                *(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals))
        return [ShapedArray(s.shape, s.dtype) for s in shapes]

    def arguments(self, *, attrs: tuple, absent: tuple, list_sizes: tuple) -> dict[str, Any]:
        values: dict[str, Any] = dict(attrs)
        values.update({name: _arguments.ABSENT for name in absent})
        sizes = iter(list_sizes)
        lists = [p for p in self.prototype.inputs + self.prototype.outputs
                 if p.kind == "tensor_list"]  # inputs, then outputs: the order of list_sizes
        values.update({p.name: next(sizes) for p in lists})
        return values

    def output_aliases(self, *, attrs: tuple, absent: tuple, list_sizes: tuple) -> dict[int, int]:
        """{operand: result} of the tensors updated in place (CANN's
        ``...Ref``): one buffer, XLA's ``input_output_aliases``."""
        def positions(params, sizes):
            at, out = 0, {}
            for p in params:
                out[p.name] = at
                at += next(sizes) if p.kind == "tensor_list" else 1
            return out

        sizes = iter(list_sizes)
        ins = positions(self.prototype.inputs, sizes)
        outs = positions(self.prototype.outputs, sizes)
        return {ins[p.name]: outs[p.name] for p in self.prototype.outputs
                if p.inplace and p.name not in absent}

    def ffi_platforms(self) -> tuple[str, ...]:
        # On the CPU only where the host provider (or the library) has it.
        cpu = _provided_on_cpu(self.aclnn_name, self.library)
        return tuple(p for p in _registration.handler_platforms() if cpu or p != "cpu")

    def absent_operands(self, absent: Sequence[str], list_sizes: Sequence[int]) -> set[int]:
        """The operand positions of the absent inputs' placeholders."""
        positions, at, sizes = set(), 0, iter(list_sizes)
        for p in self.prototype.inputs:
            if p.kind == "tensor_list":
                at += next(sizes)
                continue
            if p.name in absent:
                positions.add(at)
            at += 1
        return positions

    def operand_groups(self, list_sizes: Sequence[int]) -> list[int]:
        """Each operand's input tensor parameter (its index in the prototype's inputs)."""
        groups, sizes = [], iter(list_sizes)
        for i, p in enumerate(self.prototype.inputs):
            groups += [i] * (next(sizes) if p.kind == "tensor_list" else 1)
        return groups

    def _batch_in_one_call(self, args: Sequence[Any], dims: Sequence[Any], **params: Any) -> bool:
        """Whether the rule lets vmap run one call (see :meth:`Rule.batchable`)
        within aclnn's rank limit."""
        groups = self.operand_groups(params["list_sizes"])
        mapped = [groups[i] for i, d in enumerate(dims) if d is not _compat.not_mapped]
        if not self.rule.batchable(mapped):
            return False
        example = [jax.ShapeDtypeStruct(
            a.shape if d is _compat.not_mapped else a.shape[:d] + a.shape[d + 1:], a.dtype)
            for a, d in zip(args, dims)]
        ranks = [len(e.shape) + 1 for e in example] + [
            o.ndim + 1 for o in self.abstract_eval(*example, **params)]
        return max(ranks) <= _checks.MAX_RANK

    def _leading_factor(self, args: Sequence[Any], dims: Sequence[Any], **params: Any
                        ) -> str | None:
        """The named factor that leads every mapped operand's group and every
        output's (zero-sized outputs aside), into which vmap's dimension can
        merge (FlashAttentionScore's batch ``b``); None where there is none."""
        if self.rule is None:
            return None
        groups = self.operand_groups(params["list_sizes"])
        mapped = {groups[i] for i, d in enumerate(dims) if d is not _compat.not_mapped}
        leads = {self.rule.inputs[g][0] if self.rule.inputs[g] else None for g in mapped}
        example = [jax.ShapeDtypeStruct(
            a.shape if d is _compat.not_mapped else a.shape[:d] + a.shape[d + 1:], a.dtype)
            for a, d in zip(args, dims)]
        outs = self.abstract_eval(*example, **params)
        _, out_groups = self.arrays_by_parameter(example, outs, absent=params["absent"],
                                                 list_sizes=params["list_sizes"])
        leads |= {self.rule.outputs[i][0] if self.rule.outputs[i] else None
                  for i, arrays in enumerate(out_groups)
                  if any(a is not None and a.size for a in arrays)}
        if len(leads) != 1:
            return None
        (lead,) = leads
        ok = lead not in (None, "1", _dims.ELLIPSIS) and lead not in self.rule.replicated
        return lead if ok and lead not in self.local_sizes.values() else None

    def _batch_into_leading_factor(self, args, dims, factor, **params):
        """One call with vmap's dimension merged into ``factor``: mapped
        operands ``(batch, f, ...) -> (batch * f, ...)``, unmapped ones that
        lead with it broadcast first; outputs split back."""
        size = _batching.batch_size(args, dims)
        groups = self.operand_groups(params["list_sizes"])
        placeholders = self.absent_operands(params["absent"], params["list_sizes"])
        merged = []
        for i, (a, d) in enumerate(zip(args, dims)):
            leads = self.rule.inputs[groups[i]][:1] == (factor,) and i not in placeholders
            if d is _compat.not_mapped and not leads:
                merged.append(a)
                continue
            a = jnp.broadcast_to(a, (size,) + a.shape) if d is _compat.not_mapped else \
                jnp.moveaxis(a, d, 0)
            merged.append(a.reshape((size * a.shape[1],) + a.shape[2:]))
        out = self.bind(*merged, **params)
        return ([o.reshape((size, o.shape[0] // size) + o.shape[1:]) if o.size else
                 jnp.zeros((size,) + o.shape, o.dtype) for o in out], [0] * len(out))

    def operand_labels(self, list_sizes: Sequence[int]) -> list[str]:
        """The operands' names for messages (a tensor list's as ``name[i]``)."""
        labels, sizes = [], iter(list_sizes)
        for p in self.prototype.inputs:
            labels += ([f"{p.name}[{i}]" for i in range(next(sizes))]
                       if p.kind == "tensor_list" else [p.name])
        return labels

    # --- transformations -------------------------------------------------------
    def _jvp(self, primals: Sequence[Any], tangents: Sequence[Any], **params: Any):
        out = self.primitive.bind(*primals, **params)
        tangents = [_compat.instantiate_zeros(t) for t in tangents]
        _, t_out = jax.jvp(functools.partial(self.reference, **params), tuple(primals),
                           tuple(tangents))
        return out, list(t_out)

    def batch(self, args: Sequence[Any], dims: Sequence[Any], **params: Any):
        size = _batching.batch_size(args, dims)
        placeholders = self.absent_operands(params["absent"], params["list_sizes"])
        if self.elementwise:  # one call on operands broadcast to (batch, *result shape)
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
            out = self.bind(*moved, **params)
            return out, [0] * len(out)
        leading = self._leading_factor(args, dims, **params)
        if leading is not None:  # the mapped dimension merged into a leading factor
            return self._batch_into_leading_factor(args, dims, leading, **params)
        if self.rule is not None and self._batch_in_one_call(args, dims, **params):
            # the mapped dimension joins '...': moved in front, and the
            # unmapped operands that have '...' broadcast along it
            groups = self.operand_groups(params["list_sizes"])
            moved = [jnp.moveaxis(a, d, 0) if d is not _compat.not_mapped else
                     jnp.broadcast_to(a, (size,) + a.shape)
                     if self.rule.inputs[groups[i]][:1] == (_dims.ELLIPSIS,)
                     and i not in placeholders else a
                     for i, (a, d) in enumerate(zip(args, dims))]
            out = self.bind(*moved, **params)
            return out, [0] * len(out)
        # otherwise: one call per example (jax.lax.map), never merged
        mapped = [i for i, d in enumerate(dims) if d is not _compat.not_mapped]

        def one(xs):
            full = list(args)
            for i, x in zip(mapped, xs):
                full[i] = x
            return self.bind(*full, **params)

        # jax.lax.map scans the leading axis, which must not be sharded (explicit axes)
        xs = [_unsharded_leading(jnp.moveaxis(args[i], dims[i], 0)) for i in mapped]
        out = jax.lax.map(one, xs)
        return out, [0] * len(out)

    def arrays_by_parameter(self, in_avals: Sequence[Any], out_avals: Sequence[Any], *,
                            absent: Sequence[str], list_sizes: Sequence[int]):
        """The operands and results grouped by tensor parameter (a tensor
        list's several, an absent tensor's placeholder None), as
        :meth:`jax_aclnn._dims.Rule.factors` takes them."""
        sizes = iter(list_sizes)

        def group(params, avals):
            it, out = iter(avals), []
            for p in params:
                if p.kind == "tensor_list":
                    out.append([next(it) for _ in range(next(sizes))])
                else:
                    aval = next(it)
                    out.append([None if p.name in absent else aval])
            return out

        return group(self.prototype.inputs, in_avals), group(self.prototype.outputs, out_avals)

    def factors(self, in_avals, out_avals, **params):
        if self.rule is not None:
            return self.rule.factors(*self.arrays_by_parameter(
                in_avals, out_avals, absent=params["absent"], list_sizes=params["list_sizes"]),
                where=self.name)
        if self.elementwise:  # a factor per dimension of the broadcast result
            return super().factors(in_avals, out_avals, **params)
        # any other operator: replicated (its dimensions' meaning is not declared)
        return ([(None,) * a.ndim for a in in_avals], [(None,) * a.ndim for a in out_avals])

    def placeholders(self, *, attrs, absent, list_sizes):
        return frozenset(self.absent_operands(absent, list_sizes)), frozenset()

    def call_attributes(self, inputs: Sequence[Any], attrs: tuple) -> tuple:
        """``attrs`` with each attribute of :attr:`local_sizes` set to its
        factor's size in the reference's ``inputs`` (a shard's blocks under
        sharding, or inside ``shard_map``)."""
        if not self.local_sizes:
            return attrs
        groups = [[None] if x is None else list(x) if isinstance(x, (list, tuple)) else [x]
                  for x in inputs]
        values = {a: self.rule.size(f, groups) for a, f in self.local_sizes.items()}
        params = {p.name: p for p in self.prototype.attributes}
        return tuple((n, _arguments.static_value(self.name, params[n], values[n])
                      if n in values else v) for n, v in attrs)

    def local_call(self, args, global_avals, **params):
        inputs = self.user_inputs(args, params["absent"], params["list_sizes"])
        params = dict(params, attrs=self.call_attributes(inputs, params["attrs"]))
        return self.ffi_call(*args, **params)

    def bind(self, *args: Any, **params: Any) -> Any:
        if not args:  # an operator without input tensors (aclnnEye, aclnnArange)
            if self.reference_forced():
                return self.reference(**params)
            return self.primitive.bind(**params)
        return super().bind(*args, **params)

    def bind_merged(self, operands, **params):
        if not self.elementwise:
            raise ValueError(f"{self.name}: operands of rank above aclnn's 8 "
                             f"({[jnp.shape(a) for a in operands]})")
        # the absent inputs' placeholders stay as they are
        placeholders = self.absent_operands(params["absent"], params["list_sizes"])
        present = [i for i in range(len(operands)) if i not in placeholders]

        def call(*merged):
            full = list(operands)
            for i, m in zip(present, merged):
                full[i] = m
            return self.bind(*full, **params)

        labels = self.operand_labels(params["list_sizes"])
        return _batching.bind_merged(self.name, [labels[i] for i in present], call,
                                     [operands[i] for i in present])


def placeholder() -> jax.Array:
    """The operand (and, for an in-place tensor, the result) standing for an
    absent tensor: zero-sized, never read (the operator gets null)."""
    return jnp.zeros((0,), jnp.float32)


def _unsharded_leading(x: Any) -> Any:
    """``x`` with its leading axis unsharded (gathered where an explicit mesh
    axis shards it)."""
    spec = _compat.dim_specs(x)
    if spec[0] is None:
        return x
    return jax.sharding.reshard(x, jax.sharding.PartitionSpec(None, *spec[1:]))


def reference_attributes(attrs: tuple) -> dict[str, Any]:
    """The reference's keyword arguments from the primitive's ``attrs``."""
    return {name: _arguments.reference_value(v) for name, v in attrs}


def output_groups(proto: _prototype.Prototype, out: Any, absent: Sequence[str] = ()
                  ) -> list[list[Any]]:
    """The reference's result as one list per output parameter (a tensor's
    a list of one), checked against the prototype.

    The result is one array or tensor list for one output (or a 1-tuple of
    it), else a tuple or list with one entry per output, a tensor list's
    entry a sequence of arrays.

    Raises:
      ValueError: the result has another number of outputs, or a tensor
        where the prototype has a tensor list or the reverse.
    """
    seq = lambda o: isinstance(o, (tuple, list))  # noqa: E731
    if len(proto.outputs) == 1:
        nested = seq(out) and len(out) == 1 and (
            seq(out[0]) if proto.outputs[0].kind == "tensor_list" else True)
        groups = [out[0]] if nested else [out]
        if seq(out) and proto.outputs[0].kind == "tensor":
            groups = list(out)  # one array, or as many as the tuple has (checked below)
    else:
        groups = list(out) if seq(out) else [out]
    if len(groups) != len(proto.outputs):
        raise ValueError(
            f"declare({proto.name}): the reference returns {len(groups)} outputs, the "
            f"prototype has {len(proto.outputs)} output tensors "
            f"({', '.join(p.name for p in proto.outputs)})")
    result = []
    for p, g in zip(proto.outputs, groups):
        if p.name in absent:  # an absent in-place tensor: the reference returns None for it
            if g is not None:
                raise ValueError(f"declare({proto.name}): {p.name} is absent: the reference "
                                 f"returns None for it")
            result.append([placeholder()])
            continue
        if p.kind == "tensor_list" and not seq(g):
            raise ValueError(f"declare({proto.name}): output {p.name} is a tensor list: the "
                             f"reference returns a sequence of arrays for it, got "
                             f"{type(g).__name__}")
        if p.kind == "tensor" and seq(g):
            raise ValueError(f"declare({proto.name}): output {p.name} is one tensor: the "
                             f"reference returns an array for it, got a {type(g).__name__}")
        result.append(list(g) if p.kind == "tensor_list" else [g])
    return result


def _provided_on_cpu(aclnn_name: str, library: str) -> bool:
    """Whether the CPU's provider (or ``library``) has the operator. A
    library the user names must have it: its absence is an error, never a
    silent fall-back to the reference."""
    try:
        provided = _aclnn_ffi.provides(aclnn_name, library)
    except RuntimeError as e:
        raise RuntimeError(f"{aclnn_name}: {e}") from None
    if library:  # the library's own phases: an operators-only library falls back to nothing
        missing = _aclnn_ffi.library_lacks(aclnn_name, library)
        if missing:
            raise RuntimeError(f"{aclnn_name}: the operator library {library} does not export "
                               f"{' and '.join(missing)}")
    return provided


def declare(prototype: str, reference: Callable[..., Any], *, outputs: Iterable[str] = (),
            name: str | None = None, library: str | os.PathLike[str] | None = None,
            elementwise: bool = False, vjp: Callable[..., Any] | None = None,
            dims: str | None = None, replicated: Iterable[str] = (),
            local_sizes: Mapping[str, str] | None = None) -> Callable[..., Any]:
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
    as in the prototype (and no parameter the prototype lacks); it returns
    the output tensors in prototype order (one array or tensor list for one
    output, else a tuple; a tensor list as a list of arrays). The returned
    function has the reference's signature, and its result the reference's
    structure; it runs one aclnn custom call wherever a provider has the
    operator: CANN on the NPU, on the CPU the host provider or ``library``;
    elsewhere (or on a CPU without it) the reference.

    Parameter kinds and the values they take: ``const aclTensor*`` (input;
    None passes a null pointer), ``aclTensor*`` (output),
    ``const aclTensorList*`` / ``aclTensorList*``, ``const aclScalar*`` (a
    Python float is an ACL_FLOAT scalar, an int ACL_INT64, a bool ACL_BOOL,
    a NumPy scalar or 0-d array its own dtype; None passes a null pointer),
    ``bool`` (a bool, 0 or 1), ``int8_t``, ``int32_t``, ``int64_t`` (integers),
    ``double``, ``float`` (numbers; a float beyond float32's range is
    refused), ``const aclIntArray*``, ``const aclBoolArray*``,
    ``const aclFloatArray*`` (sequences or 1-d arrays), ``aclDataType`` (a
    JAX or NumPy dtype) and ``const char*`` (a str). Non-tensor arguments
    are static: every call with new values compiles anew.

    Dimension rules (``dims``): what each tensor dimension means, in the
    notation of Shardy sharding rules: one group per tensor parameter in
    prototype order, the inputs, ``->``, then the outputs (an absent
    optional input keeps its group; a tensor list's group applies to each of
    its tensors); a group is a space-separated list of factor names, one per
    dimension; ``...`` stands for any number of leading dimensions (the same
    in every group that uses it); ``1`` is a size-1 dimension never sharded.
    aclnnRmsNorm: ``dims="... h, h -> ... h, ... 1", replicated=("h",)``.
    A factor an output has is partitioned (each shard runs the operator on
    its block); an output that lacks a factor an input has is a sum over it
    (summed across the shards where that factor is sharded); a factor in
    ``replicated`` is never partitioned (the operands are gathered along it
    first). A factor whose size the mesh axes do not divide is left whole.

    Transformations: ``jit``; ``grad``/``jvp`` through the reference's
    derivative, or ``vjp`` when given (its cotangents get their inputs'
    sharding and, inside ``shard_map``, are summed over the manual axes
    their input does not vary over); ``vmap`` in one call when
    ``elementwise``, or when ``dims`` gives every output and every mapped
    input a leading ``...`` (the mapped dimension joins it), else one call
    per example (``jax.lax.map``); sharding from ``dims`` (``elementwise``
    is one partitioned factor per dimension of the broadcast result; with
    neither, the operands are replicated); ``jax.export`` for
    ``["cpu", "npu"]`` (the importing process declares the same operator;
    an exported program runs the operator unpartitioned, as its
    serialization takes no Python callback).

    Args:
      prototype: the first-phase prototype (``aclnnStatus`` and a final
        ``;`` may be left out).
      reference: the operator in pure JAX, as above.
      outputs: names of tensors that CANN's page prints as
        ``const aclTensor*`` but the operator writes (aclnnRmsNorm's
        ``yOut``, ``rstdOut``); a str is one name.
      name: the operator's name (its custom-call target is
        ``aclnn_<name>``, ``reference_path`` takes it); default the aclnn
        name in snake case (``softplus_backward``). Declaring a name again
        with the same prototype, reference code and options (a notebook
        cell run again) returns the same operator.
      library: the absolute path of a library exporting the operator's two
        phases. A library that exports none of the aclnn descriptor
        functions (``aclCreateTensor``, ...) uses the platform's provider's;
        one that exports them is a provider of its own and must export each
        set whole (descriptors; arrays and tensor lists; executor reuse,
        without which every call runs both phases).
      elementwise: the outputs have the inputs' broadcast shape and each
        element depends on the same element of the inputs only.
      vjp: ``vjp(inputs, outputs, cotangents, **arguments)``, the input
        tensors' cotangents (a tuple, None for an input without one) from
        the inputs, the outputs and their cotangents (with the reference's
        structure), e.g. a declared backward operator's call.
      dims: the dimension rule (see above), or None.
      replicated: factors of ``dims`` never partitioned (a normalized,
        split or rotated dimension); a str is one name.
      local_sizes: ``{attribute: factor}``: integer attributes that the
        call sets to the factor's size in its operands, the local block's
        under sharding (FlashAttentionScore's ``headNum``, the number of
        heads on one card); the caller does not pass them.

    Returns:
      The operator as a function with the reference's signature.

    Raises:
      ValueError: the prototype or ``dims`` does not parse (naming the
        token), ``dims`` does not match the prototype or the operands, the
        reference's parameters are not the prototype's (its inputs
        positionally, the others by name, nothing else), ``name`` is taken
        by another declaration, or (when first traced) the reference's
        outputs are not the prototype's, a value lies beyond its C type's
        range, or a call passes more arguments than the handler takes.
      TypeError: ``reference`` or ``vjp`` is not callable; (when called) an
        argument is not of its parameter's kind, is traced, or is not a
        parameter of the prototype.
      RuntimeError: (when lowered for the CPU) ``library`` cannot be loaded,
        lacks the operator's two phases, or exports part of a set of
        descriptor functions.
    """
    if not callable(reference):
        raise TypeError(f"declare: reference must be callable, got {type(reference).__name__}")
    if vjp is not None and not callable(vjp):
        raise TypeError(f"declare: vjp must be callable, got {type(vjp).__name__}")
    outputs = (outputs,) if isinstance(outputs, str) else tuple(outputs)
    proto = _prototype.parse(prototype, outputs)
    name = name or _snake_case(proto.name)
    lib = "" if library is None else os.fspath(library)
    if lib and not os.path.isabs(lib):
        raise ValueError(f"declare: library must be an absolute path, got {lib!r}")
    signature = inspect.signature(reference)
    _check_signature(proto, signature)
    rule, local_sizes = _rule(proto, name, dims, replicated, local_sizes, elementwise)
    declaration = (proto, _function_key(reference), lib, bool(elementwise), _function_key(vjp),
                   rule, tuple(sorted(local_sizes.items())))
    existing = OPERATORS.get(name)
    if existing is None:
        op = DeclaredOperator(proto, reference, name=name, library=lib, elementwise=elementwise,
                              rule=rule, local_sizes=local_sizes)
        op.declaration = declaration
    elif getattr(existing, "declaration", None) == declaration:  # a re-run cell: the same
        op = existing
        op.user_reference = reference
    else:
        raise ValueError(f"declare: an operator named {name!r} exists already (declared "
                         f"differently); pass name=")
    inputs_named = _input_parameters(proto, signature)

    def apply(*args: Any, **kwargs: Any) -> Any:
        kwargs = {**dict.fromkeys(local_sizes), **kwargs}  # set from the operands below
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{name}: {e}") from None
        bound.apply_defaults()
        if len(bound.args) < len(proto.inputs):
            raise TypeError(f"{name}: expected {len(proto.inputs)} input tensors "
                            f"({', '.join(p.name for p in proto.inputs)}), got {len(bound.args)}")
        inputs = list(bound.args[: len(proto.inputs)])
        given = {k: v for k, v in bound.arguments.items() if k not in inputs_named}
        given.update(given.pop(_var_keyword(signature), {}))
        extra = [k for k in given if k not in proto_attributes and k != _var_positional(signature)]
        if extra or len(bound.args) > len(proto.inputs) + sum(
                p in proto_attributes for p in list(signature.parameters)[len(proto.inputs):]):
            raise TypeError(f"{name}: {', '.join(extra) or 'an extra positional argument'} is "
                            f"not a parameter of {proto.first_phase} (it would have no effect)")
        set_by_operands = [a for a in local_sizes if a in given and given[a] is not None]
        if set_by_operands:
            raise TypeError(f"{name}: {', '.join(set_by_operands)} is set from the operands "
                            f"(local_sizes): do not pass it")
        given.update(dict.fromkeys(local_sizes, 0))  # set from the operands in _call
        missing = [p.name for p in proto.attributes if p.name not in given]
        if missing:
            raise TypeError(f"{name}: missing argument(s) {', '.join(missing)}")
        attrs = tuple((p.name, _arguments.static_value(name, p, given[p.name]))
                      for p in proto.attributes)
        if vjp is None:
            return _call(op, inputs, attrs)

        @jax.custom_vjp
        def f(*xs):
            return _call(op, list(xs), attrs)

        def fwd(*xs):
            out = f(*xs)
            return out, (xs, out)

        def bwd(res, ct):
            xs, out = res
            cts = vjp(xs, out, ct, **reference_attributes(op.call_attributes(xs, attrs)))
            return tuple(jax.tree.map(_typed_like, tuple(cts), tuple(xs),
                                      is_leaf=lambda c: c is None))

        f.defvjp(fwd, bwd)
        return f(*inputs)

    proto_attributes = {p.name for p in proto.attributes}
    functools.update_wrapper(apply, reference)
    apply.__signature__ = signature  # type: ignore[attr-defined]
    apply.aclnn_operator = op  # type: ignore[attr-defined]
    return apply


def _typed_like(ct: Any, x: Any) -> Any:
    """A cotangent with its primal's type: summed over the manual axes it
    varies over and the primal does not (the transpose of the implicit
    broadcast of an unvarying input into a ``shard_map``'s varying
    computation: dgamma of a norm over a batch-sharded block), and
    resharded to the primal's explicit sharding."""
    if ct is None or x is None:
        return ct
    extra = _compat.varying_axes(ct) - _compat.varying_axes(x)
    if extra:
        ct = jax.lax.psum(ct, tuple(sorted(extra)))
    return _compat.reshard_like(ct, jax.typeof(x))


def _rule(proto: _prototype.Prototype, name: str, dims: str | None, replicated: Iterable[str],
          local_sizes: Mapping[str, str] | None, elementwise: bool):
    """The parsed ``dims`` rule (or None) and the checked ``local_sizes``."""
    local_sizes = dict(local_sizes or {})
    if dims is None:
        if tuple(replicated) or local_sizes:
            raise ValueError(f"declare({name}): replicated= and local_sizes= go with dims=")
        return None, local_sizes
    if elementwise:
        raise ValueError(f"declare({name}): elementwise=True is a dims rule of its own; give "
                         f"one of the two")
    rule = _dims.parse(dims, len(proto.inputs), len(proto.outputs), replicated,
                       where=f"declare({name}) dims")
    kinds = {p.name: p.kind for p in proto.attributes}
    for attribute, factor in local_sizes.items():
        if kinds.get(attribute) not in ("int8", "int32", "int64"):
            raise ValueError(f"declare({name}): local_sizes names {attribute!r}, which is not "
                             f"an integer parameter of the prototype")
        if not any(factor in g for g in rule.inputs):
            raise ValueError(f"declare({name}): local_sizes binds {attribute!r} to factor "
                             f"{factor!r}, which no input's group of {dims!r} has")
    return rule, local_sizes


def _function_key(f: Any) -> Any:
    """What makes two declarations' functions the same: a function's code
    and defaults (a notebook cell run again defines an equal one), else the
    object itself."""
    code = getattr(f, "__code__", None)
    if code is None:
        return f
    return (getattr(f, "__module__", None), getattr(f, "__qualname__", None), code,
            repr(getattr(f, "__defaults__", None)), repr(getattr(f, "__kwdefaults__", None)))


def _var_keyword(signature: inspect.Signature) -> str | None:
    return next((p.name for p in signature.parameters.values() if p.kind == p.VAR_KEYWORD), None)


def _var_positional(signature: inspect.Signature) -> str | None:
    return next((p.name for p in signature.parameters.values()
                 if p.kind == p.VAR_POSITIONAL), None)


def _input_parameters(proto: _prototype.Prototype, signature: inspect.Signature) -> set[str]:
    """The names of the reference's parameters that take the input tensors."""
    positional = [p.name for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return set(positional[: len(proto.inputs)])


def _avals_key(x: Any) -> Any:
    """A hashable description of a reference input: its shape and dtype."""
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return ("list", tuple(_avals_key(t) for t in x))
    aval = jax.typeof(x)
    return ("array", tuple(aval.shape), aval.dtype, bool(getattr(aval, "weak_type", False)))


def _abstract(key: Any) -> Any:
    if key is None:
        return None
    if key[0] == "list":
        return [_abstract(k) for k in key[1]]
    _, shape, dtype, weak = key
    return jax.ShapeDtypeStruct(shape, dtype, weak_type=weak)


@functools.lru_cache(maxsize=4096)
def _output_structure(op: DeclaredOperator, inputs: tuple, attrs: tuple, absent: tuple
                      ) -> tuple[Any, tuple]:
    """The reference's result structure (a pytree definition) and its output
    lists' lengths, for inputs described by :func:`_avals_key`."""
    out = jax.eval_shape(lambda *a: op.user_reference(*a, **reference_attributes(attrs)),
                         *(_abstract(k) for k in inputs))
    groups = output_groups(op.prototype, out, absent)
    sizes = tuple(len(g) for p, g in zip(op.prototype.outputs, groups) if p.kind == "tensor_list")
    return jax.tree.structure(out), sizes


def _call(op: DeclaredOperator, inputs: list[Any], attrs: tuple) -> Any:
    """Binds ``op`` to the reference's inputs; the result has the
    reference's structure."""
    operands, absent, sizes = [], [], []
    for p, x in zip(op.prototype.inputs, inputs):
        if p.kind == "tensor_list":
            if not isinstance(x, (list, tuple)):
                raise TypeError(f"{op.name}: {p.name} is a tensor list: expected a sequence of "
                                f"arrays, got {type(x).__name__}")
            operands.extend(jnp.asarray(t) for t in x)
            sizes.append(len(x))
        elif x is None:
            absent.append(p.name)
            operands.append(placeholder())
        else:
            operands.append(jnp.asarray(x))
    inputs = [x if x is None or not isinstance(x, (list, tuple)) else list(x) for x in inputs]
    key = tuple(_avals_key(x if x is None or isinstance(x, list) else jnp.asarray(x))
                for x in inputs)
    attrs = op.call_attributes(inputs, attrs)
    tree, out_sizes = _output_structure(op, key, attrs, tuple(absent))
    out = op.bind(*operands, attrs=attrs, absent=tuple(absent), list_sizes=tuple(sizes) + out_sizes)
    if absent:  # an absent in-place tensor's result is a placeholder; the reference's None
        placeholders = {i for i, p in enumerate(op.prototype.outputs) if p.name in absent}
        out = [o for i, o in enumerate(out) if i not in placeholders]
    return jax.tree.unflatten(tree, out)


def _check_signature(proto: _prototype.Prototype, signature: inspect.Signature) -> None:
    """ValueError unless the reference takes the prototype's inputs
    positionally and its other parameters by name, and nothing else."""
    params = list(signature.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    attributes = [p.name for p in proto.attributes]
    var_positional = any(p.kind == p.VAR_POSITIONAL for p in params)
    var_keyword = any(p.kind == p.VAR_KEYWORD for p in params)
    problems = []
    if len(positional) < len(proto.inputs) and not var_positional:
        hint = ""
        written = [p.name for p in proto.inputs if p.name.endswith(("Out", "Ref"))]
        if written:
            hint = (f" (CANN's pages print some outputs as 'const aclTensor *': if "
                    f"{', '.join(written)} {'is an output' if len(written) == 1 else 'are outputs'}"
                    f", pass outputs={tuple(written)!r})")
        problems.append(f"takes {len(positional)} positional inputs, the prototype has "
                        f"{len(proto.inputs)} ({', '.join(p.name for p in proto.inputs)}){hint}")
    others = [p.name for p in positional[len(proto.inputs):]] + [
        p.name for p in params if p.kind == p.KEYWORD_ONLY]
    unknown = [n for n in others if n not in attributes]
    if unknown:
        problems.append(f"has parameter(s) {', '.join(unknown)} that the prototype does not "
                        f"have (a value given for them would have no effect)")
    named = {p.name for p in params}
    missing = [] if var_keyword else [n for n in attributes if n not in named]
    if missing:
        problems.append(f"has no parameter for {', '.join(missing)}")
    if problems:
        raise ValueError(f"declare({proto.name}): the reference {'; '.join(problems)}")


__all__ = ["DeclaredOperator", "declare"]
