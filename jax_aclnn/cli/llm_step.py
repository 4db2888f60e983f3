"""The language-model step of ``bench``: ``python -m jax_aclnn train-lm``'s
model (:mod:`jax_aclnn.cli.train_lm`: RMSNorm, grouped-query attention with
RoPE, the residual add and norm, SwiGLU, cross entropy) differentiated two
ways, with paired step and compile times (:func:`jax_aclnn.cli.step_memory.compare`):

* ``aclnn``: through :mod:`jax_aclnn.nn` (CANN's fused operators where a
  provider has them: on a CPU the host provider's kernels where it has
  them, else their references);
* ``reference``: the same calls under :func:`jax_aclnn.reference_path`
  (every function's pure-JAX reference, as ``JAX_ACLNN_REFERENCE=all``);
* ``jnp``: the same model written with jax.numpy, ``jax.nn`` and optax
  (:data:`jax_aclnn.cli.train_lm.PLAIN`), differentiated by JAX.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jax_aclnn as aclnn
from jax_aclnn import nn
from jax_aclnn.cli import step_memory, train_lm

MODES = {"aclnn": nn, "reference": nn, "jnp": train_lm.PLAIN}

#: (name, model, batch) of the table: train-lm's defaults, and a wider model.
SHAPES = [("train-lm's default", train_lm.Config(64, 2, 4, 2, 128, 64), 16),
          ("wider", train_lm.Config(256, 4, 8, 4, 512, 128), 16)]


def compile_step(mode: str, cfg: train_lm.Config, args: Any) -> Any:
    """``jax.jit(jax.value_and_grad(loss))`` through ``mode``'s operators
    (:data:`MODES`), compiled for ``args``."""
    step = jax.jit(jax.value_and_grad(lambda p, w: train_lm.loss_fn(p, w, cfg, MODES[mode])))
    if mode != "reference":
        return step.lower(*args).compile()
    with aclnn.reference_path():
        return step.lower(*args).compile()


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
