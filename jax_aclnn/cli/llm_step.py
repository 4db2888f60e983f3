"""The language-model step of ``bench``: ``python -m jax_aclnn train-lm``'s
training step (:mod:`jax_aclnn.cli.train_lm`'s model: RMSNorm,
grouped-query attention with RoPE, the residual add and norm, SwiGLU,
cross entropy; the loss's value and gradients, then one AdamW update under
train-lm's cosine schedule) three ways, with paired step and compile times
(:func:`jax_aclnn.cli.step_memory.compare`):

* ``aclnn``: through :mod:`jax_aclnn.nn` and :func:`jax_aclnn.optax.update_and_apply`
  (CANN's fused operators where a provider has them: on a CPU the host
  provider's kernels);
* ``reference``: the same calls under :func:`jax_aclnn.reference_path`
  (every function's pure-JAX reference, as ``JAX_ACLNN_REFERENCE=all``);
* ``jnp``: the same model written with jax.numpy, ``jax.nn`` and optax
  (:data:`jax_aclnn.cli.train_lm.PLAIN`), differentiated by JAX, and
  ``optax.adamw`` with ``optax.apply_updates``.

Each step is jitted with the parameters and the optimizer state donated
and carried from run to run, as ``train-lm``'s training loop runs it (the
in-place update then writes into the parameters' own buffers; without
donation XLA copies each parameter and both moments first, as the table
did until it carried them: about 0.13 ms of the default model's 9).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jax_aclnn as aclnn
from jax_aclnn import nn
from jax_aclnn import optax as aclnn_optax
from jax_aclnn.cli import step_memory, train_lm

MODES = {"aclnn": nn, "reference": nn, "jnp": train_lm.PLAIN}

#: (name, model, batch) of the table: train-lm's defaults, and a wider model.
SHAPES = [("train-lm's default", train_lm.Config(64, 2, 4, 2, 128, 64), 16),
          ("wider", train_lm.Config(256, 4, 8, 4, 512, 128), 16)]


def optimizer(mode: str) -> optax.GradientTransformation:
    """train-lm's optimizer through ``mode``'s AdamW: :func:`jax_aclnn.optax.adamw`,
    or optax's for ``jnp``."""
    return train_lm.optimizer(adamw=optax.adamw if mode == "jnp" else aclnn_optax.adamw)


def compile_step(mode: str, cfg: train_lm.Config, args: Any) -> Callable[..., Any]:
    """train-lm's step through ``mode``'s operators (:data:`MODES`),
    compiled for ``args`` (the parameters and the byte windows) with the
    parameters and the optimizer state donated, as train-lm compiles it; as
    a function of them that steps from its own copy of the parameters and a
    new optimizer state (made on its first call), carried from call to call
    as in training, and returns the loss."""
    params, windows = args
    tx = optimizer(mode)

    def step(p, s, w):
        loss, grads = jax.value_and_grad(lambda p: train_lm.loss_fn(p, w, cfg, MODES[mode]))(p)
        if mode == "jnp":
            updates, s = tx.update(grads, s, p)
            return optax.apply_updates(p, updates), s, loss
        return (*aclnn_optax.update_and_apply(tx, grads, s, p), loss)

    with aclnn.reference_path() if mode == "reference" else contextlib.nullcontext():
        compiled = jax.jit(step, donate_argnums=(0, 1)).lower(
            params, jax.eval_shape(tx.init, params), windows).compile()
    carry: list[Any] = []

    def run(p: Any, w: jax.Array) -> jax.Array:
        if not carry:
            carry.extend(jax.tree.map(jnp.copy, (p, tx.init(p))))
        carry[0], carry[1], loss = compiled(carry[0], carry[1], w)
        return loss
    return run


def measure(name: str, cfg: train_lm.Config, batch: int, repeats: int,
            dtype: Any = jnp.float32) -> dict[str, Any]:
    """Step and compile times of both modes, parameters in ``dtype``."""
    params = jax.tree.map(lambda a: a.astype(dtype), train_lm.init(cfg, jax.random.key(0)))
    windows = np.random.default_rng(0).integers(0, train_lm.VOCAB, (batch, cfg.seq + 1))
    args = jax.block_until_ready((params, jnp.asarray(windows, jnp.int32)))
    _, times = step_memory.compare(
        {m: (lambda m=m: compile_step(m, cfg, args)) for m in MODES},
        args, repeats)
    return {"model": name, "dim": cfg.dim, "layers": cfg.layers, "seq": cfg.seq, "batch": batch,
            "dtype": str(jnp.dtype(dtype)), **times}
