"""The NPU-platform FFI handlers, run through a minimal XLA FFI runtime that
stands in for the Ascend PJRT plugin (``jax_aclnn._ffi_testing``, built with
``-DJAX_ACLNN_TESTING=ON``), against the host provider installed under CANN's
library names at a temporary ``ASCEND_HOME_PATH``.

The runtime calls the handlers registered for the NPU platform in XLA's stages
(instantiate, then execute repeatedly) with XLA's call frames, a fake
aclrtStream and counted device memory; the host provider's test hooks report
the stream and workspace each second phase was given.

CANN, once loaded, stays loaded for the life of a process. So the test bodies
(the ``_check_*`` functions) run in a spawned process of their own with the
stand-in as ``ASCEND_HOME_PATH``, and the tests about loading CANN each get a
fresh one: no test here depends on, or changes, what other tests loaded.
"""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import jax
import numpy as np
import pytest
from cases import OPERATORS
from conftest import free_compiled_programs
from npu_runtime_harness import (
    FfiError,
    NpuCall,
    NpuProcess,
    array,
    assert_same_bits,
    batch_norm_cases,
    cann_loaded,
    cases,
    ffi_api_minor_versions,
    last_execute,
    live_counts,
    make_cann_standin,
    rt,
    run_both,
    standin_library,
)

import jax_aclnn as aclnn

SEED = 20261122
DTYPES = ["float32", "float16", "bfloat16"]
ACLNN_ERR_RUNTIME_ERROR = 361001


@pytest.fixture(scope="module")
def standin(tmp_path_factory) -> Path:
    if rt is None:
        pytest.fail("jax_aclnn was built without its test runtime: install it with "
                    '`pip install ".[test]" -C cmake.define.JAX_ACLNN_TESTING=ON`', pytrace=False)
    return make_cann_standin(tmp_path_factory.mktemp("cann"))


@pytest.fixture(scope="module")
def npu(standin):
    """The process that serves every test body but the loading tests."""
    process = NpuProcess({"ASCEND_HOME_PATH": str(standin)})
    yield process
    process.close()


@pytest.fixture
def fresh_process():
    """A new process per test; CANN is not loaded in it."""
    processes = []

    def start(env):
        processes.append(NpuProcess(env))
        return processes[-1]

    yield start
    for p in processes:
        p.close()



# ----- test bodies -------------------------------------------------------------


def _check_operator_matches_cpu_path(name: str, dtype: str) -> int:
    device, rng = rt.Device(), np.random.default_rng(SEED)
    n = 0
    for params, operands, cpu_fn in cases(name, dtype, rng):
        for reuse in (True, False):  # the call-site executor and the one-shot path
            aclnn.set_executor_reuse(reuse)
            try:
                npu_out, cpu_out = run_both(name, params, operands, cpu_fn, device)
            finally:
                aclnn.set_executor_reuse(True)
            for a, b in zip(npu_out, cpu_out, strict=True):
                assert_same_bits(a, b)
            n += 1
    assert device.memory_stats()["live"] == 0
    return n


def _check_workspace_from_scratch_allocator() -> None:
    device, rng = rt.Device(), np.random.default_rng(SEED)
    params, operands, _ = next(batch_norm_cases("float32", rng, (40, 3, 9)))
    call = NpuCall("batch_norm_reduce_backward", **params)
    for step in range(1, 4):
        call(device, *operands)
        _, workspace, size = last_execute()
        mem = device.memory_stats()
        assert mem["allocations"] == mem["frees"] == step and mem["live"] == 0, mem
        assert size > 0 and workspace == mem["last_address"] and size == mem["last_size"], (
            hex(workspace), size, mem)
        assert mem["last_address"] % mem["last_alignment"] == 0
    # The element-wise operators need no workspace: nothing is allocated.
    NpuCall("swish_backward", beta=1.0)(device, *operands[:2])
    assert device.memory_stats()["allocations"] == 3
    call.free()


