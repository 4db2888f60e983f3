"""Rules of jax_aclnn.nn that a CPU checks (issue 44): the dtypes CANN
takes refused at trace time, per-example gradients in one aclnn call per
use, add_rms_norm's mixed precision; against PyTorch's CPU kernels and JAX's
own functions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close, enable_x64, f64

from jax_aclnn import nn


def _f64_calls():
    """Each function with one float64 operand (the argument named), the
    others as CANN takes them."""
    x, w = np.ones((2, 8, 8)), np.ones(8)
    f32 = lambda a: a.astype(np.float32)  # noqa: E731
    labels = np.zeros((2, 3), np.int32)
    return [
        ("rms_norm", "x", lambda: nn.rms_norm(x, f32(w))),
        ("rms_norm", "weight", lambda: nn.rms_norm(f32(x), w)),
        ("add_rms_norm", "x1", lambda: nn.add_rms_norm(x, x, w)),
        ("add_rms_norm", "weight", lambda: nn.add_rms_norm(f32(x), f32(x), w)),
        ("swiglu", "x", lambda: nn.swiglu(x)),
        ("rotary_embedding", "x", lambda: nn.rotary_embedding(x[:, :, None], x[0, :, None],
                                                              x[0, :, None])),
        ("softmax_cross_entropy_with_integer_labels", "logits",
         lambda: nn.softmax_cross_entropy_with_integer_labels(x, labels)),
        ("ragged_dot", "lhs", lambda: nn.ragged_dot(x[0], f32(x[:1, :, :4]), np.array([3]))),
    ]


@pytest.mark.parametrize("name,argument,call", _f64_calls(),
                         ids=[f"{n}-{a}" for n, a, _ in _f64_calls()])
def test_float64_is_refused_when_traced(name, argument, call):
    """Under jax_enable_x64, float64 would become an aclnn call that fails
    at run time (CANN's kernels take float32, float16, bfloat16): a
    TypeError naming the argument and those dtypes, before any lowering."""
    with enable_x64(True), pytest.raises(
            TypeError, match=f"{name}: {argument} must be float32, float16 or bfloat16, "
                             f"got float64"):
        jax.eval_shape(call)


def _rms(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w


def _grad_eqns(fn, *args):
    """The equations of ``fn``'s jaxpr, inside every sub-jaxpr too."""
    def walk(jaxpr):
        for e in jaxpr.eqns:
            yield e
            for v in e.params.values():
                for inner in (v if isinstance(v, (list, tuple)) else [v]):
                    inner = getattr(inner, "jaxpr", inner)
                    if hasattr(inner, "eqns"):
                        yield from walk(inner)

    return [str(e.primitive) for e in walk(jax.make_jaxpr(fn)(*args).jaxpr)]


@pytest.mark.parametrize("add", [False, True], ids=["rms_norm", "add_rms_norm"])
def test_per_example_gradients_are_one_aclnn_call(rng, add):
    """jax.vmap(jax.grad(loss)) runs aclnnRmsNormGrad once for all examples
    (dgamma lacks '...': it ran once per example, in a loop); equal to the
    same math in jax.numpy."""
    x = rng.normal(size=(3, 4, 8)).astype(np.float32)
    w = (1 + 0.1 * rng.normal(size=8)).astype(np.float32)

    def loss(norm):
        return lambda x, w: jnp.sum(jnp.sin(norm(x, w)))

    ours = (lambda x, w: nn.add_rms_norm(x, x, w)[0]) if add else nn.rms_norm
    theirs = (lambda x, w: _rms(x + x, w)) if add else _rms
    per_example = jax.vmap(jax.grad(loss(ours), (0, 1)), (0, None))
    eqns = _grad_eqns(per_example, x, w)
    assert eqns.count("nn_rms_norm_grad") == 1 and "scan" not in eqns and "while" not in eqns
    got = jax.jit(per_example)(x, w)
    want = jax.vmap(jax.grad(loss(theirs), (0, 1)), (0, None))(x, w)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_add_rms_norm_takes_a_float32_weight_with_half_activations(rng, dtype):
    """Flax's usual policy (float32 parameters, half activations), which
    rms_norm takes: the weight is cast to x1's dtype for CANN's AddRmsNorm,
    dgamma comes back in float32; equal to PyTorch in float64."""
    x1, x2 = (jnp.asarray(rng.normal(size=(3, 16)), dtype) for _ in range(2))
    w = jnp.asarray(1 + 0.1 * rng.normal(size=16), jnp.float32)
    cot = rng.normal(size=(3, 16))

    def loss(x1, x2, w):
        y, s = nn.add_rms_norm(x1, x2, w)
        return jnp.sum(y.astype(jnp.float32) * cot) + jnp.sum(s.astype(jnp.float32))

    (y, total), grads = nn.add_rms_norm(x1, x2, w), jax.grad(loss, (0, 1, 2))(x1, x2, w)
    assert y.dtype == total.dtype == x1.dtype and grads[2].dtype == jnp.float32
    t1, t2, tw = (torch.from_numpy(f64(a)).requires_grad_(True) for a in (x1, x2, w))
    ty = F.rms_norm(t1 + t2, (16,), tw, eps=1e-6)
    ((ty * torch.from_numpy(cot)).sum() + (t1 + t2).sum()).backward()
    assert_close(y, ty.detach().numpy(), dtype)
    for g, t in zip(grads, (t1, t2, tw)):
        assert_close(g, t.grad.numpy(), dtype, scale=16)


def test_cross_entropy_takes_labels_as_optax(rng):
    """A label in [-C, 0) counts from the end and one outside [-C, C) gives
    a NaN loss, as optax's function (CANN's ignoreIndex gave -100 a loss of
    0 silently, and the builds differed past C); the gradients of the
    finite losses equal optax's, the NaN rows' are zero."""
    import optax

    logits = jnp.asarray(rng.normal(size=(6, 5)), jnp.float32)
    labels = jnp.array([0, 4, -1, -5, -100, 5])
    cot = jnp.asarray(rng.normal(size=6), jnp.float32)
    loss = lambda f: lambda l: jnp.sum(jnp.where(jnp.isnan(f(l, labels)), 0.0,  # noqa: E731
                                                 f(l, labels) * cot))
    ours = nn.softmax_cross_entropy_with_integer_labels(logits, labels)
    want = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    np.testing.assert_allclose(ours, want, rtol=1e-6, equal_nan=True)
    assert np.isnan(np.asarray(ours)[4:]).all()
    got = jax.grad(loss(nn.softmax_cross_entropy_with_integer_labels))(logits)
    np.testing.assert_allclose(got, jax.grad(loss(optax.softmax_cross_entropy_with_integer_labels))(
        logits), rtol=1e-5, atol=1e-6)


def test_ragged_dot_takes_mixed_dtypes_and_a_preferred_element_type(rng):
    """As jax.lax.ragged_dot: operands of two dtypes computed in their
    promoted dtype (on CANN's grouped product), a preferred_element_type
    CANN cannot return by JAX's own; values, dtypes and gradients."""
    lhs = jnp.asarray(rng.normal(size=(6, 4)), jnp.bfloat16)
    rhs = jnp.asarray(rng.normal(size=(2, 4, 3)), jnp.float32)
    sizes = np.array([2, 3])
    with enable_x64(True):
        for args, kwargs in [((lhs, rhs), {}), ((lhs, rhs.astype(jnp.bfloat16)),
                                                {"preferred_element_type": jnp.float32})]:
            ours, want = (jax.value_and_grad(
                lambda a, b: jnp.sum(jnp.sin(f(a, b, sizes, **kwargs))), (0, 1))(*args)
                for f in (nn.ragged_dot, jax.lax.ragged_dot))
            for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(want)):
                assert a.dtype == b.dtype
                assert_close(a, f64(b), "bfloat16")


@pytest.mark.parametrize("name", ["rms_norm", "add_rms_norm", "swiglu"])
def test_rank_nine_operands_merge_their_rows(rng, name):
    """Past aclnn's rank 8 the rows are merged for the call (they were
    refused, even where only the reference runs); value and gradients
    equal the same math in jax.numpy."""
    x = rng.normal(size=(2,) * 8 + (8,)).astype(np.float32)
    w = (1 + 0.1 * rng.normal(size=8)).astype(np.float32)
    ours, theirs = {
        "rms_norm": (nn.rms_norm, _rms),
        "add_rms_norm": (lambda x, w: nn.add_rms_norm(x, x, w)[0], lambda x, w: _rms(x + x, w)),
        "swiglu": (lambda x, w: nn.swiglu(x) * w[:4],
                   lambda x, w: jax.nn.silu(x[..., :4]) * x[..., 4:] * w[:4]),
    }[name]
    got, want = (jax.value_and_grad(lambda x, w: jnp.sum(jnp.sin(f(x, w))), (0, 1))(x, w)
                 for f in (ours, theirs))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
