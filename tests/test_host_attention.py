"""The host provider's aclnnFlashAttentionScore(+Grad) (issue 46): blocked
kernels with an online softmax. jax_aclnn.nn.dot_product_attention runs them
on the CPU, forward and backward, and equals a float64 NumPy formula in
every dtype CANN takes: causal with T < S and T > S, grouped-query
attention, each pse pattern, boolean masks with a fully masked row (CANN's
zeros, finite gradients), sequences shorter than a block, not multiples of
one, and several blocks long; the reference stays one switch away; the C
ABI refuses what the host provider does not implement."""

from __future__ import annotations

import ctypes

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, F, f64, needs_torch, tolerance, torch
from host_abi import ACL_DTYPES, ACLNN_ERR_PARAM_INVALID, LIB, create_tensor, error_message

import jax_aclnn as aclnn
from jax_aclnn import nn


FORWARD, GRAD = "aclnnFlashAttentionScore", "aclnnFlashAttentionScoreGrad"


def executions(name: str) -> int:
    return aclnn.runtime_stats()["calls"].get(name, {}).get("execute", 0)


def attention64(q, k, v, bias, keep, scale, g):
    """Attention and the gradients of sum(out * g) in float64 ((B, T, N, H)
    layout; keep: True where a query attends, broadcast to (B, N, T, S)); a
    row that attends to no key: zeros, no gradient."""
    b, t, n, h = q.shape
    s, kv = k.shape[1], k.shape[2]
    rep = lambda x: np.repeat(x, n // kv, axis=2)  # noqa: E731  (GQA: head i uses i // G)
    kk, vv = rep(k), rep(v)
    logits = scale * np.einsum("btnh,bsnh->bnts", q, kk)
    if bias is not None:
        logits = logits + bias
    keep = np.broadcast_to(keep, logits.shape)
    logits = np.where(keep, logits, -np.inf)
    mx = np.max(logits, axis=-1, keepdims=True)
    p = np.where(keep, np.exp(logits - np.where(np.isfinite(mx), mx, 0)), 0)
    total = p.sum(-1, keepdims=True)
    p = p / np.where(total > 0, total, 1)
    out = np.einsum("bnts,bsnh->btnh", p, vv)
    dv = np.einsum("bnts,btnh->bsnh", p, g)
    dp = np.einsum("btnh,bsnh->bnts", g, vv)
    ds = p * (dp - np.sum(dp * p, -1, keepdims=True))
    dq = scale * np.einsum("bnts,bsnh->btnh", ds, kk)
    dk = scale * np.einsum("bnts,btnh->bsnh", ds, q)
    fold = lambda x: x.reshape(b, s, kv, n // kv, -1).sum(3)  # noqa: E731
    dbias = None
    if bias is not None:
        axes = tuple(i for i in range(4) if bias.shape[i] == 1 and ds.shape[i] != 1)
        dbias = ds.sum(axes, keepdims=True)
    return out, dq, fold(dk), fold(dv), dbias


def assert_near(actual, expected, dtype, what):
    """Within the dtype's tolerance of each value and of the largest one
    (float32 accumulation over up to a few hundred terms)."""
    actual, expected = f64(actual), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, what
    tol = tolerance(dtype)
    bound = tol * np.abs(expected) + tol * (np.max(np.abs(expected)) + 1e-30)
    excess = np.abs(actual - expected) - bound
    assert np.all(excess <= 0), (what, float(np.max(excess)))


#: (B, T, S, N, K, H, causal, pse shape or None, mask shape or None):
#: causal with T < S and T > S (GQA, several key blocks); each pse pattern;
#: boolean masks of each pattern (with a fully masked row); S below a block,
#: T and S not multiples of one; a pse broadcast over a batch of 3; causal
#: with T = S over several query blocks and a pse (the products stop at the
#: last key a block sees, the pse's gradient too).
CASES = [
    (1, 70, 300, 4, 2, 32, True, None, None),
    (2, 300, 70, 2, 2, 16, True, None, None),
    (2, 9, 5, 2, 1, 8, False, (2, 2, 1, 5), (2, 1, 9, 5)),
    (1, 130, 600, 4, 1, 16, False, (1, 4, 130, 600), None),
    (2, 33, 40, 2, 2, 24, True, (2, 2, 33, 40), (33, 40)),
    (2, 20, 260, 2, 2, 8, False, None, (2, 2, 20, 260)),
    (3, 30, 50, 2, 1, 8, True, (1, 2, 30, 50), None),
    (1, 150, 150, 2, 1, 16, True, (1, 2, 150, 150), None),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:6])) + (
    "_causal" if c[6] else "") + (f"_pse{len(c[7])}" if c[7] else "") + ("_mask" if c[8] else ""))
