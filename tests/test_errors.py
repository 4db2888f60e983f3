"""Bad input gets a clear error at trace time, never a crash; a provider's
aclnnStatus reaches Python with its code and message."""

from __future__ import annotations

import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_aclnn as aclnn
from cases import OPERATORS, of
from conftest import enable_x64
from jax_aclnn.ops import primitive

F = np.ones((2, 3), np.float32)


@pytest.mark.parametrize("bad", [np.int32, np.bool_, np.complex64, np.float64])
def test_unsupported_dtype_is_a_type_error_naming_the_argument(bad):
    arr = np.ones((2, 3)).astype(bad)
    with pytest.raises(TypeError, match="input has dtype"):
        aclnn.smooth_l1_loss_backward(F, arr, F)
    with pytest.raises(TypeError, match="dy has dtype"):
        aclnn.logit_grad(F, arr)
    with pytest.raises(TypeError, match="grad_output has dtype"):
        aclnn.hardshrink_backward(arr, F)
    with pytest.raises(TypeError, match="x has dtype"):
        aclnn.swish(arr)


def test_mixed_dtypes_are_a_type_error():
    with pytest.raises(TypeError, match="share one dtype.*grad_output: float16.*input: float32"):
        aclnn.swish_backward(F.astype(np.float16), F)


def test_shape_errors_name_arguments_and_shapes():
    with pytest.raises(ValueError, match=r"grad_out\(2, 3\), input\(4,\), target\(2, 3\)"):
        aclnn.smooth_l1_loss_backward(F, np.ones(4, np.float32), F)
    with pytest.raises(ValueError, match=r"x\(2, 3\), dy\(3,\)"):
        aclnn.logit_grad(F, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="same shape"):
        aclnn.swish_backward(F, np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="rank 9 .* 9 dimensions that cannot be merged"):
        aclnn.hardshrink_backward(np.ones((2, 1) * 4 + (2,), np.float32),
                                  np.ones((1, 2) * 4 + (1,), np.float32))


def test_batch_norm_reduce_shape_rules():
    x = np.ones((4, 3, 2), np.float32)
    c = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="rank >= 2"):
        aclnn.batch_norm_reduce_backward(c, c, c, c, c)
    with pytest.raises(ValueError, match=r"mean must have shape \(3,\)"):
        aclnn.batch_norm_reduce_backward(x, x, np.ones(4, np.float32), c, c)
    with pytest.raises(ValueError, match=r"weight must have shape"):
        aclnn.batch_norm_reduce_backward(x, x, c, c, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="C >= 1"):
        z = np.ones((4, 0, 2), np.float32)
        aclnn.batch_norm_reduce_backward(z, z, c[:0], c[:0], None)
    with pytest.raises(ValueError, match="same shape"):
        aclnn.batch_norm_reduce_backward(x[:2], x, c, c, c)


def test_attribute_errors():
    with pytest.raises(ValueError, match="beta must be >= 0"):
        aclnn.smooth_l1_loss_backward(F, F, F, beta=-1.0)
    with pytest.raises(ValueError, match="reduction must be"):
        aclnn.smooth_l1_loss_backward(F, F, F, reduction="avg")
    with pytest.raises(ValueError, match="reduction must be"):
        aclnn.smooth_l1_loss(F, F, reduction=3)
    with pytest.raises(TypeError, match="beta must be a real number"):
        aclnn.swish_backward(F, F, beta="x")
    with pytest.raises(ValueError, match="channel_axis 3 is out of range"):
        aclnn.batch_norm(F, channel_axis=3)


def test_errors_are_raised_at_trace_time():
    @jax.jit
    def f(x):
        return aclnn.logit_grad(x, x.astype(jnp.float16))

    with pytest.raises(TypeError):
        f.lower(F)


def test_provider_status_reaches_python_with_code_and_message():
    """A call the host provider rejects (reduction 7), built by hand."""
    from conftest import free_compiled_programs

    free_compiled_programs()  # no other program's descriptors go away meanwhile
    live_before = aclnn.runtime_stats()["live_tensors"]
    call = jax.ffi.ffi_call("aclnn_smooth_l1_loss_backward", jax.ShapeDtypeStruct((2, 3), np.float32))
    with pytest.raises(Exception, match=r"aclnnSmoothL1LossBackwardGetWorkspaceSize failed: aclnnStatus 161002 \(ACLNN_ERR_PARAM_INVALID\): .*reduction must be 0"):
        jax.jit(lambda x: call(x, x, x, **aclnn.ops.primitive("smooth_l1_loss_backward").ffi_attributes(reduction=7, beta=1.0)))(F).block_until_ready()
    wrong = jax.ffi.ffi_call("aclnn_logit_grad", jax.ShapeDtypeStruct((3, 2), np.float32))
    with pytest.raises(Exception, match=r"aclnnStatus 161002 .*out has shape \[3,2\]"):
        jax.jit(lambda x: wrong(x, x, **aclnn.ops.primitive("logit_grad").ffi_attributes(eps=-1.0)))(F).block_until_ready()
    # nothing of the failed calls stays alive
    assert aclnn.runtime_stats()["live_tensors"] == live_before


