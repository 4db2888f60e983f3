"""aclnn first-phase prototypes, as CANN's documentation prints them.

Every aclnn operator is two calls; the first,
``aclnnStatus aclnnXxxGetWorkspaceSize(<parameters>, uint64_t *workspaceSize,
aclOpExecutor **executor)``, says everything about the operator's argument
list: which parameters are input tensors, which are output tensors, which
are attributes and of what kind, in which order. :func:`parse` reads such a
prototype (whitespace and ``const`` placement as CANN's pages have them)
into a :class:`Prototype`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

#: The kinds of parameter, by their C type without ``const`` (and, for
#: tensors, with it: ``const aclTensor*`` is an input, ``aclTensor*`` an output).
KINDS = {
    "aclTensor*": "tensor",
    "aclScalar*": "scalar",
    "aclIntArray*": "int_array",
    "aclBoolArray*": "bool_array",
    "aclFloatArray*": "float_array",
    "aclTensorList*": "tensor_list",
    "bool": "bool",
    "int8_t": "int8",
    "int32_t": "int32",
    "int64_t": "int64",
    "double": "double",
    "float": "float",
    "char*": "string",
    "aclDataType": "dtype",
}
#: The attribute kinds (every kind but tensors and tensor lists).
ATTRIBUTE_KINDS = frozenset(KINDS.values()) - {"tensor", "tensor_list"}
_TRAILING = (("uint64_t*", "workspaceSize"), ("aclOpExecutor**", "executor"))
_SUFFIX = "GetWorkspaceSize"
_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|\*|\(|\)|,|;)")


@dataclass(frozen=True)
class Parameter:
    """One parameter of a first phase."""

    name: str
    #: one of :data:`KINDS`' values
    kind: str
    #: for a tensor or tensor list: whether the operator writes it
    output: bool = False
    #: for a tensor: whether the operator updates it in place (CANN's
    #: ``aclTensor *xxxRef``): an input and an output, one buffer
    inplace: bool = False

    @property
    def is_tensor(self) -> bool:
        return self.kind in ("tensor", "tensor_list")


@dataclass(frozen=True)
class Prototype:
    """A parsed first phase: ``name`` is the operator (``aclnnXxx``, whose
    first phase is ``aclnnXxxGetWorkspaceSize``), ``parameters`` its
    parameters without the trailing ``workspaceSize`` and ``executor``."""

    name: str
    parameters: tuple[Parameter, ...]

    @property
    def first_phase(self) -> str:
        return self.name + _SUFFIX

    @property
    def inputs(self) -> tuple[Parameter, ...]:
        return tuple(p for p in self.parameters if p.is_tensor and (p.inplace or not p.output))

    @property
    def outputs(self) -> tuple[Parameter, ...]:
        return tuple(p for p in self.parameters if p.is_tensor and p.output)

    @property
    def attributes(self) -> tuple[Parameter, ...]:
        return tuple(p for p in self.parameters if not p.is_tensor)


def _error(text: str, at: int, message: str) -> ValueError:
    """A ValueError showing ``text`` with a caret under position ``at``."""
    return ValueError(f"aclnn prototype: {message}\n  {text}\n  {' ' * at}^")


def _tokens(text: str) -> list[tuple[str, int]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _error(text, pos + len(text[pos:]) - len(text[pos:].lstrip()),
                         f"unexpected character {text[pos:].lstrip()[0]!r}")
        out.append((m.group(1), m.start(1)))
        pos = m.end()
    return out


def parse(text: str, outputs: Iterable[str] = ()) -> Prototype:
    """The :class:`Prototype` of a first-phase prototype as CANN prints it,
    e.g. ``"aclnnStatus aclnnSwishBackwardGetWorkspaceSize(const aclTensor
    *gradOutput, const aclTensor *self, const aclScalar *betaOptional,
    aclTensor *gradInput, uint64_t *workspaceSize, aclOpExecutor
    **executor)"`` (the return type and a final ``;`` may be left out).

    A ``const aclTensor*`` is an input, an ``aclTensor*`` an output;
    ``outputs`` names tensors that are outputs whatever their ``const``
    (CANN's pages print some outputs as ``const aclTensor *out``). A
    non-const ``aclTensor*`` named ``...Ref`` (CANN's naming of a tensor
    updated in place: aclnnApplyAdamWV2's ``varRef``) is both an input and
    an output.

    Raises:
      ValueError: the text is not such a prototype (naming the token, with
        a caret under it), a parameter type is not one of :data:`KINDS`, a
        name repeats, the last two parameters are not ``uint64_t
        *workspaceSize, aclOpExecutor **executor``, or ``outputs`` names a
        parameter that is not a tensor.
    """
    if not isinstance(text, str):
        raise TypeError(f"aclnn prototype: expected a string, got {type(text).__name__}")
    outputs = set(outputs)
    tokens = _tokens(text)
    words = [t for t, _ in tokens]
    try:
        open_at = words.index("(")
    except ValueError:
        raise _error(text, len(text), "expected '(' after the function name") from None
    head = tokens[:open_at]
    if not head or head[-1][0] in "*,;)":
        raise _error(text, tokens[open_at][1], "expected the function name before '('")
    function, function_at = head[-1]
    if len(head) > 2 or (len(head) == 2 and head[0][0] != "aclnnStatus"):
        raise _error(text, head[0][1], "expected 'aclnnStatus aclnnXxxGetWorkspaceSize('")
    if not (function.startswith("aclnn") and function.endswith(_SUFFIX)
            and len(function) > len("aclnn" + _SUFFIX)):
        raise _error(text, function_at,
                     f"the first phase's name is aclnn<Operator>{_SUFFIX}, got {function!r}")
    end = len(tokens)
    if words[-1] == ";":
        end -= 1
    if end <= open_at + 1 or words[end - 1] != ")":
        raise _error(text, len(text), "expected ')' closing the parameter list")
    groups: list[list[tuple[str, int]]] = [[]]
    for token, at in tokens[open_at + 1:end - 1]:
        if token in "();":
            raise _error(text, at, f"unexpected {token!r} in the parameter list")
        if token == ",":
            groups.append([])
        else:
            groups[-1].append((token, at))
    params = [_parameter(text, g, outputs) for g in groups]
    trailing = [(ctype, name) for ctype, name, _, _ in params[-2:]]
    if trailing != list(_TRAILING):
        at = params[-2][3] if len(params) >= 2 else tokens[open_at][1]
        raise _error(text, at, "the last two parameters must be 'uint64_t *workspaceSize, "
                               "aclOpExecutor **executor'")
    seen: set[str] = set()
    result = []
    for ctype, name, const, at in params[:-2]:
        if ctype not in KINDS:
            raise _error(text, at, f"parameter {name!r}: type {ctype!r} is not an aclnn "
                                   f"argument type ({', '.join(KINDS)})")
        if name in seen:
            raise _error(text, at, f"parameter {name!r} appears twice")
        seen.add(name)
        kind = KINDS[ctype]
        is_tensor = kind in ("tensor", "tensor_list")
        if name in outputs and not is_tensor:
            raise _error(text, at, f"outputs names {name!r}, which is not a tensor")
        inplace = kind == "tensor" and not const and name.endswith("Ref") and name not in outputs
        result.append(Parameter(name, kind, is_tensor and (name in outputs or not const), inplace))
    unknown = outputs - seen
    if unknown:
        raise ValueError(f"aclnn prototype: outputs names {', '.join(sorted(unknown))}, not "
                         f"parameters of {function}")
    return Prototype(function[: -len(_SUFFIX)], tuple(result))


def _parameter(text: str, group: list[tuple[str, int]], outputs: set[str]):
    """(C type without const, name, whether const, position) of one parameter."""
    if not group:
        raise _error(text, len(text), "an empty parameter")
    name, at = group[-1]
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise _error(text, at, "expected a parameter name")
    const = any(t == "const" for t, _ in group[:-1])
    parts = [t for t, _ in group[:-1] if t != "const"]
    if not parts:
        raise _error(text, at, f"parameter {name!r} has no type")
    base, stars = [p for p in parts if p != "*"], "".join(p for p in parts if p == "*")
    if len(base) != 1 or parts[: len(base)] != base:
        raise _error(text, group[0][1], f"parameter {name!r}: cannot read its type")
    return base[0] + stars, name, const, group[0][1]


__all__ = ["ATTRIBUTE_KINDS", "KINDS", "Parameter", "Prototype", "parse"]
