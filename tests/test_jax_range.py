"""The supported JAX range: declared once in pyproject.toml, checked at import."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from jax_aclnn import _compat

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())


def test_pyproject_declares_the_range_that_import_checks():
    spec = _compat.version_specifier()
    deps = PYPROJECT["project"]["dependencies"]
    assert f"jax{spec}" in deps
    assert f"jaxlib{spec}" in deps


def test_the_build_uses_the_floors_ffi_headers():
    floor = _compat.SUPPORTED_JAX[0]
    requires = PYPROJECT["build-system"]["requires"]
    assert f"jax=={floor}" in requires and f"jaxlib=={floor}" in requires


@pytest.mark.parametrize("jax_version, jaxlib_version, bad", [
    ("0.7.1", "0.7.1", "jax 0.7.1"),
    ("0.6.2", "0.7.2", "jax 0.6.2"),
    ("0.7.2", "0.7.1", "jaxlib 0.7.1"),
    ("0.8.0", "0.8.0", "jax 0.8.0"),  # excluded inside the range
    ("0.10.2", "0.8.0", "jaxlib 0.8.0"),
    ("0.8.0.dev20250801", "0.8.0.dev20250801", "jax 0.8.0.dev20250801"),
    ("0.11.0", "0.11.0", "jax 0.11.0"),
])
def test_a_jax_outside_the_range_is_an_import_error_naming_both(jax_version, jaxlib_version, bad):
    spec = _compat.version_specifier()
    with pytest.raises(ImportError, match=re.escape(f" {spec}, but {bad} is installed")):
        _compat.check_jax_version(jax_version, jaxlib_version)


@pytest.mark.parametrize("version", ["0.7.2", "0.8.1", "0.9.2", "0.10.2", "0.10.3.dev20260101"])
def test_the_supported_releases_pass(version):
    _compat.check_jax_version(version, version)


def test_the_installed_jaxlibs_ffi_api_version_is_the_one_compat_knows():
    """_compat's table of the FFI API version of each jaxlib release, against
    the installed jaxlib's own headers (.ci/jax-range runs this at 0.7.2,
    0.8.1 and 0.9.2, .ci/run at the newest)."""
    import jax
    import jaxlib.version

    c_api = (Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h").read_text()
    major, minor = (int(re.search(rf"#define XLA_FFI_API_{part} (\d+)", c_api).group(1))
                    for part in ("MAJOR", "MINOR"))
    assert (major, minor) == (0, _compat.ffi_api_minor(jaxlib.version.__version__))


# Regression (issue 28): a build without pip's build isolation, against jaxlib
# 0.10.2's FFI API 0.3 headers, claimed to run on FFI API 0.1 to 0.3, and the
# test runtime of FFI API 0.1 found its handlers writing past that version's
# metadata. The FFI API version (0.minor) of each jaxlib release, from the
# releases' headers: 0.7.2 -> 1, 0.8.1 and 0.9.0 -> 2, 0.9.1 on -> 3.
@pytest.mark.parametrize("ffi_api, jaxlib_version, runs", [
    ((0, 1), "0.7.2", True), ((0, 1), "0.9.0", True), ((0, 1), "0.10.2", True),
    ((0, 2), "0.7.2", False), ((0, 2), "0.8.1", True), ((0, 2), "0.9.0", True),
    ((0, 3), "0.7.2", False), ((0, 3), "0.8.1", False), ((0, 3), "0.9.0", False),
    ((0, 3), "0.9.1", True), ((0, 3), "0.10.2", True),
    ((0, 4), "0.10.2", False), ((1, 0), "0.10.2", False),
])
def test_import_refuses_a_jaxlib_older_than_the_builds_ffi_api(ffi_api, jaxlib_version, runs):
    if runs:
        _compat.check_ffi_api(ffi_api, jaxlib_version)
        return
    with pytest.raises(ImportError) as e:
        _compat.check_ffi_api(ffi_api, jaxlib_version)
    message = str(e.value)
    assert "\n" not in message
    built = f"{ffi_api[0]}.{ffi_api[1]}"
    assert message.startswith(f"jax_aclnn was built against XLA FFI API {built} headers, which "
                              f"jaxlib {jaxlib_version} (FFI API 0.")
    fix = {(0, 2): "install jaxlib>=0.8.0,!=0.8.0,<0.11, or rebuild",
           (0, 3): "install jaxlib>=0.9.1,<0.11, or rebuild"}.get(ffi_api, "rebuild")
    assert f"cannot run: {fix} jax_aclnn with `pip install .`, whose isolated build uses jaxlib 0.7.2's" in message


def test_build_info_states_the_jaxlib_range_of_the_build():
    """build_info() and `info` name the jaxlib releases the handlers run on:
    all supported ones for pip's isolated build (FFI API 0.1 headers), those
    of the headers' FFI API version on for a build without isolation."""
    import jax_aclnn
    from jax_aclnn._loading import _aclnn_ffi

    major, minor = _aclnn_ffi.ffi_api_version()
    info = jax_aclnn.build_info()
    assert info["ffi_api"] == f"{major}.{minor}"
    assert info["jaxlib"] == {1: ">=0.7.2,!=0.8.0,<0.11", 2: ">=0.8.0,!=0.8.0,<0.11",
                              3: ">=0.9.1,<0.11"}[minor]
    reuse = f"0.{minor} to 0.3" if minor < 3 else "0.3"
    assert f"XLA FFI API 0.{minor} headers (runs on FFI API 0.{minor} on; executor reuse on " \
           f"FFI API {reuse})" in info["build"]


def test_synchronized_batch_norm_under_vmap_inside_shard_map():
    """jax 0.8's vmap of a psum over shard_map axes raised TypeError
    ('axis_index_groups'); _compat mends it (the train job's ensemble)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import PartitionSpec as P

    import jax_aclnn as aclnn

    x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 3)), jnp.float32)
    scales = jnp.asarray([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], jnp.float32)

    def member(scale, x, axis_name):
        h, _, _ = aclnn.batch_norm(x * scale, channel_axis=-1, axis_name=axis_name)
        loss = (h * h * jnp.arange(1.0, 4.0)).sum()
        return loss if axis_name is None else jax.lax.psum(loss, axis_name)

    mesh = jax.make_mesh((1,), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))
    xs = jax.device_put(x, jax.NamedSharding(mesh, P("batch")))
    sharded = jax.shard_map(lambda s, x: jax.vmap(lambda si: member(si, x, "batch"))(s),
                            mesh=mesh, in_specs=(P(), P("batch")), out_specs=P())
    got = jax.jit(jax.grad(lambda s: sharded(s, xs).sum()))(scales)
    want = jax.grad(lambda s: jax.vmap(lambda si: member(si, x, None))(s).sum())(scales)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_importing_jax_aclnn_leaves_jax_s_psum_batching_rule_alone():
    """The jax 0.8 repair is installed by batch_norm(axis_name=...) when
    needed, not by the import (which patches no JAX rule)."""
    import subprocess
    import sys

    code = ("from jax._src.interpreters import batching; from jax._src.lax import parallel; "
            "rule = batching.fancy_primitive_batchers[parallel.psum_invariant_p]; "
            "import jax_aclnn; "
            "assert batching.fancy_primitive_batchers[parallel.psum_invariant_p] is rule")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
