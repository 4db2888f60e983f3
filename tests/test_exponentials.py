"""The host kernels' exponentials (csrc/host/pointwise_kernel.h) against
float64 NumPy, compiled with the kernels' own flags by tests/exp_driver.cc:
ExpF (cross entropy, attention's softmax, SwishBackward, float32 SwiGLU)
within Cephes' accuracy, about one ulp, and ExpForHalf (SwiGLU's
half-precision outputs) within its fitted relative error. Both through the
vector type and one float at a time, for each kernel target this CPU runs,
and on an x86-64 host with Debian's aarch64 cross compiler and qemu-user
(.ci/aarch64 installs them and runs this file) for aarch64's two: NEON
(QEMU_CPU cortex-a72) and SVE (qemu's "max")."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).parent
ROOT = TESTS.parent

#: CMakeLists.txt's kernel flags.
KERNEL_FLAGS = ["-std=gnu++17", "-O3", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math"]

#: The kernels' CPU targets (CMakeLists.txt, dispatch.cc), each with the
#: CPU features it needs (as /proc/cpuinfo names them): "" is the baseline
#: (x86-64: SSE2, no FMA); off x86-64, the baseline and this CPU's own.
if platform.machine() == "x86_64":
    TARGETS = {"baseline": ("", set()),
               "x86-64-v3": ("-march=x86-64-v3", {"avx2", "fma", "f16c"}),
               "x86-64-v4": ("-march=x86-64-v4", {"avx512f", "avx512bw", "avx512dq", "avx512vl"})}
else:
    TARGETS = {"baseline": ("", set()), "native": ("-march=native", set())}

#: aarch64's kernel targets, cross-compiled (static) and run under
#: qemu-user on an x86-64 host: flags and qemu's CPU.
AARCH64_TARGETS = {"aarch64 armv8-a": ("", "cortex-a72"),
                   "aarch64 armv8.2-a+sve": ("-march=armv8.2-a+sve", "max")}
CROSS_TOOLS = ("aarch64-linux-gnu-g++", "qemu-aarch64-static")


def cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return {f for line in text.splitlines() if line.startswith("flags") for f in line.split()}


def compile_driver(compiler: str, flags: list[str], exe: Path) -> None:
    out = subprocess.run([compiler, *KERNEL_FLAGS, *flags, "-I", str(ROOT / "csrc"),
                          "-DJAX_ACLNN_KERNEL_TARGET=native", str(TESTS / "exp_driver.cc"),
                          "-o", str(exe)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]


@pytest.fixture(scope="module", params=[*TARGETS, *AARCH64_TARGETS])
def driver(request, tmp_path_factory) -> list[str]:
    """The command running the driver built for one kernel target."""
    exe = tmp_path_factory.mktemp("exp") / "exp_driver"
    if request.param in AARCH64_TARGETS:
        if platform.machine() != "x86_64" or not all(map(shutil.which, CROSS_TOOLS)):
            pytest.skip(f"cross-testing aarch64 needs an x86-64 host with {', '.join(CROSS_TOOLS)}")
        flag, cpu = AARCH64_TARGETS[request.param]
        compile_driver(CROSS_TOOLS[0], [*filter(None, [flag]), "-static"], exe)
        return [CROSS_TOOLS[1], "-cpu", cpu, str(exe)]
    flag, needs = TARGETS[request.param]
    if missing := needs - cpu_flags():
        pytest.skip(f"this CPU lacks {sorted(missing)}")
    compile_driver("c++", list(filter(None, [flag])), exe)
    return [str(exe)]


def run(driver: list[str], function: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``function`` of float32 ``x``, through the vector type and per float."""
    out = subprocess.run([*driver, function], input=x.tobytes(), capture_output=True,
                         check=True).stdout
    y = np.frombuffer(out, np.float32).astype(np.float64)
    return y[:x.size], y[x.size:]


def largest_with_finite_exp() -> np.float32:
    """The largest float32 whose exp is finite: float64's log(max) rounded
    to float32, or the float below it where that rounded up."""
    top = np.float32(np.log(np.float64(np.finfo(np.float32).max)))
    return top if np.exp(np.float64(top)) <= np.finfo(np.float32).max else np.nextafter(
        top, np.float32(0))


def arguments(rng) -> np.ndarray:
    """Uniform over the range where the kernels' exponentials are exp
    (normal results from their floor, -126 ln2 rounded up, to the largest
    finite float: scaled by a float 2^n, they were inf from 88.376, where
    n = 128, and sigmoid 0, not 1e-38), densely around 0, where the reduced argument
    is the input itself, and at both ends."""
    floor = np.float32(-87.33654022)
    top = largest_with_finite_exp()
    ends = np.concatenate([floor - np.arange(256, dtype=np.float32) * np.spacing(floor),
                           top - np.arange(256, dtype=np.float32) * np.spacing(top)])
    return np.concatenate([rng.uniform(floor, top, 1 << 20), rng.uniform(-1.0, 1.0, 1 << 18),
                           ends]).astype(np.float32)


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


@pytest.mark.parametrize("function", ["ExpF", "ExpForHalf"])
def test_outside_the_range_exp_is_inf_above_and_the_smallest_normal_below(driver, function):
    """+inf from the first float whose exp overflows (exp(200) was NaN in a
    draft that scaled by exponent bits alone), and the smallest normal
    float, never a subnormal, from the floor down (NaN there too: callers
    keep NaN themselves)."""
    top = largest_with_finite_exp()
    above = np.array([np.nextafter(top, np.float32(np.inf)), 89.0, 200.0, 1e30, np.inf],
                     np.float32)
    below = np.array([-87.33654022, -87.3366, -88.0, -200.0, -np.inf, np.nan], np.float32)
    tiny = float(np.finfo(np.float32).tiny)
    for got in run(driver, function, np.concatenate([above, below])):
        assert np.all(got[:above.size] == np.inf), got
        assert np.all((got[above.size:] >= tiny) & (got[above.size:] <= tiny * (1 + 1e-5))), got
