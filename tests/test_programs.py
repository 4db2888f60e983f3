"""The programs users write around the operators (issue 19): ``jax.export``
for several platforms, a symbolic batch dimension, explicit sharding with
the batch sharded, ``shard_map`` over part of an explicit mesh, inputs of
rank 9.

Each differentiable op and raw operator of the shared table runs as one
program (its value, its gradient in both inputs, its JVP) and is compared
with the same program written with the formulas in jax.numpy."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import NUM_DEVICES, skip_all_reduce_under_an_explicit_mesh_before_jax09
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_aclnn as aclnn
from cases import PROGRAMS as CASES
from cases import program


def inputs(rng, shape):
    a = rng.normal(size=shape).astype(np.float32)
    b = rng.normal(size=shape).astype(np.float32)
    return jnp.asarray(a), jnp.asarray(b)


def assert_trees_close(actual, expected):
    leaves_a, leaves_e = jax.tree.leaves(actual), jax.tree.leaves(expected)
    assert len(leaves_a) == len(leaves_e)
    for x, y in zip(leaves_a, leaves_e):
        assert x.shape == y.shape, (x.shape, y.shape)
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-4)


def expected(name, a, b):
    return jax.jit(program(CASES[name][1]))(a, b)


# --- item 1: jax.export for several platforms -----------------------------


@pytest.mark.parametrize("platforms", [["cpu", "npu"], ["cpu", "cuda"], ["cuda", "cpu"]])
@pytest.mark.parametrize("name", sorted(CASES))
def test_export_for_several_platforms_runs_on_the_cpu(rng, name, platforms):
    a, b = inputs(rng, (4, 6))
    exported = jax.export.export(jax.jit(program(CASES[name][0])), platforms=platforms,
                                 disabled_checks=aclnn.export_disabled_checks())(a, b)
    restored = jax.export.deserialize(exported.serialize())
    assert_trees_close(restored.call(a, b), expected(name, a, b))


# --- item 3: a symbolic batch dimension -------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_export_with_a_symbolic_batch(rng, name):
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 6"), jnp.float32)
    exported = jax.export.export(jax.jit(program(CASES[name][0])),
                                 disabled_checks=aclnn.export_disabled_checks())(spec, spec)
    restored = jax.export.deserialize(exported.serialize())
    for batch in (3, 5):
        a, b = inputs(rng, (batch, 6))
        assert_trees_close(restored.call(a, b), expected(name, a, b))


@pytest.mark.parametrize("shape,sizes", [("b, 6", (3, 6)), ("4, n", (4, 5))])
@pytest.mark.parametrize("which", ["operator", "gradient"])
def test_gh27_export_of_vmapped_mean_with_symbolic_shapes(rng, shape, sizes, which):
    """Regression: the "mean"'s rescaling under vmap computed its ratio of
    element counts in NumPy, which symbolic sizes refuse
    (TracerArrayConversionError)."""
    if which == "operator":
        f = jax.vmap(lambda g, x, y: aclnn.smooth_l1_loss_backward(g, x, y, reduction="mean"),
                     in_axes=(None, 0, 0))
    else:
        f = lambda g, x, y: g * jax.vmap(jax.grad(  # noqa: E731
            lambda x, y: aclnn.smooth_l1_loss(x, y, reduction="mean")))(x, y)
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape(shape), jnp.float32)
    exported = jax.export.export(jax.jit(f), disabled_checks=aclnn.export_disabled_checks())(
        jax.ShapeDtypeStruct((), jnp.float32), spec, spec)
    x, y = inputs(rng, sizes)
    g = np.float32(1.5)
    d = np.asarray(x, np.float64) - np.asarray(y)
    expected = g * np.where(np.abs(d) < 1, d, np.sign(d)) / sizes[1]  # each example's own mean
    out = jax.export.deserialize(exported.serialize()).call(g, x, y)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6, atol=1e-7)


def test_raw_operators_broadcast_symbolic_shapes():
    b, = jax.export.symbolic_shape("b")
    x = jax.ShapeDtypeStruct((b, 4), jnp.float32)
    g = jax.ShapeDtypeStruct((1, 4), jnp.float32)
    out = jax.eval_shape(lambda g, x: aclnn.hardshrink_backward(g, x), g, x)
    assert out.shape == (b, 4)


# --- item 2: explicit sharding ---------------------------------------------

needs_devices = pytest.mark.skipif(jax.device_count() < NUM_DEVICES, reason="needs 8 host devices")


def _explicit_mesh(shape, names):
    return jax.make_mesh(shape, names, axis_types=(jax.sharding.AxisType.Explicit,) * len(names))


def _types(tree):
    return [str(jax.typeof(x)) for x in jax.tree.leaves(tree)]


@needs_devices
@pytest.mark.parametrize("shape", [(16, 6), (16, 3, 6), (16, 4, 2, 6)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_explicit_sharding_with_the_batch_sharded(rng, name, shape):
    skip_all_reduce_under_an_explicit_mesh_before_jax09(name)
    mesh = _explicit_mesh((NUM_DEVICES,), ("batch",))
    a, b = (jax.device_put(v, NamedSharding(mesh, P("batch"))) for v in inputs(rng, shape))
    ours, oracle = (program(f) for f in CASES[name])
    with jax.set_mesh(mesh):
        types = {}

        def traced(fn, key):
            def run(a, b):
                out = fn(a, b)
                types[key] = _types(out)
                types[key + " grads"] = _types(out[1])
                return out
            return jax.jit(run)

        actual = traced(ours, "aclnn")(a, b)
        want = traced(oracle, "jnp")(a, b)
    assert_trees_close(actual, want)
    # Results carry their operands' sharding in the trace, as jax.numpy's do.
    assert types["aclnn"] == types["jnp"]
    assert all("@batch" in t for t in types["aclnn grads"])


@needs_devices
@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("name", sorted(CASES))
def test_shard_map_over_part_of_an_explicit_mesh(rng, name, check_vma):
    mesh = _explicit_mesh((2, 4), ("a", "b"))
    a, b = (jax.device_put(v, NamedSharding(mesh, P("a", "b"))) for v in inputs(rng, (8, 8, 4)))

    def mapped(f):
        # Only "a" is manual: "b" still shards dimension 1 inside.
        def run(a, b):  # scalars (losses) as (1,): concatenated over "a"
            return jax.tree.map(jnp.atleast_1d, program(f)(a, b))

        return jax.jit(jax.shard_map(run, mesh=mesh, in_specs=P("a"), out_specs=P("a"),
                                     axis_names={"a"}, check_vma=check_vma))

    with jax.set_mesh(mesh):
        actual = mapped(CASES[name][0])(a, b)
        want = mapped(CASES[name][1])(a, b)
    assert_trees_close(actual, want)


# --- item 4: rank 9 ----------------------------------------------------------

RANK9 = (2, 3, 1, 2, 2, 1, 3, 2, 4)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rank_9_inputs(rng, name):
    a, b = inputs(rng, RANK9)
    assert_trees_close(jax.jit(program(CASES[name][0]))(a, b), expected(name, a, b))


@pytest.mark.parametrize("name", ["swish", "batch_norm", "hardshrink_backward",
                                  "batch_norm_reduce_backward"])
def test_rank_9_eager_and_vmapped(rng, name):
    a, b = inputs(rng, (4,) + RANK9[1:])
    f, oracle = CASES[name]
    assert_trees_close(f(a, b), oracle(a, b))
    assert_trees_close(jax.vmap(f)(a, b), jax.vmap(oracle)(a, b))


@needs_devices
@pytest.mark.parametrize("name", sorted(CASES))
def test_rank_9_with_the_batch_sharded(rng, name):
    skip_all_reduce_under_an_explicit_mesh_before_jax09(name)
    mesh = _explicit_mesh((NUM_DEVICES,), ("batch",))
    a, b = (jax.device_put(v, NamedSharding(mesh, P("batch"))) for v in inputs(rng, (8,) + RANK9[1:]))
    with jax.set_mesh(mesh):
        actual = jax.jit(program(CASES[name][0]))(a, b)
        want = jax.jit(program(CASES[name][1]))(a, b)
    assert_trees_close(actual, want)


def test_rank_9_flax_batch_norm_is_a_drop_in(rng):
    linen = pytest.importorskip("flax.linen")
    from jax_aclnn.flax.linen import BatchNorm

    x = jnp.asarray(rng.normal(size=RANK9).astype(np.float32))
    ours, theirs = BatchNorm(use_running_average=False), linen.BatchNorm(use_running_average=False)
    variables = theirs.init(jax.random.key(0), x)

    def loss(layer, x):
        y, _ = layer.apply(variables, x, mutable=["batch_stats"])
        return jnp.sum(jnp.cos(jnp.arange(y.size)).reshape(y.shape) * y)

    assert_trees_close(jax.grad(lambda x: loss(ours, x))(x), jax.grad(lambda x: loss(theirs, x))(x))


def test_rank_9_that_cannot_merge_is_a_value_error():
    g = np.ones((2, 1) * 4 + (2,), np.float32)
    x = np.ones((1, 2) * 4 + (1,), np.float32)
    with pytest.raises(ValueError, match="hardshrink_backward: .* 9 dimensions that cannot be merged"):
        aclnn.hardshrink_backward(g, x)
