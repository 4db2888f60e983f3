"""Shared helpers: random inputs rounded to the tested dtype, the float64
values the kernel sees, and per-dtype tolerances."""

from __future__ import annotations

import gc
import os
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

#: Host CPU devices of the test process, for the sharding tests (set before
#: JAX starts its CPU backend, which importing jax_aclnn does).
NUM_DEVICES = 8
jax.config.update("jax_num_cpu_devices", NUM_DEVICES)
#: The installed jax release as (major, minor), for tests of what a release can do.
JAX_RELEASE = tuple(int(p) for p in jax.__version__.split(".")[:2])

DTYPES = ["float32", "float16", "bfloat16"]

try:  # PyTorch's CPU kernels: the oracle of many tests (the test extra pins it)
    import torch
    import torch.nn.functional as F
except ImportError:  # the sanitizers' and qemu's venvs: the torch-free tests run there
    torch = F = None
#: Marks a test whose oracle is PyTorch: skipped only where it is not installed.
needs_torch = pytest.mark.skipif(torch is None, reason="its oracle is PyTorch (the test extra)")

try:  # the context manager turning 64-bit types on
    from jax import enable_x64  # jax >= 0.8
except ImportError:  # jax 0.7
    from jax.experimental import enable_x64  # noqa: F401


def tolerance(dtype) -> float:
    """rtol = atol = eps ** (2/3) of the dtype (as TransformerEngine's tests)."""
    return float(jnp.finfo(jnp.dtype(dtype)).eps) ** (2 / 3)


def as_dtype(values, dtype) -> jax.Array:
    """A float64 numpy array rounded to ``dtype`` as a JAX array."""
    return jnp.asarray(np.asarray(values, np.float64).astype(np.float32)).astype(dtype)


def f64(a) -> np.ndarray:
    """The values of an array (any dtype) as float64 numpy."""
    return np.asarray(jnp.asarray(a).astype(jnp.float32), np.float64)


def assert_products_close(actual, expected, magnitude, dtype, terms: int) -> None:
    """A sum of ``terms`` products whose absolute values sum to
    ``magnitude``: float32 accumulation (scaled by the terms) and the
    result's rounding to ``dtype`` (the host provider's GEMMs and MoE sums)."""
    actual, expected = f64(actual), np.asarray(expected, np.float64)
    bound = (tolerance(dtype) * np.abs(expected)
             + 4 * np.finfo(np.float32).eps * np.sqrt(max(terms, 1)) * magnitude + 1e-30)
    assert actual.shape == expected.shape
    assert np.all(np.abs(actual - expected) <= bound), np.max(np.abs(actual - expected) - bound)


def assert_close(actual, expected, dtype, scale: float = 1.0) -> None:
    """Compares with the dtype's tolerance; NaN and inf must match exactly."""
    tol = tolerance(dtype) * scale
    actual = f64(actual)
    expected = np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol, equal_nan=True)


#: The test files of every operator (they iterate the operator lists and the
#: shared table) and of the build, layout and documentation: ``pytest -m
#: operators`` runs them, the check of docs/adding-an-operator.md.
OPERATOR_TESTS = {
    "test_adding_an_operator.py", "test_build.py", "test_docs.py", "test_errors.py",
    "test_forward_ops.py", "test_host_provider_abi.py", "test_layout.py", "test_memory.py",
    "test_npu_runtime.py", "test_ops.py", "test_platforms.py", "test_programs.py",
    "test_provider_fuzz.py", "test_sharding.py", "test_sharding_matrix.py",
    "test_training_dtypes.py", "test_transformations.py", "test_vmap.py",
}


def pytest_configure(config):
    config.addinivalue_line("markers", "operators: a test of every operator, or of the build, "
                                       "layout and docs (docs/adding-an-operator.md's check)")
    config.addinivalue_line("markers", "long_run: a command's whole run (training, bench), tens "
                                       "of seconds each: run with --long-runs")


def pytest_collection_modifyitems(config, items):
    long_runs = config.getoption("--long-runs")
    skip = pytest.mark.skip(reason="a long run: pytest --long-runs runs it")
    for item in items:
        if item.path.name in OPERATOR_TESTS:
            item.add_marker(pytest.mark.operators)
        if "long_run" in item.keywords and not long_runs:
            item.add_marker(skip)


def pytest_addoption(parser):
    parser.addoption("--sharding-matrix", choices=("fast", "full"), default="fast",
                     help="tests/test_sharding_matrix.py: its named fast subset (the "
                          "default) or the whole matrix")
    parser.addoption("--long-runs", action="store_true",
                     help="also run the tests marked long_run: the commands' whole runs "
                          "(CI runs them in a step of their own)")


#: Environment variable overriding every test's seed (to replay or vary runs).
SEED_ENV = "JAX_ACLNN_TEST_SEED"


def seed_of(nodeid: str) -> int:
    """The seed of a test: ``$JAX_ACLNN_TEST_SEED`` if set, else fixed by the
    test's id (the same every run, different between tests)."""
    override = os.environ.get(SEED_ENV)
    return int(override) if override else zlib.crc32(nodeid.encode())


@pytest.fixture
def rng(request) -> np.random.Generator:
    """Random inputs from the test's own fixed seed (:func:`seed_of`),
    printed on failure with the variable that replays it."""
    seed = seed_of(request.node.nodeid)
    request.node.user_properties.append(("seed", seed))
    print(f"seed={seed} (replay: {SEED_ENV}={seed})")
    return np.random.default_rng(seed)


def free_compiled_programs() -> None:
    """Frees every compiled program (and so its aclnn executors)."""
    jax.clear_caches()
    gc.collect()


#: The programs (tests/cases.py's names) whose sharded call all-reduces over
#: the batch (sums per channel, a "mean"). jax 0.7 and 0.8 lower that
#: all-reduce of a custom_partitioning rule under an explicit mesh to code
#: XLA rejects ("Unsupported reduction computation", or on jax 0.7.2 an
#: untyped "Sharding" custom call left inside the partitioned body, or a
#: crash of the process); jax 0.9 and later do not.
ALL_REDUCING = {"batch_norm", "batch_norm_reduce_backward", "smooth_l1_loss_mean"}
BEFORE_JAX_09 = JAX_RELEASE < (0, 9)


def skip_all_reduce_under_an_explicit_mesh_before_jax09(name: str) -> None:
    """Skips, saying why, an all-reducing program on an explicit mesh where
    JAX cannot compile it (see :data:`ALL_REDUCING`)."""
    if BEFORE_JAX_09 and name in ALL_REDUCING:
        pytest.skip(f"jax {jax.__version__} (before 0.9): the all-reduce of a "
                    "custom_partitioning rule under an explicit mesh does not compile")
