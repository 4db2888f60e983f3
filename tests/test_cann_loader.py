"""The NPU loader path, exercised against the host provider: CANN is looked
up where ``load_cann`` documents, and a directory laid out like a CANN install (holding
the host provider under CANN's library names) serves the operators end to
end through the same loader and handlers."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jax_aclnn as aclnn
from jax_aclnn import _loading, _runtime


def test_missing_cann_names_every_location_and_library(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "nowhere"))
    with pytest.raises(RuntimeError) as e:
        aclnn.load_cann(tmp_path / "empty")
    msg = str(e.value)
    assert str(tmp_path / "empty" / "lib64") in msg and str(tmp_path / "empty" / "lib") in msg
    assert "libopapi.so" in msg and "libnnopbase.so" in msg and "libascendcl.so" in msg
    assert _runtime.default_cann_roots()[0] == str(tmp_path / "nowhere")
    assert _runtime.default_cann_roots()[-1] == "/usr/local/Ascend/ascend-toolkit/latest"


def test_operators_through_the_cann_loader(tmp_path):
    lib64 = tmp_path / "lib64"
    lib64.mkdir()
    for name in ("libopapi.so", "libnnopbase.so", "libascendcl.so"):
        (lib64 / name).symlink_to(_loading.HOST_PROVIDER_LIBRARY)
    assert aclnn.load_cann(tmp_path) == str(lib64)
    _loading._aclnn_ffi.route_cpu_through_cann(True)
    try:
        assert aclnn.runtime_stats()["provider"] == str(lib64)
        x = np.linspace(0.1, 0.9, 12, dtype=np.float32).reshape(3, 4)
        out = jax.jit(lambda x: aclnn.logit_grad(x, x * 0 + 1))(x)
        np.testing.assert_allclose(np.asarray(out), 1 / (x * (1 - x)), rtol=1e-6)
        sums = aclnn.batch_norm_reduce_backward(x, x, x[0, :1].repeat(4), np.ones(4, np.float32), None)
        np.testing.assert_allclose(np.asarray(sums[0]), x.sum(0), rtol=1e-6)
    finally:
        _loading._aclnn_ffi.route_cpu_through_cann(False)
    assert aclnn.runtime_stats()["provider"] == "host"


def test_executor_reuse_steady_state_runs_execute_only():
    from conftest import free_compiled_programs

    free_compiled_programs()
    step = jax.jit(lambda x: aclnn.swish_backward(x, x) + aclnn.hardshrink_backward(x, x))
    x = np.ones((8, 8), np.float32)
    step(x).block_until_ready()  # warm-up: the call sites build their executors
    aclnn.reset_runtime_stats()
    for i in range(5):
        step(x * i).block_until_ready()
    calls = aclnn.runtime_stats()["calls"]
    for op in ("aclnnSwishBackward", "aclnnHardshrinkBackward"):
        assert calls[op] == {"get_workspace_size": 0, "execute": 5}, calls[op]
    assert aclnn.runtime_stats()["live_executors"] == 2
    del step
    free_compiled_programs()
    stats = aclnn.runtime_stats()
    assert stats["live_executors"] == 0 and stats["live_tensors"] == 0


def test_executor_reuse_off_runs_both_phases_every_step():
    from conftest import free_compiled_programs

    free_compiled_programs()
    step = jax.jit(lambda x: aclnn.swish_backward(x, x))
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    expected = np.asarray(step(x))
    previous = aclnn.set_executor_reuse(False)
    try:
        aclnn.reset_runtime_stats()
        for _ in range(3):
            np.testing.assert_array_equal(np.asarray(step(x)), expected)
        assert aclnn.runtime_stats()["calls"]["aclnnSwishBackward"] == {
            "get_workspace_size": 3, "execute": 3}
    finally:
        assert aclnn.set_executor_reuse(previous) is False
    del step
    free_compiled_programs()
    assert aclnn.runtime_stats()["live_executors"] == 0


def cann_layout(root):
    """A directory laid out like a CANN install, holding the host provider."""
    (root / "lib64").mkdir(parents=True)
    for name in ("libopapi.so", "libnnopbase.so", "libascendcl.so"):
        (root / "lib64" / name).symlink_to(_loading.HOST_PROVIDER_LIBRARY)


@pytest.mark.parametrize("path", ["", ".", "relative", "lib64/.."])
def test_load_cann_refuses_relative_paths_before_opening_anything(tmp_path, monkeypatch, path):
    # The working directory (and "relative" in it) looks like a CANN install:
    # a relative path must not reach it.
    cann_layout(tmp_path)
    cann_layout(tmp_path / "relative")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="must be absolute"):
        aclnn.load_cann(path)
    with pytest.raises(ValueError, match="must be absolute"):
        _loading._aclnn_ffi.load_cann(path)  # the C++ loader checks it too


def test_load_cann_refuses_nul_bytes(tmp_path):
    cann_layout(tmp_path)
    for loader in (aclnn.load_cann, _loading._aclnn_ffi.load_cann):
        with pytest.raises(ValueError, match="NUL"):
            loader(f"{tmp_path}\0/ignored")


def test_npu_platform_naming_the_cpu_is_a_clear_error(monkeypatch):
    x = np.ones(3, np.float32)
    for value in ("cpu", "Host"):
        monkeypatch.setenv("JAX_ACLNN_NPU_PLATFORM", value)
        with pytest.raises(ValueError, match=f"JAX_ACLNN_NPU_PLATFORM='{value}' names JAX's CPU"):
            jax.jit(lambda x: aclnn.swish_backward(x, x)).lower(x)
    monkeypatch.delenv("JAX_ACLNN_NPU_PLATFORM")
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x: aclnn.swish_backward(x, x))(x)),
                               np.asarray(aclnn.swish_backward(x, x)))
