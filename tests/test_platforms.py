"""Lowering per platform: aclnn custom calls on the CPU and the NPU
platform, the pure-JAX reference everywhere else and under the
JAX_ACLNN_REFERENCE kill switch (checked against the same oracles)."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_aclnn as aclnn
from cases import CASES, OPERATORS, ORACLES, ids, of
from conftest import DTYPES, as_dtype, assert_close, f64

TARGETS = OPERATORS
#: Each operator's first case of the table, called on one list of operands.
FIRST = [of(name)[0] for name in OPERATORS]
ARGS = tuple(jax.ShapeDtypeStruct(shape, jnp.float32) for c in FIRST for shape in c.shapes)


def every_operator(*operands):
    """Every operator, each on its own operands (its first case's shapes)."""
    out, i = [], 0
    for case in FIRST:
        out.append(case.call(*operands[i:i + len(case.shapes)]))
        i += len(case.shapes)
    return out


def operands(rng):
    """Values for :data:`ARGS`, in each case's ranges."""
    return [a for c in FIRST for a in c.operands(rng)]


def exported_text(platform: str) -> str:
    exported = jax.export.export(jax.jit(every_operator), platforms=[platform],
                                 disabled_checks=aclnn.export_disabled_checks())
    return exported(*ARGS).mlir_module()


def test_npu_export_contains_every_typed_ffi_call():
    text = exported_text("npu")
    for t in TARGETS:
        assert f"@aclnn_{t}" in text, t
    # typed FFI (api_version 4) carries its attributes as a dictionary
    assert text.count("mhlo.backend_config = {") == len(TARGETS)


def attribute_examples(x, c):
    return (
        aclnn.smooth_l1_loss_backward(x, x, x * 0.5, reduction="sum", beta=0.5),
        aclnn.logit_grad(x, x, eps=0.1),
        aclnn.hardshrink_backward(x, x, lambd=0.25),
        aclnn.swish_backward(x, x, beta=None),
        aclnn.batch_norm_reduce_backward(x, x, c, c, c, bias_g=False),
    )


def test_npu_export_encodes_the_attributes():
    exported = jax.export.export(jax.jit(attribute_examples), platforms=["npu"],
                                 disabled_checks=aclnn.export_disabled_checks())
    text = exported(jax.ShapeDtypeStruct((4, 3), jnp.float32),
                    jax.ShapeDtypeStruct((3,), jnp.float32)).mlir_module()
    # each call: its operator and first-phase argument list (csrc/ffi/arguments.h)
    for attr in (
        # tensors, int64 reduction = 2, float beta = 0.5
        'floats = dense<5.000000e-01> : tensor<1xf64>, ints = dense<2> : tensor<1xi64>, '
        'kinds = dense<[0, 0, 0, 7, 9, 1]> : tensor<6xi64>, library = "", '
        'operator = "aclnnSmoothL1LossBackward"',
        # double eps = 0.1
        'floats = dense<1.000000e-01> : tensor<1xf64>, ints = dense<> : tensor<0xi64>, '
        'kinds = dense<[0, 0, 8, 1]> : tensor<4xi64>, library = "", operator = "aclnnLogitGrad"',
        # an ACL_FLOAT aclScalar lambd = 0.25
        'floats = dense<2.500000e-01> : tensor<1xf64>, ints = dense<0> : tensor<1xi64>, '
        'kinds = dense<[0, 0, 5, 1]> : tensor<4xi64>',
        # a null betaOptional
        'kinds = dense<[0, 0, 4, 1]> : tensor<4xi64>, library = "", operator = "aclnnSwishBackward"',
        # bool inputG, weightG = true, biasG = false; gradBias absent
        'ints = dense<[1, 1, 0]> : tensor<3xi64>, kinds = dense<[0, 0, 0, 0, 0, 6, 6, 6, 1, 1, 1, 3]>',
    ):
        assert attr in text, attr


@pytest.mark.parametrize("platform", ["cuda", "rocm", "tpu"])
def test_other_platforms_lower_to_the_reference(platform):
    text = exported_text(platform)
    assert "aclnn_" not in text


KILL_SWITCH_SCRIPT = """
import jax, jax.numpy as jnp
import jax_aclnn as aclnn
x = jnp.full((4, 3), 0.5)
hlo = jax.jit(lambda x: (aclnn.logit_grad(x, x, eps=0.1), aclnn.swish_backward(x, x),
                         aclnn.hardshrink_backward(x, x))).lower(x).as_text()
print(sorted(t for t in ("logit_grad", "swish_backward", "hardshrink_backward")
             if "aclnn_" + t in hlo))
"""


def run_with_kill_switch(value: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_ACLNN_REFERENCE=value)
    return subprocess.run([sys.executable, "-c", KILL_SWITCH_SCRIPT], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("value,custom_calls", [
    ("logit_grad,swish_backward", "['hardshrink_backward']"), ("all", "[]"), ("1", "[]"),
    ("0", "['hardshrink_backward', 'logit_grad', 'swish_backward']"),
])
def test_kill_switch_forces_the_reference(value, custom_calls):
    """``$JAX_ACLNN_REFERENCE``, read at import, forces the reference path
    for the whole process."""
    result = run_with_kill_switch(value)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == custom_calls


def test_kill_switch_refuses_unknown_operator_names():
    """Regression (issue 28, item 6): a typo used to be silently accepted,
    disabling nothing; reference_path refused the same name."""
    result = run_with_kill_switch("swish_backward,bogus_name")
    assert result.returncode != 0
    assert ("ValueError: JAX_ACLNN_REFERENCE='swish_backward,bogus_name': unknown operator(s) "
            "'bogus_name'") in result.stderr


def test_reference_path_forces_the_reference_within_its_block(rng):
    args = operands(rng)
    lowered = lambda: jax.jit(every_operator).lower(*args).as_text()  # noqa: E731
    with aclnn.reference_path(["logit_grad", "swish_backward"]):
        hlo = lowered()
        with aclnn.reference_path("hardshrink_backward"):  # nested: adds to the outer block's
            inner = lowered()
        assert lowered() == hlo
    assert "aclnn_logit_grad" not in hlo and "aclnn_swish_backward" not in hlo
    assert "aclnn_hardshrink_backward" in hlo
    assert "aclnn_hardshrink_backward" not in inner and "aclnn_logit_grad" not in inner
    with aclnn.reference_path():
        assert "aclnn_" not in lowered()
    assert all(f"aclnn_{t}" in lowered() for t in TARGETS)  # off again after the block


def test_reference_path_is_part_of_the_trace_cache_key(rng):
    """Regression (issue 27, item 4): a function traced inside the block
    kept the reference outside it (and one traced outside kept the custom
    call inside), so comparing the two paths compared one with itself."""
    args = operands(rng)
    inside_first, outside_first = (jax.jit(lambda *a: every_operator(*a)) for _ in range(2))
    with aclnn.reference_path():
        assert "aclnn_" not in inside_first.lower(*args).as_text()
        jax.block_until_ready(inside_first(*args))
    assert all(f"aclnn_{t}" in outside_first.lower(*args).as_text() for t in TARGETS)
    assert all(f"aclnn_{t}" in inside_first.lower(*args).as_text() for t in TARGETS)
    with aclnn.reference_path():
        assert "aclnn_" not in outside_first.lower(*args).as_text()
    # and the calls themselves: counted by the aclnn runtime only outside the block
    aclnn.reset_runtime_stats()
    with aclnn.reference_path():
        jax.block_until_ready(outside_first(*args))
    builtin = lambda: [aclnn.runtime_stats()["calls"][aclnn.ops.primitive(t).aclnn_name]  # noqa: E731
                       for t in TARGETS]
    assert all(c["execute"] == 0 for c in builtin())
    jax.block_until_ready(inside_first(*args))
    assert all(c["execute"] == 1 for c in builtin())


def test_reference_path_refuses_bad_names():
    with pytest.raises(ValueError, match=r"reference_path: unknown operator\(s\) 'swish'"):
        with aclnn.reference_path(["swish_backward", "swish"]):
            pass
    with pytest.raises(TypeError, match="reference_path: ops must be"):
        with aclnn.reference_path(3):
            pass


def test_build_info_names_what_the_install_is_made_of():
    info = aclnn.build_info()
    assert info["host_kernel_target"] == aclnn.host_kernel_target()
    assert info["handler_platforms"] == ("cpu", info["npu_platform"])
    assert info["host_provider_library"].endswith("libaclnn_host.so")
    assert isinstance(info["build"], str) and info["build"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_reference_path_against_the_oracles(rng, dtype, case):
    operands = case.operands(rng, dtype)
    with aclnn.reference_path():
        out = case.call(*operands)
    expected = case.expected(*operands)
    scale = 4.0 if case.op == "batch_norm_reduce_backward" else 1.0  # sums of rounded terms
    for o, e in zip(*(jax.tree.leaves(v) for v in (out, expected)), strict=True):
        assert_close(o, e, dtype, scale=scale)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_path_of_logit_grad_outside_0_1(rng, dtype):
    x = as_dtype(rng.uniform(-0.5, 1.5, size=(5, 4, 3)), dtype)
    g = as_dtype(rng.normal(size=(5, 4, 3)), dtype)
    for eps in (-1.0, 0.1):  # NaN outside [0, 1]; 0 outside [eps, 1 - eps]
        with aclnn.reference_path():
            out = aclnn.logit_grad(x, g, eps=eps)
        assert_close(out, ORACLES["logit_grad"](f64(x), f64(g), eps=eps), dtype)


def test_exported_program_runs_in_a_fresh_process(tmp_path):
    """A serialized jax.export artifact holding the custom calls runs where
    jax_aclnn is imported: importing it registers the CPU handlers (without
    lowering any operator or starting a backend)."""
    import subprocess
    import sys
    import tempfile

    x = np.linspace(0.05, 0.95, 12, dtype=np.float32)
    fn = jax.jit(lambda x: aclnn.logit_grad(x, aclnn.swish_backward(x, x), eps=0.01))
    exported = jax.export.export(fn, disabled_checks=aclnn.export_disabled_checks())(x)
    (tmp_path / "f.bin").write_bytes(exported.serialize())
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys, numpy as np, jax, jax_aclnn\n"
        "f = jax.export.deserialize(bytearray(open(sys.argv[1] + '/f.bin', 'rb').read()))\n"
        "np.save(sys.argv[1] + '/y.npy', np.asarray(f.call(np.load(sys.argv[1] + '/x.npy'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                         text=True, timeout=120, cwd=tempfile.gettempdir())
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), np.asarray(fn(x)))


def custom_call_types(text: str, target: str) -> list[str]:
    """The operand and result types of each custom call to ``target`` in MLIR text."""
    return [line.rsplit(" : ", 1)[1] for line in text.splitlines()
            if f"stablehlo.custom_call @{target}(" in line]


def test_bfloat16_batch_norm_reduce_runs_in_float32_on_the_npu():
    """CANN's aclnnBatchNormReduceBackward takes float32/float16 only: a
    bfloat16 program for the NPU casts around the call; the host provider
    (CPU) takes bfloat16 itself."""
    def f(x, w):
        loss = lambda x, w: aclnn.batch_norm(x, w)[0].astype(jnp.float32).sum()  # noqa: E731
        return jax.grad(loss, (0, 1))(x, w), aclnn.batch_norm_reduce_backward(x, x, w, w, w)

    args = (jax.ShapeDtypeStruct((4, 3), jnp.bfloat16), jax.ShapeDtypeStruct((3,), jnp.bfloat16))
    for platform, wanted in (("npu", "f32"), ("cpu", "bf16")):
        exported = jax.export.export(jax.jit(f), platforms=[platform],
                                     disabled_checks=aclnn.export_disabled_checks())(*args)
        calls = custom_call_types(exported.mlir_module(), "aclnn_batch_norm_reduce_backward")
        assert len(calls) == 2, calls
        for types in calls:
            operands = types.split(") -> ")[0]
            assert operands.startswith(f"(tensor<4x3x1x{wanted}>, tensor<4x3x1x{wanted}>") or \
                operands.startswith(f"(tensor<4x3x{wanted}>, tensor<4x3x{wanted}>"), types
        assert [o.dtype for o in exported.out_avals] == [jnp.bfloat16] * 2 + [jnp.bfloat16] * 4