def test_attention_equals_float64_numpy_forward_and_backward(rng, dtype, case):
    b, t, s, n, kv, h, causal, pse_shape, mask_shape = case
    q = jnp.asarray(rng.normal(size=(b, t, n, h)), dtype)
    k = jnp.asarray(rng.normal(size=(b, s, kv, h)), dtype)
    v = jnp.asarray(rng.normal(size=(b, s, kv, h)), dtype)
    g = jnp.asarray(rng.normal(size=(b, t, n, h)), dtype)
    bias = None if pse_shape is None else jnp.asarray(rng.normal(size=pse_shape), dtype)
    mask = None
    keep = np.ones((t, s), bool)
    if mask_shape is not None:
        mask = rng.random(mask_shape) < 0.8
        mask[..., 1, :] = False  # a row that attends to no key
        keep = keep & mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
        mask = jnp.asarray(mask)
    if causal:
        keep = keep & np.tril(np.ones((t, s), bool))
    scale = 1 / np.sqrt(h)
    before = executions(FORWARD), executions(GRAD)
    if bias is None:
        out, vjp = jax.vjp(lambda q, k, v: nn.dot_product_attention(
            q, k, v, mask=mask, is_causal=causal), q, k, v)
        dq, dk, dv = vjp(g)
    else:
        out, vjp = jax.vjp(lambda q, k, v, bias: nn.dot_product_attention(
            q, k, v, bias, mask=mask, is_causal=causal), q, k, v, bias)
        dq, dk, dv, dbias = vjp(g)
    jax.block_until_ready((out, dq, dk, dv))  # runtime_stats counts completed calls
    assert (executions(FORWARD) - before[0], executions(GRAD) - before[1]) == (1, 1)
    expected = attention64(f64(q), f64(k), f64(v), None if bias is None else f64(bias), keep,
                           scale, f64(g))
    for name, a, e in zip(("out", "dq", "dk", "dv"), (out, dq, dk, dv), expected):
        assert np.all(np.isfinite(f64(a))), name
        assert_near(a, e, dtype, name)
    if bias is not None:
        assert_near(dbias, expected[4], dtype, "dbias")
    dead = ~keep.reshape((1,) * (4 - keep.ndim) + keep.shape).any(-1)  # (B|1, N|1, T)
    dead = np.broadcast_to(dead, (b, n, t)).transpose(0, 2, 1)
    assert (f64(out)[dead] == 0).all() and (f64(dq)[dead] == 0).all()


@needs_torch
@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_equals_torch_sdpa_in_float64(rng, dtype):
    """PyTorch's F.scaled_dot_product_attention (float64, from the same
    rounded inputs; grouped-query attention, a float mask as the bias, a
    causal mask with T < S as jax_aclnn's top-left one), forward and
    backward."""
    b, t, s, n, kv, h = 2, 40, 90, 4, 2, 16
    q = jnp.asarray(rng.normal(size=(b, t, n, h)), dtype)
    k, v = (jnp.asarray(rng.normal(size=(b, s, kv, h)), dtype) for _ in range(2))
    g = jnp.asarray(rng.normal(size=(b, t, n, h)), dtype)
    bias = jnp.asarray(rng.normal(size=(b, n, 1, s)), dtype)
    out, vjp = jax.vjp(lambda q, k, v, bias: nn.dot_product_attention(
        q, k, v, bias, is_causal=True), q, k, v, bias)
    grads = vjp(g)
    bnth = lambda x: torch.from_numpy(f64(x).transpose(0, 2, 1, 3))  # noqa: E731  (torch's layout)
    tq, tk, tv = (bnth(x).requires_grad_(True) for x in (q, k, v))
    tb = torch.from_numpy(f64(bias)).requires_grad_(True)
    causal = torch.from_numpy(np.where(np.tril(np.ones((t, s), bool)), 0.0, -np.inf))
    want = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tb + causal, enable_gqa=True)
    want.backward(bnth(g))
    assert_near(out, want.detach().numpy().transpose(0, 2, 1, 3), dtype, "out")
    for name, ours, theirs in zip(("dq", "dk", "dv"), grads, (tq, tk, tv)):
        assert_near(ours, theirs.grad.numpy().transpose(0, 2, 1, 3), dtype, name)
    assert_near(grads[3], tb.grad.numpy(), dtype, "dbias")


