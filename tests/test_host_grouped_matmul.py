"""The host provider's aclnnGroupedMatmulV4 (issue 46): jax_aclnn.nn.ragged_dot
runs it on the CPU, forward (groups along M) and backward (along M with the
weights transposed, along K for the weights' gradient), and equals a
float64 NumPy formula in every dtype CANN takes, with empty groups, groups
longer than a tile, rows past the groups' total; the reference stays one
switch away; the C ABI computes the forms ragged_dot does not call (a bias,
cumulative group lists, strided operands) and refuses what CANN refuses."""

from __future__ import annotations

import ctypes

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, assert_products_close, f64
from host_abi import ACL_DTYPES, ACLNN_ERR_PARAM_INVALID, LIB, create_tensor, error_message

import jax_aclnn as aclnn
from jax_aclnn import nn

_p = ctypes.c_void_p


def grouped(lhs, rhs, sizes):
    """jax.lax.ragged_dot's contract in float64: rows of group e times
    rhs[e], rows past the groups' total 0."""
    out = np.zeros((lhs.shape[0], rhs.shape[2]))
    start = 0
    for e, size in enumerate(sizes):
        out[start:start + size] = lhs[start:start + size] @ rhs[e]
        start += size
    return out


def grouped_grads(lhs, rhs, sizes, g):
    """The float64 gradients of sum(ragged_dot(lhs, rhs) * g)."""
    dlhs, drhs, start = np.zeros_like(lhs), np.zeros_like(rhs), 0
    for e, size in enumerate(sizes):
        rows = slice(start, start + size)
        dlhs[rows] = g[rows] @ rhs[e].T
        drhs[e] = lhs[rows].T @ g[rows]
        start += size
    return dlhs, drhs


#: (m, k, n, group sizes): empty groups and rows past the total; one group
#: longer than a tile (256 rows) with enough columns to split; a single
#: empty group (every row past the total); an odd k.
CASES = [(300, 64, 96, [50, 0, 120, 3, 100]), (600, 33, 130, [600]), (9, 5, 3, [0]),
         (40, 17, 8, [10, 0, 0, 30])]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n,sizes", CASES)
def test_ragged_dot_equals_float64_numpy_forward_and_backward(rng, dtype, m, k, n, sizes):
    lhs = jnp.asarray(rng.normal(size=(m, k)), dtype)
    rhs = jnp.asarray(rng.normal(size=(len(sizes), k, n)), dtype)
    g = jnp.asarray(rng.normal(size=(m, n)), dtype)
    counts = jnp.asarray(sizes, jnp.int32)
    before = aclnn.runtime_stats()["calls"]["aclnnGroupedMatmulV4"]["execute"]
    out, vjp = jax.vjp(lambda a, b: nn.ragged_dot(a, b, counts), lhs, rhs)
    dlhs, drhs = vjp(g)
    assert aclnn.runtime_stats()["calls"]["aclnnGroupedMatmulV4"]["execute"] - before == 3
    a, b, gf = f64(lhs), f64(rhs), f64(g)
    assert_products_close(out, grouped(a, b, sizes), grouped(abs(a), abs(b), sizes), dtype, k)
    da, db = grouped_grads(a, b, sizes, gf)
    ma, mb = grouped_grads(abs(a), abs(b), sizes, abs(gf))
    assert_products_close(dlhs, da, ma, dtype, n)
    assert_products_close(drhs, db, mb, dtype, max(sizes))
    assert f64(out)[sum(sizes):].tolist() == np.zeros((m - sum(sizes), n)).tolist()


def test_the_reference_switch_runs_jaxs_ragged_dot_instead(rng):
    lhs, rhs = rng.normal(size=(12, 8)).astype(np.float32), rng.normal(size=(2, 8, 4)).astype(np.float32)
    counts = jnp.asarray([5, 7], jnp.int32)
    before = aclnn.runtime_stats()["calls"]["aclnnGroupedMatmulV4"]["execute"]
    with aclnn.reference_path():
        out = jax.jit(nn.ragged_dot)(lhs, rhs, counts)
    assert aclnn.runtime_stats()["calls"]["aclnnGroupedMatmulV4"]["execute"] == before
    np.testing.assert_allclose(out, grouped(lhs, rhs, [5, 7]), rtol=1e-5, atol=1e-5)


