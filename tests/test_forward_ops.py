"""The differentiable forward ops: jax.grad under jax.jit equals the
gradient of the pure-JAX definitions, the compiled gradient holds the aclnn
custom calls, runtime_stats saw them execute, and nothing stays alive."""

from __future__ import annotations

from contextlib import nullcontext

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_aclnn as aclnn
from jax_aclnn import network
from cases import FORWARD, OPERATORS, batch_norm, elementwise, smooth_l1_loss
from conftest import DTYPES, as_dtype, assert_close, f64, free_compiled_programs


@pytest.mark.parametrize("forward", FORWARD, ids=[f.name for f in FORWARD])
@pytest.mark.parametrize("dtype", DTYPES)
def test_value_and_gradient_match_the_formula(rng, forward, dtype):
    """Every differentiable op of the table: its value and its jitted
    gradient in every operand, against its plain jax.numpy formula in
    float32 on the same (rounded) operands."""
    operands = [as_dtype(a, dtype) for a in forward.sample(rng)]
    out = forward.ours(*operands)
    weights = as_dtype(rng.normal(size=np.shape(out)), dtype)

    def loss(f):
        return lambda *a: (f(*a).astype(jnp.float32) * weights.astype(jnp.float32)).sum()

    argnums = tuple(range(len(operands)))
    ours = jax.jit(jax.grad(loss(forward.ours), argnums))(*operands)
    f32 = [a.astype(jnp.float32) for a in operands]
    plain = jax.grad(loss(forward.plain), argnums)(*f32)
    # round-off: a few roundings per element; a reduction's gradient sums its terms
    scale = 8.0 if elementwise(forward.op) else 8.0 * np.sqrt(operands[0].size)
    for o, p, a in zip(ours, plain, operands):
        assert o.dtype == a.dtype
        assert_close(o, f64(p), dtype, scale=scale)
    assert out.dtype == operands[0].dtype
    assert_close(out, f64(forward.plain(*f32)), dtype, scale=4.0)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("beta", [1.0, 0.3])
def test_smooth_l1_loss_grad_both_arguments(rng, reduction, beta):
    x = jnp.asarray(rng.normal(size=(5, 6)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(6,)), jnp.float32)  # broadcast target

    def f(fn):
        return lambda x, y: jnp.sum(fn(x, y) ** 2) if reduction == "none" else fn(x, y)

    ours = jax.jit(jax.grad(f(lambda a, b: aclnn.smooth_l1_loss(a, b, reduction=reduction, beta=beta)), (0, 1)))(x, y)
    plain = jax.grad(f(lambda a, b: smooth_l1_loss(a, b, reduction, beta)), (0, 1))(x, y)
    for o, p in zip(ours, plain):
        np.testing.assert_allclose(np.asarray(o), np.asarray(p), rtol=1e-5, atol=1e-6)
    value = aclnn.smooth_l1_loss(x, y, reduction=reduction, beta=beta)
    torch_value = torch.nn.functional.smooth_l1_loss(
        torch.from_numpy(f64(x)), torch.from_numpy(f64(jnp.broadcast_to(y, x.shape))),
        reduction=reduction, beta=beta,
    )
    np.testing.assert_allclose(np.asarray(value), torch_value.numpy(), rtol=1e-5, atol=1e-6)


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
        return (batch_norm(x, w, b, axis) * t.astype(jnp.float32)).sum()

    ours = jax.jit(jax.grad(loss_ours, (0, 1, 2)))(x, w, b)
    f32 = [a.astype(jnp.float32) for a in (x, w, b)]
    plain = jax.grad(loss_plain, (0, 1, 2))(*f32)
    for o, p in zip(ours, plain):
        assert o.dtype == x.dtype
        assert_close(o, f64(p), dtype, scale=8.0)
    y, mean, var = aclnn.batch_norm(x, w, b, channel_axis=axis)
    assert_close(y, f64(batch_norm(*f32, axis)), dtype, scale=4.0)
    axes = tuple(i for i in range(3) if i != axis % 3)
    assert_close(mean, f64(f32[0]).mean(axes), dtype)
    assert_close(var, f64(f32[0]).var(axes), dtype, scale=4.0)


