"""The host provider's kernel of aclnnApplyAdamWV2 (issue 46): in place on
varRef, mRef, vRef (and maxGradNormOptionalRef with amsgrad), in every
dtype CANN takes (float32, float16, bfloat16; one dtype for the tensors,
step INT64 or FLOAT32), equal to torch.optim.AdamW's update (amsgrad and
maximize included; float64, from the same rounded state) and to a float64
NumPy formula, step after step; jax_aclnn.optax.adamw runs it on the CPU
(runtime_stats counts it) and the reference stays one switch away; the C
ABI refuses what CANN refuses."""

from __future__ import annotations

import ctypes
import functools
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import DTYPES, f64, needs_torch, tolerance, torch
from host_abi import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, LIB, create_tensor,
                      error_message)
from test_host_llm_kernels import (BF16, F16, F32, F64, I32, Handle, contiguous, destroy,
                                   tensor)

import jax_aclnn as aclnn
from jax_aclnn import optax as aclnn_optax
from jax_aclnn.optax import APPLY_ADAMW

OP = "aclnnApplyAdamWV2"
HYPER = dict(lr=1e-2, beta1=0.9, beta2=0.99, weightDecay=0.1, eps=1e-6)
STEPS = 4
#: Ranks 1 and 3 (CANN takes 1 to 8), sizes that are no multiple of any
#: vector width, one element, more than one task of the thread pool.
SHAPES = [(37,), (2, 3, 17), (1,), (70001,)]
I64 = 9


def executions() -> int:
    return aclnn.runtime_stats()["calls"].get(OP, {}).get("execute", 0)


@functools.cache
def jitted_update(amsgrad: bool, maximize: bool):
    return jax.jit(lambda var, m, v, peak, grad, step: APPLY_ADAMW(
        var, m, v, peak if amsgrad else None, grad, step, **HYPER, amsgrad=amsgrad,
        maximize=maximize))


def torch_step(var, m, v, max_v, grad, step, *, amsgrad, maximize):
    """torch.optim.AdamW's update (float64, its single-tensor loop) from the
    given state, torch's step counter at ``step`` (it adds 1, as CANN does)."""
    p = torch.tensor(var, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.AdamW([p], lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]),
                            eps=HYPER["eps"], weight_decay=HYPER["weightDecay"], amsgrad=amsgrad,
                            maximize=maximize, foreach=False)
    state = {"step": torch.tensor(float(step)), "exp_avg": torch.tensor(m),
             "exp_avg_sq": torch.tensor(v)}
    if amsgrad:
        state["max_exp_avg_sq"] = torch.tensor(max_v)
    opt.state[p] = state
    p.grad = torch.tensor(grad)
    opt.step()
    s = opt.state[p]
    return (p.detach().numpy(), s["exp_avg"].numpy(), s["exp_avg_sq"].numpy(),
            s["max_exp_avg_sq"].numpy() if amsgrad else None)


def numpy_step(var, m, v, max_v, grad, step, *, amsgrad, maximize):
    """CANN's formula (aclnnApplyAdamWV2.md, t = step + 1) in float64."""
    lr, b1, b2, wd, eps = (HYPER[k] for k in ("lr", "beta1", "beta2", "weightDecay", "eps"))
    t = step + 1
    g = -grad if maximize else grad
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    max_v = np.maximum(max_v, v) if amsgrad else None
    denom = np.sqrt(max_v if amsgrad else v) / np.sqrt(1 - b2 ** t) + eps
    var = var * (1 - lr * wd) - lr / (1 - b1 ** t) * m / denom
    return var, m, v, max_v


def assert_state_close(actual, expected, dtype):
    """The kernel computes in float32 and rounds to ``dtype``."""
    tol = 2 * tolerance(dtype)
    actual, expected = f64(actual), np.asarray(expected, np.float64)
    np.testing.assert_allclose(actual, expected, rtol=tol,
                               atol=tol * float(np.max(np.abs(expected), initial=0.0)))


@jax.jit
def _update_plain(var, m, v, grad, step):
    return APPLY_ADAMW(var, m, v, None, grad, step, **HYPER, amsgrad=False, maximize=False)


