"""Every JAX transformation of the differentiable operators and of the raw
backward operators: forward and reverse mode, higher orders, jit and vmap,
against plain jax.numpy definitions differentiated by JAX itself (and
finite differences, ``check_grads``), at points away from the kinks; and the
custom calls of the compiled programs (one aclnn call per use)."""

from __future__ import annotations

import re
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import OPERATORS
from conftest import NUM_DEVICES
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jax.test_util import check_grads

import jax_aclnn as aclnn

SEED = 1234  # fixed: the points are chosen away from the kinks
TOL = dict(rtol=2e-4, atol=2e-5)
FD = dict(atol=3e-2, rtol=3e-2, eps=1e-3)  # finite differences in float32


# --- plain jax.numpy definitions (the oracles) ------------------------------


def np_smooth_l1(x, y, reduction, beta):
    d = x - y
    loss = jnp.where(jnp.abs(d) < beta, 0.5 * d * d / beta, jnp.abs(d) - 0.5 * beta)
    return {"none": loss, "mean": loss.mean(), "sum": loss.sum()}[reduction]


def np_logit(x, eps):
    z = x if eps is None else jnp.clip(x, eps, 1 - eps)
    return jnp.log(z / (1 - z))


def np_hardshrink(x, lambd):
    return jnp.where(jnp.abs(x) > lambd, x, 0.0)


def np_swish(x, beta):
    return x * jax.nn.sigmoid(beta * x)


