"""The programs users write around the operators (issue 19): ``jax.export``
for several platforms, a symbolic batch dimension, explicit sharding with
the batch sharded, ``shard_map`` over part of an explicit mesh, inputs of
rank 9; and the argument checks of None tensors and out-of-range float32
attributes.

Each of the five differentiable ops and five raw operators runs as one
program (its value, its gradient in both inputs, its JVP) and is compared
with the same program written with the formulas in jax.numpy."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import NUM_DEVICES
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_aclnn as aclnn

EPS = 1e-3  # logit's clamp
BN_EPS = 1e-5


def _bn_axes(x, channel):
    return tuple(i for i in range(x.ndim) if i != channel % x.ndim)


def _jnp_batch_norm(x, w, b, channel):
    axes = _bn_axes(x, channel)
    shape = [1] * x.ndim
    shape[channel % x.ndim] = -1
    mean = x.mean(axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axes, keepdims=True)
    return (x - mean) / jnp.sqrt(var + BN_EPS) * w.reshape(shape) + b.reshape(shape)


def _probability(x):
    return 0.05 + 0.9 * jax.nn.sigmoid(x)


def _bn_reduce_args(x):
    """mean, invstd and weight (C,) of x (channel at dim 1), in jax.numpy."""
    axes = _bn_axes(x, 1)
    mean = x.mean(axes)
    invstd = 1.0 / jnp.sqrt(x.var(axes) + BN_EPS)
    return mean, invstd, 1.0 + 0.1 * jnp.arange(x.shape[1], dtype=x.dtype)


def _jnp_bn_reduce(g, x):
    mean, invstd, _ = _bn_reduce_args(x)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    axes = _bn_axes(x, 1)
    sum_dy = g.sum(axes)
    sum_dy_xmu = (g * (x - mean.reshape(shape))).sum(axes)
    return sum_dy, sum_dy_xmu, sum_dy_xmu * invstd, sum_dy


def _jnp_smooth_l1(d, beta):
    ad = jnp.abs(d)
    return jnp.where(ad < beta, 0.5 * d * d / beta, ad - 0.5 * beta)


def _jnp_smooth_l1_backward(g, d, beta):
    return g * jnp.where(jnp.abs(d) < beta, d / beta, jnp.sign(d))


#: name -> (with jax_aclnn, with jax.numpy): functions of two arrays of one
#: shape (the channel of batch norm last, of batch_norm_reduce_backward at dim 1).
CASES = {
    "swish": (lambda a, b: aclnn.swish(a + b, 1.5),
              lambda a, b: (a + b) * jax.nn.sigmoid(1.5 * (a + b))),
    "hardshrink": (lambda a, b: aclnn.hardshrink(a * b, 0.3),
                   lambda a, b: jnp.where(jnp.abs(a * b) <= 0.3, 0.0, a * b)),
    "logit": (lambda a, b: aclnn.logit(_probability(a - b), EPS),
              lambda a, b: jnp.log(_probability(a - b) / (1 - _probability(a - b)))),
    "smooth_l1_loss": (lambda a, b: aclnn.smooth_l1_loss(a, b, reduction="mean", beta=0.7),
                       lambda a, b: _jnp_smooth_l1(a - b, 0.7).mean()),
    "batch_norm": (
        lambda a, b: aclnn.batch_norm(a * b, 1.0 + a.mean(tuple(range(a.ndim - 1))),
                                      b.mean(tuple(range(a.ndim - 1))))[0],
        lambda a, b: _jnp_batch_norm(a * b, 1.0 + a.mean(tuple(range(a.ndim - 1))),
                                     b.mean(tuple(range(a.ndim - 1))), -1)),
    "swish_backward": (
        lambda g, x: aclnn.swish_backward(g, x, beta=1.5),
        lambda g, x: g * (jax.nn.sigmoid(1.5 * x)
                          * (1 + 1.5 * x * (1 - jax.nn.sigmoid(1.5 * x))))),
    "hardshrink_backward": (lambda g, x: aclnn.hardshrink_backward(g, x, lambd=0.3),
                            lambda g, x: jnp.where(jnp.abs(x) <= 0.3, 0.0, g)),
    "logit_grad": (lambda g, x: aclnn.logit_grad(_probability(x), g, eps=EPS),
                   lambda g, x: g / (_probability(x) * (1 - _probability(x)))),
    "smooth_l1_loss_backward": (
        lambda g, x: aclnn.smooth_l1_loss_backward(g, x, 0.5 * x[..., :1], reduction="none", beta=0.7),
        lambda g, x: _jnp_smooth_l1_backward(g, x - 0.5 * x[..., :1], 0.7)),
    "batch_norm_reduce_backward": (
        lambda g, x: aclnn.batch_norm_reduce_backward(g, x, *_bn_reduce_args(x)),
        _jnp_bn_reduce),
}


def program(f):
    """The value of ``f``, its gradient in both inputs and its JVP."""

    def run(a, b):
        weights = lambda out: jnp.cos(jnp.arange(out.size, dtype=out.dtype)).reshape(out.shape)  # noqa: E731
        loss = lambda a, b: sum(jnp.sum(weights(o) * o) for o in jax.tree.leaves(f(a, b)))  # noqa: E731
        value = f(a, b)
        grads = jax.grad(loss, argnums=(0, 1))(a, b)
        _, tangent = jax.jvp(f, (a, b), (jnp.sin(a), jnp.cos(b)))
        return value, grads, tangent

    return run


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


#: The operators whose sharded call all-reduces over the batch (sums per
#: channel, a "mean"). jax 0.7 and 0.8 lower that all-reduce of a
#: custom_partitioning rule under an explicit mesh to a reduction XLA rejects
#: ("Unsupported reduction computation"; on jax 0.7 the next such program
#: then crashes the process); jax 0.9 and later do not.
ALL_REDUCING = {"batch_norm", "batch_norm_reduce_backward", "smooth_l1_loss"}
BEFORE_JAX_09 = tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 9)


def skip_all_reduce_before_jax09(name):
    if BEFORE_JAX_09 and name in ALL_REDUCING:
        pytest.skip(f"jax {jax.__version__} (before 0.9): the all-reduce of a "
                    "custom_partitioning rule under an explicit mesh does not compile "
                    "(XLA: Unsupported reduction computation)")


def _types(tree):
    return [str(jax.typeof(x)) for x in jax.tree.leaves(tree)]


@needs_devices
@pytest.mark.parametrize("shape", [(16, 6), (16, 3, 6), (16, 4, 2, 6)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_explicit_sharding_with_the_batch_sharded(rng, name, shape):
    skip_all_reduce_before_jax09(name)
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
    skip_all_reduce_before_jax09(name)
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


# --- item 5: None tensors, float32 attributes out of range --------------------

X = np.ones((2, 3), np.float32)

NONE_TENSORS = {
    "swish": (lambda: aclnn.swish(None), "x"),
    "hardshrink": (lambda: aclnn.hardshrink(None), "x"),
    "logit": (lambda: aclnn.logit(None), "x"),
    "smooth_l1_loss": (lambda: aclnn.smooth_l1_loss(X, None), "target"),
    "batch_norm": (lambda: aclnn.batch_norm(None), "x"),
    "swish_backward": (lambda: aclnn.swish_backward(None, X), "grad_output"),
    "hardshrink_backward": (lambda: aclnn.hardshrink_backward(X, None), "input"),
    "logit_grad": (lambda: aclnn.logit_grad(X, None), "dy"),
    "smooth_l1_loss_backward": (lambda: aclnn.smooth_l1_loss_backward(X, X, None), "target"),
    "batch_norm_reduce_backward": (
        lambda: aclnn.batch_norm_reduce_backward(None, X, X[0], X[0], None), "grad_out"),
}


@pytest.mark.parametrize("name", sorted(NONE_TENSORS))
def test_none_as_a_tensor_is_a_type_error_naming_function_and_argument(name):
    call, argument = NONE_TENSORS[name]
    with pytest.raises(TypeError, match=rf"^{name}: {argument} must be an array, got None"):
        call()


FLOAT32_ATTRIBUTES = {
    "swish": (lambda v: aclnn.swish(X, v), "beta"),
    "hardshrink": (lambda v: aclnn.hardshrink(X, v), "lambd"),
    "smooth_l1_loss": (lambda v: aclnn.smooth_l1_loss(X, X, beta=v), "beta"),
    "swish_backward": (lambda v: aclnn.swish_backward(X, X, beta=v), "beta"),
    "hardshrink_backward": (lambda v: aclnn.hardshrink_backward(X, X, lambd=v), "lambd"),
    "smooth_l1_loss_backward": (lambda v: aclnn.smooth_l1_loss_backward(X, X, X, beta=v), "beta"),
}


@pytest.mark.parametrize("value", [1e40, -1e40])
@pytest.mark.parametrize("name", sorted(FLOAT32_ATTRIBUTES))
def test_float32_attribute_beyond_float32_is_a_value_error_without_warnings(name, value):
    call, argument = FLOAT32_ATTRIBUTES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=rf"^{name}: {argument}=.*beyond float32's range"):
            call(value)
        call(float(np.finfo(np.float32).max))  # the largest float32 is taken
