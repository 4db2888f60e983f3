"""The aclnn operators against independent oracles: PyTorch's CPU ATen
kernels and float64 NumPy formulas, on the values the kernel sees."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_aclnn as aclnn
from cases import ORACLES
from conftest import DTYPES, as_dtype, assert_close, f64

T = torch.from_numpy


# ----- smooth L1 --------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("beta", [1.0, 0.5, 2.0, 0.0])
def test_smooth_l1_loss_backward(rng, dtype, reduction, beta):
    shape = (3, 5, 7)
    x = as_dtype(rng.normal(size=shape) * 2, dtype)
    y = as_dtype(rng.normal(size=shape) * 2, dtype)
    g = as_dtype(rng.normal(size=shape if reduction == "none" else ()), dtype)
    out = jax.jit(aclnn.smooth_l1_loss_backward, static_argnames=("reduction", "beta"))(
        g, x, y, reduction=reduction, beta=beta
    )
    assert out.dtype == x.dtype and out.shape == shape
    assert_close(out, ORACLES["smooth_l1_loss_backward"](g, x, y, reduction=reduction, beta=beta), dtype)
    code = {"none": 0, "mean": 1, "sum": 2}[reduction]
    ref = torch.ops.aten.smooth_l1_loss_backward(T(f64(g)), T(f64(x)), T(f64(y)), code, beta)
    if beta > 0:  # ATen's beta == 0 branch differs only at d == 0 (sign(0))
        assert_close(out, ref.numpy(), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_smooth_l1_loss_backward_broadcast(rng, dtype):
    x = as_dtype(rng.normal(size=(4, 1, 6)), dtype)
    y = as_dtype(rng.normal(size=(5, 1)), dtype)
    g = as_dtype(rng.normal(size=(6,)), dtype)
    out = aclnn.smooth_l1_loss_backward(g, x, y, reduction="none", beta=0.7)
    assert out.shape == (4, 5, 6)
    assert_close(out, ORACLES["smooth_l1_loss_backward"](g, x, y, reduction="none", beta=0.7), dtype)


def test_smooth_l1_loss_backward_integer_reduction_and_edges():
    x = np.array([0.0, 1.0, -1.0, 0.5, np.nan, np.inf], np.float32)
    y = np.zeros_like(x)
    out = aclnn.smooth_l1_loss_backward(np.float32(1), x, y, reduction=0, beta=1.0)
    np.testing.assert_array_equal(np.asarray(out), [0.0, 1.0, -1.0, 0.5, np.nan, 1.0])
    l1 = aclnn.smooth_l1_loss_backward(np.float32(2), x[:4], y[:4], reduction=2, beta=0.0)
    np.testing.assert_array_equal(np.asarray(l1), [0.0, 2.0, -2.0, 2.0])


# ----- logit ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("eps", [-1.0, 0.0, 0.1, 0.3])
def test_logit_grad(rng, dtype, eps):
    x = as_dtype(rng.uniform(0.02, 0.98, size=(6, 50)), dtype)
    dy = as_dtype(rng.normal(size=(6, 50)), dtype)
    out = jax.jit(aclnn.logit_grad, static_argnames="eps")(x, dy, eps=eps)
    assert out.dtype == x.dtype
    assert_close(out, ORACLES["logit_grad"](f64(x), f64(dy), eps=eps), dtype)
    ref = torch.ops.aten.logit_backward(T(f64(dy)), T(f64(x)), None if eps < 0 else eps)
    # bounds compared in float32 by the kernel, in float64 by ATen: skip the
    # elements sitting on a bound
    on_bound = np.isclose(f64(x), eps) | np.isclose(f64(x), 1 - eps)
    assert_close(np.where(on_bound, 0, f64(out)), np.where(on_bound, 0, ref.numpy()), dtype)


def test_logit_grad_edges():
    """The seed document's constraints: NaN/inf rules."""
    x = np.array([0.0, 1.0, -0.5, 1.5, np.nan, 0.5, 0.5], np.float32)
    dy = np.array([1.0, 1.0, 1.0, 1.0, 1.0, np.inf, np.nan], np.float32)
    out = np.asarray(aclnn.logit_grad(x, dy))
    assert np.isinf(out[0]) and np.isinf(out[1])
    assert np.isnan(out[2]) and np.isnan(out[3]) and np.isnan(out[4])
    assert np.isinf(out[5]) and np.isnan(out[6])
    clamped = np.asarray(aclnn.logit_grad(x[:4], dy[:4], eps=0.1))
    np.testing.assert_array_equal(clamped, [0.0, 0.0, 0.0, 0.0])
    assert np.all(np.asarray(aclnn.logit_grad(x[:4], dy[:4], eps=float("inf"))) == 0)
    assert np.all(np.isnan(np.asarray(aclnn.logit_grad(x[:4], dy[:4], eps=float("nan")))))


