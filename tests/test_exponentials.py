"""The host kernels' exponentials (csrc/host/pointwise_kernel.h) against
float64 NumPy, compiled with the kernels' own flags by tests/exp_driver.cc:
ExpF (cross entropy, attention's softmax, SwishBackward, float32 SwiGLU)
within Cephes' accuracy, about one ulp, and ExpForHalf (SwiGLU's
half-precision outputs) within its fitted relative error. Both through the
vector type and one float at a time."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).parent
ROOT = TESTS.parent

#: CMakeLists.txt's kernel flags; "" is the baseline target (x86-64: SSE2,
#: no FMA), -march=native the best target this CPU runs.
KERNEL_FLAGS = ["-std=gnu++17", "-O3", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math"]


@pytest.fixture(scope="module", params=["", "-march=native"], ids=["baseline", "native"])
def driver(request, tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("exp") / "exp_driver"
    out = subprocess.run(["c++", *KERNEL_FLAGS, *filter(None, [request.param]),
                          "-I", str(ROOT / "csrc"), "-DJAX_ACLNN_KERNEL_TARGET=native",
                          str(TESTS / "exp_driver.cc"), "-o", str(exe)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    return exe


def run(driver: Path, function: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``function`` of float32 ``x``, through the vector type and per float."""
    out = subprocess.run([str(driver), function], input=x.tobytes(), capture_output=True,
                         check=True).stdout
    y = np.frombuffer(out, np.float32).astype(np.float64)
    return y[:x.size], y[x.size:]


def arguments(rng) -> np.ndarray:
    """Uniform over exp's normal, finite results (the kernels clamp beyond),
    and densely around 0, where the reduced argument is the input itself."""
    return np.concatenate([rng.uniform(-87.3, 88.0, 1 << 20),
                           rng.uniform(-1.0, 1.0, 1 << 18)]).astype(np.float32)


def test_expf_is_within_cephes_accuracy(rng, driver):
    """At most 1.05 ulp from exp and 11% of results off float64's rounding
    (measured: 1.01-1.03 ulp and 9.4-9.8%). Adding 1 to r before the
    polynomial's last term (one rounding more) makes it 1.25 ulp and 25%:
    this fails with that."""
    x = arguments(rng)
    expected = np.exp(x.astype(np.float64))
    ulp = np.spacing(expected.astype(np.float32)).astype(np.float64)
    for got in run(driver, "ExpF", x):
        assert np.max(np.abs(got - expected) / ulp) <= 1.05, np.max(np.abs(got - expected) / ulp)
        misrounded = np.mean(got != expected.astype(np.float32))
        assert misrounded <= 0.11, misrounded


def test_exp_for_half_is_within_its_fitted_error(rng, driver):
    """A relative error of at most 5.4e-6 (the minimax fit's) plus float32's
    rounding of its last operations."""
    x = arguments(rng)
    expected = np.exp(x.astype(np.float64))
    for got in run(driver, "ExpForHalf", x):
        error = np.max(np.abs(got / expected - 1))
        assert error <= 5.4e-6 + 2 * np.finfo(np.float32).eps, error
