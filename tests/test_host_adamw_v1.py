"""The host provider's aclnnApplyAdamW (V1, issue 46) through its C ABI.

As CANN's callers call it: varRef, mRef, vRef updated in place from grad, the
scalars (beta1Power, beta2Power, lr, weightDecay, beta1, beta2, eps)
one-element tensors of varRef's dtype read when it runs, beta ** t =
betaPower * beta, maxGradNormOptional read (amsgrad) and never written
(ops-nn optim/apply_adam_w/docs/aclnnApplyAdamW.md and its kernel
optim/apply_adam_w/op_kernel/arch35/apply_adam_w_dag.h). Against a float64
NumPy formula in float32, float16 and bfloat16, step after step; against
the test provider's float32 kernel (csrc/testing/optim_operators.cc); the
refusals with CANN's statuses; its declared operator (jax_aclnn.optax)
against its pure-JAX reference. jax_aclnn.optax's use of it:
tests/test_optax.py."""

from __future__ import annotations

import ctypes

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import f64
from declared_operators import LIBRARY
from host_abi import (ACL_DTYPES, ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, LIB,
                      error_message, int64s, load)
from test_host_adamw import assert_state_close
from test_host_llm_kernels import F16, F32, F64, destroy, tensor

import jax_aclnn as aclnn
from jax_aclnn.optax import APPLY_ADAMW_V1

OP = "aclnnApplyAdamW"
HYPER = dict(lr=1e-2, weightDecay=0.1, beta1=0.9, beta2=0.99, eps=1e-6)
#: The test provider (float32 alone), its signatures set as the host's.
TEST_LIB = load(LIBRARY)


def numpy_step(var, m, v, peak, grad, b1_power, b2_power, *, lr, weightDecay, beta1, beta2,
               eps, amsgrad, maximize):
    """aclnnApplyAdamW's formula in float64 (the page's, in its kernel's
    reading: beta ** t = betaPower * beta, the denominator from max(peak, v)
    with amsgrad, v itself returned)."""
    g = -grad if maximize else grad
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    second = np.maximum(peak, v) if amsgrad else v
    denom = np.sqrt(second / (1 - b2_power * beta2)) + eps
    var = var * (1 - lr * weightDecay) - lr / (1 - b1_power * beta1) * m / denom
    return var, m, v


class Tensors:
    """Contiguous aclTensors over numpy arrays, made by ``lib``'s
    aclCreateTensor (each provider takes its own descriptors)."""

    def __init__(self, lib: ctypes.CDLL, *arrays: np.ndarray | None):
        self.lib, self.arrays = lib, arrays
        self.handles = [None if a is None else self.make(a) for a in arrays]

    def make(self, a: np.ndarray) -> int:
        strides = np.array(a.strides) // a.itemsize
        handle = self.lib.aclCreateTensor(int64s(a.shape), a.ndim, ACL_DTYPES[a.dtype],
                                          int64s(strides), 0, 2, int64s([a.size]), 1,
                                          a.ctypes.data)
        assert handle
        return handle

    def __del__(self):
        for h in self.handles:
            if h is not None:
                self.lib.aclDestroyTensor(h)


def call(lib, handles, amsgrad=False, maximize=False, run=True) -> tuple[int, str]:
    """Both phases (the first alone unless ``run``): the status and the
    last error message."""
    ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
    status = getattr(lib, OP + "GetWorkspaceSize")(*handles, amsgrad, maximize,
                                                    ctypes.byref(ws), ctypes.byref(ex))
    text = lib.aclGetRecentErrMsg().decode()
    if status == 0 and run:
        assert ws.value == 0
        status = getattr(lib, OP)(None, 0, ex, None)
    return status, text


def scalars(dtype, step: int) -> dict[str, np.ndarray]:
    """The one-element tensors in the prototype's order, of ``dtype``, for
    the update after ``step`` updates (beta ** step)."""
    values = dict(beta1Power=HYPER["beta1"] ** step, beta2Power=HYPER["beta2"] ** step, **HYPER)
    order = ("beta1Power", "beta2Power", "lr", "weightDecay", "beta1", "beta2", "eps")
    return {k: np.asarray([values[k]], np.float32).astype(dtype) for k in order}


def state(rng, shape, dtype):
    arrays = [rng.normal(size=shape), 0.1 * rng.normal(size=shape),
              0.01 * rng.random(size=shape), 0.02 * rng.random(size=shape),
              rng.normal(size=shape)]
    return [np.asarray(a, np.float32).astype(dtype) for a in arrays]


def update(lib, var, m, v, peak, grad, step, amsgrad, maximize):
    """One update through ``lib`` in place; the rounded scalars it took."""
    s = scalars(var.dtype, step)
    tensors = Tensors(lib, var, m, v, *s.values(), grad, peak if amsgrad else None)
    status, text = call(lib, tensors.handles, amsgrad, maximize)
    assert status == 0, text
    return {k: float(f64(a)[0]) for k, a in s.items()}


