"""The five aclnn backward operators, one module each (formulas in their docstrings)."""

from jax_aclnn.ops.batch_norm_reduce_backward import batch_norm_reduce_backward
from jax_aclnn.ops.hardshrink_backward import hardshrink_backward
from jax_aclnn.ops.logit_grad import logit_grad
from jax_aclnn.ops.smooth_l1_loss_backward import smooth_l1_loss_backward
from jax_aclnn.ops.swish_backward import swish_backward

__all__ = [
    "batch_norm_reduce_backward",
    "hardshrink_backward",
    "logit_grad",
    "smooth_l1_loss_backward",
    "swish_backward",
]


def primitive(name: str):
    """The :class:`~jax_aclnn._primitive.AclnnPrimitive` of an operator, by function name."""
    import importlib

    return importlib.import_module(f"jax_aclnn.ops.{name}")._op
