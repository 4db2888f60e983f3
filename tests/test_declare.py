"""jax_aclnn.declare: any aclnn operator from its CANN prototype, through the
one generic handler.

The test provider (csrc/testing/test_provider.cc, a provider of its own
built with the test build) records what its recording first phases receive,
so the generic call's argument list (assembled at run time, called through
libffi) is checked value by value: every argument kind, more than 8 pointer
arguments, more than 8 floating arguments interleaved with pointers (some
on the stack). It also implements aclnnSoftplusBackward and
aclnnRmsNormGrad, checked against PyTorch's CPU kernel and float64 NumPy.
"""

from __future__ import annotations

import ctypes
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jax_aclnn as aclnn
from declared_operators import LIBRARY, SOFTPLUS_BACKWARD, recorded, softplus_backward_reference
from jax_aclnn import _loading

pytestmark = pytest.mark.skipif(not LIBRARY.exists(),
                                reason="the test provider is built with JAX_ACLNN_TESTING=ON")


def live_descriptors() -> int:
    lib = ctypes.CDLL(str(LIBRARY))
    lib.jaxAclnnTestLiveDescriptors.restype = ctypes.c_int64
    return lib.jaxAclnnTestLiveDescriptors()


def zeros_like_first(*inputs, **_):
    return jnp.zeros_like(inputs[0])


ALL_KINDS = aclnn.declare(
    "aclnnStatus aclnnRecordAllKindsGetWorkspaceSize(const aclTensor* self, "
    "const aclTensor* optionalOther, const aclScalar* alpha, const aclScalar* betaOptional, "
    "bool flag, int64_t count, double ratio, float scale, const aclIntArray* dims, "
    "const aclBoolArray* mask, const aclFloatArray* weights, const aclTensorList* tensors, "
    "const char* mode, int8_t cubeMathType, int32_t group, aclTensor* out, "
    "uint64_t* workspaceSize, aclOpExecutor** executor)",
    lambda self, optionalOther, tensors, *, alpha, betaOptional, flag, count, ratio, scale,
    dims, mask, weights, mode, cubeMathType, group: jnp.zeros_like(self),
    library=LIBRARY)


def test_every_argument_kind_arrives_as_declared():
    recorded()
    x = jnp.ones((2, 3), jnp.float32)
    out = jax.jit(lambda x, t: ALL_KINDS(
        x, None, [t, x], alpha=np.int64(3), betaOptional=None, flag=True, count=-5,
        ratio=0.1, scale=0.1, dims=[1, 2, 3], mask=[True, False], weights=[1.5, 2.0],
        mode="fast", cubeMathType=-3, group=2**31 - 1))(x, jnp.ones((4,), jnp.float16))
    assert out.shape == (2, 3)
    assert recorded() == [
        "tensor(f32,[2,3]); null; scalar(i64,3); null; true; -5; 0.10000000000000001; "
        "0.100000001; ints[1,2,3]; bools[true,false]; floats[1.5,2]; "
        "list[tensor(f16,[4]),tensor(f32,[2,3])]; \"fast\"; -3; 2147483647; tensor(f32,[2,3])"]


INT64 = st.integers(-2**63, 2**63 - 1)
# No subnormals: XLA's CPU threads, where the handler and the provider run,
# flush them to zero (as XLA's own code on them does).
FLOAT32 = st.floats(width=32, allow_nan=False, allow_subnormal=False)
FLOAT64 = st.floats(allow_nan=False, allow_subnormal=False)


# Each example compiles a program (the values are static): its own count.
@settings(max_examples=int(os.environ.get("JAX_ACLNN_DECLARE_FUZZ_EXAMPLES", "40")),
          deadline=None)
@given(flag=st.booleans(), count=INT64, ratio=FLOAT64, scale=FLOAT32,
       alpha=st.one_of(FLOAT32.map(np.float32), FLOAT64.map(np.float64),
                       INT64.map(np.int64), st.booleans().map(np.bool_)),
       dims=st.lists(INT64, max_size=9), mask=st.lists(st.booleans(), max_size=9),
       weights=st.lists(FLOAT32, max_size=9),
       mode=st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12),
       cube=st.integers(-128, 127), group=st.integers(-2**31, 2**31 - 1))
