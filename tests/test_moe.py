"""Mixture of experts: top_k_routing, moe_permute, moe_unpermute (and
moe_ffn) against a MaxText-shaped pure-JAX reference written here
(``jax.lax.top_k`` + ``jax.nn.softmax``, an argsort permutation,
``jax.lax.ragged_dot``, the weighted combine), in values and gradients,
under jit, grad and vmap."""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, assert_close
from declared_operators import LIBRARY

from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_aclnn import reference_path
from jax_aclnn.nn import moe_ffn, moe_permute, moe_unpermute, ragged_dot, top_k_routing
from npu_runtime_harness import NpuProcess

F32 = jnp.float32


# -- the reference (MaxText's layers/moe.py, written out) -------------------

def ref_routing(logits, k, renormalize=False):
    if renormalize:
        top, ids = jax.lax.top_k(logits, k)
        return jax.nn.softmax(top.astype(F32), -1).astype(logits.dtype), ids
    w, ids = jax.lax.top_k(jax.nn.softmax(logits.astype(F32), -1), k)
    return w.astype(logits.dtype), ids


def ref_permute(tokens, ids, num_experts):
    order = jnp.argsort(ids.reshape(-1), stable=True)
    return (tokens[order // ids.shape[1]], jnp.argsort(order),
            jnp.bincount(ids.reshape(-1), length=num_experts))


def ref_unpermute(permuted, sorted_indices, weights):
    t, k = weights.shape
    rows = permuted.astype(F32)[sorted_indices].reshape(t, k, -1)
    return jnp.einsum("tkh,tk->th", rows, weights.astype(F32)).astype(permuted.dtype)


def _normal(seed, shape, dtype=F32):
    """Normal values (NumPy's generator: no compiled kernel per shape)."""
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), F32).astype(dtype)


def _pipeline(routing, permute, unpermute):
    """A loss through the three steps (a scaled identity 'expert' between
    permute and unpermute, so every gradient path is used)."""
    def loss(tokens, logits, k, num_experts, renormalize):
        w, ids = routing(logits, k, renormalize=renormalize)
        p, si, _ = permute(tokens, ids, num_experts)
        y = unpermute(p * 1.5, si, w)
        return jnp.sum(y.astype(F32) * jnp.cos(jnp.arange(y.size, dtype=F32)).reshape(y.shape))
    return loss


OURS = _pipeline(top_k_routing, moe_permute, moe_unpermute)
REF = _pipeline(ref_routing, ref_permute, ref_unpermute)


# -- top_k_routing ------------------------------------------------------------

@pytest.mark.parametrize("dtype, renormalize", [("float32", False), ("float16", True),
                                                 ("bfloat16", False)])
def test_routing_values_and_gradient(dtype, renormalize):
    logits = _normal(0, (12, 8), dtype)
    cot = _normal(1, (12, 3))
    fn = jax.jit(lambda f, x: jax.value_and_grad(
        lambda x: jnp.sum(f(x, 3, renormalize=renormalize)[0].astype(F32) * cot),
        has_aux=False)(x), static_argnums=0)
    (w, ids), (rw, rids) = top_k_routing(logits, 3, renormalize=renormalize), \
        ref_routing(logits, 3, renormalize)
    assert w.dtype == logits.dtype and ids.dtype == jnp.int32
    np.testing.assert_array_equal(ids, rids)
    assert_close(w, np.asarray(rw.astype(F32)), dtype)
    (v, g), (rv, rg) = fn(top_k_routing, logits), fn(ref_routing, logits)
    assert g.dtype == logits.dtype
    assert_close(v, float(rv), dtype)
    assert_close(g, np.asarray(rg.astype(F32)), dtype)


def test_routing_ties_and_k_extremes():
    """Ties (equal logits, a constant row) broken as jax.lax.top_k breaks
    them; k = 1 and k = E."""
    logits = jnp.array([[0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 2.0, 1.0], [3.0, -1.0, 3.0, 3.0],
                        [0.5, 0.25, 0.5, 0.25]], F32)
    both = jax.jit(lambda x: [(top_k_routing(x, k, renormalize=r), ref_routing(x, k, r))
                              for k in (1, 2, 4) for r in (False, True)])
    for (w, ids), (rw, rids) in both(logits):
        np.testing.assert_array_equal(ids, rids)
        np.testing.assert_allclose(w, rw, rtol=1e-6)


def test_routing_k_0_calls_no_operator():
    """k = 0 gives empty results without an aclnn call (as torch_npu)."""
    w, ids = top_k_routing(jnp.zeros((3, 4)), 0)
    assert (w.shape, ids.shape, ids.dtype) == ((3, 0), (3, 0), jnp.int32)
    assert "nn_moe_gating" not in str(jax.make_jaxpr(lambda x: top_k_routing(x, 0))(
        jnp.zeros((3, 4))))


