"""The host provider's kernels of the catalogue's rotary position embedding
and cross-entropy operators (issue 46): aclnnRotaryPositionEmbedding(+Grad)
and aclnnCrossEntropyLoss(+Grad) run on the CPU when jax_aclnn.nn's
rotary_embedding and softmax_cross_entropy_with_integer_labels are called,
and equal PyTorch's CPU kernels (in float64, from the same rounded inputs)
in every dtype CANN takes, forward and backward; the attributes the
functions do not pass (class weights, ignoreIndex, label smoothing, the
"mean" and "sum" reductions, mode 2) through the C ABI; the references stay
one switch away; the C ABI refuses what CANN refuses."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, F, assert_close, f64, needs_torch, torch
from host_abi import ACLNN_ERR_PARAM_INVALID, LIB, Strided, create_tensor, error_message
from test_host_llm_kernels import (F16, F32, F64, I32, assert_sum_close, contiguous, destroy,
                                   rounded, t64, tensor)

import jax_aclnn as aclnn
from jax_aclnn import nn

#: The catalogue's operators these kernels implement.
OPERATORS = ["aclnnRotaryPositionEmbedding", "aclnnRotaryPositionEmbeddingGrad",
             "aclnnCrossEntropyLoss", "aclnnCrossEntropyLossGrad"]
I64 = 9


def executions() -> dict[str, int]:
    calls = aclnn.runtime_stats()["calls"]
    return {op: calls.get(op, {}).get("execute", 0) for op in OPERATORS}


# --- rotary_embedding against the rotate-half / interleaved formulas in torch float64 ---------

def torch_rotate(x: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "half":
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([-x2, x1], dim=-1)
    return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)


#: (x's shape, cos's shape): every broadcast pattern CANN takes, head sizes
#: that are no multiple of a vector width, size-1 dimensions; the last two
#: large enough that dcos and dsin are summed in blocks (rope_kernel.cc's
#: GradBlocks: 3 and 2 per cos row).
ROPE_SHAPES = [((2, 5, 3, 8), (1, 5, 1, 8)), ((2, 5, 3, 6), (2, 5, 3, 6)),
               ((2, 5, 3, 10), (2, 1, 3, 10)), ((2, 5, 3, 8), (2, 5, 1, 8)),
               ((2, 5, 3, 8), (1, 1, 3, 8)), ((3, 4, 2, 130), (1, 1, 1, 130)),
               ((2, 5, 3, 2), (2, 1, 1, 2)), ((1, 1, 1, 4), (1, 1, 1, 4)),
               ((1, 7, 1, 66), (1, 7, 1, 66)), ((2, 40, 4, 64), (1, 40, 1, 64)),
               ((4, 64, 4, 66), (1, 1, 1, 66)), ((2, 16, 16, 128), (1, 16, 1, 128))]


@needs_torch
@pytest.mark.parametrize("mode", ["half", "interleave"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,cos_shape", ROPE_SHAPES)
def test_rotary_embedding_equals_torch(rng, dtype, shape, cos_shape, mode):
    x = jnp.asarray(rng.normal(size=shape), dtype)
    x = x.at[(0,) * (x.ndim - 1)].set(0.0)  # a row of zeros
    angles = rng.uniform(0, 2 * np.pi, size=cos_shape)
    cos, sin = (jnp.asarray(f(angles), dtype) for f in (np.cos, np.sin))
    tx, tc, ts = t64(x), t64(cos), t64(sin)
    ty = tx * tc + torch_rotate(tx, mode) * ts
    y = jax.jit(lambda x, c, s: nn.rotary_embedding(x, c, s, mode=mode))(x, cos, sin)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert_close(y, ty.detach().numpy(), dtype, scale=2)
    cot = rng.normal(size=shape)
    (ty * torch.from_numpy(rounded(cot, dtype))).sum().backward()
    gx, gc, gs = jax.jit(jax.grad(lambda x, c, s: jnp.sum(
        nn.rotary_embedding(x, c, s, mode=mode).astype(jnp.float32) * cot.astype(np.float32)),
        (0, 1, 2)))(x, cos, sin)
    assert gx.dtype == gc.dtype == gs.dtype == x.dtype
    assert_close(gx, tx.grad.numpy(), dtype, scale=2)
    terms = x.size // cos.size  # the rows each of dcos's elements sums
    for got, t, other in ((gc, tc, f64(x)), (gs, ts, torch_rotate(tx, mode).detach().numpy())):
        dy = rounded(cot, dtype)
        magnitude = np.abs(dy * other).sum(axis=tuple(
            i for i in range(4) if cos_shape[i] == 1 and shape[i] != 1), keepdims=True)
        assert_sum_close(got, t.grad.numpy(), magnitude, dtype, terms)


#: Head sizes of the kernels' three ways through a row (rope_kernel.cc): in
#: vectors by lanes (16 and 32 with 16-lane vectors, 8 with 8; interleave
#: at every multiple of the vector), by halves (half of D a vector or more,
#: with elements left over: 66, 130), or a float buffer (the others).
ROPE_HEAD_SIZES = [6, 8, 16, 32, 66, 130]


@needs_torch
@pytest.mark.parametrize("mode", ["half", "interleave"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", ROPE_HEAD_SIZES)
def test_rotary_embedding_without_a_gradient_for_cos_and_sin(rng, d, dtype, mode):
    """dcos and dsin not needed: the grad without x (CANN leaves them), and
    the forward, at every head size's way through a row."""
    x = jnp.asarray(rng.normal(size=(2, 3, 4, d)), dtype)
    angles = rng.uniform(0, 2 * np.pi, size=(1, 3, 1, d))
    cos, sin = (jnp.asarray(f(angles), dtype) for f in (np.cos, np.sin))
    cot = rng.normal(size=x.shape)
    aclnn.reset_runtime_stats()
    y, vjp = jax.vjp(jax.jit(lambda x: nn.rotary_embedding(x, cos, sin, mode=mode)), x)
    (gx,) = vjp(jnp.asarray(cot, dtype))
    tx = t64(x)
    ty = tx * t64(cos) + torch_rotate(tx, mode) * t64(sin)
    (ty * torch.from_numpy(rounded(cot, dtype))).sum().backward()
    assert gx.dtype == y.dtype == x.dtype
    assert_close(y, ty.detach().numpy(), dtype, scale=2)
    assert_close(gx, tx.grad.numpy(), dtype, scale=2)
    assert executions()["aclnnRotaryPositionEmbeddingGrad"] >= 1


