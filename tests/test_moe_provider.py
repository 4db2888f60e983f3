"""The test provider's mixture-of-experts operators (csrc/testing/moe_operators.cc)
called through their C ABI, as CANN's callers call them, against float64
NumPy formulas of CANN's documented semantics (hicann/ops-transformer
moe/*/docs/aclnn*.md, cited in the C++): aclnnMoeGatingTopKSoftmaxV2,
aclnnMoeTokenPermute(Grad), aclnnMoeTokenUnpermute(Grad). The permutations'
gradients are checked against the transposes of the forward's matrices,
not against the pages' index formulas the kernels follow."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from declared_operators import LIBRARY, recorded

pytestmark = pytest.mark.skipif(not LIBRARY.exists(),
                                reason="the test provider is built with JAX_ACLNN_TESTING=ON")

ACLNN_ERR_PARAM_INVALID = 161002
#: numpy dtype -> aclDataType (aclnn_abi.h)
ACL_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.int32): 3,
              np.dtype(np.int64): 9, np.dtype(np.bool_): 12}
_p, _i64p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)


def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(LIBRARY))
    lib.aclCreateTensor.restype = _p
    lib.aclCreateTensor.argtypes = [_i64p, ctypes.c_uint64, ctypes.c_int, _i64p, ctypes.c_int64,
                                    ctypes.c_int, _i64p, ctypes.c_uint64, _p]
    lib.aclDestroyTensor.argtypes = [_p]
    lib.aclGetRecentErrMsg.restype = ctypes.c_char_p
    lib.jaxAclnnTestLiveDescriptors.restype = ctypes.c_int64
    return lib


LIB = _library() if LIBRARY.exists() else None


class Tensor:
    """A contiguous aclTensor over a numpy array (kept alive with it)."""

    def __init__(self, array):
        self.array = np.ascontiguousarray(array)
        dims = (ctypes.c_int64 * max(1, self.array.ndim))(*self.array.shape)
        self.handle = LIB.aclCreateTensor(dims, self.array.ndim, ACL_DTYPES[self.array.dtype],
                                          None, 0, 2, dims, self.array.ndim,
                                          self.array.ctypes.data)
        assert self.handle, LIB.aclGetRecentErrMsg().decode()

    def __del__(self):
        LIB.aclDestroyTensor(self.handle)


def _ctype(arg):
    if arg is None or isinstance(arg, Tensor):
        return _p
    return ctypes.c_bool if isinstance(arg, bool) else ctypes.c_int64


def call(op: str, *args) -> int:
    """Both phases of aclnn`op` with `args` (Tensors, None for a null
    pointer, bools and ints) in prototype order; the first failing status."""
    first = getattr(LIB, f"aclnn{op}GetWorkspaceSize")
    first.argtypes = [_ctype(a) for a in args] + [ctypes.POINTER(ctypes.c_uint64), _p]
    size, executor = ctypes.c_uint64(), ctypes.c_void_p()
    status = first(*[a.handle if isinstance(a, Tensor) else a for a in args],
                   ctypes.byref(size), ctypes.byref(executor))
    if status:
        return status
    second = getattr(LIB, f"aclnn{op}")
    second.argtypes = [_p, ctypes.c_uint64, _p, _p]
    return second(None, size, executor, None)


def run(op: str, *args) -> None:
    assert call(op, *args) == 0, LIB.aclGetRecentErrMsg().decode()


def assert_close(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=2e-6, atol=1e-6)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def top_k(values, k):
    """jax.lax.top_k's indices: largest first, ties in index order."""
    return np.argsort(-values, axis=-1, kind="stable")[..., :k]


def gating(x, k, renorm, finished=None, softmax_out=True):
    """aclnnMoeGatingTopKSoftmaxV2's (yOut, expertIdxOut, softmaxResultOutOptional)."""
    y = Tensor(np.full(x.shape[:-1] + (k,), np.nan, np.float32))
    ids = Tensor(np.full(x.shape[:-1] + (k,), -1, np.int32))
    probs = Tensor(np.full(x.shape, np.nan, np.float32))
    run("MoeGatingTopKSoftmaxV2", Tensor(x), None if finished is None else Tensor(finished), k,
        renorm, softmax_out, y, ids, probs)
    return y.array, ids.array, probs.array


