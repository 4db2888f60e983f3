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