def _check_executor_reuse_steady_state(api_minor_version: int) -> None:
    free_compiled_programs()
    device, rng = rt.Device(), np.random.default_rng(SEED)
    sites = {name: NpuCall(name, api_minor_version=api_minor_version, **params)
             for name, params in (
        ("swish_backward", dict(beta=1.5)),
        ("batch_norm_reduce_backward",
         dict(has_weight=True, input_g=True, weight_g=True, bias_g=True)))}
    expected = {name: [] for name in sites}
    operand_sets = []
    for _ in range(5):  # fresh arrays each step: the buffers move
        params, bn_operands, bn_cpu = next(batch_norm_cases("float32", rng, (8, 4, 6)))
        sw = [array(rng.uniform(-2, 2, (5, 3)), "float32") for _ in range(2)]
        operand_sets.append({"swish_backward": sw, "batch_norm_reduce_backward": bn_operands})
        expected["swish_backward"].append([aclnn.swish_backward(*sw, beta=1.5)])
        expected["batch_norm_reduce_backward"].append(list(jax.jit(bn_cpu)(*bn_operands)))
    free_compiled_programs()  # the CPU path's call sites let go of their executors
    assert live_counts() == (0, 0), live_counts()
    addresses = set()
    for step, operands in enumerate(operand_sets):
        if step == 1:
            aclnn.reset_runtime_stats()
        for name, call in sites.items():
            out = call(device, *operands[name])
            for a, b in zip(out, expected[name][step], strict=True):
                assert_same_bits(a, b)
            addresses.add(operands[name][0].ctypes.data)
        assert live_counts()[1] == 2, live_counts()  # one executor per call site
    assert len(addresses) > 2  # the executors were re-targeted at moved buffers
    calls = aclnn.runtime_stats()["calls"]
    for op in ("aclnnSwishBackward", "aclnnBatchNormReduceBackward"):
        assert calls[op] == {"get_workspace_size": 0, "execute": 4}, calls
    for call in sites.values():
        call.free()
    assert live_counts() == (0, 0), live_counts()


def _check_state_destroyed_with_call_site(api_minor_version: int) -> None:
    free_compiled_programs()
    assert live_counts() == (0, 0), live_counts()
    device, rng = rt.Device(), np.random.default_rng(SEED)

    def executed_call_site(name):
        params, operands, _ = next(cases(name, "float16", rng))
        call = NpuCall(name, api_minor_version=api_minor_version, **params)
        call(device, *operands)
        return call

    calls = [executed_call_site(name) for name in OPERATORS]
    tensors, executors = live_counts()
    assert executors == len(OPERATORS) and tensors > 0, live_counts()
    assert all(c.site.has_state for c in calls)
    calls[0].free()  # as XLA frees a program: the state's deleter
    assert live_counts()[1] == len(OPERATORS) - 1
    with pytest.raises(FfiError, match="State is not set"):  # a freed site has no state
        calls[0](device, *next(cases(OPERATORS[0], "float16", rng))[1])
    del calls  # the rest by the runtime's call-site destructor
    gc.collect()
    assert live_counts() == (0, 0), live_counts()


def _check_first_phase_refusal(reuse: bool) -> None:
    free_compiled_programs()
    aclnn.set_executor_reuse(reuse)
    try:
        device = rt.Device()
        x = array(np.linspace(-1, 1, 12).reshape(3, 4), "float32")
        call = NpuCall("smooth_l1_loss_backward", reduction=7, beta=0.5)  # no such reduction
        with pytest.raises(FfiError) as e:
            call(device, x, x, x)
        message = e.value.message
        for part in ("aclnnSmoothL1LossBackwardGetWorkspaceSize", "161002",
                     "ACLNN_ERR_PARAM_INVALID", "reduction must be 0 (none), 1 (mean) or 2 (sum)"):
            assert part in message, message
        assert e.value.code != "OK"
        assert live_counts() == (0, 0), live_counts()
        assert device.memory_stats()["live"] == 0
        call.free()
    finally:
        aclnn.set_executor_reuse(True)


def _check_second_phase_refusal(reuse: bool) -> None:
    free_compiled_programs()
    aclnn.set_executor_reuse(reuse)
    try:
        device, rng = rt.Device(), np.random.default_rng(SEED)
        params, operands, cpu_fn = next(batch_norm_cases("float32", rng, (6, 3, 5)))
        call = NpuCall("batch_norm_reduce_backward", **params)
        standin_library().jaxAclnnTestingRefuseNextExecute(ACLNN_ERR_RUNTIME_ERROR)
        with pytest.raises(FfiError) as e:
            call(device, *operands)
        message = e.value.message
        for part in ("aclnnBatchNormReduceBackward failed", str(ACLNN_ERR_RUNTIME_ERROR),
                     "ACLNN_ERR_RUNTIME_ERROR", "refused at the request of a test"):
            assert part in message, message
        mem = device.memory_stats()
        assert mem["allocations"] == mem["frees"] == 1 and mem["live"] == 0, mem
        # Only the call site's own executor (with reuse) outlives the call ...
        assert live_counts()[1] == (1 if reuse else 0), live_counts()
        if not reuse:
            assert live_counts() == (0, 0), live_counts()
        # ... and the call site still works.
        npu_out, cpu_out = run_both("batch_norm_reduce_backward", params, operands, cpu_fn,
                                    device, call)
        for a, b in zip(npu_out, cpu_out, strict=True):
            assert_same_bits(a, b)
        call.free()
        free_compiled_programs()
        assert live_counts() == (0, 0), live_counts()
    finally:
        aclnn.set_executor_reuse(True)


