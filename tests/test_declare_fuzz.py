"""jax_aclnn.declare on random prototypes, through the test provider's
recording operator of any prototype (aclnnRecordDynamic,
csrc/testing/dynamic_recorder.cc).

Each example draws a prototype (every argument kind in any order; optional
tensors given and absent; tensor lists as inputs and outputs; one output,
several, a sole tensor list; ranks 0 to 9; element-wise or not), sets it as
the recording operator's C signature, declares it and checks:

- through the recording log, that every argument arrives with the declared
  kind, value and dtype (an aclScalar's dtype by the value's type on every
  call, whatever was called before: the call is repeated with values that
  compare equal but are of other types);
- that the result has the reference's structure (a tensor-list output a
  list, nested as the reference returns it), shapes, dtypes and values,
  eagerly and under ``jit``, ``vmap`` and ``grad``.

The recording operator writes into output tensor k (a list's tensors counted
one by one) ``float32(k + 1)`` plus the float32 input tensors that broadcast
to the output's shape, each at that element, added in input order in float32
and rounded to the output's dtype: the references below compute the same.
"""

from __future__ import annotations

import ctypes
import inspect
import itertools
import os
import re
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

import jax_aclnn as aclnn
from declared_operators import LIBRARY, recorded

pytestmark = pytest.mark.skipif(not LIBRARY.exists(),
                                reason="the test provider is built with JAX_ACLNN_TESTING=ON")

_library = ctypes.CDLL(str(LIBRARY)) if LIBRARY.exists() else None
if _library is not None:
    _library.jaxAclnnTestSetDynamicPrototype.argtypes = [ctypes.c_char_p]


# ---- Parameter kinds: (C declaration, the recorder's letter).
TENSOR_KINDS = {
    "tensor": ("const aclTensor *{}", "t"),
    "tensor_out": ("aclTensor *{}", "T"),
    "list": ("const aclTensorList *{}", "l"),
    "list_out": ("aclTensorList *{}", "L"),
}
ATTRIBUTE_KINDS = {
    "scalar": ("const aclScalar *{}", "s"),
    "int_array": ("const aclIntArray *{}", "I"),
    "bool_array": ("const aclBoolArray *{}", "B"),
    "float_array": ("const aclFloatArray *{}", "F"),
    "bool": ("bool {}", "b"),
    "int8": ("int8_t {}", "1"),
    "int32": ("int32_t {}", "4"),
    "int64": ("int64_t {}", "8"),
    "double": ("double {}", "d"),
    "float": ("float {}", "f"),
    "string": ("const char *{}", "c"),
}
KINDS = {**TENSOR_KINDS, **ATTRIBUTE_KINDS}
DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(jnp.bfloat16))
ACL_NAMES = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16",
             np.dtype(jnp.bfloat16): "bf16", np.dtype(np.float64): "f64",
             np.dtype(np.int64): "i64", np.dtype(np.int32): "i32", np.dtype(np.int8): "2",
             np.dtype(np.bool_): "bool"}
MAX_RANK = 8  # aclnn's

INT64 = st.integers(-2**63, 2**63 - 1)
# No subnormals: XLA's CPU threads, where the handler and the provider run,
# flush them to zero (as XLA's own code on them does).
FLOAT32 = st.floats(width=32, allow_nan=False, allow_subnormal=False)
FLOAT64 = st.floats(allow_nan=False, allow_subnormal=False)
SCALARS = st.one_of(
    st.none(), FLOAT32, INT64, st.booleans(),
    FLOAT32.map(np.float32), FLOAT64.map(np.float64), INT64.map(np.int64),
    st.integers(-2**31, 2**31 - 1).map(np.int32), st.integers(-128, 127).map(np.int8),
    st.booleans().map(np.bool_))


def arrays(elements, dtype):
    """An array attribute: None, or its values as a list, a tuple or a NumPy array."""
    return st.one_of(st.none(), st.tuples(st.lists(elements, max_size=6),
                                          st.sampled_from([list, tuple, "numpy"])).map(
        lambda v: np.asarray(v[0], dtype) if v[1] == "numpy" else v[1](v[0])))


