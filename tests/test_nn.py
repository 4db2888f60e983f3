"""jax_aclnn.nn, jax_aclnn.optax and the Flax RMSNorm layers (issue 38)
against independent oracles: PyTorch's CPU kernels (torch.nn.functional's
rms_norm, silu and cross_entropy, torch.optim.AdamW), RoPE written in
float64 NumPy, optax and Flax themselves.

In this process the CPU's host provider runs the RMSNorm, SwiGLU, RoPE
and cross-entropy operators (aclnnRmsNorm, aclnnAddRmsNorm,
aclnnRmsNormGrad, aclnnSwiGlu, aclnnSwiGluGrad:
tests/test_host_llm_kernels.py; aclnnRotaryPositionEmbedding(+Grad),
aclnnCrossEntropyLoss(+Grad): tests/test_host_rope_ce.py) and AdamW's
(aclnnApplyAdamWV2: tests/test_host_adamw.py); it has none of the others, whose pure-JAX references run (the custom VJPs and the declared
operators' bindings around them are the ones an NPU runs);
tests/test_nn_standin.py runs the same functions through the test
provider's aclnn operators.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
import torch.nn.functional as F
from conftest import DTYPES, assert_close, f64, tolerance

import jax_aclnn as aclnn
from jax_aclnn import nn
from jax_aclnn import optax as aclnn_optax


def t64(a) -> torch.Tensor:
    return torch.from_numpy(f64(a)).requires_grad_(True)


def grads_of(torch_loss, *tensors):
    torch_loss.backward()
    return [t.grad.numpy() for t in tensors]


# --- rms_norm / add_rms_norm ---------------------------------------------------------

@pytest.mark.parametrize("dtype,weight_dtype", [(d, d) for d in DTYPES] + [
    ("bfloat16", "float32"), ("float16", "float32")])
def test_rms_norm_equals_torch(rng, dtype, weight_dtype):
    x = jnp.asarray(rng.normal(size=(3, 5, 16)), dtype)
    w = jnp.asarray(1 + 0.1 * rng.normal(size=16), weight_dtype)
    y = nn.rms_norm(x, w, epsilon=1e-5)
    assert y.dtype == x.dtype and y.shape == x.shape
    tx, tw = t64(x), t64(w)
    ty = F.rms_norm(tx, (16,), tw, eps=1e-5)
    assert_close(y, ty.detach().numpy(), dtype)
    cot = rng.normal(size=x.shape)
    gx, gw = jax.grad(lambda x, w: jnp.sum(nn.rms_norm(x, w, epsilon=1e-5).astype(jnp.float32)
                                           * cot), (0, 1))(x, w)
    assert gx.dtype == x.dtype and gw.dtype == w.dtype
    want = grads_of((ty * torch.from_numpy(cot)).sum(), tx, tw)
    assert_close(gx, want[0], dtype, scale=4)
    assert_close(gw, want[1], weight_dtype if dtype == "float32" else dtype, scale=16)


def test_rms_norm_over_two_trailing_dimensions(rng):
    x = rng.normal(size=(4, 3, 8)).astype(np.float32)
    w = (1 + 0.1 * rng.normal(size=(3, 8))).astype(np.float32)
    ty = F.rms_norm(torch.from_numpy(x).double(), (3, 8), torch.from_numpy(w).double(), eps=1e-6)
    assert_close(nn.rms_norm(x, w), ty.numpy(), "float32")


def test_add_rms_norm_equals_torch(rng):
    x1, x2 = (rng.normal(size=(6, 32)).astype(np.float32) for _ in range(2))
    w = (1 + 0.1 * rng.normal(size=32)).astype(np.float32)
    c1, c2 = rng.normal(size=(6, 32)), rng.normal(size=(6, 32))

    def loss(x1, x2, w):
        y, s = nn.add_rms_norm(x1, x2, w)
        return jnp.sum(y * c1) + jnp.sum(s * c2)

    t1, t2, tw = t64(x1), t64(x2), t64(w)
    s = t1 + t2
    ty = F.rms_norm(s, (32,), tw, eps=1e-6)
    tl = (ty * torch.from_numpy(c1)).sum() + (s * torch.from_numpy(c2)).sum()
    y, total = nn.add_rms_norm(x1, x2, w)
    assert_close(y, ty.detach().numpy(), "float32")
    assert_close(total, s.detach().numpy(), "float32")
    for g, w_ in zip(jax.grad(loss, (0, 1, 2))(x1, x2, w), grads_of(tl, t1, t2, tw)):
        assert_close(g, w_, "float32", scale=8)


# --- swiglu -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [-1, 1])
def test_swiglu_equals_torch(rng, dtype, axis):
    x = jnp.asarray(rng.normal(size=(4, 6, 10)), dtype)
    tx = t64(x)
    a, b = torch.chunk(tx, 2, dim=axis)
    ty = F.silu(a) * b
    y = nn.swiglu(x, axis=axis)
    assert y.dtype == x.dtype
    assert_close(y, ty.detach().numpy(), dtype)
    cot = rng.normal(size=ty.shape)
    gx = jax.grad(lambda x: jnp.sum(nn.swiglu(x, axis=axis).astype(jnp.float32) * cot))(x)
    assert_close(gx, grads_of((ty * torch.from_numpy(cot)).sum(), tx)[0], dtype, scale=4)


# --- rotary_embedding ------------------------------------------------------------------

def rope64(x, cos, sin, mode):
    """RoPE in float64 NumPy, from its definition (not the library's code)."""
    x, cos, sin = (np.asarray(v, np.float64) for v in (x, cos, sin))
    if mode == "half":
        h = x.shape[-1] // 2
        rotated = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    else:
        rotated = np.empty_like(x)
        rotated[..., 0::2], rotated[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    return x * cos + rotated * sin


def rope_tables(seq, dim, mode, base=10000.0):
    inv = base ** (-np.arange(0, dim, 2) / dim)
    angles = np.arange(seq)[:, None] * inv[None, :]
    angles = (np.concatenate([angles, angles], -1) if mode == "half"
              else np.repeat(angles, 2, axis=-1))
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


@pytest.mark.parametrize("mode", ["half", "interleave"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_embedding_equals_float64(rng, mode, dtype):
    x = jnp.asarray(rng.normal(size=(2, 6, 3, 8)), dtype)
    cos, sin = (t[:, None] for t in rope_tables(6, 8, mode))
    y = nn.rotary_embedding(x, cos, sin, mode=mode)
    assert y.dtype == x.dtype
    want = rope64(f64(x), f64(jnp.asarray(cos, dtype)), f64(jnp.asarray(sin, dtype)), mode)
    assert_close(y, want, dtype, scale=2)
    # the transpose of a rotation: x = rotate_back(y) under the inverse angles
    back = nn.rotary_embedding(y.astype(jnp.float32), cos, -sin, mode=mode)
    assert_close(back, f64(x), dtype, scale=4)


@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_rotary_embedding_gradients_equal_float64(rng, mode):
    x = rng.normal(size=(2, 5, 2, 8)).astype(np.float32)
    cos, sin = (rng.normal(size=(1, 5, 1, 8)).astype(np.float32) for _ in range(2))
    cot = rng.normal(size=x.shape)
    gx, gc, gs = jax.grad(lambda *a: jnp.sum(nn.rotary_embedding(*a, mode=mode) * cot),
                          (0, 1, 2))(x, cos, sin)
    # float64 gradients of the float64 formula by central differences along random directions
    for got, i in ((gx, 0), (gc, 1), (gs, 2)):
        args = [np.asarray(a, np.float64) for a in (x, cos, sin)]
        d = rng.normal(size=args[i].shape)
        h = 1e-6
        plus, minus = [a.copy() for a in args], [a.copy() for a in args]
        plus[i], minus[i] = args[i] + h * d, args[i] - h * d
        numeric = (np.sum(rope64(*plus, mode) * cot) - np.sum(rope64(*minus, mode) * cot)) / (2 * h)
        np.testing.assert_allclose(np.sum(np.asarray(got, np.float64) * d), numeric, rtol=1e-4)


@pytest.mark.parametrize("shape", [(6, 1, 8), (2, 6, 1, 8), (1, 1, 1, 8), (2, 6, 3, 8), (6, 3, 8)])
def test_rotary_embedding_broadcasts_cos_and_sin(rng, shape):
    x = rng.normal(size=(2, 6, 3, 8)).astype(np.float32)
    cos, sin = (rng.normal(size=shape).astype(np.float32) for _ in range(2))
    assert_close(nn.rotary_embedding(x, cos, sin), rope64(x, cos, sin, "half"), "float32")


# --- cross entropy --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_equals_torch_and_optax(rng, dtype):
    logits = jnp.asarray(rng.normal(size=(3, 4, 11)) * 3, dtype)
    labels = jnp.asarray(rng.integers(0, 11, (3, 4)), jnp.int32)
    loss = nn.softmax_cross_entropy_with_integer_labels(logits, labels)
    assert loss.shape == (3, 4) and loss.dtype == logits.dtype
    tl = t64(logits)
    tloss = F.cross_entropy(tl.reshape(-1, 11), torch.from_numpy(np.array(labels)).reshape(-1).long(),
                            reduction="none").reshape(3, 4)
    assert_close(loss, tloss.detach().numpy(), dtype, scale=4)
    assert_close(loss, f64(optax.softmax_cross_entropy_with_integer_labels(logits, labels)),
                 dtype, scale=4)
    cot = rng.normal(size=(3, 4))
    g = jax.grad(lambda l: jnp.sum(nn.softmax_cross_entropy_with_integer_labels(l, labels)
                                   .astype(jnp.float32) * cot))(logits)
    assert_close(g, grads_of((tloss * torch.from_numpy(cot)).sum(), tl)[0], dtype, scale=4)


def test_bad_arguments_are_refused_with_the_argument_names():
    x = jnp.ones((2, 8))
    with pytest.raises(ValueError, match="weight of shape \\(4,\\) must be x's trailing"):
        nn.rms_norm(x, jnp.ones(4))
    with pytest.raises(TypeError, match="must be float32, float16 or bfloat16, got int32"):
        nn.swiglu(jnp.ones((2, 4), jnp.int32))
    with pytest.raises(ValueError, match="odd"):
        nn.swiglu(jnp.ones((2, 5)))
    with pytest.raises(ValueError, match="mode must be one of"):
        nn.rotary_embedding(jnp.ones((1, 2, 1, 4)), jnp.ones((2, 4)), jnp.ones((2, 4)), mode="x")
    with pytest.raises(ValueError, match="labels of shape"):
        nn.softmax_cross_entropy_with_integer_labels(jnp.ones((2, 3)), jnp.zeros((3,), jnp.int32))
    with pytest.raises(TypeError, match="one dtype"):
        nn.add_rms_norm(x, x.astype(jnp.bfloat16), jnp.ones(8))


# --- AdamW ------------------------------------------------------------------------------

def test_adamw_equals_torch_and_optax(rng):
    params = {"w": rng.normal(size=(5, 3)).astype(np.float32),
              "b": rng.normal(size=(3,)).astype(np.float32)}
    grads = [jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), params)
             for _ in range(4)]
    kwargs = dict(b1=0.8, b2=0.95, eps=1e-6, weight_decay=0.05)
    tx, ref = aclnn_optax.adamw(3e-2, **kwargs), optax.adamw(3e-2, **kwargs)
    ours, theirs = params, params
    s_ours, s_ref = tx.init(params), ref.init(params)
    step = jax.jit(lambda p, g, s: (lambda u, s: (optax.apply_updates(p, u), s))(
        *tx.update(g, s, p)))
    torch_params = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    opt = torch.optim.AdamW(torch_params.values(), lr=3e-2, betas=(0.8, 0.95), eps=1e-6,
                            weight_decay=0.05)
    for g in grads:
        ours, s_ours = step(ours, g, s_ours)
        u, s_ref = ref.update(g, s_ref, theirs)
        theirs = optax.apply_updates(theirs, u)
        for k, p in torch_params.items():
            p.grad = torch.from_numpy(g[k])
        opt.step()
    for k in params:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours[k], torch_params[k].detach().numpy(), rtol=1e-5, atol=1e-6)
    assert int(s_ours.count) == 4


def test_adamw_takes_a_schedule_and_scalar_parameters(rng):
    schedule = optax.linear_schedule(1e-2, 1e-3, 5)
    params = {"s": np.float32(0.5), "v": rng.normal(size=(4,)).astype(np.float32)}
    tx, ref = aclnn_optax.adamw(schedule), optax.adamw(schedule)
    a, b, sa, sb = params, params, tx.init(params), ref.init(params)
    for _ in range(3):
        g = jax.tree.map(lambda p: np.float32(0.3) * np.ones_like(p), params)
        u, sa = tx.update(g, sa, a)
        a = optax.apply_updates(a, u)
        u, sb = ref.update(g, sb, b)
        b = optax.apply_updates(b, u)
    for k in params:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-7)


