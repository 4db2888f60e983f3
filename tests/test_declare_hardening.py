"""declare() under attack (issue 36): each test reproduces one way the generic
path crashed, answered wrongly or gave a confusing error, and fails without
its fix. Where a value must arrive through the handler, the test provider's
recording operators (csrc/testing/) record what their first phases receive;
elsewhere the declared operator runs its reference (the host provider lacks
it), whose numbers are checked against NumPy."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_aclnn as aclnn
from declared_operators import LIBRARY, SOFTPLUS_BACKWARD, recorded, softplus_backward_reference

pytestmark = pytest.mark.skipif(not LIBRARY.exists(),
                                reason="the test provider is built with JAX_ACLNN_TESTING=ON")

_NAMES = iter(range(10**6))


def unique(stem: str) -> str:
    """A fresh operator name: each test declares its own."""
    return f"{stem}_{next(_NAMES)}"


def all_kinds(**changes):
    """aclnnRecordAllKinds (the recording operator taking every kind), with
    its parameters' C types changed where ``changes`` says (same C ABI)."""
    params = dict(alpha="const aclScalar*", group="int32_t")
    params.update(changes)
    return aclnn.declare(
        "aclnnStatus aclnnRecordAllKindsGetWorkspaceSize(const aclTensor* self, "
        f"const aclTensor* optionalOther, {params['alpha']} alpha, "
        "const aclScalar* betaOptional, bool flag, int64_t count, double ratio, float scale, "
        "const aclIntArray* dims, const aclBoolArray* mask, const aclFloatArray* weights, "
        "const aclTensorList* tensors, const char* mode, int8_t cubeMathType, "
        f"{params['group']} group, aclTensor* out, uint64_t* workspaceSize, "
        "aclOpExecutor** executor)",
        lambda self, optionalOther, tensors, **_: jnp.zeros_like(self),
        name=unique("record_all_kinds"), library=LIBRARY)


ALL_KINDS = all_kinds()
ARGS = dict(alpha=1.0, betaOptional=None, flag=True, count=1, ratio=1.0, scale=1.0, dims=[1],
            mask=[True], weights=[1.0], mode="m", cubeMathType=0, group=0)
X = np.zeros((2,), np.float32)


def fields(line: str) -> list[str]:
    return line.split("; ")


# --- item 2: tensor-list outputs keep the reference's structure -----------------

SPLIT3 = ("aclnnStatus aclnnSplit3GetWorkspaceSize(const aclTensor *x, aclTensorList *outs, "
          "uint64_t *workspaceSize, aclOpExecutor **executor)")


@pytest.mark.parametrize("wrap", [lambda l: (l,), lambda l: l], ids=["tuple", "bare-list"])
def test_a_sole_tensor_list_output_returns_every_tensor(wrap):
    split3 = aclnn.declare(SPLIT3, lambda x: wrap([x, 2 * x, 3 * x]), name=unique("split3"))
    x = jnp.arange(4.0)
    for f in (split3, jax.jit(split3)):
        got = f(x)
        want = wrap([x, 2 * x, 3 * x])
        assert jax.tree.structure(got) == jax.tree.structure(want)
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_array_equal(g, w)


def test_a_list_and_a_tensor_output_keep_their_structure_under_vmap():
    op = aclnn.declare(
        "aclnnStatus aclnnSplitAndSumGetWorkspaceSize(const aclTensor *x, aclTensorList *parts, "
        "aclTensor *total, uint64_t *workspaceSize, aclOpExecutor **executor)",
        lambda x: ([x[:2], x[2:]], jnp.sum(x)), name=unique("split_and_sum"))
    xs = jnp.arange(12.0).reshape(3, 4)
    (parts, total) = jax.vmap(op)(xs)
    np.testing.assert_array_equal(parts[0], xs[:, :2])
    np.testing.assert_array_equal(parts[1], xs[:, 2:])
    np.testing.assert_array_equal(total, xs.sum(1))


