"""Property-based fuzzing of the host provider through its C ABI (ctypes),
against a float64 NumPy oracle: random shapes, strided layouts inside larger
storages (permuted axes, gaps, offsets, stride-0 broadcasts; contiguous runs
long enough for the kernels' vector loops and their tails), broadcasting,
dtypes, attributes, output masks, and repeatable executors re-targeted at
fresh buffers with aclSetInput/OutputTensorAddr. Storage elements outside a
view must stay untouched. Layouts the provider must refuse (batch-norm
inner dimensions that do not collapse) are checked to be refused.

``JAX_ACLNN_FUZZ_EXAMPLES`` sets the examples per operator (default 40, a
few seconds; .ci/sanitize runs thousands under ASan/UBSan)."""

from __future__ import annotations

import ctypes
import math
import os

import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import tolerance
from host_abi import (ACL_DTYPES, ACLNN_ERR_PARAM_INVALID, LIB, Strided, error_message,
                      float_scalar)

EXAMPLES = int(os.environ.get("JAX_ACLNN_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DTYPES = [np.dtype(d) for d in ACL_DTYPES]
SENTINEL = 1216.0  # fills an output's storage outside its view (exact in every dtype)


def f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float32).astype(np.float64) if a.dtype != np.float64 else a


@st.composite
def layouts(draw, shape):
    """Strides and offset of `shape` inside a storage: axes in a random
    order, gaps between elements, an offset, sometimes a stride-0 axis."""
    rank = len(shape)
    order = draw(st.permutations(range(rank)))
    steps = draw(st.lists(st.integers(1, 2), min_size=rank, max_size=rank))
    strides = [0] * rank
    size = 1
    for a in reversed(order):
        strides[a] = size * steps[a]
        size *= max(shape[a], 1) * steps[a]
    offset = draw(st.integers(0, 3))
    return strides, offset, offset + size + draw(st.integers(0, 2))


@st.composite
def broadcast_layouts(draw, shape):
    """A layout that may repeat elements along some axes (stride 0)."""
    strides, offset, size = draw(layouts(shape))
    zero = draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    return [0 if z and draw(st.booleans()) else s for s, z in zip(strides, zero)], offset, size


def random_values(rng, size, dtype, lo, hi, specials):
    v = rng.uniform(lo, hi, size)
    if specials and size:
        k = rng.integers(0, max(1, size // 4) + 1)
        v[rng.integers(0, size, k)] = rng.choice([np.nan, np.inf, -np.inf, 0.0], k)
    return v.astype(np.float32).astype(dtype)


class Operand:
    """A strided view with its storage; `fresh()` re-draws the storage."""

    def __init__(self, shape, layout, dtype, rng, lo=-3.0, hi=3.0, specials=False):
        self.shape, (self.strides, self.offset, self.size) = tuple(shape), layout
        self.dtype, self.rng, self.range, self.specials = dtype, rng, (lo, hi), specials
        self.view = Strided(self._draw(), self.shape, tuple(self.strides), self.offset)

    def _draw(self):
        return random_values(self.rng, self.size, self.dtype, *self.range, self.specials)

    def fresh(self) -> np.ndarray:
        new = self._draw()
        self.view.retarget(new)
        return new

    def values(self) -> np.ndarray:
        return f64(self.view.values())


class Output(Operand):
    """An output view in a storage filled with a sentinel outside the view."""

    def _draw(self):
        return np.full(self.size, SENTINEL, np.float32).astype(self.dtype)

    def untouched_outside(self) -> bool:
        inside = np.zeros(self.size, bool)
        idx = self.offset + sum(np.indices(self.shape, sparse=False)[a] * s
                                for a, s in enumerate(self.strides)) if self.shape else np.array(self.offset)
        inside[np.asarray(idx).ravel()] = True
        return bool(np.all(f64(self.view.storage)[~inside] == SENTINEL))


def assert_matches(actual, expected, magnitude, dtype):
    """|actual - expected| <= tol * (magnitude + |expected|); NaN and inf exact.
    The oracle is rounded to the output dtype first."""
    tol = 4 * tolerance(np.float32) + (0 if dtype == np.float32 else tolerance(dtype))
    expected = f64(np.asarray(expected, np.float64).astype(np.float32).astype(dtype))
    big = float(jnp.finfo(dtype).max) / 2
    finite = np.isfinite(expected) & np.isfinite(actual)
    same_special = (np.isnan(expected) & np.isnan(actual)) | (expected == actual)
    near_overflow = ~finite & (np.minimum(np.abs(np.nan_to_num(expected, nan=0)),
                                          np.abs(np.nan_to_num(actual, nan=0))) > big)
    with np.errstate(invalid="ignore"):
        err = np.where(finite, np.abs(actual - expected), 0.0)
    ok = np.where(finite, err <= tol * (np.abs(magnitude) + np.abs(expected)) + 1e-30,
                  same_special | near_overflow)
    assert ok.all(), (actual[~ok][:5], expected[~ok][:5], magnitude[~ok][:5] if np.ndim(magnitude) else magnitude)


def run(op, executor, workspace_size):
    ws = np.zeros(max(1, workspace_size), np.uint8)
    fn = getattr(LIB, op)
    assert fn(ws.ctypes.data, workspace_size, executor, None) == 0, error_message()


@st.composite
def shapes(draw, min_rank=0, max_rank=4, max_dim=5):
    return tuple(draw(st.lists(st.integers(0, max_dim), min_size=min_rank, max_size=max_rank)))


@st.composite
def broadcast_inputs(draw, out_shape, n):
    """n input shapes that broadcast to out_shape (dims dropped or set to 1)."""
    result = []
    for _ in range(n):
        lead = draw(st.integers(0, len(out_shape)))
        result.append(tuple(1 if draw(st.booleans()) and draw(st.booleans()) else d
                            for d in out_shape[lead:]))
    return result


def pointwise_case(draw, n_inputs, broadcast):
    dtype = draw(st.sampled_from(DTYPES))
    full = draw(shapes())
    if draw(st.booleans()):  # a long last dimension: runs of whole vectors and a tail
        full += (draw(st.integers(6, 40)),)
    in_shapes = draw(broadcast_inputs(full, n_inputs)) if broadcast else [full] * n_inputs
    out_shape = np.broadcast_shapes(*in_shapes)
    layout_of = broadcast_layouts if broadcast else layouts
    in_layouts = [draw(layout_of(s)) for s in in_shapes]
    return dtype, out_shape, in_shapes, in_layouts, draw(layouts(out_shape)), \
        draw(st.booleans()), draw(st.integers(0, 2**32 - 1))


def check_pointwise(op, get_workspace, inputs, out, oracle, repeatable):
    """Runs the operator once (and, repeatable, again on fresh buffers
    re-targeted with aclSetInput/OutputTensorAddr), checking each run."""
    ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
    assert get_workspace(ctypes.byref(ws), ctypes.byref(ex)) == 0, error_message()
    if repeatable:
        assert LIB.aclSetAclOpExecutorRepeatable(ex) == 0
    try:
        for step in range(2 if repeatable else 1):
            if step:
                for i, operand in enumerate(inputs):
                    assert LIB.aclSetInputTensorAddr(ex, i, operand.view.handle,
                                                     operand.fresh().ctypes.data) == 0
                assert LIB.aclSetOutputTensorAddr(ex, 0, out.view.handle,
                                                  out.fresh().ctypes.data) == 0
            run(op, ex, ws.value)
            value, magnitude = oracle(*(o.values() for o in inputs))
            value = np.broadcast_to(value, out.shape)
            assert_matches(out.values(), value, np.broadcast_to(magnitude, out.shape), out.dtype)
            assert out.untouched_outside()
    finally:
        if repeatable:
            assert LIB.aclDestroyAclOpExecutor(ex) == 0


@FUZZ
@given(st.data())
def test_smooth_l1_loss_backward(data):
    draw = data.draw
    dtype, out_shape, in_shapes, in_layouts, out_layout, repeatable, seed = pointwise_case(draw, 3, True)
    reduction = draw(st.integers(0, 2))
    beta = float(np.float32(draw(st.sampled_from([0.0, 0.5, 1.0, 2.5]))))
    rng = np.random.default_rng(seed)
    g, x, y = (Operand(s, l, dtype, rng, specials=True) for s, l in zip(in_shapes, in_layouts))
    out = Output(out_shape, out_layout, dtype, rng)
    scale = 1.0 / math.prod(in_shapes[1]) if reduction == 1 and math.prod(in_shapes[1]) else 1.0

    def oracle(g, x, y):
        with np.errstate(invalid="ignore", divide="ignore"):
            d = x - y
            dl = np.where(np.abs(d) < beta, d / (beta if beta else 1.0), np.sign(d))
            dl = np.where(np.isnan(d), d, dl)
            value = g * scale * dl
        return value, value

    check_pointwise(
        "aclnnSmoothL1LossBackward",
        lambda ws, ex: LIB.aclnnSmoothL1LossBackwardGetWorkspaceSize(
            g.view.handle, x.view.handle, y.view.handle, reduction, beta, out.view.handle, ws, ex),
        [g, x, y], out, oracle, repeatable)


@FUZZ
@given(st.data())
def test_logit_grad(data):
    draw = data.draw
    dtype, out_shape, in_shapes, in_layouts, out_layout, repeatable, seed = pointwise_case(draw, 2, False)
    eps = draw(st.sampled_from([-1.0, 0.0, 1e-3, 0.1, 0.49, math.nan]))
    rng = np.random.default_rng(seed)
    x = Operand(in_shapes[0], in_layouts[0], dtype, rng, -0.2, 1.2, specials=True)
    dy = Operand(in_shapes[1], in_layouts[1], dtype, rng, specials=True)
    out = Output(out_shape, out_layout, dtype, rng)

    def oracle(x, dy):
        with np.errstate(invalid="ignore", divide="ignore"):
            value = dy / (x * (1 - x))
            if math.isnan(eps):
                value = np.full_like(value, np.nan)
            elif eps < 0:
                value = np.where((x < 0) | (x > 1), np.nan, value)
            else:
                lo = np.float32(eps)
                hi = np.float32(1.0) - lo
                value = np.where((x < lo) | (x > hi), 0.0, value)
        return value, value

    check_pointwise(
        "aclnnLogitGrad",
        lambda ws, ex: LIB.aclnnLogitGradGetWorkspaceSize(x.view.handle, dy.view.handle, eps,
                                                          out.view.handle, ws, ex),
        [x, dy], out, oracle, repeatable)


@FUZZ
@given(st.data())
def test_hardshrink_backward(data):
    draw = data.draw
    dtype, out_shape, in_shapes, in_layouts, out_layout, repeatable, seed = pointwise_case(draw, 2, True)
    lambd = float(np.float32(draw(st.sampled_from([-1.0, 0.0, 0.5, 1.5, math.nan]))))
    rng = np.random.default_rng(seed)
    g, x = (Operand(s, l, dtype, rng, specials=True) for s, l in zip(in_shapes, in_layouts))
    out = Output(out_shape, out_layout, dtype, rng)
    threshold = lambd if lambd > 0 else 0.0  # negative or NaN lambd counts as 0
    scalar = float_scalar(lambd)

    def oracle(g, x):
        value = np.where(np.abs(x) <= threshold, 0.0, g)
        return value, np.zeros_like(value)  # exact

    try:
        check_pointwise(
            "aclnnHardshrinkBackward",
            lambda ws, ex: LIB.aclnnHardshrinkBackwardGetWorkspaceSize(
                g.view.handle, x.view.handle, scalar, out.view.handle, ws, ex),
            [g, x], out, oracle, repeatable)
    finally:
        LIB.aclDestroyScalar(scalar)


@FUZZ
@given(st.data())
def test_swish_backward(data):
    draw = data.draw
    dtype, out_shape, in_shapes, in_layouts, out_layout, repeatable, seed = pointwise_case(draw, 2, False)
    beta = draw(st.sampled_from([None, 1.0, -0.5, 2.0, 0.0]))
    rng = np.random.default_rng(seed)
    g, x = (Operand(s, l, dtype, rng, specials=True) for s, l in zip(in_shapes, in_layouts))
    out = Output(out_shape, out_layout, dtype, rng)
    scalar = float_scalar(beta) if beta is not None else None
    b = 1.0 if beta is None else beta

    def oracle(g, x):
        with np.errstate(invalid="ignore", over="ignore"):
            bx = b * x
            s = 1 / (1 + np.exp(-bx))
            value = g * s * (1 + bx * (1 - s))
            value = np.where(np.isnan(x) | np.isinf(x), np.nan, value)
            return value, np.abs(g) * s * (1 + np.abs(bx) * (1 - s))

    try:
        check_pointwise(
            "aclnnSwishBackward",
            lambda ws, ex: LIB.aclnnSwishBackwardGetWorkspaceSize(
                g.view.handle, x.view.handle, scalar, out.view.handle, ws, ex),
            [g, x], out, oracle, repeatable)
    finally:
        if scalar:
            LIB.aclDestroyScalar(scalar)


def inner_dims_collapse(shape, strides):
    return all(strides[d] == strides[d + 1] * shape[d + 1] for d in range(2, len(shape) - 1))


@FUZZ
@given(st.data())
def test_batch_norm_reduce_backward(data):
    draw = data.draw
    dtype = draw(st.sampled_from(DTYPES))
    shape = (draw(st.integers(0, 20)), draw(st.integers(1, 6))) + draw(shapes(0, 2, 4))
    C = shape[1]
    masks = [draw(st.booleans()) for _ in range(3)]
    has_weight, repeatable = draw(st.booleans()), draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    g = Operand(shape, draw(layouts(shape)), dtype, rng)
    x = Operand(shape, draw(layouts(shape)), dtype, rng)
    mean = Operand((C,), draw(layouts((C,))), dtype, rng, -1, 1)
    invstd = Operand((C,), draw(layouts((C,))), dtype, rng, 0.1, 2)
    weight = Operand((C,), draw(layouts((C,))), dtype, rng) if has_weight else None
    wanted = [masks[0], masks[0], masks[1], masks[2]]
    outs = [Output((C,), draw(layouts((C,))), dtype, rng) if w or draw(st.booleans()) else None
            for w in wanted]
    handle = lambda o: o.view.handle if o is not None else None  # noqa: E731
    ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
    st_ = LIB.aclnnBatchNormReduceBackwardGetWorkspaceSize(
        g.view.handle, x.view.handle, mean.view.handle, invstd.view.handle, handle(weight),
        *masks, *(handle(o) for o in outs), ctypes.byref(ws), ctypes.byref(ex))
    if not (inner_dims_collapse(shape, g.strides) and inner_dims_collapse(shape, x.strides)):
        assert st_ == ACLNN_ERR_PARAM_INVALID and "contiguously" in error_message()
        return
    assert st_ == 0, error_message()
    if repeatable:
        assert LIB.aclSetAclOpExecutorRepeatable(ex) == 0
    inputs = [g, x, mean, invstd, weight]
    try:
        for step in range(2 if repeatable else 1):
            if step:
                for i, operand in enumerate(inputs):
                    if operand is not None:
                        assert LIB.aclSetInputTensorAddr(ex, i, operand.view.handle,
                                                         operand.fresh().ctypes.data) == 0
                for i, o in enumerate(outs):
                    if wanted[i]:
                        assert LIB.aclSetOutputTensorAddr(ex, i, o.view.handle,
                                                          o.fresh().ctypes.data) == 0
            run("aclnnBatchNormReduceBackward", ex, ws.value)
            axes = (0,) + tuple(range(2, len(shape)))
            gv, xv = g.values(), x.values()
            m = mean.values().reshape((1, C) + (1,) * (len(shape) - 2))
            terms = gv * (xv - m)
            s = invstd.values()
            expected = [gv.sum(axes), terms.sum(axes), terms.sum(axes) * s, gv.sum(axes)]
            magnitude = [np.abs(gv).sum(axes), np.abs(terms).sum(axes),
                         np.abs(terms).sum(axes) * s, np.abs(gv).sum(axes)]
            for o, w, e, mag in zip(outs, wanted, expected, magnitude):
                if o is None:
                    continue
                if w:
                    assert_matches(o.values(), e, mag, dtype)
                else:  # not asked for: left alone
                    assert np.all(o.values() == SENTINEL)
                assert o.untouched_outside()
    finally:
        if repeatable:
            assert LIB.aclDestroyAclOpExecutor(ex) == 0
