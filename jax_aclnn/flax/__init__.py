"""Flax layers whose gradients run aclnn operators (needs the ``flax`` extra:
``pip install "jax_aclnn[flax]"``).

* :class:`jax_aclnn.flax.linen.BatchNorm`: drop-in ``flax.linen.BatchNorm``;
* :class:`jax_aclnn.flax.nnx.BatchNorm`: drop-in ``flax.nnx.BatchNorm``.

In training mode both call :func:`jax_aclnn.batch_norm`, whose backward runs
aclnnBatchNormReduceBackward. ``import jax_aclnn`` alone never imports Flax;
import ``jax_aclnn.flax.linen`` or ``jax_aclnn.flax.nnx`` explicitly.

The activations and the loss need no wrapper: call them inside a module,
``aclnn.silu(nn.Dense(64)(x))`` (linen) or ``aclnn.hardshrink(self.dense(x))``
(nnx), and ``aclnn.smooth_l1_loss(pred, y, beta=b)`` equals
``optax.huber_loss(pred, y, delta=b).mean() / b``.
"""