def test_an_output_list_reaches_the_provider_whole():
    op = aclnn.declare(
        "aclnnStatus aclnnRecordListsGetWorkspaceSize(const aclTensorList *inputs, "
        "const aclTensor *bias, aclTensorList *outputs, uint64_t *workspaceSize, "
        "aclOpExecutor **executor)",
        lambda inputs, bias: [2 * t for t in inputs], name=unique("record_lists"),
        library=LIBRARY)
    recorded()
    x = jnp.ones((3,), jnp.float32)
    out = jax.jit(op)([x, x, x], x)
    assert isinstance(out, list) and [o.shape for o in out] == [(3,)] * 3
    assert fields(recorded()[0])[2] == "list[tensor(f32,[3]),tensor(f32,[3]),tensor(f32,[3])]"


# --- item 3: an absent optional tensor under vmap --------------------------------

def test_vmap_of_an_elementwise_operator_with_an_absent_optional_tensor():
    op = aclnn.declare(
        "aclnnStatus aclnnAddOptionalGetWorkspaceSize(const aclTensor *self, "
        "const aclTensor *otherOptional, aclTensor *out, uint64_t *workspaceSize, "
        "aclOpExecutor **executor)",
        lambda self, otherOptional: self if otherOptional is None else self + otherOptional,
        name=unique("add_optional"), elementwise=True)
    xs = jnp.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(jax.vmap(lambda x: op(x, None))(xs), xs)
    np.testing.assert_array_equal(jax.vmap(lambda x: op(x, None))(xs[:, 0]), xs[:, 0])


# --- item 4: an aclScalar's dtype is its value's, whatever came before ------------

def test_a_scalars_dtype_does_not_depend_on_earlier_calls():
    recorded()
    for alpha, want in [(True, "scalar(bool,true)"), (1.0, "scalar(f32,1)"),
                        (1, "scalar(i64,1)"), (1.0, "scalar(f32,1)"),
                        (np.float32(1), "scalar(f32,1)"), (np.int32(1), "scalar(i32,1)")]:
        ALL_KINDS(X, None, [X], **{**ARGS, "alpha": alpha})
        assert fields(recorded()[0])[2] == want, alpha


# --- item 5: reference parameters outside the prototype ---------------------------

@pytest.mark.parametrize("reference", [
    lambda gradOutput, self, *, beta, threshold, approximate="none": gradOutput,
    lambda gradOutput, self, scale=2.0, *, beta, threshold: gradOutput,
], ids=["keyword", "positional-with-default"])
def test_a_reference_parameter_that_the_prototype_lacks_is_refused(reference):
    with pytest.raises(ValueError, match="that the prototype does not have"):
        aclnn.declare(SOFTPLUS_BACKWARD, reference, name=unique("extra"))


def test_a_keyword_through_var_keyword_that_the_prototype_lacks_is_refused():
    op = aclnn.declare(SOFTPLUS_BACKWARD, lambda g, x, **kw: g, name=unique("var_keyword"))
    with pytest.raises(TypeError, match="approximate is not a parameter"):
        op(X, X, beta=1.0, threshold=20.0, approximate="tanh")


# --- item 6: operators without input tensors --------------------------------------

def test_an_operator_without_input_tensors():
    eye = aclnn.declare(
        "aclnnStatus aclnnEyeGetWorkspaceSize(int64_t n, int64_t m, aclTensor *out, "
        "uint64_t *workspaceSize, aclOpExecutor **executor)",
        lambda *, n, m: jnp.eye(n, m), name=unique("eye"))
    np.testing.assert_array_equal(eye(n=3, m=2), np.eye(3, 2))
    np.testing.assert_array_equal(jax.jit(lambda: eye(n=2, m=2))(), np.eye(2))


# --- item 7: element-wise operators past rank 8 -----------------------------------

