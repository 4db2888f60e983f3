"""The argument list of an aclnn first phase as custom-call attributes.

One FFI handler serves every aclnn operator (csrc/ffi/handlers.cc): the
custom call carries the operator's name and its first phase's argument list,
which :func:`encode` makes from a parsed prototype
(:mod:`jax_aclnn._prototype`) and the values of the call's non-tensor
parameters. The kinds and what each takes from the attributes are the
compiled module's (``_aclnn_ffi.argument_kinds()``, csrc/ffi/arguments.h).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax_aclnn._loading import _aclnn_ffi
from jax_aclnn._prototype import KINDS, Parameter, Prototype

#: Argument kind codes by name (``kInput``, ``kScalar``, ...).
KIND = {name: code for name, (code, _, _) in _aclnn_ffi.argument_kinds().items()}

#: aclDataType codes (csrc/aclnn_abi.h) of the dtypes an ``aclDataType``
#: parameter takes; the aclScalar dtypes are a subset (:data:`_SCALAR_DTYPES`).
ACL_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.int8): 2,
              np.dtype(np.int32): 3, np.dtype(np.uint8): 4, np.dtype(np.int16): 6,
              np.dtype(np.uint16): 7, np.dtype(np.uint32): 8, np.dtype(np.int64): 9,
              np.dtype(np.uint64): 10, np.dtype(np.float64): 11, np.dtype(np.bool_): 12,
              np.dtype(jnp.bfloat16): 27}
_SCALAR_DTYPES = frozenset(np.dtype(d) for d in (np.float32, np.float64, np.int64, np.int32,
                                                  np.int8, np.bool_))
_SCALAR_KINDS = {"bool": "kBool", "int64": "kInt64", "int32": "kInt32", "int8": "kInt8",
                 "double": "kDouble", "float": "kFloat", "dtype": "kInt32"}
_ARRAY_KINDS = {"int_array": "kIntArray", "bool_array": "kBoolArray",
                "float_array": "kFloatArray"}
#: The C types of the parameter kinds, for error messages.
_C_TYPES = {kind: ctype for ctype, kind in KINDS.items()}

#: What a tensor parameter's entry in ``values`` may be: absent (a
#: placeholder buffer stands for it, the operator gets a null pointer).
ABSENT = None

#: Bounds of one call, as the handler has them (csrc/ffi/arguments.h,
#: csrc/ffi/descriptors.cc): checked when a call is traced, so that a call
#: past them is a ValueError there and not an error when it runs.
MAX_PARAMETERS = 64        # first-phase parameters before workspaceSize
MAX_TENSORS = 64           # aclTensor descriptors, tensor lists' included
MAX_OTHER_DESCRIPTORS = 32  # aclScalar, arrays and tensor lists
MAX_ARRAY_VALUES = 256     # aclBoolArray and aclFloatArray values of one call


class ExactFloat(float):
    """A floating parameter's value, equal to another only with the same
    bits: JAX reuses a compiled call for equal parameters, and ``-0.0 ==
    0.0`` would give one call the other's sign."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, float) and struct.pack("<d", self) == struct.pack("<d", other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(struct.pack("<d", self))


class Scalar(NamedTuple):
    """An aclScalar argument: its value and dtype. The dtype is part of what
    compares equal, so that ``1.0`` (ACL_FLOAT) and ``1`` (ACL_INT64), equal
    as Python numbers, are different primitive parameters and never share a
    compiled call."""

    value: Any
    dtype: str


def scalar_dtype(value: Any) -> np.dtype:
    """The aclScalar dtype of a value: a NumPy scalar's own; a Python float
    is float32 (what CANN's operators take for their scalar attributes), an
    int int64, a bool bool."""
    if isinstance(value, np.generic):
        dtype = value.dtype
    elif isinstance(value, bool):
        dtype = np.dtype(np.bool_)
    elif isinstance(value, int):
        dtype = np.dtype(np.int64)
    else:
        dtype = np.dtype(np.float32)
    if dtype not in _SCALAR_DTYPES:
        raise TypeError(f"an aclScalar cannot hold {dtype} (supported: "
                        f"{', '.join(sorted(str(d) for d in _SCALAR_DTYPES))})")
    return dtype


#: The ranges of the integer kinds and of float32: a value beyond them is
#: refused (C's conversion would wrap it, or is undefined for a float).
_INT_RANGES = {"int8": 8, "int32": 32, "int64": 64}
#: The parameter kind an aclScalar's value is checked as, by its dtype.
_SCALAR_VALUE_KINDS = {"float32": "float", "float64": "double", "int64": "int64",
                       "int32": "int32", "int8": "int8", "bool": "bool"}


