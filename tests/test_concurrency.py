"""Python threads calling the same and different compiled programs at once,
with executor reuse on and off, get exactly the bits a single thread gets
(a call site's executor is never re-targeted under another call)."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_aclnn as aclnn
from conftest import free_compiled_programs

THREADS, ROUNDS = 4, 12


def programs():
    """Compiled programs that run every operator, one per entry."""
    def bn(x):
        c = jnp.ones(x.shape[1], x.dtype)
        return aclnn.batch_norm_reduce_backward(x, x * 2, c * 0.1, c, c)

    return {
        "swish": jax.jit(lambda x: aclnn.swish_backward(x, x, beta=1.5)),
        "smooth_l1": jax.jit(lambda x: aclnn.smooth_l1_loss_backward(x, x, x[::-1], beta=0.5)),
        "logit_hardshrink": jax.jit(
            lambda x: aclnn.logit_grad(jax.nn.sigmoid(x), x) + aclnn.hardshrink_backward(x, x)),
        "batch_norm": jax.jit(bn),
        "grad": jax.jit(jax.grad(lambda x: aclnn.smooth_l1_loss(aclnn.silu(x), x * 0.5).sum())),
    }


def inputs(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(64, 24)).astype(np.float32)


@pytest.mark.parametrize("reuse", [True, False])
def test_threads_get_the_bits_of_one_thread(reuse):
    previous = aclnn.set_executor_reuse(reuse)
    try:
        free_compiled_programs()
        before = aclnn.runtime_stats()
        progs = programs()
        data = [inputs(seed) for seed in range(THREADS)]
        expected = {(name, t): jax.tree.map(np.asarray, f(data[t]))
                    for name, f in progs.items() for t in range(THREADS)}
        failures, start = [], threading.Barrier(THREADS)

        def worker(t):
            start.wait()
            try:
                for r in range(ROUNDS):
                    for name in list(progs)[r % len(progs):] + list(progs)[:r % len(progs)]:
                        got = jax.tree.map(np.asarray, progs[name](data[t]))
                        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected[name, t])):
                            if a.tobytes() != b.tobytes():
                                failures.append((name, t, r))
            except Exception as e:  # noqa: BLE001 - reported below
                failures.append(repr(e))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not failures, failures[:10]
        del progs
        free_compiled_programs()
        after = aclnn.runtime_stats()
        assert (after["live_tensors"], after["live_executors"]) == (
            before["live_tensors"], before["live_executors"])
    finally:
        aclnn.set_executor_reuse(previous)
