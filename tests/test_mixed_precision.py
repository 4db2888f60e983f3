"""Mixed precision as CANN and JAX users have it (issue 28, items 1 and 2):
half-precision activations with float32 statistics and parameters in batch
norm, JAX type promotion in the loss; against PyTorch's CPU kernels run in
float32 on the same half inputs, with torch_npu's tolerance rule, and the
cases of torch_npu's own test of aclnnBatchNormReduceBackward."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

import jax_aclnn as aclnn
from conftest import f64

HALF = ["float16", "bfloat16"]


def assert_rtol_equal(actual, expected, dtype) -> None:
    """torch_npu's ``assertRtolEqual``: an element passes within ``prec``
    absolutely or relatively (1e-4 for float32, 1e-3 for float16: about an
    ulp; for bfloat16, whose ulp is 8 times float16's, 8e-3), and the
    comparison fails only if more than ``size * prec`` elements pass
    neither way; NaNs must sit in the same places."""
    prec = {"float32": 1e-4, "float16": 1e-3, "bfloat16": 8e-3}[jnp.dtype(dtype).name]
    actual, expected = f64(actual), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    diff = np.abs(np.nan_to_num(actual) - np.nan_to_num(expected))
    deno = np.maximum(np.abs(actual), np.abs(expected)) + 1e-9
    bad = (diff > prec) & (diff / deno > prec)
    assert bad.sum() <= actual.size * prec, f"{bad.sum()} of {actual.size} elements off: {diff.max()}"


def torch_npu_tensors(shape_formats, low=1, high=10, seed=1234):
    """torch_npu's ``create_common_tensor`` in turn for each (dtype, shape),
    after ``np.random.seed(seed)``: uniform values in [low, high)."""
    np.random.seed(seed)
    return [np.random.uniform(low, high, shape).astype(dtype) for dtype, shape in shape_formats]


# ----- aclnnBatchNormReduceBackward: torch_npu's test_batchnorm_backward_reduce.py --------


def test_torch_npu_batch_norm_backward_reduce_golden_values():
    """torch_npu's ``test_batch_norm_backward_reduce``: float32, (1, 3, 9, 9),
    its seed and its golden values."""
    g, x, mean, invstd, weight = torch_npu_tensors(
        [(np.float32, (1, 3, 9, 9))] * 2 + [(np.float32, (3,))] * 3)
    outs = aclnn.batch_norm_reduce_backward(g, x, mean, invstd, weight)
    golden = ([449.18185, 464.78906, 471.87485], [831.08484, 2112.0908, 259.91568],
              [6091.88, 3367.45, 1824.8948], [449.18185, 464.78906, 471.87485])
    for out, expected in zip(outs, golden):
        assert_rtol_equal(out, np.float32(expected), "float32")


def test_torch_npu_batch_norm_backward_reduce_mix_precision():
    """torch_npu's ``test_batch_norm_backward_reduce_mix_precision``: float16
    grad_out/input with float32 mean, invstd and weight equal the float32
    call on the same values; the results are float32 (mean's and weight's
    dtype, as ATen's batch_norm_backward_reduce)."""
    g, x, mean, invstd, weight = torch_npu_tensors(
        [(np.float16, (1, 3, 9, 9))] * 2 + [(np.float32, (3,))] * 3)
    mixed = aclnn.batch_norm_reduce_backward(g, x, mean, invstd, weight)
    full = aclnn.batch_norm_reduce_backward(g.astype(np.float32), x.astype(np.float32), mean,
                                            invstd, weight)
    for m, f in zip(mixed, full):
        assert m.dtype == jnp.float32
        assert_rtol_equal(m, f, "float32")


@pytest.mark.parametrize("dtype", HALF + ["float32"])
@pytest.mark.parametrize("vectors", ["float32", "float16", "statistics float32, weight float16"])
def test_batch_norm_reduce_backward_takes_each_vector_in_its_own_dtype(rng, dtype, vectors):
    """CANN takes mean, invstd and weight as FLOAT or FLOAT16 whatever the
    input's dtype; sum_dy and sum_dy_xmu come back in mean's dtype,
    grad_weight and grad_bias in weight's, the sums formed in float32 (the
    float64 oracle on the values given)."""
    shape = (6, 5, 7)
    x = jnp.asarray(300 + rng.normal(size=shape), dtype)  # a mean half precision cannot hold
    g = jnp.asarray(rng.normal(size=shape), dtype)
    stat_dtype = "float16" if vectors == "float16" else "float32"
    weight_dtype = "float32" if vectors == "float32" else "float16"
    mean = jnp.asarray(f64(x).mean((0, 2)), stat_dtype)
    invstd = jnp.asarray(rng.uniform(0.5, 2, size=5), stat_dtype)
    weight = jnp.asarray(rng.normal(size=5), weight_dtype)
    outs = jax.jit(aclnn.batch_norm_reduce_backward)(g, x, mean, invstd, weight)
    assert [o.dtype for o in outs] == [jnp.dtype(stat_dtype)] * 2 + [jnp.dtype(weight_dtype)] * 2
    bshape = (1, 5, 1)
    xmu = f64(g) * (f64(x) - f64(mean).reshape(bshape))
    expected = (f64(g).sum((0, 2)), xmu.sum((0, 2)), xmu.sum((0, 2)) * f64(invstd),
                f64(g).sum((0, 2)))
    # round-off: the float32 sums of the terms, then the result's own rounding
    terms = (np.abs(f64(g)) * (1 + np.abs(f64(x) - f64(mean).reshape(bshape)))).sum((0, 2)).max()
    for o, e in zip(outs, expected):
        eps = float(jnp.finfo(o.dtype).eps)
        np.testing.assert_allclose(f64(o), e, rtol=eps, atol=2e-6 * terms * 2)


def test_batch_norm_reduce_backward_refuses_what_cann_refuses():
    """bfloat16 statistics with a float16 input, or grad_out and input of
    different dtypes: a TypeError naming the dtypes."""
    x = jnp.ones((2, 3), jnp.float16)
    v32 = jnp.ones(3, jnp.float32)
    with pytest.raises(TypeError, match="mean has dtype bfloat16; with an input of dtype "
                                        "float16 it must be float16, float32"):
        aclnn.batch_norm_reduce_backward(x, x, v32.astype(jnp.bfloat16), v32, v32)
    with pytest.raises(TypeError, match="share one dtype.*grad_out: float32.*input: float16"):
        aclnn.batch_norm_reduce_backward(x.astype(jnp.float32), x, v32, v32, v32)


# ----- batch_norm: half activations, float32 parameters ------------------------------------


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("channel_axis,shape", [(1, (4, 6, 5, 5)), (-1, (32, 6))])
def test_batch_norm_with_half_input_and_float32_parameters(rng, dtype, channel_axis, shape):
    """PyTorch AMP's layout (as in torch_npu's op-plugin batch-norm tests):
    a half input with float32 weight and bias. The oracle is PyTorch's CPU
    batch norm in float32 on the same half values; y and the input's
    gradient come back in the input's dtype within torch_npu's half
    tolerance, the parameters' gradients in float32 within its float32
    tolerance (computed in float32: no round trip through half precision)."""
    c = shape[channel_axis]
    x = jnp.asarray(rng.normal(2, 3, size=shape), dtype)
    w = jnp.asarray(rng.uniform(0.5, 2, c), jnp.float32)
    b = jnp.asarray(rng.normal(size=c), jnp.float32)
    gy = jnp.asarray(rng.normal(size=shape), dtype)

    def loss(x, w, b):
        y = aclnn.batch_norm(x, w, b, channel_axis=channel_axis)[0]
        return (y.astype(jnp.float32) * gy.astype(jnp.float32)).sum(), y

    (_, y), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(x, w, b)
    assert y.dtype == grads[0].dtype == jnp.dtype(dtype)
    assert grads[1].dtype == grads[2].dtype == jnp.float32

    def torch_layout(a):  # float32, channels at dim 1
        a = np.asarray(f64(a), np.float32)
        return torch.from_numpy(np.moveaxis(a, channel_axis, 1).copy() if a.ndim > 1 else a)

    tx, tw, tb = (torch_layout(a).requires_grad_() for a in (x, w, b))
    ty = torch.nn.functional.batch_norm(tx, None, None, tw, tb, training=True, eps=1e-5)
    ty.backward(torch_layout(gy))
    back = lambda t: np.moveaxis(t.detach().numpy(), 1, channel_axis)  # noqa: E731
    assert_rtol_equal(y, back(ty), dtype)
    assert_rtol_equal(grads[0], back(tx.grad), dtype)
    assert_rtol_equal(grads[1], tw.grad.numpy(), "float32")
    assert_rtol_equal(grads[2], tb.grad.numpy(), "float32")


@pytest.mark.parametrize("dtype", HALF)
def test_batch_norm_keeps_the_input_dtype_with_parameters_of_another(rng, dtype):
    x = jnp.asarray(rng.normal(size=(8, 3)), dtype)
    for w in (jnp.ones(3, jnp.float32), jnp.ones(3, jnp.float16), jnp.ones(3, jnp.bfloat16)):
        y, mean, var = aclnn.batch_norm(x, w, jnp.zeros(3, jnp.float32))
        assert (y.dtype, mean.dtype, var.dtype) == (x.dtype, jnp.float32, jnp.float32)
        gw = jax.grad(lambda w: aclnn.batch_norm(x, w)[0].astype(jnp.float32).sum())(w)
        assert gw.dtype == w.dtype


# ----- smooth_l1_loss: JAX's type promotion -------------------------------------------------


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_smooth_l1_loss_promotes_as_jax_numpy(rng, reduction):
    """bfloat16 predictions with a float32 target: a float32 loss, as
    ``optax.huber_loss`` and jax.numpy give; each gradient in its argument's
    dtype. A Python scalar target keeps the predictions' dtype."""
    pred = jnp.asarray(rng.normal(size=(5, 4)), jnp.bfloat16)
    target = jnp.asarray(rng.normal(size=(5, 4)), jnp.float32)
    loss = aclnn.smooth_l1_loss(pred, target, reduction=reduction, beta=0.5)
    huber = optax.huber_loss(pred, target, delta=0.5) / 0.5
    expected = {"mean": huber.mean(), "sum": huber.sum(), "none": huber}[reduction]
    assert loss.dtype == expected.dtype == jnp.float32
    np.testing.assert_allclose(f64(loss), f64(expected), rtol=1e-6, atol=1e-6)
    total = lambda p, t: aclnn.smooth_l1_loss(p, t, reduction=reduction, beta=0.5).sum()  # noqa: E731
    gp, gt = jax.grad(total, argnums=(0, 1))(pred, target)
    assert (gp.dtype, gt.dtype) == (jnp.bfloat16, jnp.float32)
    assert aclnn.smooth_l1_loss(pred, 0.25).dtype == jnp.bfloat16
    with pytest.raises(TypeError, match="share one dtype"):  # the raw operator: CANN's contract
        aclnn.smooth_l1_loss_backward(1.0, pred, target)
