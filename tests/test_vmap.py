"""Batching rules: vmap (and nested vmap) of each raw operator against a
Python loop, one custom call per operator in the batched HLO, and
per-example gradients of reducing losses."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_aclnn as aclnn

OPS = {
    "smooth_l1_mean": (lambda g, x, y: aclnn.smooth_l1_loss_backward(g, x, y, reduction="mean", beta=0.5), ((), (5, 3), (3,))),
    "smooth_l1_none": (lambda g, x, y: aclnn.smooth_l1_loss_backward(g, x, y, reduction="none"), ((5, 3), (5, 3), (3,))),
    "logit_grad": (lambda x, dy: aclnn.logit_grad(x, dy, eps=0.05), ((5, 3), (5, 3))),
    "hardshrink": (lambda g, x: aclnn.hardshrink_backward(g, x, lambd=0.3), ((5, 3), (3,))),
    "swish": (lambda g, x: aclnn.swish_backward(g, x, beta=1.5), ((5, 3), (5, 3))),
    "bn_reduce": (lambda g, x, m, s, w: aclnn.batch_norm_reduce_backward(g, x, m, s, w), ((4, 3, 2), (4, 3, 2), (3,), (3,), (3,))),
}


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("mapped", ["all", "first", "last"])
def test_vmap_matches_a_loop_with_one_custom_call(rng, name, mapped):
    fn, shapes = OPS[name]
    B = 4
    flags = [True] * len(shapes) if mapped == "all" else [
        i == (0 if mapped == "first" else len(shapes) - 1) for i in range(len(shapes))]
    args = [rng.uniform(0.1, 0.9, size=((B,) if f else ()) + s).astype(np.float32)
            for f, s in zip(flags, shapes)]
    in_axes = [0 if f else None for f in flags]
    out = jax.jit(jax.vmap(fn, in_axes=in_axes))(*args)
    loop = [fn(*[a[b] if f else a for a, f in zip(args, flags)]) for b in range(B)]
    expected = jax.tree.map(lambda *xs: np.stack(xs), *loop)
    jax.tree.map(lambda o, e: np.testing.assert_allclose(np.asarray(o), e, rtol=1e-5, atol=1e-6), out, expected)
    hlo = jax.jit(jax.vmap(fn, in_axes=in_axes)).lower(*args).compile().as_text()
    assert hlo.count("custom_call_target=\"aclnn_") == 1


def test_nested_vmap_and_other_axes(rng):
    x = rng.uniform(0.1, 0.9, size=(3, 5, 4)).astype(np.float32)
    g = rng.normal(size=(4, 5, 3)).astype(np.float32)
    inner = jax.vmap(lambda g, x: aclnn.swish_backward(g, x), in_axes=(0, 1))
    out = jax.vmap(inner, in_axes=(2, 0))(g, x)
    expected = np.stack([np.stack([aclnn.swish_backward(g[j, :, i], x[i, :, j]) for j in range(4)]) for i in range(3)])
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6)


def test_per_example_gradients_of_a_mean_loss(rng):
    x = jnp.asarray(rng.normal(size=(6, 10)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(6, 10)), jnp.float32)
    per_example = jax.jit(jax.vmap(jax.grad(lambda a, b: aclnn.smooth_l1_loss(a, b))))(x, y)
    for i in range(6):
        one = jax.grad(lambda a: aclnn.smooth_l1_loss(a, y[i]))(x[i])
        np.testing.assert_allclose(np.asarray(per_example[i]), np.asarray(one), rtol=1e-6)


def test_per_example_batch_norm_gradients(rng):
    x = jnp.asarray(rng.normal(size=(3, 8, 4)), jnp.float32)
    f = lambda x, w: (aclnn.batch_norm(x, w)[0] ** 2 * jnp.arange(4.0)).sum()  # noqa: E731
    w = jnp.asarray(rng.normal(size=4), jnp.float32)
    gx, gw = jax.jit(jax.vmap(jax.grad(f, (0, 1)), in_axes=(0, None)))(x, w)
    for i in range(3):
        ex, ew = jax.grad(f, (0, 1))(x[i], w)
        np.testing.assert_allclose(np.asarray(gx[i]), np.asarray(ex), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(gw[i]), np.asarray(ew), rtol=1e-4, atol=1e-5)
