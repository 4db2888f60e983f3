"""jax_aclnn: Huawei Ascend CANN aclnn backward operators as differentiable JAX operations.

Import as ``import jax_aclnn as aclnn``. The public API (the documentation's
API reference, docs/api.rst, is generated from these docstrings):

* the five aclnn backward operators: :func:`smooth_l1_loss_backward`,
  :func:`logit_grad`, :func:`hardshrink_backward`, :func:`swish_backward`,
  :func:`batch_norm_reduce_backward`;
* differentiable forward operators whose backward runs them:
  :func:`smooth_l1_loss`, :func:`logit`, :func:`hardshrink`, :func:`swish`,
  :func:`silu`, :func:`batch_norm`;
* runtime introspection: :func:`runtime_stats`, :func:`reset_runtime_stats`,
  :func:`load_cann`, :func:`set_executor_reuse`;
* :func:`export_disabled_checks` for :func:`jax.export.export`;
* with the ``flax`` extra, :mod:`jax_aclnn.flax`: drop-in Flax ``BatchNorm``
  layers (not imported by ``import jax_aclnn``).

On JAX's CPU platform the operators run on the bundled host aclnn provider,
on an Ascend NPU on CANN, both through the same XLA FFI handlers; on other
platforms they lower to their pure-JAX definitions.
"""

from jax_aclnn._ffi import (
    export_disabled_checks,
    load_cann,
    reset_runtime_stats,
    runtime_stats,
    set_executor_reuse,
)
from jax_aclnn.nn import batch_norm, hardshrink, logit, silu, smooth_l1_loss, swish
from jax_aclnn.ops import (
    batch_norm_reduce_backward,
    hardshrink_backward,
    logit_grad,
    smooth_l1_loss_backward,
    swish_backward,
)

__version__ = "0.1.0"

__all__ = [
    "batch_norm",
    "batch_norm_reduce_backward",
    "export_disabled_checks",
    "hardshrink",
    "hardshrink_backward",
    "load_cann",
    "logit",
    "logit_grad",
    "reset_runtime_stats",
    "runtime_stats",
    "set_executor_reuse",
    "silu",
    "smooth_l1_loss",
    "smooth_l1_loss_backward",
    "swish",
    "swish_backward",
]
