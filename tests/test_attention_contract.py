"""jax_aclnn.nn.dot_product_attention as people call jax.nn.dot_product_attention:
additive masks at the dtype's limit, scales that overflow CANN's pse, traced
scales, unbatched inputs, empty sequences and heads, and JAX's sequence-length,
window and residual arguments; each compared with jax.nn.dot_product_attention
in float32 (the oracle)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, assert_close, f64

from jax_aclnn import nn


def qkv(rng, dtype, b=1, t=4, n=2, s=4, k=2, h=64):
    q = jnp.asarray(rng.normal(size=(b, t, n, h)), dtype)
    key, value = (jnp.asarray(rng.normal(size=(b, s, k, h)), dtype) for _ in range(2))
    return q, key, value


def f32(*arrays):
    return [None if a is None else jnp.asarray(a).astype(jnp.float32) for a in arrays]


def assert_grads_equal_jax(dtype, loss, args, argnums, scale=16):
    """Values and gradients of ``loss(attention, *args)`` through ours and
    through jax.nn's in float32: finite and equal."""
    ours = jax.value_and_grad(loss, argnums)(nn.dot_product_attention, *args)
    want = jax.value_and_grad(loss, argnums)(jax.nn.dot_product_attention, *f32(*args))
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(want)):
        assert np.isfinite(f64(a)).all()
        assert_close(a, f64(b), dtype, scale=scale)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_mask_of_the_dtypes_minimum_leaves_other_rows_finite(rng, dtype):
    """An additive mask of finfo(dtype).min hiding every key from query 0:
    bias / scale overflowed CANN's pse to -inf, NaN in query 0's row and, in
    the backward, in every key's gradient although the loss ignores that
    row."""
    q, k, v = qkv(rng, dtype)
    bias = jnp.zeros((4, 4), dtype).at[0, :].set(jnp.finfo(dtype).min)

    def loss(attention, q, k, v, bias):
        return attention(q, k, v, bias)[:, 1:].astype(jnp.float32).sum()

    assert_grads_equal_jax(dtype, loss, (q, k, v, bias), (1, 2, 3))


@pytest.mark.parametrize("bias_value,scale,h", [(-1e4, None, 128), (300.0, 1e-3, 64),
                                                (0.5, 0.0, 8)])
def test_biases_and_scales_that_overflowed_bias_over_scale(rng, bias_value, scale, h):
    """float16: -1e4 / (1/sqrt(128)) and 300 / 1e-3 exceed float16's range;
    scale 0 divided the bias by zero."""
    q, k, v = qkv(rng, jnp.float16, t=3, s=5, h=h)
    bias = (bias_value * rng.random((1, 2, 3, 5))).astype(np.float32)
    bias[:, :, 0] = bias_value  # one row all at the value
    bias = jnp.asarray(bias, jnp.float16)

    def loss(attention, q, k, v, bias):
        return jnp.sum(jnp.sin(attention(q, k, v, bias, scale=scale).astype(jnp.float32)))

    assert_grads_equal_jax(jnp.float16, loss, (q, k, v, bias), (1, 2, 3, 4), scale=64)


def test_a_clipped_bias_keeps_its_gradient(rng):
    """The pse is clipped in value only: where a row's bias is finfo.min and
    the loss uses that row too, the bias's gradient is jax.nn's (a clip's
    derivative made it 0)."""
    q, k, v = qkv(rng, jnp.float32, h=8)
    bias = jnp.zeros((4, 4), jnp.float32).at[0, :].set(jnp.finfo(jnp.float32).min)

    def loss(attention, q, k, v, bias):
        return jnp.sum(jnp.sin(attention(q, k, v, bias)))

    assert_grads_equal_jax(jnp.float32, loss, (q, k, v, bias), (1, 2, 3, 4))


def test_a_constant_mask_on_an_explicit_mesh(rng):
    """A NumPy mask closed over (a constant: no mesh of its own) with the
    batch sharded on an explicit mesh: resharded on the query's mesh."""
    mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
    q, k, v = qkv(rng, jnp.float32, b=2, t=4, s=6, h=8)
    pad = np.ones((2, 1, 4, 6), bool)
    pad[0, ..., 4:] = False
    with jax.set_mesh(mesh):
        q, k, v = (jax.device_put(a, jax.sharding.PartitionSpec("x")) for a in (q, k, v))
        ours = jax.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, mask=pad))(q, k, v)
        want = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, mask=pad))(q, k, v)
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)