# --- the C ABI: mode 2 (quarter), and what CANN refuses --------------------------------------

def call(name, *args):
    """Both phases; the first's status and message if it refuses."""
    ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
    status = getattr(LIB, name + "GetWorkspaceSize")(*args, ctypes.byref(ws), ctypes.byref(ex))
    if status != 0:
        return status, error_message()
    workspace = np.zeros(max(1, ws.value), np.uint8)
    assert getattr(LIB, name)(workspace.ctypes.data, ws.value, ex, None) == 0, error_message()
    return 0, ""


class Ints:
    """A contiguous int32/int64 tensor (ACL_DTYPES has the float types)."""

    def __init__(self, values: np.ndarray):
        self.values = np.ascontiguousarray(values)
        code = I64 if self.values.dtype == np.int64 else I32
        self.handle = create_tensor(self.values.shape, code, (1,), 0, (max(1, self.values.size),),
                                    self.values.ctypes.data)
        assert self.handle, error_message()

    def __del__(self):
        LIB.aclDestroyTensor(self.handle)


def quarter(x):
    q = x.shape[-1] // 4
    a, b, c, d = (x[..., i * q:(i + 1) * q] for i in range(4))
    return np.concatenate([-b, a, -d, c], axis=-1)


@pytest.mark.parametrize("d", [12, 32, 64, 68])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, jnp.bfloat16])
def test_rope_mode_2_quarter_through_the_abi(rng, dtype, d):
    """mode 2 (quarter: rotate-half on each half of D), which rotary_embedding does
    not pass, forward and backward (x given: dcos and dsin summed over B and N)."""
    x = rng.normal(size=(2, 3, 5, d)).astype(dtype)
    cos, sin = (rng.normal(size=(1, 3, 1, d)).astype(dtype) for _ in range(2))
    dy = rng.normal(size=x.shape).astype(dtype)
    out, dx = np.zeros_like(x), np.zeros_like(x)
    dcos, dsin = np.zeros_like(cos), np.zeros_like(sin)
    v = {k: contiguous(a) for k, a in dict(x=x, cos=cos, sin=sin, dy=dy, out=out, dx=dx,
                                            dcos=dcos, dsin=dsin).items()}
    assert call("aclnnRotaryPositionEmbedding", v["x"].handle, v["cos"].handle, v["sin"].handle,
                2, v["out"].handle)[0] == 0
    assert call("aclnnRotaryPositionEmbeddingGrad", v["dy"].handle, v["cos"].handle,
                v["sin"].handle, v["x"].handle, 2, v["dx"].handle, v["dcos"].handle,
                v["dsin"].handle)[0] == 0
    xf, cf, sf, gf = (a.astype(np.float64) for a in (x, cos, sin, dy))
    name = jnp.dtype(dtype).name
    assert_close(v["out"].values(), xf * cf + quarter(xf) * sf, name, scale=2)
    assert_close(v["dx"].values(), gf * cf - quarter(gf * sf), name, scale=2)
    for got, want, terms in ((v["dcos"].values(), gf * xf, 10), (v["dsin"].values(),
                                                                  gf * quarter(xf), 10)):
        assert_sum_close(got, want.sum((0, 2), keepdims=True),
                         np.abs(want).sum((0, 2), keepdims=True), name, terms)


