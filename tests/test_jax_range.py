"""The supported JAX range: declared once in pyproject.toml, checked at import."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from jax_aclnn import _compat

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())


def test_pyproject_declares_the_range_that_import_checks():
    floor, ceiling = _compat.SUPPORTED_JAX
    deps = PYPROJECT["project"]["dependencies"]
    assert f"jax>={floor},<{ceiling}" in deps
    assert f"jaxlib>={floor},<{ceiling}" in deps


def test_the_build_uses_the_floors_ffi_headers():
    floor = _compat.SUPPORTED_JAX[0]
    requires = PYPROJECT["build-system"]["requires"]
    assert f"jax=={floor}" in requires and f"jaxlib=={floor}" in requires


@pytest.mark.parametrize("jax_version, jaxlib_version, bad", [
    ("0.7.2", "0.7.2", "jax 0.7.2"),
    ("0.8.0", "0.8.0", "jax 0.8.0"),
    ("0.10.2", "0.8.0", "jaxlib 0.8.0"),
    ("0.11.0", "0.11.0", "jax 0.11.0"),
])
def test_a_jax_outside_the_range_is_an_import_error_naming_both(jax_version, jaxlib_version, bad):
    floor, ceiling = _compat.SUPPORTED_JAX
    with pytest.raises(ImportError, match=f">={floor},<{ceiling}, but {bad} is installed"):
        _compat.check_jax_version(jax_version, jaxlib_version)


@pytest.mark.parametrize("version", ["0.8.1", "0.9.2", "0.10.2", "0.10.3.dev20260101"])
def test_the_supported_releases_pass(version):
    _compat.check_jax_version(version, version)
