"""``bench``'s optimizer table: one AdamW step (learning rate 1e-3, weight
decay 0.01) over 4M parameters in 30 tensors, jitted with the parameters
and the state donated, along three paths with paired times:

* ``aclnn``: :func:`jax_aclnn.optax.update_and_apply` with
  :func:`jax_aclnn.optax.adamw` (on a CPU the host provider's
  aclnnApplyAdamWV2 on each parameter in place, where the parameters have
  their moments' dtype: float32);
* ``optax``: ``optax.adamw``'s update and ``optax.apply_updates`` (XLA's
  code);
* ``torch``: ``torch.optim.AdamW(fused=True)``'s step.

Each path reads the parameters, gradients and both moments and writes the
parameters and moments once: bandwidth-bound. The table gives the aclnn
path's GB/s (its bytes: parameters read and written, gradients read,
float32 moments read and written) and their fraction of the machine's
memory-copy bandwidth between warm buffers (the update is in place).
"""

from __future__ import annotations

import statistics
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jax_aclnn import optax as aclnn_optax
from jax_aclnn.cli.bench_cases import paired, timed
from jax_aclnn.cli.common import print_table

PATHS = ("aclnn", "optax", "torch")
#: The parameters: total elements, tensors.
SIZE, TENSORS = 4 * 2**20, 30
LR, WEIGHT_DECAY = 1e-3, 0.01


def _jax_step(path: str, params: dict[str, Any], grads: dict[str, Any]) -> Any:
    """A function of no arguments making one step of ``path`` (its own
    parameters and state, carried from call to call)."""
    if path == "aclnn":
        tx = aclnn_optax.adamw(LR, weight_decay=WEIGHT_DECAY)
        step = lambda p, s, g: aclnn_optax.update_and_apply(tx, g, s, p)  # noqa: E731
    else:
        tx = optax.adamw(LR, weight_decay=WEIGHT_DECAY)

        def step(p, s, g):
            updates, s = tx.update(g, s, p)
            return optax.apply_updates(p, updates), s

    jitted = jax.jit(step, donate_argnums=(0, 1))
    carry = [jax.tree.map(jnp.copy, params), None]
    carry[1] = tx.init(carry[0])

    def call() -> Any:
        carry[0], carry[1] = jitted(carry[0], carry[1], grads)
        return carry[0]
    return call


def _torch_step(draws: list[np.ndarray], grad_draws: list[np.ndarray], dtype: str) -> Any:
    import torch

    tt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    params = [torch.from_numpy(d).to(tt).requires_grad_() for d in draws]
    for p, g in zip(params, grad_draws):
        p.grad = torch.from_numpy(g).to(tt)
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY, fused=True)
    return opt.step


def measure(dtype: str, repeats: int, torch_installed: bool) -> dict[str, Any]:
    """Median step times of every path (``<path>_s``), paired rounds after
    two warm-up rounds."""
    rng = np.random.default_rng(0)
    sizes = np.full(TENSORS, SIZE // TENSORS)
    sizes[-1] += SIZE - sizes.sum()
    draws = [rng.normal(size=int(n)).astype(np.float32) for n in sizes]
    grad_draws = [rng.normal(size=int(n)).astype(np.float32) for n in sizes]
    params = {f"w{i:02d}": jnp.asarray(d).astype(dtype) for i, d in enumerate(draws)}
    grads = {f"w{i:02d}": jnp.asarray(d).astype(dtype) for i, d in enumerate(grad_draws)}
    calls = {path: _jax_step(path, params, grads) for path in PATHS[:2]}
    if torch_installed:
        calls["torch"] = _torch_step(draws, grad_draws, dtype)
    times = paired(calls, repeats + 2, timed)
    medians = {f"{path}_s": statistics.median(ts[2:]) for path, ts in times.items()}
    return {"dtype": dtype, "parameters": SIZE, "tensors": TENSORS, **medians,
            "aclnn_gbps": moved_bytes(dtype) / medians["aclnn_s"] / 1e9}


def moved_bytes(dtype: str) -> int:
    """The bytes the aclnn path's step reads and writes: each parameter read
    and written, its gradient read (both ``dtype``), its float32 moments
    read and written."""
    return SIZE * (3 * jnp.dtype(dtype).itemsize + 4 * 4)


def print_results(rows: list[dict[str, Any]], bandwidth: float) -> None:
    """The table; ``bandwidth`` is the memory-copy bandwidth in GB/s."""
    size, tensors = (rows[0]["parameters"], rows[0]["tensors"]) if rows else (SIZE, TENSORS)
    print_table(
        f"AdamW step, {size:,} parameters in {tensors} tensors, parameters and state donated: "
        "jax_aclnn.optax.update_and_apply vs optax.adamw + apply_updates and torch's fused AdamW "
        f"(medians; ratios > 1: aclnn faster; copy {bandwidth:.1f} GB/s)",
        ["dtype", "aclnn step", "GB/s", "of copy", "vs optax", "vs torch"], 1,
        [[r["dtype"], f"{r['aclnn_s'] * 1e3:,.2f} ms", f"{r['aclnn_gbps']:.1f}",
          f"{r['aclnn_gbps'] / bandwidth:.0%}", f"{r['optax_s'] / r['aclnn_s']:.2f}x",
          f"{r['torch_s'] / r['aclnn_s']:.2f}x" if "torch_s" in r else "-"] for r in rows])