@pytest.mark.parametrize("shape,k", [((5, 6), 2), ((2, 3, 4), 1), ((3, 4), 4)])
def test_gating_softmax_then_top_k(rng, shape, k):
    x = rng.normal(size=shape).astype(np.float32)
    y, ids, probs = gating(x, k, renorm=0)
    p = softmax(x.astype(np.float64))
    expected_ids = top_k(p, k)
    np.testing.assert_array_equal(ids, expected_ids)
    assert_close(y, np.take_along_axis(p, expected_ids, -1))
    assert_close(probs, p)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_gating_top_k_then_softmax(rng, k):
    x = rng.normal(size=(4, 5)).astype(np.float32)
    y, ids, probs = gating(x, k, renorm=1)
    expected_ids = top_k(x, k)
    np.testing.assert_array_equal(ids, expected_ids)
    assert_close(y, softmax(np.take_along_axis(x.astype(np.float64), expected_ids, -1)))
    assert np.isnan(probs).all()  # renorm 1 does not output the softmax


def test_gating_ties_and_finished_rows():
    x = np.array([[1, 0, 1, 1], [2, 2, 2, 2], [0, 3, 0, 3]], np.float32)
    finished = np.array([False, True, False])
    for renorm in (0, 1):
        _, ids, _ = gating(x, 3, renorm, finished, softmax_out=False)
        np.testing.assert_array_equal(ids, [[0, 2, 3], [4, 4, 4], [1, 3, 0]])


def permute(tokens, expert_ids, num_out_tokens=0):
    n = expert_ids.size
    rows = n if num_out_tokens == 0 else (min(n, num_out_tokens) if num_out_tokens > 0
                                          else n + num_out_tokens)
    out = Tensor(np.full((rows,) + tokens.shape[1:], np.nan, np.float32))
    indices = Tensor(np.full(n, -1, np.int32))
    run("MoeTokenPermute", Tensor(tokens), Tensor(expert_ids), num_out_tokens, False, out, indices)
    return out.array, indices.array


