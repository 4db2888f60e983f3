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
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

import jax_aclnn as aclnn
from jax_aclnn import network
from jax_aclnn.cli.bench_cases import paired, timed

MODES = ("aclnn", "reference", "jnp")


def inputs(batch: int, width: int, layers: int,
           dtype: Any = jnp.float32) -> tuple[Any, jax.Array, jax.Array]:
    """Weights (``layers`` blocks of ``width``), input and target, all of ``dtype``."""
    key_params, key_x, key_y = jax.random.split(jax.random.key(0), 3)
    params = network.init(key_params, width, width, layers, dtype)
    x = jax.random.normal(key_x, (batch, width)).astype(dtype)
    return params, x, jax.random.uniform(key_y, (batch,), minval=0.05, maxval=0.95).astype(dtype)


def compile_step(mode: str, args: Any) -> Any:
    """``jax.jit(jax.grad(loss))`` traced, lowered and compiled for ``mode``
    (one of :data:`MODES`) and the arguments ``args`` (see :func:`inputs`)."""
    step = jax.jit(jax.grad(lambda p, x, y: network.loss(p, x, y, plain=mode == "jnp")))
    with aclnn.reference_path() if mode == "reference" else nullcontext():
        return step.lower(*args).compile()


def compiled_step(mode: str, batch: int, width: int, layers: int,
                  dtype: Any = jnp.float32) -> Any:
    """:func:`compile_step` for new inputs of this shape and ``dtype``."""
    return compile_step(mode, inputs(batch, width, layers, dtype))


def temp_bytes(compiled: Any) -> int:
    """XLA's temporary memory of a compiled program (bytes)."""
    return compiled.memory_analysis().temp_size_in_bytes


#: Compilations of each mode whose median is the compile time.
COMPILE_ROUNDS = 3


def compare(compile_fns: dict[str, Callable[[], Any]], args: Any,
            repeats: int) -> tuple[dict[str, Any], dict[str, float]]:
    """Compiles and times the versions of one step: ``compile_fns`` maps
    each mode to a function compiling its step (tracing, lowering and
    compiling, the inputs ``args`` made before).

    Times are medians of interleaved rounds, each mode first in turn
    (:func:`jax_aclnn.cli.bench_cases.paired`): the compile time
    (``<mode>_compile_s``) of :data:`COMPILE_ROUNDS` compilations, the step
    time (``<mode>_s``) of ``repeats`` runs on ``args`` after two warm-up
    rounds. Returns the compiled steps and the times."""
    compiled: dict[str, Any] = {}

    def compile_into(mode: str) -> None:
        compiled[mode] = compile_fns[mode]()

    compile_times = paired({m: partial(compile_into, m) for m in compile_fns}, COMPILE_ROUNDS, timed)
    step_times = paired({m: partial(c, *args) for m, c in compiled.items()}, repeats + 2, timed)
    row = {f"{m}_compile_s": statistics.median(ts) for m, ts in compile_times.items()}
    row.update({f"{m}_s": statistics.median(ts[2:]) for m, ts in step_times.items()})  # two warm-up rounds
    return compiled, row


def measure(batch: int, width: int, layers: int, repeats: int,
            dtype: Any = jnp.float32) -> dict[str, Any]:
    """Temporary memory, compile time and step time of every mode, in
    ``dtype`` (times: :func:`compare`)."""
    args = jax.block_until_ready(inputs(batch, width, layers, dtype))
    compiled, times = compare({m: partial(compile_step, m, args) for m in MODES}, args, repeats)
    row: dict[str, Any] = {"batch": batch, "width": width, "layers": layers,
                           "dtype": str(jnp.dtype(dtype)), **times}
    for mode in MODES:
        row[f"{mode}_temp_bytes"] = temp_bytes(compiled[mode])
    return row