def test_host_provider_refuses_null_executor_reuse_arguments_as_cann_does():
    import ctypes

    from jax_aclnn import _loading

    lib = ctypes.CDLL(str(_loading.HOST_PROVIDER_LIBRARY))
    lib.aclGetRecentErrMsg.restype = ctypes.c_char_p
    for fn in (lib.aclSetInputTensorAddr, lib.aclSetOutputTensorAddr):
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p]
        assert fn(None, 0, None, None) == 561103  # ACLNN_ERR_INNER_NULLPTR, as CANN documents
        assert b"null" in lib.aclGetRecentErrMsg()


@pytest.mark.parametrize("call", [
    lambda: aclnn.smooth_l1_loss_backward(F, F, F, beta="1.5"),
    lambda: aclnn.smooth_l1_loss(F, F, beta="1.5"),
    lambda: aclnn.hardshrink_backward(F, F, lambd="nan"),
    lambda: aclnn.hardshrink(F, lambd="0.5"),
    lambda: aclnn.logit_grad(F, F, eps="0.1"),
    lambda: aclnn.logit(F, eps="0.1"),
    lambda: aclnn.swish_backward(F, F, beta=b"1"),
    lambda: aclnn.swish(F, beta=True),
    lambda: aclnn.swish(F, beta=1j),
    lambda: aclnn.batch_norm(F, eps="0.1"),
], ids=["smooth_l1_backward", "smooth_l1", "hardshrink_backward", "hardshrink", "logit_grad",
        "logit", "swish_backward_bytes", "swish_bool", "swish_complex", "batch_norm"])
def test_numeric_strings_and_other_non_numbers_are_type_errors(call):
    with pytest.raises(TypeError, match="must be a real number"):
        call()


def test_masks_must_be_bools():
    c = np.ones(3, np.float32)
    for name, value in (("input_g", "no"), ("weight_g", 1), ("bias_g", None)):
        with pytest.raises(TypeError, match=f"{name} must be a bool"):
            aclnn.batch_norm_reduce_backward(F, F, c, c, c, **{name: value})
    outs = aclnn.batch_norm_reduce_backward(F, F, c, c, c, input_g=np.bool_(False), weight_g=True)
    assert outs[0] is None and outs[2] is not None


def test_batch_norm_attributes():
    for eps in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
            aclnn.batch_norm(F, eps=eps)
    for axis in (1.5, None, "1", True):
        with pytest.raises(TypeError, match="channel_axis must be an integer"):
            aclnn.batch_norm(F, channel_axis=axis)
    with pytest.raises(TypeError, match="eps must be static"):
        jax.jit(lambda x, e: aclnn.batch_norm(x, eps=e))(F, 1e-3)
    y, _, _ = aclnn.batch_norm(F, channel_axis=np.int64(0), eps=np.float32(0))  # NumPy scalars do
    assert y.shape == F.shape


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_python_scalars_take_the_dtype_of_the_arrays(dtype):
    """Weak types, as in jax.numpy: Python scalars (and weakly typed arrays)
    join an array argument's dtype instead of imposing float32."""
    x = jnp.linspace(-2, 2, 6, dtype=dtype)
    loss = aclnn.smooth_l1_loss(x, 0.0)
    assert loss.dtype == x.dtype
    np.testing.assert_allclose(float(loss), float(aclnn.smooth_l1_loss(x, jnp.zeros_like(x))))
    assert jax.grad(lambda x: aclnn.smooth_l1_loss(x, 1).astype(jnp.float32))(x).dtype == x.dtype
    assert aclnn.hardshrink_backward(1.0, x).dtype == x.dtype
    assert jax.jit(lambda t: aclnn.smooth_l1_loss_backward(t * 2, x, t))(0.5).dtype == x.dtype
    assert aclnn.swish_backward(1.0, 2.0).dtype == jnp.float32  # only Python scalars: float32
    with pytest.raises(TypeError, match="share one dtype"):  # an operator's arrays must agree
        aclnn.smooth_l1_loss_backward(1.0, x, jnp.zeros(6, jnp.float32 if dtype != "float32"
                                                        else jnp.float16))


