"""jax_aclnn.optax.adamw against optax.adamw itself (issue 44): optax's whole
signature in its order, each argument, optax.inject_hyperparams inside jit,
schedules, and half-precision parameters (one dtype for the four tensors
aclnnApplyAdamWV2 takes; tests/test_nn_standin.py runs them through the test
provider, which refuses mixed dtypes).

In this process the CPU's host provider runs aclnnApplyAdamWV2 where adamw
calls it (tests/test_host_adamw.py checks the kernel itself); which path a
configuration takes is read from the traced step. update_and_apply (the
update and optax.apply_updates in one) against optax's two steps, its
in-place kernel path read from the lowered and the compiled step.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jax_aclnn as aclnn
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


def equations(jaxpr):
    """A jaxpr's equations and those of the jaxprs inside them (the branches
    of ``jax.lax.platform_dependent``: the NPU's)."""
    for e in jaxpr.eqns:
        yield e
        for value in e.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    yield from equations(inner)


def kernel_calls(tx, params) -> list:
    """The aclnnApplyAdamWV2 calls of the traced update (the state traced,
    as inside a jitted step), in any branch."""
    jaxpr = jax.make_jaxpr(lambda g, s, p: tx.update(g, s, p))(params, tx.init(params), params)
    return [e for e in equations(jaxpr.jaxpr) if e.primitive.name == "optax_apply_adam_w_v2"]


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


# --- update_and_apply: optax's two steps in one, in place on the kernel ------------------------

UPDATE_CASES = {  # name: adamw's keyword arguments
    "defaults": {},
    "mask": {"weight_decay": 0.3, "mask": {"w": True, "b": False, "inner": True}},
    "no weight decay": {"weight_decay": 0.0},
}
#: One unit in the last place of each dtype, relative.
ULP = {"float32": 2 ** -23, "bfloat16": 2 ** -7, "float16": 2 ** -10}


def two_steps(tx, params, grads):
    """optax's first step from ``params``: ``tx.update``, then
    ``optax.apply_updates``."""
    updates, state = tx.update(grads, tx.init(params), params)
    return optax.apply_updates(params, updates), state


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("name", list(UPDATE_CASES))
def test_update_and_apply_equals_optax_adamw_and_apply_updates(rng, name, dtype):
    """Over STEPS jitted steps: ours against optax.adamw + optax.apply_updates,
    optax computing in float32 from the same parameters and gradients (its
    moments float32, as ours), its parameters rounded to ``dtype`` each step."""
    kwargs = UPDATE_CASES[name]
    params = random_tree(rng, dtype)
    grads = [random_tree(rng, dtype) for _ in range(STEPS)]
    tx, ref = aclnn_optax.adamw(1e-2, **kwargs), optax.adamw(1e-2, **kwargs)
    step = jax.jit(lambda g, s, p: aclnn_optax.update_and_apply(tx, g, s, p))
    f32 = lambda tree: jax.tree.map(lambda a: a.astype(jnp.float32), tree)  # noqa: E731

    @jax.jit
    def ref_step(g, s, p):
        u, s = ref.update(f32(g), s, f32(p))
        return jax.tree.map(lambda q, n: n.astype(q.dtype), p,
                            optax.apply_updates(f32(p), u)), s

    ours, theirs = params, params
    state, their_state = tx.init(params), ref.init(f32(params))
    for g in grads:
        ours, state = step(g, state, ours)
        theirs, their_state = ref_step(g, their_state, theirs)
    assert jax.tree.map(lambda a: a.dtype, ours) == jax.tree.map(lambda a: a.dtype, params)
    # float32: the kernel's order of operations; halves: a rounding of the
    # update and one of the sum (optax's one) a step
    rtol = RTOL if dtype == "float32" else 2 * STEPS * ULP[dtype]
    assert_trees_close(ours, theirs, rtol, ATOL if dtype == "float32" else 0)
    assert_trees_close(state.mu, their_state[0].mu, 1e-4, 1e-6)
    assert_trees_close(state.nu, their_state[0].nu, 1e-4, 1e-7)
    assert int(state.count) == STEPS


def kernel_lr_and_decay(text: str) -> list[tuple[float, float]]:
    """(lr, weightDecay) of each aclnnApplyAdamWV2 call of a lowered program
    (its float attributes, in the prototype's order: lr, beta1, beta2,
    weightDecay, eps)."""
    calls = []
    for line in text.splitlines():
        if "stablehlo.custom_call @aclnn_optax_apply_adam_w_v2(" in line:
            floats = [float(x) for x in line.split("floats = dense<[")[1].split("]")[0].split(",")]
            calls.append((floats[0], floats[3]))
    return calls


