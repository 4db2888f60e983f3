"""The host provider's kernels of the catalogue's RMSNorm and SwiGLU
operators (issue 46): aclnnRmsNorm, aclnnRmsNormGrad, aclnnAddRmsNorm,
aclnnSwiGlu and aclnnSwiGluGrad run on the CPU when jax_aclnn.nn's
functions are called, and equal PyTorch's CPU kernels (in float64, from the
same rounded inputs) in every dtype CANN takes, forward and backward; the
references stay one switch away; the C ABI refuses what CANN refuses."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, F, assert_close, f64, needs_torch, tolerance, torch
from host_abi import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, LIB, Strided,
                      create_tensor, error_message)

import jax_aclnn as aclnn
from jax_aclnn import nn

#: The catalogue's operators these kernels implement, by their declared names.
OPERATORS = {"aclnnRmsNorm": "nn_rms_norm", "aclnnRmsNormGrad": "nn_rms_norm_grad",
             "aclnnAddRmsNorm": "nn_add_rms_norm", "aclnnSwiGlu": "nn_swiglu",
             "aclnnSwiGluGrad": "nn_swiglu_grad"}


def t64(a) -> torch.Tensor:
    return torch.from_numpy(f64(a)).requires_grad_(True)


def rounded(values, dtype) -> np.ndarray:
    """float64 values rounded to ``dtype`` (what a cotangent of that dtype holds)."""
    return f64(jnp.asarray(np.asarray(values, np.float32)).astype(dtype))


def executions() -> dict[str, int]:
    calls = aclnn.runtime_stats()["calls"]
    return {op: calls.get(op, {}).get("execute", 0) for op in OPERATORS}


def assert_sum_close(actual, expected, magnitude, dtype, terms: int,
                     terms_rounded_to: str | None = None) -> None:
    """A sum over ``terms`` rows: the output's rounding (``dtype``) of the
    value, float32 accumulation scaled by the terms' magnitude, and where
    the terms come from values rounded to ``terms_rounded_to`` (AddRmsNorm's
    backward reads its sum in x's dtype), that rounding of each."""
    actual, expected = f64(actual), np.asarray(expected, np.float64)
    rounding = float(jnp.finfo(terms_rounded_to).eps) if terms_rounded_to else 0.0
    bound = (tolerance(dtype) * (np.abs(expected) + 1e-3 * magnitude)
             + (4 * np.finfo(np.float32).eps * np.sqrt(terms) + rounding) * magnitude)
    assert np.all(np.abs(actual - expected) <= bound), np.max(np.abs(actual - expected) - bound)


# --- rms_norm: forward and backward against torch.nn.functional.rms_norm -------------------

#: (x's shape, the number of normalized trailing dimensions): rank 1 to 4,
#: one or two normalized dimensions, sizes that are not a multiple of any
#: vector width, rows of whole vectors (16, 64: the narrow rows of a small
#: model), size-1 dimensions, rows longer than a chunk (1024).
RMS_SHAPES = [((37,), 1), ((5, 37), 1), ((3, 4, 21), 1), ((2, 3, 1, 67), 1), ((4, 3, 7), 2),
              ((2, 1, 5, 9), 2), ((1, 1), 1), ((3, 2500), 1), ((2, 3, 5), 3), ((9, 16), 1),
              ((3, 5, 64), 1)]


def rms_case(rng, shape, k, dtype, weight_dtype, zero_row=False):
    x = rng.normal(size=shape)
    if zero_row and len(shape) > k:
        x.reshape(-1, *shape[len(shape) - k:])[0] = 0.0
    w = 1 + 0.1 * rng.normal(size=shape[len(shape) - k:])
    return jnp.asarray(x, dtype), jnp.asarray(w, weight_dtype)


@needs_torch
@pytest.mark.parametrize("dtype,weight_dtype", [(d, d) for d in DTYPES] + [
    ("bfloat16", "float32"), ("float16", "float32")])
@pytest.mark.parametrize("shape,k", RMS_SHAPES)
def test_rms_norm_equals_torch(rng, dtype, weight_dtype, shape, k):
    x, w = rms_case(rng, shape, k, dtype, weight_dtype, zero_row=True)
    normalized = w.shape
    y = jax.jit(lambda x, w: nn.rms_norm(x, w, epsilon=1e-5))(x, w)
    assert y.dtype == x.dtype and y.shape == x.shape
    tx, tw = t64(x), t64(w)
    ty = F.rms_norm(tx, normalized, tw, eps=1e-5)
    assert_close(y, ty.detach().numpy(), dtype)
    cot = rng.normal(size=shape)
    dy = rounded(cot, dtype)  # the cotangent y receives, in its dtype
    gx, gw = jax.jit(jax.grad(lambda x, w: jnp.sum(
        nn.rms_norm(x, w, epsilon=1e-5).astype(jnp.float32) * cot.astype(np.float32)),
        (0, 1)))(x, w)
    assert gx.dtype == x.dtype and gw.dtype == w.dtype
    (ty * torch.from_numpy(dy)).sum().backward()
    assert_close(gx, tx.grad.numpy(), dtype, scale=2)
    rows = x.size // w.size
    assert_sum_close(gw, tw.grad.numpy(), row_sum_magnitude(dy, f64(x), rows, 1e-5, w.shape),
                     weight_dtype, rows)


def row_sum_magnitude(dy, x, rows, epsilon, shape):
    """sum over the rows of |dy * x * rstd|: the size of dgamma's terms."""
    xr = x.reshape(rows, -1)
    rstd = 1 / np.sqrt(np.mean(xr ** 2, -1, keepdims=True) + epsilon)
    return np.abs(dy.reshape(rows, -1) * xr * rstd).sum(0).reshape(shape)


def test_rms_norm_of_a_zero_row_is_zero_with_a_finite_gradient(rng):
    x = np.zeros((3, 16), np.float32)
    x[1] = rng.normal(size=16)
    w = np.ones(16, np.float32)
    y, (gx, gw) = jax.jit(lambda x, w: (nn.rms_norm(x, w), jax.grad(
        lambda x, w: jnp.sum(nn.rms_norm(x, w) ** 2), (0, 1))(x, w)))(x, w)
    np.testing.assert_array_equal(np.asarray(y)[[0, 2]], 0.0)
    assert np.all(np.isfinite(gx)) and np.all(np.isfinite(gw))
    np.testing.assert_array_equal(np.asarray(gx)[[0, 2]], 0.0)


# --- add_rms_norm --------------------------------------------------------------------------

@needs_torch
@pytest.mark.parametrize("dtype,weight_dtype", [(d, d) for d in DTYPES] + [("bfloat16", "float32")])
@pytest.mark.parametrize("shape", [(6, 32), (37,), (2, 3, 45), (3, 1, 1100)])
def test_add_rms_norm_equals_torch(rng, dtype, weight_dtype, shape):
    x1, x2 = (jnp.asarray(rng.normal(size=shape), dtype) for _ in range(2))
    w = jnp.asarray(1 + 0.1 * rng.normal(size=shape[-1]), weight_dtype)
    c1, c2 = rng.normal(size=shape), rng.normal(size=shape)
    d1, d2 = rounded(c1, dtype), rounded(c2, dtype)

    def loss(x1, x2, w):
        y, s = nn.add_rms_norm(x1, x2, w)
        return (jnp.sum(y.astype(jnp.float32) * c1.astype(np.float32))
                + jnp.sum(s.astype(jnp.float32) * c2.astype(np.float32)))

    t1, t2, tw = t64(x1), t64(x2), t64(w)
    s = t1 + t2
    ty = F.rms_norm(s, (shape[-1],), tw.to(torch.float64), eps=1e-6)
    y, total = jax.jit(nn.add_rms_norm)(x1, x2, w)
    assert y.dtype == total.dtype == x1.dtype
    assert_close(y, ty.detach().numpy(), dtype, scale=2)
    assert_close(total, s.detach().numpy(), dtype)
    ((ty * torch.from_numpy(d1)).sum() + (s * torch.from_numpy(d2)).sum()).backward()
    g1, g2, gw = jax.jit(jax.grad(loss, (0, 1, 2)))(x1, x2, w)
    assert gw.dtype == w.dtype
    assert_close(g1, t1.grad.numpy(), dtype, scale=4)
    assert_close(g2, t2.grad.numpy(), dtype, scale=4)
    rows = x1.size // shape[-1]
    magnitude = row_sum_magnitude(d1, s.detach().numpy(), rows, 1e-6, (shape[-1],))
    assert_sum_close(gw, tw.grad.numpy(), magnitude, dtype, rows, terms_rounded_to=dtype)


# --- swiglu ----------------------------------------------------------------------------------

@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((74,), -1), ((4, 6, 10), -1), ((4, 6, 10), 1),
                                        ((6, 5), 0), ((2, 1, 3, 2 * 37), -1),
                                        ((3, 2 * 1500), -1), ((1, 2), -1),
                                        # several tasks, split inside a half's runs
                                        ((7, 2 * 3001), -1), ((5, 2 * 1001, 3), 1)])
