"""The operators under sharded ``jit`` over 8 host CPU devices: each device
runs the aclnn operator on its own shard (no all-gather in the compiled HLO),
results equal the unsharded ones; synchronized batch norm under
``shard_map`` and ``pmap`` equals global batch norm, values and gradients."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import JAX_RELEASE, NUM_DEVICES
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_aclnn as aclnn
from cases import CASES, OPERATORS, ids
from jax_aclnn import network

pytestmark = pytest.mark.skipif(jax.device_count() < NUM_DEVICES, reason="needs 8 host devices")


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


@pytest.fixture(scope="module")
def batch_mesh():
    """All 8 devices along one data-parallel axis, "batch"."""
    return jax.make_mesh((NUM_DEVICES,), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))


def compiled_hlo(fn, *args) -> str:
    return fn.lower(*args).compile().as_text()


def collectives(hlo: str, kind: str) -> list[str]:
    """Result shapes of the ``kind`` collectives (e.g. all-gather) in compiled HLO."""
    return re.findall(rf"= (\(.*?\)|\S+) {kind}(?:-start)?\(", hlo)


def normal(rng, shape):
    return rng.normal(size=shape).astype(np.float32)


#: The element-wise cases on operands of one shape, taken at (16, 8, 4).
ELEMENTWISE = [c for c in CASES if c.same_shape]


@pytest.mark.parametrize("case", ELEMENTWISE, ids=ids(ELEMENTWISE))
@pytest.mark.parametrize("spec", [P("data", "model"), P(None, ("data", "model")), P("model")])
def test_elementwise_ops_run_on_their_shards(mesh, rng, case, spec):
    operands = case.operands(rng, shapes=[(16, 8, 4)] * len(case.shapes))
    fn = jax.jit(case.call)
    sharded = [jax.device_put(a, NamedSharding(mesh, spec)) for a in operands]
    out = fn(*sharded)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(fn(*operands)))
    assert out.sharding.spec == spec
    hlo = compiled_hlo(fn, *sharded)
    assert "aclnn_" + case.op in hlo
    assert not collectives(hlo, "all-gather") and not collectives(hlo, "all-to-all")


def test_broadcast_operand_stays_replicated(mesh, rng):
    g, x = normal(rng, (1, 8)), normal(rng, (16, 8))
    fn = jax.jit(lambda g, x: aclnn.hardshrink_backward(g, x, lambd=0.3))
    args = (jax.device_put(g, NamedSharding(mesh, P())),
            jax.device_put(x, NamedSharding(mesh, P("data", "model"))))
    out = fn(*args)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(fn(g, x)))
    assert out.sharding.spec == P("data", "model")
    assert not collectives(compiled_hlo(fn, *args), "all-gather")


@pytest.mark.filterwarnings("ignore:.*with mesh.*:DeprecationWarning")
def test_shard_map_over_part_of_the_mesh(mesh, rng):
    """Manual over "data", automatic over "model": the operator runs as a
    plain custom call (XLA aborted on custom_partitioning's shardings here
    under the older ``with mesh:`` context)."""
    g, x = normal(rng, (16, 8)), normal(rng, (16, 8))

    def fn():  # a new function each time: traced and lowered in its context
        return jax.jit(jax.shard_map(lambda g, x: aclnn.swish_backward(g, x), mesh=mesh,
                                     in_specs=(P("data"), P("data")), out_specs=P("data"),
                                     axis_names={"data"}))

    args = [jax.device_put(a, NamedSharding(mesh, P("data", "model"))) for a in (g, x)]
    expected = np.asarray(aclnn.swish_backward(g, x))
    np.testing.assert_array_equal(np.asarray(fn()(*args)), expected)
    with mesh:
        np.testing.assert_array_equal(np.asarray(fn()(*args)), expected)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_smooth_l1_keeps_the_global_element_count(mesh, rng, reduction):
    x, y = normal(rng, (32, 6)), normal(rng, (32, 6))
    g = np.float32(1.7) if reduction != "none" else normal(rng, (32, 6))
    fn = jax.jit(lambda g, x, y: aclnn.smooth_l1_loss_backward(g, x, y, reduction=reduction, beta=0.5))
    spec = P(("data", "model"))
    args = (jax.device_put(g, NamedSharding(mesh, spec if np.ndim(g) else P())),
            jax.device_put(x, NamedSharding(mesh, spec)), jax.device_put(y, NamedSharding(mesh, spec)))
    d = x.astype(np.float64) - y
    expected = np.asarray(g, np.float64) * np.where(np.abs(d) < 0.5, d / 0.5, np.sign(d))
    if reduction == "mean":
        expected /= x.size  # the global count, not a shard's
    out = fn(*args)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6, atol=1e-7)
    assert not collectives(compiled_hlo(fn, *args), "all-gather")


@pytest.mark.parametrize(
    "specs",
    [
        (P("data"), P()),                      # batch sharded: local sums, all-reduce of (C,)
        (P(("data", "model")), P()),           # over the whole mesh
        (P("data", "model"), P("model")),      # channels sharded too
        (P("data", None, "model"), P()),       # a spatial axis sharded
    ],
)
@pytest.mark.parametrize("masks", [(True, True, True), (False, True, False)])
def test_batch_norm_reduce_all_reduces_only_per_channel_sums(mesh, rng, specs, masks):
    data_spec, channel_spec = specs
    g, x = normal(rng, (16, 6, 4)), normal(rng, (16, 6, 4))
    mean, invstd, weight = normal(rng, (6,)), rng.uniform(0.5, 2, 6).astype(np.float32), normal(rng, (6,))
    names = ("input_g", "weight_g", "bias_g")
    fn = jax.jit(lambda *a: aclnn.batch_norm_reduce_backward(*a, **dict(zip(names, masks))))
    args = [jax.device_put(a, NamedSharding(mesh, data_spec)) for a in (g, x)]
    args += [jax.device_put(a, NamedSharding(mesh, channel_spec)) for a in (mean, invstd, weight)]
    out = fn(*args)
    axes = (0, 2)
    xmu = (g.astype(np.float64) * (x - mean[None, :, None])).sum(axes)
    expected = (g.astype(np.float64).sum(axes), xmu, xmu * invstd, g.astype(np.float64).sum(axes))
    wanted = (masks[0], masks[0], masks[1], masks[2])
    for o, e, w in zip(out, expected, wanted):
        assert (o is None) == (not w)
        if w:
            np.testing.assert_allclose(np.asarray(o), e, rtol=1e-5, atol=1e-5)
    hlo = compiled_hlo(fn, *args)
    assert not collectives(hlo, "all-gather")
    reduced = collectives(hlo, "all-reduce")
    assert reduced  # local sums, then an all-reduce of per-channel results only
    for shape in reduced:
        for dims in re.findall(r"\w+\[([\d,]*)\]", shape):
            assert int(np.prod([int(d) for d in dims.split(",") if d])) <= 6, shape


def network_problem(rng, batch, features=10, width=16):
    """Weights of the every-operator network (jax_aclnn.network), inputs
    and targets in (0, 1)."""
    params = network.init(jax.random.key(0), features, width, 2)
    return params, normal(rng, (batch, features)), rng.uniform(0.1, 0.9, batch).astype(np.float32)


def test_sharded_training_step_equals_unsharded(rng, batch_mesh):
    mesh = batch_mesh
    optimizer = optax.adam(1e-2)
    params, x, y = network_problem(rng, 64)
    state = optimizer.init(params)

    def train_step(params, state, x, y):
        loss, grads = jax.value_and_grad(network.loss)(params, x, y)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    step = jax.jit(train_step)
    expected = step(params, state, x, y)
    replicated = NamedSharding(mesh, P())
    args = (jax.device_put(params, replicated), jax.device_put(state, replicated),
            jax.device_put(x, NamedSharding(mesh, P("batch"))),
            jax.device_put(y, NamedSharding(mesh, P("batch"))))
    got = step(*args)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-6)
    hlo = compiled_hlo(step, *args)
    for target in OPERATORS:
        assert "aclnn_" + target in hlo
    assert not collectives(hlo, "all-gather") and not collectives(hlo, "all-to-all")


# --- synchronized batch norm ------------------------------------------------


def reference_batch_norm(x, w, b, channel_axis):
    """Training-mode batch norm in plain jax.numpy (the oracle)."""
    axes = tuple(i for i in range(x.ndim) if i != channel_axis % x.ndim)
    shape = [1] * x.ndim
    shape[channel_axis] = -1
    mean, var = x.mean(axes), x.var(axes)
    y = (x - mean.reshape(shape)) / jnp.sqrt(var.reshape(shape) + 1e-5)
    return y * w.reshape(shape) + b.reshape(shape), mean, var


def oracle_loss(x, w, b, t, channel_axis, shards=1):
    """sum(sin(bn(x)) * t), batch norm over the whole batch or per shard."""
    total, stats = 0.0, []
    for xs, ts in zip(jnp.split(x, shards), jnp.split(t, shards)):
        y, mean, var = reference_batch_norm(xs, w, b, channel_axis)
        total = total + jnp.sum(jnp.sin(y) * ts)
        stats.append((mean, var))
    return total, stats[0]


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("synchronized", [True, False])
@pytest.mark.parametrize("channel_axis,shape", [(-1, (32, 5)), (1, (16, 3, 4))])
def test_batch_norm_in_shard_map_equals_global_batch_norm(rng, batch_mesh, check_vma, synchronized,
                                                          channel_axis, shape):
    """Synchronized: batch norm of the whole batch; not: of each device's
    shard. Either way the gradients of the replicated weight and bias sum
    every device's part, exactly once."""
    mesh = batch_mesh
    c = shape[channel_axis]
    x, t = normal(rng, shape) * 2 + 1, normal(rng, shape)
    w, b = rng.uniform(0.5, 2, c).astype(np.float32), normal(rng, (c,))

    def per_device(x, w, b, t):
        y, mean, var = aclnn.batch_norm(x, w, b, channel_axis=channel_axis,
                                        axis_name="batch" if synchronized else None)
        return jax.lax.psum(jnp.sum(jnp.sin(y) * t), "batch"), (mean[None], var[None])

    sharded = jax.shard_map(per_device, mesh=mesh, in_specs=(P("batch"), P(), P(), P("batch")),
                            out_specs=(P(), (P("batch"), P("batch"))), check_vma=check_vma)
    batch, rep = NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())
    args = (jax.device_put(x, batch), jax.device_put(w, rep), jax.device_put(b, rep),
            jax.device_put(t, batch))
    # gradients taken outside the shard_map, of a jitted function containing it
    (loss, stats), grads = jax.jit(jax.value_and_grad(sharded, argnums=(0, 1, 2), has_aux=True))(*args)
    shards = 1 if synchronized else NUM_DEVICES
    (loss0, stats0), grads0 = jax.value_and_grad(oracle_loss, argnums=(0, 1, 2), has_aux=True)(
        x, w, b, t, channel_axis, shards)
    # A sum of terms sin(y) * t, |terms| <= |t|: round-off scales with sum |t|
    # (the loss itself may be near 0).
    np.testing.assert_allclose(float(loss), float(loss0), rtol=1e-5, atol=1e-6 * np.abs(t).sum())
    stats = [s[0] for s in stats]  # the first device's statistics
    for a, e in zip(list(stats) + list(grads), list(stats0) + list(grads0)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-4, atol=1e-5)


