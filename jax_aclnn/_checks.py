"""Trace-time argument checks shared by every operator.

Wrong dtype -> TypeError, broken shape rule -> ValueError, both naming the
arguments and their shapes, raised when the call is traced.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

SUPPORTED_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))
#: aclnn's rank limit: operators merge dimensions past it (_primitive.merged_shapes).
MAX_RANK = 8


def _dtype_names() -> str:
    return ", ".join(d.name for d in SUPPORTED_DTYPES)


def _is_weak(value: Any) -> bool:
    """Whether ``value`` is weakly typed as in jax.numpy: a Python int or
    float, or a weakly typed JAX array of real numbers (a tracer of one)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True
    return bool(getattr(value, "weak_type", False)) and jnp.dtype(value.dtype).kind in "fiu"


def float_arrays(op: str, *, promote: bool = False, **args: Any) -> list[jax.Array]:
    """Converts each argument to a JAX array and checks its dtype.

    Every array argument must have a supported dtype, and all of them one
    dtype (an aclnn operator's contract), or with ``promote`` the dtype JAX's
    type promotion gives them (float16 with bfloat16 is float32), to which
    all are converted (the differentiable operators, as jax.numpy
    functions). Weakly typed values (Python scalars, weakly typed JAX arrays)
    take that dtype, as they do in jax.numpy (also under
    ``jax_enable_x64``); float32 when every argument is weakly typed.

    Raises:
      TypeError: an argument is None or not an array, has an unsupported
        dtype, or (without ``promote``) the dtypes differ, naming them.
    """
    for name, value in args.items():
        if value is None:
            raise TypeError(f"{op}: {name} must be an array, got None")
    weak = {name: _is_weak(value) for name, value in args.items()}
    dtypes = {}
    for name, value in args.items():
        if weak[name]:
            continue
        # The dtype as given: jnp.asarray would silently turn float64 into
        # float32 when x64 is off.
        given = getattr(value, "dtype", None)
        try:
            dtype = jnp.dtype(given) if given is not None else jnp.asarray(value).dtype
        except TypeError as e:
            raise TypeError(f"{op}: {name} is not an array: {e}") from None
        if dtype not in SUPPORTED_DTYPES:
            raise TypeError(
                f"{op}: {name} has dtype {dtype}; supported dtypes are {_dtype_names()}"
            )
        dtypes[name] = dtype
    if len(set(dtypes.values())) > 1 and not promote:
        listing = ", ".join(f"{n}: {d}" for n, d in dtypes.items())
        raise TypeError(f"{op}: all tensor arguments must share one dtype; got {listing}")
    common = jnp.result_type(*dtypes.values()) if dtypes else SUPPORTED_DTYPES[0]
    return [jnp.asarray(value, common) for value in args.values()]


def channel_vector(op: str, name: str, value: Any, input_dtype: Any) -> jax.Array:
    """A (C,) tensor of a batch-norm reduction (``mean``, ``invstd``,
    ``weight``): its dtype the input's, float32 or float16, each tensor on
    its own (CANN's aclnnBatchNormReduceBackward takes FLOAT and FLOAT16
    statistics and weight with any input: mixed precision); a weakly typed
    value takes the input's.

    Raises:
      TypeError: None, not an array, or another dtype, naming both dtypes.
    """
    if _is_weak(value):
        return jnp.asarray(value, input_dtype)
    (array,) = float_arrays(op, **{name: value})
    allowed = dict.fromkeys(jnp.dtype(d) for d in (input_dtype, jnp.float32, jnp.float16))
    if array.dtype not in allowed:
        raise TypeError(f"{op}: {name} has dtype {array.dtype}; with an input of dtype "
                        f"{jnp.dtype(input_dtype)} it must be {', '.join(d.name for d in allowed)}")
    return array


def _listing(names: Sequence[str], arrays: Sequence[jax.Array]) -> str:
    return ", ".join(f"{n}{tuple(a.shape)}" for n, a in zip(names, arrays))


def broadcast_shape(op: str, names: Sequence[str], arrays: Sequence[jax.Array]) -> tuple[int, ...]:
    """The numpy broadcast shape of the arrays; ValueError naming them if none."""
    try:
        return tuple(jnp.broadcast_shapes(*(a.shape for a in arrays)))
    except ValueError:
        raise ValueError(
            f"{op}: shapes do not broadcast together: {_listing(names, arrays)}"
        ) from None


def same_shape(op: str, names: Sequence[str], arrays: Sequence[jax.Array]) -> None:
    """ValueError naming the arrays unless they all have one shape."""
    if len({a.shape for a in arrays}) > 1:
        raise ValueError(f"{op}: arguments must have the same shape; got {_listing(names, arrays)}")


def _static(op: str, name: str, value: Any) -> None:
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{op}: {name} must be static (a Python value known when the call is traced), "
            "not a traced value"
        )


def _is_scalar_array(value: Any, kinds: str) -> bool:
    """A 0-d NumPy or concrete JAX array whose dtype kind is in ``kinds``."""
    return (isinstance(value, (np.ndarray, np.generic, jax.Array)) and np.ndim(value) == 0
            and np.dtype(value.dtype).kind in kinds)


def real_number(op: str, name: str, value: Any) -> float:
    """A Python float from a static real scalar (int, float, or a 0-d NumPy or
    JAX array of a real type); TypeError for anything else: strings (also
    numeric ones such as ``'1.5'``), bools, complex numbers, traced values."""
    _static(op, name, value)
    if isinstance(value, (bool, np.bool_)) or not (
        isinstance(value, numbers.Real) or _is_scalar_array(value, "fiu")
    ):
        raise TypeError(f"{op}: {name} must be a real number, got {value!r}")
    return float(value)


def float32_number(op: str, name: str, value: Any) -> float:
    """:func:`real_number` for an aclnn attribute of type float32: a finite
    value beyond float32's range (such as ``1e40``) is a ValueError, not a
    silent infinity; infinities and NaN pass as they are."""
    value = real_number(op, name, value)
    with np.errstate(over="raise"):
        try:
            np.float32(value)
        except FloatingPointError:
            limit = float(np.finfo(np.float32).max)
            raise ValueError(
                f"{op}: {name}={value!r} is beyond float32's range (the aclnn operator "
                f"takes {name} as float32, finite up to {limit:.7g} in magnitude)"
            ) from None
    return value


def flag(op: str, name: str, value: Any) -> bool:
    """A static bool (``True``/``False`` or a NumPy bool); TypeError otherwise
    (``'no'`` or ``1`` are not flags)."""
    _static(op, name, value)
    if not (isinstance(value, (bool, np.bool_)) or _is_scalar_array(value, "b")):
        raise TypeError(f"{op}: {name} must be a bool, got {value!r}")
    return bool(value)


def integer(op: str, name: str, value: Any) -> int:
    """A static Python int from an integer scalar; TypeError otherwise
    (floats such as ``1.5``, None, bools, strings)."""
    _static(op, name, value)
    if isinstance(value, (bool, np.bool_)) or not (
        isinstance(value, numbers.Integral) or _is_scalar_array(value, "iu")
    ):
        raise TypeError(f"{op}: {name} must be an integer, got {value!r}")
    return int(value)