def test_routing_vmap_and_leading_dims():
    logits = _normal(2, (3, 5, 6))
    (w, ids), (rw, rids), (w3, ids3) = jax.jit(lambda x: (
        jax.vmap(lambda r: top_k_routing(r, 2))(x), jax.vmap(lambda r: ref_routing(r, 2))(x),
        top_k_routing(x, 2)))(logits)  # the last: (B, S, E) rows
    np.testing.assert_array_equal(ids, rids)
    np.testing.assert_allclose(w, rw, rtol=1e-6)
    np.testing.assert_array_equal(ids3, rids)
    np.testing.assert_allclose(w3, rw, rtol=1e-6)


# -- moe_permute / moe_unpermute ---------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_permute_unpermute_values(dtype):
    """Experts 4 and 5 receive no token."""
    tokens = _normal(3, (10, 8), dtype)
    ids = jnp.asarray(np.random.default_rng(4).integers(0, 4, (10, 3)), jnp.int32)
    weights = _normal(5, (10, 3), dtype)
    (p, si, gs), y = jax.jit(lambda t, i, w: (moe_permute(t, i, 6),
                                              moe_unpermute(*moe_permute(t, i, 6)[:2], w)))(
        tokens, ids, weights)
    rp, rsi, rgs = ref_permute(tokens, ids, 6)
    assert (si.dtype, gs.dtype, gs.shape) == (jnp.int32, jnp.int32, (6,))
    np.testing.assert_array_equal(p, rp)
    np.testing.assert_array_equal(si, rsi)
    np.testing.assert_array_equal(gs, rgs)
    assert y.dtype == tokens.dtype
    assert_close(y, np.asarray(ref_unpermute(rp, rsi, weights).astype(F32)), dtype)


@pytest.mark.parametrize("dtype, k, renormalize", [("float32", 1, False), ("float16", 2, True),
                                                    ("bfloat16", 4, False)])
def test_pipeline_gradients(dtype, k, renormalize):
    """Gradients in tokens and logits through routing, permute and
    unpermute (k = 1 and k = E included)."""
    tokens, logits = _normal(6, (9, 5), dtype), _normal(7, (9, 4), dtype)
    grad = jax.jit(jax.value_and_grad(lambda f, *a: f(*a, k, 4, renormalize), argnums=(1, 2)),
                   static_argnums=0)
    (v, (gt, gl)), (rv, (rgt, rgl)) = grad(OURS, tokens, logits), grad(REF, tokens, logits)
    assert (gt.dtype, gl.dtype) == (tokens.dtype, logits.dtype)
    assert_close(v, float(rv), dtype, scale=4)
    assert_close(gt, np.asarray(rgt.astype(F32)), dtype, scale=4)
    assert_close(gl, np.asarray(rgl.astype(F32)), dtype, scale=4)


def test_pipeline_vmap_of_grad():
    tokens, logits = _normal(8, (2, 7, 4)), _normal(9, (2, 7, 5))
    per_example = jax.jit(jax.vmap(jax.grad(lambda f, *a: f(*a, 2, 5, False), argnums=(1, 2)),
                                   in_axes=(None, 0, 0)), static_argnums=0)
    for ours, ref in zip(per_example(OURS, tokens, logits), per_example(REF, tokens, logits)):
        np.testing.assert_allclose(ours, ref, rtol=2e-5, atol=2e-6)


def test_errors():
    x = jnp.zeros((4, 3))
    with pytest.raises(TypeError, match="logits"):
        top_k_routing(jnp.zeros((4, 3), jnp.int32), 1)
    with pytest.raises(ValueError, match="k=4"):
        top_k_routing(x, 4)
    with pytest.raises(TypeError, match="expert_ids"):
        moe_permute(x, jnp.zeros((4, 2)), 3)
    with pytest.raises(ValueError, match="expert_ids"):
        moe_permute(x, jnp.zeros((3, 2), jnp.int32), 3)
    with pytest.raises(ValueError, match="weights"):
        moe_unpermute(jnp.zeros((8, 3)), jnp.arange(8), jnp.zeros((4, 3)))
    with pytest.raises(TypeError, match="sorted_indices"):
        moe_unpermute(jnp.zeros((8, 3)), jnp.zeros(8), jnp.zeros((4, 2)))


# -- moe_ffn -----------------------------------------------------------------

