"""The host provider's mixture-of-experts routing operators (issue 46):
aclnnMoeGatingTopKSoftmaxV2, aclnnMoeTokenPermute(+Grad) and
aclnnMoeTokenUnpermute(+Grad) run jax_aclnn.nn's top_k_routing, moe_permute
and moe_unpermute on the CPU and equal float64 NumPy formulas of CANN's
pages in every dtype CANN takes: experts without tokens, k = 1 and k = E,
tied logits, odd T and H; indices out of range are skipped, never
followed; the reference stays one switch away; the C ABI computes what
jax_aclnn.nn does not pass (numOutTokens, finishedOptional, INT64 expert
ids) and refuses what CANN refuses. Torch-free (runs under .ci/sanitize)."""

from __future__ import annotations

import ctypes

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, assert_close, assert_products_close, f64
from host_abi import ACLNN_ERR_PARAM_INVALID, LIB, create_tensor, error_message

import jax_aclnn as aclnn
from jax_aclnn import nn

OPS = ("aclnnMoeGatingTopKSoftmaxV2", "aclnnMoeTokenPermute", "aclnnMoeTokenPermuteGrad",
       "aclnnMoeTokenUnpermute", "aclnnMoeTokenUnpermuteGrad")


def executes() -> dict[str, int]:
    calls = aclnn.runtime_stats()["calls"]
    return {op: calls.get(op, {}).get("execute", 0) for op in OPS}


def counted(before: dict[str, int]) -> dict[str, int]:
    return {op: n - before[op] for op, n in executes().items() if n != before[op]}


# --- float64 NumPy oracles of CANN's formulas -----------------------------------------------


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def gating(x: np.ndarray, k: int, renorm: bool) -> tuple[np.ndarray, np.ndarray]:
    """renorm 0: top k of softmax(x); 1: softmax of x's top k. Ties: the
    lower expert first (a stable sort of the negated values)."""
    values = x if renorm else softmax(x)
    ids = np.argsort(-values, axis=-1, kind="stable")[:, :k]
    top = np.take_along_axis(values, ids, -1)
    return (softmax(top) if renorm else top), ids


