"""The catalogue on meshes (issue 44): each function of jax_aclnn.nn with
each dimension of its operands sharded alone and in pairs, on explicit
meshes (jax 0.10's default ``jax.make_mesh``) and auto ones, with sizes the
mesh divides and sizes it does not; its value and gradients compared with
the same math in jax.numpy/jax.nn under the same sharding. A layout on
which JAX's own function fails is skipped, saying so: the catalogue must
work wherever JAX's does.

The README's test command runs a named subset (:data:`FAST`: the
tensor-parallel, FSDP and sequence-parallel layouts that failed);
``pytest tests/test_nn_meshes.py --sharding-matrix=full`` runs all of it.
In this process the references run (no provider of these operators on the
CPU); tests/test_nn_standin.py runs a few layouts through the test
provider's aclnn operators.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import NUM_DEVICES, enable_x64
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_aclnn import nn

pytestmark = pytest.mark.skipif(jax.device_count() < NUM_DEVICES, reason="needs 8 host devices")

#: The mesh: a first axis of 4 devices (a single sharded dimension takes
#: it), a second of 2 (the second of a pair).
MESH_SHAPE, AXES = (4, 2), ("x", "y")
KINDS = {"explicit": AxisType.Explicit, "auto": AxisType.Auto}


@dataclass(frozen=True)
class Function:
    """A function of the catalogue and the same math in jax.numpy/jax.nn.

    ``operands`` names each operand's dimensions (``"1"``: a size-1
    dimension, never sharded; a name shared by operands is sharded in all
    of them); ``uneven`` gives each name a size the first mesh axis does not
    divide (every size is 8 otherwise); ``make`` builds the operands from
    the sizes; ``argnums`` are the operands differentiated."""

    ours: Callable
    theirs: Callable
    operands: tuple[tuple[str, ...], ...]
    uneven: dict[str, int]
    make: Callable
    argnums: tuple[int, ...]
    x64: bool = False

    @property
    def dims(self) -> list[str]:
        return sorted({d for o in self.operands for d in o if d != "1"})


def _normal(rng, *shape):
    return rng.normal(size=shape).astype(np.float32)


def _rms(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w


def _swiglu(x):
    a, b = jnp.split(x, 2, axis=-1)
    return jax.nn.silu(a) * b


def _rope(x, cos, sin):
    x1, x2 = jnp.split(x, 2, axis=-1)
    return x * cos + jnp.concatenate([-x2, x1], axis=-1) * sin


def _cross_entropy(logits, labels):
    # one-hot, not a gather: the math a layout with the classes sharded takes
    return -jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(labels, logits.shape[-1]), -1)


def _labels(rng, s):
    return rng.integers(0, s["c"], (s["b"], s["s"])).astype(np.int32)


def _group_sizes(s):
    """Sizes summing to fewer than m rows (the rest give zeros), one empty group."""
    sizes = np.zeros(s["g"], np.int64)
    sizes[: s["g"] - 1] = (s["m"] - 1) // (s["g"] - 1)
    return sizes


FUNCTIONS = {
    # h: x's normalized dimension; w: the weight's (sharded alone: FSDP)
    "rms_norm": Function(
        lambda x, w: nn.rms_norm(x, w), _rms, (("b", "s", "h"), ("w",)),
        {"b": 6, "s": 5, "h": 6, "w": 6},
        lambda rng, s: (_normal(rng, s["b"], s["s"], s["h"]), 1 + _normal(rng, s["w"])), (0, 1)),
    "add_rms_norm": Function(
        lambda a, b, w: nn.add_rms_norm(a, b, w), lambda a, b, w: (_rms(a + b, w), a + b),
        (("b", "s", "h"), ("b", "s", "h"), ("w",)), {"b": 6, "s": 5, "h": 6, "w": 6},
        lambda rng, s: (_normal(rng, s["b"], s["s"], s["h"]), _normal(rng, s["b"], s["s"], s["h"]),
                        1 + _normal(rng, s["w"])), (0, 1, 2)),
    "swiglu": Function(  # f: the split dimension (2 * its halves)
        nn.swiglu, _swiglu, (("b", "s", "f"),), {"b": 6, "s": 5, "f": 6},
        lambda rng, s: (_normal(rng, s["b"], s["s"], s["f"]),), (0,)),
    "rotary_embedding": Function(
        nn.rotary_embedding, _rope, (("b", "s", "n", "d"), ("1", "s", "1", "d"),
                                     ("1", "s", "1", "d")), {"b": 6, "s": 5, "n": 3, "d": 6},
        lambda rng, s: (_normal(rng, s["b"], s["s"], s["n"], s["d"]),
                        _normal(rng, 1, s["s"], 1, s["d"]), _normal(rng, 1, s["s"], 1, s["d"])),
        (0, 1, 2)),
    "softmax_cross_entropy_with_integer_labels": Function(
        nn.softmax_cross_entropy_with_integer_labels, _cross_entropy,
        (("b", "s", "c"), ("b", "s")), {"b": 6, "s": 5, "c": 6},
        lambda rng, s: (_normal(rng, s["b"], s["s"], s["c"]), _labels(rng, s)), (0,)),
    # under jax_enable_x64, where the aclnn operators run (CANN's group list is int64)
    "ragged_dot": Function(
        nn.ragged_dot, jax.lax.ragged_dot, (("m", "k"), ("g", "k", "n"), ("g",)),
        {"m": 10, "k": 6, "g": 3, "n": 6},
        lambda rng, s: (_normal(rng, s["m"], s["k"]), _normal(rng, s["g"], s["k"], s["n"]),
                        _group_sizes(s)), (0, 1), x64=True),
    # the query's t and n, the key/value's s and k (grouped: n = 2k heads)
    "dot_product_attention": Function(
        lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True),
        lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True),
        (("b", "t", "n", "h"), ("b", "s", "k", "h"), ("b", "s", "k", "h")),
        {"b": 6, "t": 5, "s": 5, "n": 6, "k": 3, "h": 6},
        lambda rng, s: (_normal(rng, s["b"], s["t"], s["n"], s["h"]),
                        _normal(rng, s["b"], s["s"], s["k"], s["h"]),
                        _normal(rng, s["b"], s["s"], s["k"], s["h"])), (0, 1, 2)),
}
#: Sizes fixed by another's: the norms' weight, x's normalized dimension;
#: grouped attention's query heads, twice the key's.
TIED = {"rms_norm": {"w": ("h", 1)}, "add_rms_norm": {"w": ("h", 1)},
        "dot_product_attention": {"n": ("k", 2)}}


@dataclass(frozen=True)
class Case:
    function: str
    sharded: tuple[tuple[str, str], ...]  # (dimension, mesh axis) pairs
    mesh: str
    size: str

    @property
    def id(self) -> str:
        return f"{self.function}:{self.mesh}:{'+'.join(map('@'.join, self.sharded))}:{self.size}"

    def sizes(self) -> dict[str, int]:
        """8 for every dimension, or the uneven sizes; on an explicit mesh
        the sharded dimensions stay divisible (an explicit type must be)."""
        f, tied = FUNCTIONS[self.function], TIED.get(self.function, {})
        sharded = {d for d, _ in self.sharded}
        sharded |= {tied[d][0] for d in sharded if d in tied}
        sizes = {d: 8 if self.size == "even" or (self.mesh == "explicit" and d in sharded)
                 else f.uneven[d] for d in f.dims}
        for d, (other, factor) in tied.items():
            sizes[d] = sizes[other] * factor
        return sizes

    def valid(self) -> bool:
        """No operand with one axis twice; explicit types divide their
        dimensions (a tied size may not)."""
        sizes, axes = self.sizes(), dict(self.sharded)
        return all(len(used) == len(set(used)) for used in (
            [axes[d] for d in dims if d in axes] for dims in FUNCTIONS[self.function].operands)
        ) and (self.mesh == "auto" or all(sizes[d] % dict(zip(AXES, MESH_SHAPE))[a] == 0
                                          for d, a in self.sharded))

    def specs(self) -> list[P]:
        axes = dict(self.sharded)
        return [P(*(axes.get(d) for d in dims)) for dims in FUNCTIONS[self.function].operands]


def cases() -> list[Case]:
    """Each dimension over the first axis, each pair over the two axes and,
    where no operand has both, over the first axis together."""
    out = []
    for name, f in FUNCTIONS.items():
        pairs = list(itertools.combinations(f.dims, 2))
        shardings = ([((d, "x"),) for d in f.dims] + [((a, "x"), (b, "y")) for a, b in pairs]
                     + [((a, "x"), (b, "x")) for a, b in pairs])
        for sharded, mesh, size in itertools.product(shardings, KINDS, ("even", "uneven")):
            out.append(Case(name, sharded, mesh, size))
    return [c for c in out if c.valid()]


#: The README's subset: the layouts of issue 44 on explicit meshes (tensor
#: parallel: SwiGLU's hidden dimension, RoPE's head size, the classes, the
#: heads; FSDP: the norm's weight; the sequence) and, uneven, on auto ones.
FAST = {
    "rms_norm:explicit:w@x:even", "add_rms_norm:explicit:h@x+w@x:uneven",
    "swiglu:explicit:f@x+s@y:even", "rotary_embedding:explicit:d@x:even",
    "softmax_cross_entropy_with_integer_labels:explicit:c@x:uneven",
    "ragged_dot:auto:k@x+n@y:uneven", "dot_product_attention:explicit:k@x+n@x:even",
    "rms_norm:explicit:s@x:uneven", "rms_norm:auto:b@x+s@y:uneven",
}


def pytest_generate_tests(metafunc):  # noqa: D103 (pytest hook, module-level)
    if "case" not in metafunc.fixturenames:
        return
    full = metafunc.config.getoption("--sharding-matrix") == "full"
    chosen = [c for c in cases() if full or c.id in FAST]
    metafunc.parametrize("case", chosen, ids=[c.id for c in chosen])


def value_and_grads(fn, case: Case, mesh, args):
    """``fn``'s results and the gradients of a scalar of them, jitted, the
    operands placed as ``case`` says (their types on an explicit mesh, a
    sharding constraint on an auto one)."""
    f = FUNCTIONS[case.function]

    def loss(*a):
        out = fn(*a)
        return sum(jnp.sum(jnp.sin(o.astype(jnp.float32))) for o in jax.tree.leaves(out)), out

    def run(*a):
        if case.mesh == "auto":
            a = [jax.lax.with_sharding_constraint(x, NamedSharding(mesh, s))
                 for x, s in zip(a, case.specs())]
        return jax.value_and_grad(loss, f.argnums, has_aux=True)(*a)

    return jax.jit(run)(*args)


def test_matrix(rng, case):
    f = FUNCTIONS[case.function]
    mesh = jax.make_mesh(MESH_SHAPE, AXES, axis_types=(KINDS[case.mesh],) * 2)
    with enable_x64(f.x64), jax.set_mesh(mesh):
        args = [jax.device_put(a, NamedSharding(mesh, s if case.mesh == "explicit" else P()))
                for a, s in zip(f.make(rng, case.sizes()), case.specs())]
        try:
            (_, want), want_grads = value_and_grads(f.theirs, case, mesh, args)
        except Exception as e:  # noqa: BLE001 (JAX's own error, whatever it is)
            pytest.skip(f"JAX's own function fails on this layout: {type(e).__name__}: "
                        f"{str(e).splitlines()[0][:200]}")
        (_, got), grads = value_and_grads(f.ours, case, mesh, args)
    for a, b in zip(jax.tree.leaves((got, grads)), jax.tree.leaves((want, want_grads))):
        assert a.shape == b.shape and a.dtype == b.dtype, (jax.typeof(a), jax.typeof(b))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-4)
    for g, x in zip(grads, (args[i] for i in f.argnums)):  # each gradient typed as its primal
        assert jax.typeof(g).sharding.spec == jax.typeof(x).sharding.spec
