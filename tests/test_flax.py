"""jax_aclnn.flax's BatchNorm layers against Flax's own BatchNorm (the
oracle): variables, outputs, running statistics over several steps,
gradients (which must run aclnnBatchNormReduceBackward), inference mode,
layouts, half types, checkpoint interchange and synchronized statistics; and
the documented relation of smooth_l1_loss to optax.huber_loss."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import NUM_DEVICES, assert_close, f64, tolerance
from flax import nnx
from jax.sharding import PartitionSpec as P

import jax_aclnn as aclnn
from jax_aclnn.flax import linen as aclnn_linen
from jax_aclnn.flax import nnx as aclnn_nnx

BACKWARD_TARGET = "aclnn_batch_norm_reduce_backward"
STEPS = 3
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Layer:
    """A BatchNorm layer as pure functions of plain dicts of arrays:
    ``apply(params, stats, x, train) -> (y, new_stats)``."""

    params: dict
    stats: dict
    apply: Callable[[dict, dict, Any, bool], tuple[jax.Array, dict]]


def linen_layer(cls, x, **kw) -> Layer:
    module = cls(**kw)
    variables = module.init(jax.random.key(1), x, use_running_average=False)

    def apply(params, stats, x, train):
        y, new = module.apply({"params": params, "batch_stats": stats}, x,
                              use_running_average=not train, mutable=["batch_stats"])
        return y, new["batch_stats"]

    return Layer(variables.get("params", {}), variables["batch_stats"], apply)


def _with_values(template, values: dict):
    """A copy of an nnx State with the values of a plain dict."""
    state = jax.tree.map(lambda v: v, template)
    nnx.replace_by_pure_dict(state, values)
    return state


def nnx_layer(cls, x, axis=-1, **kw) -> Layer:
    graphdef, params, stats = nnx.split(
        cls(x.shape[axis], axis=axis, rngs=nnx.Rngs(1), **kw), nnx.Param, nnx.BatchStat)

    def apply(p, s, x, train):
        model = nnx.merge(graphdef, _with_values(params, p), _with_values(stats, s))
        y = model(x, use_running_average=not train)
        return y, nnx.to_pure_dict(nnx.state(model, nnx.BatchStat))

    return Layer(nnx.to_pure_dict(params), nnx.to_pure_dict(stats), apply)


FLAVOURS = {
    "linen": (nn.BatchNorm, aclnn_linen.BatchNorm, linen_layer),
    "nnx": (nnx.BatchNorm, aclnn_nnx.BatchNorm, nnx_layer),
}


def assert_tree_close(actual, expected, dtype, terms: float = 1.0):
    """Same tree, dtypes, and values within the dtype's tolerance; ``terms``:
    how many terms of size ~1 each value sums (absolute error ~ sqrt(terms))."""
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    tol = tolerance(dtype)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        assert a.dtype == e.dtype, (a.dtype, e.dtype)
        np.testing.assert_allclose(f64(a), f64(e), rtol=tol, atol=tol * np.sqrt(terms))


def compare_with_flax(flavour, rng, shape, *, tol_dtype="float32", x_dtype="float32", **kw):
    """Runs both layers for STEPS training steps and one inference step on
    the same random batches, comparing everything observable."""
    flax_cls, our_cls, make = FLAVOURS[flavour]
    batches = [jnp.asarray(rng.normal(1.0, 2.0, shape), x_dtype) for _ in range(STEPS + 1)]
    ref, ours = make(flax_cls, batches[0], **kw), make(our_cls, batches[0], **kw)
    # Same variables: names, collections, shapes, dtypes, values.
    for a, e in [(ours.params, ref.params), (ours.stats, ref.stats)]:
        assert jax.tree.structure(a) == jax.tree.structure(e)
        jax.tree.map(np.testing.assert_array_equal, a, e)
    count = np.prod(shape) / np.prod(jax.tree.leaves(ref.stats)[0].shape)
    ref_stats, our_stats = ref.stats, ours.stats
    for x in batches[:STEPS]:
        y_ref, ref_stats = ref.apply(ref.params, ref_stats, x, True)
        y, our_stats = ours.apply(ref.params, our_stats, x, True)
        assert y.dtype == y_ref.dtype
        assert_close(y, f64(y_ref), tol_dtype)
        assert_tree_close(our_stats, ref_stats, tol_dtype)
    # Gradients of a random linear function of y, params and input.
    weights = jnp.asarray(rng.normal(size=shape), jnp.float32)
    def loss(layer):
        return lambda p, x: (layer.apply(p, ref.stats, x, True)[0] * weights).sum()
    g_ref = jax.grad(loss(ref), argnums=(0, 1))(ref.params, batches[0])
    step = jax.jit(jax.grad(loss(ours), argnums=(0, 1)))
    g = step(ref.params, batches[0])
    assert_tree_close(g[1], g_ref[1], tol_dtype)
    assert_tree_close(g[0], g_ref[0], tol_dtype, terms=count)
    assert BACKWARD_TARGET in step.lower(ref.params, batches[0]).as_text()
    # Inference mode with the trained statistics: Flax's own formula.
    y_ref, _ = ref.apply(ref.params, ref_stats, batches[-1], False)
    y, _ = ours.apply(ref.params, ref_stats, batches[-1], False)
    assert y.dtype == y_ref.dtype
    assert_close(y, f64(y_ref), tol_dtype)


LAYOUTS = {
    "dense": ((32, 6), -1),
    "channel-last": ((4, 5, 3, 6), -1),
    "channel-first": ((4, 6, 5, 3), 1),
}
PARAMETERS = {
    "scale+bias": {},
    "no-scale": {"use_scale": False},
    "neither": {"use_scale": False, "use_bias": False},
}


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("parameters", PARAMETERS)
def test_matches_flax(flavour, layout, parameters, rng):
    shape, axis = LAYOUTS[layout]
    compare_with_flax(flavour, rng, shape, axis=axis, momentum=0.9, epsilon=1e-3,
                      **PARAMETERS[parameters])


@pytest.mark.parametrize("axis", [(1, 2), (-2, -1), (1, 3)], ids=["leading", "trailing", "apart"])
def test_several_feature_axes_linen(axis, rng):
    compare_with_flax("linen", rng, (4, 3, 5, 2), axis=axis)


# Half types: (x dtype, layer kwargs). Flax computes the statistics and y in
# float32 and rounds y to `dtype` (or to the promoted dtype of x and params).
HALF_CASES = {
    "bfloat16-x-float32-params": ("bfloat16", {}),
    "float16": ("float16", {"dtype": jnp.float16}),
    "bfloat16-everything": ("bfloat16", {"dtype": jnp.bfloat16, "param_dtype": jnp.bfloat16}),
}


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("case", HALF_CASES)
def test_half_types_match_flax(flavour, case, rng):
    x_dtype, kw = HALF_CASES[case]
    compare_with_flax(flavour, rng, (4, 6, 5, 3), axis=1, x_dtype=x_dtype, tol_dtype=x_dtype,
                      momentum=0.9, **kw)


@pytest.mark.parametrize("x_dtype", ["float32", "float16", "bfloat16"])
def test_linen_without_float32_reductions_matches_flax(x_dtype, rng):
    """force_float32_reductions=False: Flax's variable dtypes (running
    statistics in param_dtype, promoted by the update as Flax's are); the
    reductions still run in float32, so values agree to bfloat16 rounding."""
    compare_with_flax("linen", rng, (4, 6, 5, 3), axis=1, x_dtype=x_dtype, tol_dtype="bfloat16",
                      force_float32_reductions=False, param_dtype=jnp.bfloat16)


def test_checkpoints_interchange(rng):
    """Variables trained with one layer run unchanged in the other (linen
    models auto-name both layers BatchNorm_0; nnx states have the same keys)."""

    def mlp(bn):
        class MLP(nn.Module):
            @nn.compact
            def __call__(self, x, train):
                return nn.Dense(3)(bn(use_running_average=not train)(nn.Dense(5)(x)))
        return MLP()

    x = jnp.asarray(rng.normal(size=(16, 4)), jnp.float32)
    for src, dst in [(nn.BatchNorm, aclnn_linen.BatchNorm), (aclnn_linen.BatchNorm, nn.BatchNorm)]:
        variables = mlp(src).init(jax.random.key(0), x, True)
        _, stats = mlp(src).apply(variables, x, True, mutable=["batch_stats"])
        variables = {**variables, **stats}
        assert "BatchNorm_0" in variables["batch_stats"]
        for train in (False, True):
            y_src = mlp(src).apply(variables, x, train, mutable=["batch_stats"])[0]
            y_dst = mlp(dst).apply(variables, x, train, mutable=["batch_stats"])[0]
            assert_close(y_dst, f64(y_src), "float32")

    for src, dst in [(nnx.BatchNorm, aclnn_nnx.BatchNorm), (aclnn_nnx.BatchNorm, nnx.BatchNorm)]:
        a, b = src(4, momentum=0.5, rngs=nnx.Rngs(0)), dst(4, momentum=0.5, rngs=nnx.Rngs(1))
        a(x)  # one training step moves the running statistics
        state = nnx.to_pure_dict(nnx.state(a))
        assert jax.tree.structure(state) == jax.tree.structure(nnx.to_pure_dict(nnx.state(b)))
        nnx.update(b, nnx.state(a))
        a.eval(), b.eval()
        assert_close(b(x), f64(a(x)), "float32")


def test_nnx_train_and_eval_switch_modes(rng):
    x = jnp.asarray(rng.normal(size=(8, 3)), jnp.float32)
    layer = aclnn_nnx.BatchNorm(3, rngs=nnx.Rngs(0))
    layer(x)
    after_train = np.asarray(layer.mean[...])
    assert np.abs(after_train).max() > 0
    layer.eval()
    layer(x)
    np.testing.assert_array_equal(np.asarray(layer.mean[...]), after_train)
    layer.train()
    layer(x)
    assert not np.array_equal(np.asarray(layer.mean[...]), after_train)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_synchronized_statistics_match_flax(flavour, rng):
    """axis_name under shard_map: statistics over the whole batch, as Flax's."""
    mesh = jax.make_mesh((NUM_DEVICES,), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))
    flax_cls, our_cls, make = FLAVOURS[flavour]
    x = jnp.asarray(rng.normal(size=(NUM_DEVICES * 4, 5)), jnp.float32)
    weights = jnp.asarray(rng.normal(size=x.shape), jnp.float32)

    def run(cls):
        layer = make(cls, x, axis_name="batch", momentum=0.8)

        def loss(params, x, w):
            y, stats = layer.apply(params, layer.stats, x, True)
            return jax.lax.psum((y * w).sum(), "batch"), (y, stats)

        sharded = jax.shard_map(loss, mesh=mesh, in_specs=(P(), P("batch"), P("batch")),
                                out_specs=(P(), (P("batch"), P())))
        return jax.jit(jax.grad(sharded, has_aux=True))(layer.params, x, weights)

    (g_ref, (y_ref, s_ref)), (g, (y, s)) = run(flax_cls), run(our_cls)
    assert_close(y, f64(y_ref), "float32")
    assert_tree_close(s, s_ref, "float32")
    assert_tree_close(g, g_ref, "float32", terms=x.shape[0])


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_gh27_channel_sharded_parameter_gradients_match_flax(flavour, rng):
    """Regression (issue 27): on an explicit mesh sharding the features
    (tensor parallelism), the scale and bias gradients came back typed
    ``[C@c]`` for replicated parameters (a ValueError in jax.grad)."""
    mesh = jax.make_mesh((2,), ("c",), axis_types=(jax.sharding.AxisType.Explicit,))
    _, our_cls, make = FLAVOURS[flavour]
    x0 = jnp.asarray(rng.normal(size=(8, 4, 6)), jnp.float32)
    weights = jnp.asarray(rng.normal(size=x0.shape), jnp.float32)

    def run(cls, make):
        layer = make(cls, x0)
        loss = lambda p, x: (layer.apply(p, layer.stats, x, True)[0] * weights).sum()  # noqa: E731
        with jax.set_mesh(mesh):
            x = jax.device_put(x0, jax.sharding.NamedSharding(mesh, P(None, None, "c")))
            grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(layer.params, x)
        return grads, [str(jax.typeof(g)) for g in jax.tree.leaves(grads)]

    # Flax's linen layer is the oracle of both (Flax's nnx layer cannot store
    # the channel-sharded running statistics in its replicated variables).
    (g_ref, _), (g, types) = run(nn.BatchNorm, linen_layer), run(our_cls, make)
    # Each gradient has its argument's type, as with jax.numpy formulas
    # (Flax's linen layer returns the parameters' gradients channel-sharded).
    assert types == ["float32[6]"] * (len(types) - 1) + ["float32[8,4,6@c]"]
    assert_tree_close(g, g_ref, "float32", terms=32)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_unsupported_options_raise(flavour):
    _, our_cls, make = FLAVOURS[flavour]
    x = jnp.ones((4, 3))
    layer = make(our_cls, x)
    with pytest.raises(NotImplementedError, match="mask"):
        if flavour == "linen":
            our_cls().apply({"params": layer.params, "batch_stats": layer.stats}, x,
                            use_running_average=False, mask=x > 0, mutable=["batch_stats"])
        else:
            our_cls(3, rngs=nnx.Rngs(0))(x, mask=x > 0)
    grouped = make(our_cls, x, axis_name="i", axis_index_groups=[[0]])
    with pytest.raises(NotImplementedError, match="axis_index_groups"):
        jax.vmap(lambda x: grouped.apply(grouped.params, grouped.stats, x, True),
                 axis_name="i")(x[None])


