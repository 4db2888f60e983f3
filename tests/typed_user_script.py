"""A user's script for tests/test_packaging.py: calls every public function
of jax_aclnn and every function of its compiled module, with the types the
package declares (py.typed, the compiled module's stubs). It passes
``mypy --strict`` and runs."""

from __future__ import annotations

from typing import reveal_type

import jax
import jax.export  # jax 0.7 does not import it with jax
import jax.numpy as jnp

import jax_aclnn as aclnn
from jax_aclnn import _aclnn_ffi

x = jnp.linspace(-1.0, 1.0, 12, dtype=jnp.float32).reshape(4, 3)
p = jnp.linspace(0.1, 0.9, 12, dtype=jnp.float32).reshape(4, 3)

grads: list[jax.Array] = [
    aclnn.smooth_l1_loss_backward(x, x, p, reduction="none", beta=1.0),
    aclnn.logit_grad(p, x, eps=1e-6),
    aclnn.hardshrink_backward(x, x, lambd=0.5),
    aclnn.swish_backward(x, x, beta=1.0),
    aclnn.smooth_l1_loss(x, p),
    aclnn.logit(p),
    aclnn.hardshrink(x),
    aclnn.swish(x),
    aclnn.silu(x),
]
reduced = aclnn.batch_norm_reduce_backward(x, x, jnp.mean(x, 0), jnp.ones(3), jnp.ones(3))
y, mean, var = aclnn.batch_norm(x, jnp.ones(3), jnp.zeros(3))
checks: list[jax.export.DisabledSafetyCheck] = aclnn.export_disabled_checks()
previous: bool = aclnn.set_executor_reuse(True)
stats = aclnn.runtime_stats()
aclnn.reset_runtime_stats()

# The compiled module (jax_aclnn/_aclnn_ffi.pyi).
reuse: bool = _aclnn_ffi.executor_reuse()
_aclnn_ffi.set_executor_reuse(reuse)
info: str = _aclnn_ffi.build_info()
origin: str = _aclnn_ffi.cpu_provider()
roots: list[str] = _aclnn_ffi.default_cann_roots()
tables: list[dict[object, object]] = [
    _aclnn_ffi.registrations(), _aclnn_ffi.operators(), _aclnn_ffi.state_type(),
    _aclnn_ffi.stats()]
_aclnn_ffi.reset_stats()
reveal_type(_aclnn_ffi.set_executor_reuse)
reveal_type(_aclnn_ffi.load_cann)


def on_an_npu_host(root: str) -> str:
    """What a user with CANN installed calls (not run here: no CANN)."""
    _aclnn_ffi.load_host_provider(root)
    _aclnn_ffi.route_cpu_through_cann(False)
    return aclnn.load_cann(root) + _aclnn_ffi.load_cann(root)


print(len(grads), len(reduced), y.shape, mean.shape, var.shape, len(checks), previous,
      sorted(stats), len(info) > 0, origin, roots, [len(t) for t in tables])
