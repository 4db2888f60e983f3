"""The host provider's float16 / bfloat16 conversions, exhaustively: every
16-bit pattern is read exactly, and float32 results are rounded to nearest
even as NumPy and ml_dtypes (JAX's bfloat16) round them (overflow to inf, subnormals, NaN)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jax_aclnn as aclnn

HALF_TYPES = {"float16": np.float16, "bfloat16": jnp.bfloat16}  # ml_dtypes' bfloat16


@pytest.mark.parametrize("name", sorted(HALF_TYPES))
def test_every_bit_pattern_passes_through_unchanged(name):
    dtype = HALF_TYPES[name]
    g = np.arange(1 << 16, dtype=np.uint16).view(dtype)
    x = np.ones(g.shape, dtype)  # |x| > lambd = 0: grad_input is grad_output
    out = np.asarray(aclnn.hardshrink_backward(jnp.asarray(g), jnp.asarray(x), lambd=0.0))
    nan = np.isnan(g.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(out.astype(np.float32)), nan)
    np.testing.assert_array_equal(out.view(np.uint16)[~nan], g.view(np.uint16)[~nan])


@pytest.mark.parametrize("name", sorted(HALF_TYPES))
def test_results_round_to_nearest_even(rng, name):
    dtype = HALF_TYPES[name]
    n = 1 << 16
    x = rng.uniform(0.001, 0.999, n).astype(dtype)
    # magnitudes from far below the smallest subnormal to beyond the largest finite
    with np.errstate(over="ignore"):  # beyond float16's range: inf, as intended
        dy = (rng.choice([-1.0, 1.0], n) * 2.0 ** rng.uniform(-30, 17, n)).astype(dtype)
    dy[:4] = [np.inf, -np.inf, np.nan, 0.0]
    xf, dyf = x.astype(np.float32), dy.astype(np.float32)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        expected = (dyf / (xf * (np.float32(1.0) - xf))).astype(dtype)  # the kernel's float32 formula
    out = np.asarray(aclnn.logit_grad(jnp.asarray(x), jnp.asarray(dy)))
    nan = np.isnan(expected.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(out.astype(np.float32)), nan)
    np.testing.assert_array_equal(out.view(np.uint16)[~nan], expected.view(np.uint16)[~nan])


@pytest.mark.parametrize("tail", range(8))
def test_float16_ties_subnormals_and_vector_tails(rng, tail):
    """float32 results exactly halfway between two float16 values round to
    the even one, also among subnormals, beyond the largest finite value and
    in the last elements that do not fill a vector (issue 22: the CPU's
    conversion instructions take whole vectors, formulas the rest)."""
    n = 4096 + tail
    f16 = np.float16
    x = rng.uniform(0.5, 1.0, n).astype(f16)
    y = rng.uniform(0.0, 2.0 ** -6, n).astype(f16)
    ties = rng.random(n) < 0.25  # d = x - 2^-12: halfway between two float16 neighbours
    y[ties] = f16(2.0 ** -12)
    # |g| from float16 subnormal products to beyond float16's range (inf)
    with np.errstate(over="ignore"):
        g = (rng.choice([-1.0, 1.0], n) * 2.0 ** rng.integers(-26, 17, n)).astype(f16)
    g[ties] = f16(1.0)
    g[-1] = f16(1.0)  # the last element (a tail when tail > 0) a tie as well
    x[-1], y[-1] = f16(1.0 - 2.0 ** -11), f16(2.0 ** -12)
    x[:3] = [np.nan, np.inf, -np.inf]
    out = np.asarray(aclnn.smooth_l1_loss_backward(jnp.asarray(g), jnp.asarray(x), jnp.asarray(y),
                                                   reduction="none", beta=1.0))
    d = x.astype(np.float32) - y.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        dl = np.where(np.abs(d) < 1, d, np.sign(d))  # beta = 1; NaN stays NaN
        expected = (g.astype(np.float32) * np.float32(1.0) * dl.astype(np.float32)).astype(f16)
    nan = np.isnan(expected.astype(np.float32))
    assert nan[0] and not nan[1:].any()
    np.testing.assert_array_equal(np.isnan(out.astype(np.float32)), nan)
    np.testing.assert_array_equal(out.view(np.uint16)[~nan], expected.view(np.uint16)[~nan])