def run_python(*args: str) -> str:
    """Runs Python on the jax_aclnn this test process imported (the installed
    package, or the source tree built in place), outside the source tree;
    returns stdout."""
    env = {**os.environ, "PYTHONPATH": str(Path(aclnn.__file__).parents[1])}
    out = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                         timeout=300, cwd=tempfile.gettempdir())
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_importing_jax_aclnn_does_not_import_flax():
    run_python("-c", "import sys, jax_aclnn; assert 'flax' not in sys.modules, 'flax imported'")


@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_flax_example_trains(api):
    out = run_python(str(ROOT / "examples" / "train_flax.py"), "--api", api, "--steps", "60",
                     "--log-every", "59")
    losses = [float(v) for v in re.findall(r"train loss ([0-9.]+)", out)]
    before, after = map(float, re.findall(r"validation loss \w+ training ([0-9.]+)", out))
    assert len(losses) == 2 and losses[1] < 0.8 * losses[0], out
    assert after < 0.8 * before, out


@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_flax_example_in_mixed_precision_equals_flax_own_layers(api):
    """Issue 28: bfloat16 activations with float32 parameters (Flax's
    ``dtype=bfloat16, param_dtype=float32``) through the drop-in BatchNorm
    and the other four operators train, and follow the same model with
    Flax's own layers and jax.numpy formulas within bfloat16's precision."""
    def losses(layers):
        out = run_python(str(ROOT / "examples" / "train_flax.py"), "--api", api, "--steps", "30",
                         "--log-every", "5", "--dtype", "bfloat16", "--layers", layers)
        return [float(v) for v in re.findall(r"(?:train|validation) loss [a-z ]*?([0-9.]+)", out)]

    ours, flax_own = losses("aclnn"), losses("flax")
    assert len(ours) == len(flax_own) == 9  # validation before, 7 train losses, validation after
    # Seven bfloat16 steps compound roundings, and which ones happen depends
    # on how XLA fuses the program around the operators (LLVM contracts
    # a * b + c into one rounding only within a fusion): passing batch
    # norm's input to the reduce unreshaped, with every call's result
    # unchanged bit for bit, moved the nnx losses from 0.47% to 0.90% of
    # Flax's. Four roundings; a wrong gradient is off by far more.
    np.testing.assert_allclose(ours, flax_own, rtol=4 * 2.0 ** -8)
    assert ours[-2] < 0.7 * ours[1] and ours[-1] < 0.8 * ours[0]


@pytest.mark.parametrize("beta", [0.25, 1.0, 3.0])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_smooth_l1_is_huber_over_beta(beta, reduction, rng):
    """smooth_l1_loss(x, y, beta=b) == optax.huber_loss(x, y, delta=b) / b
    (reduced the same way), values and gradients, for b > 0."""
    x = jnp.asarray(rng.normal(0.0, 2.0, (64,)), jnp.float32)
    y = jnp.asarray(rng.normal(0.0, 2.0, (64,)), jnp.float32)
    reduce = {"mean": jnp.mean, "sum": jnp.sum, "none": lambda v: v}[reduction]
    huber = lambda x, y: reduce(optax.huber_loss(x, y, delta=beta)) / beta  # noqa: E731
    ours = lambda x, y: aclnn.smooth_l1_loss(x, y, beta=beta, reduction=reduction)  # noqa: E731
    assert_close(ours(x, y), f64(huber(x, y)), "float32")
    total = lambda f: lambda x, y: f(x, y).sum()  # noqa: E731
    g = jax.grad(total(ours), argnums=(0, 1))(x, y)
    g_ref = jax.grad(total(huber), argnums=(0, 1))(x, y)
    assert_tree_close(g, g_ref, "float32")
