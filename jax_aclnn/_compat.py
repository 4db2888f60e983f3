"""The supported JAX releases, and the private JAX APIs jax_aclnn relies on,
gathered in one place.

Primitives, lowering and batching rules are not part of JAX's stable public
API; every such import lives here so that a JAX upgrade is fixed in one file.
Where an API changed within the supported range, a ladder picks the form the
installed JAX has (feature detection), each rung naming the releases it serves.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import jax
import jaxlib.version

#: jax and jaxlib releases supported: ``>= floor, < ceiling``, but for
#: :data:`EXCLUDED_JAX` (pyproject.toml declares the same range,
#: :func:`version_specifier`, and builds against the floor's XLA FFI headers).
SUPPORTED_JAX = ("0.7.2", "0.11")
#: Releases in the range that are not supported: jax 0.8.0 lacks the CPU type
#: registration that :func:`register_cpu_ffi_type` needs.
EXCLUDED_JAX = ("0.8.0",)


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.match(r"\d+(?:\.\d+)*", version).group().split("."))


def version_specifier() -> str:
    """The supported releases as a version specifier (pyproject.toml's):
    ``>=0.7.2,!=0.8.0,<0.11``."""
    floor, ceiling = SUPPORTED_JAX
    return ",".join([f">={floor}", *(f"!={v}" for v in EXCLUDED_JAX), f"<{ceiling}"])


def check_jax_version(jax_version: str, jaxlib_version: str) -> None:
    """Raises ImportError unless both versions are supported
    (:data:`SUPPORTED_JAX`, :data:`EXCLUDED_JAX`)."""
    floor, ceiling = SUPPORTED_JAX
    spec = version_specifier()
    for name, version in (("jax", jax_version), ("jaxlib", jaxlib_version)):
        release = _release(version)
        if not _release(floor) <= release < _release(ceiling) or any(
                release == _release(v) for v in EXCLUDED_JAX):
            raise ImportError(
                f"jax_aclnn supports {name} {spec}, but {name} {version} is "
                f"installed: pip install 'jax{spec}' 'jaxlib{spec}'")


check_jax_version(jax.__version__, jaxlib.version.__version__)

from jax._src import core as _core  # noqa: E402
from jax._src import dispatch as _dispatch  # noqa: E402
from jax._src import sharding_impls as _sharding_impls  # noqa: E402
from jax._src.interpreters import ad, batching, mlir  # noqa: E402
from jax.extend.core import Primitive  # noqa: E402

apply_primitive = _dispatch.apply_primitive
#: The batch dimension of an unmapped operand in a batching rule.
not_mapped = None
primitive_batchers = batching.primitive_batchers
register_lowering = mlir.register_lowering
lower_fun = mlir.lower_fun


def lower_per_platform(ctx: Any, *args: Any, **kwargs: Any) -> Any:
    """``mlir.lower_per_platform`` (jax 0.7.2 to 0.10). Its multi-platform
    branch (``jax.export`` for several platforms) concatenates a list with
    ``ctx.avals_out``, which JAX hands an uncacheable lowering rule as a
    tuple: give it a list."""
    return mlir.lower_per_platform(ctx.replace(avals_out=list(ctx.avals_out)), *args, **kwargs)


# Autodiff rules of primitives (jax 0.7.2 to 0.10: jax._src.interpreters.ad).
primitive_jvps = ad.primitive_jvps
primitive_transposes = ad.primitive_transposes
#: A symbolic zero tangent or cotangent.
Zero = ad.Zero
instantiate_zeros = ad.instantiate_zeros
#: Whether a transpose rule's operand is the linear input being transposed.
is_undefined_primal = ad.is_undefined_primal


def _aval_varying_axes(aval: Any) -> frozenset:
    mat = getattr(aval, "mat", None)  # jax >= 0.10: varying/unreduced/reduced axes
    # jax 0.7 to 0.9: the varying manual axes only
    return frozenset(mat.varying if mat is not None else getattr(aval, "vma", ()))


try:  # jax >= 0.10
    _insert_varying_casts = _core.auto_insert_reshard
except AttributeError:  # jax 0.7 to 0.9
    _insert_varying_casts = _core.standard_insert_pvary


_psum_batching_repaired = False


def repair_psum_batching() -> None:
    """Repairs a JAX bug of jax 0.8 (fixed in 0.9; a no-op on other releases):
    under ``vmap``, ``psum`` over ``shard_map`` axes only binds
    ``psum_invariant`` with an ``axis_index_groups`` it does not take
    (TypeError), which synchronized ``batch_norm`` under ``vmap`` meets.

    The repair installs jax 0.9's batching rule for that case (the same psum,
    per element) in place of jax 0.8's, once per process; the other cases
    keep jax 0.8's rule. :func:`jax_aclnn.batch_norm` calls it when given an
    ``axis_name``, so a program that never synchronizes a batch norm runs
    with JAX's own rule."""
    global _psum_batching_repaired
    if _psum_batching_repaired or not (0, 8) <= _release(jax.__version__) < (0, 9):
        return
    from jax._src.lax import parallel

    psum = parallel.psum_invariant_p
    rule = batching.fancy_primitive_batchers[psum]

    def fixed(axis_data, vals_in, dims_in, axes):
        if axis_data.name not in axes and not any(isinstance(a, int) for a in axes):
            # one primitive for all operands in jax 0.8.1, 0.8.2; one per operand in 0.8.3
            return psum.bind(*vals_in, axes=axes), dims_in if psum.multiple_results else dims_in[0]
        return rule(axis_data, vals_in, dims_in, axes)

    batching.fancy_primitive_batchers[psum] = fixed
    _psum_batching_repaired = True