def _checked(operator: str, name: str, kind: str, value: Any) -> Any:
    """``value`` as the Python number a parameter of ``kind`` takes.

    Raises:
      TypeError: the value is not of the kind (a float or a string for an
        integer, anything but a bool, 0 or 1 for a bool), naming the parameter.
      ValueError: it lies beyond the kind's range (float32's for a float:
        values that round to its largest finite value are in range).
    """
    is_bool = isinstance(value, (bool, np.bool_))
    if kind == "bool":
        # C's 0 and 1 too; any other value (a string "false" among them) is refused
        if not (is_bool or (isinstance(value, (int, np.integer)) and value in (0, 1))):
            raise TypeError(f"{operator}: {name}={value!r} is not a bool")
        return bool(value)
    if kind in ("float", "double"):
        if is_bool or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{operator}: {name}={value!r} is not a number")
        v = float(value)
        if kind == "float" and np.isfinite(v):
            with np.errstate(over="ignore"):
                if not np.isfinite(np.float32(v)):
                    raise ValueError(f"{operator}: {name}={value!r} is beyond float32's range")
        return ExactFloat(v)
    if is_bool or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{operator}: {name}={value!r} is not an integer")
    v = int(value)
    bits = _INT_RANGES[kind]
    if not -(2 ** (bits - 1)) <= v < 2 ** (bits - 1):
        raise ValueError(f"{operator}: {name}={value!r} is beyond int{bits}_t's range")
    return v


def _concrete(operator: str, name: str, value: Any) -> Any:
    """A JAX or NumPy array as NumPy (a 0-d one as its scalar); a traced
    value is a TypeError: non-tensor arguments are static."""
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{operator}: {name} is a traced value ({value.aval.str_short()}), but non-tensor "
            f"arguments are static: pass a Python or NumPy value (under jax.jit, mark it "
            f"static with static_argnames, or close over it)")
    if isinstance(value, (jax.Array, np.ndarray)):
        value = np.asarray(value)
        return value[()] if value.ndim == 0 else value
    return value


def static_value(operator: str, p: Parameter, value: Any) -> Any:
    """A non-tensor argument's value as the primitive's (hashable) parameter:
    a Python bool, int, float or str, a tuple for an array, a :class:`Scalar`
    for an aclScalar, a NumPy dtype for an aclDataType; None for a null
    pointer.

    Accepted: Python and NumPy numbers of the parameter's kind, concrete 0-d
    JAX or NumPy arrays for scalars, sequences and 1-d arrays for the
    aclIntArray/aclBoolArray/aclFloatArray kinds, a JAX or NumPy dtype for
    an ``aclDataType``, a str for a ``const char*``; None for a pointer kind.

    Raises:
      TypeError: the value is not of the parameter's kind, or traced.
      ValueError: it lies beyond the kind's range, or a string holds a NUL.
    """
    name, kind = p.name, p.kind
    if isinstance(value, Scalar) and kind == "scalar":  # already a parameter
        return value
    value = _concrete(operator, name, value)
    if value is None:
        if kind in ("bool", "int8", "int32", "int64", "double", "float", "dtype"):
            raise TypeError(f"{operator}: {name} is a {_C_TYPES[kind]}, not a pointer: "
                            f"None cannot stand for it")
        return None
    if kind == "scalar":
        if not isinstance(value, (bool, int, float, np.generic)):
            raise TypeError(f"{operator}: {name}={value!r} is not a number for an aclScalar")
        dtype = scalar_dtype(value)
        return Scalar(_checked(operator, name, _SCALAR_VALUE_KINDS[dtype.name], value),
                      dtype.name)
    if kind in _ARRAY_KINDS:
        if isinstance(value, np.ndarray) and value.ndim != 1:
            raise TypeError(f"{operator}: {name} is an {_C_TYPES[kind]}: expected a sequence "
                            f"or a 1-d array, got an array of shape {value.shape}")
        if isinstance(value, np.ndarray):
            value = list(value)
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise TypeError(f"{operator}: {name} is an {_C_TYPES[kind]}: expected a sequence, "
                            f"got {type(value).__name__}")
        element = {"int_array": "int64", "bool_array": "bool", "float_array": "float"}[kind]
        return tuple(_checked(operator, name, element, _concrete(operator, name, v))
                     for v in value)
    if kind == "string":
        if not isinstance(value, str):
            raise TypeError(f"{operator}: {name} is a const char*: expected a str, got "
                            f"{type(value).__name__}")
        if "\0" in value:
            raise ValueError(f"{operator}: string argument {name!r} holds a NUL byte")
        return value
    if kind == "dtype":
        try:
            dtype = np.dtype(value)
        except TypeError:
            dtype = None
        if dtype not in ACL_DTYPES:
            raise TypeError(f"{operator}: {name} is an aclDataType: expected a dtype of "
                            f"{', '.join(sorted(d.name for d in ACL_DTYPES))}, got {value!r}")
        return dtype
    return _checked(operator, name, kind, value)