def test_python_scalars_with_half_arrays_under_x64():
    x = jnp.linspace(-2, 2, 6, dtype=jnp.bfloat16)
    with enable_x64(True):
        assert jnp.asarray(0.0).dtype == jnp.float64  # x64 is on
        assert aclnn.smooth_l1_loss(x, 0.0).dtype == jnp.bfloat16
        grad = jax.grad(lambda x: aclnn.smooth_l1_loss(x, 0.0).astype(jnp.float32))(x)
        assert grad.dtype == jnp.bfloat16
        assert aclnn.hardshrink_backward(1.0, x).dtype == jnp.bfloat16
        with pytest.raises(TypeError, match="float64"):
            aclnn.smooth_l1_loss(x, jnp.zeros(6))  # a float64 array is not weak


# --- every public function, from its signature -------------------------------------------

#: The operators' public functions: the raw operators and the differentiable ops.
FUNCTIONS = {name: getattr(aclnn, name) for name in aclnn.ops.__all__}


def tensor_parameters(fn) -> list[str]:
    """A public function's required tensor arguments: its positional
    parameters without a default that do not take None (a ``weight`` of
    ``Any | None`` does, ``eps=None`` has a default)."""
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind == p.POSITIONAL_OR_KEYWORD and p.default is p.empty
            and "None" not in str(p.annotation)]


TENSOR_ARGUMENTS = [(name, i) for name, fn in sorted(FUNCTIONS.items())
                    for i in range(len(tensor_parameters(fn)))]


def well_formed(name):
    """Operands of ``name`` that pass its checks: its table case's, or ones."""
    cases = of(name) if name in OPERATORS else []
    n = len(tensor_parameters(FUNCTIONS[name]))
    return [np.asarray(a) for a in cases[0].operands(np.random.default_rng(0))] if cases \
        else [np.full((4, 3), 0.5, np.float32)] * n


@pytest.mark.parametrize("name,index", TENSOR_ARGUMENTS)
def test_none_as_a_tensor_is_a_type_error_naming_function_and_argument(name, index):
    args = well_formed(name)
    args[index] = None
    argument = tensor_parameters(FUNCTIONS[name])[index]
    with pytest.raises(TypeError, match=rf"^{name}: {argument} must be an array, got None"):
        FUNCTIONS[name](*args)


@pytest.mark.parametrize("bad", [np.int32, np.float64])
@pytest.mark.parametrize("name,index", TENSOR_ARGUMENTS)
def test_an_unsupported_dtype_is_a_type_error_naming_the_argument(name, index, bad):
    args = well_formed(name)
    args[index] = args[index].astype(bad)
    argument = tensor_parameters(FUNCTIONS[name])[index]
    with pytest.raises(TypeError, match=rf"^{name}: {argument} has dtype {np.dtype(bad)}"):
        FUNCTIONS[name](*args)


#: The keyword names of the operators' float32 attributes: their prototypes'
#: float and aclScalar parameters (float32 scalars), named as the keyword
#: arguments are (swish_backward's betaOptional is its beta).
FLOAT32_NAMES = {p.name.removesuffix("Optional") for op in OPERATORS
                 for p in primitive(op).prototype.attributes if p.kind in ("float", "scalar")}


def test_the_float32_attributes_are_keyword_arguments():
    """Each float32 attribute of a prototype is a keyword argument of its
    operator's function (logit_grad's eps is a double)."""
    for op in OPERATORS:
        floats = [p for p in primitive(op).prototype.attributes if p.kind in ("float", "scalar")]
        keywords = [a for a in inspect.signature(FUNCTIONS[op]).parameters if a in FLOAT32_NAMES]
        assert len(floats) == len(keywords), (op, floats, keywords)
FLOAT32_ATTRIBUTES = [(name, a) for name, fn in sorted(FUNCTIONS.items())
                      for a in inspect.signature(fn).parameters if a in FLOAT32_NAMES]


@pytest.mark.parametrize("value", [1e40, -1e40])
@pytest.mark.parametrize("name,attribute", FLOAT32_ATTRIBUTES)
def test_float32_attribute_beyond_float32_is_a_value_error_without_warnings(name, attribute,
                                                                           value):
    args = well_formed(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=rf"^{name}: {attribute}=.*beyond float32's range"):
            FUNCTIONS[name](*args, **{attribute: value})
        FUNCTIONS[name](*args, **{attribute: float(np.finfo(np.float32).max)})  # the largest is taken
