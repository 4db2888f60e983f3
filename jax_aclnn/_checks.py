"""Trace-time argument checks shared by every operator.

Wrong dtype -> TypeError, broken shape rule -> ValueError, both naming the
arguments and their shapes, raised when the call is traced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

SUPPORTED_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))
MAX_RANK = 8


def _dtype_names() -> str:
    return ", ".join(d.name for d in SUPPORTED_DTYPES)


def float_arrays(op: str, **args: Any) -> list[jax.Array]:
    """Converts each argument with ``jnp.asarray`` and checks its dtype and rank.

    All arguments must share one supported dtype.

    Raises:
      TypeError: an argument has an unsupported dtype, or the dtypes differ.
      ValueError: an argument has rank above 8.
    """
    arrays = []
    for name, value in args.items():
        # The dtype as given: jnp.asarray would silently turn float64 into
        # float32 when x64 is off.
        given = getattr(value, "dtype", None)
        try:
            a = jnp.asarray(value)
        except TypeError as e:
            raise TypeError(f"{op}: {name} is not an array: {e}") from None
        dtype = jnp.dtype(given) if given is not None else a.dtype
        if dtype not in SUPPORTED_DTYPES:
            raise TypeError(
                f"{op}: {name} has dtype {dtype}; supported dtypes are {_dtype_names()}"
            )
        if a.ndim > MAX_RANK:
            raise ValueError(f"{op}: {name} has rank {a.ndim} (shape {a.shape}); at most 8")
        arrays.append(a)
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) > 1:
        listing = ", ".join(f"{n}: {a.dtype}" for n, a in zip(args, arrays))
        raise TypeError(f"{op}: all tensor arguments must share one dtype; got {listing}")
    return arrays


def _listing(names: Sequence[str], arrays: Sequence[jax.Array]) -> str:
    return ", ".join(f"{n}{tuple(a.shape)}" for n, a in zip(names, arrays))


def broadcast_shape(op: str, names: Sequence[str], arrays: Sequence[jax.Array]) -> tuple[int, ...]:
    """The numpy broadcast shape of the arrays; ValueError naming them if none."""
    try:
        return tuple(np.broadcast_shapes(*(a.shape for a in arrays)))
    except ValueError:
        raise ValueError(
            f"{op}: shapes do not broadcast together: {_listing(names, arrays)}"
        ) from None


def same_shape(op: str, names: Sequence[str], arrays: Sequence[jax.Array]) -> None:
    """ValueError naming the arrays unless they all have one shape."""
    if len({a.shape for a in arrays}) > 1:
        raise ValueError(f"{op}: arguments must have the same shape; got {_listing(names, arrays)}")


def real_number(op: str, name: str, value: Any) -> float:
    """A Python float from a static scalar argument; TypeError otherwise."""
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"{op}: {name} must be a static Python number, not a traced value")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {name} must be a real number, got {value!r}") from None
