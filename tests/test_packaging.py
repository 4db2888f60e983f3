"""The package as users get it from PyPI: license, metadata, the typing
marker and the compiled modules' stubs (nanobind's stubgen), checked by
``mypy --strict`` on a user's script and by ``twine check`` on the sdist
(.ci/jax-range runs it on a wheel).

The stubs are committed (jax_aclnn/_aclnn_ffi.pyi, and for the test-only
runtime csrc/testing/_ffi_testing.pyi, installed only with it), not made at
build time: a build that cannot import what it builds (a cross-compiled
aarch64 wheel, a sanitizer build) would have none. This test regenerates them
from the installed modules and compares."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import jax_aclnn
from jax_aclnn import _loading

ROOT = Path(__file__).resolve().parents[1]
INSTALLED = Path(_loading._aclnn_ffi.__file__).parent  # the installed package
# compiled module -> its committed stub
STUBS = {"_aclnn_ffi": ROOT / "jax_aclnn" / "_aclnn_ffi.pyi",
         "_ffi_testing": ROOT / "csrc" / "testing" / "_ffi_testing.pyi"}


def _built(module: str) -> bool:
    return importlib.util.find_spec(f"jax_aclnn.{module}") is not None


@pytest.mark.parametrize("module", sorted(STUBS))
def test_committed_stubs_are_stubgen_output_and_installed(module, tmp_path):
    if not _built(module):
        pytest.skip(f"jax_aclnn.{module} is not built")
    out = tmp_path / f"{module}.pyi"
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", f"jax_aclnn.{module}",
                    "-o", str(out)], check=True, cwd=tmp_path)
    assert out.read_text() == STUBS[module].read_text(), (
        f"{STUBS[module].relative_to(ROOT)} is stale: regenerate it with "
        f"`python -m nanobind.stubgen -m jax_aclnn.{module} -o {STUBS[module].relative_to(ROOT)}`")
    assert (INSTALLED / f"{module}.pyi").read_text() == out.read_text()


def test_installed_metadata_license_and_typing_marker():
    dist = importlib.metadata.distribution("jax_aclnn")
    meta = dist.metadata
    assert meta["Version"] == jax_aclnn.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    license_text = next(f for f in dist.files if f.name == "LICENSE").read_text()
    assert license_text == (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers and "Operating System :: POSIX :: Linux" in classifiers
    assert meta["Keywords"] and meta["Description-Content-Type"] == "text/markdown"
    assert (INSTALLED / "py.typed").exists()


def test_mypy_strict_finds_the_types_of_a_users_script(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text((ROOT / "tests" / "typed_user_script.py").read_text())
    env = {**os.environ, "MYPY_CACHE_DIR": str(tmp_path / ".mypy_cache")}
    # Outside the source tree: mypy sees the installed package, as a user's.
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-color-output",
                             script.name], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    # The compiled module's signatures come from its stub (mypy before 2.0
    # spells builtins.bool).
    b = r"(builtins\.)?"
    for revealed in (rf"def \(enabled: {b}bool\)", rf"def \(root: {b}str \| None =\) -> {b}str"):
        assert re.search(f'Revealed type is "{revealed}"', result.stdout), result.stdout
    # And the script runs.
    run = subprocess.run([sys.executable, script.name], cwd=tmp_path, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr


def source_checkout(tmp_path: Path, edit=lambda files: None) -> Path:
    """A copy of this checkout's Python tree (jax_aclnn/, no compiled files)
    in ``tmp_path/checkout``, changed by ``edit({relative path: Path})``: run
    from there, it imports the installed build's compiled files (_loading)."""
    if INSTALLED == ROOT / "jax_aclnn":
        pytest.skip("the compiled modules are built in place, not installed")
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "jax_aclnn", checkout / "jax_aclnn",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.pyi"))
    edit({str(p.relative_to(checkout)): p for p in checkout.rglob("*.py")})
    return checkout


def import_from(checkout: Path) -> subprocess.CompletedProcess:
    code = "import jax_aclnn, jax_aclnn._loading as l; print(jax_aclnn.__file__, l.PACKAGE_DIR)"
    return subprocess.run([sys.executable, "-c", code], cwd=checkout, capture_output=True,
                          text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})


def substitute(path: Path, pattern: str, replacement: str) -> None:
    text, n = re.subn(pattern, replacement, path.read_text(), flags=re.M)
    assert n, f"{pattern!r} not in {path}"
    path.write_text(text)


def test_a_source_checkout_runs_on_the_installed_build_of_its_sources(tmp_path):
    checkout = source_checkout(tmp_path)
    out = import_from(checkout)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(checkout / "jax_aclnn" / "__init__.py"), str(INSTALLED)]


# Regression (issue 28): a source checkout's Python imported the installed
# build's compiled files whatever sources they were built from (a
# five-operator tree ran on a six-operator extension). Now import refuses
# it, in one line naming the stale side and the fix.


def test_a_source_checkout_of_another_version_refuses_the_installed_build(tmp_path):
    checkout = source_checkout(tmp_path, lambda files: substitute(
        files["jax_aclnn/__init__.py"], r'^__version__ = "[^"]+"', '__version__ = "9.9.9"'))
    out = import_from(checkout)
    assert out.returncode == 1 and out.stderr.strip().splitlines()[-1] == (
        f"ImportError: jax_aclnn: the installed build in {INSTALLED} is stale for the source "
        f"checkout {checkout}, whose Python imports it (the extension is jax_aclnn "
        f"{jax_aclnn.__version__}'s, the Python 9.9.9's): run `pip install .` in {checkout}"), out.stderr


def test_a_source_checkout_with_other_operators_refuses_the_installed_build(tmp_path):
    def drop_logit(files):  # a four-operator Python tree: no logit_grad (logit)
        substitute(files["jax_aclnn/ops/__init__.py"], r"^from jax_aclnn\.ops\.logit_grad import .*\n", "")
        substitute(files["jax_aclnn/ops/__init__.py"], r'^ *"logit(_grad)?",\n', "")

    checkout = source_checkout(tmp_path, drop_logit)
    out = import_from(checkout)
    assert out.returncode == 1 and out.stderr.strip().splitlines()[-1] == (
        f"ImportError: jax_aclnn: the installed build in {INSTALLED} is stale for the source "
        f"checkout {checkout}, whose Python imports it (operators only in the extension: "
        f"logit_grad (aclnnLogitGrad); only in the Python: none): run `pip install .` in "
        f"{checkout}"), out.stderr


def test_twine_check_passes_on_the_sdist(tmp_path):
    from scikit_build_core.build import build_sdist

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        name = build_sdist(str(tmp_path))
    finally:
        os.chdir(cwd)
    sdist = tmp_path / name
    result = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(sdist)],
                            capture_output=True, text=True)
    assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout + result.stderr
    with tarfile.open(sdist) as tar:
        names = {Path(n).relative_to(Path(n).parts[0]).as_posix() for n in tar.getnames()
                 if len(Path(n).parts) > 1}
    assert {"LICENSE", "CHANGELOG.md", "jax_aclnn/py.typed", "jax_aclnn/_aclnn_ffi.pyi",
            "csrc/testing/_ffi_testing.pyi"} <= names
