"""Failure paths of the FFI handlers: a call the provider refuses leaves
nothing behind, however often it is repeated, and reaches Python as the
right kind of error."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

import jax_aclnn as aclnn

# Runs in a child process, so that memory corruption is a failed test rather
# than a dead test session. Raw custom calls with operands the host provider
# refuses in aclnnXxxGetWorkspaceSize (shapes that differ or do not
# broadcast), after their descriptors (and, for hardshrink, an aclScalar)
# were created; executor reuse on.
_REPEATED_FAILURES = textwrap.dedent(
    """
    import jax, numpy as np
    import jax_aclnn as aclnn

    assert aclnn.set_executor_reuse(True) is True
    logit = jax.ffi.ffi_call("aclnn_logit_grad", jax.ShapeDtypeStruct((2, 3), np.float32))
    shrink = jax.ffi.ffi_call("aclnn_hardshrink_backward", jax.ShapeDtypeStruct((2, 3), np.float32))
    logit_site = jax.jit(lambda x, dy: logit(x, dy, **aclnn.ops.primitive("logit_grad").ffi_attributes(eps=-1.0)))
    shrink_site = jax.jit(lambda g, x: shrink(g, x, **aclnn.ops.primitive("hardshrink_backward").ffi_attributes(lambd=0.5)))
    x = np.full((2, 3), 0.25, np.float32)
    bad = np.ones((3, 2), np.float32)
    live = lambda: (aclnn.runtime_stats()["live_tensors"], aclnn.runtime_stats()["live_executors"])
    before = live()
    for site, args in ((logit_site, (x, bad)), (shrink_site, (x, bad))):
        for i in range(100):
            try:
                site(*args).block_until_ready()
            except jax.errors.JaxRuntimeError as e:
                assert "must have the same shape" in str(e) or "do not broadcast" in str(e), e
            else:
                raise AssertionError("the provider accepted mismatched shapes")
            assert live() == before, (i, live(), before)
    np.testing.assert_allclose(np.asarray(logit_site(x, x)), x / (x * (1 - x)), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(shrink_site(x, x)), np.zeros_like(x))
    print("ok", before, live())
    """
)


def test_call_site_failing_100_times_leaks_nothing_and_then_works():
    package_root = str(Path(aclnn.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]))
    child = subprocess.run([sys.executable, "-c", _REPEATED_FAILURES], env=env,
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, (child.returncode, child.stdout[-2000:], child.stderr[-4000:])
    assert child.stdout.startswith("ok"), child.stdout


def test_parameter_errors_are_invalid_argument_with_operator_call_status_and_text():
    wrong = jax.ffi.ffi_call("aclnn_logit_grad", jax.ShapeDtypeStruct((3, 2), np.float32))
    x = np.ones((2, 3), np.float32)
    with pytest.raises(jax.errors.JaxRuntimeError) as e:
        jax.jit(lambda x: wrong(x, x, **aclnn.ops.primitive("logit_grad").ffi_attributes(eps=-1.0)))(x).block_until_ready()
    assert str(e.value).startswith(
        "INVALID_ARGUMENT: aclnnLogitGradGetWorkspaceSize failed: aclnnStatus 161002 "
        "(ACLNN_ERR_PARAM_INVALID): aclnnLogitGrad: out has shape [3,2]"), str(e.value)
