"""The process state of ``bench``'s realistic mode: that of a training process.

A benchmark in a fresh process measures the operators on a clean heap. A
training process differs in what decides where an output lands and what
its first write costs: it keeps its model, optimizer state, data and last
gradients alive, and each step allocates and frees arrays of many sizes
(after which glibc serves buffers of up to 32 MiB from its heap instead of
fresh mappings, and free memory is scattered among live arrays).
:func:`enter` puts the process in that state and returns what must stay
alive: a few Adam steps of the :mod:`~jax_aclnn.cli.step_memory` model
(every operator in its gradient, 8 MiB activations), each step followed by
host-side arrays of random sizes as a data pipeline and metrics make, some
kept and the rest freed.

Run as a module (``python -m jax_aclnn.cli.training_state REPEATS BURST
BN_CHANNELS``), it is ``bench``'s realistic-mode process: it enters that
state and says so (a JSON line), then measures each case named on a line
of its input (a JSON list: operator, size, dtype) as ``bench`` does and
answers with the row as a JSON line; :class:`RealisticProcess` is
``bench``'s end of it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jax_aclnn.cli import bench_cases, step_memory
from jax_aclnn.cli.common import UsageError, child_env, child_error

#: (batch, width, layers) of the model trained.
SHAPE = (4096, 512, 4)
STEPS = 8
#: Host arrays made after each step: sizes log-uniform between these bytes.
HOST_ARRAYS = 24
HOST_BYTES = (4 << 10, 64 << 20)
#: Of those, the fraction kept alive (the rest are freed by the next step).
KEPT = 0.25


def enter(seed: int = 0) -> list[Any]:
    """Trains :data:`STEPS` steps and churns host memory; returns the arrays to
    keep alive while measuring (about 0.5 GiB)."""
    rng = np.random.default_rng(seed)
    params, x, y = step_memory.inputs(*SHAPE)
    grad = step_memory.compiled_step("aclnn", *SHAPE)
    optimizer = optax.adam(1e-3)
    opt_state = optimizer.init(params)

    @jax.jit
    def update(params, opt_state, grads):
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    kept: list[np.ndarray] = []
    grads = None
    for _ in range(STEPS):
        grads = grad(params, x, y)
        params, opt_state = update(params, opt_state, grads)
        batch = []
        for nbytes in np.exp(rng.uniform(*np.log(HOST_BYTES), HOST_ARRAYS)).astype(int):
            batch.append(np.ones(nbytes // 4, np.float32))
        kept += [a for a in batch if rng.random() < KEPT]
        jax.block_until_ready(params)
    return [params, opt_state, x, y, grads, kept]


class RealisticProcess:
    """The realistic mode's measuring process (``python -m
    jax_aclnn.cli.training_state``): once in a training process's state
    (it says so on a first line, so that nothing is measured while it gets
    there), it measures each case it is sent, right after the same case's
    clean measurement."""

    def __init__(self, args: argparse.Namespace):
        self.stderr = tempfile.TemporaryFile("w+")
        self.child = subprocess.Popen(
            [sys.executable, "-m", "jax_aclnn.cli.training_state", str(args.repeats), str(args.burst),
             str(args.bn_channels)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=child_env())
        self.reply()

    def reply(self) -> Any:
        line = self.child.stdout.readline()
        if not line:
            self.stderr.seek(0)
            raise UsageError("the realistic mode's measuring process failed: "
                             f"{child_error(self.child.wait(), self.stderr.read())}")
        return json.loads(line)

    def measure(self, op: str, size: int, dtype: Any) -> dict[str, Any]:
        with contextlib.suppress(BrokenPipeError):  # it failed: reply() says why
            self.child.stdin.write(json.dumps([op, size, str(jnp.dtype(dtype))]) + "\n")
            self.child.stdin.flush()
        return self.reply()

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError):  # it failed: reply() said so
            self.child.stdin.close()
        self.child.wait()
        self.stderr.close()


def main() -> None:
    bench_cases.import_torch()
    args = argparse.Namespace(repeats=int(sys.argv[1]), burst=int(sys.argv[2]), bn_channels=int(sys.argv[3]))
    alive = enter()  # noqa: F841 (kept alive while measuring)
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        op, size, dtype = json.loads(line)
        row = bench_cases.measure(op, size, jnp.dtype(dtype), args, np.random.default_rng(0))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