def test_fuzz_the_argument_list_against_what_arrives(flag, count, ratio, scale, alpha, dims, mask,
                                                      weights, mode, cube, group):
    """Property: whatever the values, the first phase receives exactly them
    (C's printf formats of the values, computed here from the values)."""
    recorded()
    x = np.zeros((1,), np.float32)
    ALL_KINDS(x, None, [x], alpha=alpha, betaOptional=None, flag=flag, count=count, ratio=ratio,
              scale=scale, dims=dims, mask=mask, weights=weights, mode=mode, cubeMathType=cube,
              group=group)
    boolean = lambda b: "true" if b else "false"  # noqa: E731
    acl = {np.float32: "f32", np.float64: "f64", np.int64: "i64", np.bool_: "bool"}[type(alpha)]
    alpha_text = (boolean(alpha) if isinstance(alpha, np.bool_) else
                  "%.17g" % alpha if isinstance(alpha, np.floating) else str(int(alpha)))
    assert recorded() == ["; ".join([
        "tensor(f32,[1])", "null", f"scalar({acl},{alpha_text})", "null", boolean(flag),
        str(count), "%.17g" % ratio, "%.9g" % scale, f"ints[{','.join(map(str, dims))}]",
        f"bools[{','.join(map(boolean, mask))}]",
        f"floats[{','.join('%.9g' % w for w in weights)}]", "list[tensor(f32,[1])]",
        f'"{mode}"', str(cube), str(group), "tensor(f32,[1])"])]


MANY_POINTERS = aclnn.declare(
    "aclnnRecordManyPointersGetWorkspaceSize(" + ", ".join(
        f"const aclTensor* a{i}" for i in range(10)) +
    ", aclTensor* out0, aclTensor* out1, uint64_t* workspaceSize, aclOpExecutor** executor)",
    lambda *a: (jnp.zeros((1,), jnp.float32), jnp.zeros((2,), jnp.float32)),
    library=LIBRARY)


def test_more_than_eight_pointer_arguments():
    recorded()
    args = [jnp.zeros((i + 1,), jnp.float32) for i in range(10)]
    MANY_POINTERS(*args)
    (line,) = recorded()
    assert line == "; ".join([f"tensor(f32,[{i + 1}])" for i in range(10)] +
                             ["tensor(f32,[1])", "tensor(f32,[2])"])


INTERLEAVED = aclnn.declare(
    "aclnnRecordInterleavedGetWorkspaceSize(const aclTensor* x, double d0, const aclTensor* y, "
    "float f0, int64_t i0, double d1, float f1, double d2, float f2, double d3, float f3, "
    "double d4, float f4, bool b0, double d5, aclTensor* out, uint64_t* workspaceSize, "
    "aclOpExecutor** executor)",
    lambda x, y, **_: jnp.zeros_like(x), library=LIBRARY)


def test_floating_arguments_interleaved_and_spilled_to_the_stack():
    recorded()
    x = jnp.ones((3,), jnp.float32)
    values = dict(d0=1e300, f0=-0.0, i0=2**62, d1=-2.5, f1=3.25, d2=1 / 3, f2=1e-30, d3=4.0,
                  f3=-7.5, d4=1e-300, f4=65504.0, b0=False, d5=-1e10)
    INTERLEAVED(x, x, **values)
    (line,) = recorded()
    assert line == ("tensor(f32,[3]); 1.0000000000000001e+300; tensor(f32,[3]); -0; "
                    "4611686018427387904; -2.5; 3.25; 0.33333333333333331; 1e-30; 4; "
                    "-7.5; 1e-300; 65504; false; -10000000000; tensor(f32,[3])")


softplus_backward = aclnn.declare(SOFTPLUS_BACKWARD, softplus_backward_reference,
                                  name="softplus_backward_test", library=LIBRARY,
                                  elementwise=True)


def gelu_backward_reference(gradOutput, self):
    cdf = 0.5 * (1 + jax.lax.erf(self / np.sqrt(2)))
    return gradOutput * (cdf + self * jnp.exp(-0.5 * self * self) / np.sqrt(2 * np.pi))


#: An operator no provider on this CPU has (the host provider implements
#: others; no library is given).
gelu_backward_nowhere = aclnn.declare(
    "aclnnStatus aclnnGeluBackwardGetWorkspaceSize(const aclTensor *gradOutput, "
    "const aclTensor *self, aclTensor *gradInput, uint64_t *workspaceSize, "
    "aclOpExecutor **executor)", gelu_backward_reference, name="gelu_backward_nowhere",
    elementwise=True)


def torch_softplus_backward(g, x, beta, threshold):
    torch = pytest.importorskip("torch")  # (not in .ci/aarch64's emulated venv)

    return torch.ops.aten.softplus_backward(torch.from_numpy(np.asarray(g)),
                                            torch.from_numpy(np.asarray(x)), beta,
                                            threshold).numpy()


