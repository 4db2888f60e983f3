"""The training step of ``bench``'s memory table: the every-operator network
(:mod:`jax_aclnn.network`: blocks of matmul, the normalizations and the
activations, a prediction and the losses), whose gradient runs every
aclnn operator, compiled three ways, with XLA's memory analysis and paired
step times:

* ``aclnn``: through jax_aclnn (the aclnn custom calls);
* ``reference``: the same network under :func:`jax_aclnn.reference_path`
  (the same differentiation rules, every operator its pure-JAX reference);
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
from jax_aclnn import network

MODES = ("aclnn", "reference", "jnp")


def inputs(batch: int, width: int, layers: int,
           dtype: Any = jnp.float32) -> tuple[Any, jax.Array, jax.Array]:
    """Weights (``layers`` blocks of ``width``), input and target, all of ``dtype``."""
    key_params, key_x, key_y = jax.random.split(jax.random.key(0), 3)
    params = network.init(key_params, width, width, layers, dtype)
    x = jax.random.normal(key_x, (batch, width)).astype(dtype)
    return params, x, jax.random.uniform(key_y, (batch,), minval=0.05, maxval=0.95).astype(dtype)


def compiled_step(mode: str, batch: int, width: int, layers: int,
                  dtype: Any = jnp.float32) -> Any:
    """``jax.jit(jax.grad(loss))`` compiled for ``mode`` (one of :data:`MODES`)
    and ``dtype``."""
    step = jax.jit(jax.grad(lambda p, x, y: network.loss(p, x, y, plain=mode == "jnp")))
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
