"""A jitted training gradient through every operator, in every dtype,
against the same model written in jax.numpy.

The model is the every-operator network (:mod:`jax_aclnn.network`:
blocks of matmul, the normalizations and the activations, a prediction and
the losses), so its gradient runs every aclnn backward operator.

* float32: the oracle is the network's formulas in jax.numpy (its
  ``plain`` form, differentiated by JAX) in float64 on the same inputs;
  the norm-wise relative error of the gradient must be within 100 ulps.
* float16, bfloat16: the same network with every operator on its
  jax.numpy formula (:func:`jax_aclnn.reference_path`), in the same dtype,
  so that both round at the same operator boundaries; within 4 ulps
  norm-wise (the formulas round inside too: XLA rounds each bfloat16
  operation). Against the float64 model, the half-precision error of both
  is dominated by where the model rounds, so it would not test the
  operators.

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
from jax_aclnn import network

BATCH, WIDTH, BLOCKS = 64, 16, 2


def gradient(dtype, params, x, y, *, plain: bool) -> list[np.ndarray]:
    """``jit(grad(loss))`` of the network in ``dtype``, as float64 leaves."""
    cast = lambda t: jax.tree.map(lambda a: jnp.asarray(a).astype(dtype), t)  # noqa: E731
    step = jax.jit(jax.grad(lambda p, x, y: network.loss(p, x, y, plain=plain)))
    return [f64(g) for g in jax.tree.leaves(step(cast(params), cast(x), cast(y)))]


def random_model(rng: np.random.Generator, dtype) -> tuple[list, np.ndarray, np.ndarray]:
    """Weights, input and target, already rounded to ``dtype`` (float64
    numpy arrays holding ``dtype``'s values)."""
    rounded = lambda a: f64(jnp.asarray(np.asarray(a, np.float32)).astype(dtype))  # noqa: E731
    sizes = [WIDTH] * (BLOCKS + 1) + [1]
    params = [rounded(rng.normal(size=(a, b)) / a ** 0.5) for a, b in zip(sizes[:-1], sizes[1:])]
    return params, rounded(rng.normal(size=(BATCH, WIDTH))), rounded(rng.uniform(0.1, 0.9, BATCH))


def relative_error(actual: list[np.ndarray], expected: list[np.ndarray]) -> float:
    """The gradient's error relative to the oracle, norm-wise over all leaves
    (a max over leaves would be dominated by leaves whose terms cancel)."""
    flat = lambda leaves: np.concatenate([g.ravel() for g in leaves])  # noqa: E731
    a, e = flat(actual), flat(expected)
    return float(np.linalg.norm(a - e) / np.linalg.norm(e))


@pytest.mark.parametrize("dtype", DTYPES)
def test_jitted_gradient_through_every_operator(dtype, rng):
    params, x, y = random_model(rng, dtype)
    hlo = jax.jit(jax.grad(network.loss)).lower(
        [jnp.asarray(a, dtype) for a in params], jnp.asarray(x, dtype),
        jnp.asarray(y, dtype)).as_text()
    for name in OPERATORS:  # every backward operator runs, none fell back to jax.numpy
        assert f"aclnn_{name}" in hlo, name
    ours = gradient(dtype, params, x, y, plain=False)
    assert all(np.isfinite(g).all() for g in ours)
    eps = float(jnp.finfo(dtype).eps)
    if dtype == "float32":
        with enable_x64(True):
            oracle = gradient(jnp.float64, params, x, y, plain=True)
        error = relative_error(ours, oracle)
        assert error <= 100 * eps, error
    else:
        with aclnn.reference_path():
            reference = gradient(dtype, params, x, y, plain=False)
        error = relative_error(ours, reference)
        assert error <= 4 * eps, error