def test_swiglu_equals_torch(rng, dtype, shape, axis):
    x = jnp.asarray(3 * rng.normal(size=shape), dtype)
    tx = t64(x)
    a, b = torch.chunk(tx, 2, dim=axis)
    ty = F.silu(a) * b
    y = jax.jit(lambda x: nn.swiglu(x, axis=axis))(x)
    assert y.dtype == x.dtype and y.shape == tuple(ty.shape)
    assert_close(y, ty.detach().numpy(), dtype)
    cot = rng.normal(size=ty.shape)
    gx = jax.jit(jax.grad(lambda x: jnp.sum(
        nn.swiglu(x, axis=axis).astype(jnp.float32) * cot.astype(np.float32))))(x)
    (ty * torch.from_numpy(rounded(cot, dtype))).sum().backward()
    assert_close(gx, tx.grad.numpy(), dtype, scale=2)


def correctly_rounded(values: np.ndarray, mantissa_bits: int) -> np.ndarray:
    """float64 ``values`` rounded to nearest-even at ``mantissa_bits``
    significant bits (a normal float16 has 11, a bfloat16 8)."""
    m, e = np.frexp(values)
    return np.ldexp(np.round(m * 2.0 ** mantissa_bits) / 2.0 ** mantissa_bits, e)


@pytest.mark.parametrize("dtype,bits,most_misrounded", [("float16", 11, 3e-3),
                                                        ("bfloat16", 8, 4e-4)])
