"""A user's library (``declare(..., library=PATH)``) is a provider whole or
not at all: descriptors, arrays and executors come from one provider.

The test build makes the libraries (csrc/testing/): the test provider again
without its executor-reuse functions (a complete provider of its own, every
call running both phases), again without aclDestroyScalar and
aclCreateFloatArray (part of a set: refused), and a library of operators
only that forwards to the host provider (the platform's descriptors and
executors). Before, a library's missing functions were taken from the
platform's provider one by one: the host provider's executor-reuse calls on
the library's executors failed on the second call and the process aborted
(issue 36).
"""

from __future__ import annotations

import ctypes
import gc
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_aclnn as aclnn
from declared_operators import LIBRARY, SOFTPLUS_BACKWARD, softplus_backward_reference
from jax_aclnn import _loading

NO_REUSE = _loading.PACKAGE_DIR / "libaclnn_test_provider_no_reuse.so"
PARTIAL = _loading.PACKAGE_DIR / "libaclnn_test_partial_provider.so"
OPERATORS_ONLY = _loading.PACKAGE_DIR / "libaclnn_test_operators.so"

pytestmark = pytest.mark.skipif(
    not all(p.exists() for p in (LIBRARY, NO_REUSE, PARTIAL, OPERATORS_ONLY)),
    reason="the test libraries are built with JAX_ACLNN_TESTING=ON")

CALLS = 20


def live_descriptors(library) -> int:
    lib = ctypes.CDLL(str(library))
    lib.jaxAclnnTestLiveDescriptors.restype = ctypes.c_int64
    return lib.jaxAclnnTestLiveDescriptors()


def softplus_backward_f64(g, x, beta, threshold):
    g, x = np.float64(g), np.float64(x)
    return np.where(x * beta > threshold, g, g / (1 + np.exp(-x * beta)))


def swish_backward_f64(g, x, beta=1.0):
    g, x = np.float64(g), np.float64(x)
    s = 1 / (1 + np.exp(-beta * x))
    return g * s * (1 + beta * x * (1 - s))


@pytest.mark.parametrize("library, first_phases", [(NO_REUSE, CALLS), (LIBRARY, 1)],
                         ids=["without-executor-reuse", "with-executor-reuse"])
def test_a_complete_provider_runs_every_call_on_its_own_functions(rng, library, first_phases):
    """20 jitted calls in a row: right results, every descriptor destroyed;
    without the executor-reuse functions each call runs both phases."""
    op = aclnn.declare(SOFTPLUS_BACKWARD, softplus_backward_reference,
                       name=f"softplus_backward_{library.stem}", library=library,
                       elementwise=True)
    f = jax.jit(lambda g, x: op(g, x, beta=0.5, threshold=2.0))
    live = live_descriptors(library)
    aclnn.reset_runtime_stats()
    for _ in range(CALLS):
        x = rng.normal(0, 10, (16, 9)).astype(np.float32)
        g = rng.normal(0, 1, x.shape).astype(np.float32)
        np.testing.assert_allclose(f(g, x), softplus_backward_f64(g, x, 0.5, 2.0),
                                   rtol=1e-5, atol=1e-6)
    stats = aclnn.runtime_stats()
    assert stats["calls"]["aclnnSoftplusBackward"] == {"get_workspace_size": first_phases,
                                                       "execute": CALLS}
    del f
    jax.clear_caches()  # frees the call site's kept executor and its descriptors
    gc.collect()
    assert live_descriptors(library) == live


def test_a_library_with_part_of_a_set_is_refused_naming_what_it_lacks(rng):
    message = (rf"{re.escape(str(PARTIAL))} .*provider of its own.* does not export "
               r"aclDestroyScalar \(descriptor functions.*aclCreateFloatArray \(array functions")
    with pytest.raises(RuntimeError, match=message):
        _loading._aclnn_ffi.provides("aclnnSoftplusBackward", str(PARTIAL))
    with pytest.raises(RuntimeError, match=message):
        _loading._aclnn_ffi.library_lacks("aclnnSoftplusBackward", str(PARTIAL))
    op = aclnn.declare(SOFTPLUS_BACKWARD, softplus_backward_reference,
                       name="softplus_backward_partial", library=PARTIAL, elementwise=True)
    x = rng.normal(0, 1, (4,)).astype(np.float32)
    with pytest.raises(Exception, match="aclDestroyScalar.*aclCreateFloatArray"):
        jax.jit(lambda g, x: op(g, x, beta=1.0, threshold=20.0))(x, x).block_until_ready()


FORWARDED_SWISH_BACKWARD = (
    "aclnnStatus aclnnForwardedSwishBackwardGetWorkspaceSize(const aclTensor *gradOutput, "
    "const aclTensor *self, const aclScalar *betaOptional, aclTensor *gradInput, "
    "uint64_t *workspaceSize, aclOpExecutor **executor)")


def swish_backward_reference(gradOutput, self, *, betaOptional):
    s = jax.nn.sigmoid(betaOptional * self)
    return gradOutput * s * (1 + betaOptional * self * (1 - s))


def test_a_library_of_operators_only_runs_on_the_platforms_descriptors_and_executors(rng):
    """The library's operators forward to the host provider's, which check
    and use the descriptors and executor they get: the host's, the
    executor reused (one first phase for 20 calls)."""
    op = aclnn.declare(FORWARDED_SWISH_BACKWARD, swish_backward_reference,
                       name="forwarded_swish_backward", library=OPERATORS_ONLY,
                       elementwise=True)
    f = jax.jit(lambda g, x: op(g, x, betaOptional=0.75))
    aclnn.reset_runtime_stats()
    for _ in range(CALLS):
        x = rng.normal(0, 4, (33,)).astype(np.float32)
        g = rng.normal(0, 1, x.shape).astype(np.float32)
        np.testing.assert_allclose(f(g, x), swish_backward_f64(g, x, 0.75), rtol=1e-5, atol=1e-6)
    assert aclnn.runtime_stats()["calls"]["aclnnForwardedSwishBackward"] == {
        "get_workspace_size": 1, "execute": CALLS}


def test_an_operator_is_taken_whole_from_one_library():
    """A library that exports a first phase without its second: the
    platform's second phase is never paired with it, and library_lacks
    names what the library itself does not export."""
    lacks = _loading._aclnn_ffi.library_lacks
    assert _loading._aclnn_ffi.provides("aclnnForwardedSwishBackward", str(OPERATORS_ONLY))
    assert lacks("aclnnForwardedSwishBackward", str(OPERATORS_ONLY)) == []
    assert not _loading._aclnn_ffi.provides("aclnnSwishBackward", str(OPERATORS_ONLY))
    assert lacks("aclnnSwishBackward", str(OPERATORS_ONLY)) == ["aclnnSwishBackward"]
    # The platform's operators stay reachable through a library of operators only,
    # and a library names what it lacks of them (a misspelt name: both phases).
    assert _loading._aclnn_ffi.provides("aclnnLogitGrad", str(OPERATORS_ONLY))
    assert lacks("aclnnLogitGrad", str(OPERATORS_ONLY)) == ["aclnnLogitGradGetWorkspaceSize",
                                                            "aclnnLogitGrad"]
    # A provider of its own: its operators only.
    assert not _loading._aclnn_ffi.provides("aclnnLogitGrad", str(NO_REUSE))
    assert lacks("aclnnSoftplusBackwrd", str(NO_REUSE)) == ["aclnnSoftplusBackwrdGetWorkspaceSize",
                                                            "aclnnSoftplusBackwrd"]
