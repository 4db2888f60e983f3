"""The host provider's aclnn C ABI through ctypes, for tests that call it
directly (as CANN's callers do) rather than through the FFI handlers."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import jax.numpy as jnp
import numpy as np

from jax_aclnn import _loading, _prototype, nn  # noqa: F401  (declare the catalogue)

try:  # AdamW's declaration needs the optax package (the cli and test extras)
    from jax_aclnn import optax  # noqa: F401
except ImportError:  # a venv with the package alone (qemu's): its C signature stays unset
    pass
from jax_aclnn._loading import _aclnn_ffi
from jax_aclnn._primitive import OPERATORS

ACLNN_SUCCESS = 0
ACLNN_ERR_PARAM_NULLPTR = 161001
ACLNN_ERR_PARAM_INVALID = 161002
ACLNN_ERR_INNER_NULLPTR = 561103

#: numpy dtype -> aclDataType
ACL_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(jnp.bfloat16): 27}

_p = ctypes.c_void_p
_i64p = ctypes.POINTER(ctypes.c_int64)
_u64p = ctypes.POINTER(ctypes.c_uint64)
_SIGNATURES = {
    "aclCreateTensor": (_p, [_i64p, ctypes.c_uint64, ctypes.c_int, _i64p, ctypes.c_int64,
                             ctypes.c_int, _i64p, ctypes.c_uint64, _p]),
    "aclDestroyTensor": (ctypes.c_int32, [_p]),
    "aclCreateScalar": (_p, [_p, ctypes.c_int]),
    "aclDestroyScalar": (ctypes.c_int32, [_p]),
    "aclGetRecentErrMsg": (ctypes.c_char_p, []),
    "aclSetAclOpExecutorRepeatable": (ctypes.c_int32, [_p]),
    "aclDestroyAclOpExecutor": (ctypes.c_int32, [_p]),
    "aclSetInputTensorAddr": (ctypes.c_int32, [_p, ctypes.c_size_t, _p, _p]),
    "aclSetOutputTensorAddr": (ctypes.c_int32, [_p, ctypes.c_size_t, _p, _p]),
    "aclCreateTensorList": (_p, [ctypes.POINTER(_p), ctypes.c_uint64]),
    "aclDestroyTensorList": (ctypes.c_int32, [_p]),
}
#: The ctypes type of each kind of first-phase parameter (jax_aclnn._prototype).
_CTYPES = {"bool": ctypes.c_bool, "int64": ctypes.c_int64, "double": ctypes.c_double,
           "float": ctypes.c_float, "string": ctypes.c_char_p}
#: The built-in operators' prototypes (the operator list) and the catalogue's
#: (jax_aclnn.nn declares them; the host provider implements some).
_PROTOTYPES = [_prototype.parse(text) for text in _aclnn_ffi.operator_prototypes().values()]
_PROTOTYPES += [op.prototype for op in OPERATORS.values() if getattr(op, "prototype", None)]
for _proto in _PROTOTYPES:
    # the first phase from the prototype, then workspaceSize and executor;
    # the second phase is aclnnXxx(workspace, size, executor, stream)
    _SIGNATURES[_proto.first_phase] = (
        ctypes.c_int32, [_CTYPES.get(p.kind, _p) for p in _proto.parameters] + [_u64p, _p])
    _SIGNATURES[_proto.name] = (ctypes.c_int32, [_p, ctypes.c_uint64, _p, _p])


def load(path=_loading.HOST_PROVIDER_LIBRARY) -> ctypes.CDLL:
    """The provider at ``path`` (the host provider; the test provider,
    tests/declared_operators.py's LIBRARY) with the ABI's signatures set."""
    lib = ctypes.CDLL(str(path))
    for name, (restype, argtypes) in _SIGNATURES.items():
        if not hasattr(lib, name):  # a catalogue operator the host provider lacks
            continue
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


LIB = load()


def error_message() -> str:
    return LIB.aclGetRecentErrMsg().decode()


def int64s(values) -> ctypes.Array:
    values = [int(v) for v in values]
    return (ctypes.c_int64 * max(1, len(values)))(*values)


def create_tensor(dims, dtype_code, strides, offset, storage_dims, data) -> int | None:
    """aclCreateTensor with Python sequences (strides None: a null pointer)."""
    return LIB.aclCreateTensor(int64s(dims), len(dims), dtype_code,
                               None if strides is None else int64s(strides), offset, 2,
                               int64s(storage_dims), len(storage_dims), data)


@dataclass
class Strided:
    """A strided view into a flat numpy storage array, as an aclTensor."""

    storage: np.ndarray  # 1-D
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    offset: int
    handle: int | None = field(default=None, init=False)

    def __post_init__(self):
        self.handle = create_tensor(self.shape, ACL_DTYPES[self.storage.dtype], self.strides,
                                    self.offset, (self.storage.size,), self.storage.ctypes.data)
        assert self.handle, error_message()

    def values(self) -> np.ndarray:
        """The view's elements (a copy)."""
        item = self.storage.itemsize
        return np.lib.stride_tricks.as_strided(
            self.storage[self.offset:], self.shape, [s * item for s in self.strides]).copy()

    def retarget(self, storage: np.ndarray) -> None:
        """Points the view at another storage of the same size (the executor
        must then be told with aclSetInput/OutputTensorAddr)."""
        assert storage.size == self.storage.size and storage.dtype == self.storage.dtype
        self.storage = storage

    def __del__(self):
        if self.handle:
            LIB.aclDestroyTensor(self.handle)


def float_scalar(value: float) -> int:
    v = ctypes.c_float(value)
    handle = LIB.aclCreateScalar(ctypes.byref(v), 0)
    assert handle, error_message()
    return handle
