"""The primitive of a declared operator (:func:`jax_aclnn.declare`).

A declared operator is an :class:`~jax_aclnn._primitive.AclnnPrimitive`
like the built-in ones: one custom call (``aclnn_<name>``) served by the
handler that serves every operator, carrying the argument list its
prototype gives (:mod:`jax_aclnn._arguments`). What the built-in operators
write by hand comes from the reference here: the outputs' shapes and dtypes
(``jax.eval_shape``), the derivative (the reference's JVP), the lowering
where no provider has the operator; the sharding factors from its
dimension rule (:mod:`jax_aclnn._dims`); its batching rule is
:mod:`jax_aclnn._declared_batching`'s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.core import ShapedArray

from jax_aclnn import _arguments, _batching, _compat, _declared_batching, _dims, _prototype
from jax_aclnn import _registration
from jax_aclnn._loading import _aclnn_ffi
from jax_aclnn._primitive import AclnnPrimitive


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
        #: The operand whose buffer the first output takes on the CPU
        #: (:meth:`alias_on_cpu`), or None.
        self.cpu_alias: int | None = None
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

    def cpu_alias_operand(self) -> int | None:
        return self.cpu_alias

    def alias_on_cpu(self, name: str) -> None:
        """Lets the first output take input ``name``'s buffer on the CPU
        where they have one shape and dtype (:meth:`cpu_alias_operand`): for
        an operator whose CPU kernels read each element of that input
        before they write the same element of the output. Not for operators
        with tensor-list inputs (their operands' positions vary) or in-place
        outputs (whose buffers are aliased already): ValueError."""
        if (any(p.kind == "tensor_list" for p in self.prototype.inputs)
                or any(p.inplace for p in self.prototype.outputs)):
            raise ValueError(f"{self.name}: alias_on_cpu takes operators without tensor-list "
                             f"inputs or in-place outputs")
        self.cpu_alias = self.operand_names.index(name)

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
        return _declared_batching.batch(self, args, dims, **params)

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


__all__ = ["DeclaredOperator", "output_groups", "placeholder", "reference_attributes"]
