"""Loading of the compiled extension, FFI target registration and runtime
introspection (:func:`runtime_stats`, :func:`load_cann`, ...).

The nanobind module ``_aclnn_ffi`` holds the XLA FFI handlers. They reach an
aclnn provider only through ``dlopen``: the bundled host provider
(``libaclnn_host.so``, beside this file) serves JAX's ``"cpu"`` platform, and
CANN's libraries serve the Ascend NPU platform, loaded on first use.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from pathlib import Path
from typing import Any

import jax


def _compiled_dir() -> Path:
    """The directory holding the compiled extension and the host provider.

    Normally this package's own. When an uninstalled source checkout shadows
    the installed package (``python -m jax_aclnn`` run from the repository
    root), the compiled files are those of the installed copy.
    """
    here = Path(__file__).resolve().parent
    for entry in [str(here.parent)] + sys.path:
        candidate = Path(entry or ".").resolve() / "jax_aclnn"
        if any(candidate.glob("_aclnn_ffi*.so")):
            return candidate
    raise ImportError(
        "jax_aclnn's compiled extension (_aclnn_ffi) is missing: install the package with "
        "`pip install .`"
    )


#: Directory of the compiled extension and the host provider library.
PACKAGE_DIR = _compiled_dir()
if PACKAGE_DIR != Path(__file__).resolve().parent:
    sys.modules["jax_aclnn"].__path__.append(str(PACKAGE_DIR))

from jax_aclnn import _aclnn_ffi, _compat  # noqa: E402
#: The bundled host aclnn provider.
HOST_PROVIDER_LIBRARY = PACKAGE_DIR / "libaclnn_host.so"

#: Environment variable naming the Ascend PJRT plugin's platform.
NPU_PLATFORM_ENV = "JAX_ACLNN_NPU_PLATFORM"
#: Environment variable: ``0`` turns executor reuse off from import on.
EXECUTOR_REUSE_ENV = "JAX_ACLNN_EXECUTOR_REUSE"
#: Name of the FFI state type (the per-call-site executor cache).
STATE_TYPE_NAME = "jax_aclnn.CallState"


#: Platform names of JAX's CPU, which the host provider's handlers serve.
CPU_PLATFORM_NAMES = ("cpu", "host")


def npu_platform() -> str:
    """The Ascend PJRT plugin's platform name: ``$JAX_ACLNN_NPU_PLATFORM`` or ``"npu"``.

    Raises:
      ValueError: the variable names the CPU platform, which has its own
        (host provider) handlers.
    """
    platform = os.environ.get(NPU_PLATFORM_ENV, "npu")
    if platform.strip().lower() in CPU_PLATFORM_NAMES:
        raise ValueError(
            f"{NPU_PLATFORM_ENV}={platform!r} names JAX's CPU platform, which jax_aclnn already "
            "serves with its host provider; set it to the Ascend PJRT plugin's platform name "
            "(e.g. 'npu'), or unset it"
        )
    return platform


def handler_platforms() -> tuple[str, ...]:
    """The JAX platforms on which jax_aclnn operators run as aclnn custom calls."""
    return ("cpu", npu_platform())


def _register_cpu() -> None:
    """Registers the state type and the targets for JAX's CPU platform.

    XLA requires an FFI type to be registered before any handler that uses
    it, while jaxlib, when its CPU backend starts, registers queued handlers
    before queued types. So the type goes straight into XLA's process-wide
    registry (what jaxlib's CPU client itself does with queued types), which
    needs no backend: importing jax_aclnn starts none, and a program can
    still configure JAX afterwards (``jax_num_cpu_devices``,
    ``jax.distributed.initialize``).
    """
    _compat.register_cpu_ffi_type(STATE_TYPE_NAME, _aclnn_ffi.state_type())
    for target, per_platform in _aclnn_ffi.registrations().items():
        jax.ffi.register_ffi_target(target, per_platform["cpu"], platform="cpu")


_aclnn_ffi.load_host_provider(str(HOST_PROVIDER_LIBRARY))
_register_cpu()
_npu_registered = False
_npu_lock = threading.Lock()


def ensure_npu_registered() -> None:
    """Registers the state type and targets for the NPU platform, once.

    Called when an operator is first lowered: the NPU plugin's backend is
    started first, so that the type is registered at once, before the
    targets. Without an NPU plugin the registrations are only queued in
    jaxlib, which is harmless.

    Raises:
      ValueError: ``$JAX_ACLNN_EXECUTOR_REUSE`` or ``$JAX_ACLNN_NPU_PLATFORM``
        has a value jax_aclnn does not take.
    """
    global _npu_registered
    executor_reuse_from_env()  # refuses a bad value, which import let pass
    with _npu_lock:
        if _npu_registered:
            return
        npu = npu_platform()
        try:
            jax.devices(npu)
        except RuntimeError:
            pass
        jax.ffi.register_ffi_type(STATE_TYPE_NAME, _aclnn_ffi.state_type(), platform=npu)
        for target, per_platform in _aclnn_ffi.registrations().items():
            jax.ffi.register_ffi_target(target, per_platform["npu"], platform=npu)
        _npu_registered = True


def export_disabled_checks() -> list[jax.export.DisabledSafetyCheck]:
    """``disabled_checks`` for :func:`jax.export.export` of a program that uses
    jax_aclnn operators.

    jax.export refuses custom calls outside JAX's own list of targets with
    compatibility guarantees. jax_aclnn's targets (``aclnn_<operator>``) keep
    their names and attributes; a process that runs the exported program
    must import jax_aclnn, which registers them::

        exported = jax.export.export(jax.jit(f), disabled_checks=aclnn.export_disabled_checks())(x)
    """
    return [jax.export.DisabledSafetyCheck.custom_call(t) for t in _aclnn_ffi.registrations()]


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


def executor_reuse_from_env() -> bool:
    """Whether ``$JAX_ACLNN_EXECUTOR_REUSE`` turns executor reuse on: unset
    or ``1`` on, ``0`` off.

    Raises:
      ValueError: any other value, naming the variable. Import takes such a
        value as on (an import error would be a traceback even in
        ``python -m jax_aclnn``, which checks first); the first lowering of
        an operator raises this.
    """
    value = os.environ.get(EXECUTOR_REUSE_ENV, "1")
    if value.strip() not in ("0", "1"):
        raise ValueError(f"{EXECUTOR_REUSE_ENV}={value!r}: expected 1 (reuse executors, the "
                         "default) or 0 (do not); set one of them, or unset it")
    return value.strip() == "1"


set_executor_reuse(os.environ.get(EXECUTOR_REUSE_ENV, "1").strip() != "0")


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
    """The CPU target whose kernels the host provider runs, chosen at run time
    (``"x86-64"``, ``"x86-64-v3"``: AVX2/FMA/F16C, ``"x86-64-v4"``: AVX-512;
    ``"baseline"`` on other architectures), or ``"native"`` for a build made
    with ``JAX_ACLNN_NATIVE_ARCH=ON``."""
    library = ctypes.CDLL(str(HOST_PROVIDER_LIBRARY))  # already loaded: the same handle
    library.JaxAclnnHostKernelTarget.restype = ctypes.c_char_p
    return library.JaxAclnnHostKernelTarget().decode()


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
      ``{"calls": {aclnn operator: {"get_workspace_size": int, "execute": int}},
      "live_tensors": int, "live_executors": int, "provider": str}``.
      ``calls`` count since import or :func:`reset_runtime_stats`;
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
