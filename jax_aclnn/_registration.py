"""Registration of the FFI state type and the custom-call targets with JAX:
for the CPU platform at import, for the NPU platform when an operator is
first lowered; and what follows from the targets' names
(:func:`export_disabled_checks`)."""

from __future__ import annotations

import threading

import jax
import jax.export  # export_disabled_checks (jax 0.7 does not import it with jax)

from jax_aclnn import _compat, _switches
from jax_aclnn._loading import _aclnn_ffi

#: Name of the FFI state type (the per-call-site executor cache).
STATE_TYPE_NAME = "jax_aclnn.CallState"


def handler_platforms() -> tuple[str, ...]:
    """The JAX platforms on which jax_aclnn operators run as aclnn custom calls."""
    return ("cpu", _switches.npu_platform())


#: The custom-call targets, one per operator (``aclnn_<name>``), all served
#: by the same handlers.
_targets: list[str] = []


def _register_cpu() -> None:
    """Registers the state type for JAX's CPU platform.

    XLA requires an FFI type to be registered before any handler that uses
    it, while jaxlib, when its CPU backend starts, registers queued handlers
    before queued types. So the type goes straight into XLA's process-wide
    registry (what jaxlib's CPU client itself does with queued types), which
    needs no backend: importing jax_aclnn starts none, and a program can
    still configure JAX afterwards (``jax_num_cpu_devices``,
    ``jax.distributed.initialize``).
    """
    _compat.register_cpu_ffi_type(STATE_TYPE_NAME, _aclnn_ffi.state_type())


_register_cpu()
_handlers = _aclnn_ffi.registrations()
_npu_registered = False
_npu_lock = threading.Lock()


def register_target(target: str) -> None:
    """Registers an operator's custom-call target with the handlers: for the
    CPU platform now, for the NPU platform now or when an operator is first
    lowered (:func:`ensure_npu_registered`)."""
    with _npu_lock:
        _targets.append(target)
        jax.ffi.register_ffi_target(target, _handlers["cpu"], platform="cpu")
        if _npu_registered:
            jax.ffi.register_ffi_target(target, _handlers["npu"],
                                        platform=_switches.npu_platform())


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
    _switches.executor_reuse_from_env()  # refuses a bad value, which import let pass
    with _npu_lock:
        if _npu_registered:
            return
        npu = _switches.npu_platform()
        try:
            jax.devices(npu)
        except RuntimeError:
            pass
        _compat.register_ffi_type(STATE_TYPE_NAME, _aclnn_ffi.state_type(), platform=npu)
        for target in _targets:
            jax.ffi.register_ffi_target(target, _handlers["npu"], platform=npu)
        _npu_registered = True


def export_disabled_checks() -> list[jax.export.DisabledSafetyCheck]:
    """``disabled_checks`` for :func:`jax.export.export` of a program that uses
    jax_aclnn operators.

    jax.export refuses custom calls outside JAX's own list of targets with
    compatibility guarantees. jax_aclnn's targets (``aclnn_<operator>``,
    the declared operators' included) keep their names and attributes; a
    process that runs the exported program must import jax_aclnn, which
    registers them (and declare the same operators)::

        checks = aclnn.export_disabled_checks()
        exported = jax.export.export(jax.jit(f), disabled_checks=checks)(x)

    Returns:
      One ``jax.export.DisabledSafetyCheck.custom_call`` per jax_aclnn
      custom-call target.
    """
    return [jax.export.DisabledSafetyCheck.custom_call(t) for t in _targets]
