"""The private JAX APIs jax_aclnn relies on, gathered in one place.

Primitives, lowering and batching rules are not part of JAX's stable public
API; every such import lives here so that a JAX upgrade is fixed in one file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax._src import core as _core
from jax._src import dispatch as _dispatch
from jax._src import sharding_impls as _sharding_impls
from jax._src.interpreters import ad, batching, mlir

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

# Autodiff rules of primitives (jax 0.10.2: jax._src.interpreters.ad).
primitive_jvps = ad.primitive_jvps
primitive_transposes = ad.primitive_transposes
#: A symbolic zero tangent or cotangent.
Zero = ad.Zero
instantiate_zeros = ad.instantiate_zeros
#: Whether a transpose rule's operand is the linear input being transposed.
is_undefined_primal = ad.is_undefined_primal


def _aval_varying_axes(aval: Any) -> frozenset:
    mat = getattr(aval, "mat", None)  # jax >= 0.9: varying/unreduced/reduced axes
    return frozenset(mat.varying if mat is not None else getattr(aval, "vma", ()))


def varying_axes(x: jax.Array) -> frozenset:
    """The manual mesh axes ``x`` varies over inside ``shard_map`` (its
    "vma"; empty outside, or when shard_map's ``check_vma`` is off)."""
    return _aval_varying_axes(jax.typeof(x))


def match_varying_axes(args: Sequence[Any]) -> list[Any]:
    """Operands cast to vary over the union of their manual axes, as lax's
    n-ary operators do under ``shard_map`` with ``check_vma``."""
    return list(_core.auto_insert_reshard(*args))


def with_varying_axes(out: Any, in_avals: Sequence[Any]) -> Any:
    """The output aval ``out`` varying over the manual axes of ``in_avals``."""
    vma = frozenset().union(*(_aval_varying_axes(a) for a in in_avals))
    if not vma:
        return out
    return out.update(sharding=_core.get_cur_mesh_sharding(),
                      manual_axis_type=_core.ManualAxisType(varying=vma))


def register_cpu_ffi_type(name: str, registration: dict[str, Any]) -> None:
    """Registers an FFI type in XLA's process-wide registry for the CPU,
    whether or not JAX's CPU backend has started (jaxlib's CPU client does
    the same for the types queued before it starts)."""
    from jax._src.lib import _jax

    _jax.register_custom_type(name, registration)


def require_devices_during_lowering(primitive: Primitive) -> None:
    """Lower ``primitive`` knowing the device assignment, which
    ``custom_partitioning`` needs (TransformerEngine-JAX does the same)."""
    _dispatch.prim_requires_devices_during_lowering.add(primitive)


def register_lowering_per_use(primitive: Primitive, rule: Any) -> None:
    """Registers a lowering rule run at each use of ``primitive``, seeing
    the values of its operands (``cacheable=False``, jax 0.8.1 to 0.10; by default
    JAX lowers a primitive once per operand types, with function arguments
    for operands)."""
    mlir.register_lowering(primitive, rule, cacheable=False)


def is_function_argument(value: Any) -> bool:
    """Whether an MLIR value being lowered is an argument of the function
    that holds it (jax 0.8.1 to 0.10: ``ir.BlockArgument``, as JAX's own
    lowering tests), not an operation's result: in the entry function, a
    parameter of the jitted program, whose buffer XLA never hands to an
    operation's result unless donated."""
    return isinstance(value, mlir.ir.BlockArgument)


def spmd_partitioned(ctx: mlir.LoweringRuleContext) -> bool:
    """Whether XLA's SPMD partitioner will split the program being lowered
    over several devices outside any ``shard_map``.

    Inside a ``shard_map`` whose manual axes are a part of the mesh,
    ``custom_partitioning`` sees shardings of the device subgroups without
    axis names (and, under the deprecated ``with mesh:``, XLA's partitioner
    aborts on the full-mesh shardings it returns), so there the operator is
    a plain custom call: replicated over the remaining automatic axes.
    """
    context = ctx.module_context.axis_context
    if isinstance(context, _sharding_impls.ShardingContext):
        return context.device_assignment is not None and len(context.device_assignment) > 1
    return False


__all__ = [
    "Primitive",
    "Zero",
    "apply_primitive",
    "instantiate_zeros",
    "is_function_argument",
    "is_undefined_primal",
    "lower_fun",
    "lower_per_platform",
    "match_varying_axes",
    "not_mapped",
    "primitive_batchers",
    "primitive_jvps",
    "primitive_transposes",
    "register_cpu_ffi_type",
    "register_lowering",
    "register_lowering_per_use",
    "require_devices_during_lowering",
    "spmd_partitioned",
    "varying_axes",
    "with_varying_axes",
]
