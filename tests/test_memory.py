"""Memory of a training step: XLA's memory analysis (deterministic) of
``jit(grad(loss))`` through jax_aclnn against the same model in pure JAX,
and the aliasing of the element-wise backward calls' result with their
incoming gradient that it relies on (no copies added, right results), and
of the cross-entropy gradient with the forward's log-softmax."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_aclnn as aclnn
from cases import OPERATORS, Case, of
from conftest import DTYPES, JAX_RELEASE, assert_close, f64
from jax_aclnn import network, nn
from jax_aclnn.cli import bench, step_memory
from jax_aclnn.ops import primitive

ALIASING = [name for name in OPERATORS if primitive(name).alias_gradient]
SHAPES = [(256, 256, 3), (1024, 128, 4)]


def unfused_copies(hlo: str) -> int:
    """``copy``/``copy-start`` instructions of compiled HLO text outside fusions
    (a copy inside a loop fusion is its root's identity: no buffer, no pass)."""
    fused = set(re.findall(r" fusion\(.*?calls=(%[\w.-]+)", hlo))
    count, inside = 0, None
    for line in hlo.splitlines():
        header = re.match(r"(?:ENTRY )?(%[\w.-]+) .*\{$", line)
        if header:
            inside = header.group(1)
        elif inside is not None and inside not in fused:
            count += bool(re.search(r"= \S+ copy(-start)?\(", line))
    return count


def no_aliasing(monkeypatch):
    for name in ALIASING:
        monkeypatch.setattr(primitive(name), "alias_gradient", False)


@pytest.mark.parametrize("shape", SHAPES)
def test_training_step_needs_no_more_temporary_memory_than_pure_jax(shape):
    """At most 1.1x pure JAX's temporary memory (on jax 0.10 it is 0.67-0.80x;
    jax 0.8.1's buffer assignment gives 1.0004x at (1024, 128, 4))."""
    temp = {m: step_memory.temp_bytes(step_memory.compiled_step(m, *shape))
            for m in step_memory.MODES}
    print(shape, {m: t / 2**20 for m, t in temp.items()})
    assert temp["aclnn"] <= 1.1 * temp["reference"], temp
    assert temp["aclnn"] <= 1.1 * temp["jnp"], temp


def test_aliasing_saves_memory_and_adds_no_copies(monkeypatch):
    aliased = step_memory.compiled_step("aclnn", *SHAPES[0])
    text = aliased.as_text()
    for name in ("swish_backward", "hardshrink_backward", "logit_grad"):
        calls = [line for line in text.splitlines() if f'custom_call_target="aclnn_{name}"' in line]
        assert calls and all("output_to_operand_aliasing={{}: (" in c for c in calls), name
    reference = step_memory.compiled_step("reference", *SHAPES[0])
    no_aliasing(monkeypatch)
    plain = step_memory.compiled_step("aclnn", *SHAPES[0])
    assert "output_to_operand_aliasing" not in plain.as_text()
    if JAX_RELEASE < (0, 8):  # jax 0.7's buffer assignment reuses those buffers itself
        assert step_memory.temp_bytes(aliased) <= step_memory.temp_bytes(plain)
    else:
        assert step_memory.temp_bytes(aliased) < step_memory.temp_bytes(plain)
    assert unfused_copies(text) == unfused_copies(plain.as_text()) == 0
    assert unfused_copies(reference.as_text()) == 0


def test_counting_copies_sees_a_needed_copy():
    """The counter of the test above finds the copy XLA adds when the
    aliased gradient is still needed after the call (by a custom call, which
    XLA cannot fuse a copy into)."""
    def f(g, x):
        h = aclnn.swish_backward(g, x)  # a custom call's result, aliased below
        return aclnn.hardshrink_backward(h, x) * h

    text = jax.jit(f).lower(jnp.ones((64, 64)), jnp.ones((64, 64))).compile().as_text()
    assert "output_to_operand_aliasing" in text
    assert unfused_copies(text) == 1


def test_a_jit_parameter_gradient_is_not_aliased():
    """XLA would copy a parameter it must not overwrite: no aliasing there."""
    text = jax.jit(aclnn.swish_backward).lower(jnp.ones((64, 64)), jnp.ones((64, 64))).compile().as_text()
    assert "output_to_operand_aliasing" not in text
    assert unfused_copies(text) == 0


def test_no_aliasing_on_the_npu_platform():
    """CANN does not document ``out == in`` for these operators: the NPU
    program never aliases (the CPU one does, so the check can fail)."""
    def step(params, x, y):
        return jax.grad(network.loss)(params, x, y)

    args = step_memory.inputs(64, 32, 2)
    for platform, aliased in (("npu", False), ("cpu", True)):
        exported = jax.export.export(jax.jit(step), platforms=[platform],
                                     disabled_checks=aclnn.export_disabled_checks())(*args)
        assert ("output_operand_aliases" in exported.mlir_module()) == aliased, platform


def aliasing_case(op: str) -> Case:
    """The first case of ``op`` (an aliasing operator) whose incoming
    gradient has the result's shape, so that the result may take its buffer."""
    lin = primitive(op).linear_operand
    return next(c for c in of(op) if c.shapes[lin] == np.broadcast_shapes(*c.shapes))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ALIASING)