def reference_value(value: Any) -> Any:
    """What the reference gets for a parameter's static value: an aclScalar's
    value (a Python or NumPy number), else the value itself."""
    value = value.value if isinstance(value, Scalar) else value
    if isinstance(value, tuple):  # an array's
        return tuple(reference_value(v) for v in value)
    return float(value) if isinstance(value, ExactFloat) else value


def encode(prototype: Prototype, values: Mapping[str, Any], library: str = "") -> dict[str, Any]:
    """The custom call's attributes for ``prototype``'s operator.

    Args:
      prototype: the operator's parsed first phase.
      values: by parameter name: every non-tensor parameter's value (None
        for a null pointer where the prototype takes one); a tensor
        parameter given as :data:`ABSENT` is absent (its buffer is a
        placeholder); a tensor list's entry is its number of tensors.
      library: "" or the absolute path of a library exporting the operator.

    Returns:
      ``{"operator", "library", "kinds", "ints", "floats", "strings"}``.
    """
    kinds: list[int] = []
    ints: list[int] = []
    floats: list[float] = []
    strings = bytearray()
    tensors = others = array_values = 0
    for p in prototype.parameters:
        if p.is_tensor:
            value = values.get(p.name, True)
        else:
            value = static_value(prototype.name, p, values[p.name])
            others += value is not None and p.kind not in _SCALAR_KINDS and p.kind != "string"
        if p.kind == "tensor":
            absent = value is ABSENT
            tensors += not absent
            role = "InOut" if p.inplace else "Output" if p.output else "Input"
            kinds.append(KIND[("kAbsent" if absent else "k") + role])
        elif p.kind == "tensor_list":
            kinds.append(KIND["kOutputList" if p.output else "kInputList"])
            ints.append(int(value))
            tensors += int(value)
            others += 1
        elif value is None:
            kinds.append(KIND["kNull"])
        elif p.kind == "scalar":
            kinds.append(KIND["kScalar"])
            ints.append(ACL_DTYPES[np.dtype(value.dtype)])
            (floats if np.dtype(value.dtype).kind == "f" else ints).append(value.value)
        elif p.kind == "dtype":
            kinds.append(KIND[_SCALAR_KINDS[p.kind]])
            ints.append(ACL_DTYPES[value])
        elif p.kind in _SCALAR_KINDS:
            kinds.append(KIND[_SCALAR_KINDS[p.kind]])
            (floats if p.kind in ("double", "float") else ints).append(value)
        elif p.kind in _ARRAY_KINDS:
            kinds.append(KIND[_ARRAY_KINDS[p.kind]])
            ints.append(len(value))
            (floats if p.kind == "float_array" else ints).extend(value)
            array_values += len(value) if p.kind != "int_array" else 0
        elif p.kind == "string":
            kinds.append(KIND["kString"])
            strings += value.encode() + b"\0"
        else:  # pragma: no cover - _prototype.KINDS and this function agree
            raise AssertionError(p.kind)
    _check_bounds(prototype, tensors, others, array_values)
    return {
        "operator": prototype.name,
        "library": library,
        "kinds": np.asarray(kinds, np.int64),
        "ints": np.asarray(ints, np.int64),
        "floats": np.asarray(floats, np.float64),
        "strings": bytes(strings),
    }


def _check_bounds(prototype: Prototype, tensors: int, others: int, array_values: int) -> None:
    """ValueError when a call lies past the handler's bounds (see :data:`MAX_TENSORS`)."""
    for count, bound, what in (
            (len(prototype.parameters), MAX_PARAMETERS, "parameters"),
            (tensors, MAX_TENSORS, "tensors (tensor lists' included)"),
            (others, MAX_OTHER_DESCRIPTORS, "aclScalar, array and tensor-list arguments"),
            (array_values, MAX_ARRAY_VALUES, "aclBoolArray and aclFloatArray values")):
        if count > bound:
            raise ValueError(f"{prototype.name}: this call has {count} {what}; one call of the "
                             f"aclnn handler takes at most {bound}")


__all__ = ["ABSENT", "ACL_DTYPES", "KIND", "Scalar", "encode", "reference_value",
           "scalar_dtype", "static_value"]
