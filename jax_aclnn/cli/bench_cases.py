"""One ``bench`` case: an operator at a size and dtype, its inputs, its
baselines (XLA's code for the same formula, PyTorch's ATen kernel) and the
paired timings of the three. Used by ``bench`` in its own process and by the
realistic mode's measuring process (:mod:`jax_aclnn.cli.training_state`)."""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jax_aclnn as aclnn
from jax_aclnn import nn

#: PyTorch, once :func:`import_torch` has run (None where not installed).
torch: Any = None


def bn_shape(size: int, channels: int) -> tuple[int, int, int]:
    """A realistic (N, C, H*W) shape of about ``size`` elements."""
    c = min(channels, max(16, size // 64))
    inner = 64 if size >= 64 * c else 1
    return (max(1, size // (c * inner)), c, inner)


@dataclass(frozen=True)
class ElementwiseCase:
    """How to measure one element-wise operator."""

    operands: tuple[tuple[bool, float, float], ...]  # (full size, not a scalar; low, high)
    kwargs: dict[str, Any]  # of the jax_aclnn function
    aten: Callable[[list[Any]], Any] | None  # the ATen kernel on torch tensors, if any


ELEMENTWISE = {
    "smooth_l1_loss_backward": ElementwiseCase(
        ((False, -3, 3), (True, -3, 3), (True, -3, 3)), {"reduction": "mean", "beta": 1.0},
        lambda t: torch.ops.aten.smooth_l1_loss_backward(*t, 1, 1.0)),
    "logit_grad": ElementwiseCase(
        ((True, 0.01, 0.99), (True, -3, 3)), {"eps": 1e-6},
        lambda t: torch.ops.aten.logit_backward(t[1], t[0], 1e-6)),
    "hardshrink_backward": ElementwiseCase(
        ((True, -3, 3), (True, -3, 3)), {"lambd": 0.5},
        lambda t: torch.ops.aten.hardshrink_backward(t[0], t[1], 0.5)),
    "swish_backward": ElementwiseCase(
        ((True, -3, 3), (True, -3, 3)), {"beta": 1.0},
        lambda t: torch.ops.aten.silu_backward(t[0], t[1])),
}


#: Row length of the catalogue's cases (an LLM's hidden size; SwiGLU's
#: input rows are twice it).
HIDDEN = 1024


def _rms_norm_torch(t, grad=False):
    x, w = t[:2]
    if not grad:
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    y = torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)
    return torch.autograd.grad(y, (x, w), t[2])


def _swiglu_torch(t, grad=False):
    x = t[0].detach().requires_grad_(grad)
    a, b = x.chunk(2, dim=-1)
    y = torch.nn.functional.silu(a) * b
    return torch.autograd.grad(y, (x,), t[1]) if grad else y


def _vjp(f: Callable[..., Any]) -> Callable[..., Any]:
    """The gradient of ``f``'s primals for a cotangent (the last argument):
    forward and backward, as a training step runs them."""
    return lambda *a: jax.vjp(f, *a[:-1])[1](a[-1])


def _rotate_torch(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def _rope_torch(t, grad=False):
    x, c, s = (a.detach().requires_grad_(grad) for a in t[:3])
    y = x * c + _rotate_torch(x) * s
    return torch.autograd.grad(y, (x, c, s), t[3]) if grad else y


def _cross_entropy_torch(t, grad=False):
    x = t[0].detach().requires_grad_(grad)
    loss = torch.nn.functional.cross_entropy(x, t[1], reduction="none")
    return torch.autograd.grad(loss, (x,), t[2]) if grad else loss


#: RoPE's head size and heads, and the cross entropy's classes (a
#: vocabulary), of the catalogue's cases.
HEAD, HEADS, CLASSES = 128, 8, 32000


def _rope_args(size, arr, rng):
    """x (1, S, N, 128) of ``size`` elements, cos and sin (1, S, 1, 128)."""
    heads = min(HEADS, max(1, size // HEAD))
    seq = max(1, size // (heads * HEAD))
    angles = arr((1, seq, 1, HEAD), 0.0, 6.3)
    return arr((1, seq, heads, HEAD)), jnp.cos(angles), jnp.sin(angles)


def _cross_entropy_args(size, arr, rng):
    """logits (rows, 32000) of ``size`` elements (fewer: one row), int32 labels."""
    classes = min(size, CLASSES)
    rows = max(1, size // classes)
    return arr((rows, classes)), jnp.asarray(rng.integers(0, classes, size=rows), jnp.int32)


@dataclass(frozen=True)
class CatalogueCase:
    """How to measure one jax_aclnn.nn function on ``(rows, HIDDEN)`` rows
    (``(rows, 2 * HIDDEN)`` for SwiGLU; ``make``'s arguments where given),
    forward or its gradient."""

    fn: Callable[..., Any]  # of (x, weight) or (x,), and a cotangent for gradients
    weight: bool  # a (HIDDEN,) weight after x
    grad: bool
    aten: Callable[..., Any]  # PyTorch's kernels, on torch tensors
    moved: float  # elements read and written, in x's elements
    #: (size, arr, rng) -> the arguments (x first), for functions of other shapes
    make: Callable[..., tuple[Any, ...]] | None = None
    #: the cotangent's shape from the arguments' (a gradient's)
    cotangent: Callable[[tuple[Any, ...]], tuple[int, ...]] | None = None


#: The catalogue's functions the host provider runs (``nn.<function>``:
#: its forward; ``nn.<function>_grad``: forward and backward for a random
#: cotangent), against the same function on its reference path (XLA's code
#: for the formula) and PyTorch's kernels (``F.rms_norm``; ``F.silu(a) * b``;
#: the rotate-half formula; ``F.cross_entropy``), the gradients by autograd.
CATALOGUE = {
    "nn.rms_norm": CatalogueCase(lambda x, w: nn.rms_norm(x, w), True, False,
                                 _rms_norm_torch, 2),
    "nn.rms_norm_grad": CatalogueCase(_vjp(lambda x, w: nn.rms_norm(x, w)), True, True,
                                      lambda t: _rms_norm_torch(t, True), 3),
    "nn.swiglu": CatalogueCase(lambda x: nn.swiglu(x), False, False, _swiglu_torch, 1.5),
    "nn.swiglu_grad": CatalogueCase(_vjp(lambda x: nn.swiglu(x)), False, True,
                                    lambda t: _swiglu_torch(t, True), 2.5),
    "nn.rotary_embedding": CatalogueCase(lambda x, c, s: nn.rotary_embedding(x, c, s), False,
                                         False, _rope_torch, 2, _rope_args),
    "nn.rotary_embedding_grad": CatalogueCase(
        _vjp(lambda x, c, s: nn.rotary_embedding(x, c, s)), False, True,
        lambda t: _rope_torch(t, True), 3, _rope_args, lambda a: a[0].shape),
    "nn.softmax_cross_entropy_with_integer_labels": CatalogueCase(
        lambda x, y: nn.softmax_cross_entropy_with_integer_labels(x, y), False, False,
        _cross_entropy_torch, 2, _cross_entropy_args),
    "nn.softmax_cross_entropy_with_integer_labels_grad": CatalogueCase(
        lambda x, y, g: jax.vjp(  # the logits' gradient (the labels have none)
            lambda x: nn.softmax_cross_entropy_with_integer_labels(x, y), x)[1](g), False, True,
        lambda t: _cross_entropy_torch(t, True), 4, _cross_entropy_args, lambda a: a[1].shape),
}


def catalogue_case(op: str, size: int, dtype: Any, rng: np.random.Generator):
    """:func:`make_case` of a :data:`CATALOGUE` entry: x of ``size``
    elements in rows of its hidden size (fewer elements: one row)."""
    case = CATALOGUE[op]

    def arr(shape, lo=-3.0, hi=3.0):
        return jnp.asarray(rng.uniform(lo, hi, size=shape).astype(np.float32)).astype(dtype)

    if case.make is not None:
        args = case.make(size, arr, rng)
        shape = args[0].shape
        args += (arr(case.cotangent(args)),) if case.grad else ()
    else:
        cols = (1 if case.weight else 2) * HIDDEN
        shape = (max(1, size // cols), min(size, cols))
        out_shape = shape if case.weight else (shape[0], shape[1] // 2)
        args = (arr(shape),) + ((arr(shape[-1:], 0.5, 1.5),) if case.weight else ())
        args += (arr(out_shape),) if case.grad else ()
    ours = jax.jit(case.fn)
    xla = on_reference_path(case.fn, args)
    return ours, xla, case.aten, args, case.moved * np.prod(shape) * jnp.dtype(dtype).itemsize


def elementwise_case(op: str) -> ElementwiseCase:
    """``op``'s entry in ``ELEMENTWISE``; for an element-wise operator without
    one, full-size operands in [-3, 3] (one per positional parameter of its
    function), its default attributes and no ATen kernel (its torch column
    shows "-")."""
    if op in ELEMENTWISE:
        return ELEMENTWISE[op]
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = inspect.signature(getattr(aclnn, op)).parameters.values()
    return ElementwiseCase(((True, -3, 3),) * sum(p.kind in positional for p in params), {}, None)


def on_reference_path(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """``fn`` jitted and compiled for ``args`` with every operator on its
    pure-JAX reference path (:func:`jax_aclnn.reference_path`): the
    operators' own ``jax.numpy`` formulas, compiled by XLA. A jit of its
    own: a trace is cached per function, whatever the path."""
    with aclnn.reference_path():
        return jax.jit(lambda *a: fn(*a)).lower(*args).compile()


def make_case(op: str, size: int, dtype: Any, channels: int, rng: np.random.Generator):
    """(aclnn fn, xla fn, torch fn or None, jax args, bytes moved)."""
    def arr(shape, lo=-3.0, hi=3.0):
        return jnp.asarray(rng.uniform(lo, hi, size=shape).astype(np.float32)).astype(dtype)

    item = jnp.dtype(dtype).itemsize
    if op in CATALOGUE:
        return catalogue_case(op, size, dtype, rng)
    if op == "batch_norm_reduce_backward":
        shape = bn_shape(size, channels)
        c = shape[1]
        args = (arr(shape), arr(shape), arr((c,), -0.1, 0.1), arr((c,), 0.5, 2.0), arr((c,)))
        ours = jax.jit(lambda *a: aclnn.batch_norm_reduce_backward(*a))
        xla = on_reference_path(aclnn.batch_norm_reduce_backward, args)

        def torch_fn(t):  # ATen has no CPU kernel of its own: its reductions
            g, x, m, s, _ = t
            dims = (0, 2)
            sdy = g.sum(dims, dtype=torch.float32)
            sxmu = (g.float() * (x.float() - m.float()[None, :, None])).sum(dims)
            return sdy, sxmu, sxmu * s.float(), sdy

        return ours, xla, torch_fn, args, 2 * np.prod(shape) * item
    case = elementwise_case(op)
    args = tuple(arr((size,) if full else (), lo, hi) for full, lo, hi in case.operands)
    ours = jax.jit(lambda *a: getattr(aclnn, op)(*a, **case.kwargs))
    xla = on_reference_path(lambda *a: getattr(aclnn, op)(*a, **case.kwargs), args)
    return ours, xla, case.aten, args, (sum(full for full, _, _ in case.operands) + 1) * size * item


def case_bytes(op: str, size: int) -> int:
    """About the peak memory of measuring one case: the inputs, their torch
    copies and three outputs, each counted as float32, and the float64 draw
    of the random inputs."""
    if op in CATALOGUE:  # x and a cotangent of its size at most
        full = 2
    else:
        full = 2 if op == "batch_norm_reduce_backward" else sum(f for f, _, _ in elementwise_case(op).operands)
    return size * (8 + 4 * (2 * full + 3))


def to_torch(a: jax.Array):
    if jnp.issubdtype(a.dtype, jnp.integer):  # class labels
        return torch.from_numpy(np.array(a)).long()
    t = torch.from_numpy(np.array(a.astype(jnp.float32)))
    return t.to({"float32": torch.float32, "float16": torch.float16,
                 "bfloat16": torch.bfloat16}[str(a.dtype)])


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def check(ours_out, xla_out, dtype) -> None:
    tol = float(jnp.finfo(dtype).eps) ** (2 / 3) * 4
    for a, b in zip(jax.tree.leaves(ours_out), jax.tree.leaves(xla_out)):
        a = np.asarray(a.astype(jnp.float32), np.float64)
        b = np.asarray(b.astype(jnp.float32), np.float64)
        scale = max(1.0, float(np.abs(b).max(initial=0.0)))
        if not np.allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True):
            raise SystemExit(f"outputs disagree with XLA's (max error {np.nanmax(np.abs(a - b))})")


def paired(fns: dict[str, Callable[[], Any]], repeats: int,
           one_time: Callable[[Callable[[], Any]], float]) -> dict[str, list[float]]:
    """``repeats`` times of each contender, ``one_time(fn)`` each, paired and
    interleaved: each contender goes first in turn."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns)
    for i in range(repeats):
        for k in order[i % len(order):] + order[: i % len(order)]:
            times[k].append(one_time(fns[k]))
    return times


def measure(op: str, size: int, dtype: Any, args: argparse.Namespace, rng) -> dict[str, Any]:
    """One case's row: the median times (``<contender>_s``), aclnn's range,
    and the medians of the paired ratios (``vs_xla``, ``vs_torch``) of the
    bursts; the same of the alternating calls with an ``_alt`` suffix."""
    ours, xla, torch_fn, inputs, nbytes = make_case(op, size, dtype, args.bn_channels, rng)
    check(ours(*inputs), xla(*inputs), dtype)
    fns = {"aclnn": lambda: ours(*inputs), "xla": lambda: xla(*inputs)}
    if torch is not None and torch_fn is not None:
        tin = [to_torch(a) for a in inputs]
        fns["torch"] = lambda: torch_fn(tin)
    for fn in fns.values():  # warm-up
        for _ in range(2):
            timed(fn)
    # Bursts: one time per repeat and contender, the median call of
    # args.burst calls in a row, as calls follow each other within a
    # program. Alternating: one call per repeat and contender, as an eager
    # loop or a debugging session calls operators between other work: a
    # library's threads sleep while another library runs, so such a call
    # also pays for waking them (at 64K elements, a call that takes 27 us
    # in a burst took 72 us right after PyTorch's).
    bursts = paired(fns, args.repeats, lambda fn: statistics.median(timed(fn) for _ in range(args.burst)))
    alternating = paired(fns, args.repeats * args.burst, timed)  # as many calls as the bursts
    row = {"op": op, "size": size, "dtype": str(jnp.dtype(dtype)), "bytes": int(nbytes)}
    for suffix, times in (("", bursts), ("_alt", alternating)):
        for k, ts in times.items():
            row[f"{k}{suffix}_s"] = statistics.median(ts)
            if k != "aclnn":
                row[f"vs_{k}{suffix}"] = statistics.median(b / a for a, b in zip(times["aclnn"], ts))
    row["aclnn_min_s"], row["aclnn_max_s"] = min(bursts["aclnn"]), max(bursts["aclnn"])
    row["aclnn_gbps"] = nbytes / row["aclnn_s"] / 1e9
    return row


def import_torch() -> None:
    """Sets ``torch`` to PyTorch, or to None where it is not installed."""
    global torch
    # PyTorch's OpenMP threads otherwise spin for a while after each of its
    # calls, taking the cores from whatever is measured next.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import torch  # noqa: F401
    except ImportError:
        torch = None