# --- Flax -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_flax_rms_norm_layers_are_drop_ins(rng, dtype):
    from flax import linen, nnx

    from jax_aclnn.flax import linen as aclnn_linen
    from jax_aclnn.flax import nnx as aclnn_nnx

    x = jnp.asarray(rng.normal(size=(4, 3, 16)), dtype)
    ours, theirs = aclnn_nnx.RMSNorm(16, rngs=nnx.Rngs(0)), nnx.RMSNorm(16, rngs=nnx.Rngs(0))
    assert jax.tree.structure(nnx.state(ours)) == jax.tree.structure(nnx.state(theirs))
    assert ours(x).dtype == theirs(x).dtype
    assert_close(ours(x), f64(theirs(x)), dtype)
    lo, lt = aclnn_linen.RMSNorm(), linen.RMSNorm()
    vo, vt = lo.init(jax.random.key(0), x), lt.init(jax.random.key(0), x)
    assert jax.tree.structure(vo) == jax.tree.structure(vt)
    go = jax.grad(lambda v: jnp.sum(lo.apply(v, x).astype(jnp.float32) ** 2))(vo)
    gt = jax.grad(lambda v: jnp.sum(lt.apply(v, x).astype(jnp.float32) ** 2))(vt)
    assert_close(go["params"]["scale"], f64(gt["params"]["scale"]), dtype, scale=16)