def test_elementwise_past_rank_eight_on_the_reference_path_and_under_vmap():
    op = aclnn.declare(SOFTPLUS_BACKWARD, softplus_backward_reference,
                       name=unique("softplus_rank"), elementwise=True)
    rng = np.random.default_rng(0)
    x9 = rng.standard_normal((2,) * 9).astype(np.float32)
    want = softplus_backward_reference(x9, x9, beta=1.0, threshold=20.0)
    np.testing.assert_allclose(op(x9, x9, beta=1.0, threshold=20.0), want, rtol=1e-6)
    got = jax.vmap(lambda a: op(a, a, beta=1.0, threshold=20.0))(x9)
    np.testing.assert_allclose(got, want, rtol=1e-6)


# --- items 8, 9, 13: values checked, natural values taken --------------------------

@pytest.mark.parametrize("change,match", [
    ({"count": 2.9}, "count=2.9 is not an integer"),
    ({"count": "5"}, "count='5' is not an integer"),
    ({"dims": [0.5, 1.9]}, "dims=0.5 is not an integer"),
    ({"flag": "false"}, "flag='false' is not a bool"),
    ({"alpha": "0.5"}, "alpha='0.5' is not a number"),
    ({"mode": 3}, "mode is a const char\\*: expected a str, got int"),
    ({"weights": 1.0}, "weights is an aclFloatArray\\*: expected a sequence"),
    ({"count": None}, "count is a int64_t, not a pointer"),
])
def test_a_value_not_of_its_parameters_kind_is_a_type_error(change, match):
    with pytest.raises(TypeError, match=match):
        ALL_KINDS(X, None, [X], **{**ARGS, **change})


def test_numpy_arrays_and_zero_d_arrays_are_taken():
    recorded()
    ALL_KINDS(X, None, [X], **{**ARGS, "dims": np.arange(3), "alpha": jnp.float32(0.5),
                              "weights": jnp.array([0.5, 1.0]), "count": np.int64(7),
                              "mask": np.array([True, False])})
    line = fields(recorded()[0])
    assert line[2] == "scalar(f32,0.5)" and line[5] == "7"
    assert line[8:11] == ["ints[0,1,2]", "bools[true,false]", "floats[0.5,1]"]


def test_float32s_largest_value_as_numpy_prints_it_is_in_range():
    recorded()
    ALL_KINDS(X, None, [X], **{**ARGS, "scale": 3.4028235e38})
    assert fields(recorded()[0])[7] == "3.40282347e+38"


def test_an_acl_data_type_parameter_takes_a_dtype():
    op = all_kinds(group="aclDataType")
    recorded()
    for dtype, code in [(jnp.float16, "1"), (np.float32, "0"), ("bfloat16", "27"),
                        (jnp.int64, "9")]:
        op(X, None, [X], **{**ARGS, "group": dtype})
        assert fields(recorded()[0])[14] == code
    with pytest.raises(TypeError, match="group is an aclDataType"):
        op(X, None, [X], **{**ARGS, "group": 3})


# --- item 10: a named library without the operator --------------------------------

def test_a_library_without_the_operator_is_an_error_naming_the_symbol():
    op = aclnn.declare(SOFTPLUS_BACKWARD.replace("SoftplusBackward", "SoftplusBackwrd"),
                       softplus_backward_reference, name=unique("typo"), library=LIBRARY)
    with pytest.raises(Exception, match="does not export aclnnSoftplusBackwrdGetWorkspaceSize "
                                        "and aclnnSoftplusBackwrd"):
        jax.jit(lambda x: op(x, x, beta=1.0, threshold=20.0))(X)


# --- item 11: outputs= as one string -----------------------------------------------

def test_outputs_given_as_one_string_is_one_name():
    op = aclnn.declare(
        "aclnnStatus aclnnNegGetWorkspaceSize(const aclTensor *self, const aclTensor *out, "
        "uint64_t *workspaceSize, aclOpExecutor **executor)", lambda self: -self,
        outputs="out", name=unique("neg"))
    assert [p.name for p in op.aclnn_operator.prototype.outputs] == ["out"]


# --- item 12: attribute names that JAX or the class use themselves ----------------