def np_batch_norm(x, w, b, axis, eps=1e-5):
    axis %= x.ndim
    axes = tuple(i for i in range(x.ndim) if i != axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    mean = x.mean(axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axes, keepdims=True)
    y = (x - mean) / jnp.sqrt(var + eps)
    if w is not None:
        y = y * w.reshape(shape)
    if b is not None:
        y = y + b.reshape(shape)
    return y


# --- points away from the kinks -------------------------------------------


def away(rng, shape, low, high, kinks, margin=0.05):
    """Uniform values in [low, high] at least ``margin`` from every kink."""
    out = rng.uniform(low, high, size=shape)
    for _ in range(100):
        near = np.zeros(shape, bool)
        for k in kinks:
            near |= np.abs(out - k) < margin
        if not near.any():
            return out.astype(np.float32)
        out[near] = rng.uniform(low, high, size=near.sum())
    raise AssertionError("no point away from the kinks")


def make_cases():
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(3, 4)).astype(np.float32)
    y = rng.normal(size=(4,)).astype(np.float32)
    # |x - y| away from beta = 0.8 (and 0, the L1 kink of sign)
    d = away(rng, (3, 4), -2.5, 2.5, [-0.8, 0.0, 0.8])
    x_l1 = d + y
    xs = away(rng, (3, 4), -2, 2, [-0.5, 0.5])
    p = away(rng, (3, 4), 0.05, 0.95, [0.2, 0.8])
    bx = (rng.normal(size=(5, 3, 2)) * 2 + 1).astype(np.float32)
    w, b = rng.uniform(0.5, 2, 3).astype(np.float32), rng.normal(size=3).astype(np.float32)
    cases = {}
    for r in ("none", "mean", "sum"):
        cases[f"smooth_l1_{r}"] = (
            partial(lambda x, y, r: aclnn.smooth_l1_loss(x, y, reduction=r, beta=0.8), r=r),
            partial(lambda x, y, r: np_smooth_l1(x, y, r, 0.8), r=r), (x_l1, y))
    cases["logit"] = (aclnn.logit, partial(np_logit, eps=None), (p,))
    cases["logit_eps"] = (lambda x: aclnn.logit(x, eps=0.2), partial(np_logit, eps=0.2), (p,))
    cases["hardshrink"] = (aclnn.hardshrink, partial(np_hardshrink, lambd=0.5), (xs,))
    cases["swish"] = (lambda x: aclnn.swish(x, beta=1.7), partial(np_swish, beta=1.7), (x,))
    cases["silu"] = (aclnn.silu, partial(np_swish, beta=1.0), (x,))
    cases["batch_norm"] = (lambda x, w, b: aclnn.batch_norm(x, w, b, channel_axis=1)[0],
                           lambda x, w, b: np_batch_norm(x, w, b, 1), (bx, w, b))
    cases["batch_norm_plain"] = (lambda x: aclnn.batch_norm(x)[0],
                                 lambda x: np_batch_norm(x, None, None, -1), (bx,))
    # the raw backward operators, against the plain definitions' VJPs
    g = rng.normal(size=(3, 4)).astype(np.float32)
    vjp = lambda f: lambda g, *a: jax.vjp(f, *a)[1](g)  # noqa: E731
    cases["swish_backward"] = (lambda g, x: aclnn.swish_backward(g, x, beta=1.7),
                               lambda g, x: vjp(partial(np_swish, beta=1.7))(g, x)[0], (g, x))
    cases["hardshrink_backward"] = (  # grad_output broadcasts
        lambda g, x: aclnn.hardshrink_backward(g, x, lambd=0.5),
        lambda g, x: vjp(partial(np_hardshrink, lambd=0.5))(jnp.broadcast_to(g, x.shape), x)[0],
        (g[0], xs))
    cases["logit_grad"] = (lambda x, dy: aclnn.logit_grad(x, dy),
                           lambda x, dy: vjp(partial(np_logit, eps=None))(dy, x)[0], (p, g))
    cases["logit_grad_eps"] = (lambda x, dy: aclnn.logit_grad(x, dy, eps=0.2),
                               lambda x, dy: vjp(partial(np_logit, eps=0.2))(dy, x)[0], (p, g))
    for r in ("none", "mean", "sum"):
        gr = g if r == "none" else np.float32(1.3)
        cases[f"smooth_l1_loss_backward_{r}"] = (
            partial(lambda g, x, y, r: aclnn.smooth_l1_loss_backward(
                g, x, y, reduction=r, beta=0.8), r=r),
            partial(lambda g, x, y, r: vjp(lambda x: np_smooth_l1(x, y, r, 0.8))(g, x)[0], r=r),
            (gr, x_l1, np.broadcast_to(y, x_l1.shape).copy()))
    gb = rng.normal(size=bx.shape).astype(np.float32)
    mean = rng.normal(size=3).astype(np.float32)
    invstd = rng.uniform(0.5, 2, 3).astype(np.float32)

    def np_reduce(g, x, mean, invstd, w):
        xmu = x - mean.reshape(1, -1, 1)
        sum_dy, sum_dy_xmu = g.sum((0, 2)), (g * xmu).sum((0, 2))
        return sum_dy, sum_dy_xmu, sum_dy_xmu * invstd, sum_dy

    cases["batch_norm_reduce_backward"] = (aclnn.batch_norm_reduce_backward, np_reduce,
                                           (gb, bx, mean, invstd, w))
    return cases


CASES = make_cases()
NAMES = sorted(CASES)


def scalar(f, args):
    """A scalar function of the case: the outputs weighted by fixed numbers."""
    rng = np.random.default_rng(SEED + 1)
    weights = jax.tree.map(lambda o: rng.normal(size=o.shape).astype(np.float32),
                           jax.eval_shape(f, *args))
    return lambda *a: sum(jnp.vdot(w, o) for w, o in zip(jax.tree.leaves(weights),
                                                        jax.tree.leaves(f(*a))))


def tangents(args, seed=SEED + 2):
    rng = np.random.default_rng(seed)
    return tuple(rng.normal(size=np.shape(a)).astype(np.float32) for a in args)


def close(actual, expected, **tol):
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), **(tol or TOL))


# --- the transformations ------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_check_grads_second_order(name):
    f, _, args = CASES[name]
    check_grads(jax.jit(f), args, order=2, modes=("fwd", "rev"), **FD)


@pytest.mark.parametrize("name", NAMES)
def test_jvp_and_linearize(name):
    f, ref, args = CASES[name]
    t = tangents(args)
    expected = jax.jvp(ref, args, t)
    close(jax.jit(lambda a, t: jax.jvp(f, a, t))(args, t), expected)
    out, f_lin = jax.linearize(f, *args)
    close((out, f_lin(*t)), expected)