# --- softmax_cross_entropy_with_integer_labels against torch.nn.functional.cross_entropy ---

@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(37,), (5, 37), (3, 4, 9), (2, 1, 3, 1100), (6, 1), (4, 2500)])
def test_cross_entropy_equals_torch(rng, dtype, shape):
    logits = jnp.asarray(3 * rng.normal(size=shape), dtype)
    labels = rng.integers(0, shape[-1], size=shape[:-1])
    tl = t64(logits)
    c = shape[-1]
    tloss = F.cross_entropy(tl.reshape(-1, c), torch.from_numpy(labels.reshape(-1)),
                            reduction="none").reshape(shape[:-1])
    loss = jax.jit(nn.softmax_cross_entropy_with_integer_labels)(logits, labels)
    assert loss.dtype == logits.dtype and loss.shape == shape[:-1]
    assert_close(loss, tloss.detach().numpy(), dtype, scale=2)
    cot = rng.normal(size=shape[:-1])
    (tloss * torch.from_numpy(rounded(cot, dtype))).sum().backward()
    g = jax.jit(jax.grad(lambda x: jnp.sum(
        nn.softmax_cross_entropy_with_integer_labels(x, labels).astype(jnp.float32)
        * np.asarray(cot, np.float32))))(logits)
    assert g.dtype == logits.dtype
    assert_close(g, tl.grad.numpy(), dtype, scale=2)


def losses_and_gradients(logits, labels):
    """The per-row losses of softmax_cross_entropy_with_integer_labels and
    the gradient of their sum, through jit; then torch's, in float64."""
    loss, g = jax.jit(lambda x: (nn.softmax_cross_entropy_with_integer_labels(x, labels),
                                 jax.grad(lambda x: jnp.sum(
                                     nn.softmax_cross_entropy_with_integer_labels(x, labels)
                                     .astype(jnp.float32)))(x)))(logits)
    tl = t64(logits)
    tloss = F.cross_entropy(tl, torch.from_numpy(labels), reduction="none")
    tloss.sum().backward()
    return loss, g, tloss.detach().numpy(), tl.grad.numpy()


@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_of_large_negative_and_infinite_logits(rng, dtype):
    """A row of large negative logits, a -inf logit (not the label): the
    right loss and gradient, no NaN (0 * -inf)."""
    big = {"float32": -1e30, "bfloat16": -1e30, "float16": -6e4}[dtype]
    x = 2 * rng.normal(size=(4, 40))
    x[0] = big + np.arange(40)  # exactly representable gaps only in float32: rounded below
    x[1, 3] = -np.inf
    x[2, :20] = -np.inf
    logits = jnp.asarray(x, dtype)
    labels = np.array([5, 7, 30, 0])
    loss, g, want_loss, want_g = losses_and_gradients(logits, labels)
    assert np.all(np.isfinite(f64(loss))) and np.all(np.isfinite(f64(g)))
    assert_close(loss, want_loss, dtype, scale=2)
    assert_close(g, want_g, dtype, scale=2)
    assert np.all(f64(g)[2, :20] == 0) and f64(g)[1, 3] == 0


