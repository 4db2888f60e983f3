"""jax_aclnn.optax.adamw against optax.adamw itself (issue 44): optax's whole
signature in its order, each argument, optax.inject_hyperparams inside jit,
schedules, and half-precision parameters (one dtype for the four tensors
aclnnApplyAdamWV2 takes; tests/test_nn_standin.py runs them through the test
provider, which refuses mixed dtypes).

In this process CPU has no provider of aclnnApplyAdamWV2: where adamw calls
it, its pure-JAX reference (CANN's formula) runs; which path a configuration
takes is read from the traced step.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jax_aclnn import optax as aclnn_optax

#: Shapes of the parameters: a matrix, a vector, and in a subtree a scalar and
#: a rank-9 array (CANN takes ranks 1 to 8: adamw flattens the others).
SHAPES = {"w": (4, 3), "b": (3,), "inner": {"s": (), "r": (1, 2, 1, 1, 1, 1, 1, 1, 2)}}
STEPS = 3
#: optax's adam direction and ours differ by float32 rounding (the kernel's
#: order of operations), over STEPS updates of size ~learning_rate.
RTOL, ATOL = 1e-5, 1e-6


def random_tree(rng, dtype=np.float32):
    return jax.tree.map(lambda s: jnp.asarray(rng.normal(size=s), dtype), SHAPES,
                        is_leaf=lambda s: isinstance(s, tuple))


def train(tx, params, grads):
    """The parameters after one jitted update per gradient, and the state."""
    step = jax.jit(lambda p, g, s: (lambda u, s: (optax.apply_updates(p, u), s))(
        *tx.update(g, s, p)))
    state = tx.init(params)
    for g in grads:
        params, state = step(params, g, state)
    return params, state


def kernel_calls(tx, params) -> list:
    """The aclnnApplyAdamWV2 calls of the traced update (the state traced,
    as inside a jitted step)."""
    jaxpr = jax.make_jaxpr(lambda g, s, p: tx.update(g, s, p))(params, tx.init(params), params)
    return [e for e in jaxpr.eqns if e.primitive.name == "optax_apply_adam_w_v2"]


def assert_trees_close(ours, theirs, rtol=RTOL, atol=ATOL):
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                   rtol=rtol, atol=atol)


def by_matrices(params):
    return jax.tree.map(lambda p: jnp.ndim(p) == 2, params)


def test_adamw_takes_optax_signature():
    ours, theirs = (inspect.signature(f).parameters for f in (aclnn_optax.adamw, optax.adamw))
    assert [(p.name, p.default, p.kind) for p in ours.values()] == [
        (p.name, p.default, p.kind) for p in theirs.values()]


CASES = {  # name: (positional arguments, keyword arguments, aclnnApplyAdamWV2 runs)
    "defaults": ((1e-2,), {}, True),
    # optax's fifth positional argument is eps_root (the kernel has none)
    "positional eps_root": ((1e-2, 0.9, 0.999, 1e-8, 0.5), {}, False),
    "mu_dtype": ((1e-2,), {"mu_dtype": jnp.bfloat16}, True),
    "weight_decay": ((1e-2,), {"b1": 0.8, "b2": 0.95, "eps": 1e-6, "weight_decay": 0.3}, True),
    "mask pytree prefix": ((1e-2,), {"weight_decay": 0.3,
                                     "mask": {"w": True, "b": False, "inner": True}}, True),
    "mask callable": ((1e-2,), {"weight_decay": 0.3, "mask": by_matrices}, True),
    "nesterov": ((1e-2,), {"weight_decay": 0.3, "nesterov": True}, False),
    "schedules": ((optax.linear_schedule(2e-2, 5e-3, STEPS),),
                  {"weight_decay": optax.linear_schedule(0.3, 0.0, STEPS)}, True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_adamw_equals_optax(rng, name):
    args, kwargs, on_kernel = CASES[name]
    params = random_tree(rng)
    grads = [random_tree(rng) for _ in range(STEPS)]
    tx = aclnn_optax.adamw(*args, **kwargs)
    ours, state = train(tx, params, grads)
    theirs, their_state = train(optax.adamw(*args, **kwargs), params, grads)
    # bfloat16 moments: float32 rounding (the kernel's order) can move m by a
    # bfloat16 ulp (2**-8 relative), the update by learning_rate * 2**-8 a step
    assert_trees_close(ours, theirs, *((RTOL, STEPS * 1e-2 * 2 ** -8) if "mu_dtype" in kwargs
                                       else ()))
    assert_trees_close(state.mu, their_state[0].mu, *((2 ** -8,) * 2 if "mu_dtype" in kwargs
                                                      else ()))
    assert jax.tree.leaves(state.mu)[0].dtype == kwargs.get("mu_dtype", jnp.float32)
    assert int(state.count) == STEPS
    assert len(kernel_calls(tx, params)) == (len(jax.tree.leaves(params)) if on_kernel else 0)


def test_adamw_under_inject_hyperparams_in_jit_equals_optax(rng):
    params = random_tree(rng)
    grads = [random_tree(rng) for _ in range(STEPS)]
    hyper = dict(learning_rate=optax.linear_schedule(2e-2, 5e-3, STEPS), b1=0.8,
                 weight_decay=0.1)
    theirs, their_state = train(optax.inject_hyperparams(optax.adamw)(**hyper), params, grads)
    for static_args, on_kernel in [((), False), (("b1", "b2", "eps", "eps_root"), True)]:
        # every numeric hyperparameter traced: the reference; b1, b2, eps and
        # eps_root kept numbers: the kernel, the learning rate injected
        tx = optax.inject_hyperparams(aclnn_optax.adamw, static_args=static_args)(**hyper)
        ours, state = train(tx, params, grads)
        assert_trees_close(ours, theirs)
        assert_trees_close(state.hyperparams["learning_rate"],
                           their_state.hyperparams["learning_rate"])
        assert len(kernel_calls(tx, params)) == (len(jax.tree.leaves(params)) if on_kernel else 0)


def half_precision_steps(dtype) -> tuple[list, list]:
    """Each of STEPS updates of ``dtype`` parameters by adamw, and the float32
    updates optax.adamw computes for float32 copies of the same parameters
    and gradients: ours are theirs rounded to ``dtype``."""
    rng = np.random.default_rng(0)
    params = random_tree(rng, dtype)
    f32 = lambda tree: jax.tree.map(lambda a: a.astype(jnp.float32), tree)  # noqa: E731
    tx, ref = aclnn_optax.adamw(1e-2, weight_decay=0.1), optax.adamw(1e-2, weight_decay=0.1)
    update, ref_update = jax.jit(tx.update), jax.jit(lambda g, s, p: ref.update(f32(g), s, f32(p)))
    state, their_state = tx.init(params), ref.init(f32(params))
    ours, theirs = [], []
    for _ in range(STEPS):
        g = random_tree(rng, dtype)
        u, state = update(g, state, params)
        t, their_state = ref_update(g, their_state, params)
        ours.append(u), theirs.append(t)
        params = optax.apply_updates(params, u)
    assert {a.dtype for a in jax.tree.leaves((state.mu, state.nu))} == {jnp.dtype(jnp.float32)}
    return ours, theirs


def test_half_parameters_pass_one_dtype_to_the_kernel():
    # CANN's aclnnApplyAdamWV2 takes one dtype for varRef, mRef, vRef and
    # grad: float32 with the float32 moments, the gradient converted
    params = random_tree(np.random.default_rng(0), jnp.bfloat16)
    for call in kernel_calls(aclnn_optax.adamw(1e-2), params):
        assert {v.aval.dtype for v in call.invars} == {jnp.dtype(jnp.float32)}, call
    ours, theirs = half_precision_steps(jnp.bfloat16)
    for u, t in zip(ours, theirs):
        assert {a.dtype for a in jax.tree.leaves(u)} == {jnp.dtype(jnp.bfloat16)}
        assert_trees_close(u, t, rtol=2 ** -7, atol=0)  # one bfloat16 ulp


def test_dtypes_cann_does_not_take_are_type_errors():
    # conftest here only: tests/llm_standin.py imports this module after JAX started
    from conftest import enable_x64

    with pytest.raises(TypeError, match="mu_dtype must be float32, float16 or bfloat16"):
        aclnn_optax.adamw(1e-2, mu_dtype=jnp.int32)
    tx = aclnn_optax.adamw(1e-2)
    with pytest.raises(TypeError, match="a parameter must be .* got int32"):
        tx.init({"w": jnp.ones(3, jnp.int32)})
    with enable_x64(True), pytest.raises(TypeError, match="got float64"):
        tx.init({"w": jnp.ones(3, jnp.float64)})