# --- transformations ---------------------------------------------------------------------

def test_the_functions_under_jit_vmap_and_grad(rng):
    x = rng.normal(size=(3, 2, 4, 2, 8)).astype(np.float32)
    w = np.ones(8, np.float32)
    cos, sin = (t[:, None] for t in rope_tables(4, 8, "half"))

    def block(x):
        h = nn.rotary_embedding(nn.rms_norm(x, w), cos, sin)
        return jnp.sum(nn.swiglu(h) ** 2)

    per_example = jax.jit(jax.vmap(jax.value_and_grad(block)))(x)
    with aclnn.reference_path():
        want = jax.vmap(jax.value_and_grad(block))(x)
    for a, b in zip(jax.tree.leaves(per_example), jax.tree.leaves(want)):
        # the host kernels against the references: float32 sums in another order
        np.testing.assert_allclose(a, b, rtol=tolerance("float32"),
                                   atol=tolerance("float32") * np.max(np.abs(b)))


# --- the model of tests/llm_model.py -----------------------------------------------------

def test_the_model_equals_flax_and_optax_step_for_step():
    import llm_model as m

    ours, params_ours = m.train(m.ACLNN, steps=4)
    theirs, params_theirs = m.train(m.PLAIN, steps=4)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(params_ours), jax.tree.leaves(params_theirs)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_exported_step_holds_one_aclnn_call_per_use_for_the_npu():
    import llm_model as m
    from flax import nnx

    model, optimizer = m.make(m.ACLNN)
    graphdef, state = nnx.split((model, optimizer))
    leaves, tree = jax.tree.flatten(state)  # arrays: what a serialized program takes
    x, y = next(m.batches(1))

    def step(leaves, x, y):
        model, optimizer = nnx.merge(graphdef, jax.tree.unflatten(tree, leaves))
        loss = m.train_step(model, optimizer, x, y)
        return loss, jax.tree.leaves(nnx.state((model, optimizer)))

    exported = jax.export.export(jax.jit(step), platforms=["cpu", "npu"],
                                 disabled_checks=aclnn.export_disabled_checks())(leaves, x, y)
    text = exported.mlir_module()
    count = lambda target: text.count(f"stablehlo.custom_call @{target}(")  # noqa: E731
    per_use = {  # the NPU's calls: one per use
        "aclnn_nn_rms_norm": 2, "aclnn_nn_rms_norm_grad": 2, "aclnn_nn_swiglu": 1,
        "aclnn_nn_swiglu_grad": 1, "aclnn_nn_rotary_position_embedding_1s1d": 1,
        "aclnn_nn_rotary_position_embedding_grad_1s1d": 1, "aclnn_nn_cross_entropy_loss": 1,
        "aclnn_nn_cross_entropy_loss_grad": 1, "aclnn_optax_apply_adam_w_v2": 6}
    # the CPU's branch calls the operators the host provider has too (issue 46)
    on_the_cpu_too = {"aclnn_nn_rms_norm", "aclnn_nn_rms_norm_grad", "aclnn_nn_swiglu",
                      "aclnn_nn_swiglu_grad", "aclnn_nn_rotary_position_embedding_1s1d",
                      "aclnn_nn_rotary_position_embedding_grad_1s1d",
                      "aclnn_nn_cross_entropy_loss", "aclnn_nn_cross_entropy_loss_grad",
                      "aclnn_optax_apply_adam_w_v2"}
    assert {t: count(t) for t in per_use} == {
        t: n * (2 if t in on_the_cpu_too else 1) for t, n in per_use.items()}
    assert len(exported.serialize()) > 0


