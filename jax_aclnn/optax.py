"""jax_aclnn.optax: AdamW on CANN's fused optimizer kernels, an
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

aclnnApplyAdamW (V1; ops-nn optim/apply_adam_w/docs/aclnnApplyAdamW.md)
takes its scalars as one-element tensors of ``varRef``'s dtype, so a traced
learning rate or weight decay can be given: ``beta1Power`` and
``beta2Power`` are ``beta ** (t - 1)``, the updates done before (its kernel,
optim/apply_adam_w/op_kernel/arch35/apply_adam_w_dag.h, multiplies each by
its beta: ``beta1_power_out = beta1_power * beta1``, as torch_npu's
``npu_apply_adam_w`` reference in its accuracy checker does), and
``maxGradNormOptional`` is read, never written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.export  # register_namedtuple_serialization (jax 0.7 does not import it with jax)
import jax.numpy as jnp
import optax as _optax

from jax_aclnn._checks import SUPPORTED_DTYPES
from jax_aclnn._declare import declare
from jax_aclnn._runtime import provider

_F32 = jnp.float32


def _adamw_formula(var, m, v, peak, grad, *, lr, beta1, beta2, weight_decay, eps, beta1_t,
                   beta2_t, maximize: bool):
    """One AdamW update as both versions' kernels compute it, in float32:
    the new ``var``, ``m``, ``v`` and the second moment the denominator took
    (``max(peak, v)`` where ``peak`` is given, else ``v``); ``beta1_t`` and
    ``beta2_t`` are this update's ``beta ** t``, the scalars float32 numbers
    or arrays of shape ()."""
    g = (-grad if maximize else grad).astype(_F32)
    m = m.astype(_F32) + (g - m.astype(_F32)) * (1 - beta1)
    v = v.astype(_F32) * beta2 + (1 - beta2) * g * g
    second = v if peak is None else jnp.maximum(peak.astype(_F32), v)
    denom = jnp.sqrt(second) / jnp.sqrt(1 - beta2_t) + eps
    var = var.astype(_F32) * (1 - lr * weight_decay) - lr / (1 - beta1_t) * m / denom
    return var, m, v, second


def _adamw_reference(varRef, mRef, vRef, maxGradNormOptionalRef, grad, step, *, lr, beta1,
                     beta2, weightDecay, eps, amsgrad, maximize):
    """aclnnApplyAdamWV2 in JAX: ``t = step + 1``; with ``amsgrad``
    ``maxGradNormOptionalRef`` gets the larger second moment."""
    t = step.astype(_F32).reshape(()) + 1
    var, m, v, second = _adamw_formula(
        varRef, mRef, vRef, maxGradNormOptionalRef if amsgrad else None, grad, lr=lr,
        beta1=beta1, beta2=beta2, weight_decay=weightDecay, eps=eps, beta1_t=beta1 ** t,
        beta2_t=beta2 ** t, maximize=maximize)
    return (var.astype(varRef.dtype), m.astype(mRef.dtype), v.astype(vRef.dtype),
            second.astype(maxGradNormOptionalRef.dtype) if amsgrad else None)


def _adamw_v1_reference(varRef, mRef, vRef, beta1Power, beta2Power, lr, weightDecay, beta1,
                        beta2, eps, grad, maxGradNormOptional, *, amsgrad, maximize):
    """aclnnApplyAdamW in JAX: its one-element tensors as float32 numbers,
    ``beta ** t = betaPower * beta``; ``maxGradNormOptional`` read (with
    ``amsgrad``), not written."""
    scalar = lambda x: x.astype(_F32).reshape(())  # noqa: E731
    b1, b2 = scalar(beta1), scalar(beta2)
    var, m, v, _ = _adamw_formula(
        varRef, mRef, vRef, maxGradNormOptional if amsgrad else None, grad, lr=scalar(lr),
        beta1=b1, beta2=b2, weight_decay=scalar(weightDecay), eps=scalar(eps),
        beta1_t=scalar(beta1Power) * b1, beta2_t=scalar(beta2Power) * b2, maximize=maximize)
    return var.astype(varRef.dtype), m.astype(mRef.dtype), v.astype(vRef.dtype)


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

#: aclnnApplyAdamW (V1; the prototype of ops-nn's
#: optim/apply_adam_w/docs/aclnnApplyAdamW.md): element-wise as
#: :data:`APPLY_ADAMW`, the seven one-element scalars whole.
APPLY_ADAMW_V1 = declare(
    "aclnnStatus aclnnApplyAdamWGetWorkspaceSize(aclTensor *varRef, aclTensor *mRef, "
    "aclTensor *vRef, const aclTensor *beta1Power, const aclTensor *beta2Power, "
    "const aclTensor *lr, const aclTensor *weightDecay, const aclTensor *beta1, "
    "const aclTensor *beta2, const aclTensor *eps, const aclTensor *grad, "
    "const aclTensor *maxGradNormOptional, bool amsgrad, bool maximize, "
    "uint64_t *workspaceSize, aclOpExecutor **executor)",
    _adamw_v1_reference, name="optax_apply_adam_w",
    dims="..., ..., ..., s, s, s, s, s, s, s, ..., ... -> ..., ..., ...", replicated="s")


class AdamWState(NamedTuple):
    """The state of :func:`adamw`: ``count`` the updates done (int32), ``mu``
    and ``nu`` the first and second moments (the parameters' structure;
    ``mu`` in ``mu_dtype``, float32 without it, ``nu`` float32).

    One state for the whole transformation, where ``optax.adamw``'s is the
    tuple of its chain (``ScaleByAdamState``, the weight decay's and the
    learning rate's, empty or masked).
    """

    count: jax.Array
    mu: Any
    nu: Any


# a program taking the state (a training step) exports and serializes
jax.export.register_namedtuple_serialization(AdamWState,
                                             serialized_name="jax_aclnn.optax.AdamWState")


def _known(value: Any) -> float | None:
    """``value`` as a Python float where it is known when traced (a number,
    a concrete array), None where it is traced."""
    try:
        return float(value)
    except jax.errors.ConcretizationTypeError:
        return None


def _increment(count: jax.Array) -> jax.Array:
    """``count + 1``, staying at int32's maximum (optax's ``safe_increment``)."""
    return jnp.where(count < jnp.iinfo(jnp.int32).max, count + 1, count)


def _cann_rank(a: jax.Array) -> jax.Array:
    """``a`` as aclnnApplyAdamWV2 takes it: ranks 1 to 8 as they are, the
    others flattened (the update is element-wise)."""
    return a if 1 <= a.ndim <= 8 else a.reshape(-1)


def _kernel_direction(g, m, v, count, b1: float, b2: float, eps: float):
    """``-m_hat / (sqrt(v_hat) + eps)`` and the new moments by one
    aclnnApplyAdamWV2 call, all four tensors float32: its varRef a fresh
    zero buffer, ``lr`` 1, ``weightDecay`` 0, ``step`` the updates done
    before (the kernel adds 1).

    On a CPU served by the bundled host provider, optax's formulas
    (:func:`_reference_direction`) instead: XLA fuses them with the weight
    decay and ``optax.apply_updates`` into one pass, where the kernel's
    direction takes a fresh buffer and a second pass (measured 1.1-1.7x
    slower than XLA in float32, 3-6x in bfloat16); the host kernel runs in
    place, through :func:`update_and_apply`. Where the CPU's calls go to a
    CANN toolkit (a provider standing in for it), the kernel, as on an NPU."""
    shape = g.shape

    def kernel(g, m, v, count):
        direction, m, v, _ = APPLY_ADAMW(
            jnp.zeros(_cann_rank(g).shape, _F32), _cann_rank(m), _cann_rank(v), None,
            _cann_rank(g), count.astype(_F32).reshape(1), lr=1.0, beta1=b1, beta2=b2,
            weightDecay=0.0, eps=eps, amsgrad=False, maximize=False)
        return direction.reshape(shape), m.reshape(shape), v.reshape(shape)

    def xla(g, m, v, count):
        return _reference_direction(g, m, v, count, b1, b2, eps, 0.0, False)

    if provider() != "host":
        return kernel(g, m, v, count)
    return jax.lax.platform_dependent(g, m, v, count, cpu=xla, default=kernel)


def _v1_scalars(count: jax.Array, lr: Any, weight_decay: Any, b1: float, b2: float,
                eps: float) -> list[jax.Array]:
    """aclnnApplyAdamW's one-element float32 tensors, in its order, for the
    update after ``count`` (int32, shape ()) updates: ``beta1Power``,
    ``beta2Power`` (``beta ** count``, computed in float32: the kernel
    multiplies each by its beta to make ``beta ** t``), ``lr``,
    ``weightDecay`` (numbers or float32 arrays of shape (), traced or not),
    ``beta1``, ``beta2``, ``eps``; each of shape (1,) ("shape要求为[1]")."""
    one = lambda x: jnp.asarray(x, _F32).reshape(1)  # noqa: E731
    done = count.astype(_F32)
    return [one(jnp.power(_F32(b1), done)), one(jnp.power(_F32(b2), done)), one(lr),
            one(weight_decay), one(b1), one(b2), one(eps)]


def _reference_direction(g, m, v, count, b1, b2, eps, eps_root, nesterov: bool):
    """:func:`_kernel_direction` by optax's ``scale_by_adam`` formulas (any
    hyperparameter traced, ``eps_root``, Nesterov's momentum)."""
    t = _increment(count)
    m = (1 - b1) * g + b1 * m
    v = (1 - b2) * g * g + b2 * v
    corrected = lambda x, decay, t: x / (1 - decay ** t).astype(x.dtype)  # noqa: E731
    m_hat = corrected(m, b1, t)
    if nesterov:
        m_hat = b1 * corrected(m, b1, _increment(t)) + (1 - b1) * corrected(g, b1, t)
    return -m_hat / (jnp.sqrt(corrected(v, b2, t) + eps_root) + eps), m, v