@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("shape", [(3, 29), (70001,)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, jnp.bfloat16])
def test_the_update_equals_numpy_step_after_step(rng, dtype, shape, amsgrad, maximize):
    """Three updates in place, each against float64 NumPy from the rounded
    state and the rounded scalars (of varRef's dtype, as CANN takes them);
    grad and maxGradNormOptional never written."""
    var, m, v, peak, _ = state(rng, shape, dtype)
    peak_before = peak.copy()
    for step in range(3):
        grad = np.asarray(rng.normal(size=shape), np.float32).astype(dtype)
        before = [f64(a) for a in (var, m, v, peak, grad)]
        grad_before = grad.copy()
        taken = update(LIB, var, m, v, peak, grad, step, amsgrad, maximize)
        b1_power, b2_power = taken.pop("beta1Power"), taken.pop("beta2Power")
        expected = numpy_step(*before, b1_power, b2_power, **taken, amsgrad=amsgrad,
                              maximize=maximize)
        for a, e in zip((var, m, v), expected):
            assert_state_close(a, e, jnp.dtype(dtype).name)
        np.testing.assert_array_equal(grad, grad_before)
    np.testing.assert_array_equal(peak, peak_before)


@pytest.mark.parametrize("amsgrad,maximize", [(False, False), (True, True)])
def test_the_test_provider_agrees_with_the_host(rng, amsgrad, maximize):
    """The test provider's naive float32 kernel and the host's vectorized
    one, from the same state, over two updates."""
    ours = state(rng, (5, 41), np.float32)
    theirs = [a.copy() for a in ours]
    for step in range(2):
        grad = rng.normal(size=(5, 41)).astype(np.float32)
        update(LIB, *ours[:4], grad, step, amsgrad, maximize)
        update(TEST_LIB, *theirs[:4], grad, step, amsgrad, maximize)
        for a, b in zip(ours[:3], theirs[:3]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def arguments(var=((4,), F32), lr=((1,), F32), grad=((4,), F32), peak=None, null=None):
    """V1's twelve tensors (refused before any is read): the others float32
    of shape (4,) and (1,); ``null`` the name of one left out."""
    names = ("varRef", "mRef", "vRef", "beta1Power", "beta2Power", "lr", "weightDecay",
             "beta1", "beta2", "eps", "grad", "maxGradNormOptional")
    specs = [var, var, var] + [((1,), var[1])] * 2 + [lr] + [((1,), var[1])] * 4 + [grad, peak]
    return [None if spec is None or name == null else tensor(*spec)
            for name, spec in zip(names, specs)]


@pytest.mark.parametrize("args,status,message", [
    (lambda: arguments(var=((4,), F64)), ACLNN_ERR_PARAM_INVALID, "varRef has data type DOUBLE"),
    (lambda: arguments(lr=((1,), F16)), ACLNN_ERR_PARAM_INVALID,
     "varRef (FLOAT) and lr (FLOAT16) must have the same data type"),
    (lambda: arguments(lr=((2,), F32)), ACLNN_ERR_PARAM_INVALID,
     "lr has shape [2]; expected one element"),
    (lambda: arguments(grad=((5,), F32)), ACLNN_ERR_PARAM_INVALID,
     "grad has shape [5], expected [4]"),
    (lambda: arguments(peak=((3,), F32)), ACLNN_ERR_PARAM_INVALID,
     "maxGradNormOptional has shape [3], expected [4]"),
    (lambda: arguments(null="weightDecay"), ACLNN_ERR_PARAM_NULLPTR,
     "weightDecay is a null pointer"),
    (lambda: arguments(null="grad"), ACLNN_ERR_PARAM_NULLPTR, "grad is a null pointer"),
])
def test_the_c_abi_refuses_what_cann_refuses(args, status, message):
    """CANN's table: a type other than FLOAT, FLOAT16, BFLOAT16 or not
    varRef's, a shape not varRef's, a scalar of more than one element:
    161002; a null tensor: 161001."""
    args = args()
    got, text = call(LIB, args, run=False)
    destroy(*set(a for a in args if a is not None))
    assert got == status, (got, text)
    assert message in text, text


def test_amsgrad_needs_max_grad_norm():
    args = arguments()
    got, text = call(LIB, args, amsgrad=True, run=False)
    destroy(*set(a for a in args if a is not None))
    assert got == ACLNN_ERR_PARAM_NULLPTR, (got, text)
    assert "maxGradNormOptional is a null pointer with amsgrad" in text, error_message()


@pytest.mark.parametrize("amsgrad,maximize", [(False, False), (True, True)])
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
def test_the_declared_operator_runs_the_host_kernel_and_equals_its_reference(rng, dtype,
                                                                             amsgrad, maximize):
    """jax_aclnn.optax's APPLY_ADAMW_V1 under jit: one host call, equal to
    its pure-JAX reference (reference_path) within a rounding of ``dtype``."""
    var, m, v, peak, grad = (jnp.asarray(a) for a in state(rng, (4, 9), dtype))
    update = jax.jit(lambda *a: APPLY_ADAMW_V1(*a[:3], *scalars(dtype, 2).values(), a[3],
                                               a[4] if amsgrad else None, amsgrad=amsgrad,
                                               maximize=maximize))
    aclnn.reset_runtime_stats()
    got = update(var, m, v, grad, peak)
    assert aclnn.runtime_stats()["calls"][OP]["execute"] == 1
    with aclnn.reference_path(["optax_apply_adam_w"]):
        want = jax.jit(update.__wrapped__)(var, m, v, grad, peak)
    assert aclnn.runtime_stats()["calls"][OP]["execute"] == 1
    for a, b in zip(got, want):
        assert a.dtype == jnp.dtype(dtype)
        assert_state_close(a, f64(b), jnp.dtype(dtype).name)
