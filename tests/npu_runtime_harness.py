"""Harness of tests/test_npu_runtime.py: the process its test bodies run in,
the CANN stand-in, and the NPU-platform handlers called through the test-only
XLA FFI runtime (``jax_aclnn._ffi_testing``) next to the CPU path."""

from __future__ import annotations

import concurrent.futures
import ctypes
import itertools
import multiprocessing
import os
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import cases as table
import jax_aclnn as aclnn
from jax_aclnn import _loading, _registration
from jax_aclnn.ops import primitive

try:
    from jax_aclnn import _ffi_testing as rt
except ImportError:  # reported by the tests' fixture, as a failure of each test
    rt = None

CANN_LIBRARIES = ("libopapi.so", "libnnopbase.so", "libascendcl.so")


def _set_environment(env: dict[str, str]) -> None:
    os.environ.update(env)


class NpuProcess:
    """A spawned Python process with extra environment variables that runs
    module-level functions (its exceptions are re-raised here)."""

    def __init__(self, env: dict[str, str]):
        self._env = env
        self._pool = self._start()

    def _start(self) -> concurrent.futures.ProcessPoolExecutor:
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn"),
            initializer=_set_environment, initargs=(self._env,))

    def run(self, fn, *args):
        try:
            return self._pool.submit(fn, *args).result(timeout=600)
        except concurrent.futures.process.BrokenProcessPool:
            self._pool = self._start()  # a crash fails this test only
            raise

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def make_cann_standin(root: Path) -> Path:
    """A CANN toolkit root whose lib64 holds the host provider under CANN's
    names (one copy, so that it is a library of its own, not the CPU's)."""
    lib64 = root / "lib64"
    lib64.mkdir(parents=True)
    shutil.copy(_loading.HOST_PROVIDER_LIBRARY, lib64 / CANN_LIBRARIES[0])
    for name in CANN_LIBRARIES[1:]:
        (lib64 / name).symlink_to(CANN_LIBRARIES[0])
    return root


# ----- in the NPU process -----


class FfiError(Exception):
    """An error a handler returned to the runtime: its code name and message."""

    def __init__(self, code: str, message: str):
        super().__init__(code, message)
        self.code, self.message = code, message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


_handlers: dict[tuple[str, int], object] = {}

#: The FFI API versions (0.minor) the test runtime speaks: 0.1 as jaxlib 0.7
#: (whose State_Set takes the state's deleter), 0.2 as jaxlib 0.8 and 0.9.0,
#: 0.3 as jaxlib 0.9.1 on (whose State_Get/Set arguments have a `stage`).
FFI_API_MINOR_VERSIONS = (1, 2, 3)
#: The FFI API version of the headers the handlers were built against: 0.1
#: in pip's isolated build (the floor jaxlib's), the environment's jaxlib's
#: in a build without isolation. A runtime of an older version refuses them
#: (as XLA does), and `import jax_aclnn` refuses such a jaxlib.
BUILD_FFI_API = tuple(_loading._aclnn_ffi.ffi_api_version())


def ffi_api_minor_versions():
    """FFI_API_MINOR_VERSIONS as pytest parameters, those older than the
    build's FFI API version skipped with the reason."""
    import pytest

    built = ".".join(map(str, BUILD_FFI_API))
    return [pytest.param(v, marks=pytest.mark.skipif(
        (0, v) < BUILD_FFI_API,
        reason=f"the handlers are built against XLA FFI API {built} headers (a build without "
               f"pip's build isolation), which an FFI API 0.{v} runtime refuses; import refuses "
               "its jaxlib")) for v in FFI_API_MINOR_VERSIONS]


def npu_handler(target: str, api_minor_version: int = 3):
    """The handler registered for the NPU platform, registered with the test
    runtime of FFI API 0.``api_minor_version`` after its state type, as XLA
    requires."""
    key = (target, api_minor_version)
    if key not in _handlers:
        type_id = rt.register_type(_registration.STATE_TYPE_NAME, _loading._aclnn_ffi.state_type())
        handler = rt.Handler(_loading._aclnn_ffi.registrations()["npu"], api_minor_version)
        assert handler.api_version == (0, api_minor_version)
        # what its instantiate stage declares (FFI API 0.1's metadata has no field for it)
        assert handler.state_type_id == (type_id if api_minor_version >= 2 else 0)
        _handlers[key] = handler
    return _handlers[key]


def buffer(a: np.ndarray) -> tuple[int, str, list[int]]:
    return (a.ctypes.data, a.dtype.name, list(a.shape))


def standin_library() -> ctypes.CDLL:
    """The stand-in CANN library: the instance the handlers load. Where no
    NPU call of this process has loaded it yet (a test run alone, or the
    first of its file in a pytest-xdist worker), it is loaded here, and the
    handlers' first call gets this one (dlopen returns a loaded library)."""
    path = Path(os.environ["ASCEND_HOME_PATH"]) / "lib64" / CANN_LIBRARIES[0]
    lib = ctypes.CDLL(str(path))
    lib.jaxAclnnTestingLastExecute.argtypes = [ctypes.POINTER(ctypes.c_void_p)] * 2 + [
        ctypes.POINTER(ctypes.c_uint64)]
    lib.jaxAclnnTestingRefuseNextExecute.argtypes = [ctypes.c_int32]
    return lib


