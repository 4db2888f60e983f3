"""jax_aclnn.optax: AdamW on CANN's fused optimizer kernel, an
``optax.GradientTransformation`` (needs the ``optax`` package: the ``cli``
and ``test`` extras have it).

aclnnApplyAdamWV2's prototype from CANN's ops-nn sources
(optim/apply_adam_w_v2/op_host/op_api/aclnn_apply_adam_w_v2.h; the update as
its kernel, optim/apply_adam_w_v2/op_kernel/apply_adam_w_v2_fp.h, computes
it: ``t = step + 1``, the step tensor never written). torch_npu calls it from
``torch._fused_adamw_`` (op-plugin
op_plugin/ops/opapi/FusedAdamWKernelNpuOpApi.cpp: ``EXEC_NPU_CMD(
aclnnApplyAdamWV2, self[i], exp_avgs[i], exp_avg_sqs[i], null_max_exp,
grads[i], step, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize)``
with ``step = state_steps[i].sub(1)``), in CANN's order.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.export  # register_namedtuple_serialization (jax 0.7 does not import it with jax)
import jax.numpy as jnp
import optax as _optax

from jax_aclnn._declare import declare

_F32 = jnp.float32


def _adamw_reference(varRef, mRef, vRef, maxGradNormOptionalRef, grad, step, *, lr, beta1,
                     beta2, weightDecay, eps, amsgrad, maximize):
    t = step.astype(_F32).reshape(()) + 1
    g = (-grad if maximize else grad).astype(_F32)
    var = varRef.astype(_F32) * (1 - lr * weightDecay)
    m = mRef.astype(_F32) + (g - mRef.astype(_F32)) * (1 - beta1)
    v = vRef.astype(_F32) * beta2 + (1 - beta2) * g * g
    peak = jnp.maximum(maxGradNormOptionalRef.astype(_F32), v) if amsgrad else None
    denom = jnp.sqrt(peak if amsgrad else v) / jnp.sqrt(1 - beta2 ** t) + eps
    var = var - lr / (1 - beta1 ** t) * m / denom
    return (var.astype(varRef.dtype), m.astype(mRef.dtype), v.astype(vRef.dtype),
            None if peak is None else peak.astype(maxGradNormOptionalRef.dtype))


#: Element-wise: every dimension of var (and m, v, grad) partitioned; the
#: one-element step whole.
APPLY_ADAMW = declare(
    "aclnnStatus aclnnApplyAdamWV2GetWorkspaceSize(aclTensor *varRef, aclTensor *mRef, "
    "aclTensor *vRef, aclTensor *maxGradNormOptionalRef, const aclTensor *grad, "
    "const aclTensor *step, float lr, float beta1, float beta2, float weightDecay, "
    "float eps, bool amsgrad, bool maximize, uint64_t *workspaceSize, "
    "aclOpExecutor **executor)",
    _adamw_reference, name="optax_apply_adam_w_v2",
    dims="..., ..., ..., ..., ..., s -> ..., ..., ..., ...", replicated="s")


class AdamWState(NamedTuple):
    """The state of :func:`adamw`: ``count`` the updates done (int32), ``mu``
    and ``nu`` the first and second moments (the parameters' structure)."""

    count: jax.Array
    mu: Any
    nu: Any


# a program taking the state (a training step) exports and serializes
jax.export.register_namedtuple_serialization(AdamWState,
                                             serialized_name="jax_aclnn.optax.AdamWState")


def adamw(learning_rate: float | _optax.Schedule, b1: float = 0.9, b2: float = 0.999,
          eps: float = 1e-8, weight_decay: float = 1e-4) -> _optax.GradientTransformation:
    """AdamW on aclnnApplyAdamWV2, one call per parameter.

    The contract of ``optax.adamw`` (its first arguments, same defaults and
    numbers within float32 rounding), each parameter's moments and update
    direction computed by one aclnnApplyAdamWV2 call (CANN's fused kernel;
    its pure-JAX reference where no provider has it).

    ``update(grads, state, params)`` returns ``-learning_rate * (m_hat /
    (sqrt(v_hat) + eps) + weight_decay * params)`` with ``m_hat``, ``v_hat``
    bias-corrected at ``t = count + 1``: the kernel updates ``m`` and ``v``
    in place (XLA's ``input_output_aliases``: donate the state to the
    jitted step and no copy of it is made) and writes the direction into a
    fresh buffer (its ``varRef`` at zero, ``lr`` 1, ``weightDecay`` 0), so
    that the parameters are never copied and ``learning_rate`` may be a
    schedule; the decay and the learning rate are applied where
    ``optax.apply_updates`` adds the updates (XLA fuses them).

    Args:
      learning_rate: a float, or an ``optax`` schedule of the update count.
      b1, b2: the moments' decay rates (CANN's ``beta1``, ``beta2``).
      eps: added to the denominator, outside the square root.
      weight_decay: the decoupled weight decay (CANN's ``weightDecay``).

    Returns:
      An ``optax.GradientTransformation``; its state is :class:`AdamWState`.

    Raises:
      TypeError: (in ``update``) ``params`` is not given, or a parameter is
        not floating.
    """

    def init(params: Any) -> AdamWState:
        zeros = lambda p: jnp.zeros(jnp.shape(p), _F32)  # noqa: E731
        return AdamWState(jnp.zeros((), jnp.int32), jax.tree.map(zeros, params),
                          jax.tree.map(zeros, params))

    def update(grads: Any, state: AdamWState, params: Any = None) -> tuple[Any, AdamWState]:
        if params is None:
            raise TypeError("jax_aclnn.optax.adamw: update needs params (weight decay)")
        lr = learning_rate(state.count) if callable(learning_rate) else learning_rate
        step = state.count.astype(_F32).reshape(1)

        def one(g, m, v, p):
            if not jnp.issubdtype(jnp.asarray(p).dtype, jnp.floating):
                raise TypeError(f"jax_aclnn.optax.adamw: parameters must be floating, got "
                                f"{jnp.asarray(p).dtype}")
            shape = jnp.shape(p)
            flat = lambda a: jnp.reshape(a, shape or (1,))  # noqa: E731  (CANN: rank 1 to 8)
            direction, m, v, _ = APPLY_ADAMW(
                jnp.zeros(shape or (1,), _F32), flat(m), flat(v), None, flat(g), step,
                lr=1.0, beta1=b1, beta2=b2, weightDecay=0.0, eps=eps, amsgrad=False,
                maximize=False)
            u = lr * (direction.reshape(shape) - weight_decay * jnp.asarray(p, _F32))
            return u.astype(jnp.asarray(p).dtype), m.reshape(shape), v.reshape(shape)

        out = jax.tree.map(one, grads, state.mu, state.nu, params)
        tree = jax.tree.structure(grads)
        triples = tree.flatten_up_to(out)
        updates, mu, nu = (tree.unflatten([t[i] for t in triples]) for i in range(3))
        return updates, AdamWState(state.count + 1, mu, nu)

    return _optax.GradientTransformation(init, update)


__all__ = ["AdamWState", "adamw"]
