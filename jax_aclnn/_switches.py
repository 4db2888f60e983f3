"""The environment switches and the reference-path switch.

* ``JAX_ACLNN_REFERENCE``: forces the pure-JAX reference path when a call is
  traced: ``all`` (or ``1``), or a comma-separated list of operator names
  such as ``swish_backward,logit_grad``; :func:`jax_aclnn.reference_path`
  does the same for a block of code (:data:`forced_in_context`);
* ``JAX_ACLNN_NPU_PLATFORM``: the Ascend PJRT plugin's platform name;
* ``JAX_ACLNN_EXECUTOR_REUSE``: ``0`` turns executor reuse off from import on
  (``1``, the default, on; another value is refused when an operator is
  first lowered).
"""

from __future__ import annotations

import contextvars
import os

REFERENCE_ENV = "JAX_ACLNN_REFERENCE"
#: Environment variable naming the Ascend PJRT plugin's platform.
NPU_PLATFORM_ENV = "JAX_ACLNN_NPU_PLATFORM"
#: Environment variable: ``0`` turns executor reuse off from import on.
EXECUTOR_REUSE_ENV = "JAX_ACLNN_EXECUTOR_REUSE"

#: Platform names of JAX's CPU, which the host provider's handlers serve.
CPU_PLATFORM_NAMES = ("cpu", "host")


#: The operator names :func:`jax_aclnn.reference_path` forces in the
#: current context (``"all"``: every operator).
forced_in_context: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "jax_aclnn_reference_path", default=frozenset())


def reference_forced(name: str) -> bool:
    """True when ``$JAX_ACLNN_REFERENCE`` or :func:`jax_aclnn.reference_path`
    selects the pure-JAX path for ``name``."""
    forced = forced_in_context.get()
    if "all" in forced or name in forced:
        return True
    value = os.environ.get(REFERENCE_ENV, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "all", "true", "yes"):
        return True
    return name in {v.strip() for v in value.split(",")}


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


def executor_reuse_at_import() -> bool:
    """Executor reuse as ``$JAX_ACLNN_EXECUTOR_REUSE`` sets it at import (on
    unless ``0``). A value other than ``0`` and ``1`` is not refused here (an
    import error would be a traceback even in ``python -m jax_aclnn``, which
    checks first) but by :func:`executor_reuse_from_env` when an operator is
    first lowered."""
    return os.environ.get(EXECUTOR_REUSE_ENV, "1").strip() != "0"


def executor_reuse_from_env() -> bool:
    """Whether ``$JAX_ACLNN_EXECUTOR_REUSE`` turns executor reuse on: unset
    or ``1`` on, ``0`` off.

    Raises:
      ValueError: any other value, naming the variable.
    """
    value = os.environ.get(EXECUTOR_REUSE_ENV, "1")
    if value.strip() not in ("0", "1"):
        raise ValueError(f"{EXECUTOR_REUSE_ENV}={value!r}: expected 1 (reuse executors, the "
                         "default) or 0 (do not); set one of them, or unset it")
    return value.strip() == "1"