def test_a_traced_scale(rng):
    q, k, v = qkv(rng, jnp.float32, h=8)
    run = jax.jit(lambda q, k, v, scale: nn.dot_product_attention(q, k, v, scale=scale))
    want = jax.nn.dot_product_attention(q, k, v, scale=0.7)
    np.testing.assert_allclose(run(q, k, v, jnp.float32(0.7)), want, rtol=1e-5, atol=1e-6)


def test_unbatched_inputs(rng):
    q, k, v = (a[0] for a in qkv(rng, jnp.float32, n=4, k=2, h=8))
    loss = lambda attention, q, k, v: jnp.sum(jnp.sin(attention(q, k, v, is_causal=True)))  # noqa: E731
    assert_grads_equal_jax(jnp.float32, loss, (q, k, v), (1, 2, 3))


@pytest.mark.filterwarnings("ignore:divide by zero")  # jax.nn's 1 / sqrt(0)
@pytest.mark.parametrize("s,h", [(0, 8), (5, 0)])
def test_no_key_or_no_head_size_gives_jaxs_zeros(rng, s, h):
    q, k, v = qkv(rng, jnp.float32, t=3, s=s, h=h)
    ours = nn.dot_product_attention(q, k, v)
    assert ours.shape == q.shape
    np.testing.assert_array_equal(ours, jax.nn.dot_product_attention(q, k, v))
    grads = jax.grad(lambda q, k, v: jnp.sum(nn.dot_product_attention(q, k, v)), (0, 1, 2))(q, k, v)
    assert all(not np.any(g) for g in grads)


def test_sequence_lengths_and_local_windows_as_masks(rng):
    """JAX's traced per-example lengths and its window, passed to CANN as its
    attenMask with the causal mask; padded query rows are zeros in both (every
    other query attends to some key: where none, jax.nn gives the values'
    mean, CANN zeros)."""
    q, k, v = qkv(rng, jnp.float32, b=3, t=6, s=6, n=4, k=2, h=8)
    q_len, kv_len = jnp.asarray([4, 3, 1], jnp.int32), jnp.asarray([2, 6, 4], jnp.int32)
    causal = True

    def loss(attention, q, k, v, q_len, kv_len):
        out = attention(q, k, v, is_causal=causal, query_seq_lengths=q_len,
                        key_value_seq_lengths=kv_len, local_window_size=(2, 1))
        return jnp.sum(jnp.sin(out))

    ours = jax.jit(jax.value_and_grad(loss, (1, 2, 3)), static_argnums=0)(
        nn.dot_product_attention, q, k, v, q_len, kv_len)
    want = jax.value_and_grad(loss, (1, 2, 3))(jax.nn.dot_product_attention, q, k, v, q_len,
                                               kv_len)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_residual_is_jaxs_log_sum_exp(rng):
    """JAX's residual (jax >= 0.8): the log-sum-exp of each query's scaled,
    masked logits, (B, T, N); here from float64 NumPy."""
    q, k, v = qkv(rng, jnp.float32, t=5, s=7, n=4, k=1, h=8)
    out, lse = nn.dot_product_attention(q, k, v, is_causal=True, return_residual=True)
    np.testing.assert_allclose(out, jax.nn.dot_product_attention(q, k, v, is_causal=True),
                               rtol=1e-5, atol=1e-6)
    logits = np.einsum("btnh,bsnh->btns", f64(q), f64(k)) / np.sqrt(8)  # the one k/v head
    logits = np.where(np.tril(np.ones((5, 7), bool))[:, None], logits, -np.inf)
    want = np.log(np.sum(np.exp(logits), axis=-1))
    assert lse.shape == want.shape == (1, 5, 4) and lse.dtype == k.dtype
    np.testing.assert_allclose(lse, want, rtol=1e-5, atol=1e-5)


def test_jaxs_other_arguments_are_refused_with_a_reason(rng):
    q, k, v = qkv(rng, jnp.float32, h=8)
    with pytest.raises(ValueError, match="implementation must be None"):
        nn.dot_product_attention(q, k, v, implementation="xla")
    with pytest.raises(ValueError, match=r"query_seq_lengths must be integers of shape \(1,\)"):
        nn.dot_product_attention(q, k, v, query_seq_lengths=jnp.ones((2,), jnp.int32))
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        nn.dot_product_attention(*(a.astype(jnp.int32) for a in (q, k, v)))