def test_swiglu_half_outputs_are_nearly_always_correctly_rounded(rng, dtype, bits,
                                                                 most_misrounded):
    """The half-precision kernels' shorter exponential (degree 4, 5.4e-6
    relative) still rounds all but 0.2% (float16) and 0.02% (bfloat16) of
    1M SwiGLU outputs to the float64 value's nearest, and the rest within
    one ulp. Cephes' polynomial cut to degree 4 (5.6e-5) misrounds 0.5% and
    0.07%: this fails with it."""
    x = jnp.asarray(3 * rng.normal(size=(2, 1 << 20)), dtype)
    a, b = f64(x)
    expected = correctly_rounded(a / (1 + np.exp(-a)) * b, bits)
    y = f64(jax.jit(lambda x: nn.swiglu(x, axis=0))(x))[0]
    normal = np.abs(expected) >= float(jnp.finfo(dtype).tiny)
    misrounded = y[normal] != expected[normal]
    assert misrounded.mean() <= most_misrounded, misrounded.mean()
    ulp = np.ldexp(1.0, np.frexp(expected[normal])[1] - bits)
    assert np.all(np.abs(y[normal] - expected[normal]) <= ulp)


def test_swiglu_saturates_without_nan():
    x = jnp.asarray([[-200.0, -30.0, 0.0, 30.0, 2.0, 3.0, 4.0, 5.0]], jnp.float32)
    y, gx = jax.jit(lambda x: (nn.swiglu(x), jax.grad(lambda x: jnp.sum(nn.swiglu(x)))(x)))(x)
    a, b = np.asarray(x, np.float64)[0, :4], np.asarray(x, np.float64)[0, 4:]
    np.testing.assert_allclose(y[0], a / (1 + np.exp(-a)) * b, rtol=1e-6, atol=1e-30)
    assert np.all(np.isfinite(gx))