def ref_moe(x, router, w_gate, w_up, w_down, k, keep=None):
    """MaxText's layer; ``keep`` (T, k) masks dropped choices (they add 0)."""
    logits = x @ router
    w, ids = ref_routing(logits, k)
    if keep is not None:
        w = jnp.where(keep, w, 0)
    p, si, gs = ref_permute(x, ids, router.shape[1])
    h = jax.nn.silu(jax.lax.ragged_dot(p, w_gate, gs)) * jax.lax.ragged_dot(p, w_up, gs)
    y = ref_unpermute(jax.lax.ragged_dot(h, w_down, gs), si, w)
    probs = jax.nn.softmax(logits, -1)
    f = jnp.bincount(ids.reshape(-1), length=router.shape[1]) / ids.size
    return y, router.shape[1] * jnp.sum(f * jnp.mean(probs, 0))


def _layer(t=16, h=8, e=8, f=12):
    return (_normal(10, (t, h)), _normal(11, (h, e)), _normal(12, (e, h, f)) / 3,
            _normal(13, (e, h, f)) / 3, _normal(14, (e, f, h)) / 3)


def _loss(layer):
    def loss(*params):
        y, lb = layer(*params)
        return jnp.sum(y * jnp.cos(jnp.arange(y.size, dtype=F32)).reshape(y.shape)) + 0.1 * lb
    return loss


def _one_device(*params):
    y, aux = moe_ffn(*params, k=2)
    return y, aux["load_balancing_loss"]


#: the single-device layer's loss and gradients, and the reference's (one
#: compile each for the tests)
ONE_DEVICE = jax.jit(jax.value_and_grad(_loss(_one_device), argnums=tuple(range(5))))
REFERENCE = jax.jit(jax.value_and_grad(_loss(lambda *p: ref_moe(*p, 2)), argnums=tuple(range(5))))


def test_moe_ffn_equals_the_reference_layer():
    params = _layer()
    (v, g), (rv, rg) = ONE_DEVICE(*params), REFERENCE(*params)
    np.testing.assert_allclose(v, rv, rtol=2e-5)
    for a, b in zip(g, rg):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


def _expert_parallel(mesh, dispatcher, capacity_factor=None):
    def local(*params):
        y, aux = moe_ffn(*params, k=2, expert_axis="ep", dispatcher=dispatcher,
                         capacity_factor=capacity_factor)
        return y, aux["load_balancing_loss"], aux["dropped_tokens"]
    return jax.shard_map(local, mesh=mesh, in_specs=(P("ep"), P(), P("ep"), P("ep"), P("ep")),
                         out_specs=(P("ep"), P(), P()))


def _drop_mask(x, router, devices, capacity):
    """The choices kept: per source device's block of tokens and per
    expert, the first ``capacity`` in token order (numpy)."""
    _, ids = ref_routing(x @ router, 2)
    ids = np.asarray(ids).reshape(devices, -1)  # each device's choices in order
    keep = np.zeros_like(ids, bool)
    for d in range(devices):
        for e in range(router.shape[1]):
            where = np.flatnonzero(ids[d] == e)
            keep[d, where[:capacity]] = True
    return keep.reshape(x.shape[0], 2)


@pytest.mark.parametrize("dispatcher, axis_type", [("all_to_all", AxisType.Auto),
                                                   ("all_gather", AxisType.Explicit)])
def test_expert_parallel_equals_one_device(dispatcher, axis_type):
    """8 experts on 4 devices, 2 each: loss and gradients equal the
    single-device call's, with no expert weight gathered; a capacity below
    the worst case drops the choices beyond it (counted) and changes only
    their own tokens."""
    params = _layer()
    (rv, rg) = ONE_DEVICE(*params)
    mesh = jax.make_mesh((4,), ("ep",), axis_types=(axis_type,), devices=jax.devices()[:4])
    specs = (P("ep"), P(), P("ep"), P("ep"), P("ep"))
    with jax.set_mesh(mesh):
        sharded = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(params, specs)]
        ep = _expert_parallel(mesh, dispatcher)
        # capacity ceil(0.5 * 4 * 2 / 8) = 1 row per expert and source device
        dropping = _expert_parallel(mesh, dispatcher, capacity_factor=0.5)
        both = jax.jit(lambda *p: (jax.value_and_grad(_loss(lambda *q: ep(*q)[:2]),
                                                      argnums=tuple(range(5)))(*p), dropping(*p)))
        compiled = both.lower(*sharded).compile()
        (v, g), (y, _, dropped) = compiled(*sharded)
    gathers = [line for line in compiled.as_text().splitlines() if "all-gather" in line]
    assert not [line for line in gathers if ",8,12]" in line or ",12,8]" in line], gathers
    np.testing.assert_allclose(v, rv, rtol=1e-5)
    for a, b in zip(g, rg):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    keep = _drop_mask(params[0], params[1], 4, 1)
    assert int(dropped) == int((~keep).sum()) > 0
    want, _ = jax.jit(ref_moe, static_argnums=5)(*params, 2, jnp.asarray(keep))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


