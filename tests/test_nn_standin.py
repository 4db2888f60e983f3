"""The catalogue through aclnn operators (issue 38): jax_aclnn.nn, optax and
the Flax RMSNorm in a process whose CANN is the test provider (its float32
operators written from CANN's documented semantics, csrc/testing/), the CPU
routed through it (tests/llm_standin.py)."""

from __future__ import annotations

import jax
import pytest

from declared_operators import LIBRARY
from npu_runtime_harness import NpuProcess

pytestmark = pytest.mark.skipif(not LIBRARY.exists(),
                                reason="the test provider is built with JAX_ACLNN_TESTING=ON")


@pytest.fixture(scope="module")
def standin():
    # the backend starts after the environment is set (jax itself may be imported before)
    process = NpuProcess({"XLA_FLAGS": "--xla_force_host_platform_device_count=4",
                          "JAX_PLATFORMS": "cpu"})
    yield process
    process.close()


def run(process, name):
    import llm_standin

    return process.run(getattr(llm_standin, name))


def test_each_function_runs_its_aclnn_operators_and_equals_torch(standin):
    counted = run(standin, "check_functions")
    missing = [op for op, n in counted.items() if n == 0 and op not in (
        "aclnnApplyAdamWV2",)]
    assert not missing, counted


def test_the_model_trains_on_aclnn_operators_as_on_flax_and_optax(standin):
    ours, theirs, counted, targets = run(standin, "check_model")
    for a, b in zip(ours, theirs):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (ours, theirs)
    assert all(counted[op] > 0 for op in counted if op != "aclnnAddRmsNorm"), counted
    # one custom call per use: two norms, one RoPE, one SwiGLU, one loss, six parameters
    assert targets == {
        "aclnn_nn_rms_norm": 2, "aclnn_nn_rms_norm_grad": 2,
        "aclnn_nn_rotary_position_embedding_1s1d": 1, "aclnn_nn_rotary_position_embedding_grad_1s1d": 1,
        "aclnn_nn_swiglu": 1, "aclnn_nn_swiglu_grad": 1, "aclnn_nn_cross_entropy_loss": 1,
        "aclnn_nn_cross_entropy_loss_grad": 1, "aclnn_optax_apply_adam_w_v2": 6}, targets


def test_a_batch_sharded_step_gathers_no_activation(standin):
    hlo, single, sharded = run(standin, "check_sharded_step")
    gathers = [line for line in hlo.splitlines() if "all-gather" in line and "=" in line]
    assert not gathers, gathers
    assert abs(single - sharded) <= 1e-5 * abs(single)


def test_attention_runs_flash_attention_and_equals_jax(standin):
    counted = run(standin, "check_attention")
    # five programs forward and backward, and four devices' local calls
    assert counted == {"aclnnFlashAttentionScore": 9, "aclnnFlashAttentionScoreGrad": 5}, counted


def test_ragged_dot_runs_grouped_matmuls_and_equals_jax(standin):
    # the forward, and the two products of the backward
    assert run(standin, "check_ragged_dot") == {"aclnnGroupedMatmulV4": 3}


def test_adamw_steps_half_parameters_through_the_kernel(standin):
    from test_optax import STEPS, assert_trees_close

    ours, theirs, called = run(standin, "check_adamw_half")
    assert called == STEPS * len(jax.tree.leaves(ours[0])), called  # one call per parameter
    for u, t in zip(ours, theirs):
        assert_trees_close(u, t, rtol=2 ** -7, atol=0)  # one bfloat16 ulp


def test_update_and_apply_steps_parameters_in_place_through_the_kernel(standin):
    from test_optax import STEPS, assert_trees_close

    ours, theirs, called = run(standin, "check_update_and_apply")
    assert called == STEPS * len(jax.tree.leaves(ours)), called  # one call per parameter
    assert_trees_close(ours, theirs)


def test_explicit_mesh_layouts_and_per_example_gradients_run_aclnn_operators(standin):
    counted, per_example_calls = run(standin, "check_explicit_meshes")
    assert all(counted[op] > 0 for op in (
        "aclnnSwiGlu", "aclnnSwiGluGrad", "aclnnRmsNorm", "aclnnRmsNormGrad",
        "aclnnRotaryPositionEmbedding", "aclnnRotaryPositionEmbeddingGrad")), counted
    assert per_example_calls == 1  # one call for every example's dx (it looped)
