"""``bench``'s attention table: forward and backward (``jit(grad)``) of causal
attention over ``--attention-tokens`` T tokens (batch 1, 8 heads of 64)
along four paths, each in a fresh process:

* ``aclnn``: :func:`jax_aclnn.nn.dot_product_attention` (on a CPU the host
  provider's blocked aclnnFlashAttentionScore and its Grad);
* ``reference``: the same function on its pure-JAX reference path;
* ``jax.nn``: :func:`jax.nn.dot_product_attention` (XLA's code);
* ``torch``: PyTorch's ``F.scaled_dot_product_attention`` and autograd.

Each reports the median wall time and CPU time of ``repeats`` calls after a
first one, and the peak resident memory (RSS) above the process's before
that first call, sampled every 0.5 ms while it runs: a custom call's
workspace and buffers are not in XLA's memory analysis, so memory is
measured where it is used."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from jax_aclnn.cli.common import UsageError, child_env, child_error, print_table

PATHS = ("aclnn", "reference", "jax.nn", "torch")
HEADS, HEAD_SIZE = 8, 64

#: The measuring process: path, dtype, tokens, repeats -> "wall cpu peak_bytes".
_SCRIPT = """
import os, sys, threading, time
import numpy as np
path, dtype, t, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
shape = (1, t, %(heads)d, %(head)d)
rng = np.random.default_rng(0)
draws = [rng.normal(size=shape).astype(np.float32) for _ in range(4)]
if path == "torch":
    import torch
    tt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    q, k, v, g = (torch.from_numpy(d).to(tt).transpose(1, 2).contiguous() for d in draws)
    def call():
        qs, ks, vs = (x.detach().requires_grad_() for x in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
        return torch.autograd.grad(out, (qs, ks, vs), g)
else:
    import jax, jax.numpy as jnp
    import jax_aclnn
    from jax_aclnn import nn
    q, k, v, g = (jnp.asarray(d).astype(dtype) for d in draws)
    attention = jax.nn.dot_product_attention if path == "jax.nn" else nn.dot_product_attention
    loss = lambda q, k, v: jnp.sum((attention(q, k, v, is_causal=True) * g).astype(jnp.float32))
    step = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    if path == "reference":
        with jax_aclnn.reference_path():
            compiled = step.lower(q, k, v).compile()
    else:
        compiled = step.lower(q, k, v).compile()
    call = lambda: jax.block_until_ready(compiled(q, k, v))
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
peak, done = [0], [False]
def sample():
    while not done[0]:
        peak[0] = max(peak[0], rss())
        time.sleep(0.0005)
base = rss()
sampler = threading.Thread(target=sample)
sampler.start()
result = call()
done[0] = True
sampler.join()
del result
walls, cpus = [], []
for _ in range(repeats):
    c, w = time.process_time(), time.perf_counter()
    call()
    walls.append(time.perf_counter() - w)
    cpus.append(time.process_time() - c)
print(np.median(walls), np.median(cpus), max(peak[0] - base, 0))
""" % {"heads": HEADS, "head": HEAD_SIZE}


def memory_needed(tokens: int) -> int:
    """About the peak memory of the largest path (XLA's: a few float32
    score matrices of T x T per head)."""
    return 4 * HEADS * tokens * tokens * 4


def measure(tokens: int, dtypes: list[str], repeats: int, torch_installed: bool) -> list[dict[str, Any]]:
    """One row per path and dtype: ``wall_s``, ``cpu_s``, ``peak_bytes``."""
    rows = []
    for dtype in dtypes:
        for path in PATHS:
            if path == "torch" and not torch_installed:
                continue
            child = subprocess.run([sys.executable, "-c", _SCRIPT, path, dtype, str(tokens), str(repeats)],
                                   env=child_env(), capture_output=True, text=True)
            if child.returncode:
                raise UsageError(f"--attention-tokens {tokens:,}: the measuring process ({path}, {dtype}) "
                                 f"failed: {child_error(child.returncode, child.stderr)}")
            wall, cpu, peak = map(float, child.stdout.split())
            rows.append({"path": path, "dtype": dtype, "tokens": tokens, "wall_s": wall, "cpu_s": cpu,
                         "peak_bytes": peak})
    return rows


def print_results(rows: list[dict[str, Any]]) -> None:
    base = {r["dtype"]: r for r in rows if r["path"] == "jax.nn"}
    tokens = rows[0]["tokens"] if rows else 0
    print_table(
        f"causal attention jit(grad), batch 1 x {tokens:,} tokens x {HEADS} heads of {HEAD_SIZE}, "
        "each path in a fresh process (medians; ratios > 1: faster or smaller than jax.nn)",
        ["path", "dtype", "step", "vs jax.nn", "CPU time", "peak RSS increase", "vs jax.nn"], 2,
        [[r["path"], r["dtype"], f"{r['wall_s'] * 1e3:,.0f} ms",
          f"{base[r['dtype']]['wall_s'] / r['wall_s']:.2f}x", f"{r['cpu_s'] * 1e3:,.0f} ms",
          f"{r['peak_bytes'] / 2**20:,.0f} MiB",
          f"{base[r['dtype']]['peak_bytes'] / max(r['peak_bytes'], 1):.1f}x"] for r in rows])
