"""jax_aclnn.check_dims (issue 44, item 6): a declared operator's dimension
rule checked on the host devices, each device running the operator on its
block as an NPU does under the rule.

Every rule the package declares (jax_aclnn.nn's operators and
jax_aclnn.optax's) holds for realistic operands; a rule that lies (RmsNorm
with its normalized dimension partitioned, which every other CPU test
passes because the reference runs outside ``custom_partitioning``) is a
ValueError naming the factor, with the reference and with the test
provider's aclnnRmsNorm; the uneven and missing-device cases.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import NUM_DEVICES, enable_x64

import jax_aclnn as aclnn
from declared_operators import LIBRARY
from jax_aclnn import _primitive
from jax_aclnn import optax as aclnn_optax
from jax_aclnn._declared import DeclaredOperator
from jax_aclnn.nn import _attention, _cross_entropy, _moe, _norm, _ragged_dot, _rope, _swiglu

pytestmark = pytest.mark.skipif(jax.device_count("cpu") < NUM_DEVICES,
                                reason="needs 8 host devices")

EPS = 1e-6
_RMS_NORM = ("aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, "
             "double epsilon, const aclTensor *yOut, const aclTensor *rstdOut, "
             "uint64_t *workspaceSize, aclOpExecutor **executor)")


def normal(rng, *shape, dtype=jnp.float32):
    return jnp.asarray(rng.normal(size=shape), dtype)


# --- the catalogue's rules: (operator, operands, attributes) per case ----------------

def rms_norm(rng):
    return _norm.RMS_NORM, (normal(rng, 2, 4, 16), 1 + normal(rng, 16)), dict(epsilon=EPS)


def add_rms_norm(rng):
    return (_norm.ADD_RMS_NORM, (normal(rng, 8, 16), normal(rng, 8, 16), 1 + normal(rng, 16)),
            dict(epsilon=EPS))


def rms_norm_grad(rng):
    x, gamma = normal(rng, 8, 16), 1 + normal(rng, 16)
    _, rstd = _norm._rms_norm_reference(x, gamma, epsilon=EPS)
    return _norm.RMS_NORM_GRAD, (normal(rng, 8, 16), x, rstd, gamma), {}


def swiglu(rng):
    return _swiglu.SWIGLU, (normal(rng, 8, 32, dtype=jnp.bfloat16),), dict(dim=-1)


def swiglu_grad(rng):
    return (_swiglu.SWIGLU_GRAD, (normal(rng, 8, 16, dtype=jnp.bfloat16),
                                  normal(rng, 8, 32, dtype=jnp.bfloat16)), dict(dim=-1))


def rope_tables(rng):
    """x (B, S, N, D) and cos, sin (1, S, 1, D) as rotary_embedding passes them."""
    angles = rng.uniform(0, 2 * np.pi, size=(1, 4, 1, 4))
    cos, sin = (jnp.asarray(np.concatenate([f(angles)] * 2, -1), jnp.float32)
                for f in (np.cos, np.sin))
    return normal(rng, 2, 4, 2, 8), cos, sin


def rope(rng):
    x, cos, sin = rope_tables(rng)
    return _rope._operators(_rope._pattern(x, cos))[0], (x, cos, sin), dict(mode=0)


def rope_grad(rng):
    x, cos, sin = rope_tables(rng)
    return (_rope._operators(_rope._pattern(x, cos))[1], (normal(rng, *x.shape), cos, sin, x),
            dict(mode=1))


def cross_entropy(rng):
    logits, labels = normal(rng, 8, 10), jnp.asarray(rng.integers(0, 10, 8), jnp.int32)
    return (_cross_entropy.CROSS_ENTROPY_LOSS, (logits, labels, None),
            dict(returnZloss=False, **_cross_entropy._ATTRIBUTES))


def cross_entropy_grad(rng):
    logits, labels = normal(rng, 8, 10), jnp.asarray(rng.integers(0, 10, 8), jnp.int32)
    log_prob = jax.nn.log_softmax(logits)
    return (_cross_entropy.CROSS_ENTROPY_LOSS_GRAD,
            (normal(rng, 8), log_prob, labels, None, None, None), _cross_entropy._ATTRIBUTES)


def grouped_matmul(op, group_type, a, w):
    """aclnnGroupedMatmulV4 as ragged_dot calls it (int64 group counts)."""
    counts = jnp.asarray([3, 0, 4], jnp.int64)
    return op, ([a], [w], [], [], [], [], [], [], counts, [], [], []), dict(
        splitItem=3, groupType=group_type, groupListType=_ragged_dot._COUNTS, actType=0)


def grouped_matmul_along_m(rng):  # (m, k) x (g, k, n): k summed, n partitioned
    return grouped_matmul(_ragged_dot._ALONG_M, _ragged_dot._GROUP_ALONG_M, normal(rng, 8, 6),
                          normal(rng, 3, 6, 4))


def grouped_matmul_along_k(rng):  # the weights' gradient: lhs^T (k, m) and dy (m, n)
    return grouped_matmul(_ragged_dot._ALONG_K, _ragged_dot._GROUP_ALONG_K, normal(rng, 6, 8),
                          normal(rng, 8, 4))


def attention_operands(rng, heads, kv_heads, bias, mask):
    """query, key, value, pse, attenMask, their pair and the attributes, as
    dot_product_attention passes them."""
    q, k, v = normal(rng, 2, 4, heads, 8), normal(rng, 2, 6, kv_heads, 8), normal(rng, 2, 6,
                                                                                 kv_heads, 8)
    pse = None if bias is None else normal(rng, *bias)
    masked = None if mask is None else jnp.asarray(rng.random(mask) < 0.3)
    pair = _attention._operators(*_attention._groups(q, k, pse, masked))
    return (q, k, v, pse, masked), pair, _attention._attributes(0.35, 0 if mask is None else 1)


#: (heads, key/value heads, pse shape, mask shape): multi-head with a
#: per-head bias and a (T, S) mask; grouped-query with a per-batch mask.
ATTENTION = {"mha": (4, 4, (1, 4, 4, 6), (4, 6)), "gqa": (4, 2, None, (2, 1, 4, 6))}


def attention(kind):
    def case(rng):
        (q, k, v, pse, mask), (forward, _), attrs = attention_operands(rng, *ATTENTION[kind])
        return forward, (q, k, v, pse, None, None, mask), attrs

    return case


def attention_grad(kind):
    def case(rng):
        (q, k, v, pse, mask), (forward, grad), attrs = attention_operands(rng, *ATTENTION[kind])
        row_max, row_sum, _, out = forward(q, k, v, pse, None, None, mask, **attrs)
        return grad, (q, k, v, normal(rng, *out.shape), pse, None, None, mask, row_max, row_sum,
                      None, out), attrs

    return case


def apply_adamw(rng):
    var, m, g = normal(rng, 4, 6), normal(rng, 4, 6), normal(rng, 4, 6)
    return (aclnn_optax.APPLY_ADAMW,
            (var, m, jnp.abs(normal(rng, 4, 6)), None, g, jnp.asarray([2.0], jnp.float32)),
            dict(lr=1e-2, beta1=0.9, beta2=0.999, weightDecay=0.1, eps=1e-8, amsgrad=False,
                 maximize=False))


def apply_adamw_v1(rng):
    var, m, g = normal(rng, 4, 6), normal(rng, 4, 6), normal(rng, 4, 6)
    one = lambda x: jnp.asarray([x], jnp.float32)  # noqa: E731
    # beta1Power, beta2Power, lr, weightDecay, beta1, beta2, eps
    scalars = [one(0.81), one(0.998), one(1e-2), one(0.1), one(0.9), one(0.999), one(1e-8)]
    return (aclnn_optax.APPLY_ADAMW_V1, (var, m, jnp.abs(normal(rng, 4, 6)), *scalars, g, None),
            dict(amsgrad=False, maximize=False))


def routing(rng, t=8, e=6, k=2):
    """Router logits (T, E), expert ids (T, k) and their sorted indices, as
    the mixture-of-experts layer passes them."""
    logits = normal(rng, t, e)
    ids = jax.lax.top_k(logits, k)[1].astype(jnp.int32)
    _, sorted_indices = _moe._permute_reference(normal(rng, t, 4), ids, numOutTokens=0,
                                                paddedMode=False)
    return logits, ids, sorted_indices


def moe_gating(rng):
    logits, _, _ = routing(rng)
    return _moe.GATING, (logits, None), dict(k=2, renorm=0, outputSoftmaxResultFlag=False)


def moe_permute(rng):
    _, ids, _ = routing(rng)
    return _moe.PERMUTE, (normal(rng, 8, 4), ids), dict(numOutTokens=0, paddedMode=False)


def moe_permute_grad(rng):
    _, _, sorted_indices = routing(rng)
    return (_moe.PERMUTE_GRAD, (normal(rng, 16, 4), sorted_indices),
            dict(numTopk=2, paddedMode=False))


def moe_unpermute(rng):
    _, _, sorted_indices = routing(rng)
    return _moe.UNPERMUTE, (normal(rng, 16, 4), sorted_indices, normal(rng, 8, 2)), _moe._UNPADDED


def moe_unpermute_grad(rng):
    _, _, sorted_indices = routing(rng)
    return (_moe.UNPERMUTE_GRAD, (normal(rng, 16, 4), normal(rng, 8, 4), sorted_indices,
                                  normal(rng, 8, 2)), _moe._UNPADDED)


CASES = {f.__name__: f for f in (
    rms_norm, add_rms_norm, rms_norm_grad, swiglu, swiglu_grad, rope, rope_grad, cross_entropy,
    cross_entropy_grad, grouped_matmul_along_m, grouped_matmul_along_k, apply_adamw,
    apply_adamw_v1, moe_gating, moe_permute, moe_permute_grad, moe_unpermute, moe_unpermute_grad)}
CASES.update({f"attention_{k}": attention(k) for k in ATTENTION})
CASES.update({f"attention_grad_{k}": attention_grad(k) for k in ATTENTION})


def x64(name: str):
    """JAX's 64-bit mode for the grouped products (CANN's int64 group counts)."""
    return enable_x64(name.startswith("grouped_matmul"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_rule_of_the_catalogue_holds(rng, name):
    with x64(name):
        op, operands, params = CASES[name](rng)
        assert aclnn.check_dims(op, *operands, **params) is None


def test_the_cases_cover_every_operator_the_catalogue_declares(rng):
    """Each aclnn operator of the catalogue with each reference it is
    declared with (its variants for other masks or broadcast patterns differ
    in their rules' groups only)."""
    def kind(op):
        return op.aclnn_name, op.user_reference

    declared = {kind(op): op.name for op in _primitive.OPERATORS.values()
                if isinstance(op, DeclaredOperator)
                and op.user_reference.__module__.startswith(("jax_aclnn.nn.", "jax_aclnn.optax"))}
    checked = set()
    for name, case in CASES.items():
        with x64(name):
            checked.add(kind(case(rng)[0].aclnn_operator))
    assert declared and not declared.keys() - checked, sorted(
        declared[k] for k in declared.keys() - checked)


# --- rules that do not hold ----------------------------------------------------------

@pytest.mark.parametrize("library", [None, LIBRARY], ids=["host provider", "test provider"])
def test_a_normalized_dimension_declared_partitionable_is_named(rng, library):
    """RmsNorm with h partitioned: each device normalizes its slice of h
    (as CANN's kernel would on each NPU), which the reference outside
    ``custom_partitioning`` never shows on a CPU."""
    if library is not None and not library.exists():
        pytest.skip("the test provider is built with JAX_ACLNN_TESTING=ON")
    lying = aclnn.declare(_RMS_NORM, _norm._rms_norm_reference, outputs=("yOut", "rstdOut"),
                          library=library, dims="... h, h -> ... h, ... 1",
                          name=f"check_dims_lying_rms_norm_{library is None}")
    x, gamma = normal(rng, 4, 12), 1 + normal(rng, 12)
    aclnn.reset_runtime_stats()
    # the 4 rows ('...') over 4 devices, which holds; h of 12 over 6, which does not
    with pytest.raises(ValueError, match=r"factor 'h' \(size 12, over 6 devices\) changes yOut"):
        aclnn.check_dims(lying, x, gamma, epsilon=EPS)
    # the provider's operator ran (the host provider's without a library, issue 46):
    # unsharded, then on each block
    calls = aclnn.runtime_stats()["calls"]["aclnnRmsNorm"]["execute"]
    assert calls == 1 + 4 + 6, calls
    # the same operator with the rule the catalogue declares; 12 rows, which 8 devices do
    # not divide: over 6
    honest = aclnn.declare(_RMS_NORM, _norm._rms_norm_reference, outputs=("yOut", "rstdOut"),
                           library=library, dims="... h, h -> ... h, ... 1", replicated="h",
                           name=f"check_dims_honest_rms_norm_{library is None}")
    assert aclnn.check_dims(honest, jnp.tile(x, (3, 1)), gamma, epsilon=EPS) is None


def _sum_normalized(x, gamma, *, epsilon):
    """y = x / sum|x| over h (bfloat16), s = sum|x| (float32): y is no sum."""
    s = jnp.sum(jnp.abs(x.astype(jnp.float32)), -1, keepdims=True)
    return (x.astype(jnp.float32) / s).astype(x.dtype), s


def test_a_half_precision_output_that_is_no_sum_gets_its_own_tolerance(rng):
    """bfloat16 y of magnitude 1e-3, wrong by 8x with h sharded: the
    tolerance of the largest sum (s over 4096 terms, 4.0 in bfloat16) as
    rtol and atol let it pass; y's own n is 1, its atol its magnitude's."""
    # an operator no provider here has (the host provider has aclnnRmsNorm): the reference runs
    prototype = _RMS_NORM.replace("aclnnRmsNorm", "aclnnSumNormalized")
    lying = aclnn.declare(prototype, _sum_normalized, outputs=("yOut", "rstdOut"),
                          dims="... h, h -> ... h, ... 1", name="check_dims_lying_sum_normalized")
    x, gamma = normal(rng, 8, 4096, dtype=jnp.bfloat16), jnp.ones((4096,), jnp.bfloat16)
    with pytest.raises(ValueError, match=r"factor 'h' \(size 4096, over 8 devices\) changes yOut"):
        aclnn.check_dims(lying, x, gamma, epsilon=EPS)


def test_an_element_wise_operator_that_is_not_is_named_by_its_dimension(rng):
    cumsum = aclnn.declare(
        "aclnnStatus aclnnCumsumV2GetWorkspaceSize(const aclTensor *self, aclTensor *out, "
        "uint64_t *workspaceSize, aclOpExecutor **executor)",
        lambda self: jnp.cumsum(self, axis=-1), elementwise=True, name="check_dims_cumsum")
    with pytest.raises(ValueError, match=r"factor 'd1' \(size 8, over 8 devices\) changes out"):
        aclnn.check_dims(cumsum, normal(rng, 4, 8))


# --- devices -------------------------------------------------------------------------

def test_a_factor_no_device_count_divides_is_refused(rng):
    with pytest.raises(ValueError, match=r"dimension 0 of '\.\.\.' has size 11"):
        aclnn.check_dims(_norm.RMS_NORM, normal(rng, 11, 16), 1 + normal(rng, 16), epsilon=EPS)


def test_one_host_device_is_refused_saying_how_to_get_more(rng, monkeypatch):
    devices = jax.devices
    monkeypatch.setattr(jax, "devices", lambda backend=None: devices(backend)[:1])
    with pytest.raises(RuntimeError, match=r"jax_num_cpu_devices.*xla_force_host_platform"):
        aclnn.check_dims(_norm.RMS_NORM, normal(rng, 8, 16), 1 + normal(rng, 16), epsilon=EPS)


def test_an_undeclared_function_is_refused():
    with pytest.raises(TypeError, match="declare returned"):
        aclnn.check_dims(jax.nn.relu, jnp.ones(4))
