"""The training step of ``bench``'s memory table (and of tests/test_memory.py):
an MLP whose gradient runs all five operators, compiled three ways, with
XLA's memory analysis and paired step times.

Each of ``layers`` layers is ``matmul -> batch_norm -> silu`` (even layers)
or ``hardshrink`` (odd ones); a logit head on the first feature feeds
``smooth_l1_loss``. The three programs:

* ``aclnn``: through jax_aclnn (the aclnn custom calls);
* ``reference``: the same model under :func:`jax_aclnn.reference_path` (the
  same differentiation rules, every operator its pure-JAX reference);
* ``jnp``: the same formulas in ``jax.numpy``, differentiated by JAX itself.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import jax
import jax.numpy as jnp

import jax_aclnn as aclnn

MODES = ("aclnn", "reference", "jnp")


def _jnp_batch_norm(h: jax.Array, g: jax.Array, b: jax.Array, eps: float = 1e-5) -> jax.Array:
    mean = h.mean(0)
    var = jnp.square(h - mean).mean(0)
    return (h - mean) * jax.lax.rsqrt(var + eps) * g + b


def loss(params: list[tuple[jax.Array, ...]], x: jax.Array, y: jax.Array, *,
         use_jnp: bool = False) -> jax.Array:
    h = x
    for i, (w, g, b) in enumerate(params):
        h = h @ w
        if use_jnp:
            h = _jnp_batch_norm(h, g, b)
            h = jax.nn.silu(h) if i % 2 == 0 else jnp.where(jnp.abs(h) <= 0.1, 0.0, h)
        else:
            h, _, _ = aclnn.batch_norm(h, g, b)
            h = aclnn.silu(h) if i % 2 == 0 else aclnn.hardshrink(h, 0.1)
    p = jax.nn.sigmoid(h[:, :1]) * 0.98 + 0.01
    if use_jnp:
        d = jnp.log(p / (1 - p)) - y
        return jnp.where(jnp.abs(d) < 1.0, 0.5 * d * d, jnp.abs(d) - 0.5).mean()
    return aclnn.smooth_l1_loss(aclnn.logit(p), y)


def inputs(batch: int, width: int, layers: int,
           dtype: Any = jnp.float32) -> tuple[Any, jax.Array, jax.Array]:
    """Parameters, input and target of the model, all of ``dtype``."""
    keys = jax.random.split(jax.random.key(0), layers + 1)
    params = [((jax.random.normal(k, (width, width)) * width ** -0.5).astype(dtype),
               jnp.ones(width, dtype), jnp.zeros(width, dtype)) for k in keys[:-1]]
    x = jax.random.normal(keys[-1], (batch, width)).astype(dtype)
    return params, x, jnp.zeros((batch, 1), dtype)


def compiled_step(mode: str, batch: int, width: int, layers: int,
                  dtype: Any = jnp.float32) -> Any:
    """``jax.jit(jax.grad(loss))`` compiled for ``mode`` (one of :data:`MODES`)
    and ``dtype``."""
    step = jax.jit(jax.grad(lambda p, x, y: loss(p, x, y, use_jnp=mode == "jnp")))
    with aclnn.reference_path() if mode == "reference" else nullcontext():
        return step.lower(*inputs(batch, width, layers, dtype)).compile()


def temp_bytes(compiled: Any) -> int:
    """XLA's temporary memory of a compiled program (bytes)."""
    return compiled.memory_analysis().temp_size_in_bytes


def measure(batch: int, width: int, layers: int, repeats: int,
            dtype: Any = jnp.float32) -> dict[str, Any]:
    """Temporary memory, compile time and step time (medians of ``repeats``
    interleaved runs, each mode first in turn) of every mode, in ``dtype``."""
    args = inputs(batch, width, layers, dtype)
    steps: dict[str, Callable[[], Any]] = {}
    row: dict[str, Any] = {"batch": batch, "width": width, "layers": layers,
                           "dtype": str(jnp.dtype(dtype))}
    for mode in MODES:
        start = time.perf_counter()
        compiled = compiled_step(mode, batch, width, layers, dtype)
        row[f"{mode}_compile_s"] = time.perf_counter() - start
        row[f"{mode}_temp_bytes"] = temp_bytes(compiled)
        steps[mode] = lambda c=compiled: jax.block_until_ready(c(*args))
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for i in range(repeats + 2):
        order = MODES[i % len(MODES):] + MODES[:i % len(MODES)]
        for mode in order:
            start = time.perf_counter()
            steps[mode]()
            if i >= 2:  # two warm-up rounds
                times[mode].append(time.perf_counter() - start)
    for mode in MODES:
        row[f"{mode}_s"] = statistics.median(times[mode])
    return row