@pytest.mark.parametrize("name", NAMES)
def test_jacfwd_jacrev(name):
    f, ref, args = CASES[name]
    argnums = tuple(range(len(args)))
    expected = jax.jit(jax.jacrev(ref, argnums))(*args)
    close(jax.jit(jax.jacfwd(f, argnums))(*args), expected)
    close(jax.jit(jax.jacrev(f, argnums))(*args), expected)


@pytest.mark.parametrize("name", NAMES)
def test_hessian_and_grad_of_grad(name):
    f, ref, args = CASES[name]
    argnums = tuple(range(len(args)))
    s, s_ref = scalar(f, args), scalar(ref, args)
    close(jax.jit(jax.hessian(s, argnums))(*args), jax.jit(jax.hessian(s_ref, argnums))(*args),
          rtol=1e-3, atol=1e-4)
    v = tangents(args, SEED + 3)
    rev_rev = lambda s: jax.grad(  # noqa: E731
        lambda *a: sum(jnp.vdot(g, w) for g, w in zip(jax.grad(s, argnums)(*a), v)), argnums)
    close(jax.jit(rev_rev(s))(*args), jax.jit(rev_rev(s_ref))(*args), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_vmap_of_jvp(name):
    f, ref, args = CASES[name]
    t1, t2 = tangents(args), tangents(args, SEED + 4)
    ts = tuple(np.stack([a, b]) for a, b in zip(t1, t2))
    jvp = lambda f: jax.vmap(lambda t: jax.jvp(f, args, t))  # noqa: E731
    close(jax.jit(jvp(f))(ts), jvp(ref)(ts))


# --- what runs: one aclnn call per use ----------------------------------------


def aclnn_calls(fn, *args) -> list[str]:
    hlo = jax.jit(fn).lower(*args).compile().as_text()
    return sorted(re.findall(r'custom_call_target="(aclnn_\w+)"', hlo))


ALL_FIVE = sorted(f"aclnn_{name}" for name in OPERATORS)


def five_op_loss(x, w, b, target):
    h, _, _ = aclnn.batch_norm(x, w, b)
    h = aclnn.hardshrink(aclnn.swish(h, beta=1.2), lambd=0.1)
    p = aclnn.logit(jax.nn.sigmoid(h), eps=1e-4)
    return aclnn.smooth_l1_loss(p, target, beta=0.5)


def five_op_args():
    rng = np.random.default_rng(SEED)
    return (rng.normal(size=(8, 4)).astype(np.float32), np.ones(4, np.float32),
            np.zeros(4, np.float32), rng.normal(size=(8, 4)).astype(np.float32))


def test_reverse_mode_runs_one_aclnn_backward_call_per_use():
    args = five_op_args()
    assert aclnn_calls(jax.grad(five_op_loss, argnums=(0, 1, 2, 3)), *args) == ALL_FIVE
    batched = tuple(np.stack([a, a + 1]) for a in args)
    per_example = jax.vmap(jax.grad(five_op_loss, argnums=(0, 1, 2)))
    assert aclnn_calls(per_example, *batched) == ALL_FIVE
    of_vmap = jax.grad(lambda *a: jax.vmap(five_op_loss)(*a).sum(), argnums=(0, 1, 2))
    assert aclnn_calls(of_vmap, *batched) == ALL_FIVE


def test_reverse_mode_gives_the_mean_loss_backward_its_scalar_grad_out():
    # the transposed "mean" operator transposes back to one call with a
    # scalar grad_out, as the hand-written backward had (no broadcast copy)
    x, _, _, t = five_op_args()
    hlo = jax.jit(jax.grad(aclnn.smooth_l1_loss)).lower(x, t).compile().as_text()
    (call,) = [line for line in hlo.splitlines() if 'custom_call_target="aclnn_' in line]
    assert "operand_layout_constraints={f32[], " in call, call


@pytest.mark.parametrize("name,target", [
    ("swish", "aclnn_swish_backward"), ("silu", "aclnn_swish_backward"),
    ("hardshrink", "aclnn_hardshrink_backward"), ("logit_eps", "aclnn_logit_grad"),
    ("smooth_l1_none", "aclnn_smooth_l1_loss_backward"),
    ("smooth_l1_mean", "aclnn_smooth_l1_loss_backward"),
    ("batch_norm", "aclnn_batch_norm_reduce_backward")])
def test_forward_mode_runs_the_aclnn_operator(name, target):
    f, _, args = CASES[name]
    assert aclnn_calls(lambda a, t: jax.jvp(f, a, t), args, tangents(args)) == [target]
    ts = tuple(np.stack([t, t]) for t in tangents(args))
    batched = jax.vmap(lambda t: jax.jvp(f, args, t))
    assert aclnn_calls(batched, ts) == [target]


# --- synchronized batch norm under shard_map -----------------------------------


@pytest.mark.skipif(jax.device_count() < NUM_DEVICES, reason="needs 8 host devices")
@pytest.mark.parametrize("check_vma", [True, False])
def test_synchronized_batch_norm_forward_and_second_order(check_vma):
    mesh = jax.make_mesh((NUM_DEVICES,), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))
    rng = np.random.default_rng(SEED)
    x = (rng.normal(size=(32, 3)) * 2 + 1).astype(np.float32)
    t = rng.normal(size=(32, 3)).astype(np.float32)
    w, b = rng.uniform(0.5, 2, 3).astype(np.float32), rng.normal(size=3).astype(np.float32)

    def per_device(x, w, b, t):
        y, _, _ = aclnn.batch_norm(x, w, b, axis_name="batch")
        return jax.lax.psum(jnp.sum(jnp.sin(y) * t), "batch")

    loss = jax.shard_map(per_device, mesh=mesh, in_specs=(P("batch"), P(), P(), P("batch")),
                         out_specs=P(), check_vma=check_vma)

    def oracle(x, w, b, t):
        return jnp.sum(jnp.sin(np_batch_norm(x, w, b, -1)) * t)

    batch, rep = NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())
    args = (jax.device_put(x, batch), jax.device_put(w, rep), jax.device_put(b, rep),
            jax.device_put(t, batch))
    primals, dirs = args[:3], jax.tree.map(jnp.asarray, tangents(args[:3]))
    close(jax.jit(lambda *p: jax.jvp(lambda *q: loss(*q, args[3]), p, dirs))(*primals),
          jax.jvp(lambda *q: oracle(*q, t), (x, w, b), dirs), rtol=1e-4, atol=1e-4)
    # Hessian-vector product: forward over reverse, parameters summed once
    hvp = lambda f: lambda *p: jax.jvp(jax.grad(f, argnums=(0, 1, 2)), p, dirs)[1]  # noqa: E731
    close(jax.jit(hvp(lambda *q: loss(*q, args[3])))(*primals),
          hvp(lambda *q: oracle(*q, t))(x, w, b), rtol=1e-3, atol=1e-3)


@pytest.mark.skipif(jax.device_count() < NUM_DEVICES, reason="needs 8 host devices")
def test_forward_mode_and_hessian_vector_product_under_sharded_jit():
    # the operators and their transposes on sharded operands go through the
    # custom_partitioning rules
    mesh = jax.make_mesh((NUM_DEVICES,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    args = five_op_args()
    x, w, b, t = args
    shard = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))  # noqa: E731
    sharded = (shard(x, P("data")), shard(w, P()), shard(b, P()), shard(t, P("data")))
    dirs = jax.tree.map(jnp.asarray, tangents(args[:3]))
    jvp = lambda *a: jax.jvp(lambda *p: five_op_loss(*p, a[3]), a[:3], dirs)  # noqa: E731

    def hvp(*a):
        return jax.jvp(jax.grad(lambda *p: five_op_loss(*p, a[3]), argnums=(0, 1, 2)), a[:3], dirs)[1]

    for fn in (jvp, hvp):
        close(jax.jit(fn)(*sharded), jax.jit(fn)(*args), rtol=1e-4, atol=1e-5)
    assert aclnn_calls(jvp, *sharded) == ALL_FIVE