def test_logit_grad_eps_nan_writes_one_nan_everywhere():
    """eps NaN: the quiet NaN 0x7fc00000 in every element, whatever x holds
    (a NaN x of another sign or payload once came through as itself)."""
    x = np.array([0.5, -0.5, np.inf, 0.0, 0.0, 0.25], np.float32)
    x[3:5] = np.array([0xffc00000, 0x7fc00001], np.uint32).view(np.float32)
    out = np.asarray(aclnn.logit_grad(x, np.ones_like(x), eps=float("nan")))
    np.testing.assert_array_equal(out.view(np.uint32), np.full(6, 0x7fc00000, np.uint32))


@pytest.mark.parametrize("dtype", DTYPES)
def test_logit_grad_upper_bound_is_computed_in_float32(dtype):
    """Regression (issue 28, item 4): the upper bound was float32(1.0 - eps)
    computed in double; CANN's kernel and ATen take 1.0f - float32(eps)."""
    eps = 0.45637778863886086
    x = np.array([0.54362226], np.float32)
    assert np.float32(1) - np.float32(eps) >= x[0] > np.float32(1.0 - eps)  # the case in between
    ref = torch.ops.aten.logit_backward(T(np.ones(1, np.float32)), T(x), eps).numpy()
    out = aclnn.logit_grad(jnp.asarray(x).astype(dtype), jnp.ones(1, dtype), eps=eps)
    if dtype == "float32":
        np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-6)  # 4.03068, not 0
    with aclnn.reference_path():
        assert float(aclnn.logit_grad(x, np.ones(1, np.float32), eps=eps)[0]) == pytest.approx(
            float(ref[0]), rel=1e-6)


# ----- hardshrink ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lambd", [0.5, 0.0, 1.5, -1.0])
def test_hardshrink_backward(rng, dtype, lambd):
    x = as_dtype(rng.normal(size=(4, 33)), dtype)
    g = as_dtype(rng.normal(size=(4, 33)), dtype)
    out = jax.jit(aclnn.hardshrink_backward, static_argnames="lambd")(g, x, lambd=lambd)
    expected = np.where(np.abs(f64(x)) <= max(lambd, 0.0), 0.0, f64(g))
    assert_close(out, expected, dtype, scale=0.0)
    if lambd >= 0:
        ref = torch.ops.aten.hardshrink_backward(T(f64(g)), T(f64(x)), lambd)
        assert_close(out, ref.numpy(), dtype, scale=0.0)


def test_hardshrink_backward_nan_and_broadcast(rng):
    x = np.array([np.nan, 0.0, 0.6, -0.6, 0.5], np.float32)
    out = aclnn.hardshrink_backward(np.float32(3), x)
    np.testing.assert_array_equal(np.asarray(out), [3.0, 0.0, 3.0, 3.0, 0.0])
    g = rng.normal(size=(2, 3, 1)).astype(np.float32)
    x2 = rng.normal(size=(4,)).astype(np.float32)
    out = aclnn.hardshrink_backward(g, x2, lambd=0.3)
    np.testing.assert_array_equal(np.asarray(out), np.where(np.abs(x2) <= 0.3, 0, g * np.ones(4, np.float32)))


@pytest.mark.parametrize("path", ["aclnn", "reference"])
@pytest.mark.parametrize("dtype,x,lambd", [("float16", 0.50048828125, 0.5003),
                                           ("bfloat16", 0.50390625, 0.502)])
def test_gh28_half_hardshrink_compares_with_the_float32_lambd(path, dtype, x, lambd):
    """Issue 28, item 3: CANN's HardShrinkGrad (Atlas A2) casts a half input
    to float32 and compares it with the float32 lambd; ATen rounds lambd to
    the half dtype first (here to x itself) and zeroes the gradient. The
    docstring says which (CANN's); these values sit in between."""
    assert abs(x) > np.float32(lambd) and jnp.asarray(lambd, dtype) == x
    xs, g = jnp.asarray([x, -x], dtype), jnp.ones(2, dtype)
    with aclnn.reference_path() if path == "reference" else contextlib.nullcontext():
        out = aclnn.hardshrink_backward(g, xs, lambd=lambd)
        grad = jax.grad(lambda v: aclnn.hardshrink(v, lambd).astype(jnp.float32).sum())(xs)
    np.testing.assert_array_equal(f64(out), [1.0, 1.0])
    np.testing.assert_array_equal(f64(grad), [1.0, 1.0])
    aten = torch.ops.aten.hardshrink_backward(
        torch.ones(2, dtype=getattr(torch, dtype)), torch.tensor([x, -x], dtype=getattr(torch, dtype)),
        lambd)
    assert aten.float().tolist() == [0.0, 0.0]  # ATen's rounding, which CANN does not do


