"""Declared operators with dimension rules (issue 37): vmap in one call and
sharding from ``dims=``, through the test provider's float32 aclnnRmsNorm,
aclnnRmsNormGrad, aclnnSwiGlu and aclnnSwiGluGrad (csrc/testing/,
implemented from CANN's documented formulas).

The matrix runs each pair's value and gradient with every dimension
sharded in turn (the placements of tests/test_sharding_matrix.py: auto and
explicit meshes, even and uneven sizes, ``jit`` and a ``shard_map`` over
part of the mesh, and under ``vmap``) against the same program in
jax.numpy; the other tests check the compiled programs (no all-gather of a
batch-sharded step, dgamma all-reduced), float64 NumPy, one call under
``vmap``, explicit-mesh types, export and the rule's errors.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import BEFORE_JAX_09, NUM_DEVICES
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from test_sharding_matrix import FAST, MESHES, MODES, placements

import jax_aclnn as aclnn
from declared_operators import LIBRARY

pytestmark = [
    pytest.mark.skipif(not LIBRARY.exists(), reason="the test provider is built with "
                                                    "JAX_ACLNN_TESTING=ON"),
    pytest.mark.skipif(jax.device_count() < NUM_DEVICES, reason="needs 8 host devices"),
]

PROTOTYPES = {
    "rms_norm": ("aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor *x, "
                 "const aclTensor *gamma, double epsilon, const aclTensor *yOut, "
                 "const aclTensor *rstdOut, uint64_t *workspaceSize, aclOpExecutor **executor)"),
    "rms_norm_grad": ("aclnnStatus aclnnRmsNormGradGetWorkspaceSize(const aclTensor *dy, "
                      "const aclTensor *x, const aclTensor *rstd, const aclTensor *gamma, "
                      "const aclTensor *dxOut, const aclTensor *dgammaOut, "
                      "uint64_t *workspaceSize, aclOpExecutor **executor)"),
    "swiglu": ("aclnnStatus aclnnSwiGluGetWorkspaceSize(const aclTensor *x, int64_t dim, "
               "const aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)"),
    "swiglu_grad": ("aclnnStatus aclnnSwiGluGradGetWorkspaceSize(const aclTensor *yGrad, "
                    "const aclTensor *x, int64_t dim, const aclTensor *out, "
                    "uint64_t *workspaceSize, aclOpExecutor **executor)"),
}


def provided(aclnn_name: str) -> bool:
    return hasattr(ctypes.CDLL(str(LIBRARY)), aclnn_name + "GetWorkspaceSize")


# --- the pairs, declared on the test provider with their rules ---------------------

def rms_norm_reference(x, gamma, *, epsilon):
    rstd = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + epsilon)
    return x * rstd * gamma, rstd


def rms_norm_grad_reference(dy, x, rstd, gamma):
    dgamma = jnp.sum((dy * x * rstd).reshape(-1, x.shape[-1]), axis=0)
    mean = jnp.mean(dy * gamma * x, axis=-1, keepdims=True)
    return rstd * gamma * dy - x * rstd ** 3 * mean, dgamma


RMS_NORM_GRAD = aclnn.declare(
    PROTOTYPES["rms_norm_grad"], rms_norm_grad_reference, outputs=("dxOut", "dgammaOut"),
    library=LIBRARY, dims="... h, ... h, ... 1, h -> ... h, h", replicated="h",
    name="dims_rms_norm_grad")


def rms_norm_vjp(inputs, outputs, cotangents, *, epsilon):
    (x, gamma), (_, rstd), (dy, drstd) = inputs, outputs, cotangents
    dx, dgamma = RMS_NORM_GRAD(dy, x, rstd, gamma)
    return dx - drstd * x * rstd ** 3 / x.shape[-1], dgamma


RMS_NORM = aclnn.declare(
    PROTOTYPES["rms_norm"], rms_norm_reference, outputs=("yOut", "rstdOut"), library=LIBRARY,
    vjp=rms_norm_vjp, dims="... h, h -> ... h, ... 1", replicated="h", name="dims_rms_norm")


def swiglu_reference(x, *, dim):
    a, b = jnp.split(x, 2, axis=dim)
    return jax.nn.silu(a) * b


def swiglu_grad_reference(yGrad, x, *, dim):
    return jax.vjp(lambda x: swiglu_reference(x, dim=dim), x)[1](yGrad)[0]


SWIGLU_GRAD = aclnn.declare(
    PROTOTYPES["swiglu_grad"], swiglu_grad_reference, outputs="out", library=LIBRARY,
    dims="... j, ... i -> ... i", replicated=("i", "j"), name="dims_swiglu_grad")
SWIGLU = aclnn.declare(
    PROTOTYPES["swiglu"], swiglu_reference, outputs="out", library=LIBRARY,
    vjp=lambda inputs, y, dy, *, dim: (SWIGLU_GRAD(dy, inputs[0], dim=dim),),
    dims="... i -> ... j", replicated=("i", "j"), name="dims_swiglu")

pytestmark.append(pytest.mark.skipif(
    not all(provided(n) for n in ("aclnnRmsNorm", "aclnnSwiGlu", "aclnnSwiGluGrad")),
    reason="the test provider lacks the norm operators"))


def gamma_of(b):
    return 1 + 0.1 * jnp.mean(b, axis=tuple(range(b.ndim - 1)))


#: name -> (with the declared operators, in jax.numpy), programs of two arrays
PAIRS = {
    "rms_norm": (lambda a, b: RMS_NORM(a, gamma_of(b), epsilon=1e-6),
                 lambda a, b: rms_norm_reference(a, gamma_of(b), epsilon=1e-6)),
    "swiglu": (lambda a, b: SWIGLU(jnp.concatenate([a, b], -1), dim=-1),
               lambda a, b: swiglu_reference(jnp.concatenate([a, b], -1), dim=-1)),
}


def value_and_grads(f):
    def run(a, b):
        loss = lambda a, b: sum(jnp.sum(jnp.sin(o)) for o in jax.tree.leaves(f(a, b)))  # noqa: E731
        return f(a, b), jax.grad(loss, argnums=(0, 1))(a, b)

    return run


def pytest_generate_tests(metafunc):  # noqa: D103 (pytest hook)
    if "placement" not in metafunc.fixturenames:
        return
    full = metafunc.config.getoption("--sharding-matrix") == "full"
    cases = [(m, p) for m, p in ((m, p) for m in MODES for p in placements())
             if full or (m, p.id) in FAST]
    metafunc.parametrize("mode,placement", cases, ids=[f"{m}-{p.id}" for m, p in cases])
    metafunc.parametrize("name", sorted(PAIRS))


def _make(fn, placement, mode, mesh):
    run = value_and_grads(fn)
    if mode == "vmap":
        run = jax.vmap(run)
    if placement.context == "shard_map":
        inner = jax.shard_map(run, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                              axis_names={"x"})
    else:
        inner = run
    if placement.explicit:
        return jax.jit(inner)
    sharding = NamedSharding(mesh, P(*placement.spec))
    return jax.jit(lambda a, b: inner(*jax.lax.with_sharding_constraint((a, b), sharding)))


def skip_all_reduce_under_an_explicit_mesh_before_jax09(explicit: bool) -> None:
    """jax 0.7 and 0.8 cannot compile a custom_partitioning rule's all-reduce
    under an explicit mesh (dgamma's; see conftest.ALL_REDUCING)."""
    if explicit and BEFORE_JAX_09:
        pytest.skip(f"jax {jax.__version__} (before 0.9): the all-reduce of a "
                    "custom_partitioning rule under an explicit mesh does not compile")


def test_matrix(rng, name, mode, placement):
    if name == "rms_norm":
        skip_all_reduce_under_an_explicit_mesh_before_jax09(placement.explicit)
    shape, names, kind = MESHES[placement.mesh]
    mesh = jax.make_mesh(shape, names, axis_types=(kind,) * len(names))
    spec = P(*placement.spec) if placement.explicit else P()
    a, b = (jax.device_put(rng.normal(size=placement.shape).astype(np.float32),
                           NamedSharding(mesh, spec)) for _ in range(2))
    ours, formula = PAIRS[name]
    with jax.set_mesh(mesh):
        actual = _make(ours, placement, mode, mesh)(a, b)
        expected = _make(formula, placement, mode, mesh)(a, b)
    for x, y in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        assert x.shape == y.shape
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-4)
        if placement.explicit:  # typed as jax.numpy's, but along the replicated last dimension
            pad = lambda spec: (tuple(spec) + (None,) * x.ndim)[: x.ndim - 1]  # noqa: E731
            assert pad(jax.typeof(x).sharding.spec) == pad(jax.typeof(y).sharding.spec)