ATTRIBUTE_VALUES = {
    "scalar": SCALARS,
    "int_array": arrays(INT64, np.int64),
    "bool_array": arrays(st.booleans(), np.bool_),
    "float_array": arrays(FLOAT32, np.float32),
    "bool": st.booleans(),
    "int8": st.integers(-128, 127),
    "int32": st.integers(-2**31, 2**31 - 1),
    "int64": INT64,
    "double": FLOAT64,
    "float": FLOAT32,
    "string": st.one_of(st.none(), st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                           max_size=12)),
}


# ---- What the recorder prints (recording_operators.cc's Describe).
def _boolean(b) -> str:
    return "true" if b else "false"


def describe_attribute(kind: str, v: Any) -> str:
    if v is None:
        return "null"
    if kind == "scalar":
        if isinstance(v, (bool, np.bool_)):
            return f"scalar(bool,{_boolean(v)})"
        if isinstance(v, (int, np.integer)):
            return f"scalar({ACL_NAMES[np.dtype(type(v) if type(v) is not int else np.int64)]},{int(v)})"
        if isinstance(v, np.float64):
            return "scalar(f64,%.17g)" % v
        return "scalar(f32,%.17g)" % float(np.float32(v))  # a Python float, np.float32
    if kind == "int_array":
        return "ints[" + ",".join(str(int(x)) for x in v) + "]"
    if kind == "bool_array":
        return "bools[" + ",".join(_boolean(x) for x in v) + "]"
    if kind == "float_array":
        return "floats[" + ",".join("%.9g" % float(np.float32(x)) for x in v) + "]"
    if kind == "bool":
        return _boolean(v)
    if kind in ("int8", "int32", "int64"):
        return str(int(v))
    if kind == "double":
        return "%.17g" % v
    if kind == "float":
        return "%.9g" % float(np.float32(v))
    assert kind == "string"
    return f'"{v}"'


def twin(v: Any) -> Any:
    """A value that compares equal to the aclScalar value ``v`` but is of a
    type of another aclScalar dtype, or None."""
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, np.int64)):
        return float(v) if abs(int(v)) < 2**24 else None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.float64):  # (a float too)
        with np.errstate(over="ignore"):  # beyond float32's range: inf, not equal
            return float(v) if np.float32(v) == v else None
    return np.float64(v)  # a Python float or np.float32


# ---- A random operator.
@dataclass
class Param:
    kind: str
    name: str
    #: an input tensor: (shape, dtype) or None (absent); a list: [(shape, dtype), ...];
    #: an output: likewise; an attribute: its value
    value: Any


@dataclass
class Spec:
    params: list[Param]
    elementwise: bool
    sole_list_bare: bool  # a sole tensor-list output returned as a bare list, not ([...],)
    #: each output's C spelling: "T *name" or "T* name"
    spelling: list[bool]

    @property
    def inputs(self) -> list[Param]:
        return [p for p in self.params if p.kind in ("tensor", "list")]

    @property
    def outputs(self) -> list[Param]:
        return [p for p in self.params if p.kind in ("tensor_out", "list_out")]

    @property
    def attributes(self) -> list[Param]:
        return [p for p in self.params if p.kind in ATTRIBUTE_KINDS]

    def input_shapes(self) -> list[tuple[int, ...]]:
        shapes = []
        for p in self.inputs:
            items = [p.value] if p.kind == "tensor" else p.value
            shapes += [item[0] for item in items if item is not None]
        return shapes

    def prototype(self) -> str:
        decls = []
        for p, spaced in zip(self.params, self.spelling):
            decl = KINDS[p.kind][0].format(p.name)
            decls.append(decl.replace(" *", "* ") if spaced else decl)
        return ("aclnnStatus aclnnRecordDynamicGetWorkspaceSize(" + ", ".join(decls) +
                (", " if decls else "") + "uint64_t *workspaceSize, aclOpExecutor **executor)")

    def letters(self) -> bytes:
        return "".join(KINDS[p.kind][1] for p in self.params).encode()