def test_shared_target_of_smooth_l1_collects_every_devices_gradient(rng, batch_mesh):
    mesh = batch_mesh
    x, y = normal(rng, (16, 3)), normal(rng, (3,))

    def per_device(x, y):
        return jax.lax.psum(aclnn.smooth_l1_loss(x, y, reduction="sum", beta=0.5), "batch")

    loss = jax.shard_map(per_device, mesh=mesh, in_specs=(P("batch"), P()), out_specs=P())
    args = (jax.device_put(x, NamedSharding(mesh, P("batch"))), jax.device_put(y, NamedSharding(mesh, P())))
    gx, gy = jax.jit(jax.grad(loss, argnums=(0, 1)))(*args)
    d = x.astype(np.float64) - y
    dloss = np.where(np.abs(d) < 0.5, d / 0.5, np.sign(d))
    np.testing.assert_allclose(np.asarray(gx), dloss, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(gy), -dloss.sum(0), rtol=1e-5)


def test_sync_batch_norm_under_pmap_gives_local_parameter_gradients(rng):
    # Under pmap each device holds its own copy of the parameters, and the
    # data-parallel pattern sums the gradients itself (psum after grad).
    x, t = normal(rng, (NUM_DEVICES, 4, 3)), normal(rng, (NUM_DEVICES, 4, 3))
    w, b = rng.uniform(0.5, 2, 3).astype(np.float32), normal(rng, (3,))

    def per_device(x, w, b, t):
        def loss(x, w, b):
            y, _, _ = aclnn.batch_norm(x, w, b, axis_name="batch")
            return jnp.sum(jnp.sin(y) * t)

        gx, gw, gb = jax.grad(loss, argnums=(0, 1, 2))(x, w, b)
        return gx, jax.lax.psum(gw, "batch"), jax.lax.psum(gb, "batch")

    stack = lambda a: np.broadcast_to(a, (NUM_DEVICES,) + a.shape)  # noqa: E731
    gx, gw, gb = jax.pmap(per_device, axis_name="batch")(x, stack(w), stack(b), t)
    gx0, gw0, gb0 = jax.grad(lambda *a: oracle_loss(*a, t.reshape(-1, 3), -1)[0], argnums=(0, 1, 2))(
        x.reshape(-1, 3), w, b)
    np.testing.assert_allclose(np.asarray(gx).reshape(-1, 3), np.asarray(gx0), rtol=1e-4, atol=1e-5)
    for a, e in ((gw, gw0), (gb, gb0)):
        np.testing.assert_allclose(np.asarray(a), np.broadcast_to(np.asarray(e), a.shape), rtol=1e-4, atol=1e-5)


