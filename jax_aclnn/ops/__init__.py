"""The aclnn operators, one module each: the operator's primitive, its public
function and the differentiable forward operator(s) whose derivative runs it
(formulas in their docstrings).

Each differentiable operator is a ``jax.custom_jvp`` function: the forward
is plain ``jax.numpy`` (XLA fuses it); its tangent map is written with the
matching aclnn operator (or that operator's transpose: see the
documentation's :doc:`/transformations` page) so that

* reverse mode (``grad``, ``vjp``, ``jacrev``) runs the aclnn backward
  operator as one XLA FFI custom call per use, exactly as a hand-written VJP;
* forward mode (``jvp``, ``linearize``, ``jacfwd``) runs the same aclnn
  operator on the tangent (swish, silu, hardshrink, logit, smooth L1 with
  ``reduction="none"``: the tangent map is the operator; smooth L1
  ``"mean"``/``"sum"``: the operator then a sum; batch norm: the reduce
  operator on the tangent, then element-wise XLA code);
* higher orders (``hessian``, ``grad`` of ``grad``) differentiate those
  operators through their own JVP rules (second derivatives of the
  operators are XLA code), and every one of these composes with ``jit``,
  ``vmap`` (one custom call per operator use) and the sharding rules.

So each operator supports ``jit``, ``grad``, ``vjp``, ``jvp``,
``linearize``, ``jacfwd``, ``jacrev``, ``hessian``, ``vmap`` and derivatives
of any order; each docstring says which aclnn operator runs in each
direction.

Forward values follow ``torch.nn.functional`` of the same name;
half-precision inputs are computed in float32 and returned in their own
dtype.

The aclnn backward operators are linear in their incoming gradient:
the transpose there (reverse mode) and the JVP in it (forward mode) run the
aclnn operator again (except the transpose of ``batch_norm_reduce_backward``,
XLA code); the derivatives in their other operands are XLA code.

Arguments: tensors are float32, float16 or bfloat16 arrays (or Python
scalars, which take the arrays' dtype); an operator's scalar attributes
(``beta``, ``eps``, ``lambd``, ...) are static real numbers (a string such
as ``'1.5'`` is not): a traced value raises TypeError. Dtypes:

* an aclnn operator takes what CANN's operator takes: its tensors share one
  dtype, except ``batch_norm_reduce_backward``'s ``mean``, ``invstd`` and
  ``weight``, each in the input's dtype, float32 or float16 (mixed
  precision); another combination is a TypeError naming the dtypes;
* a differentiable operator with several tensor arguments follows JAX's
  type promotion (``smooth_l1_loss`` of bfloat16 predictions and a float32
  target is float32), except ``batch_norm``, whose output keeps its input's
  dtype whatever its parameters' (half activations with float32 weight and
  bias, as PyTorch AMP and Flax's ``param_dtype`` have them).
"""

from jax_aclnn import _primitive
from jax_aclnn._loading import _aclnn_ffi

# The operators register themselves as these imports create them.
from jax_aclnn.ops.smooth_l1_loss_backward import smooth_l1_loss, smooth_l1_loss_backward  # isort: skip
from jax_aclnn.ops.logit_grad import logit, logit_grad  # isort: skip
from jax_aclnn.ops.hardshrink_backward import hardshrink, hardshrink_backward  # isort: skip
from jax_aclnn.ops.swish_backward import silu, swish, swish_backward  # isort: skip
from jax_aclnn.ops.batch_norm_reduce_backward import batch_norm_reduce_backward  # isort: skip
from jax_aclnn.ops.batch_norm import batch_norm  # isort: skip
# new operators' modules: above this line

#: The names of the aclnn operators, which are also their public functions'
#: (``jax_aclnn.<name>``), e.g. ``"swish_backward"``: those of the compiled
#: operator list (csrc/operators.h), in its order (``import jax_aclnn``
#: refuses a build whose list is not this package's operators).
OPERATOR_NAMES: tuple[str, ...] = tuple(_aclnn_ffi.operators())

#: The operators' public functions (each operator and its differentiable
#: op(s)), all re-exported by ``jax_aclnn``.
__all__ = [
    "batch_norm",
    "batch_norm_reduce_backward",
    "hardshrink",
    "hardshrink_backward",
    "logit",
    "logit_grad",
    "silu",
    "smooth_l1_loss",
    "smooth_l1_loss_backward",
    "swish",
    "swish_backward",
    # new operators' functions: above this line
]


def primitive(name: str) -> _primitive.AclnnPrimitive:
    """The :class:`~jax_aclnn._primitive.AclnnPrimitive` of an operator, by function name."""
    return _primitive.OPERATORS[name]
