"""The host provider holds CANN's contract at the C ABI: layouts outside
their storage, overflowing sizes, null addresses and stray stream pointers
are refused or ignored, never followed."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import jax_aclnn as aclnn
from host_abi import (ACLNN_ERR_INNER_NULLPTR, ACLNN_ERR_PARAM_INVALID, LIB, Strided,
                      create_tensor, error_message)

F32 = 0
DATA = ctypes.c_void_p(0x1000)  # never read: every call below is refused or only checked


@pytest.mark.parametrize("dims, strides, offset, storage, message", [
    ((2, 3), (3, -1), 2, 6, "stride -1"),
    ((2, 3), (3, 1), 1, 6, "outside its storage"),          # one element past the end
    ((2, 3), (4, 1), 0, 6, "outside its storage"),          # a row stride past the storage
    ((4,), (2,), 0, 4, "outside its storage"),              # a channel vector with stride 2
    ((2, 3), (3, 1), 2**62, 6, "outside its storage"),      # a huge offset
    ((2, 3), (3, 1), -1, 6, "offset -1 is negative"),
    ((4, 3), (2**62, 1), 0, 2**40, "overflows"),            # the extent overflows int64
    ((2**32, 2**32), None, 0, 6, "overflows"),              # the element count overflows
    ((2,), None, 0, (2**62, 4), "overflows"),               # storage bytes overflow
    ((-1, 3), None, 0, 6, "size -1"),
])
def test_create_tensor_refuses_layouts_outside_storage(dims, strides, offset, storage, message):
    storage_dims = storage if isinstance(storage, tuple) else (storage,)
    assert create_tensor(dims, F32, strides, offset, storage_dims, DATA) is None
    assert message in error_message()


@pytest.mark.parametrize("dims, strides, offset, storage", [
    ((2, 3), (3, 1), 0, 6),
    ((2, 3), (1, 2), 0, 6),       # transposed
    ((2, 3), (0, 1), 3, 6),       # broadcast rows, offset to the last row
    ((0, 3), (3, 1), 6, 6),       # empty: the offset may be the storage's end
    ((), None, 5, 6),             # a scalar at the last element
])
def test_create_tensor_accepts_layouts_inside_storage(dims, strides, offset, storage):
    handle = create_tensor(dims, F32, strides, offset, (storage,), DATA)
    assert handle, error_message()
    LIB.aclDestroyTensor(handle)


def _repeatable_logit_grad():
    x = Strided(np.full(6, 0.25, np.float32), (2, 3), (3, 1), 0)
    dy = Strided(np.ones(6, np.float32), (2, 3), (3, 1), 0)
    out = Strided(np.zeros(6, np.float32), (2, 3), (3, 1), 0)
    ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
    assert LIB.aclnnLogitGradGetWorkspaceSize(x.handle, dy.handle, -1.0, out.handle,
                                              ctypes.byref(ws), ctypes.byref(ex)) == 0
    assert LIB.aclSetAclOpExecutorRepeatable(ex) == 0
    return (x, dy, out), ex


def test_set_tensor_addr_refuses_a_null_address_and_a_foreign_tensor():
    (x, dy, out), ex = _repeatable_logit_grad()
    try:
        assert LIB.aclSetInputTensorAddr(ex, 0, x.handle, None) == ACLNN_ERR_INNER_NULLPTR
        assert "addr is null" in error_message()
        assert LIB.aclSetOutputTensorAddr(ex, 0, out.handle, None) == ACLNN_ERR_INNER_NULLPTR
        assert LIB.aclSetInputTensorAddr(ex, 0, dy.handle, dy.storage.ctypes.data) == \
            ACLNN_ERR_PARAM_INVALID  # dy is input 1, not input 0
        assert "is not aclnnLogitGrad input tensor 0" in error_message()
        stray = ctypes.c_void_p(0x10)  # compared, never read
        assert LIB.aclSetOutputTensorAddr(ex, 0, stray, out.storage.ctypes.data) == \
            ACLNN_ERR_PARAM_INVALID
        # the executor still runs, on the buffers it had
        assert LIB.aclnnLogitGrad(None, 0, ex, None) == 0
        np.testing.assert_allclose(out.storage, 1 / (0.25 * 0.75), rtol=1e-6)
    finally:
        assert LIB.aclDestroyAclOpExecutor(ex) == 0


# A stray stream pointer crashed the old provider, so the calls run in a
# child process: a crash fails the test instead of ending the session.
_STRAY_STREAMS = textwrap.dedent(
    """
    import ctypes, mmap, numpy as np
    from host_abi import LIB, Strided
    page = mmap.mmap(-1, 4096)
    view = ctypes.c_char.from_buffer(page)
    unmapped = ctypes.addressof(view)
    del view
    page.close()  # `unmapped` now points at no mapping
    # A look-alike host stream on the heap: the magic tag, 8 threads and a
    # parallel_for that would crash if it were called.
    look_alike = np.array([0x4E4C43414A58414A, 8, 0, 0xDEAD], np.uint64)
    streams = [0x10, 0xDEAD0000, unmapped, 2**63 - 8, 0xFFFFFFFFFFFFFFF8,
               look_alike.ctypes.data]
    for stream in streams:
        x = Strided(np.linspace(-3, 3, 6, dtype=np.float32), (2, 3), (3, 1), 0)
        g = Strided(np.ones(6, np.float32), (2, 3), (3, 1), 0)
        out = Strided(np.zeros(6, np.float32), (2, 3), (3, 1), 0)
        ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
        assert LIB.aclnnSwishBackwardGetWorkspaceSize(g.handle, x.handle, None, out.handle,
                                                      ctypes.byref(ws), ctypes.byref(ex)) == 0
        assert LIB.aclnnSwishBackward(None, 0, ex, ctypes.c_void_p(stream)) == 0
        s = 1 / (1 + np.exp(-x.values()))
        np.testing.assert_allclose(out.values(), s * (1 + x.values() * (1 - s)), rtol=1e-5)
    print("ok")
    """
)


def test_stray_stream_pointers_are_never_followed():
    tests = str(Path(__file__).resolve().parent)
    package_root = str(Path(aclnn.__file__).resolve().parents[1])
    # The caller's path too: where the compiled modules are when they are not
    # installed (.ci/new-operator builds them into a folder of their own).
    path = [tests, package_root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    child = subprocess.run([sys.executable, "-c", _STRAY_STREAMS], env=env, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0 and child.stdout.strip() == "ok", (
        child.returncode, child.stdout[-2000:], child.stderr[-4000:])


def test_swish_of_nan_and_inf_is_nan_without_undefined_behaviour():
    """ExpF once converted NaN to int (undefined; UBSan in .ci/sanitize)."""
    x = Strided(np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, 1.0], np.float32), (6,), (1,), 0)
    g = Strided(np.ones(6, np.float32), (6,), (1,), 0)
    out = Strided(np.zeros(6, np.float32), (6,), (1,), 0)
    ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
    assert LIB.aclnnSwishBackwardGetWorkspaceSize(g.handle, x.handle, None, out.handle,
                                                  ctypes.byref(ws), ctypes.byref(ex)) == 0
    assert LIB.aclnnSwishBackward(None, 0, ex, None) == 0
    assert np.isnan(out.storage[:4]).all()
    s = 1 / (1 + np.exp(-1.0))
    np.testing.assert_allclose(out.storage[4:], [0.5, s * (2 - s)], rtol=1e-6)


@pytest.mark.parametrize("shape", [(16, 4 << 20), (1, 1 << 24), (4096, 3, 5), (8, 300, 70000)])
def test_batch_norm_reduce_workspace_is_bounded(shape):
    """Once ~280 bytes per channel (1.1 GiB at C = 4M); now a bounded window
    (RSS figures: ``python -m jax_aclnn bench --bn-memory-channels 4M``)."""
    c = shape[1]
    x = create_tensor(shape, F32, None, 0, shape, DATA)  # never read: only the first phase runs
    vec = [create_tensor((c,), F32, None, 0, (c,), DATA) for _ in range(7)]
    ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
    try:
        assert LIB.aclnnBatchNormReduceBackwardGetWorkspaceSize(
            x, x, vec[0], vec[1], vec[2], True, True, True, *vec[3:], ctypes.byref(ws),
            ctypes.byref(ex)) == 0, error_message()
        assert ws.value <= 5 << 20, ws.value
        assert LIB.aclSetAclOpExecutorRepeatable(ex) == 0  # so that it can be destroyed unrun
        assert LIB.aclDestroyAclOpExecutor(ex) == 0
    finally:
        for t in [x, *vec]:
            LIB.aclDestroyTensor(t)


def test_the_abi_helpers_import_without_optax():
    """host_abi (and so the host-ABI tests qemu's venv runs: the wheel, pytest
    and hypothesis alone) imports where optax is not installed; AdamW's C
    signature is then left unset."""
    script = ("import sys; sys.modules['optax'] = None; import host_abi; "
              "print(host_abi.LIB.aclnnSmoothL1LossBackwardGetWorkspaceSize.argtypes is not None)")
    tests = Path(__file__).parent
    result = subprocess.run([sys.executable, "-c", script], cwd=tests, capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                [str(tests)] + sys.path)), timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