# --- attention ------------------------------------------------------------------------------

ATTENTION_CASES = [  # (query heads, key/value heads, causal, masked, biased)
    (4, 4, False, False, False), (4, 2, True, False, False), (4, 1, False, True, True),
    (2, 2, True, True, False), (6, 3, False, False, True)]


@pytest.mark.parametrize("n,k,causal,masked,biased", ATTENTION_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_dot_product_attention_equals_jax(rng, dtype, n, k, causal, masked, biased):
    q = jnp.asarray(rng.normal(size=(2, 5, n, 8)), dtype)
    key, value = (jnp.asarray(rng.normal(size=(2, 7, k, 8)), dtype) for _ in range(2))
    mask = None
    if masked:
        mask = rng.random((2, 1, 5, 7)) > 0.3
        mask[..., 0] = True  # every query attends to some key
    bias = jnp.asarray(rng.normal(size=(1, n, 5, 7)), dtype) if biased else None
    cot = rng.normal(size=(2, 5, n, 8))

    def loss(attention, *args):
        out = attention(*args, mask, is_causal=causal)
        return jnp.sum(out.astype(jnp.float32) * cot)

    argnums = (1, 2, 3, 4) if biased else (1, 2, 3)
    ours = jax.value_and_grad(loss, argnums)(nn.dot_product_attention, q, key, value, bias)
    want = jax.value_and_grad(loss, argnums)(
        jax.nn.dot_product_attention, *(a if a is None else a.astype(jnp.float32)
                                         for a in (q, key, value, bias)))
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(want)):
        assert_close(a, f64(b), dtype, scale=16)


