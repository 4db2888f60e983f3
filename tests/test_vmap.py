"""Batching rules: vmap (and nested vmap) of each raw operator against a
Python loop, one custom call per operator in the batched HLO, and
per-example gradients of reducing losses."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_aclnn as aclnn
from cases import CASES, ids

@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
@pytest.mark.parametrize("mapped", ["all", "first", "last"])
def test_vmap_matches_a_loop_with_one_custom_call(rng, case, mapped):
    fn, shapes = case.call, case.shapes
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
        # gx sums terms of the size of |w * invstd * dy| (dy = 2 y arange(4),
        # |y| <= sqrt(8)) to values far smaller: round-off scales with the terms.
        invstd = 1 / np.sqrt(np.asarray(x[i]).var(0) + 1e-5)
        scale = np.abs(np.asarray(w) * invstd * 2 * np.sqrt(8) * np.arange(4.0)).max()
        np.testing.assert_allclose(np.asarray(gx[i]), np.asarray(ex), rtol=1e-4, atol=1e-5 * scale)
        np.testing.assert_allclose(np.asarray(gw[i]), np.asarray(ew), rtol=1e-4, atol=1e-5)


# Rank-8 examples: vmap's batch axis makes rank 9; the batching rules merge
# dimensions so that the custom call stays within aclnn's rank 8.
RANK8 = (2, 1, 3, 1, 2, 2, 1, 3)
RANK8_OPS = {
    "hardshrink_scalar_grad": (lambda x: aclnn.hardshrink_backward(np.float32(1), x), 1),
    "hardshrink_broadcast": (lambda g, x: aclnn.hardshrink_backward(g, x, lambd=0.3), 2),
    "swish": (lambda g, x: aclnn.swish_backward(g, x, beta=0.7), 2),
    "logit_grad": (lambda x, dy: aclnn.logit_grad(x, dy, eps=0.1), 2),
    "smooth_l1_mean": (lambda g, x, y: aclnn.smooth_l1_loss_backward(g, x, y, beta=0.5), 3),
    "grad_smooth_l1_loss": (jax.grad(lambda x, y: aclnn.smooth_l1_loss(x, y, beta=0.5)), 2),
    "grad_hardshrink": (jax.grad(lambda x: aclnn.hardshrink(x, 0.3).sum()), 1),
    "bn_reduce": (lambda g, x, m, s, w: aclnn.batch_norm_reduce_backward(g, x, m, s, w), 5),
}


def rank8_args(rng, name, n, B):
    shapes = [RANK8] * n
    if name == "hardshrink_broadcast":
        shapes = [RANK8, RANK8[3:]]  # grad_output (B, ...) broadcasts against input (B, ...)
    if name == "smooth_l1_mean":
        shapes = [(), RANK8, RANK8[-2:]]
    if name == "bn_reduce":
        shapes = [RANK8, RANK8] + [(RANK8[1],)] * 3
    return [rng.uniform(0.1, 0.9, size=(B,) + s).astype(np.float32) for s in shapes]


@pytest.mark.parametrize("name", sorted(RANK8_OPS))
def test_vmap_over_rank_8_examples_merges_dimensions(rng, name):
    fn, n = RANK8_OPS[name]
    B = 3
    args = rank8_args(rng, name, n, B)
    batched = jax.jit(jax.vmap(fn))
    out = batched(*args)
    loop = [fn(*[a[b] for a in args]) for b in range(B)]
    expected = jax.tree.map(lambda *xs: np.stack(xs), *loop)
    jax.tree.map(lambda o, e: np.testing.assert_allclose(np.asarray(o), e, rtol=1e-5, atol=1e-7),
                 out, expected)
    hlo = batched.lower(*args).as_text()
    assert hlo.count("aclnn_") == 1
    for call in hlo.split("stablehlo.custom_call")[1:]:
        operand_types = call.split(": (")[1].split(") ->")[0]
        assert all(t.count("x") <= 8 for t in operand_types.split("tensor<")[1:]), operand_types


def test_nested_vmap_over_rank_8_examples(rng):
    x = rng.normal(size=(2, 3) + RANK8).astype(np.float32)
    g = rng.normal(size=(3,) + RANK8).astype(np.float32)
    fn = jax.vmap(jax.vmap(aclnn.swish_backward), in_axes=(None, 0))
    out = jax.jit(fn)(g, x)
    expected = np.stack([np.asarray(aclnn.swish_backward(g[j], x[i, j]))
                         for i in range(2) for j in range(3)]).reshape(out.shape)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6)


def test_vmap_past_rank_8_that_cannot_merge_is_a_trace_time_value_error():
    # Every adjacent pair of dimensions broadcasts differently: 9 remain.
    x = np.ones((4, 2, 1, 2, 1, 2, 1, 2, 1), np.float32)
    g = np.ones((4, 1, 2, 1, 2, 1, 2, 1, 2), np.float32)
    fn = jax.jit(jax.vmap(lambda g, x: aclnn.hardshrink_backward(g, x)))
    with pytest.raises(ValueError, match=r"hardshrink_backward: .*grad_output, input has rank 9 "
                                         r"\(shapes grad_output\(4, 1, 2, .*\), input\(4, 2, 1, .*\)\)"
                                         r".*9 dimensions .* at most 8"):
        fn.lower(g, x)