# --- issue 27: channel sharding, uneven sizes ---------------------------------


def _mesh(devices, kind, names=("d",)):
    kind = {"auto": jax.sharding.AxisType.Auto, "explicit": jax.sharding.AxisType.Explicit}[kind]
    shape = (devices,) if len(names) == 1 else devices
    return jax.make_mesh(shape, names, axis_types=(kind,) * len(names),
                         devices=jax.devices()[:int(np.prod(shape))])


@pytest.mark.parametrize("rank", [2, 3])
def test_gh27_channel_sharded_batch_norm_parameter_gradients(rng, rank):
    """Regression: on an explicit mesh sharding the channels, the gradient of
    a replicated weight came back typed ``[C@c]`` (ValueError: Expected
    cotangent type float32[6] but got float32[6@c]), and at rank 3 the JVP's
    ``(outer, C, inner)`` reshape was a ShardingTypeError."""
    mesh = _mesh(2, "explicit", ("c",))
    shape = (4, 6) if rank == 2 else (8, 4, 6)
    x0 = rng.normal(size=shape).astype(np.float32)
    w0, b0 = rng.uniform(0.5, 2, 6).astype(np.float32), rng.normal(size=6).astype(np.float32)
    t = np.cos(np.arange(x0.size, dtype=np.float32)).reshape(shape)

    def loss(bn, x, w, b):
        return (bn(x, w, b, -1)[0] * t).sum()

    ours = lambda x, w, b, axis: aclnn.batch_norm(x, w, b, channel_axis=axis)  # noqa: E731
    with jax.set_mesh(mesh):
        x = jax.device_put(x0, NamedSharding(mesh, P(*(None,) * (rank - 1), "c")))
        grads = jax.jit(jax.grad(lambda *a: loss(ours, *a), argnums=(0, 1, 2)))(x, w0, b0)
        assert [str(jax.typeof(g)) for g in grads[1:]] == ["float32[6]"] * 2
        _, tangent = jax.jvp(lambda x: ours(x, w0, b0, -1)[0], (x,), (x,))
    expected = jax.grad(lambda *a: loss(lambda x, w, b, axis: reference_batch_norm(x, w, b, axis),
                                        *a), argnums=(0, 1, 2))(x0, w0, b0)
    for g, e in zip(grads, expected):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-4, atol=1e-5)
    _, e_tangent = jax.jvp(lambda x: reference_batch_norm(x, w0, b0, -1)[0], (x0,), (x0,))
    np.testing.assert_allclose(np.asarray(tangent), np.asarray(e_tangent), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", OPERATORS)
def test_gh27_uneven_sharding_after_a_reshape(rng, name):
    """Regression: a (10, 3, 4) array sharded P("x", None, "y") on a (4, 2)
    auto mesh and reshaped to (30, 4) reached the partitioner with a
    sharding no PartitionSpec expresses (KeyError in custom_partitioning);
    now XLA reshards the operands and the result is exact."""
    mesh = _mesh((4, 2), "auto", ("x", "y"))
    sh = NamedSharding(mesh, P("x", None, "y"))
    case = next(c for c in CASES if c.op == name)
    shapes = [(30, 4) if len(s) > 1 else s for s in case.shapes]
    if name == "batch_norm_reduce_backward":
        shapes = [(30, 4), (30, 4), (4,), (4,), (4,)]
    operands = case.operands(rng, shapes=tuple(shapes))

    def f(*args):
        placed = [jax.lax.with_sharding_constraint(a.reshape(10, 3, 4), sh).reshape(30, 4)
                  if a.shape == (30, 4) else a for a in args]
        return case.call(*placed)

    out = jax.jit(f)(*operands)
    expected = case.expected(*operands)
    for o, e in zip(jax.tree.leaves(out), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(o), e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["auto", "explicit"])
@pytest.mark.parametrize("devices", [2, 4, 8])
def test_gh27_uneven_batch_training_step_equals_one_device(rng, kind, devices):
    """A global batch of 30 on 2, 4 or 8 devices: the jitted training step
    through every operator gives the loss and gradients of one device.
    Auto mesh: the batch sharded (unevenly) by a constraint in the step.
    Explicit mesh (whose types cannot split 30 rows unevenly): the batch
    replicated and the hidden features (batch norm's channels) sharded,
    tensor-parallel."""
    params, x, y = network_problem(rng, 30)
    grad = jax.value_and_grad(network.loss)
    expected = jax.jit(grad)(params, x, y)
    mesh = _mesh(devices, kind)
    with jax.set_mesh(mesh):
        if kind == "auto":
            batch = NamedSharding(mesh, P("d"))
            step = jax.jit(lambda p, x, y: grad(p, *jax.lax.with_sharding_constraint((x, y), batch)))
        else:
            # the first block's features sharded, the rest replicated
            specs = [P(None, "d")] + [P()] * (len(params) - 1)
            params = [jax.device_put(w, NamedSharding(mesh, spec)) for w, spec in zip(params, specs)]
            step = jax.jit(grad)
        got = step(params, x, y)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("kind", ["auto", "explicit"])
def test_gh27_sync_batch_norm_in_shard_map_with_sharded_channels(rng, kind):
    """Regression: synchronized batch norm in a shard_map over "x" of an
    input P("x", "y") (channels sharded over the remaining axis "y") failed
    like the channel-sharded gradient above on an explicit mesh."""
    if kind == "explicit" and JAX_RELEASE < (0, 8):
        pytest.skip(f"jax {jax.__version__}: a shard_map manual over one axis of an explicit "
                    "mesh refuses a PartitionSpec entry naming it with an explicit axis")
    mesh = _mesh((4, 2), kind, ("x", "y"))
    x0, t = normal(rng, (16, 6)) * 2 + 1, normal(rng, (16, 6))
    w, b = rng.uniform(0.5, 2, 6).astype(np.float32), normal(rng, (6,))

    def per_device(x, w, b, t):
        y, _, _ = aclnn.batch_norm(x, w, b, axis_name="x")
        return jax.lax.psum(jnp.sum(jnp.sin(y) * t), "x")

    loss = jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P(), P(), P("x")), out_specs=P(),
                         axis_names={"x"})
    with jax.set_mesh(mesh):
        x = jax.device_put(x0, NamedSharding(mesh, P("x", "y")))
        t = jax.device_put(t, NamedSharding(mesh, P("x", "y")))
        value, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(x, w, b, t)
    (value0, _), grads0 = jax.value_and_grad(oracle_loss, argnums=(0, 1, 2), has_aux=True)(
        x0, w, b, np.asarray(t), -1)
    np.testing.assert_allclose(float(value), float(value0), rtol=1e-5, atol=1e-4)
    for a, e in zip(grads, grads0):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-4, atol=1e-5)
