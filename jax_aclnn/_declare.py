"""Any aclnn operator from its CANN prototype: :func:`declare`, which
checks the declaration, makes its :class:`~jax_aclnn._declared.DeclaredOperator`
and returns the function that binds it (the result with the reference's
structure, a ``vjp=`` attached as a custom VJP)."""

from __future__ import annotations

import dataclasses
import dis
import functools
import hashlib
import inspect
import math
import os
import re
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

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
            dims: str | None = None, replicated: Iterable[str] | None = (),
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
    dimension (a name once per group); ``...`` stands for any number of
    leading dimensions (the same in every group that uses it); ``1`` is a
    size-1 dimension never sharded.
    aclnnRmsNorm: ``dims="... h, h -> ... h, ... 1", replicated=("h",)``.
    A factor an output has is partitioned (each shard runs the operator on
    its block); an output that lacks a factor an input has is a sum over it
    (summed across the shards where that factor is sharded); a factor in
    ``replicated`` is never partitioned (the operands are gathered along it
    first). A factor whose size the mesh axes do not divide is left whole.
    The reference's output shapes are checked against the rule when first
    traced, for the operands and for each block of them a shard can get.

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
        (a notebook cell run again) with the same prototype and options and
        equal functions returns the same operator, which runs the new
        reference: equal functions have the same code and equal values in
        their closures, defaults and the globals their code names (arrays
        compared element by element, objects without a value ``==`` as the
        same object).
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
        split or rotated dimension); a str is one name, None none.
      local_sizes: ``{attribute: factor}``: integer attributes that the
        call sets to the factor's size in its operands, the local block's
        under sharding (FlashAttentionScore's ``headNum``, the number of
        heads on one card); the caller does not pass them.

    Returns:
      The operator as a function with the reference's signature.

    Raises:
      ValueError: the prototype or ``dims`` does not parse (naming the
        token; a factor twice in one group), ``dims`` does not match the
        prototype or the operands, ``local_sizes`` names no factor (``...``
        or ``1`` included), the reference's parameters are not the
        prototype's (its inputs positionally, the others by name, nothing
        else), ``name`` is taken by another declaration (naming what
        differs), or (when first traced) the reference's outputs are not
        the prototype's, their shapes do not follow ``dims`` for the
        operands or for a shard's block of them (naming the output and the
        factors), a value lies beyond its C type's range, or a call passes
        more arguments than the handler takes.
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
    declaration = {"prototype": proto, "reference": _value_key(reference), "library": lib,
                   "elementwise": bool(elementwise), "vjp": _value_key(vjp), "dims": rule,
                   "local_sizes": tuple(sorted(local_sizes.items()))}
    op = OPERATORS.get(name)
    if op is None:
        op = DeclaredOperator(proto, reference, name=name, library=lib, elementwise=elementwise,
                              rule=rule, local_sizes=local_sizes)
    elif isinstance(op, DeclaredOperator):  # a re-run cell: the same operator, if equal
        _check_same(name, op.declaration, declaration)
        op.user_reference = reference  # (computing what the old one does)
    else:
        raise ValueError(f"declare: an operator named {name!r} exists already (a built-in "
                         f"operator); pass name=")
    op.declaration = declaration
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


def _check_same(name: str, previous: dict[str, Any], declaration: dict[str, Any]) -> None:
    """ValueError unless ``name``'s ``previous`` declaration is ``declaration``."""
    differ = [k for k, v in declaration.items() if v != previous[k]]
    if differ:
        why = (" (its code, or a value it closes over or reads as a global, differs)"
               if {"reference", "vjp"} & set(differ) else "")
        raise ValueError(f"declare: an operator named {name!r} exists already, declared with "
                         f"another {', '.join(differ)}{why}; pass name= to declare a second one")


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


def _rule(proto: _prototype.Prototype, name: str, dims: str | None,
          replicated: Iterable[str] | None, local_sizes: Mapping[str, str] | None,
          elementwise: bool):
    """The parsed ``dims`` rule (or None) and the checked ``local_sizes``."""
    local_sizes = dict(local_sizes or {})
    replicated = replicated or ()
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
        if factor in (_dims.ELLIPSIS, "1"):
            raise ValueError(f"declare({name}): local_sizes binds {attribute!r} to {factor!r}, "
                             f"which is not a factor ('...' and '1' are dimensions of no one "
                             f"size): name a factor of {dims!r}")
        if not any(factor in g for g in rule.inputs):
            raise ValueError(f"declare({name}): local_sizes binds {attribute!r} to factor "
                             f"{factor!r}, which no input's group of {dims!r} has")
    return rule, local_sizes