@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c", [40, 300])  # a row within one vector's tail, and across many
def test_cross_entropy_of_nan_and_infinite_logits(rng, dtype, c):
    """A NaN or +inf logit that is not the label: that row's loss and its
    whole gradient row NaN, as torch's (and log_softmax's) are; the other
    rows exact."""
    x = 2 * rng.normal(size=(4, c))
    x[0, 3] = np.nan
    x[1, c - 1] = np.inf
    x[2, 0] = np.nan
    logits = jnp.asarray(x, dtype)
    labels = np.array([5, 7, 1, 0])
    loss, g, want_loss, want_g = losses_and_gradients(logits, labels)
    assert np.all(np.isnan(f64(loss)[:3])) and np.all(np.isnan(f64(g)[:3]))
    assert_close(loss, want_loss, dtype, scale=2)
    assert_close(g, want_g, dtype, scale=2)


REDUCTIONS = ["none", "mean", "sum"]


@needs_torch
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted,smoothing,ignore", [(False, 0.0, -100), (True, 0.0, 2),
                                                       (False, 0.2, 1), (True, 0.3, -100),
                                                       (True, 1.0, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, jnp.bfloat16])
def test_cross_entropy_attributes_through_the_abi(rng, dtype, reduction, weighted, smoothing,
                                                  ignore):
    """Class weights, ignoreIndex, label smoothing and the three reductions
    (softmax_cross_entropy_with_integer_labels passes none of them), forward and
    backward, against torch's cross_entropy in float64 and its autograd."""
    n, c = 9, 7
    x = (3 * rng.normal(size=(n, c))).astype(dtype)
    target = rng.integers(0, c, size=n).astype(np.int64)
    target[[1, 4]] = ignore if ignore >= 0 else -100
    weight = (0.5 + rng.uniform(size=c)).astype(np.float32)
    loss_shape = (n,) if reduction == "none" else (1,)
    loss, log_prob = np.zeros(loss_shape, dtype), np.zeros_like(x)
    empty = np.zeros(0, dtype)
    v = {k: contiguous(a) for k, a in dict(x=x, weight=weight, loss=loss, lp=log_prob,
                                            z=empty, lse=np.zeros(0, dtype)).items()}
    t = Ints(target)
    w = v["weight"].handle if weighted else None
    status, text = call("aclnnCrossEntropyLoss", v["x"].handle, t.handle, w, reduction.encode(),
                        ignore, smoothing, 0.0, False, v["loss"].handle, v["lp"].handle,
                        v["z"].handle, v["lse"].handle)
    assert status == 0, text
    tx = torch.from_numpy(x.astype(np.float64)).requires_grad_(True)
    tw = torch.from_numpy(weight.astype(np.float64)) if weighted else None
    tloss = F.cross_entropy(tx, torch.from_numpy(target), weight=tw, ignore_index=ignore,
                            label_smoothing=smoothing, reduction=reduction)
    name = jnp.dtype(dtype).name
    assert_close(v["loss"].values(), tloss.detach().numpy().reshape(loss_shape), name, scale=2)
    assert_close(v["lp"].values(), torch.log_softmax(tx, -1).detach().numpy(), name, scale=2)
    grad_loss = rng.normal(size=loss_shape).astype(dtype)
    (tloss * torch.from_numpy(grad_loss.astype(np.float64).reshape(tloss.shape))).sum().backward()
    dx = np.zeros_like(x)
    g = {k: contiguous(a) for k, a in dict(g=grad_loss, dx=dx).items()}
    status, text = call("aclnnCrossEntropyLossGrad", g["g"].handle, v["lp"].handle, t.handle, w,
                        None, None, reduction.encode(), ignore, smoothing, 0.0, g["dx"].handle)
    assert status == 0, text
    assert_close(g["dx"].values(), tx.grad.numpy(), name, scale=4)
    assert np.all(g["dx"].values()[[1, 4]] == 0)  # the ignored rows