def _float_dtype(name: str, dtype: Any) -> jnp.dtype:
    dtype = jnp.dtype(dtype)
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"jax_aclnn.optax.adamw: {name} must be float32, float16 or bfloat16 "
                        f"(aclnnApplyAdamWV2's dtypes), got {dtype}")
    return dtype


def adamw(learning_rate: float | jax.Array | _optax.Schedule, b1: float | jax.Array = 0.9,
          b2: float | jax.Array = 0.999, eps: float | jax.Array = 1e-8,
          eps_root: float | jax.Array = 0.0, mu_dtype: Any | None = None,
          weight_decay: float | jax.Array | _optax.Schedule = 1e-4,
          mask: Any | Callable[[Any], Any] | None = None, *,
          nesterov: bool = False) -> _optax.GradientTransformation:
    """AdamW on aclnnApplyAdamWV2, one call per parameter.

    ``optax.adamw``'s contract: its whole signature in its order, its
    defaults, its numbers within float32 rounding. ``update(grads, state,
    params)`` returns ``-learning_rate * (m_hat / (sqrt(v_hat + eps_root) +
    eps) + weight_decay * params)``, ``m_hat`` and ``v_hat`` bias-corrected
    at ``t = count + 1`` (Nesterov's ``m_hat`` with ``nesterov``), the
    weight decay only where ``mask`` is True.

    What computes the moments and the direction ``m_hat / (sqrt(v_hat +
    eps_root) + eps)`` (one choice for all the parameters, when traced):

    - aclnnApplyAdamWV2 (CANN's fused kernel; its pure-JAX reference where
      no provider has it) where ``b1``, ``b2`` and ``eps`` are known when
      traced (numbers, or arrays that are not traced), ``eps_root`` is
      known and 0 and ``nesterov`` is False. ``learning_rate``,
      ``weight_decay``, ``mask`` and ``mu_dtype`` never matter: they are
      applied outside the kernel.
    - optax's formulas in JAX otherwise: the kernel has no ``eps_root`` and
      no Nesterov term, and takes ``beta1``, ``beta2`` and ``eps`` as float
      attributes, which a traced value cannot be. Under
      ``optax.inject_hyperparams`` inside ``jit`` every numeric
      hyperparameter is traced; ``optax.inject_hyperparams(adamw,
      static_args=("b1", "b2", "eps", "eps_root"))`` keeps those four
      numbers, and the kernel, with the learning rate and the weight decay
      injected.

    The kernel updates ``m`` and ``v`` in place (XLA's
    ``input_output_aliases``: donate the state to the jitted step and no copy
    of it is made) and writes the direction into a fresh buffer (its
    ``varRef`` at zero, ``lr`` 1, ``weightDecay`` 0), so that the parameters
    are never copied and ``learning_rate`` may be a schedule or traced; the
    decay and the learning rate are applied where ``optax.apply_updates``
    adds the updates (XLA fuses them). It runs in float32:
    aclnnApplyAdamWV2 takes one dtype for varRef, mRef, vRef and grad (the
    constraints of ops-nn ``optim/apply_adam_w_v2/docs/aclnnApplyAdamWV2.md``),
    so the gradient is converted to float32, as ``mu`` is when ``mu_dtype``
    is another dtype (and back).

    :func:`update_and_apply` (``tx.update`` and ``optax.apply_updates`` in
    one) gives the kernel the parameter itself as ``varRef``: one pass, the
    parameters updated in place, by aclnnApplyAdamWV2 where the learning
    rate and the weight decay are known when traced, by CANN's
    aclnnApplyAdamW (ops-nn ``optim/apply_adam_w/docs/aclnnApplyAdamW.md``:
    ``lr``, ``weightDecay``, ``beta1``, ``beta2``, ``eps`` and the powers of
    the betas as one-element tensors) where either is traced (a schedule of
    the traced ``state.count``, what a jitted step has). On a CPU served by
    the bundled host provider, ``update`` computes the direction by optax's
    formulas instead of the kernel (XLA fuses them with
    ``optax.apply_updates`` into one pass, faster than the kernel's
    direction and a second pass); the host kernel runs through
    :func:`update_and_apply`.

    Args:
      learning_rate: a float, or an ``optax`` schedule of the update count.
      b1, b2: the moments' decay rates (CANN's ``beta1``, ``beta2``).
      eps: added to the denominator, outside the square root.
      eps_root: added to ``v_hat``, inside the square root.
      mu_dtype: the first moment's dtype (float32 where None: optax keeps
        the parameters' dtype, where float16 underflows ``eps=1e-8``); the
        second moment is float32.
      weight_decay: the decoupled weight decay (CANN's ``weightDecay``), a
        float or a schedule of the update count.
      mask: a pytree of booleans with the structure of the parameters (or a
        prefix of it), or a function of the parameters returning one: the
        weight decay is applied where it is True (optax's
        ``add_decayed_weights(weight_decay, mask)``).
      nesterov: Nesterov's momentum (optax's NAdamW).

    Returns:
      An ``optax.GradientTransformation``; its state is :class:`AdamWState`.

    Raises:
      TypeError: ``mu_dtype``, or (in ``init``, ``update``) a parameter's
        dtype, is not float32, float16 or bfloat16 (aclnnApplyAdamWV2's
        dtypes); ``update`` is given no ``params``.
    """
    mu_dtype = _F32 if mu_dtype is None else _float_dtype("mu_dtype", mu_dtype)

    def init(params: Any) -> AdamWState:
        def zeros(dtype):
            def like(p):
                _float_dtype("a parameter", jnp.result_type(p))
                return jnp.zeros(jnp.shape(p), dtype)
            return jax.tree.map(like, params)

        return AdamWState(jnp.zeros((), jnp.int32), zeros(mu_dtype), zeros(_F32))

    known = [_known(h) for h in (b1, b2, eps)]
    on_kernel = None not in known and _known(eps_root) == 0 and not nesterov

    def hyperparameters(state: AdamWState, params: Any) -> tuple[Any, Any, Any]:
        """The learning rate and the weight decay at ``state.count``, and
        whether each parameter decays (the mask to every leaf)."""
        if params is None:
            raise TypeError("jax_aclnn.optax.adamw: update needs params (weight decay)")
        at_count = lambda h: h(state.count) if callable(h) else h  # noqa: E731
        decayed = mask(params) if callable(mask) else mask
        if isinstance(weight_decay, (int, float)) and weight_decay == 0:
            decayed = False  # as optax, which then adds nothing
        # the mask (a prefix of the parameters' structure) to every parameter
        decayed = jax.tree.map(lambda d, p: jax.tree.map(lambda _: d, p),
                               True if decayed is None else decayed, params)
        return at_count(learning_rate), at_count(weight_decay), decayed

    def leaf_update(g, m, v, p, decays, count, lr, decay):
        """One parameter's update (in its dtype) and its moments."""
        p = jnp.asarray(p)
        _float_dtype("a parameter", p.dtype)
        g = jnp.asarray(g, _F32)
        if on_kernel:
            direction, m_new, v = _kernel_direction(g, m.astype(_F32), v, count, *known)
        else:
            direction, m_new, v = _reference_direction(g, m.astype(_F32), v, count, b1, b2, eps,
                                                       eps_root, nesterov)
        if decays:
            direction = direction - decay * p.astype(_F32)
        return (lr * direction).astype(p.dtype), m_new.astype(m.dtype), v

    def update(grads: Any, state: AdamWState, params: Any = None) -> tuple[Any, AdamWState]:
        lr, decay, decayed = hyperparameters(state, params)
        one = lambda g, m, v, p, d: leaf_update(g, m, v, p, d, state.count, lr, decay)  # noqa: E731
        return _unzip(grads, jax.tree.map(one, grads, state.mu, state.nu, params, decayed),
                      state)

    def in_place(grads: Any, state: AdamWState, params: Any) -> tuple[Any, AdamWState] | None:
        """:func:`update_and_apply` for this transformation: CANN's kernel on
        each parameter whose dtype is its moments' (varRef the parameter;
        ``update``'s formula and ``optax.apply_updates`` on the others):
        aclnnApplyAdamWV2 where the learning rate and the weight decay are
        known when traced, aclnnApplyAdamW (its scalars tensors) where either
        is traced; None where the request is not the kernels' (the caller
        then runs both)."""
        if not on_kernel:
            return None
        lr, decay, decayed = hyperparameters(state, params)
        lr_known, decay_known = _known(lr), _known(decay)
        step = state.count.astype(_F32).reshape(1)  # the updates done: V2 adds 1
        v1_scalars: dict[bool, list[jax.Array]] = {}  # V1's, once per decay, not per parameter

        def kernel(p, m, v, g, decays):
            """One parameter's update: V2 where lr and the decay are known,
            else V1."""
            if lr_known is not None and decay_known is not None:
                return APPLY_ADAMW(p, m, v, None, g, step, lr=lr_known, beta1=known[0],
                                   beta2=known[1], weightDecay=decay_known if decays else 0.0,
                                   eps=known[2], amsgrad=False, maximize=False)[:3]
            decays = bool(decays)
            if decays not in v1_scalars:
                v1_scalars[decays] = _v1_scalars(state.count, lr, decay if decays else 0.0, *known)
            return APPLY_ADAMW_V1(p, m, v, *v1_scalars[decays], g, None, amsgrad=False,
                                  maximize=False)

        def one(g, m, v, p, decays):
            p = jnp.asarray(p)
            dtype = _float_dtype("a parameter", p.dtype)
            # CANN: one dtype for the four tensors (nu is float32: float32
            # parameters alone, so V1's scalars, of varRef's dtype, too)
            if not dtype == m.dtype == v.dtype:
                u, m, v = leaf_update(g, m, v, p, decays, state.count, lr, decay)
                return _optax.apply_updates(p, u), m, v
            var, m, v = kernel(_cann_rank(p), _cann_rank(m), _cann_rank(v),
                               _cann_rank(jnp.asarray(g, dtype)), decays)
            return var.reshape(p.shape), m.reshape(p.shape), v.reshape(p.shape)

        return _unzip(grads, jax.tree.map(one, grads, state.mu, state.nu, params, decayed),
                      state)

    update._jax_aclnn_in_place = in_place  # update_and_apply recognises adamw by it
    return _optax.GradientTransformation(init, update)


