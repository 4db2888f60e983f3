"""A jitted training gradient through all five operators, in every dtype,
against the same model written in jax.numpy.

The model is ``bench``'s training step (:mod:`jax_aclnn.cli.step_memory`:
matmul -> batch_norm -> silu / hardshrink layers, a logit head and a
smooth-L1 loss), so its gradient runs every aclnn backward operator.

* float32: the oracle is the model written in jax.numpy (its own formulas,
  differentiated by JAX) in float64 on the same inputs; the norm-wise
  relative error of the gradient must be within 100 ulps.
* float16, bfloat16: the same model with every operator on its jax.numpy
  formula (:func:`jax_aclnn.reference_path`), in the same dtype, so that
  both round at the same operator boundaries; within 4 ulps norm-wise (the
  formulas round inside too: XLA rounds each bfloat16 operation). Against
  the float64 model, the half-precision error of both is dominated by where
  the model rounds (16% norm-wise for bfloat16 at one seed in eight, the
  same through the kernels and through the formulas), so it would not test
  the operators.

Part of the subset ``.ci/aarch64`` runs under qemu.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_aclnn as aclnn
from cases import OPERATORS
from conftest import DTYPES, enable_x64, f64
from jax_aclnn.cli import step_memory

BATCH, WIDTH, LAYERS = 64, 16, 2


def gradient(dtype, params, x, y, *, use_jnp: bool) -> list[np.ndarray]:
    """``jit(grad(loss))`` of the model in ``dtype``, as float64 leaves."""
    cast = lambda t: jax.tree.map(lambda a: jnp.asarray(a).astype(dtype), t)  # noqa: E731
    step = jax.jit(jax.grad(lambda p, x, y: step_memory.loss(p, x, y, use_jnp=use_jnp)))
    return [f64(g) for g in jax.tree.leaves(step(cast(params), cast(x), cast(y)))]


def random_model(rng: np.random.Generator, dtype) -> tuple[list, np.ndarray, np.ndarray]:
    """Parameters, input and target, already rounded to ``dtype`` (float64
    numpy arrays holding ``dtype``'s values)."""
    rounded = lambda a: f64(jnp.asarray(np.asarray(a, np.float32)).astype(dtype))  # noqa: E731
    params = [(rounded(rng.normal(size=(WIDTH, WIDTH)) / WIDTH ** 0.5),
               rounded(rng.uniform(0.5, 1.5, WIDTH)), rounded(rng.uniform(-0.2, 0.2, WIDTH)))
              for _ in range(LAYERS)]
    return params, rounded(rng.normal(size=(BATCH, WIDTH))), rounded(rng.uniform(-1, 1, (BATCH, 1)))


def relative_error(actual: list[np.ndarray], expected: list[np.ndarray]) -> float:
    """The gradient's error relative to the oracle, norm-wise over all leaves
    (a max over leaves would be dominated by leaves whose terms cancel)."""
    flat = lambda leaves: np.concatenate([g.ravel() for g in leaves])  # noqa: E731
    a, e = flat(actual), flat(expected)
    return float(np.linalg.norm(a - e) / np.linalg.norm(e))


@pytest.mark.parametrize("dtype", DTYPES)
def test_jitted_gradient_through_all_operators(dtype, rng):
    params, x, y = random_model(rng, dtype)
    hlo = jax.jit(jax.grad(step_memory.loss)).lower(
        jax.tree.map(lambda a: jnp.asarray(a, dtype), params), jnp.asarray(x, dtype),
        jnp.asarray(y, dtype)).as_text()
    for name in OPERATORS:  # every backward operator runs, none fell back to jax.numpy
        assert f"aclnn_{name}" in hlo, name
    ours = gradient(dtype, params, x, y, use_jnp=False)
    assert all(np.isfinite(g).all() for g in ours)
    eps = float(jnp.finfo(dtype).eps)
    if dtype == "float32":
        with enable_x64(True):
            oracle = gradient(jnp.float64, params, x, y, use_jnp=True)
        error = relative_error(ours, oracle)
        assert error <= 100 * eps, error
    else:
        with aclnn.reference_path():
            reference = gradient(dtype, params, x, y, use_jnp=False)
        error = relative_error(ours, reference)
        assert error <= 4 * eps, error