def test_attribute_names_that_collide_with_internal_names():
    names = ["absent", "list_sizes", "attrs", "ctx", "args", "platform", "alias", "in_avals",
             "params", "name"]
    op = aclnn.declare(
        "aclnnStatus aclnnScaleByGetWorkspaceSize(const aclTensor *self, "
        + "".join(f"double {n}, " for n in names)
        + "aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)",
        lambda self, **kw: self * sum(kw.values()), name=unique("scale_by"), elementwise=True)
    values = {n: float(i) for i, n in enumerate(names)}
    x = jnp.arange(3.0)
    want = x * sum(values.values())
    np.testing.assert_array_equal(jax.jit(lambda x: op(x, **values))(x), want)
    np.testing.assert_array_equal(jax.vmap(lambda x: op(x, **values))(x), want)
    np.testing.assert_array_equal(jax.grad(lambda x: op(x, **values).sum())(x),
                                  np.full(3, sum(values.values())))


# --- item 14: declaring again -----------------------------------------------------

def test_declaring_the_same_operator_again_is_idempotent():
    def cell():  # a notebook cell run twice defines equal functions
        def reference(gradOutput, self, *, beta, threshold):
            return gradOutput * beta
        return aclnn.declare(SOFTPLUS_BACKWARD, reference, name="softplus_cell")

    a, b = cell(), cell()
    assert a.aclnn_operator is b.aclnn_operator
    with pytest.raises(ValueError, match="exists already"):
        aclnn.declare(SOFTPLUS_BACKWARD, softplus_backward_reference, name="softplus_cell")


# --- item 15: errors that scale and that come early ---------------------------------

def test_reference_path_error_names_the_closest_operators_only():
    for _ in range(20):
        aclnn.declare(SOFTPLUS_BACKWARD, softplus_backward_reference, name=unique("many"))
    with pytest.raises(ValueError) as info:
        with aclnn.reference_path("swish_backwrd"):
            pass
    message = str(info.value)
    assert "swish_backward" in message and len(message) < 400 and "many_" not in message


def test_array_values_past_the_handlers_bound_are_refused_when_traced():
    with pytest.raises(ValueError, match="257 aclBoolArray and aclFloatArray values"):
        jax.jit(lambda x: ALL_KINDS(x, None, [x], **{**ARGS, "weights": [1.0] * 256})).lower(X)


# --- item 16: errors a newcomer meets ---------------------------------------------

def test_a_forgotten_outputs_says_which_tensors_may_be_outputs():
    with pytest.raises(ValueError, match=r"pass outputs=\('yOut', 'rstdOut'\)"):
        aclnn.declare(
            "aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, "
            "double epsilon, const aclTensor *yOut, const aclTensor *rstdOut, "
            "uint64_t *workspaceSize, aclOpExecutor **executor)",
            lambda x, gamma, *, epsilon: (x, x), name=unique("rms_norm_no_outputs"))


def test_a_traced_attribute_names_the_parameter_and_says_it_is_static():
    op = aclnn.declare(SOFTPLUS_BACKWARD, softplus_backward_reference, name=unique("traced"))
    with pytest.raises(TypeError, match="beta is a traced value .* static"):
        jax.jit(lambda x, b: op(x, x, beta=b, threshold=20.0))(X, 1.0)



def test_declaring_a_name_again_with_other_closed_over_values_is_refused():
    """Equal code closing over another value is another operator: refused
    (reusing the first would compute the old values)."""
    def make(scale):
        return lambda gradOutput, self, *, beta, threshold: gradOutput * scale

    aclnn.declare(SOFTPLUS_BACKWARD, make(2.0), name="softplus_closure", elementwise=True)
    with pytest.raises(ValueError, match="exists already"):
        aclnn.declare(SOFTPLUS_BACKWARD, make(3.0), name="softplus_closure", elementwise=True)


