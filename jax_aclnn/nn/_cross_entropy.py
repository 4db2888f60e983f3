"""Softmax cross entropy with integer labels: aclnnCrossEntropyLoss and
aclnnCrossEntropyLossGrad.

Prototypes from CANN's ops-nn sources
(loss/cross_entropy_loss/docs/aclnnCrossEntropyLoss.md,
loss/cross_entropy_loss_grad/docs/aclnnCrossEntropyLossGrad.md). torch_npu's
``npu_cross_entropy_loss`` and its backward are generated from op-plugin's
op_plugin/config/op_plugin_functions.yaml, whose ``exec:`` lines pass
``input, target, weight, reduction_char, ignore_index, label_smoothing,
lse_square_scale_for_zloss, return_zloss, loss, log_prob, zloss,
lse_for_zloss`` and ``grad_loss, log_prob, target, weight, grad_zloss,
lse_for_zloss, reduction_char, ignore_index, label_smoothing,
lse_square_scale_for_zloss, x_grad_out``: CANN's order. As there, the z-loss
outputs are allocated with 0 elements (``return_zloss`` false, scale 0:
CANN computes neither) and ignored.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jax_aclnn._declare import declare
from jax_aclnn.nn._common import (check_float, from_rows, rows_first, sharded_like, to_rows,
                                  typed_like)

_F32 = jnp.float32
#: CANN's default: labels equal to it contribute nothing (never a class
#: index); a label outside [0, C) is passed as it.
_IGNORE_INDEX = -100


def _loss_reference(input, target, weightOptional, *, reductionOptional, ignoreIndex,
                    labelSmoothing, lseSquareScaleForZloss, returnZloss):
    log_prob = jax.nn.log_softmax(input.astype(_F32), axis=-1)
    # the label's entry, by comparison (no gather: the classes may be sharded)
    picked = jnp.sum(jnp.where(jnp.arange(input.shape[-1]) == target[:, None], log_prob, 0.0),
                     axis=-1)
    loss = jnp.where(target == ignoreIndex, 0.0, -picked)
    empty = jnp.zeros((0,), input.dtype)
    return loss.astype(input.dtype), log_prob.astype(input.dtype), empty, empty


def _grad_reference(gradLoss, logProb, target, weightOptional, gradZlossOptional,
                    lseForZlossOptional, *, reductionOptional, ignoreIndex, labelSmoothing,
                    lseSquareScaleForZloss):
    g = jnp.where(target == ignoreIndex, 0.0, gradLoss.astype(_F32))[:, None]
    onehot = jax.nn.one_hot(target, logProb.shape[-1], dtype=_F32)
    return ((jnp.exp(logProb.astype(_F32)) - onehot) * g).astype(gradLoss.dtype)


#: the rows n partitioned, the classes c whole (z and l: the 0-element
#: z-loss outputs).
CROSS_ENTROPY_LOSS = declare(
    "aclnnStatus aclnnCrossEntropyLossGetWorkspaceSize(const aclTensor *input, "
    "const aclTensor *target, const aclTensor *weightOptional, char *reductionOptional, "
    "int64_t ignoreIndex, double labelSmoothing, double lseSquareScaleForZloss, "
    "bool returnZloss, const aclTensor *lossOut, const aclTensor *logProbOut, "
    "const aclTensor *zlossOut, const aclTensor *lseForZlossOut, uint64_t *workspaceSize, "
    "aclOpExecutor **executor)",
    _loss_reference, outputs=("lossOut", "logProbOut", "zlossOut", "lseForZlossOut"),
    name="nn_cross_entropy_loss", dims="n c, n, c -> n, n c, z, l", replicated=("c", "z", "l"))
CROSS_ENTROPY_LOSS_GRAD = declare(
    "aclnnStatus aclnnCrossEntropyLossGradGetWorkspaceSize(const aclTensor *gradLoss, "
    "const aclTensor *logProb, const aclTensor *target, const aclTensor *weightOptional, "
    "const aclTensor *gradZlossOptional, const aclTensor *lseForZlossOptional, "
    "char *reductionOptional, int64_t ignoreIndex, double labelSmoothing, "
    "double lseSquareScaleForZloss, const aclTensor *out, uint64_t *workspaceSize, "
    "aclOpExecutor **executor)",
    _grad_reference, outputs="out", name="nn_cross_entropy_loss_grad",
    dims="n, n c, n, c, z, l -> n c", replicated=("c", "z", "l"))
# On the CPU the gradient takes the log-softmax's buffer, of which the
# backward is the last reader in a training step: no fresh (N, C) buffer,
# and its writes land in lines it has just read (bench, float32 (524,
# 32000), with the forward's prefetch of logProb: 11.5-11.8 ms a forward
# and backward, 16.6-34.0 ms with a buffer of its own and no prefetch; its
# 64 MiB of new pages cost most where the host had reclaimed them). The
# host kernel (csrc/host/cross_entropy_kernel.cc) reads each chunk of
# logProb before it writes that chunk of out, and the test provider each
# element.
CROSS_ENTROPY_LOSS_GRAD.aclnn_operator.alias_on_cpu("logProb")

_ATTRIBUTES = dict(reductionOptional="none", ignoreIndex=_IGNORE_INDEX, labelSmoothing=0.0,
                   lseSquareScaleForZloss=0.0)


@jax.custom_vjp
def _cross_entropy(logits, labels):
    return CROSS_ENTROPY_LOSS(logits, labels, None, returnZloss=False, **_ATTRIBUTES)[0]


def _cross_entropy_fwd(logits, labels):
    loss, log_prob, _, _ = CROSS_ENTROPY_LOSS(logits, labels, None, returnZloss=False,
                                              **_ATTRIBUTES)
    # kept in logits' sharding (the rule keeps the classes whole; where
    # logits shard them, each device keeps its block), which dx then takes
    return loss, (sharded_like(log_prob, logits), labels)


def _cross_entropy_bwd(res, g):
    log_prob, labels = res
    dx = CROSS_ENTROPY_LOSS_GRAD(g, log_prob, labels, None, None, None, **_ATTRIBUTES)
    return typed_like((dx, None), (log_prob, None))


_cross_entropy.defvjp(_cross_entropy_fwd, _cross_entropy_bwd)


def softmax_cross_entropy_with_integer_labels(logits: Any, labels: Any) -> jax.Array:
    """Per-example cross entropy on aclnnCrossEntropyLoss.

    ``-log_softmax(logits)[..., label]``, the contract of
    ``optax.softmax_cross_entropy_with_integer_labels``.

    Forward aclnnCrossEntropyLoss (``reduction="none"``, the log-softmax kept
    for the backward), backward aclnnCrossEntropyLossGrad; their pure-JAX
    references elsewhere. torch_npu's ``npu_cross_entropy_loss``.

    Args:
      logits: ``(..., C)``, float32, float16 or bfloat16.
      labels: ``logits.shape[:-1]``, integers in ``[0, C)`` (int32 under
        JAX's default 32-bit mode; CANN's backward documents int64 labels,
        which ``jax_enable_x64`` gives). As in optax's function (JAX's
        indexing), a label in ``[-C, 0)`` counts from the end, and one
        outside ``[-C, C)`` (PyTorch's -100 among them) gives a NaN loss;
        its row's gradient is zero (CANN's ignored row; optax's is the
        softmax: they differ only where the loss is NaN).

    Returns:
      ``logits.shape[:-1]`` losses in logits' dtype (computed in float32).

    Raises:
      ValueError: labels' shape is not ``logits.shape[:-1]``.
      TypeError: logits are not float32, float16 or bfloat16 (float64
        included, under ``jax_enable_x64``: CANN takes none), or labels are
        not integers.

    Dimension rule: the examples partitioned, the classes whole.
    """
    logits, labels = jnp.asarray(logits), jnp.asarray(labels)
    check_float("softmax_cross_entropy_with_integer_labels", logits=logits)
    if not jnp.issubdtype(labels.dtype, jnp.integer):
        raise TypeError(f"softmax_cross_entropy_with_integer_labels: labels must be integers, "
                        f"got {labels.dtype}")
    if logits.ndim == 0 or labels.shape != logits.shape[:-1]:
        raise ValueError(f"softmax_cross_entropy_with_integer_labels: labels of shape "
                         f"{labels.shape} must be logits' {logits.shape} without the last")
    # CANN's operators take (N, C): the examples merged into one dimension
    # (those an explicit mesh shards first, so that no data moves)
    order = rows_first(logits, labels.ndim)
    if labels.dtype not in (jnp.int32, jnp.int64):
        labels = labels.astype(jnp.int32)
    # as optax (JAX's indexing): a label in [-C, 0) counts from the end;
    # others outside [0, C) are CANN's ignored rows (defined on both
    # builds), whose loss is NaN here as optax's
    c = logits.shape[-1]
    labels = jnp.where(labels < 0, labels + c, labels)
    valid = (labels >= 0) & (labels < c)
    loss = _cross_entropy(to_rows(logits, order),
                          to_rows(jnp.where(valid, labels, _IGNORE_INDEX), order))
    return jnp.where(valid, from_rows(loss, logits, order), jnp.nan)


__all__ = ["softmax_cross_entropy_with_integer_labels"]