#: bfloat16 NaNs of every kind: all mantissa bits set, signalling, the default.
BF16_NANS = np.array([0x7FFF, 0xFFFF, 0x7F81, 0xFF81, 0x7FC0, 0xFFC0], np.uint16)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_bfloat16_nans_stay_nan_through_swiglu_and_its_gradient(rng):
    """The bfloat16 kernels store their vectors without quieting NaNs first
    (map_runs.h's kNaNsFromInputs): every NaN, in either half or in the
    cotangent, and inf * 0, comes out NaN, the rest equal float64's
    formula. (Along the last axis, so that the halves are contiguous runs
    and the vector loop takes them.)"""
    x = rng.normal(size=(1, 256)).astype(jnp.bfloat16)
    bits = x.view(np.uint16)[0]
    bits[3:3 + 6 * 9:9] = BF16_NANS  # a's, b's and g's NaNs in different lanes
    bits[128 + 40:128 + 40 + 6 * 11:11] = BF16_NANS
    x[0, [100, 228, 101, 229]] = [np.inf, 0.0, -np.inf, 0.0]
    g = rng.normal(size=(1, 128)).astype(jnp.bfloat16)
    g.view(np.uint16)[0, 7:7 + 6 * 13:13] = BF16_NANS
    y, vjp = jax.vjp(nn.swiglu, jnp.asarray(x))
    (dx,) = vjp(jnp.asarray(g))
    a, b, g64 = f64(x[0, :128]), f64(x[0, 128:]), f64(g[0])
    with np.errstate(invalid="ignore", over="ignore"):
        s = 1 / (1 + np.exp(-a))
        expected = {"y": a * s * b, "dA": g64 * (s + s * (1 - s) * a) * b, "dB": g64 * s * a}
    for name, got in {"y": y[0], "dA": dx[0, :128], "dB": dx[0, 128:]}.items():
        got, want = f64(got), expected[name]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=2e-2,
                                   atol=1e-30, err_msg=name)


# --- the host kernels run; the references are one switch away --------------------------------

def block(x, r, w):
    y, s = nn.add_rms_norm(x, r, w)
    return jnp.sum(nn.swiglu(nn.rms_norm(y, w)) ** 2) + jnp.sum(s)


def test_each_operator_runs_on_the_host_under_jit_and_grad(rng):
    x, r = (rng.normal(size=(4, 5, 16)).astype(np.float32) for _ in range(2))
    w = np.ones(16, np.float32)
    aclnn.reset_runtime_stats()
    got = jax.block_until_ready(jax.jit(jax.value_and_grad(block, (0, 1, 2)))(x, r, w))
    counted = executions()
    assert aclnn.runtime_stats()["provider"] == "host"
    assert all(counted[op] >= 1 for op in OPERATORS), counted
    with aclnn.reference_path():
        want = jax.jit(jax.value_and_grad(block, (0, 1, 2)))(x, r, w)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_reference_path_switches_back_to_the_references(rng):
    x, r = (rng.normal(size=(2, 16)).astype(np.float32) for _ in range(2))
    w = np.ones(16, np.float32)
    grad = jax.grad(block, (0, 1, 2))
    assert all(f"aclnn_{name}" in jax.jit(grad).lower(x, r, w).as_text()
               for name in OPERATORS.values())
    aclnn.reset_runtime_stats()
    with aclnn.reference_path(["nn_rms_norm", "nn_rms_norm_grad", "nn_add_rms_norm"]):
        hlo = jax.jit(grad).lower(x, r, w).as_text()
        jax.block_until_ready(jax.jit(grad)(x, r, w))
    assert "aclnn_nn_rms_norm" not in hlo and "aclnn_nn_add_rms_norm" not in hlo
    assert "aclnn_nn_swiglu" in hlo
    counted = executions()
    assert counted["aclnnRmsNorm"] == counted["aclnnAddRmsNorm"] == 0, counted
    assert counted["aclnnSwiGlu"] >= 1, counted


KILL_SWITCH_SCRIPT = """
import jax, jax.numpy as jnp
from jax_aclnn import nn
x = jnp.ones((2, 8))
loss = lambda x: jnp.sum(nn.swiglu(nn.rms_norm(x, x[0])))
hlo = jax.jit(jax.value_and_grad(loss)).lower(x).as_text()
print(sorted(t for t in ("nn_rms_norm", "nn_rms_norm_grad", "nn_swiglu", "nn_swiglu_grad")
             if f"aclnn_{t}(" in hlo or f'"aclnn_{t}"' in hlo))
"""