def _check_workspace_allocation_failure(reuse: bool) -> None:
    free_compiled_programs()
    aclnn.set_executor_reuse(reuse)
    try:
        device, rng = rt.Device(), np.random.default_rng(SEED)
        params, operands, _ = next(batch_norm_cases("float32", rng, (6, 3, 5)))
        call = NpuCall("batch_norm_reduce_backward", **params)
        device.set_memory_limit(0)
        with pytest.raises(FfiError) as e:
            call(device, *operands)
        assert e.value.code == "RESOURCE_EXHAUSTED", e.value
        assert "aclnnBatchNormReduceBackward: cannot allocate a workspace of" in e.value.message
        assert live_counts()[1] == (1 if reuse else 0), live_counts()
        device.set_memory_limit(None)
        call(device, *operands)
        call.free()
        assert live_counts() == (0, 0), live_counts()
    finally:
        aclnn.set_executor_reuse(True)


def _check_two_call_sites_two_threads() -> None:
    free_compiled_programs()
    rng = np.random.default_rng(SEED)
    steps = 40
    swish = NpuCall("swish_backward", beta=1.5)
    params, _, _ = next(batch_norm_cases("float32", rng, (8, 4, 6)))
    bn = NpuCall("batch_norm_reduce_backward", **params)
    work = []  # per step: operands and CPU results of both operators
    for _ in range(8):
        _, bn_operands, bn_cpu = next(batch_norm_cases("float32", rng, (8, 4, 6)))
        sw = [array(rng.uniform(-2, 2, (64,)), "float32") for _ in range(2)]
        work.append((sw, [np.asarray(aclnn.swish_backward(*sw, beta=1.5))],
                     bn_operands, [np.asarray(o) for o in jax.jit(bn_cpu)(*bn_operands)]))
    free_compiled_programs()
    devices = [rt.Device(), rt.Device()]
    barrier = threading.Barrier(2)
    failures = []

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for step in range(steps):
                sw, sw_expected, bn_operands, bn_expected = work[(step + 3 * t) % len(work)]
                # both threads call both call sites: concurrent calls of one
                # site, and each thread's stream reaches aclnn (checked by NpuCall)
                for call, operands, expected in ((swish, sw, sw_expected),
                                                 (bn, bn_operands, bn_expected)):
                    out = call(devices[t], *operands)
                    for a, b in zip(out, expected, strict=True):
                        assert_same_bits(a, b)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failures.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    assert devices[0].stream != devices[1].stream
    for d in devices:
        mem = d.memory_stats()
        assert mem["allocations"] == steps and mem["live"] == 0, mem
    swish.free()
    bn.free()
    assert live_counts() == (0, 0), live_counts()


def _check_first_npu_call_loads_cann() -> None:
    assert not cann_loaded()  # importing jax_aclnn loads no CANN
    call = NpuCall("logit_grad", eps=-1.0)
    assert not cann_loaded()  # nor does instantiation
    x = array(np.linspace(0.1, 0.9, 8), "float32")
    call(rt.Device(), x, x)
    assert cann_loaded()
    lib64 = str(Path(os.environ["ASCEND_HOME_PATH"]) / "lib64")
    assert aclnn.load_cann() == lib64
    assert aclnn.runtime_stats()["provider"] == "host"  # the CPU keeps the host provider
    call.free()


def _check_npu_calls_fail_without_cann() -> str:
    call = NpuCall("logit_grad", eps=-1.0)  # importing and instantiating work without CANN
    x = array(np.linspace(0.1, 0.9, 8), "float32")
    messages = []
    for _ in range(2):  # every call reports it, none loads anything
        with pytest.raises(FfiError) as e:
            call(rt.Device(), x, x)
        assert e.value.code == "FAILED_PRECONDITION", e.value
        messages.append(e.value.message)
    assert messages[0] == messages[1]
    call.free()
    return messages[0]


