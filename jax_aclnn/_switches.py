"""The environment switches and the reference-path switch.

* ``JAX_ACLNN_REFERENCE``: forces the pure-JAX reference path when a call is
  traced: ``all`` (or ``1``), or a comma-separated list of operator names
  such as ``swish_backward,logit_grad``; :func:`jax_aclnn.reference_path`
  does the same for a block of code (:data:`forced_in_context`);
* ``JAX_ACLNN_NPU_PLATFORM``: the Ascend PJRT plugin's platform name;
* ``JAX_ACLNN_EXECUTOR_REUSE``: ``0`` turns executor reuse off from import on.
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
    """Executor reuse as ``$JAX_ACLNN_EXECUTOR_REUSE`` sets it at import (on unless ``0``)."""
    return os.environ.get(EXECUTOR_REUSE_ENV, "1") != "0"