@pytest.mark.parametrize("value,custom_calls", [
    ("0", "['nn_rms_norm', 'nn_rms_norm_grad', 'nn_swiglu', 'nn_swiglu_grad']"),
    ("nn_swiglu,nn_swiglu_grad", "['nn_rms_norm', 'nn_rms_norm_grad']"),
    ("all", "[]"),
])
def test_the_environment_switch_forces_the_references(value, custom_calls):
    env = dict(os.environ, JAX_ACLNN_REFERENCE=value, JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", KILL_SWITCH_SCRIPT], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == custom_calls


# --- the C ABI: strided views, and what CANN refuses -----------------------------------------

def first_phase(name, *args):
    ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
    status = getattr(LIB, name + "GetWorkspaceSize")(*args, ctypes.byref(ws), ctypes.byref(ex))
    return status, ws.value, ex


def contiguous(a: np.ndarray) -> Strided:
    strides = np.array(a.strides) // a.itemsize
    return Strided(a.reshape(-1), a.shape, tuple(int(s) for s in strides), 0)


def test_rms_norm_reads_and_writes_strided_views(rng):
    """CANN takes non-contiguous tensors: rows with gaps between them, a
    gamma with stride 2, written through the ABI as a caller of CANN does."""
    storage = rng.normal(size=3 * 16).astype(np.float32)
    x = Strided(storage, (3, 7), (16, 2), 1)          # every other element of rows 16 apart
    gamma = Strided((1 + rng.normal(size=14)).astype(np.float32), (7,), (2,), 0)
    y = Strided(np.zeros(3 * 9, np.float32), (3, 7), (9, 1), 2)
    rstd = contiguous(np.zeros((3, 1), np.float32))
    status, ws, ex = first_phase("aclnnRmsNorm", x.handle, gamma.handle, 1e-6, y.handle,
                                 rstd.handle)
    assert status == 0, error_message()
    workspace = np.zeros(max(1, ws), np.uint8)
    assert LIB.aclnnRmsNorm(workspace.ctypes.data, ws, ex, None) == 0, error_message()
    xv, gv = x.values().astype(np.float64), gamma.values().astype(np.float64)
    rs = 1 / np.sqrt(np.mean(xv ** 2, -1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(y.values(), xv * rs * gv, rtol=1e-6)
    np.testing.assert_allclose(rstd.values(), rs, rtol=1e-6)


class Handle(int):
    """An aclTensor made by :func:`tensor`, destroyed by :func:`destroy`."""


def tensor(shape, code):
    """A contiguous tensor of dtype code `code` (its data is never read: the call is refused)."""
    strides = [int(np.prod(shape[i + 1:])) for i in range(len(shape))]
    handle = create_tensor(shape, code, strides, 0, (max(1, int(np.prod(shape))),),
                           ctypes.c_void_p(0x1000))
    assert handle, error_message()
    return Handle(handle)


def destroy(*args):
    for a in args:
        if isinstance(a, Handle):
            LIB.aclDestroyTensor(a)


F32, F16, BF16, F64, I32 = 0, 1, 27, 11, 3


@pytest.mark.parametrize("name,args,message", [
    ("aclnnRmsNorm", lambda: (tensor((2, 8), F64), tensor((8,), F64), 1e-6, tensor((2, 8), F64),
                              tensor((2, 1), F32)), "x has data type DOUBLE"),
    ("aclnnRmsNorm", lambda: (tensor((2, 8), I32), tensor((8,), I32), 1e-6, tensor((2, 8), I32),
                              tensor((2, 1), F32)), "x has data type INT32"),
    ("aclnnRmsNorm", lambda: (tensor((2, 8), F32), tensor((8,), F16), 1e-6, tensor((2, 8), F32),
                              tensor((2, 1), F32)), "gamma has data type FLOAT16"),
    ("aclnnRmsNorm", lambda: (tensor((2, 8), BF16), tensor((8,), BF16), 1e-6,
                              tensor((2, 8), BF16), tensor((2, 1), BF16)),
     "rstdOut has data type BFLOAT16"),
    ("aclnnRmsNorm", lambda: (tensor((2, 8), F32), tensor((4,), F32), 1e-6, tensor((2, 8), F32),
                              tensor((2, 1), F32)), "gamma has shape [4], expected [8]"),
    ("aclnnAddRmsNorm", lambda: (tensor((2, 8), F16), tensor((2, 8), F16), tensor((8,), F32),
                                 1e-6, tensor((2, 8), F16), tensor((2, 1), F32),
                                 tensor((2, 8), F16)), "gamma has data type FLOAT"),
    ("aclnnAddRmsNorm", lambda: (tensor((2, 8), F64), tensor((2, 8), F64), tensor((8,), F64),
                                 1e-6, tensor((2, 8), F64), tensor((2, 1), F32),
                                 tensor((2, 8), F64)), "x1 has data type DOUBLE"),
    ("aclnnAddRmsNorm", lambda: (tensor((2, 8), F32), tensor((2, 8), F32), tensor((8,), F32),
                                 -1.0, tensor((2, 8), F32), None, None), "epsilon is -1"),
    ("aclnnRmsNormGrad", lambda: (tensor((2, 8), F64), tensor((2, 8), F64), tensor((2, 1), F32),
                                  tensor((8,), F64), tensor((2, 8), F64), tensor((8,), F32)),
     "x has data type DOUBLE"),
    ("aclnnRmsNormGrad", lambda: (tensor((2, 8), F16), tensor((2, 8), F16), tensor((2, 1), F32),
                                  tensor((8,), F16), tensor((2, 8), F16), tensor((8,), F16)),
     "dgammaOut has data type FLOAT16"),
    ("aclnnRmsNormGrad", lambda: (tensor((8,), F32), tensor((8,), F32), tensor((1,), F32),
                                  tensor((8,), F32), tensor((8,), F32), tensor((8,), F32)),
     "its rank must be 2 to 8"),
    ("aclnnSwiGlu", lambda: (tensor((2, 8), F64), -1, tensor((2, 4), F64)),
     "x has data type DOUBLE"),
    ("aclnnSwiGlu", lambda: (tensor((2, 8), I32), -1, tensor((2, 4), I32)),
     "x has data type INT32"),
    ("aclnnSwiGlu", lambda: (tensor((2, 7), F32), -1, tensor((2, 3), F32)), "odd size"),
    ("aclnnSwiGlu", lambda: (tensor((2, 8), F32), 2, tensor((2, 4), F32)), "dim 2 is out of range"),
    ("aclnnSwiGlu", lambda: (tensor((2, 8), F32), 0, tensor((2, 4), F32)),
     "out has shape [2,4], expected [1,8]"),
    ("aclnnSwiGluGrad", lambda: (tensor((2, 4), F64), tensor((2, 8), F64), -1,
                                 tensor((2, 8), F64)), "x has data type DOUBLE"),
    ("aclnnSwiGluGrad", lambda: (tensor((2, 4), F16), tensor((2, 8), F32), -1,
                                 tensor((2, 8), F32)), "must have the same data type"),
])
def test_the_c_abi_refuses_what_cann_refuses(name, args, message):
    args = args()
    status, _, _ = first_phase(name, *args)
    text = error_message()
    destroy(*args)
    assert status == ACLNN_ERR_PARAM_INVALID, (status, text)
    assert message in text, text


def test_add_rms_norm_refuses_rstd_without_x_out():
    args = (tensor((2, 8), F32), tensor((2, 8), F32), tensor((8,), F32), 1e-6,
            tensor((2, 8), F32), tensor((2, 1), F32), None)
    status, _, _ = first_phase("aclnnAddRmsNorm", *args)
    text = error_message()
    destroy(*args)
    assert status == ACLNN_ERR_PARAM_NULLPTR
    assert "xOut is a null pointer" in text


def test_swiglu_refuses_a_non_contiguous_x():
    """CANN's page: x and out contiguous only."""
    x = Handle(create_tensor((2, 8), F32, (16, 1), 0, (32,), ctypes.c_void_p(0x1000)))
    out = tensor((2, 4), F32)
    status, _, _ = first_phase("aclnnSwiGlu", x, -1, out)
    text = error_message()
    destroy(x, out)
    assert status == ACLNN_ERR_PARAM_INVALID and "x must be contiguous" in text


def test_half_precision_inputs_run_through_the_abi_in_every_dtype(rng):
    """The three dtypes at the C level (the mixed float32 gamma included),
    against float64 NumPy."""
    for dtype, gamma_dtype in [(np.float32, np.float32), (np.float16, np.float16),
                               (jnp.bfloat16, jnp.bfloat16), (np.float16, np.float32),
                               (jnp.bfloat16, np.float32)]:
        x = rng.normal(size=(5, 33)).astype(dtype)
        g = (1 + 0.1 * rng.normal(size=33)).astype(gamma_dtype)
        y, rstd = np.zeros_like(x), np.zeros((5, 1), np.float32)
        views = [contiguous(a) for a in (x, g, y, rstd)]
        status, ws, ex = first_phase("aclnnRmsNorm", views[0].handle, views[1].handle, 1e-6,
                                     views[2].handle, views[3].handle)
        assert status == 0, error_message()
        workspace = np.zeros(max(1, ws), np.uint8)
        assert LIB.aclnnRmsNorm(workspace.ctypes.data, ws, ex, None) == 0
        xv = x.astype(np.float64)
        rs = 1 / np.sqrt(np.mean(xv ** 2, -1, keepdims=True) + 1e-6)
        name = jnp.dtype(dtype).name
        assert_close(views[2].values(), xv * rs * g.astype(np.float64), name)
        np.testing.assert_allclose(views[3].values(), rs, rtol=1e-5)
