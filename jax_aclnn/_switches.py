"""The environment switches and the reference-path switch.

* ``JAX_ACLNN_REFERENCE``: forces the pure-JAX reference path for the
  whole process (read at import): ``all`` (or ``1``), or a comma-separated
  list of operator names such as ``swish_backward,logit_grad``;
  :func:`jax_aclnn.reference_path` does the same for a block of code
  (:data:`forced_in_context`);
* ``JAX_ACLNN_NPU_PLATFORM``: the Ascend PJRT plugin's platform name;
* ``JAX_ACLNN_EXECUTOR_REUSE``: ``0`` turns executor reuse off from import on
  (``1``, the default, on; another value is refused when an operator is
  first lowered).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable

import jax

REFERENCE_ENV = "JAX_ACLNN_REFERENCE"
#: Environment variable naming the Ascend PJRT plugin's platform.
NPU_PLATFORM_ENV = "JAX_ACLNN_NPU_PLATFORM"
#: Environment variable: ``0`` turns executor reuse off from import on.
EXECUTOR_REUSE_ENV = "JAX_ACLNN_EXECUTOR_REUSE"

#: Platform names of JAX's CPU, which the host provider's handlers serve.
CPU_PLATFORM_NAMES = ("cpu", "host")


def _names_from_env() -> frozenset[str]:
    value = os.environ.get(REFERENCE_ENV, "").strip()
    if value.lower() in ("", "0", "false", "no"):
        return frozenset()
    if value.lower() in ("1", "all", "true", "yes"):
        return frozenset({"all"})
    return frozenset(v.strip() for v in value.split(",") if v.strip())


#: The operators ``$JAX_ACLNN_REFERENCE`` forces, read at import as JAX reads
#: its own ``JAX_*`` variables (checked against the operators by
#: :func:`reference_forced`).
FORCED_BY_ENV = _names_from_env()

#: The operator names :func:`jax_aclnn.reference_path` forces in the current
#: thread (``"all"``: every operator): a JAX user context, so part of what
#: JAX keys its trace and compilation caches on. A function traced inside
#: the block and called outside it (or the other way round) is traced anew.
forced_in_context = jax.make_user_context(frozenset())


def check_names(names: frozenset[str], known: Iterable[str], where: str) -> None:
    """ValueError naming ``where`` unless every name is ``"all"`` or in
    ``known``; it lists the known names when they are few, else the closest
    ones (a long-running process may have declared thousands)."""
    known = list(known)
    unknown = sorted(names - set(known) - {"all"})
    if unknown:
        if len(known) <= 12:
            expected = f"some of {', '.join(known)}"
        else:
            close = sorted({c for n in unknown for c in difflib.get_close_matches(n, known, 5)})
            expected = (f"one of the {len(known)} operators"
                        + (f" (closest: {', '.join(close)})" if close else ""))
        raise ValueError(f"{where}: unknown operator(s) {', '.join(map(repr, unknown))}; "
                         f"expected 'all' or {expected}")


def reference_forced(name: str, known: Iterable[str]) -> bool:
    """True when ``$JAX_ACLNN_REFERENCE`` or :func:`jax_aclnn.reference_path`
    selects the pure-JAX path for ``name``.

    Raises:
      ValueError: ``$JAX_ACLNN_REFERENCE`` names an operator not in ``known``
        (a typo would silently disable nothing).
    """
    check_names(FORCED_BY_ENV, known, f"{REFERENCE_ENV}={os.environ.get(REFERENCE_ENV, '')!r}")
    forced = forced_in_context.value | FORCED_BY_ENV
    return "all" in forced or name in forced


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