def permutation_matrix(expert_ids):
    """P (T * k, T): the permuted rows are P @ tokens; MaxText's order (the
    choices sorted by expert, stably)."""
    t = expert_ids.shape[0]
    k = expert_ids.size // t
    order = np.argsort(expert_ids.reshape(-1), kind="stable")
    matrix = np.zeros((expert_ids.size, t))
    matrix[np.arange(expert_ids.size), order // k] = 1
    return matrix, order


@pytest.mark.parametrize("t,k,experts,dtype", [(5, 2, 3, np.int32), (4, 1, 4, np.int64),
                                               (3, 3, 3, np.int32)])
def test_permute_and_its_gradient(rng, t, k, experts, dtype):
    tokens = rng.normal(size=(t, 4)).astype(np.float32)
    # expert `experts` receives no token; the ids repeat (stability)
    expert_ids = rng.integers(0, experts, size=(t, k)).astype(dtype)
    permuted, sorted_indices = permute(tokens, expert_ids if k > 1 else expert_ids[:, 0])
    matrix, order = permutation_matrix(expert_ids)
    assert_close(permuted, matrix @ tokens)
    np.testing.assert_array_equal(sorted_indices, np.argsort(order))
    # CANN's convention: choice t*k + j is row sorted_indices[t*k + j]
    np.testing.assert_array_equal(permuted[sorted_indices], np.repeat(tokens, k, axis=0))

    g = rng.normal(size=permuted.shape).astype(np.float32)
    grad = Tensor(np.full(tokens.shape, np.nan, np.float32))
    run("MoeTokenPermuteGrad", Tensor(g), Tensor(sorted_indices), k, False, grad)
    assert_close(grad.array, matrix.T @ g)


@pytest.mark.parametrize("num_out_tokens", [4, -2, 100])
def test_permute_drops_rows_past_num_out_tokens(rng, num_out_tokens):
    tokens = rng.normal(size=(3, 2, 2)).astype(np.float32)  # rank 3: H = 2 * 2
    expert_ids = np.array([[1, 0], [2, 0], [0, 1]], np.int32)
    permuted, sorted_indices = permute(tokens, expert_ids, num_out_tokens)
    full, full_indices = permute(tokens, expert_ids)
    assert_close(permuted, full[:num_out_tokens])
    np.testing.assert_array_equal(sorted_indices, full_indices)


def unpermute_matrix(sorted_indices, probs):
    """A (T, T * k): the unpermuted tokens are A @ permuted."""
    t, k = probs.shape
    matrix = np.zeros((t, t * k))
    for i in range(t):
        for j in range(k):
            matrix[i, sorted_indices[i * k + j]] += probs[i, j]
    return matrix


@pytest.mark.parametrize("t,k,with_probs", [(4, 2, True), (3, 1, True), (5, 1, False),
                                            (2, 3, True)])
def test_unpermute_and_its_gradients(rng, t, k, with_probs):
    h = 3
    permuted = rng.normal(size=(t * k, h)).astype(np.float32)
    sorted_indices = rng.permutation(t * k).astype(np.int32)
    probs = rng.uniform(size=(t, k)).astype(np.float32) if with_probs else None
    matrix = unpermute_matrix(sorted_indices, probs if with_probs else np.ones((t, 1)))
    out = Tensor(np.full((t, h), np.nan, np.float32))
    probs_t = Tensor(probs) if with_probs else None
    run("MoeTokenUnpermute", Tensor(permuted), Tensor(sorted_indices), probs_t, False, None, out)
    assert_close(out.array, matrix @ permuted)

    g = rng.normal(size=(t, h)).astype(np.float32)
    d_permuted = Tensor(np.full(permuted.shape, np.nan, np.float32))
    d_probs = Tensor(np.full((t, k), np.nan, np.float32))
    run("MoeTokenUnpermuteGrad", Tensor(permuted), Tensor(g), Tensor(sorted_indices), probs_t,
        False, None, d_permuted, d_probs)
    assert_close(d_permuted.array, matrix.T @ g)
    if with_probs:  # d/dprobs[i, j] of sum(g * y) = g[i] . permuted[row of choice (i, j)]
        rows = permuted.astype(np.float64)[sorted_indices].reshape(t, k, h)
        assert_close(d_probs.array, np.einsum("th,tkh->tk", g, rows))
    else:
        assert np.isnan(d_probs.array).all()  # not written without probs


def test_each_call_is_recorded():
    recorded()
    tokens = np.ones((2, 3), np.float32)
    permute(tokens, np.array([[1, 0], [0, 1]], np.int32))
    assert recorded() == ["aclnnMoeTokenPermute; tensor(f32,[2,3]); tensor(i32,[2,2]); 0; false; "
                          "tensor(f32,[4,3]); tensor(i32,[4])"]


def test_refusals_name_the_argument():
    live = LIB.jaxAclnnTestLiveDescriptors()
    half = Tensor(np.zeros((2, 4), np.float16))
    ids = Tensor(np.zeros((2, 1), np.int32))
    y = Tensor(np.zeros((2, 1), np.float16))
    assert call("MoeGatingTopKSoftmaxV2", half, None, 1, 0, False, y, ids,
                None) == ACLNN_ERR_PARAM_INVALID
    assert "x has data type f16; only f32 is supported" in LIB.aclGetRecentErrMsg().decode()

    tokens = Tensor(np.zeros((2, 4), np.float32))
    out, indices = Tensor(np.zeros((2, 4), np.float32)), Tensor(np.zeros(2, np.int32))
    assert call("MoeTokenPermute", tokens, ids, 0, True, out, indices) == ACLNN_ERR_PARAM_INVALID
    assert "paddedMode" in LIB.aclGetRecentErrMsg().decode()

    bad = Tensor(np.array([0, 2], np.int32))  # row 2 of 2: found in the second phase
    assert call("MoeTokenUnpermute", out, bad, None, False, None,
                Tensor(np.zeros((2, 4), np.float32))) == ACLNN_ERR_PARAM_INVALID
    assert "sortedIndices[1] = 2 is outside [0, 2)" in LIB.aclGetRecentErrMsg().decode()
    del half, y, ids, tokens, out, indices, bad
    assert LIB.jaxAclnnTestLiveDescriptors() == live