@st.composite
def specs(draw) -> Spec:
    elementwise = draw(st.booleans())
    rank = draw(st.integers(0, 9))
    dim = st.integers(1, 3 if rank <= 4 else 2)
    base = draw(st.lists(dim, min_size=rank, max_size=rank))
    if elementwise and rank > MAX_RANK and 1 not in base:
        base[draw(st.integers(0, rank - 1))] = 1  # merges into 8 dimensions at most
    names = (f"p{i}" for i in itertools.count())

    def tensor(anchor: bool = False, output: bool = False):
        dtype = draw(st.sampled_from(DTYPES))
        if elementwise:
            if anchor or output:
                return tuple(base), dtype
            k = draw(st.integers(0, rank))  # a suffix of the result's shape, some dims 1
            ones = draw(st.lists(st.booleans(), min_size=k, max_size=k))
            return tuple(1 if o else d for d, o in zip(base[rank - k:], ones)), dtype
        r = rank if anchor else draw(st.integers(0, MAX_RANK if not output else 3))
        return tuple(draw(st.lists(st.integers(1, 3 if r <= 4 else 2), min_size=r,
                                   max_size=r))), dtype

    params = []
    n_inputs = draw(st.integers(1 if elementwise else 0, 4))
    anchor = draw(st.integers(0, n_inputs - 1)) if n_inputs else -1
    for i in range(n_inputs):  # the anchor is present, of the base shape (rank)
        if draw(st.booleans()):
            absent = i != anchor and draw(st.integers(0, 3)) == 0
            params.append(Param("tensor", next(names), None if absent else tensor(i == anchor)))
        else:
            n = draw(st.integers(1 if i == anchor else 0, 3))
            params.append(Param("list", next(names),
                                [tensor(i == anchor and j == 0) for j in range(n)]))
    structure = draw(st.sampled_from(["tensor", "list", "several"]))
    out_kinds = ([structure] if structure != "several" else
                 draw(st.lists(st.sampled_from(["tensor", "list"]), min_size=2, max_size=3)))
    for kind in out_kinds:
        if kind == "tensor":
            params.append(Param("tensor_out", next(names), tensor(output=True)))
        else:
            n = draw(st.integers(1, 3))
            params.append(Param("list_out", next(names), [tensor(output=True) for _ in range(n)]))
    for kind in draw(st.lists(st.sampled_from(sorted(ATTRIBUTE_KINDS)), max_size=5)):
        params.append(Param(kind, next(names), draw(ATTRIBUTE_VALUES[kind])))
    params = draw(st.permutations(params))
    return Spec(params, elementwise, draw(st.booleans()),
                draw(st.lists(st.booleans(), min_size=len(params), max_size=len(params))))


# ---- The reference: what the recorder writes.
def broadcasts(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    return len(shape) <= len(to) and all(
        n in (1, m) for n, m in zip(shape[::-1], to[::-1]))


def reference_for(spec: Spec):
    outputs = spec.outputs

    def reference(*inputs, **attrs):
        xs = [x for x in _present(spec, inputs) if x.dtype == jnp.float32]
        k = itertools.count(1)

        def value(shape, dtype):
            acc = jnp.full(shape, next(k), jnp.float32)
            for x in xs:
                if broadcasts(x.shape, shape):
                    acc = acc + jnp.broadcast_to(x, shape)
            return acc.astype(dtype)

        # shapes and dtypes: the declared ones, with the per-example shape an
        # element-wise operator has (the inputs' broadcast shape)
        shape_now = (jnp.broadcast_shapes(*(x.shape for x in _present(spec, inputs)))
                     if spec.elementwise else None)
        outs = []
        for p in outputs:
            items = [p.value] if p.kind == "tensor_out" else p.value
            made = [value(shape_now if spec.elementwise else s, d) for s, d in items]
            outs.append(made[0] if p.kind == "tensor_out" else made)
        if len(outs) == 1:
            return outs[0] if outputs[0].kind == "tensor_out" or spec.sole_list_bare else (outs[0],)
        return tuple(outs)

    reference.__signature__ = inspect.Signature(
        [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in spec.inputs] +
        [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY) for p in spec.attributes])
    return reference


