"""aclnnBatchNormReduceBackward: the per-channel reductions of the batch-norm backward."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.core import ShapedArray

from jax_aclnn import _checks, _compat
from jax_aclnn._arguments import ABSENT
from jax_aclnn._batching import batch_size, merged_shapes
from jax_aclnn._compat import not_mapped
from jax_aclnn._primitive import AclnnPrimitive


def _wanted(input_g: bool, weight_g: bool, bias_g: bool) -> tuple[bool, ...]:
    return (input_g, input_g, weight_g, bias_g)


def _output_dtypes(mean: Any, weight: Any, has_weight: bool) -> tuple[Any, ...]:
    """The dtypes of sum_dy, sum_dy_xmu (mean's), grad_weight and grad_bias
    (weight's, or mean's without one)."""
    w = weight.dtype if has_weight else mean.dtype
    return (mean.dtype, mean.dtype, w, w)


class BatchNormReduceBackward(AclnnPrimitive):
    """Operands: grad_out, input (N, C, ...), mean, invstd, weight (C,).

    ``weight`` is a zero-sized placeholder when ``has_weight`` is False;
    outputs whose mask flag is off are zero-sized placeholders. Each (C,)
    vector is in the input's dtype, float32 or float16 (mixed precision:
    float32 statistics and weight with a half-precision input, as CANN and
    ATen's ``batch_norm_backward_reduce`` take them); ``sum_dy`` and
    ``sum_dy_xmu`` have the dtype of ``mean``, ``grad_weight`` and
    ``grad_bias`` that of ``weight`` (of ``mean`` without one), as ATen
    gives them. On the NPU platform bfloat16 tensors are computed in float32
    (CANN's operator takes float32 and float16 only).
    """

    name = "batch_norm_reduce_backward"
    aclnn_name = "aclnnBatchNormReduceBackward"
    operand_names = ("grad_out", "input", "mean", "invstd", "weight")
    multiple_results = True
    npu_float32_dtypes = (jnp.dtype(jnp.bfloat16),)
    self_adjoint = False  # sums: the transpose broadcasts

    def arguments(self, *, has_weight, input_g, weight_g, bias_g):
        # An absent weight and the masked outputs are placeholders in the
        # custom call, null pointers for aclnn.
        wanted = dict(zip(("sumDy", "sumDyXmu", "gradWeight", "gradBias"),
                          _wanted(input_g, weight_g, bias_g)))
        return {"inputG": input_g, "weightG": weight_g, "biasG": bias_g,
                "weight": True if has_weight else ABSENT,
                **{name: ABSENT for name, w in wanted.items() if not w}}

    def abstract_eval(self, g, x, mean, invstd, weight, *, has_weight, input_g, weight_g, bias_g):
        channels = x.shape[1]
        return [ShapedArray((channels if w else 0,), dtype)
                for w, dtype in zip(_wanted(input_g, weight_g, bias_g),
                                    _output_dtypes(mean, weight, has_weight))]

    def reference(self, g, x, mean, invstd, weight, *, has_weight, input_g, weight_g, bias_g):
        axes = (0,) + tuple(range(2, x.ndim))
        bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        gf = g.astype(jnp.float32)
        xmu = x.astype(jnp.float32) - mean.astype(jnp.float32).reshape(bshape)
        sum_dy = gf.sum(axes)
        sum_dy_xmu = (gf * xmu).sum(axes)
        values = (sum_dy, sum_dy_xmu, sum_dy_xmu * invstd.astype(jnp.float32), sum_dy)
        return [v.astype(dtype) if w else jnp.zeros((0,), dtype)
                for v, w, dtype in zip(values, _wanted(input_g, weight_g, bias_g),
                                       _output_dtypes(mean, weight, has_weight))]

    def transpose_reference(self, cts, others, shape, dtype, *, has_weight, input_g, weight_g,
                            bias_g):
        # Each result is a per-channel sum of grad_out times a factor (1,
        # x - mean or (x - mean) * invstd): its transpose broadcasts the
        # cotangent times that factor.
        x, mean, invstd, _ = others
        bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        ch = lambda v: v.astype(jnp.float32).reshape(bshape)  # noqa: E731
        xmu = x.astype(jnp.float32) - ch(mean)
        ct_sum_dy, ct_sum_dy_xmu, ct_weight, ct_bias = cts
        out = jnp.zeros(shape, jnp.float32)
        if input_g:
            out = out + ch(ct_sum_dy) + xmu * ch(ct_sum_dy_xmu)
        if weight_g:
            out = out + xmu * ch(ct_weight.astype(jnp.float32) * invstd.astype(jnp.float32))
        if bias_g:
            out = out + ch(ct_bias)
        return out.astype(dtype)

    def dims(self, in_avals, out_avals, **params):
        # The channel factor is kept; every other data dimension is summed
        # over (the results lack it: sharded, they are psum-ed).
        data = " ".join(["n", "c"] + [f"s{i}" for i in range(2, in_avals[0].ndim)])
        return f"{data}, {data}, c, c, c -> c, c, c, c"

    def placeholders(self, *, has_weight, input_g, weight_g, bias_g):
        return (frozenset() if has_weight else frozenset({4}),
                frozenset(i for i, w in enumerate(_wanted(input_g, weight_g, bias_g)) if not w))

    def bind_merged(self, operands, **params):
        # Past aclnn's rank limit: grad_out and input keep dims 0 and 1 (the
        # channels), the dims after them merge (a sharded one stays whole).
        g, x, *vectors = operands
        sharded = frozenset(i - 2 for i in _compat.sharded_dims(g) | _compat.sharded_dims(x)
                            if i >= 2)
        (tail,) = merged_shapes(self.name, ("input",), [x.shape[2:]], sharded)
        shape = tuple(x.shape[:2]) + tail
        if len(shape) > _checks.MAX_RANK:
            raise ValueError(
                f"{self.name}: input of shape {x.shape} has {len(tail)} sharded dimensions "
                f"after dim 1 that cannot be merged; the aclnn operator takes rank at most "
                f"{_checks.MAX_RANK}")
        return self.bind(g.reshape(shape), x.reshape(shape), *vectors, **params)

    def batch(self, args, dims, **params):
        # Fold the mapped axis B into the channel axis, so that one call
        # computes every example's per-channel sums: (N, C, ...) operands
        # become (N, B*C, ...) and (C,) vectors (B*C,). Where the channel
        # axis is sharded (explicit sharding) the channels stay the
        # majormost part of the fold, (N, C*B, ...), as a reshape keeps a
        # sharding only on a merged dimension's majormost part; a sharded
        # batch axis is gathered first if both are.
        size = batch_size(args, dims)
        g, x, mean, invstd, weight = (
            jnp.broadcast_to(a, (size,) + a.shape) if d is not_mapped else jnp.moveaxis(a, d, 0)
            for a, d in zip(args, dims))
        batch_spec, channel_spec = _compat.dim_specs(x)[0], _compat.dim_specs(x)[2]
        if channel_spec is not None and batch_spec is not None:
            g, x = (jax.sharding.reshard(a, jax.sharding.PartitionSpec(None, *_compat.dim_specs(a)[1:]))
                    for a in (g, x))
        channels_first = channel_spec is not None

        def fold_data(a):
            a = jnp.moveaxis(a, 0, 2) if channels_first else jnp.moveaxis(a, 0, 1)
            spec = _compat.dim_specs(a)
            return _compat.reshape(a, (a.shape[0], a.shape[1] * a.shape[2]) + a.shape[3:],
                                   (spec[0], spec[1]) + spec[3:])

        def fold_channels(a):
            a = a.T if channels_first else a
            return _compat.reshape(a, (a.size,), (_compat.dim_specs(a)[0],))

        outs = self.bind(fold_data(g), fold_data(x), fold_channels(mean), fold_channels(invstd),
                         fold_channels(weight) if params["has_weight"] else args[4],  # placeholder
                         **params)
        result, out_dims = [], []
        for o in outs:
            if o.shape[0] == 0:
                result.append(o)
                out_dims.append(not_mapped)
            elif channels_first:  # (C, B), the batch sharded again as it came
                o = _compat.reshape(o, (o.size // size, size), (channel_spec, None))
                if batch_spec is not None:
                    o = jax.sharding.reshard(o, jax.sharding.PartitionSpec(channel_spec, batch_spec))
                result.append(o)
                out_dims.append(1)
            else:
                result.append(o.reshape(size, -1))
                out_dims.append(0)
        return result, out_dims


_op = BatchNormReduceBackward()


def batch_norm_reduce_backward(
    grad_out: Any,
    input: Any,  # noqa: A002 - PyTorch/aclnn argument name
    mean: Any,
    invstd: Any,
    weight: Any | None,
    *,
    input_g: bool = True,
    weight_g: bool = True,
    bias_g: bool = True,
) -> tuple[jax.Array | None, jax.Array | None, jax.Array | None, jax.Array | None]:
    """Per-channel reductions of the batch-norm backward (aclnnBatchNormReduceBackward).

    The channel axis is dim 1 (aclnn/PyTorch layout); sums run over every
    other axis: ``sum_dy = sum(g)``, ``sum_dy_xmu = sum(g * (x - mean))``,
    ``grad_weight = sum_dy_xmu * invstd``, ``grad_bias = sum_dy``. These are
    sums, not means, as in ATen's ``batch_norm_backward_reduce``. Half-precision
    inputs are accumulated in float32. Mixed precision as CANN takes it:
    ``mean``, ``invstd`` and ``weight`` may each be float32 or float16
    whatever the input's dtype (e.g. float16 ``grad_out``/``input`` with
    float32 statistics and weight, PyTorch AMP's layout); they are read,
    and the sums formed, in float32, never rounded through half precision.
    On the NPU platform bfloat16 tensors are cast to float32 before the
    call and the results back (CANN's operator takes float32 and float16);
    the bundled host provider (the CPU) takes bfloat16 directly.

    Args:
      grad_out: gradient of the batch-norm output, shape ``(N, C, ...)``.
      input: the batch-norm input, same shape as ``grad_out``, rank >= 2,
        ``C >= 1`` (past rank 8, aclnn's limit, the dims after dim 1 are merged
        for the call).
      mean: the per-channel mean used in the forward, shape ``(C,)``, in
        the input's dtype, float32 or float16.
      invstd: the per-channel ``1 / sqrt(var + eps)``, shape ``(C,)``, same
        dtypes allowed.
      weight: the scale, shape ``(C,)`` (same dtypes allowed), or None (ones).
      input_g: compute ``sum_dy`` and ``sum_dy_xmu``.
      weight_g: compute ``grad_weight``.
      bias_g: compute ``grad_bias``.

    Returns:
      ``(sum_dy, sum_dy_xmu, grad_weight, grad_bias)``, each of shape
      ``(C,)``, or None where its mask flag is False: ``sum_dy`` and
      ``sum_dy_xmu`` in ``mean``'s dtype, ``grad_weight`` and ``grad_bias``
      in ``weight``'s (``mean``'s when ``weight`` is None), as ATen's
      ``batch_norm_backward_reduce`` gives them.

    Transformations: all (:mod:`jax_aclnn.ops`); linear in ``grad_out``,
    but not its own transpose: the transpose there (reverse mode)
    broadcasts and scales the cotangents in XLA code (``batch_norm``'s
    forward mode uses it, and reverse mode turns it back into this
    operator).

    Raises:
      TypeError: ``grad_out`` or ``input`` is not float32/float16/bfloat16
        or their dtypes differ, ``mean``/``invstd``/``weight`` is in a
        dtype other than the input's, float32 or float16, or a mask flag is
        not a bool.
      ValueError: shapes break the rule above.
    """
    op = _op.name
    masks = {name: _checks.flag(op, name, value)
             for name, value in (("input_g", input_g), ("weight_g", weight_g), ("bias_g", bias_g))}
    g, x = _checks.float_arrays(op, grad_out=grad_out, input=input)
    vectors = {name: _checks.channel_vector(op, name, value, x.dtype)
               for name, value in (("mean", mean), ("invstd", invstd), ("weight", weight))
               if name != "weight" or value is not None}
    if x.ndim < 2:
        raise ValueError(f"{op}: input must have rank >= 2, got shape {x.shape}")
    _checks.same_shape(op, ("grad_out", "input"), (g, x))
    channels = x.shape[1]
    if channels < 1:
        raise ValueError(f"{op}: input needs C >= 1 channels (dim 1), got shape {x.shape}")
    for name, a in vectors.items():
        if a.shape != (channels,):
            raise ValueError(
                f"{op}: {name} must have shape ({channels},) for input of shape "
                f"{x.shape}; got {a.shape}"
            )
    return reduce_backward(g, x, vectors["mean"], vectors["invstd"], vectors.get("weight"),
                           **masks)


def reduce_backward(g: jax.Array, x: jax.Array, mean: jax.Array, invstd: jax.Array,
                    weight: jax.Array | None, *, input_g: bool, weight_g: bool,
                    bias_g: bool) -> tuple[jax.Array | None, ...]:
    """The operator on checked arrays, with None for the outputs not wanted."""
    w = weight if weight is not None else jnp.zeros((0,), mean.dtype)
    outs = _op.bind(g, x, mean, invstd, w, has_weight=weight is not None,
                    input_g=input_g, weight_g=weight_g, bias_g=bias_g)
    wanted = _wanted(input_g, weight_g, bias_g)
    return tuple(o if keep else None for o, keep in zip(outs, wanted))