# --- the C ABI: the forms ragged_dot does not call, and refusals ------------------------------


class Call:
    """aclnnGroupedMatmulV4 through the C ABI on numpy arrays: single-tensor
    lists (which own their tensors), made and destroyed here."""

    def __init__(self):
        self.lists, self.keep = [], []

    def tensor(self, a: np.ndarray, strides=None, code=None):
        """A tensor over `a`'s memory; `strides` (elements) default to a's."""
        self.keep.append(a)
        strides = strides or [s // a.itemsize for s in a.strides]
        extent = 1 + sum((d - 1) * s for d, s in zip(a.shape, strides)) if a.size else 1
        handle = create_tensor(a.shape, ACL_DTYPES[a.dtype] if code is None else code, strides,
                               0, (extent,), a.ctypes.data)
        assert handle, error_message()
        return handle

    def list(self, *arrays, **kwargs):
        if not arrays:
            return None
        handles = (_p * len(arrays))(*[self.tensor(a, **kwargs) for a in arrays])
        handle = LIB.aclCreateTensorList(handles, len(arrays))
        self.lists.append(handle)
        return handle

    def group_list(self, values):
        a = np.asarray(values, np.int64)
        self.keep.append(a)
        handle = create_tensor(a.shape, 9, [1], 0, (a.size,), a.ctypes.data)  # ACL_INT64
        self.keep.append(handle)
        return handle

    def run(self, x, weight, bias, group_list, out, group_type=0, list_type=1, act_type=0,
            split_item=3, scale=None):
        ws, ex = ctypes.c_uint64(), _p()
        status = LIB.aclnnGroupedMatmulV4GetWorkspaceSize(
            x, weight, bias, scale, None, None, None, None, group_list, None, None, None,
            split_item, group_type, list_type, act_type, out, None, None, ctypes.byref(ws),
            ctypes.byref(ex))
        text = error_message()
        if status == 0:
            assert LIB.aclnnGroupedMatmulV4(None, 0, ex, None) == 0, error_message()
        return status, text

    def close(self):
        for handle in self.lists:
            LIB.aclDestroyTensorList(handle)
        for handle in self.keep:
            if isinstance(handle, int):
                LIB.aclDestroyTensor(handle)


@pytest.fixture
def call():
    c = Call()
    yield c
    c.close()


@pytest.mark.parametrize("dtype", [np.float32, np.float16, jnp.bfloat16])
def test_a_bias_and_cumulative_group_lists(rng, call, dtype):
    """groupListType 0 (cumulative sums) and a bias (FLOAT16 with FLOAT16
    x, FLOAT32 with the others); rows past the total are zeros (CANN's are
    unspecified: never uninitialized memory here)."""
    m, k, n = 20, 7, 5
    x = rng.normal(size=(m, k)).astype(dtype)
    w = rng.normal(size=(3, k, n)).astype(dtype)
    b = rng.normal(size=(3, n)).astype(np.float16 if dtype == np.float16 else np.float32)
    out = np.full((m, n), 7, dtype)
    status, text = call.run(call.list(x), call.list(w), call.list(b), call.group_list([4, 4, 15]),
                            call.list(out), list_type=0)
    assert status == 0, text
    expected = grouped(f64(x), f64(w), [4, 0, 11])
    expected[:15] += np.repeat(f64(b), [4, 0, 11], axis=0)
    assert_products_close(out[:15], expected[:15], 10.0, jnp.dtype(dtype).name, k)
    assert (f64(out[15:]) == 0).all()


def test_strided_operands_along_k(rng, call):
    """groupType 2 with x as CANN passes it (a transposed view, strides
    [1, M]) and a transposed weight along M: strides read as given."""
    xt = rng.normal(size=(9, 4)).astype(np.float32)           # memory [K=9, M=4]
    x = np.lib.stride_tricks.as_strided(xt, (4, 9), (4, 16))  # [M, K], strides [1, M]
    w = rng.normal(size=(9, 6)).astype(np.float32)
    out = np.zeros((3, 4, 6), np.float32)
    status, text = call.run(call.list(xt.T), call.list(w), None, call.group_list([2, 0, 7]),
                            call.list(out), group_type=2)
    assert status == 0, text
    bounds = [0, 2, 2, 9]
    expected = [x[:, bounds[e]:bounds[e + 1]] @ w[bounds[e]:bounds[e + 1]] for e in range(3)]
    np.testing.assert_allclose(out, np.stack(expected), rtol=1e-5, atol=1e-5)
    # along M with each weight transposed ([E, K, N] with strides [K*N, 1, K])
    wt = rng.normal(size=(2, 6, 9)).astype(np.float32)
    x2 = rng.normal(size=(5, 9)).astype(np.float32)
    out2 = np.zeros((5, 6), np.float32)
    status, text = call.run(call.list(x2), call.list(wt.transpose(0, 2, 1)), None,
                            call.group_list([3, 2]), call.list(out2))
    assert status == 0, text
    np.testing.assert_allclose(out2, grouped(x2, wt.transpose(0, 2, 1), [3, 2]), rtol=1e-5,
                               atol=1e-5)


def test_group_lists_cann_refuses_are_clamped_not_followed(call):
    """Negative counts and totals past M: CANN refuses them at run time; the
    host kernel reads no row out of bounds (a negative count is 0, the
    total stops at M)."""
    x, w = np.ones((4, 2), np.float32), np.ones((2, 2, 3), np.float32)
    out = np.zeros((4, 3), np.float32)
    status, text = call.run(call.list(x), call.list(w), None, call.group_list([-5, 100]),
                            call.list(out))
    assert status == 0, text
    np.testing.assert_array_equal(out, np.full((4, 3), 2.0))


F64, I32 = 11, 3


@pytest.mark.parametrize("change,message", [
    (dict(code=F64), "x[0] has data type DOUBLE"),
    (dict(code=I32), "x[0] has data type INT32"),
    (dict(weight_dtype=np.float16), "must have the same data type"),
    (dict(group_type=1), "groupType 1"),
    (dict(list_type=2), "groupListType 2"),
    (dict(act_type=1), "actType 1"),
    (dict(split_item=0), "splitItem 0"),
    (dict(scale=True), "scaleOptional is given"),
    (dict(two_weights=True), "weight holds 2 tensors"),
    (dict(weight_shape=(2, 3, 3)), "weight[0] has shape [2,3,3], expected [2,2,3]"),
    (dict(groups=[]), "0 groups"),
    (dict(bias_dtype=np.float16), "biasOptional[0] has data type FLOAT16; expected FLOAT"),
])
def test_the_c_abi_refuses_what_cann_refuses(call, change, message):
    x = np.ones((4, 2), np.float32)
    w = np.ones(change.get("weight_shape", (2, 2, 3)), change.get("weight_dtype", np.float32))
    out = np.zeros((4, 3), np.float32)
    weights = call.list(w, w) if change.get("two_weights") else call.list(w)
    bias = call.list(np.ones((2, 3), change["bias_dtype"])) if "bias_dtype" in change else None
    status, text = call.run(
        call.list(x, code=change.get("code")), weights, bias,
        call.group_list(change.get("groups", [2, 2])), call.list(out),
        group_type=change.get("group_type", 0), list_type=change.get("list_type", 1),
        act_type=change.get("act_type", 0), split_item=change.get("split_item", 3),
        scale=call.list(np.ones(3, np.float32)) if change.get("scale") else None)
    assert status == ACLNN_ERR_PARAM_INVALID, (status, text)
    assert message in text, text