def _unzip(grads: Any, out: Any, state: AdamWState) -> tuple[Any, AdamWState]:
    """The per-parameter triples (first, mu, nu) in ``out`` (the gradients'
    structure) as the tree of the firsts and the next state."""
    tree = jax.tree.structure(grads)
    triples = tree.flatten_up_to(out)
    first, mu, nu = (tree.unflatten([t[i] for t in triples]) for i in range(3))
    return first, AdamWState(_increment(state.count), mu, nu)


def update_and_apply(tx: _optax.GradientTransformation, grads: Any, state: Any,
                     params: Any) -> tuple[Any, Any]:
    """One optimizer step: the parameters after it and the next state.

    Equal to ``updates, state = tx.update(grads, state, params); params =
    optax.apply_updates(params, updates)`` for any ``optax`` transformation
    ``tx``; that is what runs unless ``tx`` is made by :func:`adamw` and the
    request is CANN's. Then one CANN kernel per parameter updates it, its
    ``mu`` and ``nu`` in place, ``varRef`` the parameter itself, ``lr`` and
    ``weightDecay`` the hyperparameters at ``state.count`` (0 for a
    parameter ``mask`` leaves out): no update tree, no second pass. The
    kernel is aclnnApplyAdamWV2 (ops-nn
    ``optim/apply_adam_w_v2/docs/aclnnApplyAdamWV2.md``; the update as its
    kernel ``optim/apply_adam_w_v2/op_kernel/apply_adam_w_v2_fp.h`` computes
    it, ``t = count + 1``) where the learning rate and the weight decay are
    known when traced (its float attributes), aclnnApplyAdamW (ops-nn
    ``optim/apply_adam_w/docs/aclnnApplyAdamW.md``; its kernel
    ``optim/apply_adam_w/op_kernel/arch35/apply_adam_w_dag.h``) where either
    is traced, e.g. a schedule of the traced ``state.count`` in a jitted
    step: its scalars are one-element float32 tensors, ``beta1Power = b1 **
    count`` and ``beta2Power = b2 ** count`` computed in float32 (the kernel
    multiplies each by its beta). Under ``jax.jit`` with the parameters and
    the state donated (``donate_argnums``), the parameters', ``mu``'s and
    ``nu``'s buffers are the results' (XLA's ``input_output_aliases``): no
    copy of them is made.
    JAX gives each result the first donated argument of its shape and dtype
    not yet taken, so the jitted function takes the parameters before the
    state, as the results come: ``jax.jit(lambda params, state, grads:
    update_and_apply(tx, grads, state, params), donate_argnums=(0, 1))``
    (the other order crosses the buffers of a parameter and a moment of one
    shape, and XLA copies them). A parameter of rank 0 or above 8 goes to
    CANN flattened (ranks 1 to 8), a reshape that XLA copies.
    On an NPU CANN's kernel runs; on a CPU the host provider's
    (``csrc/host/adamw_kernel.cc``), its pure-JAX reference where neither has
    the operator or ``reference_path`` asks for it.

    CANN's request is: ``b1``, ``b2`` and ``eps`` known when traced
    (numbers, or arrays that are not traced), ``eps_root`` 0, ``nesterov``
    False (``learning_rate`` and ``weight_decay`` numbers, schedules or
    traced: one kernel or the other takes them), and the parameter's dtype
    its moments' (CANN takes one dtype for ``varRef``, ``mRef``, ``vRef``,
    ``grad`` and V1's scalars: float32 parameters with the default
    ``mu_dtype``; others take the two steps, parameter by parameter). A
    transformation wrapped by another (e.g. ``optax.inject_hyperparams``,
    ``optax.chain``) is not :func:`adamw`'s: it takes the two steps.

    Args:
      tx: an ``optax.GradientTransformation``.
      grads: the gradients, the parameters' structure, shapes and dtypes
        (a gradient of another dtype is converted to its parameter's).
      state: ``tx``'s state (``tx.init(params)``, or the last step's).
      params: the parameters (float32, float16 or bfloat16 for
        :func:`adamw`).

    Returns:
      ``(new_params, new_state)``: the parameters' structure, shapes and
      dtypes, and ``tx``'s state.

    Raises:
      TypeError: ``tx`` is not an ``optax.GradientTransformation``;
        ``params`` is None; as ``tx.update`` (for :func:`adamw`: a
        parameter's dtype is not float32, float16 or bfloat16).
    """
    update = getattr(tx, "update", None)
    if not callable(update):
        raise TypeError("jax_aclnn.optax.update_and_apply: tx must be an "
                        f"optax.GradientTransformation, got {type(tx).__name__}")
    if params is None:
        raise TypeError("jax_aclnn.optax.update_and_apply: params is None (the step applies "
                        "the updates to them)")
    in_place = getattr(update, "_jax_aclnn_in_place", None)
    stepped = None if in_place is None else in_place(grads, state, params)
    if stepped is not None:
        return stepped
    updates, state = update(grads, state, params)
    return _optax.apply_updates(params, updates), state


__all__ = ["AdamWState", "adamw", "update_and_apply"]