def test_vmap_merges_into_a_leading_factor_only_where_every_operand_leads_with_it():
    """'b m, m b -> b m': c has the factor b second; merging the mapped
    dimension into b would misshape it, so vmap runs one call per example."""
    op = aclnn.declare(
        "aclnnStatus aclnnAddTransposedGetWorkspaceSize(const aclTensor *a, const aclTensor *c, "
        "aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor)",
        lambda a, c: a + c.T, name=unique("add_transposed"), dims="b m, m b -> b m")
    a = jnp.arange(24.0).reshape(3, 2, 4)
    c = jnp.arange(8.0).reshape(4, 2)
    np.testing.assert_array_equal(jax.vmap(lambda a: op(a, c))(a), a + c.T)


# --- issue 44, item 2: declaring again over a changed large array ------------------
# NumPy and JAX print at most 1,000 elements of an array: an entry edited past
# them (entry 2500 of 5000) changes no printout.

TABLE_SCALE = ("aclnnStatus aclnnTableScaleGetWorkspaceSize(const aclTensor *x, aclTensor *out, "
             "uint64_t *workspaceSize, aclOpExecutor **executor)")
X4 = np.arange(4, dtype=np.float32)


def tables(kind):
    """A 5,000-entry table and an equal copy and a copy with entry 2500 edited."""
    table = np.linspace(0, 1, 5000, dtype=np.float32)
    edited = table.copy()
    edited[2500] = -7.0
    as_kind = np.asarray if kind == "numpy" else jnp.asarray
    return as_kind(table), as_kind(table.copy()), as_kind(edited)


def table_declaration(table, where, name):
    """``declare`` with ``table`` closed over by the reference, or by the vjp."""
    if where == "reference":
        return aclnn.declare(TABLE_SCALE, lambda x: x * table[2500], name=name)
    return aclnn.declare(TABLE_SCALE, lambda x: 2 * x, name=name,
                         vjp=lambda inputs, outputs, cotangents: (cotangents * table[2500],))


@pytest.mark.parametrize("where", ["reference", "vjp"])
@pytest.mark.parametrize("kind", ["numpy", "jax"])
def test_declaring_again_over_a_large_table_with_one_entry_edited_is_refused(kind, where):
    table, equal, edited = tables(kind)
    name = unique("table_scale")
    op = table_declaration(table, where, name)
    # a cell run again with an equal table: the same operator
    assert table_declaration(equal, where, name).aclnn_operator is op.aclnn_operator
    with pytest.raises(ValueError, match=f"exists already, declared with another {where}"):
        table_declaration(edited, where, name)
    # the operator computes with the table it was declared with (NumPy's product)
    value = float(np.asarray(table)[2500])
    got = op(X4) if where == "reference" else jax.grad(lambda x: op(x).sum())(X4)
    np.testing.assert_array_equal(got, X4 * value if where == "reference" else
                                  np.full(4, value, np.float32))


def reads_the_global_table(x):
    return x * GLOBAL_TABLE[2500]


GLOBAL_TABLE = np.linspace(0, 1, 5000, dtype=np.float32)


def test_declaring_again_after_a_global_table_changed_is_refused(monkeypatch):
    name = unique("global_table")
    aclnn.declare(TABLE_SCALE, reads_the_global_table, name=name)
    edited = GLOBAL_TABLE.copy()
    edited[2500] = -7.0
    monkeypatch.setitem(globals(), "GLOBAL_TABLE", edited)
    with pytest.raises(ValueError, match="declared with another reference"):
        aclnn.declare(TABLE_SCALE, reads_the_global_table, name=name)


def run_cell(source: str, namespace: dict) -> None:
    """A notebook cell: ``source`` run in ``namespace`` (module ``__main__``)."""
    exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102