def _present(spec: Spec, inputs) -> list[Any]:
    out = []
    for p, x in zip(spec.inputs, inputs):
        out += ([] if x is None else [x]) if p.kind == "tensor" else list(x)
    return out


def make_inputs(spec: Spec, rng: np.random.Generator, batch: tuple[int, ...] = ()) -> list[Any]:
    def array(item):
        shape, dtype = item
        return jnp.asarray(rng.normal(0, 2, batch + shape).astype(np.float32)).astype(dtype)

    return [(None if p.value is None else array(p.value)) if p.kind == "tensor" else
            [array(item) for item in p.value] for p in spec.inputs]


# ---- What arrives.
def expected_line(spec: Spec, attrs: dict[str, Any], exact_shapes: bool) -> re.Pattern:
    """The recorded line of a call, as a pattern: every argument's kind,
    dtype and value; the tensors' shapes when ``exact_shapes``."""
    def tensor(item) -> str:
        if item is None:
            return re.escape("null")
        shape, dtype = item
        dims = re.escape(",".join(map(str, shape))) if exact_shapes else r"[0-9,]*"
        return re.escape(f"tensor({ACL_NAMES[dtype]},[") + dims + re.escape("])")

    out_shape = tuple(np.broadcast_shapes(*spec.input_shapes())) if spec.elementwise else None
    pieces = []
    for p in spec.params:
        if p.kind in ("tensor_out", "list_out"):
            items = [p.value] if p.kind == "tensor_out" else p.value
            items = [(out_shape if spec.elementwise else s, d) for s, d in items]
        else:
            items = [p.value] if p.kind in ("tensor",) else p.value
        if p.kind in ("tensor", "tensor_out"):
            pieces.append(tensor(items[0]))
        elif p.kind in ("list", "list_out"):
            pieces.append(re.escape("list[") + ",".join(tensor(i) for i in items) + re.escape("]"))
        else:
            pieces.append(re.escape(describe_attribute(p.kind, attrs[p.name])))
    return re.compile(re.escape("; ").join(pieces))


def check_arrived(spec: Spec, attrs: dict[str, Any], exact_shapes: bool, what: str) -> None:
    lines = recorded()
    assert lines, f"{what}: the first phase was not called"
    pattern = expected_line(spec, attrs, exact_shapes)
    for line in lines:
        assert pattern.fullmatch(line), f"{what}: arrived\n  {line}\nexpected\n  {pattern.pattern}"


def assert_same(got: Any, want: Any, what: str, exact: bool = True) -> None:
    assert jax.tree.structure(got) == jax.tree.structure(want), (
        f"{what}: result structure {jax.tree.structure(got)}, the reference's "
        f"{jax.tree.structure(want)}")
    for i, (g, w) in enumerate(zip(jax.tree.leaves(got), jax.tree.leaves(want))):
        assert (g.shape, g.dtype) == (w.shape, w.dtype), (
            f"{what}: result {i} is {g.dtype}{list(g.shape)}, the reference's "
            f"{w.dtype}{list(w.shape)}")
        g32, w32 = np.asarray(g, np.float32), np.asarray(w, np.float32)
        if exact:
            np.testing.assert_array_equal(g32, w32, err_msg=f"{what}: result {i}")
        else:
            np.testing.assert_allclose(g32, w32, rtol=1e-2 if g.dtype != np.float32 else 1e-5,
                                       atol=1e-2, err_msg=f"{what}: result {i}")


_names = (f"record_dynamic_{i}" for i in itertools.count())


# Each example compiles several programs (the values are static): its own count.
@settings(max_examples=int(os.environ.get("JAX_ACLNN_PROTOTYPE_FUZZ_EXAMPLES", "40")),
          deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=specs(), seed=st.integers(0, 2**32 - 1))