def test_softplus_backward_in_the_test_provider_equals_torch(rng):
    x = rng.normal(0, 10, (64, 33)).astype(np.float32)
    g = rng.normal(0, 1, x.shape).astype(np.float32)
    aclnn.reset_runtime_stats()
    got = jax.jit(lambda g, x: softplus_backward(g, x, beta=0.5, threshold=2.0))(g, x)
    np.testing.assert_allclose(got, torch_softplus_backward(g, x, 0.5, 2.0), rtol=2e-6, atol=1e-7)
    assert aclnn.runtime_stats()["calls"]["aclnnSoftplusBackward"]["execute"] == 1
    text = jax.jit(lambda g, x: softplus_backward(g, x, beta=0.5, threshold=2.0)).lower(
        g, x).as_text()
    assert "aclnn_softplus_backward_test" in text


def test_without_a_provider_the_reference_runs(rng):
    torch = pytest.importorskip("torch")  # (not in .ci/aarch64's emulated venv)
    x = rng.normal(0, 3, (8,)).astype(np.float32)
    f = jax.jit(gelu_backward_nowhere)
    assert not _loading._aclnn_ffi.provides("aclnnGeluBackward")
    assert "custom_call" not in f.lower(x, x).as_text()
    aclnn.reset_runtime_stats()
    expected = torch.ops.aten.gelu_backward(torch.from_numpy(x), torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(f(x, x), expected, rtol=2e-6, atol=1e-6)
    assert aclnn.runtime_stats()["calls"]["aclnnGeluBackward"] == {"get_workspace_size": 0,
                                                                  "execute": 0}


def test_declared_operator_under_every_transformation(rng):
    x = rng.normal(0, 3, (4, 5)).astype(np.float32)
    g = rng.normal(0, 1, x.shape).astype(np.float32)
    f = lambda g, x: softplus_backward(g, x, beta=1.0, threshold=20.0)  # noqa: E731
    ref = lambda g, x: softplus_backward_reference(g, x, beta=1.0, threshold=20.0)  # noqa: E731
    loss = lambda fn: (lambda g, x: jnp.sum(fn(g, x) ** 2))  # noqa: E731
    for a, b in [
        (jax.jit(f)(g, x), ref(g, x)),
        (jax.grad(loss(f), argnums=(0, 1))(g, x), jax.grad(loss(ref), argnums=(0, 1))(g, x)),
        (jax.jvp(f, (g, x), (x, g))[1], jax.jvp(ref, (g, x), (x, g))[1]),
        (jax.vmap(f)(g, x), ref(g, x)),
        (jax.vmap(f, in_axes=(None, 1), out_axes=1)(g[:, 0], x), ref(g[:, :1], x)),
    ]:
        for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)
    aclnn.reset_runtime_stats()
    jax.vmap(f)(g, x)  # element-wise: one call for the batch
    assert aclnn.runtime_stats()["calls"]["aclnnSoftplusBackward"]["execute"] == 1


def test_export_for_cpu_and_npu_carries_the_generic_call():
    f = jax.jit(lambda g, x: softplus_backward(g, x, beta=0.5, threshold=2.0))
    spec = jax.ShapeDtypeStruct((3, 4), jnp.float32)
    exported = jax.export.export(f, platforms=["cpu", "npu"],
                                 disabled_checks=aclnn.export_disabled_checks())(spec, spec)
    text = exported.mlir_module()
    assert "@aclnn_softplus_backward_test" in text
    assert 'operator = "aclnnSoftplusBackward"' in text
    assert "kinds = dense<[0, 0, 5, 5, 1]>" in text
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(exported.call(x, x), torch_softplus_backward(x, x, 0.5, 2.0),
                               rtol=2e-6)


def rms_norm_grad_reference(dy, x, rstd, gamma):
    xn = x * rstd
    dgamma = jnp.sum(dy * xn, axis=0)
    mean = jnp.mean(dy * gamma * x, axis=-1, keepdims=True)
    return rstd * gamma * dy - x * rstd ** 3 * mean, dgamma


rms_norm_grad = aclnn.declare(
    "aclnnStatus aclnnRmsNormGradGetWorkspaceSize(const aclTensor *dy, const aclTensor *x, "
    "const aclTensor *rstd, const aclTensor *gamma, const aclTensor *dxOut, "
    "const aclTensor *dgammaOut, uint64_t *workspaceSize, aclOpExecutor **executor)",
    rms_norm_grad_reference, outputs=("dxOut", "dgammaOut"), name="rms_norm_grad_test",
    library=LIBRARY)


