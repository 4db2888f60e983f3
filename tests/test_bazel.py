"""The Bazel build (WORKSPACE, BUILD, bazel/) builds a working extension:
`bazel build //...`, then a copy of the package holding Bazel's
_aclnn_ffi and libaclnn_host.so runs an operator in a fresh process, checked
against float64 NumPy. Skipped where bazel is not installed (.ci/bazel
installs it and runs this file)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_close

ROOT = Path(__file__).resolve().parents[1]
BAZEL = shutil.which("bazel")
pytestmark = [
    pytest.mark.skipif(BAZEL is None, reason="bazel is not installed (.ci/bazel installs it)"),
    pytest.mark.skipif(importlib.util.find_spec("nanobind") is None,
                       reason="the build's Python lacks nanobind (.ci/bazel installs it)"),
    pytest.mark.skipif(importlib.util.find_spec("cmeel") is None,
                       reason="the build's Python lacks cmeel-eigen (.ci/bazel installs it)"),
]

# Runs in the package copy's parent directory: the copy is the jax_aclnn
# imported. Reads x and g from inputs.npz, writes the results beside it.
SCRIPT = """
import json
import jax.numpy as jnp, numpy as np
import jax_aclnn
from jax_aclnn import _loading

inputs = np.load("inputs.npz")
results = {dtype: np.asarray(jax_aclnn.swish_backward(
    jnp.asarray(inputs["g"], dtype), jnp.asarray(inputs["x"], dtype), beta=float(inputs["beta"])
).astype(jnp.float32)) for dtype in ("float32", "float16")}
np.savez("results.npz", **results)
print(json.dumps({
    "extension": _loading._aclnn_ffi.__file__,
    "host_provider": str(_loading.HOST_PROVIDER_LIBRARY),
    "build_info": _loading._aclnn_ffi.build_info(),
    "half_conversions": jax_aclnn.build_info()["host_half_conversions"],
    "stats": jax_aclnn.runtime_stats(),
}))
"""


def bazel(*args: str) -> str:
    out = subprocess.run([BAZEL, *args], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHON_BIN_PATH": sys.executable})
    assert out.returncode == 0, f"bazel {' '.join(args)} failed:\n{out.stderr[-8000:]}"
    return out.stdout.strip()


@pytest.fixture(scope="module")
def bazel_package(tmp_path_factory) -> Iterator[Path]:
    """jax_aclnn's Python files and, beside them, the libraries that BUILD's
    py_library ships (its data, at their paths in the package). Leaves no
    Bazel server running."""
    try:
        bazel("build", "//...")
        built = Path(bazel("info", "bazel-bin")) / "jax_aclnn"
        package = tmp_path_factory.mktemp("bazel") / "jax_aclnn"
        shutil.copytree(ROOT / "jax_aclnn", package, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        for library in ("_aclnn_ffi" + sysconfig.get_config_var("EXT_SUFFIX"), "libaclnn_host.so"):
            shutil.copy(built / library, package)
        yield package
    finally:
        bazel("shutdown")


def test_bazel_built_extension_runs_an_operator(bazel_package):
    from jax_aclnn import _loading  # this process's own build (CMake)

    rng = np.random.default_rng(14)
    x = rng.uniform(-6, 6, 4099).astype(np.float16).astype(np.float64)
    g = rng.standard_normal(x.size).astype(np.float16).astype(np.float64)
    beta = 1.5
    np.savez(bazel_package.parent / "inputs.npz", x=x, g=g, beta=beta)
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=bazel_package.parent,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-8000:]
    report = json.loads(out.stdout.splitlines()[-1])

    assert Path(report["extension"]).parent == bazel_package
    assert Path(report["host_provider"]).parent == bazel_package
    assert report["stats"]["provider"] == "host"
    assert report["stats"]["calls"]["aclnnSwishBackward"]["execute"] == 2
    # Bazel's native build converts float16 with the CPU's instructions
    # wherever CMake's dispatched kernels do.
    import jax_aclnn

    cmake_conversions = jax_aclnn.build_info()["host_half_conversions"]
    if cmake_conversions != "portable formulas":
        assert report["half_conversions"] == cmake_conversions

    s = 1 / (1 + np.exp(-beta * x))
    expected = g * (s + beta * x * s * (1 - s))
    results = np.load(bazel_package.parent / "results.npz")
    for dtype in ("float32", "float16"):
        assert_close(results[dtype], expected, dtype)