def hlo_ops(text: str) -> set[str]:
    """The StableHLO operations (``stablehlo.<op>``) of a lowered program."""
    return {line.split("stablehlo.")[1].split(" ")[0].split("(")[0]
            for line in text.splitlines() if "stablehlo." in line}


def test_the_jitted_step_is_one_kernel_call_per_parameter_in_place(rng):
    """float32 parameters (a rank-0 and a rank-9 one among them): the
    lowered step holds one aclnnApplyAdamWV2 call per parameter, varRef the
    parameter, and no arithmetic besides the count's; with the parameters
    and the state donated, the compiled step aliases them to its results,
    copies none of rank 1 to 8, and the results are in the donated
    buffers."""
    params = random_tree(rng)
    tx = aclnn_optax.adamw(1e-2, weight_decay=0.1,
                           mask={"w": True, "b": False, "inner": True})
    # the results' order (jax pairs each result with the first donated
    # argument of its shape and dtype not yet taken)
    step = jax.jit(lambda p, s, g: aclnn_optax.update_and_apply(tx, g, s, p),
                   donate_argnums=(0, 1))
    state = tx.init(params)
    lowered = step.lower(params, state, params)
    text = lowered.as_text()
    # w, the rank-0 and the rank-9 parameters decay, b does not
    assert sorted(kernel_lr_and_decay(text)) == [(1e-2, 0.0)] + [(1e-2, 0.1)] * 3
    # the count's conversion and increment (scalars), the rank-0 and rank-9
    # parameters' reshapes: nothing over the parameters but the kernel
    assert hlo_ops(text) <= {"custom_call", "reshape", "convert", "constant", "compare", "add",
                             "select", "broadcast_in_dim", "return"}, hlo_ops(text)
    for line in text.splitlines():
        if "stablehlo.add" in line or "stablehlo.select" in line:
            assert "tensor<i32>" in line, line  # the count only
    compiled = lowered.compile().as_text()
    assert "input_output_alias" in compiled
    # no copy of a parameter of rank 1 to 8 or of its moments (XLA copies
    # the rank-0 and rank-9 ones, which CANN's ranks make a reshape of)
    copies = [line for line in compiled.splitlines() if " copy(" in line]
    assert [line for line in copies if "f32[4,3]" in line or "f32[3]{" in line] == []
    grads = random_tree(rng)
    want, want_state = two_steps(tx, params, grads)
    pointers = [a.unsafe_buffer_pointer() for a in jax.tree.leaves((params, state.mu, state.nu))]
    new_params, new_state = step(params, state, grads)
    assert [a.unsafe_buffer_pointer() for a in jax.tree.leaves(
        (new_params, new_state.mu, new_state.nu))] == pointers
    assert_trees_close(new_params, want)
    assert_trees_close((new_state.mu, new_state.nu), (want_state.mu, want_state.nu))


def v1_calls(text: str) -> int:
    """The aclnnApplyAdamW (V1) calls of a lowered program."""
    return text.count("stablehlo.custom_call @aclnn_optax_apply_adam_w(")