def rms_norm_reference(x, gamma, *, epsilon):
    rstd = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + epsilon)
    return x * rstd * gamma, rstd


def rms_norm_vjp(inputs, outputs, cotangents, *, epsilon):
    (x, gamma), (_, rstd), (dy, _) = inputs, outputs, cotangents
    return rms_norm_grad(dy, x, rstd, gamma)


rms_norm = aclnn.declare(
    "aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, "
    "double epsilon, const aclTensor *yOut, const aclTensor *rstdOut, uint64_t *workspaceSize, "
    "aclOpExecutor **executor)",
    rms_norm_reference, outputs=("yOut", "rstdOut"), name="rms_norm_test", vjp=rms_norm_vjp)


def test_rms_norm_pair_with_a_custom_vjp_equals_float64(rng):
    x = rng.normal(0, 1, (6, 8)).astype(np.float32)
    gamma = rng.normal(1, 0.1, (8,)).astype(np.float32)
    aclnn.reset_runtime_stats()
    dx, dgamma = jax.jit(jax.grad(lambda x, w: jnp.sum(rms_norm(x, w, epsilon=1e-6)[0] ** 2),
                                  argnums=(0, 1)))(x, gamma)
    assert aclnn.runtime_stats()["calls"]["aclnnRmsNormGrad"]["execute"] == 1
    x64, g64 = x.astype(np.float64), gamma.astype(np.float64)
    rstd = 1 / np.sqrt(np.mean(x64 ** 2, -1, keepdims=True) + 1e-6)
    dy = 2 * x64 * rstd * g64
    np.testing.assert_allclose(dgamma, np.sum(dy * x64 * rstd, 0), rtol=1e-5)
    np.testing.assert_allclose(
        dx, rstd * g64 * dy - x64 * rstd ** 3 * np.mean(dy * g64 * x64, -1, keepdims=True),
        rtol=1e-4, atol=1e-5)


def test_descriptors_are_all_destroyed():
    from conftest import free_compiled_programs

    x = jnp.ones((3,), jnp.float32)
    INTERLEAVED(x, x, d0=1, f0=1, i0=1, d1=1, f1=1, d2=1, f2=1, d3=1, f3=1, d4=1, f4=1, b0=1, d5=1)
    free_compiled_programs()
    assert live_descriptors() == 0
    recorded()


@pytest.mark.parametrize("prototype,match", [
    ("aclnnFooGetWorkspaceSize(const aclTensor* x, aclTensor* out)", "last two parameters"),
    ("aclnnFooGetWorkspaceSize(const aclThing* x, aclTensor* out, uint64_t* workspaceSize, "
     "aclOpExecutor** executor)", "not an aclnn argument type"),
])
def test_a_prototype_that_does_not_parse_is_a_value_error(prototype, match):
    with pytest.raises(ValueError, match=match):
        aclnn.declare(prototype, lambda x: x)


def test_a_reference_without_the_prototypes_parameters_is_a_value_error():
    with pytest.raises(ValueError, match="no parameter for beta, threshold"):
        aclnn.declare(SOFTPLUS_BACKWARD, lambda g, x: g, name="bad_reference")


def test_a_reference_with_other_outputs_is_a_value_error_when_traced():
    f = aclnn.declare(SOFTPLUS_BACKWARD, lambda g, x, *, beta, threshold: (g, x),
                      name="two_outputs")
    with pytest.raises(ValueError, match="returns 2 outputs, the prototype has 1"):
        f(jnp.ones(2), jnp.ones(2), beta=1.0, threshold=1.0)


