"""The runtime API: executor reuse, loading CANN, and introspection of what
the FFI handlers did (:func:`runtime_stats`, ...) and of the build."""

from __future__ import annotations

import ctypes
import os
from typing import Any

from jax_aclnn import _compat, _registration, _switches
from jax_aclnn._loading import HOST_PROVIDER_LIBRARY, _aclnn_ffi


def set_executor_reuse(enabled: bool) -> bool:
    """Turns executor reuse in compiled programs on (the default) or off.

    With reuse, each custom call site of a compiled program keeps a
    repeatable aclnn executor (``aclSetAclOpExecutorRepeatable``) and
    re-targets it at each step's buffers, so steady-state steps run only the
    execute phase. Off, every call runs descriptor creation,
    ``aclnnXxxGetWorkspaceSize``, ``aclnnXxx`` and cleanup. The setting applies
    to calls from now on, in every compiled program; executors kept so far
    stay until their program is freed. ``JAX_ACLNN_EXECUTOR_REUSE=0`` in the
    environment turns reuse off at import.

    Args:
      enabled: whether call sites keep repeatable executors.

    Returns:
      The previous setting.
    """
    previous = bool(_aclnn_ffi.executor_reuse())
    _aclnn_ffi.set_executor_reuse(bool(enabled))
    return previous


set_executor_reuse(_switches.executor_reuse_at_import())


def load_cann(path: str | os.PathLike[str] | None = None) -> str:
    """Loads the CANN aclnn libraries that serve the NPU platform.

    The libraries ``libopapi.so`` (operators), ``libnnopbase.so`` (descriptors
    and executors) and ``libascendcl.so`` (runtime) are looked up in
    ``lib64/`` then ``lib/`` under ``path`` if given, else under
    ``$ASCEND_HOME_PATH``, else under ``/usr/local/Ascend/ascend-toolkit/latest``;
    never in the working directory. The first NPU operator call does this
    itself; calling it directly checks an install.

    Args:
      path: the CANN toolkit root (the directory holding ``lib64``).

    Returns:
      The directory the libraries were loaded from.

    Raises:
      ValueError: ``path`` is relative or empty (CANN is loaded only from an
        absolute install path), or holds a NUL byte; nothing is opened then.
      RuntimeError: naming every location searched and the library missing
        there, or a library that could not be loaded.
    """
    return _aclnn_ffi.load_cann(None if path is None else os.fspath(path))


def host_kernel_target() -> str:
    """The CPU target whose kernels the host provider runs, chosen at run time.

    Returns:
      ``"x86-64"``, ``"x86-64-v3"`` (AVX2/FMA/F16C) or ``"x86-64-v4"``
      (AVX-512); ``"armv8-a"`` (NEON) or ``"armv8.2-a+sve"`` (SVE, from the
      kernel's HWCAP); ``"baseline"`` on other architectures; or
      ``"native"`` for a build made with ``JAX_ACLNN_NATIVE_ARCH=ON``.
    """
    library = ctypes.CDLL(str(HOST_PROVIDER_LIBRARY))  # already loaded: the same handle
    library.JaxAclnnHostKernelTarget.restype = ctypes.c_char_p
    return library.JaxAclnnHostKernelTarget().decode()


def host_half_conversions() -> str:
    """How the host provider's chosen kernels convert contiguous float16 to
    and from float32: ``"F16C vcvtph2ps/vcvtps2ph"`` (x86-64-v3 and v4),
    ``"NEON fcvtl/fcvtn"`` (aarch64) or ``"portable formulas"`` (the x86-64
    baseline; strided views always). bfloat16 is a 16-bit shift everywhere."""
    library = ctypes.CDLL(str(HOST_PROVIDER_LIBRARY))  # already loaded: the same handle
    library.JaxAclnnHostHalfConversions.restype = ctypes.c_char_p
    return library.JaxAclnnHostHalfConversions().decode()


def build_info() -> dict[str, Any]:
    """What this install is made of, for reports such as ``python -m jax_aclnn info``.

    Returns:
      ``{"build": str`` (the compiled extension's build options),
      ``"ffi_api": str`` (the XLA FFI API version of the headers the
      handlers were compiled against, e.g. ``"0.1"``: pip's isolated build
      uses the floor jaxlib's; a build without isolation the environment's
      jaxlib's), ``"jaxlib": str`` (the jaxlib releases this build runs on,
      a version specifier: those of that FFI API version or newer),
      ``"host_kernel_target": str`` (:func:`host_kernel_target`),
      ``"host_half_conversions": str`` (how the chosen kernels convert
      float16: the CPU's instructions or portable formulas),
      ``"host_provider_library": str`` (the bundled host provider's path),
      ``"handler_platforms": tuple[str, ...]`` (the JAX platforms with aclnn
      handlers), ``"npu_platform": str`` (the Ascend PJRT plugin's platform
      name, ``$JAX_ACLNN_NPU_PLATFORM`` or ``"npu"``)``}``.

    Raises:
      ValueError: ``$JAX_ACLNN_NPU_PLATFORM`` names the CPU platform, or
        ``$JAX_ACLNN_EXECUTOR_REUSE`` is neither ``0`` nor ``1`` (the
        switches an operator's first lowering checks).
    """
    _switches.executor_reuse_from_env()
    ffi_api = tuple(_aclnn_ffi.ffi_api_version())
    return {
        "build": _aclnn_ffi.build_info(),
        "ffi_api": ".".join(map(str, ffi_api)),
        "jaxlib": _compat.jaxlib_specifier(ffi_api),
        "host_kernel_target": host_kernel_target(),
        "host_half_conversions": host_half_conversions(),
        "host_provider_library": str(HOST_PROVIDER_LIBRARY),
        "handler_platforms": _registration.handler_platforms(),
        "npu_platform": _switches.npu_platform(),
    }


def default_cann_roots() -> list[str]:
    """Where :func:`load_cann` looks when given no path, in order."""
    return list(_aclnn_ffi.default_cann_roots())


def provider() -> str:
    """The aclnn implementation serving the CPU: ``"host"`` or a CANN library directory."""
    origin = _aclnn_ffi.cpu_provider()
    kind, _, where = origin.partition(":")
    return "host" if kind == "host" else where


def runtime_stats() -> dict[str, Any]:
    """Counts of what the FFI handlers did through the aclnn interface.

    Returns:
      A dict with ``calls``, ``live_tensors``, ``live_executors`` and
      ``provider``, ``{"calls": {aclnn operator: {"get_workspace_size": int,
      "execute": int}}, "live_tensors": int, "live_executors": int,
      "provider": str}``. ``calls`` counts the calls the FFI handlers have
      completed since import or :func:`reset_runtime_stats`: JAX runs a program
      asynchronously, so one still running is counted in part (a value read
      from one device of a multi-device step does not wait for the other
      devices' calls); wait for all of its outputs
      (``jax.block_until_ready``) before reading the counts.
      ``live_tensors`` (aclTensor and aclScalar descriptors created and not
      yet destroyed) and ``live_executors`` (executors created and not yet
      consumed or destroyed) are live counts, never reset. Call-site
      executors are kept for executor reuse and are destroyed when the
      compiled program is freed (``jax.clear_caches()`` and garbage
      collection). ``provider`` is ``"host"`` for the bundled host provider,
      else the CANN library directory.
    """
    stats = dict(_aclnn_ffi.stats())
    stats["provider"] = provider()
    return stats


def reset_runtime_stats() -> None:
    """Resets the per-operator call counts of :func:`runtime_stats` (not the live counts)."""
    _aclnn_ffi.reset_stats()
