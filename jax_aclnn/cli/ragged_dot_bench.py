"""``bench``'s grouped-matmul table: forward and backward (``jit(grad)`` in
both operands) of a mixture-of-experts layer's grouped matrix product,
``lhs (M, K)`` rows in ``G`` groups of uneven sizes (one empty) times ``rhs
(G, K, N)``, along three paths with paired times
(:func:`jax_aclnn.cli.step_memory.compare`):

* ``aclnn``: :func:`jax_aclnn.nn.ragged_dot` (on a CPU the host provider's
  aclnnGroupedMatmulV4, forward and both gradients, Eigen's GEMM per tile);
* ``reference``: the same function under :func:`jax_aclnn.reference_path`;
* ``jax.lax``: :func:`jax.lax.ragged_dot` differentiated by JAX (XLA's code).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jax_aclnn as aclnn
from jax_aclnn import nn
from jax_aclnn.cli import step_memory
from jax_aclnn.cli.common import print_table

MODES = ("aclnn", "reference", "jax.lax")
#: (M, K, N, G) of the table: a MoE layer's up projection, 8 experts.
SHAPES = [(4096, 512, 1024, 8)]


def group_sizes(m: int, groups: int) -> np.ndarray:
    """``groups`` uneven sizes summing to ``m``, the second group empty."""
    weights = np.arange(1, groups + 1, dtype=np.float64)
    weights[1] = 0
    sizes = np.floor(weights / weights.sum() * m).astype(np.int32)
    sizes[-1] += m - sizes.sum()
    return sizes


def compile_step(mode: str, args: Any) -> Any:
    """``jax.jit(jax.grad(loss, (0, 1)))`` of ``sum(ragged_dot(lhs, rhs,
    group_sizes) * cotangent)`` through ``mode`` (:data:`MODES`), compiled for ``args``."""
    dot = jax.lax.ragged_dot if mode == "jax.lax" else nn.ragged_dot

    def loss(lhs, rhs, sizes, cotangent):
        return jnp.sum((dot(lhs, rhs, sizes) * cotangent).astype(jnp.float32))

    step = jax.jit(jax.grad(loss, argnums=(0, 1)))
    if mode != "reference":
        return step.lower(*args).compile()
    with aclnn.reference_path():
        return step.lower(*args).compile()


def measure(m: int, k: int, n: int, groups: int, repeats: int, dtype: Any) -> dict[str, Any]:
    """Compile and step times of every mode (:func:`step_memory.compare`)."""
    rng = np.random.default_rng(0)
    draw = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.float32).astype(dtype)  # noqa: E731
    args = jax.block_until_ready((draw(m, k), draw(groups, k, n), jnp.asarray(group_sizes(m, groups)),
                                  draw(m, n)))
    _, times = step_memory.compare({mode: partial(compile_step, mode, args) for mode in MODES},
                                   args, repeats)
    return {"m": m, "k": k, "n": n, "groups": groups, "dtype": str(jnp.dtype(dtype)), **times}


def print_results(rows: list[dict[str, Any]]) -> None:
    print_table(
        "grouped matmul jit(grad) in lhs and rhs, rows in uneven groups (one empty): jax_aclnn.nn."
        "ragged_dot vs its reference and jax.lax.ragged_dot (medians; ratios > 1: aclnn faster)",
        ["M x K x N, groups", "dtype", "aclnn step", "vs reference", "vs jax.lax", "aclnn compile",
         "vs jax.lax"], 2,
        [[f"{r['m']} x {r['k']} x {r['n']}, {r['groups']}", r["dtype"], f"{r['aclnn_s'] * 1e3:,.1f} ms",
          f"{r['reference_s'] / r['aclnn_s']:.2f}x", f"{r['jax.lax_s'] / r['aclnn_s']:.2f}x",
          f"{r['aclnn_compile_s']:.2f} s", f"{r['jax.lax_compile_s'] / r['aclnn_compile_s']:.2f}x"]
         for r in rows])