@pytest.mark.parametrize("axis_type", ["Auto", "Explicit"])
@pytest.mark.parametrize("spec", [("data", "model"), (None, ("data", "model")), ("model",)])
@pytest.mark.parametrize("shape", [(16, 8), (10, 6)], ids=["even", "uneven"])
def test_elementwise_declared_operator_runs_on_its_shards(rng, axis_type, spec, shape):
    """Element-wise: partitioned along every dimension, no all-gather where
    the sizes divide the mesh; the result keeps the operands' sharding.
    Uneven sizes (a batch of 10 rows over 4 devices) are placed by a sharding
    constraint in the program, as XLA may place any intermediate (explicit
    sharding types must divide their dimensions)."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    if shape == (10, 6) and axis_type == "Explicit":
        pytest.skip("explicit sharding types must divide their dimensions")
    kind = getattr(jax.sharding.AxisType, axis_type)
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(kind, kind))
    sharding = NamedSharding(mesh, P(*spec))
    x = rng.normal(0, 3, shape).astype(np.float32)
    g = rng.normal(0, 1, x.shape).astype(np.float32)
    if shape == (16, 8):
        args = [jax.device_put(a, sharding) for a in (g, x)]
        place = lambda a: a  # noqa: E731
    else:
        args = [g, x]
        place = lambda a: jax.lax.with_sharding_constraint(a, sharding)  # noqa: E731
    fn = jax.jit(lambda g, x: softplus_backward(place(g), place(x), beta=1.0, threshold=20.0))
    with jax.set_mesh(mesh):
        out = fn(*args)
        hlo = fn.lower(*args).compile().as_text()
    np.testing.assert_allclose(out, softplus_backward_reference(g, x, beta=1.0, threshold=20.0),
                               rtol=1e-5, atol=1e-6)
    assert "aclnn_softplus_backward_test" in hlo
    if shape == (16, 8):
        padded = lambda s: tuple(s) + (None,) * (2 - len(s))  # noqa: E731
        assert padded(out.sharding.spec) == padded(spec)
        assert "all-gather" not in hlo


@pytest.mark.parametrize("axis_type", ["Auto", "Explicit"])
def test_other_declared_operators_are_replicated_under_sharding(rng, axis_type):
    """Not element-wise: the operands are gathered and every device runs the
    whole call (the meaning of the dimensions is not declared); the results
    equal one device's."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    kind = getattr(jax.sharding.AxisType, axis_type)
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(kind, kind))
    x = rng.normal(0, 1, (8, 6)).astype(np.float32)
    gamma = rng.normal(1, 0.1, (6,)).astype(np.float32)
    rstd = 1 / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-6)
    dy = rng.normal(0, 1, x.shape).astype(np.float32)
    fn = jax.jit(rms_norm_grad)
    sharded = [jax.device_put(a, NamedSharding(mesh, P("data", *(None,) * (a.ndim - 1))))
               for a in (dy, x, rstd)] + [jax.device_put(gamma, NamedSharding(mesh, P("model")))]
    with jax.set_mesh(mesh):
        got = fn(*sharded)
    for u, v in zip(got, fn(dy, x, rstd, gamma)):
        np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("change,match", [
    ({"scale": 1e39}, r"scale=1e\+39 is beyond float32's range"),
    ({"weights": [1.0, -1e39]}, r"weights=-1e\+39 is beyond float32's range"),
    ({"alpha": 3.5e38}, r"alpha=3.5e\+38 is beyond float32's range"),
    ({"cubeMathType": 128}, r"cubeMathType=128 is beyond int8_t's range"),
    ({"group": -2**31 - 1}, r"group=-2147483649 is beyond int32_t's range"),
    ({"count": 2**63}, r"count=9223372036854775808 is beyond int64_t's range"),
    ({"dims": [2**64]}, r"dims=18446744073709551616 is beyond int64_t's range"),
])
def test_a_value_beyond_its_c_type_is_a_value_error(change, match):
    """C's conversion would wrap an integer or be undefined for a float
    beyond float's range: refused when traced, naming the parameter."""
    x = np.zeros((1,), np.float32)
    args = dict(alpha=1.0, betaOptional=None, flag=True, count=1, ratio=1.0, scale=1.0, dims=[1],
                mask=[True], weights=[1.0], mode="m", cubeMathType=0, group=0)
    with pytest.raises(ValueError, match=match):
        ALL_KINDS(x, None, [x], **{**args, **change})


def test_minus_zero_and_zero_are_different_calls():
    """-0.0 == 0.0 in Python, and JAX reuses a compiled call for equal
    parameters: the second call received the first's -0 (a hypothesis
    example of the fuzz above found it)."""
    x = np.zeros((1,), np.float32)
    arrived = []
    for ratio in (-0.0, 0.0, -0.0):
        recorded()
        ALL_KINDS(x, None, [x], alpha=np.float32(ratio), betaOptional=None,
                  flag=True, count=0, ratio=ratio, scale=ratio, dims=[], mask=[], weights=[ratio],
                  mode="", cubeMathType=0, group=0)
        arrived.append(recorded()[0].split("; "))
    assert [a[2] for a in arrived] == ["scalar(f32,-0)", "scalar(f32,0)", "scalar(f32,-0)"]
    assert [a[6] for a in arrived] == ["-0", "0", "-0"]  # double ratio
    assert [a[7] for a in arrived] == ["-0", "0", "-0"]  # float scale
    assert [a[10] for a in arrived] == ["floats[-0]", "floats[0]", "floats[-0]"]