def test_the_reference_switch_runs_the_reference_instead(rng):
    q, k, v = (jnp.asarray(rng.normal(size=(1, 12, 2, 8)), jnp.float32) for _ in range(3))
    before = executions(FORWARD)
    with aclnn.reference_path():
        out = jax.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True))(q, k, v)
    jax.block_until_ready(out)  # runtime_stats counts completed calls
    assert executions(FORWARD) == before
    keep = np.tril(np.ones((12, 12), bool))
    expected = attention64(f64(q), f64(k), f64(v), None, keep, 1 / np.sqrt(8),
                           np.zeros((1, 12, 2, 8)))[0]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert executions(FORWARD) == before
    out = jax.block_until_ready(
        jax.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True))(q, k, v))
    assert executions(FORWARD) == before + 1
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("is_causal", [False, True])
def test_a_nan_in_a_query_row_gives_nan_there_and_only_there(rng, is_causal):
    """A NaN score propagates to its row's output (as in jax.nn), also where
    the row's other scores are masked: never CANN's zeros of an empty row."""
    q, k, v = (np.asarray(rng.normal(size=(1, 40, 2, 16)), np.float32) for _ in range(3))
    q[0, 0, 0, 3] = q[0, 21, 1, 0] = np.nan  # row 0 sees one key when causal
    out = np.asarray(jax.jit(lambda q, k, v: nn.dot_product_attention(
        q, k, v, is_causal=is_causal))(q, k, v))
    nan_rows = np.isnan(out).any(-1)
    expected = np.zeros((1, 40, 2), bool)
    expected[0, 0, 0] = expected[0, 21, 1] = True
    np.testing.assert_array_equal(nan_rows, expected)
    assert np.isnan(out[0, 0, 0]).all() and np.isnan(out[0, 21, 1]).all()


def test_the_causal_mask_is_a_constant_of_the_program(rng):
    """is_causal passes CANN's compressed 2048 x 2048 mask (sparse mode 2),
    which the host kernels never read: made once with NumPy, not computed by
    every call (it was a 4 MiB iota-and-compare in every training step)."""
    q = jnp.asarray(rng.normal(size=(1, 8, 2, 16)), jnp.float32)
    text = jax.jit(lambda q: nn.dot_product_attention(q, q, q, is_causal=True)).lower(q).as_text()
    computed = [line for line in text.splitlines()
                if "2048x2048" in line and "stablehlo.constant" not in line
                and "custom_call" not in line and "func" not in line]
    assert computed == [], computed


# --- the C ABI ---------------------------------------------------------------------------------