@needs_torch
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_update_equals_torch_adamw_and_numpy(rng, dtype, shape, amsgrad, maximize):
    update = jitted_update(amsgrad, maximize)
    var = jnp.asarray(rng.normal(size=shape), dtype)
    m = jnp.asarray(0.1 * rng.normal(size=shape), dtype)
    v = jnp.asarray(0.01 * rng.random(size=shape), dtype)
    peak = jnp.asarray(0.01 * rng.random(size=shape), dtype)
    aclnn.reset_runtime_stats()
    for step in range(STEPS):
        grad = jnp.asarray(rng.normal(size=shape), dtype)
        state = [f64(a) for a in (var, m, v, peak, grad)]
        out = update(var, m, v, peak, grad, jnp.asarray([step], jnp.float32))
        assert [a.dtype for a in out if a is not None] == [jnp.dtype(dtype)] * (3 + amsgrad)
        assert all(a.shape == shape for a in out if a is not None)
        assert (out[3] is None) == (not amsgrad)
        for expected in (torch_step(*state, step, amsgrad=amsgrad, maximize=maximize),
                         numpy_step(*state, step, amsgrad=amsgrad, maximize=maximize)):
            for a, e in zip(out, expected):
                if e is not None:
                    assert_state_close(a, e, dtype)
        var, m, v = out[:3]
        if amsgrad:
            peak = out[3]
    assert executions() == STEPS


def nan_with_bits(bits: int) -> np.float32:
    return np.array([bits], np.uint32).view(np.float32)[0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("where", ["step", "eps", "lr"])
def test_a_nan_step_or_hyperparameter_gives_nan_in_every_element(dtype, where):
    """A NaN of any bits among the update's float32 scalars makes every
    element NaN, in the vector loop as in its tail: 0xFFFFFFFF (memory
    filled with ones) once came out of the bfloat16 vector loop as 0, its
    rounding carried out of the NaN (map_runs.h's kNaNsFromInputs)."""
    n = 8 * 16 + 3  # whole vectors of any width, then a tail
    nan = nan_with_bits(0xFFFFFFFF if where != "lr" else 0x7FFF8000)
    step = np.array([nan if where == "step" else 3.0], np.float32)
    hyper = {**HYPER, **({where: float(nan)} if where != "step" else {})}
    out = APPLY_ADAMW(jnp.ones((n,), dtype), jnp.full((n,), 0.5, dtype),
                      jnp.full((n,), 0.25, dtype), None, jnp.full((n,), 0.1, dtype),
                      jnp.asarray(step), **hyper, amsgrad=False, maximize=False)
    assert np.all(np.isnan(f64(out[0]))), f64(out[0])


@needs_torch
def test_the_update_over_many_steps_follows_torch_adamw_in_float32(rng):
    """Twenty steps of float32 state against torch's float32 AdamW run
    alone: the trajectories agree to float32 rounding."""
    shape = (3, 41)
    var0 = rng.normal(size=shape).astype(np.float32)
    p = torch.tensor(var0, requires_grad=True)
    opt = torch.optim.AdamW([p], lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]),
                            eps=HYPER["eps"], weight_decay=HYPER["weightDecay"], foreach=False)
    var, m, v = jnp.asarray(var0), jnp.zeros(shape), jnp.zeros(shape)
    for step in range(20):
        grad = rng.normal(size=shape).astype(np.float32)
        var, m, v, _ = _update_plain(var, m, v, grad, jnp.asarray([step], jnp.float32))
        p.grad = torch.tensor(grad)
        opt.step()
    np.testing.assert_allclose(var, p.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m, opt.state[p]["exp_avg"].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v, opt.state[p]["exp_avg_sq"].numpy(), rtol=1e-5, atol=1e-8)


def test_the_update_is_in_place_under_jit_with_donation(rng):
    """varRef, mRef and vRef alias their results (input_output_aliases):
    donated, their buffers are the results'."""
    shape = (8, 33)
    var, m, v, grad = (jnp.asarray(rng.normal(size=shape) ** 2, jnp.float32) for _ in range(4))
    pointers = [a.unsafe_buffer_pointer() for a in (var, m, v)]
    update = jax.jit(lambda var, m, v, grad, step: _update_plain(var, m, v, grad, step)[:3],
                     donate_argnums=(0, 1, 2))
    want = numpy_step(*(f64(a) for a in (var, m, v)), None, f64(grad), 0, amsgrad=False,
                      maximize=False)
    out = update(var, m, v, grad, jnp.zeros((1,), jnp.float32))
    assert [a.unsafe_buffer_pointer() for a in out] == pointers
    for a, e in zip(out, want):
        assert_state_close(a, e, "float32")


# --- jax_aclnn.optax.adamw on the host kernel ------------------------------------------------

#: Parameters of rank 0 to 3 (adamw gives CANN rank 0 as one element).
PARAMS = {"s": (), "b": (37,), "w": (5, 13), "c": (2, 3, 17)}