# -- ragged_dot: per-example tokens, the group list in JAX's 32-bit mode --------

@pytest.mark.parametrize("path", ["aclnn", "reference"])
def test_ragged_dot_vmap_of_batched_tokens_with_unbatched_weights(path):
    """An MoE layer evaluated per example: jax.lax.ragged_dot raises
    NotImplementedError there; ours equals it example by example, values
    and gradients, with the group sizes batched or not, on the references'
    path too (JAX_ACLNN_REFERENCE=1 train-lm --experts raised JAX's error)."""
    with reference_path() if path == "reference" else contextlib.nullcontext():
        _ragged_dot_vmap_equals_per_example()


def _ragged_dot_vmap_equals_per_example():
    lhs, rhs = _normal(20, (3, 10, 4)), _normal(21, (3, 4, 5))
    sizes = jnp.array([[3, 0, 5], [10, 0, 0], [1, 2, 3]], jnp.int32)

    def loss(dot, a, b, s):
        return jnp.sum(jnp.sin(dot(a, b, s)))

    per_example = jax.jit(jax.vmap(jax.value_and_grad(functools.partial(loss, ragged_dot),
                                                      (0, 1)), in_axes=(0, None, 0)))
    fixed = jax.jit(jax.vmap(lambda a: ragged_dot(a, rhs, sizes[0])))
    (v, (ga, gb)), y = per_example(lhs, rhs, sizes), fixed(lhs)
    for i in range(3):
        rv, (rga, rgb) = jax.value_and_grad(functools.partial(loss, jax.lax.ragged_dot),
                                            (0, 1))(lhs[i], rhs, sizes[i])
        np.testing.assert_allclose(v[i], rv, rtol=1e-5)
        np.testing.assert_allclose(ga[i], rga, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gb[i], rgb, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y[i], jax.lax.ragged_dot(lhs[i], rhs, sizes[0]), rtol=1e-5,
                                   atol=1e-6)


def test_ragged_dot_passes_an_int64_group_list_in_32_bit_mode():
    """CANN's group list is INT64 (aclnnGroupedMatmulV4.md): the declared
    operator gets one without jax_enable_x64."""
    assert not jax.config.jax_enable_x64
    jaxpr = jax.make_jaxpr(lambda a, b: ragged_dot(a, b, jnp.array([1, 2], jnp.int32)))(
        jnp.zeros((3, 4)), jnp.zeros((2, 4, 5)))
    assert "nn_grouped_matmul_v4" in str(jaxpr) and "i64[2]" in str(jaxpr), jaxpr


# -- through the test provider's aclnn operators -------------------------------

def moe_layer_calls():
    """In a process whose CANN is the test provider (tests/llm_standin.py),
    in JAX's 32-bit mode: the layer's value and gradients and the aclnn
    calls of one forward and backward."""
    import jax_aclnn as aclnn
    import llm_standin

    llm_standin.route_through_the_test_provider()
    params = _layer()
    aclnn.reset_runtime_stats()
    ours = jax.block_until_ready(ONE_DEVICE(*params))
    calls = {op: n["execute"] for op, n in aclnn.runtime_stats()["calls"].items() if n["execute"]}
    return jax.tree.map(np.asarray, ours), calls, jax.config.jax_enable_x64


@pytest.mark.skipif(not LIBRARY.exists(),
                    reason="the test provider is built with JAX_ACLNN_TESTING=ON")
def test_moe_layer_runs_one_aclnn_call_per_use_through_the_test_provider():
    process = NpuProcess({"JAX_PLATFORMS": "cpu"})
    try:
        ours, calls, x64 = process.run(moe_layer_calls)
    finally:
        process.close()
    assert not x64
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(REFERENCE(*_layer()))):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)
    # forward: routing, permute, 3 grouped products, unpermute; backward: the
    # two grads and 6 grouped products (rows' and weights' per product)
    assert calls == {"aclnnMoeGatingTopKSoftmaxV2": 1, "aclnnMoeTokenPermute": 1,
                     "aclnnMoeTokenPermuteGrad": 1, "aclnnMoeTokenUnpermute": 1,
                     "aclnnMoeTokenUnpermuteGrad": 1, "aclnnGroupedMatmulV4": 9}, calls
