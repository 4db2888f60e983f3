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
import jax.numpy as jnp
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

#: The XLA FFI API version (0.minor) of the XLA in jaxlib, from the first
#: release of each (read from each release's headers, xla/ffi/api/c_api.h;
#: tests/test_jax_range.py checks the installed one). XLA runs handlers built
#: against its own version's headers or an older version's, never a newer
#: one's: jax_aclnn's isolated build uses the floor's headers (FFI API 0.1),
#: which every supported jaxlib runs.
#: Whether ``psum`` inside a ``custom_partitioning`` call's partitioned
#: function compiles on an explicit mesh (jax 0.7's XLA:CPU refuses its
#: all-reduce: "Unsupported reduction computation").
PSUM_IN_PARTITIONED_CALL = _release(jax.__version__) >= (0, 8)

FFI_API_MINOR_SINCE = (("0.7.0", 1), ("0.8.0", 2), ("0.9.1", 3))


def ffi_api_minor(jaxlib_version: str) -> int:
    """The FFI API minor version of a jaxlib release (0 before 0.7.0)."""
    release = _release(jaxlib_version)
    return max((m for first, m in FFI_API_MINOR_SINCE if release >= _release(first)), default=0)


def jaxlib_specifier(ffi_api: tuple[int, int]) -> str | None:
    """The supported jaxlib releases that run handlers built against the
    headers of FFI API ``ffi_api`` (``(0, 3)``: ``>=0.9.1,<0.11``); None if
    none does (headers newer than every supported jaxlib's)."""
    major, minor = ffi_api
    first = next((v for v, m in FFI_API_MINOR_SINCE if m >= minor), None)
    if major != 0 or first is None:
        return None
    floor, ceiling = SUPPORTED_JAX
    low = max(floor, first, key=_release)
    excluded = [v for v in EXCLUDED_JAX if _release(v) >= _release(low)]
    return ",".join([f">={low}", *(f"!={v}" for v in excluded), f"<{ceiling}"])


def check_ffi_api(ffi_api: tuple[int, int], jaxlib_version: str) -> None:
    """Raises ImportError unless jaxlib ``jaxlib_version`` runs handlers built
    against the headers of FFI API ``ffi_api`` (the build's,
    ``_aclnn_ffi.ffi_api_version()``). Registering them with an older XLA
    would fail, or write past the older API's structs."""
    runtime = ffi_api_minor(jaxlib_version)
    if ffi_api[0] == 0 and ffi_api[1] <= runtime:
        return
    built = ".".join(map(str, ffi_api))
    spec = jaxlib_specifier(ffi_api)
    fix = f"install jaxlib{spec}, or rebuild" if spec else "rebuild"
    raise ImportError(
        f"jax_aclnn was built against XLA FFI API {built} headers, which jaxlib {jaxlib_version} "
        f"(FFI API 0.{runtime}) cannot run: {fix} jax_aclnn with `pip install .`, whose "
        f"isolated build uses jaxlib {SUPPORTED_JAX[0]}'s headers, which every supported jaxlib runs")

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


def varying_axes(x: Any) -> frozenset:
    """The ``shard_map`` manual axes over which ``x`` varies (its type's vma)."""
    return _aval_varying_axes(jax.typeof(x))


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


def dim_specs(x: Any) -> tuple[Any, ...]:
    """The PartitionSpec entry of each dimension of ``x``'s type (explicit
    mesh axes; None for the others)."""
    spec = tuple(type_spec(jax.typeof(x)) or ())
    return spec + (None,) * (jnp.ndim(x) - len(spec))


def reshape(x: Any, shape: Sequence[int], spec: Sequence[Any]) -> Any:
    """``x`` reshaped to ``shape``. Where ``x``'s type shards dimensions
    (explicit mesh axes), JAX asks for the result's sharding, which ``spec``
    gives (an entry per result dimension: a merged dimension takes the
    entry of its majormost dimension, the only sharded one)."""
    if not sharded_dims(x):
        return jnp.reshape(x, shape)
    sharding = jax.typeof(x).sharding.update(spec=jax.sharding.PartitionSpec(*spec))
    return jax.lax.reshape(x, tuple(shape), out_sharding=sharding)


def type_spec(aval: Any) -> jax.sharding.PartitionSpec | None:
    """The PartitionSpec of an aval's type (explicit mesh axes only, as
    ``jax.typeof`` shows them), or None when it carries no sharding."""
    sharding = getattr(aval, "sharding", None)
    return getattr(sharding, "spec", None)


def reshard_like(x: Any, aval: Any) -> Any:
    """``x`` resharded to the sharding of ``aval``'s type where the two
    differ (explicit mesh axes): a transpose rule's cotangent must have its
    primal's type, e.g. the gradient of a replicated (C,) weight from
    per-channel sums sharded as a channel-sharded input."""
    want, have = type_spec(aval), type_spec(jax.typeof(x))
    if want is None or have is None:
        return x
    pad = lambda spec: tuple(spec) + (None,) * (jnp.ndim(x) - len(spec))  # noqa: E731
    if pad(want) == pad(have):
        return x
    return jax.sharding.reshard(x, jax.typeof(x).sharding.update(spec=want))


def mesh_spec(sharding: Any, mesh: Any) -> jax.sharding.PartitionSpec | None:
    """The PartitionSpec over ``mesh`` of a sharding that
    ``custom_partitioning`` hands a partition callback undecoded
    (``decode_shardings=False``: a ``GSPMDSharding``, jax 0.7.2 to 0.10), or
    None where no PartitionSpec of ``mesh`` expresses it: XLA may propagate
    such a sharding, e.g. through a reshape of an unevenly sharded array."""
    if isinstance(sharding, jax.sharding.NamedSharding):
        return sharding.spec
    hlo = getattr(sharding, "_hlo_sharding", None)
    if hlo is None or mesh.empty:
        return None
    try:
        return _sharding_impls.parse_flatten_op_sharding(hlo, mesh)[0]
    except (KeyError, ValueError, NotImplementedError, AssertionError):
        return None


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


def for_export(ctx: mlir.LoweringRuleContext) -> bool:
    """Whether the program being lowered is for ``jax.export`` (jax 0.7.2 to
    0.10: ``LoweringParameters.for_export``), whose serialization takes no
    Python callback (``custom_partitioning``'s)."""
    return bool(getattr(ctx.module_context.lowering_parameters, "for_export", False))


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
    "FFI_API_MINOR_SINCE",
    "SUPPORTED_JAX",
    "Primitive",
    "Zero",
    "apply_primitive",
    "instantiate_zeros",
    "is_function_argument",
    "is_undefined_primal",
    "check_ffi_api",
    "check_jax_version",
    "dim_specs",
    "for_export",
    "ffi_api_minor",
    "jaxlib_specifier",
    "lower_fun",
    "lower_per_platform",
    "match_varying_axes",
    "mesh_spec",
    "not_mapped",
    "primitive_batchers",
    "primitive_jvps",
    "primitive_transposes",
    "register_cpu_ffi_type",
    "register_ffi_type",
    "register_lowering",
    "register_lowering_per_use",
    "require_devices_during_lowering",
    "reshape",
    "reshard_like",
    "sharded_dims",
    "spmd_partitioned",
    "type_spec",
    "varying_axes",
    "version_specifier",
    "with_operand_types",
]