@needs_torch
@pytest.mark.parametrize("in_place", [False, True])
def test_adamw_runs_the_host_kernel_and_equals_torch(rng, in_place):
    """update_and_apply: the kernel updates the parameters themselves; tx.update
    and optax.apply_updates: on a CPU optax's formulas (XLA's one pass; the
    kernel's direction would take a second), the kernel in the NPU's branch."""
    params = {k: jnp.asarray(rng.normal(size=s), jnp.float32) for k, s in PARAMS.items()}
    keys = sorted(PARAMS)
    tp = [torch.tensor(np.asarray(params[k]), requires_grad=True) for k in keys]
    opt = torch.optim.AdamW(tp, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1,
                            foreach=False)
    tx = aclnn_optax.adamw(1e-2, weight_decay=0.1)
    state = tx.init(params)

    @jax.jit
    def step(params, state, grads):
        if in_place:
            return aclnn_optax.update_and_apply(tx, grads, state, params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    hlo = step.lower(params, state, params).as_text()
    assert ("aclnn_optax_apply_adam_w_v2" in hlo) == in_place
    aclnn.reset_runtime_stats()
    for _ in range(5):
        grads = {k: jnp.asarray(rng.normal(size=s), jnp.float32) for k, s in PARAMS.items()}
        params, state = step(params, state, grads)
        for t, k in zip(tp, keys):
            t.grad = torch.tensor(np.asarray(grads[k]))
        opt.step()
    assert aclnn.runtime_stats()["provider"] == "host"
    assert executions() == (5 * len(PARAMS) if in_place else 0)
    for t, k in zip(tp, keys):
        assert params[k].shape == PARAMS[k]
        np.testing.assert_allclose(params[k], t.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_reference_path_switches_back_to_optax_formulas(rng):
    params = {"w": jnp.asarray(rng.normal(size=(4, 7)), jnp.float32)}
    tx = aclnn_optax.adamw(1e-2)
    state = tx.init(params)
    step = lambda g, s, p: aclnn_optax.update_and_apply(tx, g, s, p)  # noqa: E731
    aclnn.reset_runtime_stats()
    got = jax.jit(step)(params, state, params)
    assert executions() == 1
    with aclnn.reference_path(["optax_apply_adam_w_v2"]):
        hlo = jax.jit(step).lower(params, state, params).as_text()
        want = jax.jit(step)(params, state, params)
    assert "aclnn_optax_apply_adam_w_v2" not in hlo
    assert executions() == 1
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


SWITCH_SCRIPT = """
import jax, jax.numpy as jnp
from jax_aclnn import optax as aclnn_optax
p = {"w": jnp.ones((2, 8))}
tx = aclnn_optax.adamw(1e-2)
step = lambda g, s, p: aclnn_optax.update_and_apply(tx, g, s, p)
hlo = jax.jit(step).lower(p, tx.init(p), p).as_text()
print("aclnn_optax_apply_adam_w_v2" in hlo)
"""


@pytest.mark.parametrize("value,calls", [("0", "True"), ("optax_apply_adam_w_v2", "False")])
def test_the_environment_switch_forces_the_reference(value, calls):
    env = dict(os.environ, JAX_ACLNN_REFERENCE=value, JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", SWITCH_SCRIPT], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == calls


# --- the C ABI: in place, step INT64 or FLOAT32, and what CANN refuses ------------------------

def step_tensor(step: np.ndarray) -> int:
    """The one-element step (INT64 or FLOAT32) over `step`'s memory."""
    handle = create_tensor((1,), I64 if step.dtype == np.int64 else F32, (1,), 0, (1,),
                           ctypes.c_void_p(step.ctypes.data))
    assert handle, error_message()
    return handle


def call(var, m, v, peak, grad, step, amsgrad=False, maximize=False, run=True):
    ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
    status = LIB.aclnnApplyAdamWV2GetWorkspaceSize(
        var, m, v, peak, grad, step, *(HYPER[k] for k in ("lr", "beta1", "beta2", "weightDecay",
                                                          "eps")),
        amsgrad, maximize, ctypes.byref(ws), ctypes.byref(ex))
    text = error_message()
    if status == 0 and run:
        assert ws.value == 0
        status = LIB.aclnnApplyAdamWV2(None, 0, ex, None)
    return status, text


@pytest.mark.parametrize("step_dtype", [np.int64, np.float32])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, jnp.bfloat16])
def test_the_c_abi_updates_the_tensors_in_place(rng, dtype, step_dtype):
    shape = (3, 29)
    arrays = [rng.normal(size=shape), 0.1 * rng.normal(size=shape), 0.01 * rng.random(size=shape),
              0.01 * rng.random(size=shape), rng.normal(size=shape)]
    var, m, v, peak, grad = (np.asarray(a, np.float32).astype(dtype) for a in arrays)
    before = [f64(a) for a in (var, m, v, peak, grad)]
    grad_before = grad.copy()
    step = np.asarray([6], step_dtype)
    views = [contiguous(a) for a in (var, m, v, peak, grad)]
    handle = step_tensor(step)
    status, text = call(*(x.handle for x in views), handle, amsgrad=True, maximize=True)
    LIB.aclDestroyTensor(handle)
    assert status == 0, text
    name = jnp.dtype(dtype).name
    for a, e in zip((var, m, v, peak), numpy_step(*before, 6, amsgrad=True, maximize=True)):
        assert_state_close(a, e, name)
    np.testing.assert_array_equal(grad, grad_before)  # read only
    assert step[0] == 6  # not written


def test_an_empty_update_does_nothing():
    views = [contiguous(np.zeros((0, 3), np.float32)) for _ in range(4)]
    step = np.zeros(1, np.float32)
    handle = step_tensor(step)
    var, m, v, grad = (x.handle for x in views)
    status, text = call(var, m, v, None, grad, handle)
    LIB.aclDestroyTensor(handle)
    assert status == 0, text


def gappy(shape) -> Handle:
    """A float32 tensor with a gap after each element (never read)."""
    strides = [2 * int(np.prod(shape[i + 1:])) for i in range(len(shape))]
    handle = create_tensor(shape, F32, strides, 0, (2 * int(np.prod(shape)),),
                           ctypes.c_void_p(0x1000))
    assert handle, error_message()
    return Handle(handle)


@pytest.mark.parametrize("args,message", [
    (lambda: [tensor((4,), F64)] * 4 + [tensor((4,), F64), tensor((1,), F32)],
     "varRef has data type DOUBLE"),
    (lambda: [tensor((4,), I32)] * 4 + [tensor((4,), I32), tensor((1,), F32)],
     "varRef has data type INT32"),
    (lambda: [tensor((4,), F32), tensor((4,), F16), tensor((4,), F32), None, tensor((4,), F32),
              tensor((1,), F32)], "varRef (FLOAT) and mRef (FLOAT16) must have the same data type"),
    (lambda: [tensor((4,), BF16), tensor((4,), BF16), tensor((4,), F32), None,
              tensor((4,), BF16), tensor((1,), F32)], "vRef (FLOAT) must have the same"),
    (lambda: [tensor((4,), F16)] * 3 + [None, tensor((4,), F32), tensor((1,), F32)],
     "grad (FLOAT) must have the same data type"),
    (lambda: [tensor((4,), F32)] * 3 + [tensor((4,), F16), tensor((4,), F32), tensor((1,), F32)],
     "maxGradNormOptionalRef (FLOAT16) must have the same data type"),
    (lambda: [tensor((4,), F32)] * 3 + [None, tensor((5,), F32), tensor((1,), F32)],
     "grad has shape [5], expected [4]"),
    (lambda: [tensor((2, 4), F32), tensor((4, 2), F32), tensor((2, 4), F32), None,
              tensor((2, 4), F32), tensor((1,), F32)], "mRef has shape [4,2], expected [2,4]"),
    (lambda: [tensor((4,), F32)] * 3 + [None, tensor((4,), F32), tensor((1,), I32)],
     "step has data type INT32; expected INT64 or FLOAT"),
    (lambda: [tensor((4,), F32)] * 3 + [None, tensor((4,), F32), tensor((2,), F32)],
     "step has shape [2]; expected one element"),
    (lambda: [tensor((), F32)] * 3 + [None, tensor((), F32), tensor((1,), F32)],
     "its rank must be 1 to 8"),
    (lambda: [gappy((2, 4))] + [tensor((2, 4), F32)] * 2 + [
        None, tensor((2, 4), F32), tensor((1,), F32)], "varRef must be contiguous"),
])
def test_the_c_abi_refuses_what_cann_refuses(args, message):
    args = args()
    status, text = call(*args, run=False)
    destroy(*set(a for a in args if a is not None))
    assert status == ACLNN_ERR_PARAM_INVALID, (status, text)
    assert message in text, text


def test_amsgrad_needs_max_grad_norm():
    args = [tensor((4,), F32)] * 3 + [None, tensor((4,), F32), tensor((1,), F32)]
    status, text = call(*args, amsgrad=True, run=False)
    destroy(*set(a for a in args if a is not None))
    assert status == ACLNN_ERR_PARAM_NULLPTR, (status, text)
    assert "maxGradNormOptionalRef is a null pointer" in text