class Forward:
    """aclnnFlashAttentionScore through the C ABI on numpy arrays."""

    def __init__(self):
        self.keep, self.handles = [], []

    def tensor(self, a: np.ndarray | None, code=None):
        if a is None:
            return None
        self.keep.append(a)
        code = (4 if a.dtype == np.uint8 else 12 if a.dtype == bool else ACL_DTYPES[a.dtype]) \
            if code is None else code
        handle = create_tensor(a.shape, code, [x // a.itemsize for x in a.strides], 0,
                               (max(a.size, 1),), a.ctypes.data)
        assert handle, error_message()
        self.handles.append(handle)
        return handle

    def run(self, q, k, v, pse=None, mask=None, *, scale=0.5, keep_prob=1.0, pre=2147483647,
            nxt=2147483647, heads=None, layout=b"BSND", sparse=0, stats_dtype=np.float32):
        b, t, n, _ = q.shape
        mx = np.zeros((b, n, t, 8), stats_dtype)
        total = np.zeros((b, n, t, 8), stats_dtype)
        out = np.zeros(q.shape[:3] + v.shape[3:], q.dtype)
        ws, ex = ctypes.c_uint64(), ctypes.c_void_p()
        status = LIB.aclnnFlashAttentionScoreGetWorkspaceSize(
            self.tensor(q), self.tensor(k), self.tensor(v), self.tensor(pse), None, None,
            self.tensor(mask), None, scale, keep_prob, pre, nxt, n if heads is None else heads,
            layout, 0, sparse, self.tensor(mx), self.tensor(total), None, self.tensor(out),
            ctypes.byref(ws), ctypes.byref(ex))
        text = error_message()
        if status == 0:
            assert LIB.aclnnFlashAttentionScore(None, 0, ex, None) == 0, error_message()
        return status, text, out, mx, total

    def close(self):
        for handle in self.handles:
            LIB.aclDestroyTensor(handle)


@pytest.fixture
def call():
    c = Forward()
    yield c
    c.close()


def test_the_c_abi_sparse_modes_and_bands_jax_does_not_pass(rng, call):
    """sparseMode 3 (rightDownCausal: j <= i + S - T), 4 (a band about that
    diagonal, one empty for every row included) and 0 with a mask and
    preTokens/nextTokens; strided (transposed) key memory."""
    t, s = 5, 9
    q = rng.normal(size=(1, t, 2, 4)).astype(np.float32)
    kmem = rng.normal(size=(1, s, 4, 2)).astype(np.float32)
    k = kmem.transpose(0, 1, 3, 2)  # [1, S, 2, 4], strides not BSND's
    v = rng.normal(size=(1, s, 2, 4)).astype(np.float32)
    rows, cols = np.arange(t)[:, None], np.arange(s)[None, :]
    causal = np.triu(np.ones((2048, 2048), np.uint8), 1)
    mask = (rng.random((t, s)) < 0.3)
    for kwargs, keep in [
        (dict(sparse=3, mask=causal), cols <= rows + s - t),
        (dict(sparse=4, mask=causal, pre=2, nxt=1),
         (cols - rows - (s - t) <= 1) & (rows + (s - t) - cols <= 2)),
        (dict(sparse=0, mask=mask, pre=1, nxt=3), ~mask & (cols - rows <= 3) & (rows - cols <= 1)),
        # a band past int32's range: every row sees no key (its bounds kept in 64 bits)
        (dict(sparse=4, mask=causal, pre=-2147483647, nxt=2147483647), np.zeros((t, s), bool)),
    ]:
        status, text, out, mx, total = call.run(q, k, v, **kwargs)
        assert status == 0, text
        expected = attention64(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                               None, keep, 0.5, np.zeros(q.shape))[0]
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
        assert (mx[..., :1] == mx).all() and (total[..., :1] == total).all()


@pytest.mark.parametrize("change,message", [
    (dict(layout=b"BNSD"), 'inputLayout "BNSD"'),
    (dict(keep_prob=0.9), "keepProb 0.9"),
    (dict(sparse=6), "sparseMode 6"),
    (dict(sparse=2), "sparseMode 2 needs the compressed causal mask"),
    (dict(heads=3), "headNum 3"),
    (dict(pse=np.zeros((1, 2, 3, 7), np.float32)), "realShiftOptional has shape [1,2,3,7]"),
    (dict(pse=np.zeros((1, 2, 5, 7), np.float16)), "must have the same data type"),
    (dict(mask=np.zeros((5, 6), np.uint8)), "attenMaskOptional has shape [5,6]"),
    (dict(mask=np.zeros((5, 7), np.float32)), "attenMaskOptional has data type FLOAT"),
    (dict(stats_dtype=np.float16), "softmaxMaxOut has data type FLOAT16"),
])
def test_the_c_abi_refuses_what_the_host_provider_does_not_implement(call, change, message):
    q = np.ones((1, 5, 2, 4), np.float32)
    k = v = np.ones((1, 7, 2, 4), np.float32)
    status, text, *_ = call.run(q, k, v, **change)
    expected_status = 161001 if change.get("sparse") == 2 else ACLNN_ERR_PARAM_INVALID
    assert status == expected_status, (status, text)
    assert message in text, text


def test_a_cached_executor_retargets_and_equals_jax_nn(rng):
    """One jitted gradient called with new inputs (the call site's
    repeatable executor re-targeted at new buffers) equals
    jax.nn.dot_product_attention's each time, and creates one executor."""
    loss = lambda attention: jax.jit(jax.value_and_grad(  # noqa: E731
        lambda q, k, v, b, g: jnp.sum(attention(q, k, v, b, is_causal=True) * g),
        argnums=(0, 1, 2, 3)))
    ours, theirs = loss(nn.dot_product_attention), loss(jax.nn.dot_product_attention)
    before = aclnn.runtime_stats()["calls"].get(GRAD, {}).get("get_workspace_size", 0)
    for _ in range(2):
        q, g = (jnp.asarray(rng.normal(size=(2, 50, 4, 16)), jnp.float32) for _ in range(2))
        k, v = (jnp.asarray(rng.normal(size=(2, 50, 2, 16)), jnp.float32) for _ in range(2))
        bias = jnp.asarray(rng.normal(size=(1, 4, 50, 50)), jnp.float32)
        (a, ga), (r, gr) = ours(q, k, v, bias, g), theirs(q, k, v, bias, g)
        np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-4)
        for x, y in zip(ga, gr):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)
    assert aclnn.runtime_stats()["calls"][GRAD]["get_workspace_size"] - before == 1