def _check_declared_operator_on_npu() -> None:
    """A declared operator (aclnnSoftplusBackward) on the NPU handler: the test
    provider library (csrc/testing/test_provider.cc) implements it on top of
    the stand-in CANN; the result equals PyTorch's CPU kernel, and the call
    site's executor is reused."""
    import torch

    from declared_operators import LIBRARY, SOFTPLUS_BACKWARD, softplus_backward_reference

    aclnn.declare(SOFTPLUS_BACKWARD, softplus_backward_reference, name="softplus_backward_npu",
                  library=LIBRARY, elementwise=True)
    device, rng = rt.Device(), np.random.default_rng(SEED)
    call = NpuCall("softplus_backward_npu", attrs=(("beta", 0.5), ("threshold", 2.0)), absent=(),
                   list_sizes=())
    aclnn.reset_runtime_stats()
    for step in range(3):
        x = rng.normal(0, 10, (7, 5)).astype(np.float32)
        g = rng.normal(0, 1, x.shape).astype(np.float32)
        (out,) = call(device, g, x)
        expected = torch.ops.aten.softplus_backward(torch.from_numpy(g), torch.from_numpy(x), 0.5,
                                                    2.0).numpy()
        np.testing.assert_allclose(out, expected, rtol=2e-6, atol=1e-7)
    calls = aclnn.runtime_stats()["calls"]["aclnnSoftplusBackward"]
    assert calls == {"get_workspace_size": 1, "execute": 3}, calls
    call.free()


# ----- the tests ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", OPERATORS)
def test_operator_on_npu_handler_equals_cpu_path(npu, name, dtype):
    checked = npu.run(_check_operator_matches_cpu_path, name, dtype)
    assert checked >= (32 if name == "batch_norm_reduce_backward" else 2)


def test_declared_operator_on_the_npu_handler_equals_torch(npu):
    from declared_operators import LIBRARY

    pytest.importorskip("torch")  # (not in .ci/aarch64's emulated venv)
    if not LIBRARY.exists():
        pytest.skip("the test provider is built with JAX_ACLNN_TESTING=ON")
    npu.run(_check_declared_operator_on_npu)


def test_workspace_comes_from_the_scratch_allocator_and_is_freed(npu):
    npu.run(_check_workspace_from_scratch_allocator)


# The handlers lay the state's arguments out for the FFI API version the
# runtime speaks: each that jax_aclnn supports (those that run the build: a
# build without pip's isolation, against a newer jaxlib's headers, runs on
# runtimes of that version on only).
@pytest.mark.parametrize("api_minor_version", ffi_api_minor_versions())
def test_executor_reuse_steady_state_and_moved_buffers(npu, api_minor_version):
    npu.run(_check_executor_reuse_steady_state, api_minor_version)


@pytest.mark.parametrize("api_minor_version", ffi_api_minor_versions())
def test_state_destroyed_when_the_call_site_is_freed(npu, api_minor_version):
    npu.run(_check_state_destroyed_with_call_site, api_minor_version)


@pytest.mark.parametrize("reuse", [True, False])
def test_first_phase_refusal_is_an_ffi_error_and_leaves_nothing(npu, reuse):
    npu.run(_check_first_phase_refusal, reuse)


@pytest.mark.parametrize("reuse", [True, False])
def test_second_phase_refusal_is_an_ffi_error_and_leaves_nothing(npu, reuse):
    npu.run(_check_second_phase_refusal, reuse)


@pytest.mark.parametrize("reuse", [True, False])
def test_workspace_allocation_failure_is_an_ffi_error(npu, reuse):
    npu.run(_check_workspace_allocation_failure, reuse)


def test_two_call_sites_two_threads(npu):
    npu.run(_check_two_call_sites_two_threads)


def test_first_npu_call_loads_cann(standin, fresh_process):
    fresh_process({"ASCEND_HOME_PATH": str(standin)}).run(_check_first_npu_call_loads_cann)


def test_cann_missing_is_reported_by_the_first_npu_call(standin, fresh_process, tmp_path):
    home = tmp_path / "no-cann"
    message = fresh_process({"ASCEND_HOME_PATH": str(home)}).run(_check_npu_calls_fail_without_cann)
    assert "CANN aclnn libraries not found" in message, message
    for where in (home / "lib64", home / "lib",
                  Path("/usr/local/Ascend/ascend-toolkit/latest/lib64")):
        assert f"{where} (missing libascendcl.so, libnnopbase.so, libopapi.so)" in message, message


def test_cann_without_the_aclnn_abi_is_reported_by_the_first_npu_call(standin, fresh_process,
                                                                      tmp_path):
    lib64 = tmp_path / "not-cann" / "lib64"
    lib64.mkdir(parents=True)
    for name in ("libopapi.so", "libnnopbase.so", "libascendcl.so"):  # loadable, no aclnn
        (lib64 / name).symlink_to(rt.__file__)
    message = fresh_process({"ASCEND_HOME_PATH": str(lib64.parent)}).run(
        _check_npu_calls_fail_without_cann)
    assert message == f"the CANN libraries in {lib64} do not export aclCreateTensor", message