# ----- swish --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("beta", [1.0, None, 0.5, 2.5])
def test_swish_backward(rng, dtype, beta):
    x = as_dtype(rng.normal(size=(8, 37)) * 4, dtype)
    g = as_dtype(rng.normal(size=(8, 37)), dtype)
    out = jax.jit(aclnn.swish_backward, static_argnames="beta")(g, x, beta=beta)
    assert out.dtype == x.dtype
    b = 1.0 if beta is None else beta
    assert_close(out, ORACLES["swish_backward"](f64(g), f64(x), beta=b), dtype)
    if b == 1.0:
        ref = torch.ops.aten.silu_backward(T(f64(g)), T(f64(x)))
        assert_close(out, ref.numpy(), dtype)


def test_swish_backward_extremes():
    x = np.array([-100.0, -30.0, 0.0, 30.0, 100.0, np.nan], np.float32)
    out = np.asarray(aclnn.swish_backward(np.ones(6, np.float32), x))
    np.testing.assert_allclose(out[:5], ORACLES["swish_backward"](np.ones(5), x[:5]), atol=1e-6)
    assert np.isnan(out[5])


# ----- batch norm reduce ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape",
    # short rows, several channel blocks, long rows (inner >= 16384 elements)
    [(64, 3), (4, 5, 37), (3, 16, 4, 5), (2, 300, 3), (5, 1000, 33), (2, 3, 128, 130)],
)
def test_batch_norm_reduce_backward(rng, dtype, shape):
    C = shape[1]
    x = as_dtype(rng.normal(size=shape), dtype)
    g = as_dtype(rng.normal(size=shape), dtype)
    mean = as_dtype(rng.normal(size=C) * 0.1, dtype)
    invstd = as_dtype(rng.uniform(0.5, 2, size=C), dtype)
    weight = as_dtype(rng.normal(size=C), dtype)
    outs = jax.jit(aclnn.batch_norm_reduce_backward)(g, x, mean, invstd, weight)
    expected = ORACLES["batch_norm_reduce_backward"](f64(g), f64(x), f64(mean), f64(invstd), None)
    n = np.prod(shape) / C
    for o, e in zip(outs, expected):
        assert o.dtype == x.dtype and o.shape == (C,)
        assert_close(o, e, dtype, scale=np.sqrt(n))


def test_batch_norm_reduce_backward_matches_torch_batch_norm(rng):
    """grad_weight / grad_bias against ATen's batch-norm backward (training mode)."""
    x = rng.normal(size=(8, 6, 5, 3))
    g = rng.normal(size=x.shape)
    w = rng.normal(size=6)
    xt, wt = T(x).requires_grad_(), T(w).requires_grad_()
    bt = torch.zeros(6, dtype=torch.float64, requires_grad=True)
    torch.nn.functional.batch_norm(xt, None, None, wt, bt, training=True, eps=1e-5).backward(T(g))
    mean = x.mean((0, 2, 3))
    invstd = 1 / np.sqrt(x.var((0, 2, 3)) + 1e-5)
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    _, _, gw, gb = aclnn.batch_norm_reduce_backward(f32(g), f32(x), f32(mean), f32(invstd), f32(w))
    np.testing.assert_allclose(np.asarray(gw), wt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(gb), bt.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "masks", [(True, False, False), (False, True, False), (False, False, True), (False, False, False)]
)
def test_batch_norm_reduce_backward_masks_and_no_weight(rng, masks):
    x = rng.normal(size=(5, 4, 3)).astype(np.float32)
    g = rng.normal(size=(5, 4, 3)).astype(np.float32)
    mean, invstd = np.zeros(4, np.float32), np.ones(4, np.float32)
    input_g, weight_g, bias_g = masks
    outs = aclnn.batch_norm_reduce_backward(
        g, x, mean, invstd, None, input_g=input_g, weight_g=weight_g, bias_g=bias_g
    )
    expected = ORACLES["batch_norm_reduce_backward"](g, x, mean, invstd, None)
    for o, e, keep in zip(outs, expected, (input_g, input_g, weight_g, bias_g)):
        if keep:
            np.testing.assert_allclose(np.asarray(o), e, rtol=1e-5, atol=1e-5)
        else:
            assert o is None


# ----- empty tensors ---------------------------------------------------------------


def test_empty_tensors():
    e = np.zeros((0, 3), np.float32)
    assert aclnn.smooth_l1_loss_backward(np.float32(1), e, e).shape == (0, 3)
    assert aclnn.logit_grad(e, e).shape == (0, 3)
    assert aclnn.hardshrink_backward(e, e).shape == (0, 3)
    assert aclnn.swish_backward(e, e).shape == (0, 3)
    for shape in [(0, 3), (0, 3, 4), (2, 3, 0), (2, 3, 0, 5)]:  # no rows, or empty rows
        e = np.zeros(shape, np.float32)
        outs = aclnn.batch_norm_reduce_backward(e, e, np.zeros(3, np.float32), np.ones(3, np.float32), None)
        for o in outs:
            np.testing.assert_array_equal(np.asarray(o), np.zeros(3))


def test_scalar_inputs():
    out = aclnn.swish_backward(np.float32(2.0), np.float32(0.0))
    assert out.shape == () and float(out) == 1.0
