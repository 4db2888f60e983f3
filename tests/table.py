"""The machinery of the tests' shared table of operators (tests/cases.py):
what a row holds and how tests read it.

Each operator's block in cases.py calls :func:`add` with its formula (the
oracle, written once, generic in the array module ``xp``: NumPy in float64
is the oracle, jax.numpy the same formula inside a JAX program), its cases
(calls of its public function), its differentiable ops (with their plain
jax.numpy forward formulas) and the operands of its programs of two arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jax_aclnn as aclnn
from jax_aclnn._primitive import AclnnPrimitive
from jax_aclnn.ops import primitive

#: Per operator: its formula ``f(xp, *operands, **public keyword arguments)``.
FORMULAS: dict[str, Callable[..., Any]] = {}
CASES: list[Case] = []
FORWARD: list[Forward] = []
#: name (an operator, or a differentiable op of FORWARD) -> its operands from
#: two arrays ``a, b`` of one shape (batch norm's channel last, the reduce's
#: at dim 1), which a program differentiates through. An operator's program
#: calls it with its first case's keyword arguments.
PAIRS: dict[str, Callable[[Any, Any], tuple]] = {}


def add(op: str, formula: Callable[..., Any], cases: list[Case], forward: list[Forward],
        pairs: dict[str, Callable[[Any, Any], tuple]]) -> None:
    """One operator's row: its formula, cases, differentiable ops and programs' operands."""
    FORMULAS[op] = formula
    CASES.extend(cases)
    FORWARD.extend(forward)
    PAIRS.update(pairs)


def oracle(op: str) -> Callable[..., Any]:
    """``op``'s float64 NumPy oracle: its formula on float64 operands."""
    def run(*operands, **kwargs):
        with np.errstate(all="ignore"):
            return FORMULAS[op](np, *(np.asarray(a, np.float64) for a in operands), **kwargs)
    return run


def twin(op: str, **kwargs) -> Callable[..., Any]:
    """``op``'s formula in jax.numpy with these keyword arguments."""
    return lambda *operands: FORMULAS[op](jnp, *operands, **kwargs)


def of(op: str) -> list[Case]:
    """The cases of one operator."""
    return [c for c in CASES if c.op == op]


def ids(cases: list[Case]) -> list[str]:
    return [c.id for c in cases]


@dataclass(frozen=True)
class Case:
    """One call of an operator's public function."""

    op: str
    kwargs: dict[str, Any]
    shapes: tuple[tuple[int, ...], ...]
    #: (low, high) of each operand's uniform values; default (-2, 2).
    ranges: tuple[tuple[float, float] | None, ...] = field(default=())

    @property
    def id(self) -> str:
        args = ",".join(f"{k}={v}" for k, v in self.kwargs.items())
        return f"{self.op}({args})" + "x".join(str(list(s)) for s in self.shapes)

    @property
    def elementwise(self) -> bool:
        """The operator is element-wise (its sharding factors are the
        element-wise ones: one per result dimension)."""
        return elementwise(self.op)

    @property
    def same_shape(self) -> bool:
        """Element-wise on operands of one shape (no reduction to a scalar)."""
        return (self.elementwise and len(set(self.shapes)) == 1
                and self.kwargs.get("reduction", "none") == "none")

    def call(self, *operands: Any) -> Any:
        """The public function on ``operands``."""
        return getattr(aclnn, self.op)(*operands, **self.kwargs)

    def range(self, i: int) -> tuple[float, float]:
        return (self.ranges[i:i + 1] or (None,))[0] or (-2.0, 2.0)

    def operands(self, rng: np.random.Generator, dtype: Any = np.float32,
                 shapes: tuple[tuple[int, ...], ...] | None = None) -> list[jax.Array]:
        """Seeded uniform operands rounded to ``dtype`` (of ``shapes`` if given)."""
        return [jnp.asarray(rng.uniform(*self.range(i), size=s).astype(np.float32)).astype(dtype)
                for i, s in enumerate(shapes or self.shapes)]

    def scaled(self, factor: int) -> tuple[tuple[int, ...], ...]:
        """The shapes with every dimension but the broadcast ones (size 1)
        ``factor`` times larger: the same broadcasting, more elements."""
        return tuple(tuple(n if n == 1 else n * factor for n in s) for s in self.shapes)

    def expected(self, *operands: Any) -> Any:
        """The float64 oracle on ``operands``."""
        return oracle(self.op)(*operands, **self.kwargs)

    def primitive_params(self, *operands: Any) -> dict[str, Any]:
        """The parameters the public function binds the operator's primitive
        with, for these operands (read from its jaxpr)."""
        jaxpr = jax.make_jaxpr(self.call)(*operands)
        (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == self.op]
        return dict(eqn.params)


def elementwise(op: str) -> bool:
    """Whether ``op`` is element-wise: its primitive keeps the default
    (element-wise) sharding factors."""
    return type(primitive(op)).factors is AclnnPrimitive.factors


def away(rng, shape, low, high, kinks=(), margin=0.05) -> np.ndarray:
    """Uniform float32 values in [low, high] at least ``margin`` from every kink."""
    out = rng.uniform(low, high, size=shape)
    for _ in range(100):
        near = np.zeros(shape, bool)
        for k in kinks:
            near |= np.abs(out - k) < margin
        if not near.any():
            return out.astype(np.float32)
        out[near] = rng.uniform(low, high, size=near.sum())
    raise AssertionError("no point away from the kinks")


@dataclass(frozen=True)
class Forward:
    """A differentiable op: ``ours`` (through jax_aclnn) and ``plain`` (its
    forward formula in jax.numpy) of the same operands; ``sample(rng)``
    gives float32 operands away from the formula's kinks. Its derivative
    runs the aclnn operator ``op``; ``raw``, if given, is that operator on
    the forward's operands and an incoming gradient, ``raw(g, *operands)``,
    equal to the plain formula's VJP in its first operand."""

    name: str
    op: str
    ours: Callable[..., Any]
    plain: Callable[..., Any]
    sample: Callable[[np.random.Generator], tuple[np.ndarray, ...]]
    raw: Callable[..., Any] | None = None


def programs() -> dict[str, tuple[Callable[..., Any], Callable[..., Any]]]:
    """Every operator and differentiable op of :data:`PAIRS` as a program of
    two arrays: name -> (with jax_aclnn, with its formula in jax.numpy)."""
    def pair(name):
        operands = PAIRS[name]
        if name in FORMULAS:
            kwargs = of(name)[0].kwargs
            return (lambda a, b: getattr(aclnn, name)(*operands(a, b), **kwargs),
                    lambda a, b: twin(name, **kwargs)(*operands(a, b)))
        forward = next(f for f in FORWARD if f.name == name)
        return (lambda a, b: forward.ours(*operands(a, b)),
                lambda a, b: forward.plain(*operands(a, b)))

    return {name: pair(name) for name in PAIRS}


def program(f):
    """The value of ``f``, its gradient in both inputs and its JVP."""

    def run(a, b):
        weights = lambda out: jnp.cos(jnp.arange(out.size, dtype=out.dtype)).reshape(out.shape)  # noqa: E731
        loss = lambda a, b: sum(jnp.sum(weights(o) * o) for o in jax.tree.leaves(f(a, b)))  # noqa: E731
        value = f(a, b)
        grads = jax.grad(loss, argnums=(0, 1))(a, b)
        _, tangent = jax.jvp(f, (a, b), (jnp.sin(a), jnp.cos(b)))
        return value, grads, tangent

    return run