def _value_key(value: Any, module: str | None = None,
               enclosing: frozenset[int] = frozenset()) -> Any:
    """What makes two declarations' functions the same (a notebook cell run
    again defines equal ones), compared with ``==``.

    A function: its module, name, code, defaults, the values its closure
    holds and the values of the globals its code names (a table at a
    notebook's top level), each compared as below; a function of another
    module than the one holding it (``module``: a library's, fixed once
    imported) only as the same object. A ``functools.partial``: its
    function and arguments. Tuples, lists, dicts and dataclasses: entry by
    entry. NumPy and JAX arrays: by :func:`_contents` (their values, never
    their printout, which elides large arrays). Other hashable values whose
    type defines ``==``: by it. A class of the function's own module (a
    notebook's), and an instance of one: by their attributes. Anything else
    (and an array whose values cannot be read here): only as the same object, whose state the
    reference reads when it is traced. ``enclosing`` holds the ids of the
    values that hold ``value`` (one that holds itself is marked, not
    entered again)."""
    if id(value) in enclosing:
        return ("enclosing",)
    if isinstance(value, types.FunctionType) and module in (None, value.__module__):
        key = functools.partial(_value_key, module=value.__module__,
                                enclosing=enclosing | {id(value)})
        names = sorted(n for n in _global_names(value.__code__) if n in value.__globals__)
        return ("function", value.__module__, value.__qualname__, value.__code__,
                key(value.__defaults__), key(value.__kwdefaults__),
                tuple(key(c.cell_contents) for c in value.__closure__ or ()),
                tuple((n, key(value.__globals__[n])) for n in names))
    key = functools.partial(_value_key, module=module, enclosing=enclosing | {id(value)})
    if isinstance(value, functools.partial):
        return ("partial", key(value.func), key(value.args), key(value.keywords))
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        return _contents(value) or _Same(value)
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(key(v) for v in value))
    if isinstance(value, dict):
        return (type(value), tuple((k, key(v)) for k, v in value.items()))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value), tuple(key(getattr(value, f.name)) for f in dataclasses.fields(value)))
    if type(value).__eq__ is not object.__eq__ and _hashable(value):
        return (type(value), value)
    if module is not None and getattr(value, "__module__", None) == module:
        if isinstance(value, type):  # a class of the reference's own module: its attributes
            return ("class", value.__qualname__, tuple(
                (n, key(v)) for n, v in vars(value).items() if n not in _CLASS_INTERNALS))
        if hasattr(value, "__dict__"):  # an instance of one (a config object): its attributes
            return ("object", key(type(value)), key(vars(value)))
    return _Same(value)


def _global_names(code: types.CodeType) -> set[str]:
    """The names that ``code`` and the code nested in it (lambdas,
    comprehensions) look up as globals (not the attribute names that
    ``co_names`` holds too: ``x.shape`` reads no global ``shape``)."""
    own = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    return own.union(*(_global_names(c) for c in code.co_consts
                       if isinstance(c, types.CodeType)))


#: A class's own entries that are no part of its definition.
_CLASS_INTERNALS = ("__dict__", "__weakref__")


class _Same:
    """A value of a declaration's key that equals only the same object."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and self.value is other.value


def _contents(array: Any) -> tuple | None:
    """An array's type, dtype, shape, weak type and the SHA-256 of its
    bytes; None where its values cannot be read here (a tracer, a PRNG key
    array, an array with shards on other processes' devices, an object
    array)."""
    if isinstance(array, jax.core.Tracer) or (isinstance(array, jax.Array) and (
            not array.is_fully_addressable
            or jax.dtypes.issubdtype(array.dtype, jax.dtypes.extended))):
        return None
    host = np.asarray(array)
    if host.dtype.hasobject:
        return None
    return (type(array), host.dtype, host.shape, bool(getattr(array, "weak_type", False)),
            hashlib.sha256(host.tobytes()).hexdigest())


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


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
    lists' lengths, for inputs described by :func:`_avals_key`; its output
    shapes checked against the operator's rule (:func:`_check_rule`)."""
    out = jax.eval_shape(lambda *a: op.user_reference(*a, **reference_attributes(attrs)),
                         *(_abstract(k) for k in inputs))
    groups = output_groups(op.prototype, out, absent)
    sizes = tuple(len(g) for p, g in zip(op.prototype.outputs, groups) if p.kind == "tensor_list")
    if op.rule is not None:
        operands = [a for k in inputs for a in (
            [jax.eval_shape(placeholder)] if k is None else
            _abstract(k) if k[0] == "list" else [_abstract(k)])]
        in_sizes = tuple(len(k[1]) for k in inputs if k is not None and k[0] == "list")
        _check_rule(op, op.rule, operands, [o for g in groups for o in g],
                    dict(attrs=attrs, absent=absent, list_sizes=in_sizes + sizes))
    return jax.tree.structure(out), sizes


def _check_rule(op: DeclaredOperator, rule: _dims.Rule, operands: list[Any],
                results: list[Any], params: dict[str, Any]) -> None:
    """ValueError unless the reference's output shapes (``results`` for
    ``operands``, the primitive's) follow ``rule`` (``op``'s), for the
    operands and for each block of them a shard can get: each factor the
    rule partitions (and each dimension ``...`` stands for) of size n > 1
    in turn n / p (p its smallest prime factor: a block of p shards), the
    other dimensions whole. A block that the reference refuses is not
    checked. Naming the output and the factors."""
    absent, list_sizes = params["absent"], params["list_sizes"]
    where = f"{op.name}: dims {rule.text!r}"
    labels = ([f"input {p.name}" for p in op.prototype.inputs],
              [f"output {p.name}" for p in op.prototype.outputs])

    def factors(ins, outs, where):
        return rule.factors(*op.arrays_by_parameter(ins, outs, absent=absent,
                                                    list_sizes=list_sizes),
                            where=where, labels=labels)[0]

    in_factors = factors(operands, results, where)
    sizes = {f: n for fs, a in zip(in_factors, operands) for f, n in zip(fs, a.shape) if f}
    for factor, n in sizes.items():
        if n < 2:
            continue
        block = n // next((p for p in range(2, math.isqrt(n) + 1) if n % p == 0), n)
        blocks = [jax.ShapeDtypeStruct(tuple(block if f == factor else d
                                             for f, d in zip(fs, a.shape)), a.dtype,
                                       weak_type=a.weak_type)
                  for fs, a in zip(in_factors, operands)]
        attrs = op.call_attributes(op.user_inputs(blocks, absent, list_sizes), params["attrs"])
        try:
            outs = jax.eval_shape(functools.partial(op.reference, **dict(params, attrs=attrs)),
                                  *blocks)
        except Exception:  # a block the reference refuses: no shapes to compare
            continue
        factors(blocks, outs, f"{where} does not match the reference's output shapes on a "
                              f"shard's block ({_dims.describe(factor)} of size {block}, not {n})")


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