# --- the compiled data-parallel step ------------------------------------------------

def rms_norm_loss(x, gamma):
    y, _ = RMS_NORM(x, gamma, epsilon=1e-6)
    return jnp.sum(y * jnp.cos(y))


def float64_rms_norm_step(x, gamma, eps=1e-6):
    """value_and_grad of rms_norm_loss in float64 NumPy."""
    x, gamma = x.astype(np.float64), gamma.astype(np.float64)
    rstd = 1 / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
    y = x * rstd * gamma
    dy = np.cos(y) - y * np.sin(y)
    dgamma = np.sum(dy * x * rstd, axis=tuple(range(x.ndim - 1)))
    g = dy * gamma
    dx = rstd * g - x * rstd ** 3 * np.mean(g * x, -1, keepdims=True)
    return np.sum(y * np.cos(y)), dx, dgamma


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit])
def test_a_batch_sharded_step_has_no_all_gather_and_all_reduces_dgamma(rng, axis_type):
    skip_all_reduce_under_an_explicit_mesh_before_jax09(axis_type == AxisType.Explicit)
    mesh = jax.make_mesh((4,), ("data",), axis_types=(axis_type,))
    x = rng.normal(size=(16, 6, 32)).astype(np.float32)
    gamma = (1 + 0.1 * rng.normal(size=32)).astype(np.float32)
    xs = jax.device_put(x, NamedSharding(mesh, P("data")))
    gs = jax.device_put(gamma, NamedSharding(mesh, P()))
    step = jax.jit(jax.value_and_grad(rms_norm_loss, (0, 1)))
    with jax.set_mesh(mesh):
        hlo = step.lower(xs, gs).compile().as_text()
        loss, (dx, dgamma) = step(xs, gs)
    assert "all-gather" not in hlo
    assert any("all-reduce" in line and "f32[32]" in line for line in hlo.splitlines())
    assert dx.sharding.spec[0] == "data"
    want = float64_rms_norm_step(x, gamma)
    np.testing.assert_allclose(loss, want[0], rtol=1e-5)
    np.testing.assert_allclose(dx, want[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dgamma, want[2], rtol=1e-4, atol=1e-4)


def calls(aclnn_name: str) -> int:
    return aclnn.runtime_stats()["calls"][aclnn_name]["execute"]


def test_vmap_is_one_call_of_each_operator(rng):
    xs = rng.normal(size=(5, 4, 32)).astype(np.float32)
    gamma = np.ones(32, np.float32)
    before = calls("aclnnRmsNorm"), calls("aclnnSwiGlu"), calls("aclnnSwiGluGrad")
    y = jax.jit(jax.vmap(lambda x: RMS_NORM(x, gamma, epsilon=1e-6)[0]))(xs)
    dx = jax.jit(jax.vmap(jax.grad(lambda x: jnp.sum(SWIGLU(x, dim=-1) ** 2))))(xs)
    after = calls("aclnnRmsNorm"), calls("aclnnSwiGlu"), calls("aclnnSwiGluGrad")
    assert [b - a for a, b in zip(before, after)] == [1, 1, 1]
    np.testing.assert_allclose(y, rms_norm_reference(xs, gamma, epsilon=1e-6)[0], rtol=1e-5)
    want = jax.vmap(jax.grad(lambda x: jnp.sum(swiglu_reference(x, dim=-1) ** 2)))(xs)
    np.testing.assert_allclose(dx, want, rtol=1e-4, atol=1e-5)


def test_per_example_dgamma_is_one_call_and_right(rng):
    """dgamma lacks '...': per-example gradients run one RmsNormGrad call
    over all examples (dx's), the per-example dgamma from the reference
    (issue 44: it ran one call per example), and equal float64 NumPy."""
    xs = rng.normal(size=(3, 4, 8)).astype(np.float32)
    gamma = (1 + 0.1 * rng.normal(size=8)).astype(np.float32)
    before = calls("aclnnRmsNormGrad")
    dxs, dgammas = jax.jit(jax.vmap(jax.grad(rms_norm_loss, (0, 1)), (0, None)))(xs, gamma)
    assert calls("aclnnRmsNormGrad") - before == 1
    for x, dx, dgamma in zip(xs, dxs, dgammas):
        _, want_dx, want_dgamma = float64_rms_norm_step(x, gamma)
        np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(dgamma, want_dgamma, rtol=1e-4, atol=1e-5)


# --- export ----------------------------------------------------------------------------

def test_the_pair_on_a_library_without_executor_reuse(rng):
    """A user's library that is a complete provider without executor reuse:
    the data-parallel step on an explicit mesh and in a partial shard_map
    (check_vma on), equal to float64 NumPy."""
    library = LIBRARY.with_name("libaclnn_test_provider_no_reuse.so")
    grad = aclnn.declare(PROTOTYPES["rms_norm_grad"], rms_norm_grad_reference,
                         outputs=("dxOut", "dgammaOut"), library=library,
                         dims="... h, ... h, ... 1, h -> ... h, h", replicated="h",
                         name="dims_rms_norm_grad_no_reuse")
    norm = aclnn.declare(
        PROTOTYPES["rms_norm"], rms_norm_reference, outputs=("yOut", "rstdOut"),
        library=library, dims="... h, h -> ... h, ... 1", replicated="h",
        vjp=lambda i, o, c, *, epsilon: grad(c[0], i[0], o[1], i[1]), name="dims_rms_norm_no_reuse")
    loss = lambda x, g: jnp.sum(norm(x, g, epsilon=1e-6)[0] * jnp.cos(norm(x, g, epsilon=1e-6)[0]))  # noqa: E731
    x = rng.normal(size=(8, 6, 16)).astype(np.float32)
    gamma = (1 + 0.1 * rng.normal(size=16)).astype(np.float32)
    want = float64_rms_norm_step(x, gamma)
    mesh = jax.make_mesh((2, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    xs = jax.device_put(x, NamedSharding(mesh, P("data")))
    gs = jax.device_put(gamma, NamedSharding(mesh, P()))
    # inside the shard_map, dgamma of the replicated gamma is summed over "data" by
    # the vjp's typing (check_vma): the global dgamma
    partial_map = jax.shard_map(jax.grad(loss, (0, 1)), mesh=mesh,
                                in_specs=(P("data"), P()), out_specs=(P("data"), P()),
                                axis_names={"data"})
    results = []
    with jax.set_mesh(mesh):
        if not BEFORE_JAX_09:  # the explicit mesh's all-reduce (see the skip above)
            step = jax.jit(jax.grad(loss, (0, 1)))
            results = [step(xs, gs) for _ in range(3)]  # each call runs both phases
        results.append(jax.jit(partial_map)(xs, gs))
    for dx, dgamma in results:
        np.testing.assert_allclose(dx, want[1], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(dgamma, want[2], rtol=1e-4, atol=1e-4)


def test_a_sharded_step_exports_serializes_and_runs_in_a_fresh_process(rng, tmp_path):
    mesh = jax.make_mesh((4,), ("data",), axis_types=(AxisType.Auto,))
    x = rng.normal(size=(8, 16)).astype(np.float32)
    gamma = np.ones(16, np.float32)
    args = (jax.device_put(x, NamedSharding(mesh, P("data"))),
            jax.device_put(gamma, NamedSharding(mesh, P())))

    def step(x, gamma):  # every built-in operator and a declared pair
        def loss(x, g):
            y, _, _ = aclnn.batch_norm(x, channel_axis=-1)
            return (rms_norm_loss(x, g) + jnp.sum(aclnn.swish(y)) + jnp.sum(aclnn.hardshrink(x))
                    + jnp.sum(aclnn.logit(jax.nn.sigmoid(x), eps=1e-3))
                    + aclnn.smooth_l1_loss(x, jnp.zeros_like(x)))
        return jax.value_and_grad(loss, (0, 1))(x, gamma)

    exported = jax.export.export(jax.jit(step), platforms=["cpu", "npu"],
                                 disabled_checks=aclnn.export_disabled_checks())(*args)
    (tmp_path / "step.bin").write_bytes(exported.serialize())
    np.save(tmp_path / "x.npy", x)
    expected = jax.jit(step)(*args)
    script = textwrap.dedent(f"""
        import os, sys
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
        sys.path.insert(0, {str(__file__.rsplit('/', 1)[0])!r})
        import jax, numpy as np
        from jax.sharding import NamedSharding, PartitionSpec as P
        import test_declared_dims  # declares the same operators
        exp = jax.export.deserialize(open({str(tmp_path / 'step.bin')!r}, "rb").read())
        mesh = jax.make_mesh((4,), ("data",))
        x = jax.device_put(np.load({str(tmp_path / 'x.npy')!r}), NamedSharding(mesh, P("data")))
        g = jax.device_put(np.ones(16, np.float32), NamedSharding(mesh, P()))
        loss, (dx, dg) = exp.call(x, g)
        np.save({str(tmp_path / 'out.npy')!r}, np.concatenate([np.ravel(loss), np.ravel(dx), np.ravel(dg)]))
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    got = np.load(tmp_path / "out.npy")
    want = np.concatenate([np.ravel(v) for v in jax.tree.leaves(expected)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# --- errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("dims,replicated,match", [
    ("... h, h", (), "expected one '->'"),
    ("... h, h -> ... h", (), "1 groups for the outputs"),
    ("... h, h, h -> ... h, ... 1", (), "3 groups for the inputs"),
    ("h ..., h -> ... h, ... 1", (), "comes first in a group"),
    ("... h, h -> ... h, ... 1", ("k",), "replicated names 'k'"),
    ("... h, h% -> ... h, ... 1", (), "unexpected token 'h%'"),
])
def test_a_malformed_rule_is_a_value_error_at_declaration(dims, replicated, match):
    with pytest.raises(ValueError, match=match):
        aclnn.declare(PROTOTYPES["rms_norm"], rms_norm_reference, outputs=("yOut", "rstdOut"),
                      dims=dims, replicated=replicated, name="bad_rule")


def test_a_rule_that_does_not_match_the_operands_is_a_value_error_when_traced():
    op = aclnn.declare(PROTOTYPES["rms_norm"], rms_norm_reference, outputs=("yOut", "rstdOut"),
                       library=LIBRARY, dims="b h, h -> b h, b 1", name="rank_two_rule")
    mesh = jax.make_mesh((4,), ("x",), axis_types=(AxisType.Explicit,))
    x = jax.device_put(np.ones((4, 2, 8), np.float32), NamedSharding(mesh, P("x")))
    with jax.set_mesh(mesh), pytest.raises(ValueError, match="has 2 dimensions, the array has shape"):
        jax.jit(lambda x: op(x, jnp.ones(8), epsilon=1e-6))(x)