@needs_torch
def test_cross_entropy_takes_int32_targets_and_a_zero_d_grad_loss(rng):
    x = rng.normal(size=(5, 6)).astype(np.float32)
    target = np.array([0, 5, 2, 2, 1], np.int32)
    loss, lp = np.zeros(1, np.float32), np.zeros_like(x)
    v = [contiguous(a) for a in (x, loss, lp, np.zeros(0, np.float32), np.zeros(0, np.float32))]
    t = Ints(target)
    assert call("aclnnCrossEntropyLoss", v[0].handle, t.handle, None, None, -100, 0.0, 0.0, False,
                v[1].handle, v[2].handle, v[3].handle, v[4].handle)[0] == 0  # null: "mean"
    tx = torch.from_numpy(x.astype(np.float64)).requires_grad_(True)
    tloss = F.cross_entropy(tx, torch.from_numpy(target.astype(np.int64)))
    np.testing.assert_allclose(v[1].values(), [tloss.item()], rtol=1e-6)
    tloss.backward()
    g = np.array(1.0, np.float32)
    gv = contiguous(g.reshape(()))
    dx = contiguous(np.zeros_like(x))
    assert call("aclnnCrossEntropyLossGrad", gv.handle, v[2].handle, t.handle, None, None, None,
                b"mean", -100, 0.0, 0.0, dx.handle)[0] == 0
    np.testing.assert_allclose(dx.values(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)


@needs_torch
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
def test_cross_entropy_reads_and_writes_strided_views(rng, dtype):
    """CANN takes non-contiguous tensors: input rows with gaps between them,
    every other class; logProb and the gradient rows with gaps. They run the
    kernels' walk through float buffers (contiguous rows: in registers), and
    equal torch's log_softmax, loss and gradient, a row with a NaN and one
    with a +inf all NaN, a row with -inf logits finite."""
    n, c = 4, 300  # a row across many vectors and a tail
    row = 2 * c + 2
    storage = (3 * rng.normal(size=n * row)).astype(dtype)
    storage[1 + 0 * row + 2 * 3] = np.nan
    storage[1 + 1 * row + 2 * (c - 1)] = np.inf
    storage[1 + 2 * row:1 + 2 * row + 40:2] = -np.inf
    x = Strided(storage, (n, c), (row, 2), 1)
    lp = Strided(np.zeros(n * (c + 5), dtype), (n, c), (c + 5, 1), 3)
    loss = contiguous(np.zeros(n, dtype))
    empty = {k: contiguous(np.zeros(0, dtype)) for k in ("z", "lse")}
    target = np.array([5, 7, 30, 0])
    t = Ints(target)
    status, text = call("aclnnCrossEntropyLoss", x.handle, t.handle, None, b"none", -100, 0.0,
                        0.0, False, loss.handle, lp.handle, empty["z"].handle,
                        empty["lse"].handle)
    assert status == 0, text
    tx = torch.from_numpy(x.values().astype(np.float64)).requires_grad_(True)
    tloss = F.cross_entropy(tx, torch.from_numpy(target), reduction="none")
    name = jnp.dtype(dtype).name
    assert np.all(np.isnan(f64(lp.values())[:2])) and np.all(np.isfinite(f64(loss.values())[2:]))
    assert_close(lp.values(), torch.log_softmax(tx, -1).detach().numpy(), name, scale=2)
    assert_close(loss.values(), tloss.detach().numpy(), name, scale=2)
    grad_loss = contiguous(np.ones(n, dtype))
    dx = Strided(np.zeros(n * (c + 1), dtype), (n, c), (c + 1, 1), 0)
    tloss.sum().backward()
    status, text = call("aclnnCrossEntropyLossGrad", grad_loss.handle, lp.handle, t.handle, None,
                        None, None, b"none", -100, 0.0, 0.0, dx.handle)
    assert status == 0, text
    assert_close(dx.values(), tx.grad.numpy(), name, scale=4)


@pytest.mark.parametrize("name,args,message", [
    ("aclnnRotaryPositionEmbedding", lambda: (
        tensor((1, 2, 2, 8), F64), tensor((1, 2, 1, 8), F64), tensor((1, 2, 1, 8), F64), 0,
        tensor((1, 2, 2, 8), F64)), "x has data type DOUBLE"),
    ("aclnnRotaryPositionEmbedding", lambda: (
        tensor((1, 2, 2, 8), I32), tensor((1, 2, 1, 8), I32), tensor((1, 2, 1, 8), I32), 0,
        tensor((1, 2, 2, 8), I32)), "x has data type INT32"),
    ("aclnnRotaryPositionEmbedding", lambda: (
        tensor((1, 2, 2, 8), F32), tensor((1, 2, 1, 8), F32), tensor((1, 2, 1, 8), F32), 3,
        tensor((1, 2, 2, 8), F32)), "mode 3 is not"),
    ("aclnnRotaryPositionEmbedding", lambda: (
        tensor((2, 2, 2, 8), F32), tensor((1, 2, 2, 8), F32), tensor((1, 2, 2, 8), F32), 0,
        tensor((2, 2, 2, 8), F32)), "cos has shape [1,2,2,8]"),
    ("aclnnRotaryPositionEmbedding", lambda: (
        tensor((1, 2, 2, 8), F32), tensor((1, 2, 1, 8), F16), tensor((1, 2, 1, 8), F16), 0,
        tensor((1, 2, 2, 8), F32)), "must have the same data type"),
    ("aclnnRotaryPositionEmbedding", lambda: (
        tensor((1, 2, 2, 7), F32), tensor((1, 2, 1, 7), F32), tensor((1, 2, 1, 7), F32), 0,
        tensor((1, 2, 2, 7), F32)), "D = 7 must be"),
    ("aclnnRotaryPositionEmbeddingGrad", lambda: (
        tensor((1, 2, 2, 8), F64), tensor((1, 2, 1, 8), F64), tensor((1, 2, 1, 8), F64), None,
        0, tensor((1, 2, 2, 8), F64), tensor((1, 2, 1, 8), F64), tensor((1, 2, 1, 8), F64)),
     "dy has data type DOUBLE"),
    ("aclnnRotaryPositionEmbeddingGrad", lambda: (
        tensor((1, 2, 2, 8), F32), tensor((1, 2, 1, 8), F32), tensor((1, 2, 1, 8), F32), None,
        0, tensor((1, 2, 2, 8), F32), tensor((1, 2, 2, 8), F32), tensor((1, 2, 1, 8), F32)),
     "dcosOut has shape [1,2,2,8], expected [1,2,1,8]"),
    ("aclnnCrossEntropyLoss", lambda: (
        tensor((3, 4), F64), tensor((3,), I64), None, b"none", -100, 0.0, 0.0, False,
        tensor((3,), F64), tensor((3, 4), F64), tensor((0,), F64), tensor((0,), F64)),
     "input has data type DOUBLE"),
    ("aclnnCrossEntropyLoss", lambda: (
        tensor((3, 4), I32), tensor((3,), I64), None, b"none", -100, 0.0, 0.0, False,
        tensor((3,), I32), tensor((3, 4), I32), tensor((0,), I32), tensor((0,), I32)),
     "input has data type INT32"),
    ("aclnnCrossEntropyLoss", lambda: (
        tensor((3, 4), F32), tensor((3,), F32), None, b"none", -100, 0.0, 0.0, False,
        tensor((3,), F32), tensor((3, 4), F32), tensor((0,), F32), tensor((0,), F32)),
     "target has data type FLOAT; expected INT64 or INT32"),
    ("aclnnCrossEntropyLoss", lambda: (
        tensor((3, 4), F16), tensor((3,), I64), tensor((4,), F16), b"none", -100, 0.0, 0.0,
        False, tensor((3,), F16), tensor((3, 4), F16), tensor((0,), F16), tensor((0,), F16)),
     "weightOptional has data type FLOAT16"),
    ("aclnnCrossEntropyLoss", lambda: (
        tensor((3, 4), F32), tensor((3,), I64), None, b"avg", -100, 0.0, 0.0, False,
        tensor((3,), F32), tensor((3, 4), F32), tensor((0,), F32), tensor((0,), F32)),
     'reductionOptional "avg"'),
    ("aclnnCrossEntropyLoss", lambda: (
        tensor((3, 4), F32), tensor((3,), I64), None, b"none", -100, 1.5, 0.0, False,
        tensor((3,), F32), tensor((3, 4), F32), tensor((0,), F32), tensor((0,), F32)),
     "labelSmoothing 1.5 is outside [0, 1]"),
    ("aclnnCrossEntropyLoss", lambda: (
        tensor((3, 4), F32), tensor((3,), I64), None, b"mean", -100, 0.0, 0.0, False,
        tensor((3,), F32), tensor((3, 4), F32), tensor((0,), F32), tensor((0,), F32)),
     "lossOut has shape [3], expected [1]"),
    ("aclnnCrossEntropyLossGrad", lambda: (
        tensor((3,), F64), tensor((3, 4), F64), tensor((3,), I64), None, None, None, b"none",
        -100, 0.0, 0.0, tensor((3, 4), F64)), "logProb has data type DOUBLE"),
    ("aclnnCrossEntropyLossGrad", lambda: (
        tensor((3,), F16), tensor((3, 4), F32), tensor((3,), I64), None, None, None, b"none",
        -100, 0.0, 0.0, tensor((3, 4), F32)), "must have the same data type"),
])
def test_the_c_abi_refuses_what_cann_refuses(name, args, message):
    args = args()
    status, text = call(name, *args)
    destroy(*args)
    assert status == ACLNN_ERR_PARAM_INVALID, (status, text)
    assert message in text, text


# --- the host kernels run; the references are one switch away --------------------------------

def block(x, cos, sin, labels):
    h = nn.rotary_embedding(x, cos, sin)
    return jnp.mean(nn.softmax_cross_entropy_with_integer_labels(h.reshape(-1, 8), labels))


def block_args(rng):
    x = rng.normal(size=(2, 3, 4, 8)).astype(np.float32)
    cos, sin = (rng.normal(size=(1, 3, 1, 8)).astype(np.float32) for _ in range(2))
    return x, cos, sin, rng.integers(0, 8, size=24)


def test_each_operator_runs_on_the_host_under_jit_and_grad(rng):
    args = block_args(rng)
    aclnn.reset_runtime_stats()
    got = jax.block_until_ready(jax.jit(jax.value_and_grad(block, (0, 1, 2)))(*args))
    counted = executions()
    assert aclnn.runtime_stats()["provider"] == "host"
    assert all(counted[op] >= 1 for op in OPERATORS), counted
    with aclnn.reference_path():
        want = jax.jit(jax.value_and_grad(block, (0, 1, 2)))(*args)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_reference_path_switches_back_to_the_references(rng):
    args = block_args(rng)
    grad = jax.grad(block, (0, 1, 2))
    hlo = jax.jit(grad).lower(*args).as_text()
    assert "aclnn_nn_rotary_position_embedding" in hlo and "aclnn_nn_cross_entropy_loss" in hlo
    aclnn.reset_runtime_stats()
    with aclnn.reference_path(["nn_cross_entropy_loss", "nn_cross_entropy_loss_grad"]):
        hlo = jax.jit(grad).lower(*args).as_text()
        jax.block_until_ready(jax.jit(grad)(*args))
    assert "aclnn_nn_cross_entropy_loss" not in hlo
    assert "aclnn_nn_rotary_position_embedding" in hlo
    counted = executions()
    assert counted["aclnnCrossEntropyLoss"] == counted["aclnnCrossEntropyLossGrad"] == 0, counted
    assert counted["aclnnRotaryPositionEmbedding"] >= 1, counted


KILL_SWITCH_SCRIPT = """
import jax, jax.numpy as jnp
from jax_aclnn import nn
x = jnp.ones((1, 2, 2, 8))
c = jnp.ones((1, 2, 1, 8))
loss = lambda x: jnp.sum(nn.softmax_cross_entropy_with_integer_labels(
    nn.rotary_embedding(x, c, c).reshape(4, 8), jnp.zeros(4, jnp.int32)))
hlo = jax.jit(jax.value_and_grad(loss)).lower(x).as_text()
print(sorted(t for t in ("nn_rotary_position_embedding", "nn_cross_entropy_loss")
             if f"aclnn_{t}" in hlo))
"""


@pytest.mark.parametrize("value,custom_calls", [
    ("0", "['nn_cross_entropy_loss', 'nn_rotary_position_embedding']"),
    ("nn_cross_entropy_loss,nn_cross_entropy_loss_grad", "['nn_rotary_position_embedding']"),
    ("all", "[]"),
])
def test_the_environment_switch_forces_the_references(value, custom_calls):
    env = dict(os.environ, JAX_ACLNN_REFERENCE=value, JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", KILL_SWITCH_SCRIPT], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == custom_calls
