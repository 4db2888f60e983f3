"""The private JAX APIs jax_aclnn relies on, gathered in one place.

Primitives, lowering and batching rules are not part of JAX's stable public
API; every such import lives here so that a JAX upgrade is fixed in one file.
"""

from __future__ import annotations

import jax
from jax._src import dispatch as _dispatch
from jax._src.interpreters import batching, mlir

try:  # jax >= 0.4.36
    from jax.extend.core import Primitive
except ImportError:  # pragma: no cover - older jax
    from jax.core import Primitive  # type: ignore[attr-defined,no-redef]

apply_primitive = _dispatch.apply_primitive
#: The batch dimension of an unmapped operand in a batching rule.
not_mapped = None
primitive_batchers = batching.primitive_batchers
register_lowering = mlir.register_lowering
lower_fun = mlir.lower_fun
lower_per_platform = mlir.lower_per_platform
ffi_lowering = jax.ffi.ffi_lowering

__all__ = [
    "Primitive",
    "apply_primitive",
    "ffi_lowering",
    "lower_fun",
    "lower_per_platform",
    "not_mapped",
    "primitive_batchers",
    "register_lowering",
]
