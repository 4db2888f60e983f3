"""The differentiable forward ops: jax.grad under jax.jit equals the
gradient of the pure-JAX definitions, the compiled gradient holds the aclnn
custom calls, runtime_stats saw them execute, and nothing stays alive."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_aclnn as aclnn
from conftest import DTYPES, as_dtype, assert_close, f64, free_compiled_programs


def plain_smooth_l1(x, y, reduction, beta):
    d = x - y
    ad = jnp.abs(d)
    loss = jnp.where(ad < beta, 0.5 * d * d / beta, ad - 0.5 * beta) if beta > 0 else ad
    return {"mean": loss.mean(), "sum": loss.sum(), "none": loss}[reduction]


PLAIN = {
    "logit": lambda x: jnp.log(x / (1 - x)),
    "logit_eps": lambda x: jnp.log(jnp.clip(x, 0.2, 0.8) / (1 - jnp.clip(x, 0.2, 0.8))),
    "hardshrink": lambda x: jnp.where(jnp.abs(x) > 0.5, x, 0.0),
    "swish": lambda x: x * jax.nn.sigmoid(1.7 * x),
    "silu": jax.nn.silu,
}
OURS = {
    "logit": aclnn.logit,
    "logit_eps": lambda x: aclnn.logit(x, eps=0.2),
    "hardshrink": aclnn.hardshrink,
    "swish": lambda x: aclnn.swish(x, 1.7),
    "silu": aclnn.silu,
}


@pytest.mark.parametrize("name", sorted(PLAIN))
@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_grad_matches_plain_jax(rng, name, dtype):
    x = as_dtype(rng.uniform(0.05, 0.95, size=(7, 9)), dtype)
    w = as_dtype(rng.normal(size=(7, 9)), dtype)

    def loss(f):
        return lambda x: (f(x).astype(jnp.float32) * w.astype(jnp.float32)).sum()

    ours = jax.jit(jax.grad(loss(OURS[name])))(x)
    plain = jax.grad(loss(PLAIN[name]))(x.astype(jnp.float32))
    assert ours.dtype == x.dtype
    assert_close(ours, f64(plain), dtype)
    assert_close(OURS[name](x), f64(PLAIN[name](x.astype(jnp.float32))), dtype)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("beta", [1.0, 0.3])
def test_smooth_l1_loss_grad_both_arguments(rng, reduction, beta):
    x = jnp.asarray(rng.normal(size=(5, 6)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(6,)), jnp.float32)  # broadcast target

    def f(fn):
        return lambda x, y: jnp.sum(fn(x, y) ** 2) if reduction == "none" else fn(x, y)

    ours = jax.jit(jax.grad(f(lambda a, b: aclnn.smooth_l1_loss(a, b, reduction=reduction, beta=beta)), (0, 1)))(x, y)
    plain = jax.grad(f(lambda a, b: plain_smooth_l1(a, b, reduction, beta)), (0, 1))(x, y)
    for o, p in zip(ours, plain):
        np.testing.assert_allclose(np.asarray(o), np.asarray(p), rtol=1e-5, atol=1e-6)
    value = aclnn.smooth_l1_loss(x, y, reduction=reduction, beta=beta)
    torch_value = torch.nn.functional.smooth_l1_loss(
        torch.from_numpy(f64(x)), torch.from_numpy(f64(jnp.broadcast_to(y, x.shape))),
        reduction=reduction, beta=beta,
    )
    np.testing.assert_allclose(np.asarray(value), torch_value.numpy(), rtol=1e-5, atol=1e-6)


def plain_batch_norm(x, w, b, axis, eps=1e-5):
    axes = tuple(i for i in range(x.ndim) if i != axis)
    mean = x.mean(axes, keepdims=True)
    var = x.var(axes, keepdims=True)
    shape = [1] * x.ndim
    shape[axis] = -1
    return (x - mean) / jnp.sqrt(var + eps) * w.reshape(shape) + b.reshape(shape)


@pytest.mark.parametrize("axis", [-1, 1, 0])
@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_grad_matches_plain_jax(rng, axis, dtype):
    x = as_dtype(rng.normal(size=(6, 5, 4)) * 3 + 1, dtype)
    C = x.shape[axis]
    w = as_dtype(rng.normal(size=C), dtype)
    b = as_dtype(rng.normal(size=C), dtype)
    t = as_dtype(rng.normal(size=x.shape), dtype)

    def loss_ours(x, w, b):
        y = aclnn.batch_norm(x, w, b, channel_axis=axis)[0]
        return (y.astype(jnp.float32) * t.astype(jnp.float32)).sum()

    def loss_plain(x, w, b):
        return (plain_batch_norm(x, w, b, axis % 3) * t.astype(jnp.float32)).sum()

    ours = jax.jit(jax.grad(loss_ours, (0, 1, 2)))(x, w, b)
    f32 = [a.astype(jnp.float32) for a in (x, w, b)]
    plain = jax.grad(loss_plain, (0, 1, 2))(*f32)
    for o, p in zip(ours, plain):
        assert o.dtype == x.dtype
        assert_close(o, f64(p), dtype, scale=8.0)
    y, mean, var = aclnn.batch_norm(x, w, b, channel_axis=axis)
    assert_close(y, f64(plain_batch_norm(*f32, axis % 3)), dtype, scale=4.0)
    axes = tuple(i for i in range(3) if i != axis % 3)
    assert_close(mean, f64(f32[0]).mean(axes), dtype)
    assert_close(var, f64(f32[0]).var(axes), dtype, scale=4.0)


def test_batch_norm_without_weight_or_bias(rng):
    x = jnp.asarray(rng.normal(size=(8, 3)), jnp.float32)
    g = jax.grad(lambda x: (aclnn.batch_norm(x)[0] ** 3).sum())(x)
    p = jax.grad(lambda x: (plain_batch_norm(x, jnp.ones(3), jnp.zeros(3), 1) ** 3).sum())(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(p), rtol=1e-4, atol=1e-4)


def test_training_step_runs_all_five_operators_and_frees_descriptors(rng):
    free_compiled_programs()
    x = jnp.asarray(rng.uniform(0.1, 0.9, size=(16, 4)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(16, 4)), jnp.float32)

    def loss(w):
        h = aclnn.batch_norm(x * w, channel_axis=-1)[0]
        h = aclnn.swish(h) + aclnn.hardshrink(h) + aclnn.logit(jax.nn.sigmoid(h))
        return aclnn.smooth_l1_loss(h, y)

    step = jax.jit(jax.grad(loss))
    hlo = step.lower(jnp.ones(4)).compile().as_text()
    for target in ("smooth_l1_loss_backward", "logit_grad", "hardshrink_backward",
                   "swish_backward", "batch_norm_reduce_backward"):
        assert f'custom_call_target="aclnn_{target}"' in hlo, target
    aclnn.reset_runtime_stats()
    for _ in range(3):
        step(jnp.ones(4)).block_until_ready()
    stats = aclnn.runtime_stats()
    assert stats["provider"] == "host"
    for name, counts in stats["calls"].items():
        assert counts["execute"] == 3, name
    assert stats["live_tensors"] > 0  # call-site executors hold their descriptors
    del step
    free_compiled_programs()
    stats = aclnn.runtime_stats()
    assert stats["live_tensors"] == 0 and stats["live_executors"] == 0
