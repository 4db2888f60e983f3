"""Every JAX transformation of the differentiable operators and of the raw
backward operators: forward and reverse mode, higher orders, jit and vmap,
against plain jax.numpy definitions differentiated by JAX itself (and
finite differences, ``check_grads``), at points away from the kinks; and the
custom calls of the compiled programs (one aclnn call per use)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import CASES, FORWARD, OPERATORS, batch_norm, twin
from conftest import NUM_DEVICES
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jax.test_util import check_grads

import jax_aclnn as aclnn
from jax_aclnn import network

SEED = 1234  # fixed: the points are chosen away from the kinks
TOL = dict(rtol=2e-4, atol=2e-5)
FD = dict(atol=3e-2, rtol=3e-2, eps=1e-3)  # finite differences in float32


def make_cases():
    """name -> (jax_aclnn function, its plain jax.numpy oracle, operands):
    every differentiable op of the table (its forward formula), every raw
    operator that one of them runs (the formula's VJP in its first
    operand), and the raw operators no op's VJP gives (their formula in
    jax.numpy)."""
    rng = np.random.default_rng(SEED)
    cases = {}
    for f in FORWARD:
        operands = f.sample(rng)
        cases[f.name] = (f.ours, f.plain, operands)
        if f.raw is not None:
            g = rng.normal(size=np.shape(jax.eval_shape(f.plain, *operands))).astype(np.float32)
            vjp = lambda g, *a, plain=f.plain: jax.vjp(plain, *a)[1](g)[0]  # noqa: E731
            cases[f"{f.op}[{f.name}]"] = (f.raw, vjp, (g, *operands))
    linked = {f.op for f in FORWARD if f.raw is not None}
    for case in CASES:
        if case.op not in linked:
            operands = tuple(np.asarray(a) for a in case.operands(rng))
            cases.setdefault(case.id, (case.call, twin(case.op, **case.kwargs), operands))
    return cases


CASES_OF_TRANSFORMATIONS = make_cases()
NAMES = sorted(CASES_OF_TRANSFORMATIONS)


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
    f, _, args = CASES_OF_TRANSFORMATIONS[name]
    check_grads(jax.jit(f), args, order=2, modes=("fwd", "rev"), **FD)


@pytest.mark.parametrize("name", NAMES)
def test_jvp_and_linearize(name):
    f, ref, args = CASES_OF_TRANSFORMATIONS[name]
    t = tangents(args)
    expected = jax.jvp(ref, args, t)
    close(jax.jit(lambda a, t: jax.jvp(f, a, t))(args, t), expected)
    out, f_lin = jax.linearize(f, *args)
    close((out, f_lin(*t)), expected)


@pytest.mark.parametrize("name", NAMES)
def test_jacfwd_jacrev(name):
    f, ref, args = CASES_OF_TRANSFORMATIONS[name]
    argnums = tuple(range(len(args)))
    expected = jax.jit(jax.jacrev(ref, argnums))(*args)
    close(jax.jit(jax.jacfwd(f, argnums))(*args), expected)
    close(jax.jit(jax.jacrev(f, argnums))(*args), expected)


@pytest.mark.parametrize("name", NAMES)
def test_hessian_and_grad_of_grad(name):
    f, ref, args = CASES_OF_TRANSFORMATIONS[name]
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
    f, ref, args = CASES_OF_TRANSFORMATIONS[name]
    t1, t2 = tangents(args), tangents(args, SEED + 4)
    ts = tuple(np.stack([a, b]) for a, b in zip(t1, t2))
    jvp = lambda f: jax.vmap(lambda t: jax.jvp(f, args, t))  # noqa: E731
    close(jax.jit(jvp(f))(ts), jvp(ref)(ts))


# --- what runs: one aclnn call per use ----------------------------------------


def aclnn_calls(fn, *args) -> list[str]:
    hlo = jax.jit(fn).lower(*args).compile().as_text()
    return sorted(re.findall(r'custom_call_target="(aclnn_\w+)"', hlo))


EVERY_OPERATOR = sorted(f"aclnn_{name}" for name in OPERATORS)


def network_args():
    """Weights, input and target of the every-operator network (jax_aclnn.network)."""
    rng = np.random.default_rng(SEED)
    params = network.init(jax.random.key(SEED), 4, 4, 1)  # one block: each layer once
    return (params, rng.normal(size=(8, 4)).astype(np.float32),
            rng.uniform(0.1, 0.9, 8).astype(np.float32))


def test_reverse_mode_runs_one_aclnn_backward_call_per_use():
    """A network of one block uses every operator once: its gradient has
    one call of each, per-example (vmap of grad) and of a vmapped loss too."""
    params, x, y = network_args()
    assert aclnn_calls(jax.grad(network.loss), params, x, y) == EVERY_OPERATOR
    batched = (np.stack([x, x + 1]), np.stack([y, y]))
    per_example = jax.vmap(jax.grad(network.loss), in_axes=(None, 0, 0))
    assert aclnn_calls(per_example, params, *batched) == EVERY_OPERATOR
    of_vmap = jax.grad(lambda p, x, y: jax.vmap(network.loss, in_axes=(None, 0, 0))(p, x, y).sum())
    assert aclnn_calls(of_vmap, params, *batched) == EVERY_OPERATOR


def test_reverse_mode_gives_the_mean_loss_backward_its_scalar_grad_out():
    # the transposed "mean" operator transposes back to one call with a
    # scalar grad_out, as the hand-written backward had (no broadcast copy)
    _, x, t = network_args()
    hlo = jax.jit(jax.grad(aclnn.smooth_l1_loss)).lower(x, x[::-1] * t[:, None]).compile().as_text()
    (call,) = [line for line in hlo.splitlines() if 'custom_call_target="aclnn_' in line]
    assert "operand_layout_constraints={f32[], " in call, call


@pytest.mark.parametrize("name,target", [(f.name, f"aclnn_{f.op}") for f in FORWARD])
def test_forward_mode_runs_the_aclnn_operator(name, target):
    f, _, args = CASES_OF_TRANSFORMATIONS[name]
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
        return jnp.sum(jnp.sin(batch_norm(x, w, b)) * t)

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
    params, x, y = network_args()
    shard = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))  # noqa: E731
    sharded = (shard(params, P()), shard(x, P("data")), shard(y, P("data")))
    dirs = jax.tree.map(jnp.asarray, jax.tree.map(lambda p: np.cos(np.asarray(p)), params))
    jvp = lambda p, x, y: jax.jvp(lambda p: network.loss(p, x, y), (p,), (dirs,))  # noqa: E731

    def hvp(p, x, y):
        return jax.jvp(jax.grad(lambda p: network.loss(p, x, y)), (p,), (dirs,))[1]

    for fn in (jvp, hvp):
        close(jax.jit(fn)(*sharded), jax.jit(fn)(params, x, y), rtol=1e-4, atol=1e-5)
    assert aclnn_calls(jvp, *sharded) == EVERY_OPERATOR
