"""Batch-norm reduce gives the same bits on every run and on every thread
count: its blocks and their combine order depend on the shape only."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

import jax_aclnn as aclnn

SHAPES = [(256, 96), (64, 40, 37), (6, 3, 128, 130)]

#: Computes the sums for SHAPES in one process; prints their bytes as hex.
SCRIPT = textwrap.dedent(f"""
    import os, sys
    if len(sys.argv) > 1:  # pin the process, so that XLA's pool has one thread
        os.sched_setaffinity(0, {{0}})
    import jax, jax.numpy as jnp, numpy as np
    import jax_aclnn as aclnn
    for shape in {SHAPES!r}:
        for dtype in ("float32", "float16"):
            rng = np.random.default_rng(7)
            g, x = (jnp.asarray(rng.normal(size=shape).astype(np.float32)).astype(dtype) for _ in "gx")
            c = shape[1]
            m, s = jnp.zeros(c, dtype) + 0.1, jnp.ones(c, dtype)
            out = aclnn.batch_norm_reduce_backward(g, x, m, s, s)
            print("".join(np.asarray(o).tobytes().hex() for o in out))
""")


def run_script(*args: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True,
                         timeout=120, cwd=tempfile.gettempdir())
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="needs Linux")
def test_same_bits_on_one_thread_and_on_all():
    all_threads = run_script()
    assert len(all_threads) == 2 * len(SHAPES)
    assert run_script("--one-thread") == all_threads
    assert run_script() == all_threads  # and between runs


def test_same_bits_between_calls(rng):
    g = rng.normal(size=(512, 64, 9)).astype(np.float32)
    x = rng.normal(size=(512, 64, 9)).astype(np.float32)
    m, s = np.zeros(64, np.float32), np.ones(64, np.float32)
    first = [np.asarray(o) for o in aclnn.batch_norm_reduce_backward(g, x, m, s, s)]
    for _ in range(3):
        again = aclnn.batch_norm_reduce_backward(g, x, m, s, s)
        for a, b in zip(first, again):
            assert np.asarray(b).tobytes() == a.tobytes()
