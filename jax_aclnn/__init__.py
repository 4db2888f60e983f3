"""jax_aclnn: Huawei Ascend CANN aclnn backward operators as differentiable JAX operations.

Import as ``import jax_aclnn as aclnn``. The public API (the documentation's
API reference, docs/api.rst, is generated from these docstrings):

* the aclnn backward operators and the differentiable forward operators
  whose backward runs them: every name in ``jax_aclnn.ops.__all__``
  (:mod:`jax_aclnn.ops`, one module per operator), re-exported here;
* runtime introspection: :func:`runtime_stats`, :func:`reset_runtime_stats`,
  :func:`load_cann`, :func:`set_executor_reuse`, :func:`build_info`,
  :func:`host_kernel_target`;
* :func:`declare`: any aclnn operator from its CANN prototype;
  :func:`check_dims` checks its dimension rule on the host devices;
* :func:`reference_path`: the pure-JAX reference path for a block of code;
* :func:`export_disabled_checks` for :func:`jax.export.export`;
* with the ``flax`` extra, :mod:`jax_aclnn.flax`: drop-in Flax ``BatchNorm``
  layers (not imported by ``import jax_aclnn``).

On JAX's CPU platform the operators run on the bundled host aclnn provider,
on an Ascend NPU on CANN, both through the same XLA FFI handlers; on other
platforms they lower to their pure-JAX definitions.
"""

from jax_aclnn import _loading, _primitive, ops
from jax_aclnn._check_dims import check_dims
from jax_aclnn._declare import declare
from jax_aclnn._primitive import reference_path
from jax_aclnn._registration import export_disabled_checks
from jax_aclnn._runtime import (
    build_info,
    host_kernel_target,
    load_cann,
    reset_runtime_stats,
    runtime_stats,
    set_executor_reuse,
)
from jax_aclnn.ops import *  # noqa: F403  (the operators: ops.__all__)

__version__ = "0.1.0"

# The compiled extension must come from the same sources as this Python
# (a source checkout imports an installed build's; see _loading).
_loading.check_operators(__version__,
                         {op.name: op.aclnn_name for op in _primitive.OPERATORS.values()})

#: The runtime API, then the operators' public functions (``jax_aclnn.ops.__all__``).
__all__ = [
    "build_info",
    "check_dims",
    "declare",
    "export_disabled_checks",
    "host_kernel_target",
    "load_cann",
    "reference_path",
    "reset_runtime_stats",
    "runtime_stats",
    "set_executor_reuse",
]
__all__ += ops.__all__