def test_a_cell_run_again_unchanged_is_the_same_operator():
    """A reference reading a notebook's config object (a class of its own,
    with no ``==``) and calling ``x.reshape`` while the notebook has a global
    named ``reshape`` (an attribute name, no global the code reads): the
    cell run again unchanged, after ``reshape`` was rebound, is the same
    operator; the config edited is refused."""
    name = unique("cell")
    cell = f"""
class Config:
    scale = 2.0
config = Config()
def ref(x):
    return x.reshape(x.shape) * config.scale
op = aclnn.declare(TABLE_SCALE, ref, name={name!r})
"""
    namespace = {"aclnn": aclnn, "TABLE_SCALE": TABLE_SCALE, "__name__": "__main__",
                 "reshape": 1}
    run_cell(cell, namespace)
    first = namespace["op"].aclnn_operator
    namespace["reshape"] = 2
    run_cell(cell, namespace)
    assert namespace["op"].aclnn_operator is first
    np.testing.assert_array_equal(namespace["op"](X4), 2 * X4)
    with pytest.raises(ValueError, match="declared with another reference"):
        run_cell(cell.replace("scale = 2.0", "scale = 3.0"), namespace)


# --- issue 44, LOW: declare's checks of dims ---------------------------------------

SCALE_HEADS = ("aclnnStatus aclnnScaleHeadsGetWorkspaceSize(const aclTensor *x, "
               "int64_t headNum, aclTensor *out, uint64_t *workspaceSize, "
               "aclOpExecutor **executor)")


@pytest.mark.parametrize("token", ["...", "1"])
def test_local_sizes_bound_to_ellipsis_or_one_is_refused_when_declared(token):
    with pytest.raises(ValueError, match=f"local_sizes binds 'headNum' to '{re.escape(token)}', "
                                         f"which is not a factor"):
        aclnn.declare(SCALE_HEADS, lambda x, *, headNum: x * headNum, name=unique("heads"),
                      dims="... n 1 -> ... n 1", local_sizes={"headNum": token})


def test_a_factor_twice_in_one_group_is_refused_when_declared():
    with pytest.raises(ValueError, match="factor 'a' names two dimensions of one tensor in 'a a'"):
        aclnn.declare(
            "aclnnStatus aclnnAddPairGetWorkspaceSize(const aclTensor *self, "
            "const aclTensor *other, aclTensor *out, uint64_t *workspaceSize, "
            "aclOpExecutor **executor)", lambda self, other: self + other,
            name=unique("add_pair"), dims="a a, a a -> a a")


RMS_NORM = ("aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, "
            "double epsilon, const aclTensor *yOut, const aclTensor *rstdOut, "
            "uint64_t *workspaceSize, aclOpExecutor **executor)")


def rms_norm_reference(x, gamma, *, epsilon):
    rstd = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + epsilon)
    return x * rstd * gamma, rstd


def test_a_rule_the_references_output_shapes_do_not_follow_is_a_value_error_when_traced():
    """rstd is (rows, 1); the rule calls its rows h, which the operands'
    16 x 16 hide until a shard's block has 8 rows (was XLA's 'INTERNAL:
    custom_partitioner' error when compiled)."""
    op = aclnn.declare(RMS_NORM, rms_norm_reference, outputs=("yOut", "rstdOut"),
                       library=LIBRARY, name=unique("rms_norm_lying"), dims="b h, h -> b h, h 1")
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("d",))
    x = jax.device_put(np.ones((16, 16), np.float32), NamedSharding(mesh, P("d")))
    with pytest.raises(ValueError, match=r"output rstdOut's group 'h 1'") as info:
        jax.jit(lambda x, g: op(x, g, epsilon=1e-6))(x, np.ones(16, np.float32))
    assert "factor 'b' of size 8, not 16" in str(info.value)


def test_replicated_none_is_no_factor():
    op = aclnn.declare(RMS_NORM, rms_norm_reference, outputs=("yOut", "rstdOut"),
                       name=unique("rms_norm_none"), dims="... h, h -> ... h, ... 1",
                       replicated=None)
    assert op.aclnn_operator.rule.replicated == frozenset()
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    y, _ = op(x, np.ones(8, np.float32), epsilon=1e-6)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6),
                               rtol=1e-5)