@pytest.mark.parametrize("shape", [(64, 16), (8, 16, 5)])
def test_channel_at_dim_1_reaches_the_reduce_without_a_reshape(rng, shape):
    """aclnnBatchNormReduceBackward takes (N, C, *): an input with its
    channels at dim 1 is passed as it is. Reshaped to (N, C, 1), XLA
    compiled a bfloat16 input into a convert round trip, one extra pass
    over x and one over the gradient per call."""
    x = as_dtype(rng.normal(size=shape), jnp.bfloat16)
    grad = jax.jit(jax.grad(lambda x: (aclnn.batch_norm(x, channel_axis=1)[0]
                                       .astype(jnp.float32) ** 2).sum()))
    hlo = grad.lower(x).compile().as_text()
    calls = [line for line in hlo.splitlines() if 'custom_call_target="aclnn_batch_norm_reduce' in line]
    operand = f"bf16[{','.join(map(str, shape))}]"
    assert calls and all(line.count(operand) >= 2 for line in calls), calls
    assert_close(grad(x), f64(jax.grad(lambda x: (batch_norm(x, channel_axis=1) ** 2).sum())(
        x.astype(jnp.float32))), jnp.bfloat16, scale=8.0)


def test_batch_norm_without_weight_or_bias(rng):
    x = jnp.asarray(rng.normal(size=(8, 3)), jnp.float32)
    g = jax.grad(lambda x: (aclnn.batch_norm(x)[0] ** 3).sum())(x)
    p = jax.grad(lambda x: (batch_norm(x) ** 3).sum())(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(p), rtol=1e-4, atol=1e-4)


def test_training_step_runs_every_operator_and_frees_descriptors(rng):
    free_compiled_programs()
    params = network.init(jax.random.key(0), 4, 8, 2)
    x = jnp.asarray(rng.normal(size=(16, 4)), jnp.float32)
    y = jnp.asarray(rng.uniform(0.1, 0.9, size=16), jnp.float32)
    step = jax.jit(jax.grad(network.loss))
    hlo = step.lower(params, x, y).compile().as_text()
    for target in OPERATORS:
        assert f'custom_call_target="aclnn_{target}"' in hlo, target
    aclnn.reset_runtime_stats()
    for _ in range(3):
        jax.block_until_ready(step(params, x, y))
    stats = aclnn.runtime_stats()
    assert stats["provider"] == "host"
    for target in OPERATORS:  # (operators declared by other tests ran no call here)
        counts = stats["calls"][aclnn.ops.primitive(target).aclnn_name]
        assert counts["execute"] > 0 and counts["execute"] % 3 == 0, target
    assert stats["live_tensors"] > 0  # call-site executors hold their descriptors
    del step
    free_compiled_programs()
    stats = aclnn.runtime_stats()
    assert stats["live_tensors"] == 0 and stats["live_executors"] == 0


