"""The argument list of an aclnn first phase as custom-call attributes.

One FFI handler serves every aclnn operator (csrc/ffi/handlers.cc): the
custom call carries the operator's name and its first phase's argument list,
which :func:`encode` makes from a parsed prototype
(:mod:`jax_aclnn._prototype`) and the values of the call's non-tensor
parameters. The kinds and what each takes from the attributes are the
compiled module's (``_aclnn_ffi.argument_kinds()``, csrc/ffi/arguments.h).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from jax_aclnn._loading import _aclnn_ffi
from jax_aclnn._prototype import Prototype

#: Argument kind codes by name (``kInput``, ``kScalar``, ...).
KIND = {name: code for name, (code, _, _) in _aclnn_ffi.argument_kinds().items()}

#: aclDataType codes of the aclScalar dtypes.
_ACL_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 11, np.dtype(np.int64): 9,
               np.dtype(np.int32): 3, np.dtype(np.int8): 2, np.dtype(np.bool_): 12}
_SCALAR_KINDS = {"bool": "kBool", "int64": "kInt64", "int32": "kInt32", "int8": "kInt8",
                 "double": "kDouble", "float": "kFloat"}
_ARRAY_KINDS = {"int_array": "kIntArray", "bool_array": "kBoolArray",
                "float_array": "kFloatArray"}

#: What a tensor parameter's entry in ``values`` may be: absent (a
#: placeholder buffer stands for it, the operator gets a null pointer).
ABSENT = None


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
    if dtype not in _ACL_DTYPES:
        raise TypeError(f"an aclScalar cannot hold {dtype} (supported: "
                        f"{', '.join(str(d) for d in _ACL_DTYPES)})")
    return dtype


#: The ranges of the integer kinds and of float32: a value beyond them is
#: refused (C's conversion would wrap it, or is undefined for a float).
_INT_RANGES = {"int8": 8, "int32": 32, "int64": 64}
#: The parameter kind an aclScalar's value is checked as, by its dtype.
_SCALAR_VALUE_KINDS = {"float32": "float", "float64": "double", "int64": "int64",
                       "int32": "int32", "int8": "int8", "bool": "bool"}
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _checked(prototype: Prototype, name: str, kind: str, value: Any) -> Any:
    """``value`` as the Python number a parameter of ``kind`` takes, or a
    ValueError naming the operator and parameter when it lies beyond the
    kind's range."""
    if kind == "float":
        v = float(value)
        if np.isfinite(v) and abs(v) > _FLOAT32_MAX:
            raise ValueError(f"{prototype.name}: {name}={value!r} is beyond float32's range")
        return v
    if kind == "double":
        return float(value)
    if kind == "bool":
        return int(bool(value))
    v = int(value)
    bits = _INT_RANGES[kind]
    if not -(2 ** (bits - 1)) <= v < 2 ** (bits - 1):
        raise ValueError(f"{prototype.name}: {name}={value!r} is beyond int{bits}_t's range")
    return v


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
    for p in prototype.parameters:
        value = values.get(p.name, True) if p.is_tensor else values[p.name]
        if p.kind == "tensor":
            absent = value is ABSENT
            kinds.append(KIND[("kAbsent" if absent else "k") + ("Output" if p.output else "Input")])
        elif p.kind == "tensor_list":
            kinds.append(KIND["kOutputList" if p.output else "kInputList"])
            ints.append(int(value))
        elif value is None:
            kinds.append(KIND["kNull"])
        elif p.kind == "scalar":
            dtype = scalar_dtype(value)
            kinds.append(KIND["kScalar"])
            ints.append(_ACL_DTYPES[dtype])
            checked = _checked(prototype, p.name, _SCALAR_VALUE_KINDS[dtype.name], value)
            (floats if dtype.kind == "f" else ints).append(checked)
        elif p.kind in _SCALAR_KINDS:
            kinds.append(KIND[_SCALAR_KINDS[p.kind]])
            (floats if p.kind in ("double", "float") else ints).append(
                _checked(prototype, p.name, p.kind, value))
        elif p.kind in _ARRAY_KINDS:
            seq = list(value)
            kinds.append(KIND[_ARRAY_KINDS[p.kind]])
            ints.append(len(seq))
            if p.kind == "float_array":
                floats.extend(_checked(prototype, p.name, "float", v) for v in seq)
            else:
                kind = "bool" if p.kind == "bool_array" else "int64"
                ints.extend(_checked(prototype, p.name, kind, v) for v in seq)
        elif p.kind == "string":
            data = value.encode() if isinstance(value, str) else bytes(value)
            if b"\0" in data:
                raise ValueError(f"{prototype.name}: string argument {p.name!r} holds a NUL byte")
            kinds.append(KIND["kString"])
            strings += data + b"\0"
        else:  # pragma: no cover - _prototype.KINDS and this function agree
            raise AssertionError(p.kind)
    return {
        "operator": prototype.name,
        "library": library,
        "kinds": np.asarray(kinds, np.int64),
        "ints": np.asarray(ints, np.int64),
        "floats": np.asarray(floats, np.float64),
        "strings": bytes(strings),
    }


__all__ = ["ABSENT", "KIND", "encode", "scalar_dtype"]
