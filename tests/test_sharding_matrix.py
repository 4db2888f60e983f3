"""The sharding conformance matrix (issue 27): every program of the shared
table (``cases.PROGRAMS``: each aclnn operator and each differentiable op,
its value, gradient and JVP in one jitted program, and that program under
``vmap``) with each dimension sharded in turn, on auto and explicit meshes
of one and two axes, with sizes the mesh divides and sizes it does not,
under ``jit`` and under a ``shard_map`` over part of the mesh. Each is
compared with the same program written in jax.numpy: the values, and
``jax.typeof`` of every result (explicit sharding, varying manual axes).

The README's test command runs a named subset (:data:`FAST`, a few cases
per program); ``pytest tests/test_sharding_matrix.py --sharding-matrix=full``
runs all of it (.ci/run does).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import NUM_DEVICES, skip_all_reduce_under_an_explicit_mesh_before_jax09
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from cases import PROGRAMS, program

pytestmark = pytest.mark.skipif(jax.device_count() < NUM_DEVICES, reason="needs 8 host devices")

#: name -> (mesh shape, axis names, axis type)
MESHES = {
    "auto-1d": ((4,), ("x",), AxisType.Auto),
    "auto-2d": ((4, 2), ("x", "y"), AxisType.Auto),
    "explicit-1d": ((4,), ("x",), AxisType.Explicit),
    "explicit-2d": ((4, 2), ("x", "y"), AxisType.Explicit),
}
#: Operand shapes (batch norm's channel is the last dimension, the raw
#: batch-norm reduce's dim 1) per context: sizes both mesh axes divide, or
#: sizes they mostly do not (the 10 rows over 4 devices of a batch that
#: does not divide the mesh); a shard_map's manual axis must divide its
#: dimension. Explicit sharding types must divide their dimensions too, so
#: on explicit meshes only the placements that do are taken (the other
#: dimensions stay uneven); on auto meshes a sharding constraint in the
#: program places the operands, as XLA may for any intermediate.
EVEN, UNEVEN, UNEVEN_BATCH = (8, 8, 8), (8, 6, 5), (10, 6, 5)
RANK = 3


@dataclass(frozen=True)
class Placement:
    """Where the operands are sharded: ``spec`` over ``mesh``, under ``jit``
    or inside a ``shard_map`` manual over the mesh's first axis."""

    mesh: str
    spec: tuple
    size: str
    context: str = "jit"

    @property
    def id(self) -> str:
        spec = ",".join("-" if e is None else e for e in self.spec)
        return f"{self.context}:{self.mesh}:P({spec}):{self.size}"

    @property
    def shape(self) -> tuple[int, ...]:
        if self.size == "even":
            return EVEN
        return UNEVEN_BATCH if self.context == "jit" and not self.explicit else UNEVEN

    @property
    def explicit(self) -> bool:
        return MESHES[self.mesh][2] == AxisType.Explicit

    def valid(self) -> bool:
        """Explicit types and a shard_map's manual axis divide their dimensions."""
        sizes = dict(zip(MESHES[self.mesh][1], MESHES[self.mesh][0]))
        return all(axis is None or n % sizes[axis] == 0 or not (self.explicit or axis == "x"
                                                                and self.context == "shard_map")
                   for axis, n in zip(self.spec, self.shape))


def _spec(**dims: str) -> tuple:
    return tuple(dims.get(f"d{i}") for i in range(RANK))


def placements() -> list[Placement]:
    """Every dimension sharded in turn by each mesh axis (on two axes, the
    next dimension by the second axis), even and uneven; inside a
    ``shard_map`` manual over "x" (dimension 0), the other axis on each
    other dimension."""
    out = []
    for mesh, size in itertools.product(MESHES, ("even", "uneven")):
        two = len(MESHES[mesh][1]) == 2
        for d in range(RANK):
            dims = {f"d{d}": "x"} | ({f"d{(d + 1) % RANK}": "y"} if two else {})
            out.append(Placement(mesh, _spec(**dims), size))
    for mesh, size, d in itertools.product(("auto-2d", "explicit-2d"), ("even", "uneven"), (1, 2)):
        out.append(Placement(mesh, _spec(d0="x", **{f"d{d}": "y"}), size, "shard_map"))
    return [p for p in out if p.valid()]


MODES = ("program", "vmap")

#: The README's subset: per program, an explicit and an auto mesh with
#: uneven sizes, the channel dimension sharded, and a partial shard_map.
FAST = {
    ("program", "jit:explicit-2d:P(-,x,y):even"),
    ("program", "jit:auto-2d:P(x,y,-):uneven"),
    ("vmap", "jit:explicit-1d:P(-,-,x):even"),
    ("program", "shard_map:auto-2d:P(x,-,y):uneven"),
}


def pytest_generate_tests(metafunc):  # noqa: D103 (pytest hook, module-level)
    full = metafunc.config.getoption("--sharding-matrix") == "full"
    cases = [(m, p) for m, p in itertools.product(MODES, placements())
             if full or (m, p.id) in FAST]
    metafunc.parametrize("mode,placement", cases, ids=[f"{m}-{p.id}" for m, p in cases])
    metafunc.parametrize("name", sorted(PROGRAMS))


def _types(tree) -> list[str]:
    return [str(jax.typeof(x)) for x in jax.tree.leaves(tree)]


def _make(fn, placement: Placement, mode: str, mesh, types: list):
    run = program(fn)
    if mode == "vmap":
        run = jax.vmap(run)

    def recorded(a, b):
        out = run(a, b)
        types.append(_types(out))
        return out

    if placement.context == "shard_map":
        def local(a, b):  # scalars (losses) as (1,): concatenated over "x"
            return jax.tree.map(jnp.atleast_1d, recorded(a, b))

        inner = jax.shard_map(local, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                              axis_names={"x"})
    else:
        inner = recorded
    if placement.explicit:  # the operands' types carry the placement
        return jax.jit(inner)
    sharding = NamedSharding(mesh, P(*placement.spec))
    return jax.jit(lambda a, b: inner(*jax.lax.with_sharding_constraint((a, b), sharding)))


def test_matrix(rng, name, mode, placement):
    if placement.explicit:
        skip_all_reduce_under_an_explicit_mesh_before_jax09(name)
    shape, names, kind = MESHES[placement.mesh]
    mesh = jax.make_mesh(shape, names, axis_types=(kind,) * len(names))
    spec = P(*placement.spec) if placement.explicit else P()
    a, b = (jax.device_put(rng.normal(size=placement.shape).astype(np.float32),
                           NamedSharding(mesh, spec)) for _ in range(2))
    ours, formula = PROGRAMS[name]
    types_ours, types_formula = [], []
    with jax.set_mesh(mesh):
        actual = _make(ours, placement, mode, mesh, types_ours)(a, b)
        expected = _make(formula, placement, mode, mesh, types_formula)(a, b)
    leaves_a, leaves_e = jax.tree.leaves(actual), jax.tree.leaves(expected)
    assert len(leaves_a) == len(leaves_e)
    for x, y in zip(leaves_a, leaves_e):
        assert x.shape == y.shape
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-4)
    assert types_ours == types_formula