def batch_norm_grads_numpy(x, w, gy, axis, eps=1e-5):
    """float64 gradients of sum(batch_norm(x, w, b) * gy) in x, w and b."""
    axes = tuple(i for i in range(x.ndim) if i != axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    n = x.size / x.shape[axis]
    mean = x.mean(axes, keepdims=True)
    invstd = 1 / np.sqrt(x.var(axes, keepdims=True) + eps)
    xhat = (x - mean) * invstd
    gb = gy.sum(axes)
    gw = (gy * xhat).sum(axes)
    gx = w.reshape(shape) * invstd * (gy - gb.reshape(shape) / n - xhat * gw.reshape(shape) / n)
    return gx, gw, gb


@pytest.mark.parametrize("path", ["aclnn", "reference"])
@pytest.mark.parametrize("dtype,center", [("float16", 1000.0), ("bfloat16", 100.0)])
@pytest.mark.parametrize("axis,shape", [(-1, (256, 8)), (1, (16, 4, 12))])
def test_half_batch_norm_keeps_float32_statistics(rng, path, dtype, center, axis, shape):
    """|mean| >> std: statistics rounded to the input dtype (the backward's
    mean in float16 at 1000 is off by up to 0.25) cost 6-13% of grad_weight;
    kept in float32 end to end the gradients are within 1% of float64."""
    C = shape[axis]
    channel = [1] * len(shape)
    channel[axis] = C
    x = as_dtype(center + rng.normal(size=shape) * rng.uniform(0.5, 2, C).reshape(channel), dtype)
    w = as_dtype(rng.uniform(0.5, 2, C), dtype)
    b = as_dtype(rng.normal(size=C), dtype)
    gy = as_dtype(rng.normal(size=shape), dtype)

    def loss(x, w, b):
        y = aclnn.batch_norm(x, w, b, channel_axis=axis)[0]
        return (y.astype(jnp.float32) * gy.astype(jnp.float32)).sum()

    with aclnn.reference_path() if path == "reference" else nullcontext():
        grads = jax.jit(jax.grad(loss, (0, 1, 2)))(x, w, b)
    expected = batch_norm_grads_numpy(f64(x), f64(w), f64(gy), axis % len(shape))
    for name, g, e in zip(("x", "weight", "bias"), grads, expected):
        assert g.dtype == x.dtype
        error = np.abs(f64(g) - e).max() / np.abs(e).max()
        assert error < 0.01, f"grad {name}: {100 * error:.2f}% off float64"
    _, mean, var = aclnn.batch_norm(x, w, b, channel_axis=axis)
    axes = tuple(i for i in range(len(shape)) if i != axis % len(shape))
    assert mean.dtype == var.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(mean), f64(x).mean(axes), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(var), f64(x).var(axes), rtol=1e-4)


def test_hardshrink_passes_nan_as_torch_does():
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.5, -0.5, 0.50001, -0.7, 0.2, 0.0], np.float32)
    expected = torch.nn.functional.hardshrink(torch.from_numpy(x), 0.5).numpy()
    out = np.asarray(jax.jit(aclnn.hardshrink)(x))
    np.testing.assert_array_equal(out, expected)  # NaN positions must match too
    grad = np.asarray(jax.grad(lambda x: aclnn.hardshrink(x).sum())(x))
    assert np.isnan(out[0]) and grad[0] == 1.0  # the backward passes the gradient at NaN


@pytest.mark.parametrize("path", ["aclnn", "reference"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("lambd", [0.3, 0.7, 1 / 3])
def test_half_hardshrink_forward_and_backward_agree_at_lambd(path, dtype, lambd):
    """Every half-precision value around lambd (whose rounding to the half
    type differs from float32's): an element the forward zeroes has zero
    gradient, and the rest gradient 1. Both compare in float32, as the
    kernel does: the oracle is PyTorch on the float32 values."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    every = bits.view(np.float16 if dtype == "float16" else jnp.bfloat16).astype(np.float32)
    every = every[np.isfinite(every)]
    near = every[np.abs(np.abs(every) - lambd) < 0.05 * lambd]
    x = jnp.asarray(near).astype(dtype)
    with aclnn.reference_path() if path == "reference" else nullcontext():
        out = jax.jit(lambda x: aclnn.hardshrink(x, lambd))(x)
        grad = jax.jit(jax.grad(lambda x: aclnn.hardshrink(x, lambd).astype(jnp.float32).sum()))(x)
    zeroed = f64(out) == 0
    np.testing.assert_array_equal(f64(grad), np.where(zeroed, 0.0, 1.0))
    expected = torch.nn.functional.hardshrink(torch.from_numpy(near), lambd).numpy()
    np.testing.assert_array_equal(f64(out), expected)
    assert zeroed.any() and not zeroed.all()
