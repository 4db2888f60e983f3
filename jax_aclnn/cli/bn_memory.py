"""``bench --bn-memory-channels C``: the resident memory (RSS) of a process
around one batch-norm reduce of a (16, C) float32 input, through aclnn and
through the pure-JAX reference, before the call, after it, and after the
program is freed (``jax.clear_caches()``); each path in a fresh process."""

from __future__ import annotations

import subprocess
import sys

from jax_aclnn.cli.common import UsageError, child_env, child_error, print_table

#: About the memory of ``--bn-memory-channels``' child process per channel:
#: its two (16, C) float32 inputs, their random bits and the call's temporaries.
BYTES_PER_CHANNEL = 16 * 4 * 4


#: One batch-norm reduce of a (16, C) float32 input in a fresh process;
#: prints its RSS (MiB) before the call, after it, and after clear_caches.
_SCRIPT = """
import gc, sys, jax, jax.numpy as jnp
import jax_aclnn as aclnn
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) / 1024 for l in f if l.startswith("VmRSS:"))
c = int(sys.argv[1])
g, x = (jax.random.normal(jax.random.key(i), (16, c)) for i in range(2))
m, s = jnp.zeros(c), jnp.ones(c)
f = jax.jit(lambda g, x, m, s: aclnn.batch_norm_reduce_backward(g, x, m, s, None))
jax.block_until_ready((g, x, m, s))
before = rss()
out = jax.block_until_ready(f(g, x, m, s))
after = rss()
del out, f
jax.clear_caches()
gc.collect()
print(before, after, rss())
"""


def measure(channels: int) -> dict[str, dict[str, float]]:
    """RSS in MiB around a (16, channels) batch-norm reduce, per path."""
    results = {}
    for path, reference in (("aclnn", ""), ("pure JAX", "batch_norm_reduce_backward")):
        child = subprocess.run([sys.executable, "-c", _SCRIPT, str(channels)],
                               env=child_env(JAX_ACLNN_REFERENCE=reference), capture_output=True,
                               text=True)
        if child.returncode:
            raise UsageError(f"--bn-memory-channels {channels:,}: the measuring process ({path}) "
                             f"failed: {child_error(child.returncode, child.stderr)}")
        before, after, freed = map(float, child.stdout.split())
        results[path] = {"before_mib": before, "after_call_mib": after, "after_clear_caches_mib": freed}
    return results


def print_results(channels: int, results: dict[str, dict[str, float]]) -> None:
    print_table(
        f"batch-norm reduce, (16, {channels:,}) float32: process RSS",
        ["path", "before", "after the call", "after clear_caches"], 1,
        [[path, *(f"{r[k]:,.0f} MiB" for k in ("before_mib", "after_call_mib", "after_clear_caches_mib"))]
         for path, r in results.items()])
