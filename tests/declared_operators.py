"""What the declared-operator tests share (tests/test_declare.py, and the
NPU-runtime test's process, whose environment need not have hypothesis):
the test provider library and aclnnSoftplusBackward's prototype and
reference."""

from __future__ import annotations

import ctypes

import jax.numpy as jnp

from jax_aclnn import _loading

#: Beside the compiled extension (a source checkout imports an installed build's).
LIBRARY = _loading.PACKAGE_DIR / "libaclnn_test_provider.so"


def recorded() -> list[str]:
    """The test provider's recording operators' lines since the last call
    (each line one first phase's arguments), and a fresh log."""
    lib = ctypes.CDLL(str(LIBRARY))
    lib.jaxAclnnTestRecorded.restype = ctypes.c_char_p
    text = lib.jaxAclnnTestRecorded().decode()
    lib.jaxAclnnTestReset()
    return [line for line in text.split("\n") if line]


def softplus_backward_reference(gradOutput, self, *, beta, threshold):
    z = jnp.exp(self * beta)
    return jnp.where(self * beta > threshold, gradOutput, gradOutput * z / (z + 1))


SOFTPLUS_BACKWARD = (
    "aclnnStatus aclnnSoftplusBackwardGetWorkspaceSize(const aclTensor *gradOutput, "
    "const aclTensor *self, const aclScalar *beta, const aclScalar *threshold, "
    "aclTensor *gradInput, uint64_t *workspaceSize, aclOpExecutor **executor)")