def test_dot_product_attention_under_vmap_is_one_call_and_right(rng):
    q = rng.normal(size=(3, 2, 6, 4, 8)).astype(np.float32)
    kv = rng.normal(size=(3, 2, 6, 2, 8)).astype(np.float32)

    def loss(attention):
        return lambda q, kv: jnp.sum(jnp.sin(attention(q, kv, kv, is_causal=True)))

    jaxpr = jax.make_jaxpr(jax.vmap(jax.grad(loss(nn.dot_product_attention), (0, 1))))(q, kv)
    assert "while" not in str(jaxpr)
    ours = jax.vmap(jax.grad(loss(nn.dot_product_attention), (0, 1)))(q, kv)
    want = jax.vmap(jax.grad(loss(jax.nn.dot_product_attention), (0, 1)))(q, kv)
    for a, b in zip(ours, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_dot_product_attention_refuses_bad_arguments():
    q = jnp.ones((1, 2, 3, 4))
    with pytest.raises(ValueError, match="multiple of K"):
        nn.dot_product_attention(q, jnp.ones((1, 2, 2, 4)), jnp.ones((1, 2, 2, 4)))
    with pytest.raises(TypeError, match="mask must be boolean"):
        nn.dot_product_attention(q, q, q, mask=jnp.ones((2, 2)))


# --- ragged_dot -----------------------------------------------------------------------------

@pytest.mark.parametrize("x64", [False, True])
def test_ragged_dot_equals_jax(rng, x64):
    from conftest import enable_x64

    lhs = rng.normal(size=(10, 4)).astype(np.float32)
    rhs = rng.normal(size=(3, 4, 5)).astype(np.float32)
    sizes = np.array([3, 0, 5], np.int32)  # an empty group, two rows past the total
    loss = lambda dot: lambda a, b: jnp.sum(jnp.sin(dot(a, b, sizes)))  # noqa: E731
    with enable_x64(x64):
        ours = jax.value_and_grad(loss(nn.ragged_dot), (0, 1))(lhs, rhs)
        want = jax.value_and_grad(loss(jax.lax.ragged_dot), (0, 1))(lhs, rhs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def flash_attention_calls(fn, *args):
    """The FlashAttentionScore equations of ``fn``'s jaxpr (inside custom VJPs too)."""
    def walk(jaxpr):
        for e in jaxpr.eqns:
            if "flash_attention_score" in str(e.primitive):
                yield e
            for v in e.params.values():
                inner = getattr(v, "jaxpr", v)
                if hasattr(inner, "eqns"):
                    yield from walk(inner)

    return list(walk(jax.make_jaxpr(fn)(*args).jaxpr))


@pytest.mark.parametrize("mask_shape,passed", [
    ((2, 1, 5, 7), (2, 1, 5, 7)), ((5, 7), (5, 7)), ((1, 1, 5, 7), (5, 7)),
    ((2, 1, 1, 7), (2, 1, 5, 7)), ((2, 4, 5, 7), (2, 4, 5, 7))])
def test_attention_passes_masks_in_the_smallest_shape_cann_takes(rng, mask_shape, passed):
    """A mask is broadcast only as far as CANN's shapes require (a padding
    mask (B, 1, 1, S) becomes (B, 1, T, S), never (B, N, T, S))."""
    q, k = jnp.ones((2, 5, 4, 8)), jnp.ones((2, 7, 4, 8))
    mask = rng.random(mask_shape) > 0.2
    calls = flash_attention_calls(lambda q, k: nn.dot_product_attention(q, k, k, mask=mask), q, k)
    shapes = [tuple(v.aval.shape) for e in calls for v in e.invars if v.aval.dtype == jnp.bool_]
    assert shapes == [passed], shapes


def test_attention_bias_keeps_cann_shapes(rng):
    q, k = jnp.ones((2, 5, 4, 8)), jnp.ones((2, 7, 4, 8))
    for bias_shape, passed in [((2, 4, 1, 7), (2, 4, 1, 7)), ((1, 4, 5, 7), (1, 4, 5, 7)),
                               ((5, 7), (1, 4, 5, 7))]:
        bias = rng.normal(size=bias_shape).astype(np.float32)
        (eqn,) = flash_attention_calls(lambda q, k: nn.dot_product_attention(q, k, k, bias), q, k)
        assert tuple(eqn.invars[3].aval.shape) == passed