def test_aliased_calls_give_the_operator_results(rng, name, dtype):
    """The host kernels with their output in the incoming gradient's memory
    (several chunks and threads: the case's shapes scaled to about 300,000
    elements), against the oracle."""
    case = aliasing_case(name)
    lin = primitive(name).linear_operand
    factor = int(np.ceil((300_000 / max(1, np.prod(np.broadcast_shapes(*case.shapes)))) ** (
        1 / max(1, len(np.broadcast_shapes(*case.shapes))))))
    operands = case.operands(rng, dtype, shapes=case.scaled(factor))

    def doubled(*a):  # the incoming gradient * 2: a dead intermediate, aliased
        a = list(a)
        a[lin] = a[lin] * 2
        return a

    f = jax.jit(lambda *a: case.call(*doubled(*a)))
    assert "output_to_operand_aliasing" in f.lower(*operands).compile().as_text()
    assert_close(f(*operands), case.expected(*doubled(*(f64(a) for a in operands))), dtype)


def cross_entropy_gradient(labels, cot):
    """The logits' gradient of sum(cot * softmax_cross_entropy_with_integer_labels)."""
    return jax.grad(lambda x: jnp.sum(
        nn.softmax_cross_entropy_with_integer_labels(x, labels).astype(jnp.float32) * cot))


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_cross_entropy_gradient_takes_the_log_softmax_buffer(rng, dtype):
    """On the CPU aclnnCrossEntropyLossGrad writes its result into the
    forward's logProb, which nothing reads after it: the compiled
    ``jit(grad)`` aliases the two and adds no copy, and the gradient is the
    float64 formula's (rows of 3,000 classes: three chunks a row, four
    tasks)."""
    n, c = 40, 3000
    logits = jnp.asarray(3 * rng.normal(size=(n, c)), dtype)
    labels = rng.integers(0, c, size=n)
    cot = np.asarray(jnp.asarray(rng.normal(size=n), dtype).astype(jnp.float32))
    f = jax.jit(cross_entropy_gradient(labels, cot))
    text = f.lower(logits).compile().as_text()
    calls = [line for line in text.splitlines()
             if 'custom_call_target="aclnn_nn_cross_entropy_loss_grad"' in line]
    assert calls and all("output_to_operand_aliasing={{}: (1, {})}" in c for c in calls)
    assert unfused_copies(text) == 0
    x = f64(logits)
    p = np.exp(x - x.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(n), labels] -= 1
    assert_close(f(logits), p * cot[:, None], dtype, scale=2)


def test_the_cross_entropy_gradient_is_not_aliased_on_the_npu_platform():
    """As for the element-wise operators: the NPU program keeps CANN's
    separate buffers (the CPU one aliases, so the check can fail)."""
    f = jax.jit(cross_entropy_gradient(np.arange(8) % 5, np.ones(8, np.float32)))
    for platform, aliased in (("npu", False), ("cpu", True)):
        exported = jax.export.export(f, platforms=[platform],
                                     disabled_checks=aclnn.export_disabled_checks())(
            jnp.ones((8, 5)))
        assert ("output_operand_aliases" in exported.mlir_module()) == aliased, platform


@pytest.mark.parametrize("name,prototype", [
    ("add_list", "aclnnAddListGetWorkspaceSize(const aclTensorList *xs, const aclTensor *y, "
                 "aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)"),
    ("inplace_add", "aclnnInplaceAddGetWorkspaceSize(aclTensor *xsRef, const aclTensor *y, "
                    "aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)")])
def test_alias_on_cpu_refuses_tensor_lists_and_in_place_outputs(name, prototype):
    """A tensor list's operands shift the positions; an in-place output's
    buffer is aliased already."""
    op = aclnn.declare(prototype, lambda xs, y: (xs, y), name=f"test_memory_{name}")
    with pytest.raises(ValueError, match="tensor-list inputs or in-place outputs"):
        op.aclnn_operator.alias_on_cpu("y")


def test_step_compile_times_are_compilations_only(monkeypatch):
    """The step table's compile time: each mode compiled COMPILE_ROUNDS
    times, each mode first in turn, on inputs made before any is timed
    (making them compiles random-number programs: once counted in the
    first mode's time, it read as compiling through aclnn 2-6x slower)."""
    made, compiled = [], []
    real_inputs, real_compile = step_memory.inputs, step_memory.compile_step
    monkeypatch.setattr(step_memory, "inputs", lambda *a: made.append(a) or real_inputs(*a))
    monkeypatch.setattr(step_memory, "compile_step",
                        lambda mode, args: compiled.append(mode) or real_compile(mode, args))
    row = step_memory.measure(64, 32, 2, repeats=1)
    assert len(made) == 1
    rounds = step_memory.COMPILE_ROUNDS
    n = len(step_memory.MODES)
    assert len(compiled) == rounds * n
    assert [compiled[i * n] for i in range(rounds)] == [step_memory.MODES[i % n] for i in range(rounds)]
    assert all(row[f"{m}_compile_s"] > 0 for m in step_memory.MODES)


def test_bench_training_step_table(capsys):
    row = step_memory.measure(64, 32, 2, repeats=1)
    for mode in step_memory.MODES:
        assert row[f"{mode}_temp_bytes"] > 0 and row[f"{mode}_s"] > 0 and row[f"{mode}_compile_s"] > 0
    assert row["aclnn_temp_bytes"] <= 1.1 * row["reference_temp_bytes"]  # as the test above
    bench.print_step_table([row])
    out = capsys.readouterr().out
    assert "64 x 32 x 2" in out and "MiB" in out