def test_random_prototypes_arrive_and_return_as_declared(spec, seed):
    """Property: whatever the prototype and the values, the first phase
    receives exactly them and the result is the reference's, eagerly and
    under jit, vmap and grad."""
    rng = np.random.default_rng(seed)
    assert _library.jaxAclnnTestSetDynamicPrototype(spec.letters()) == 0
    note(spec.prototype())
    reference = reference_for(spec)
    op = aclnn.declare(spec.prototype(), reference, library=LIBRARY,
                       elementwise=spec.elementwise, name=next(_names))
    attrs = {p.name: p.value for p in spec.attributes}
    inputs = make_inputs(spec, rng)
    recorded()
    ranks = [len(s) for s in spec.input_shapes()]
    for what, happens in [
            ("element-wise", spec.elementwise), ("rank 9", max(ranks, default=0) > MAX_RANK),
            ("an absent optional tensor", any(p.kind == "tensor" and p.value is None
                                              for p in spec.inputs)),
            ("an input list", any(p.kind == "list" for p in spec.inputs)),
            ("no input tensor", not ranks),
            ("a sole tensor-list output", [p.kind for p in spec.outputs] == ["list_out"]),
            ("several outputs", len(spec.outputs) > 1)]:
        if happens:
            event(what)
    if not spec.elementwise and ranks and max(ranks) > MAX_RANK:
        # not element-wise: its dimensions cannot be merged to aclnn's rank
        with pytest.raises(ValueError, match="rank"):
            op(*inputs, **attrs)
        return
    exact_shapes = not ranks or max(ranks) <= MAX_RANK  # else merged (element-wise)

    want = reference(*inputs, **attrs)
    assert_same(op(*inputs, **attrs), want, "eager")
    check_arrived(spec, attrs, exact_shapes, "eager")

    # The same call again with aclScalar values that compare equal but are
    # of other types: each arrives with its own type's dtype.
    twins = {p.name: twin(p.value) for p in spec.attributes if p.kind == "scalar"}
    twins = {name: v for name, v in twins.items() if v is not None}
    if twins:
        again = {**attrs, **twins}
        assert_same(op(*inputs, **again), want, "eager, equal scalars of other types")
        check_arrived(spec, again, exact_shapes, "eager, equal scalars of other types")

    assert_same(jax.jit(lambda *xs: op(*xs, **attrs))(*inputs), want, "jit")
    check_arrived(spec, attrs, exact_shapes, "jit")

    present = [i for i, p in enumerate(spec.inputs)
               if p.kind == "list" and p.value or p.kind == "tensor" and p.value is not None]
    if not present:
        return  # nothing to batch or differentiate

    # vmap: a batch of 2 along axis 0 of some inputs (one at least), the
    # others shared; inside jit.
    batched = {i for i in present if rng.integers(2)} or {present[0]}
    batch_inputs = make_inputs(spec, rng, (2,))
    xs = [batch_inputs[i] if i in batched else x for i, x in enumerate(inputs)]
    axes = [(0 if i in batched else None) if p.kind == "tensor" else
            [0 if i in batched else None] * len(p.value) for i, p in enumerate(spec.inputs)]
    got = jax.jit(jax.vmap(lambda *a: op(*a, **attrs), in_axes=axes))(*xs)
    assert_same(got, jax.vmap(lambda *a: reference(*a, **attrs), in_axes=axes)(*xs), "vmap")
    # element-wise: one call on the operands broadcast to the batch's shape;
    # else one call per example (jax.lax.map), of the example's shapes
    check_arrived(spec, attrs, exact_shapes and not spec.elementwise, "vmap")

    # grad of a weighted sum of every output, by every input (with the
    # value, so that the operator runs).
    def loss(f):
        def total(*a):
            leaves = jax.tree.leaves(f(*a, **attrs))
            return sum(jnp.sum(o.astype(jnp.float32) * (k + 1)) for k, o in enumerate(leaves))
        return total

    argnums = tuple(range(len(inputs)))
    assert_same(jax.jit(jax.value_and_grad(loss(op), argnums=argnums))(*inputs),
                jax.value_and_grad(loss(reference), argnums=argnums)(*inputs), "grad",
                exact=False)
    check_arrived(spec, attrs, exact_shapes, "grad")