def match_varying_axes(args: Sequence[Any]) -> list[Any]:
    """Operands cast to vary over the union of their manual axes, as lax's
    n-ary operators do under ``shard_map`` with ``check_vma``."""
    return list(_insert_varying_casts(*args))


def with_operand_types(out: Any, in_avals: Sequence[Any], spec: Sequence[Any]) -> Any:
    """The output aval ``out`` on the mesh of ``in_avals``, sharded as
    ``spec`` (a PartitionSpec entry per dimension: the mesh axes of the
    operand dimensions it comes from; explicit axes only, as ``jax.typeof``
    shows them) and varying over the manual axes of ``in_avals``."""
    vma = frozenset().union(*(_aval_varying_axes(a) for a in in_avals))
    meshes = [a.sharding.mesh for a in in_avals
              if getattr(a, "sharding", None) is not None and not a.sharding.mesh.empty]
    if not meshes and not vma:
        return out
    if meshes:
        sharding = jax.sharding.NamedSharding(meshes[0], jax.sharding.PartitionSpec(*spec))
    else:
        sharding = _core.get_cur_mesh_sharding()
    if hasattr(_core, "ManualAxisType"):  # jax >= 0.10
        return out.update(sharding=sharding, manual_axis_type=_core.ManualAxisType(varying=vma))
    return out.update(sharding=sharding, vma=vma)  # jax 0.7 to 0.9


def sharded_dims(x: Any) -> frozenset[int]:
    """The dimensions of ``x`` that its type shards (explicit mesh axes,
    jax >= 0.7.2: ``jax.typeof(x).sharding``); a reshape merging one of them
    with another dimension is a ShardingTypeError."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    spec = tuple(sharding.spec) if sharding is not None else ()
    return frozenset(i for i, entry in enumerate(spec) if entry is not None)


def register_cpu_ffi_type(name: str, registration: dict[str, Any]) -> None:
    """Registers an FFI type in XLA's process-wide registry for the CPU,
    whether or not JAX's CPU backend has started (jaxlib's CPU client does
    the same for the types queued before it starts). The public
    ``jax.ffi.register_ffi_type`` only queues it until then.

    ``registration`` is ``{"type_id": capsule, "type_info": capsule}``; jax
    0.7 (FFI API 0.1) registers the type id only, which its public
    ``jax.ffi.register_ffi_type_id`` does at once for the CPU: the handlers
    hand that runtime the state's deleter with the state itself."""
    from jax._src.lib import _jax

    if hasattr(_jax, "register_custom_type"):  # jax 0.8.1 .. 0.10 (0.8.0 lacks it)
        _jax.register_custom_type(name, registration)
    else:  # jax 0.7
        jax.ffi.register_ffi_type_id(name, registration["type_id"], platform="cpu")


def register_ffi_type(name: str, registration: dict[str, Any], platform: str) -> None:
    """``jax.ffi.register_ffi_type`` (jax 0.8.1 .. 0.10); jax 0.7 (FFI API
    0.1) registers the type id only (``jax.ffi.register_ffi_type_id``), as
    :func:`register_cpu_ffi_type`."""
    if hasattr(jax.ffi, "register_ffi_type"):
        jax.ffi.register_ffi_type(name, registration, platform=platform)
    else:  # jax 0.7
        jax.ffi.register_ffi_type_id(name, registration["type_id"], platform=platform)


def require_devices_during_lowering(primitive: Primitive) -> None:
    """Lower ``primitive`` knowing the device assignment, which
    ``custom_partitioning`` needs (TransformerEngine-JAX does the same)."""
    _dispatch.prim_requires_devices_during_lowering.add(primitive)


def register_lowering_per_use(primitive: Primitive, rule: Any) -> None:
    """Registers a lowering rule run at each use of ``primitive``, seeing
    the values of its operands (``cacheable=False``, jax 0.7.2 to 0.10; by default
    JAX lowers a primitive once per operand types, with function arguments
    for operands)."""
    mlir.register_lowering(primitive, rule, cacheable=False)


def is_function_argument(value: Any) -> bool:
    """Whether an MLIR value being lowered is an argument of the function
    that holds it (jax 0.7.2 to 0.10: ``ir.BlockArgument``, as JAX's own
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
    "EXCLUDED_JAX",
    "SUPPORTED_JAX",
    "Primitive",
    "Zero",
    "apply_primitive",
    "instantiate_zeros",
    "is_function_argument",
    "is_undefined_primal",
    "check_jax_version",
    "lower_fun",
    "lower_per_platform",
    "match_varying_axes",
    "not_mapped",
    "primitive_batchers",
    "primitive_jvps",
    "primitive_transposes",
    "register_cpu_ffi_type",
    "register_ffi_type",
    "register_lowering",
    "register_lowering_per_use",
    "require_devices_during_lowering",
    "sharded_dims",
    "spmd_partitioned",
    "version_specifier",
    "with_operand_types",
]