def permutation(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, sorted_indices): the choices stably sorted by expert, and the
    row each choice went to."""
    order = np.argsort(ids.reshape(-1), kind="stable")
    return order, np.argsort(order)


def gather_sum(data, sorted_indices, w):
    """out[t] = sum_j w[t, j] * data[sorted[t*k + j]], out-of-range indices
    skipped (and the magnitude, the same on |data|, |w|)."""
    t, k = w.shape
    out = np.zeros((t, data.shape[1]))
    for c, row in enumerate(sorted_indices):
        if 0 <= row < data.shape[0]:
            out[c // k] += w[c // k, c % k] * data[row]
    return out


def unpermute_grads(x, g, sorted_indices, w):
    """dx[sorted[c]] = g[c // k] * w[c]; dw[c] = g[c // k] . x[sorted[c]]."""
    t, k = w.shape
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    for c, row in enumerate(sorted_indices):
        if 0 <= row < x.shape[0]:
            dx[row] = g[c // k] * w[c // k, c % k]
            dw[c // k, c % k] = g[c // k] @ x[row]
    return dx, dw


def expert_ids(rng, t: int, k: int, e: int, kind: str) -> np.ndarray:
    """(t, k) int32: distinct experts per token from all e ("any"), from
    experts 1, 4 and 6 only (the others get no token), or every expert
    ("all", k = e)."""
    pool = np.array([1, 4, 6]) if kind == "subset" else np.arange(e)
    return np.stack([rng.permutation(pool)[:k] for _ in range(t)]).astype(np.int32)


#: (T, H, k, E, expert pool): odd T and H with experts without tokens; k =
#: 1; k = E; enough rows for several tasks of the thread pool.
ROUTES = [(37, 33, 2, 8, "subset"), (16, 8, 1, 4, "any"), (11, 5, 4, 4, "all"),
          (515, 130, 2, 8, "any")]


# --- through jax_aclnn.nn ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("renorm", [False, True])
@pytest.mark.parametrize("t,e,k,ties", [(37, 8, 2, False), (6, 5, 1, False), (9, 4, 4, False),
                                        (13, 6, 3, True), (4099, 16, 2, False)])
def test_top_k_routing_equals_float64_numpy(rng, dtype, renorm, t, e, k, ties):
    values = rng.integers(0, 3, size=(t, e)) if ties else rng.normal(size=(t, e)) * 2
    logits = jnp.asarray(values, dtype)
    before = executes()
    w, ids = nn.top_k_routing(logits, k, renormalize=renorm)
    assert counted(before) == {"aclnnMoeGatingTopKSoftmaxV2": 1}
    want_w, want_ids = gating(f64(logits), k, renorm)
    assert w.dtype == logits.dtype and ids.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(ids), want_ids)
    assert_close(w, want_w, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t,h,k,e,pool", ROUTES)
def test_moe_permute_and_its_gradient_equal_float64_numpy(rng, dtype, t, h, k, e, pool):
    tokens = jnp.asarray(rng.normal(size=(t, h)), dtype)
    ids = expert_ids(rng, t, k, e, pool)
    g = jnp.asarray(rng.normal(size=(t * k, h)), dtype)
    before = executes()
    out, vjp = jax.vjp(lambda x: nn.moe_permute(x, jnp.asarray(ids), e)[:2], tokens)
    permuted, sorted_indices = out
    (dtokens,) = vjp((g, np.zeros(t * k, jax.dtypes.float0)))
    assert counted(before) == {"aclnnMoeTokenPermute": 1, "aclnnMoeTokenPermuteGrad": 1}
    order, want_sorted = permutation(ids)
    assert sorted_indices.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(sorted_indices), want_sorted)
    np.testing.assert_array_equal(f64(permuted), f64(tokens)[order // k])  # copies: exact
    gf = f64(g)
    want = gather_sum(gf, want_sorted, np.ones((t, k)))
    assert_products_close(dtokens, want, gather_sum(abs(gf), want_sorted, np.ones((t, k))),
                          dtype, k)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t,h,k,e,pool", ROUTES)
def test_moe_unpermute_and_its_gradients_equal_float64_numpy(rng, dtype, t, h, k, e, pool):
    n = t * k
    permuted = jnp.asarray(rng.normal(size=(n, h)), dtype)
    sorted_indices = rng.permutation(n).astype(np.int32)
    weights = jnp.asarray(rng.uniform(0.1, 1, size=(t, k)), dtype)
    g = jnp.asarray(rng.normal(size=(t, h)), dtype)
    before = executes()
    y, vjp = jax.vjp(lambda p, w: nn.moe_unpermute(p, jnp.asarray(sorted_indices), w), permuted,
                     weights)
    dp, dw = vjp(g)
    assert counted(before) == {"aclnnMoeTokenUnpermute": 1, "aclnnMoeTokenUnpermuteGrad": 1}
    x, wf, gf = f64(permuted), f64(weights), f64(g)
    assert_products_close(y, gather_sum(x, sorted_indices, wf),
                          gather_sum(abs(x), sorted_indices, abs(wf)), dtype, k)
    want_dx, want_dw = unpermute_grads(x, gf, sorted_indices, wf)
    mag_dx, mag_dw = unpermute_grads(abs(x), abs(gf), sorted_indices, abs(wf))
    assert_products_close(dp, want_dx, mag_dx, dtype, 1)
    assert_products_close(dw, want_dw, mag_dw, dtype, h)


def loss(tokens, logits, k, e):
    w, ids = nn.top_k_routing(logits, k)
    permuted, sorted_indices, _ = nn.moe_permute(tokens, ids, e)
    y = nn.moe_unpermute(jnp.tanh(permuted), sorted_indices, w)
    return jnp.sum(y * jnp.arange(y.shape[1], dtype=y.dtype))


def test_each_operator_runs_once_under_jit_and_grad_and_the_reference_switch_runs_none(rng):
    tokens = jnp.asarray(rng.normal(size=(23, 16)), jnp.float32)
    logits = jnp.asarray(rng.normal(size=(23, 6)), jnp.float32)
    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)), static_argnums=(2, 3))
    before = executes()
    value, grads = jax.block_until_ready(step(tokens, logits, 2, 6))
    assert counted(before) == dict.fromkeys(OPS, 1)
    before = executes()
    with aclnn.reference_path():
        ref_value, ref_grads = jax.block_until_ready(
            jax.jit(jax.value_and_grad(loss, argnums=(0, 1)), static_argnums=(2, 3))(
                tokens, logits, 2, 6))
    assert counted(before) == {}
    np.testing.assert_allclose(value, ref_value, rtol=1e-5)
    for a, b in zip(grads, ref_grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_expert_ids_out_of_range_are_sorted_by_value_without_a_crash(rng):
    """Ids CANN refuses (negative, past 16777215, int32's extremes) are
    sorted by value, as the reference's argsort sorts them: the radix
    passes of the counting sort, never an index out of bounds."""
    tokens = jnp.asarray(rng.normal(size=(9, 7)), jnp.float32)
    ids = rng.integers(0, 4, size=(9, 2)).astype(np.int32)
    ids[1, 0], ids[4, 1], ids[7, 0], ids[8, 1] = -3, 2**31 - 1, 2**24 + 5, -2**31
    permuted, sorted_indices, _ = nn.moe_permute(tokens, jnp.asarray(ids), 4)
    order, want_sorted = permutation(ids)
    np.testing.assert_array_equal(np.asarray(sorted_indices), want_sorted)
    np.testing.assert_array_equal(np.asarray(permuted), np.asarray(tokens)[order // 2])


def test_sorted_indices_out_of_range_are_skipped_never_followed(rng):
    t, k, h = 5, 2, 9
    permuted = jnp.asarray(rng.normal(size=(t * k, h)), jnp.float32)
    sorted_indices = rng.permutation(t * k).astype(np.int32)
    sorted_indices[[1, 6]] = [-7, 10**6]
    weights = jnp.asarray(rng.uniform(size=(t, k)), jnp.float32)
    g = jnp.asarray(rng.normal(size=(t, h)), jnp.float32)
    y, vjp = jax.vjp(lambda p, w: nn.moe_unpermute(p, jnp.asarray(sorted_indices), w), permuted,
                     weights)
    dp, dw = vjp(g)
    x, wf, gf = f64(permuted), f64(weights), f64(g)
    np.testing.assert_allclose(y, gather_sum(x, sorted_indices, wf), rtol=1e-5, atol=1e-6)
    want_dx, want_dw = unpermute_grads(x, gf, sorted_indices, wf)
    np.testing.assert_allclose(dp, want_dx, rtol=1e-5, atol=1e-6)  # unnamed rows: zeros
    np.testing.assert_allclose(dw, want_dw, rtol=1e-5, atol=1e-6)
    grad = jnp.asarray(rng.normal(size=(t * k, h)), jnp.float32)
    _, permute_vjp = jax.vjp(lambda x: nn.moe_permute(x, jnp.zeros((t, k), jnp.int32), 1)[0],
                             jnp.zeros((t, h), jnp.float32))
    (dtokens,) = permute_vjp(grad)  # the in-range case; out of range through the C ABI below
    np.testing.assert_allclose(dtokens, f64(grad).reshape(t, k, h).sum(1), rtol=1e-5, atol=1e-5)


# --- the C ABI: what jax_aclnn.nn does not pass, and refusals --------------------------------

_CODES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(jnp.bfloat16): 27,
          np.dtype(np.int32): 3, np.dtype(np.int64): 9, np.dtype(np.float64): 11,
          np.dtype(np.bool_): 12}


def call(op: str, *args) -> tuple[int, str]:
    """Both phases of `op` on numpy arrays (contiguous; outputs written in
    place) and other arguments as given; the first phase's status and
    message."""
    handles = []
    cargs = []
    for a in args:
        if isinstance(a, np.ndarray):
            assert a.flags.c_contiguous
            handle = create_tensor(a.shape, _CODES[a.dtype], [s // a.itemsize for s in a.strides],
                                   0, (max(a.size, 1),), a.ctypes.data)
            assert handle, error_message()
            handles.append(handle)
            a = handle
        cargs.append(a)
    ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
    try:
        status = getattr(LIB, f"{op}GetWorkspaceSize")(*cargs, ctypes.byref(ws), ctypes.byref(ex))
        text = error_message()
        if status == 0:
            workspace = np.empty(max(ws.value, 1), np.uint8)
            assert getattr(LIB, op)(workspace.ctypes.data, ws.value, ex, None) == 0, error_message()
    finally:
        for handle in handles:
            LIB.aclDestroyTensor(handle)
    return status, text


def test_the_c_abi_computes_num_out_tokens_int64_ids_and_finished_rows(rng):
    t, k, h = 7, 3, 4
    tokens = rng.normal(size=(t, h)).astype(np.float32)
    ids = np.stack([rng.permutation(5)[:k] for _ in range(t)]).astype(np.int64)
    order, want_sorted = permutation(ids)
    permuted, sorted_indices = np.zeros((10, h), np.float32), np.zeros(t * k, np.int32)
    assert call("aclnnMoeTokenPermute", tokens, ids, 10, False, permuted, sorted_indices)[0] == 0
    np.testing.assert_array_equal(sorted_indices, want_sorted)
    np.testing.assert_array_equal(permuted, tokens[order[:10] // k])
    x = rng.normal(size=(6, 5)).astype(np.float32)
    finished = np.array([False, True, False, False, True, False])
    y, expert = np.zeros((6, 2), np.float32), np.zeros((6, 2), np.int32)
    assert call("aclnnMoeGatingTopKSoftmaxV2", x, finished, 2, 0, False, y, expert, None)[0] == 0
    want_y, want_ids = gating(x.astype(np.float64), 2, False)
    want_ids[finished] = 5  # a finished row's experts are E (CANN's page)
    np.testing.assert_array_equal(expert, want_ids)
    np.testing.assert_allclose(y, want_y, rtol=1e-6)


def test_the_c_abi_permute_grad_skips_indices_out_of_range(rng):
    g = rng.normal(size=(6, 3)).astype(np.float32)
    sorted_indices = np.array([5, 99, 0, -1, 2, 3], np.int32)
    out = np.full((3, 3), np.nan, np.float32)
    assert call("aclnnMoeTokenPermuteGrad", g, sorted_indices, 2, False, out)[0] == 0
    np.testing.assert_allclose(out, gather_sum(g.astype(np.float64), sorted_indices,
                                               np.ones((3, 2))), rtol=1e-6)


def test_the_c_abi_refuses_what_cann_refuses(rng):
    tokens, ids = np.zeros((4, 3), np.float32), np.zeros((4, 2), np.int32)
    permuted, sorted_indices = np.zeros((8, 3), np.float32), np.zeros(8, np.int32)
    status, text = call("aclnnMoeTokenPermute", tokens, ids, 0, True, permuted, sorted_indices)
    assert status == ACLNN_ERR_PARAM_INVALID and "paddedMode" in text, text
    status, text = call("aclnnMoeTokenPermute", tokens.astype(np.float64), ids, 0, False,
                        permuted.astype(np.float64), sorted_indices)
    assert status == ACLNN_ERR_PARAM_INVALID and "tokens" in text and "DOUBLE" in text, text
    probs, out = np.zeros((4, 2), np.float32), np.zeros((4, 3), np.float32)
    status, text = call("aclnnMoeTokenUnpermute", permuted, sorted_indices.astype(np.int64),
                        probs, False, None, out)
    assert status == ACLNN_ERR_PARAM_INVALID and "sortedIndices" in text and "INT64" in text, text
    status, text = call("aclnnMoeTokenUnpermuteGrad", permuted, out, sorted_indices, probs, True,
                        None, permuted.copy(), probs.copy())
    assert status == ACLNN_ERR_PARAM_INVALID and "paddedMode" in text, text
    x, y, expert = np.zeros((4, 6), np.float32), np.zeros((4, 2), np.float32), np.zeros((4, 2),
                                                                                       np.int32)
    status, text = call("aclnnMoeGatingTopKSoftmaxV2", x, None, 2, 2, False, y, expert, None)
    assert status == ACLNN_ERR_PARAM_INVALID and "renorm" in text, text
    status, text = call("aclnnMoeGatingTopKSoftmaxV2", x, None, 2, 0, True, y, expert, None)
    assert status == ACLNN_ERR_PARAM_INVALID and "outputSoftmaxResultFlag" in text, text
    status, text = call("aclnnMoeGatingTopKSoftmaxV2", x, None, 2, 0, False, y,
                        expert.astype(np.int64), None)
    assert status == ACLNN_ERR_PARAM_INVALID and "expertIdxOut" in text, text
