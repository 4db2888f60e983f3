"""jax_aclnn: Huawei Ascend CANN aclnn backward operators as differentiable JAX operations.

Import as ``import jax_aclnn as aclnn``. The public API (the README's "API
reference" lists each function with its formula; the docstrings are complete):

* the five aclnn backward operators: :func:`smooth_l1_loss_backward`,
  :func:`logit_grad`, :func:`hardshrink_backward`, :func:`swish_backward`,
  :func:`batch_norm_reduce_backward`;
* differentiable forward operators whose backward runs them:
  :func:`smooth_l1_loss`, :func:`logit`, :func:`hardshrink`, :func:`swish`,
  :func:`silu`, :func:`batch_norm`;
* runtime introspection: :func:`runtime_stats`, :func:`reset_runtime_stats`,
  :func:`load_cann`, :func:`set_executor_reuse`, :func:`build_info`,
  :func:`host_kernel_target`;
* :func:`reference_path`: the pure-JAX reference path for a block of code;
* :func:`export_disabled_checks` for :func:`jax.export.export`;
* with the ``flax`` extra, :mod:`jax_aclnn.flax`: drop-in Flax ``BatchNorm``
  layers (not imported by ``import jax_aclnn``).

On JAX's CPU platform the operators run on the bundled host aclnn provider,
on an Ascend NPU on CANN, both through the same XLA FFI handlers; on other
platforms they lower to their pure-JAX definitions.
"""

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
from jax_aclnn.ops import (
    batch_norm,
    batch_norm_reduce_backward,
    hardshrink,
    hardshrink_backward,
    logit,
    logit_grad,
    silu,
    smooth_l1_loss,
    smooth_l1_loss_backward,
    swish,
    swish_backward,
)

__version__ = "0.1.0"

__all__ = [
    "batch_norm",
    "batch_norm_reduce_backward",
    "build_info",
    "export_disabled_checks",
    "hardshrink",
    "hardshrink_backward",
    "host_kernel_target",
    "load_cann",
    "logit",
    "logit_grad",
    "reference_path",
    "reset_runtime_stats",
    "runtime_stats",
    "set_executor_reuse",
    "silu",
    "smooth_l1_loss",
    "smooth_l1_loss_backward",
    "swish",
    "swish_backward",
]
