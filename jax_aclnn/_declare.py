"""Any aclnn operator from its CANN prototype: :func:`declare`, which
checks the declaration, makes its :class:`~jax_aclnn._declared.DeclaredOperator`
and returns the function that binds it (the result with the reference's
structure, a ``vjp=`` attached as a custom VJP)."""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn import _arguments, _compat, _dims, _prototype
from jax_aclnn._declared import (DeclaredOperator, output_groups, placeholder,
                                  reference_attributes)
from jax_aclnn._primitive import OPERATORS


def _snake_case(aclnn_name: str) -> str:
    """``aclnnSoftplusBackward`` -> ``softplus_backward``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_",
                  aclnn_name[len("aclnn"):]).lower()


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
    input a leading ``...`` (the mapped dimension joins it) or the same
    leading factor (the mapped dimension merges into it), else one call per
    example (``jax.lax.map``); sharding from ``dims`` (``elementwise``
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
        op = existing  # (its reference computes what the new one does)
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
    """What makes two declarations' functions the same: a function's code,
    defaults and the values it closes over, compared by their repr (a
    notebook cell run again defines an equal one); else the object itself."""
    code = getattr(f, "__code__", None)
    if code is None:
        return f
    cells = tuple(repr(c.cell_contents) if c.cell_contents is not None else None
                  for c in (f.__closure__ or ()))
    return (getattr(f, "__module__", None), getattr(f, "__qualname__", None), code,
            repr(getattr(f, "__defaults__", None)), repr(getattr(f, "__kwdefaults__", None)),
            cells)


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


__all__ = ["declare"]