def test_a_schedule_of_the_traced_count_runs_apply_adam_w_in_place(rng):
    """Regression (a schedule of the traced count took the two steps, no
    kernel in place): optax.cosine_decay_schedule with a masked weight
    decay, STEPS jitted steps with the parameters and the state donated.
    The lowered step holds one aclnnApplyAdamW call per parameter and no
    aclnnApplyAdamWV2 one, the compiled step aliases its buffers (the
    results in the donated parameters' and moments'), the host kernel runs
    once per parameter a step, and the result is optax.adamw's with
    optax.apply_updates."""
    params = random_tree(rng)
    grads = [random_tree(rng) for _ in range(STEPS)]
    schedule = optax.cosine_decay_schedule(2e-2, STEPS)
    kwargs = dict(weight_decay=0.1, mask={"w": True, "b": False, "inner": True})
    tx, ref = aclnn_optax.adamw(schedule, **kwargs), optax.adamw(schedule, **kwargs)
    step = jax.jit(lambda p, s, g: aclnn_optax.update_and_apply(tx, g, s, p),
                   donate_argnums=(0, 1))
    ref_step = jax.jit(lambda p, s, g: (lambda u, s: (optax.apply_updates(p, u), s))(
        *ref.update(g, s, p)))
    state = tx.init(params)
    lowered = step.lower(params, state, grads[0])
    text = lowered.as_text()
    assert v1_calls(text) == len(jax.tree.leaves(params)) and kernel_lr_and_decay(text) == []
    assert "input_output_alias" in lowered.compile().as_text()
    # aclnnApplyAdamW's scalars built once per variant (decayed, masked),
    # not once per parameter: beta1 ** t and beta2 ** t twice, beside the
    # schedule's own powers (regression: 2 per parameter)
    powers = lambda f, *a: str(jax.make_jaxpr(f)(*a)).count(" pow")  # noqa: E731
    assert powers(step, params, state, grads[0]) == powers(schedule, state.count) + 4
    aclnn.reset_runtime_stats()
    ours = params
    theirs = jax.tree.map(jnp.copy, params)  # ours are donated
    their_state = ref.init(theirs)
    for g in grads:
        pointers = [a.unsafe_buffer_pointer() for a in jax.tree.leaves(
            (ours["w"], ours["b"], state.mu["w"], state.nu["b"]))]
        ours, state = step(ours, state, g)
        assert [a.unsafe_buffer_pointer() for a in jax.tree.leaves(
            (ours["w"], ours["b"], state.mu["w"], state.nu["b"]))] == pointers
        theirs, their_state = ref_step(theirs, their_state, g)
    assert aclnn.runtime_stats()["calls"]["aclnnApplyAdamW"]["execute"] == STEPS * 4
    assert_trees_close(ours, theirs)
    assert_trees_close((state.mu, state.nu), (their_state[0].mu, their_state[0].nu), 1e-4, 1e-7)
    assert int(state.count) == STEPS


@pytest.mark.parametrize("name", ["inject_hyperparams", "nesterov", "sgd", "bfloat16 moments"])
def test_update_and_apply_takes_the_two_steps_where_the_kernel_cannot(rng, name):
    """optax.inject_hyperparams' wrapper (not adamw's transformation),
    Nesterov's momentum, a plain optax.sgd, mu_dtype bfloat16 (not the
    parameters' dtype): the result is optax's two steps', and no in-place
    call is made (where adamw's kernel runs, varRef is a zero buffer: the
    direction; aclnnApplyAdamW is never called)."""
    params = random_tree(rng)
    grads = [random_tree(rng) for _ in range(STEPS)]
    ours_tx, their_tx = {
        "inject_hyperparams": (optax.inject_hyperparams(aclnn_optax.adamw)(learning_rate=1e-2),
                               optax.inject_hyperparams(optax.adamw)(learning_rate=1e-2)),
        "nesterov": (aclnn_optax.adamw(1e-2, nesterov=True), optax.adamw(1e-2, nesterov=True)),
        "sgd": (optax.sgd(1e-2, momentum=0.9),) * 2,
        "bfloat16 moments": (aclnn_optax.adamw(1e-2, mu_dtype=jnp.bfloat16),
                             optax.adamw(1e-2, mu_dtype=jnp.bfloat16)),
    }[name]
    step = jax.jit(lambda g, s, p: aclnn_optax.update_and_apply(ours_tx, g, s, p))
    ref_step = jax.jit(lambda g, s, p: (lambda u, s: (optax.apply_updates(p, u), s))(
        *their_tx.update(g, s, p)))
    text = step.lower(grads[0], ours_tx.init(params), params).as_text()
    assert {call == (1.0, 0.0) for call in kernel_lr_and_decay(text)} <= {True}
    assert v1_calls(text) == 0
    ours, state = params, ours_tx.init(params)
    theirs, their_state = params, their_tx.init(params)
    for g in grads:
        ours, state = step(g, state, ours)
        theirs, their_state = ref_step(g, their_state, theirs)
    bf16 = name == "bfloat16 moments"
    assert_trees_close(ours, theirs, *((RTOL, STEPS * 1e-2 * 2 ** -8) if bf16 else ()))


def test_update_and_apply_refuses_what_adamw_refuses():
    tx = aclnn_optax.adamw(1e-2)
    params = {"w": jnp.ones(3)}
    with pytest.raises(TypeError, match="tx must be an optax.GradientTransformation"):
        aclnn_optax.update_and_apply(object(), params, tx.init(params), params)
    with pytest.raises(TypeError, match="params is None"):
        aclnn_optax.update_and_apply(tx, params, tx.init(params), None)
    with pytest.raises(TypeError, match="a parameter must be .* got int32"):
        aclnn_optax.update_and_apply(tx, params, tx.init(params), {"w": jnp.ones(3, jnp.int32)})