def cann_loaded() -> bool:
    try:
        ctypes.CDLL(str(Path(os.environ["ASCEND_HOME_PATH"]) / "lib64" / CANN_LIBRARIES[0]),
                    mode=os.RTLD_NOLOAD)
    except OSError:
        return False
    return True


def last_execute() -> tuple[int, int, int]:
    """(stream, workspace, workspace size) of this thread's last aclnnXxx call."""
    stream, workspace, size = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64()
    standin_library().jaxAclnnTestingLastExecute(stream, workspace, size)
    return stream.value or 0, workspace.value or 0, size.value


def runtime_attribute(value):
    """A custom call's attribute as the test runtime takes it: a string (str
    or bytes, NUL bytes included) or a 1-D numpy array (of its dtype) as it
    is, a scalar as (dtype name, value)."""
    if isinstance(value, (str, bytes)) or (isinstance(value, np.ndarray) and value.ndim == 1):
        return value
    scalar = np.asarray(value)
    assert scalar.ndim == 0, f"an attribute is a scalar, a 1-D array or a string, not {value!r}"
    return scalar.dtype.name, scalar.item()


class NpuCall:
    """One custom call site of an operator on the test runtime (of FFI API
    0.``api_minor_version``)."""

    def __init__(self, name: str, *, api_minor_version: int = 3, **params):
        self.op = primitive(name)
        self.params = params
        attrs = {k: runtime_attribute(v) for k, v in self.op.ffi_attributes(**params).items()}
        self.site = npu_handler(self.op.target, api_minor_version).instantiate(attrs)

    def __call__(self, device, *args: np.ndarray) -> list[np.ndarray]:
        out = self.op.abstract_eval(*args, **self.params)
        out = out if self.op.multiple_results else [out]
        results = [np.full(o.shape, np.nan, o.dtype) for o in out]  # must be overwritten
        error = self.site.execute(device, [buffer(a) for a in args], [buffer(r) for r in results])
        if error is not None:
            raise FfiError(*error)
        if self.op.library:  # a declared operator's library runs the second phase
            lib = ctypes.CDLL(self.op.library)
            lib.jaxAclnnTestLastStream.restype = ctypes.c_void_p
            stream = lib.jaxAclnnTestLastStream() or 0
        else:
            stream, _, _ = last_execute()
        assert stream == device.stream, (hex(stream), hex(device.stream))
        return results

    def free(self) -> None:
        self.site.free()


def array(values, dtype) -> np.ndarray:
    """float64 values rounded to ``dtype``, as numpy (bfloat16 via ml_dtypes)."""
    return np.asarray(jnp.asarray(np.asarray(values, np.float32)).astype(dtype))


def assert_same_bits(npu_out, cpu_out) -> None:
    cpu_out = np.asarray(cpu_out)
    assert npu_out.shape == cpu_out.shape and npu_out.dtype == cpu_out.dtype, (npu_out, cpu_out)
    assert not np.isnan(cpu_out.astype(np.float32)).any()
    bits = f"uint{8 * npu_out.dtype.itemsize}"
    np.testing.assert_array_equal(npu_out.view(bits), cpu_out.view(bits))


def live_counts() -> tuple[int, int]:
    stats = aclnn.runtime_stats()
    return stats["live_tensors"], stats["live_executors"]


def cases(name: str, dtype: str, rng: np.random.Generator):
    """(primitive params, operands, the public function's call on the CPU):
    the table's cases of the operator (tests/cases.py); for batch-norm
    reduce, every mask combination with and without a weight."""
    if name == "batch_norm_reduce_backward":
        yield from batch_norm_cases(dtype, rng, (6, 5, 7))
        return
    for case in table.of(name):
        operands = [np.asarray(a) for a in case.operands(rng, dtype)]
        yield case.primitive_params(*operands), operands, case.call


def batch_norm_cases(dtype, rng, shape):
    """Every mask combination, with and without a weight."""
    c = shape[1]
    g, x = (array(rng.uniform(-2, 2, shape), dtype) for _ in "gx")
    m, s, w = (array(rng.uniform(lo, hi, c), dtype) for lo, hi in ((-0.5, 0.5), (0.5, 2), (-1, 1)))
    for has_weight, *masks in itertools.product((True, False), repeat=4):
        flags = dict(zip(("input_g", "weight_g", "bias_g"), masks))
        weight = w if has_weight else np.zeros((0,), w.dtype)

        def cpu(g, x, m, s, weight, flags=flags, has_weight=has_weight):
            out = aclnn.batch_norm_reduce_backward(g, x, m, s, weight if has_weight else None,
                                                   **flags)
            return [jnp.zeros((0,), x.dtype) if o is None else o for o in out]

        yield dict(has_weight=has_weight, **flags), [g, x, m, s, weight], cpu


def run_both(name, params, operands, cpu_fn, device, call=None):
    """The NPU handler's results next to the CPU path's, on the same operands."""
    call = call or NpuCall(name, **params)
    npu_out = call(device, *operands)
    cpu_out = jax.jit(cpu_fn)(*operands)
    return npu_out, cpu_out if isinstance(cpu_out, (list, tuple)) else [cpu_out]

