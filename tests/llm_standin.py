"""The catalogue through the test provider's aclnn operators, in a process
of its own: the provider (csrc/testing/) laid out as a CANN toolkit and the
CPU platform routed through it, as on an NPU every call goes to CANN. Used
by tests/test_nn_standin.py, which runs these functions in a spawned process
(CANN loads once per process)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn.functional as F

import jax_aclnn as aclnn
from declared_operators import LIBRARY
from jax_aclnn import _loading
from jax_aclnn import nn

#: The catalogue's aclnn operators.
OPERATORS = ("aclnnRmsNorm", "aclnnRmsNormGrad", "aclnnAddRmsNorm", "aclnnSwiGlu",
             "aclnnSwiGluGrad", "aclnnRotaryPositionEmbedding",
             "aclnnRotaryPositionEmbeddingGrad", "aclnnCrossEntropyLoss",
             "aclnnCrossEntropyLossGrad", "aclnnApplyAdamWV2")


def route_through_the_test_provider() -> None:
    lib64 = Path(tempfile.mkdtemp()) / "lib64"
    lib64.mkdir()
    for name in ("libopapi.so", "libnnopbase.so", "libascendcl.so"):
        (lib64 / name).symlink_to(LIBRARY)
    aclnn.load_cann(lib64.parent)
    _loading._aclnn_ffi.route_cpu_through_cann(True)


def calls() -> dict[str, int]:
    stats = aclnn.runtime_stats()["calls"]
    return {op: stats.get(op, {"execute": 0})["execute"] for op in OPERATORS}


def t64(a):
    return torch.from_numpy(np.asarray(a, np.float64)).requires_grad_(True)


def close(a, b, tol=2e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=tol, atol=tol)


def check_functions() -> dict[str, int]:
    """Each function's value and gradient through the aclnn operators equal
    PyTorch's (and float64 RoPE); returns the operators' call counts."""
    route_through_the_test_provider()
    aclnn.reset_runtime_stats()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 2, 8)).astype(np.float32)
    w = (1 + 0.1 * rng.normal(size=8)).astype(np.float32)
    tx, tw = t64(x), t64(w)
    # rms_norm, add_rms_norm
    y, (gx, gw) = jax.jit(jax.value_and_grad(lambda x, w: jnp.sum(jnp.sin(nn.rms_norm(x, w))),
                                             (0, 1)))(x, w)
    ty = torch.sin(F.rms_norm(tx, (8,), tw, eps=1e-6)).sum()
    ty.backward()
    close(y, ty.item()), close(gx, tx.grad), close(gw, tw.grad, 1e-4)
    (a, s), _ = jax.jit(lambda x: (nn.add_rms_norm(x, 2 * x, w), 0))(x)
    close(a, F.rms_norm(torch.from_numpy(3 * x).double(), (8,), torch.from_numpy(w).double(),
                        eps=1e-6).numpy()), close(s, 3 * x)
    # swiglu
    g = jax.jit(jax.grad(lambda x: jnp.sum(nn.swiglu(x) ** 2)))(x)
    tx2 = t64(x)
    a2, b2 = torch.chunk(tx2, 2, -1)
    ((F.silu(a2) * b2) ** 2).sum().backward()
    close(g, tx2.grad)
    # rotary_embedding (cos/sin gradients too)
    cos, sin = (rng.normal(size=(1, 6, 1, 8)).astype(np.float32) for _ in range(2))
    for mode in ("half", "interleave"):
        out, grads = jax.jit(jax.value_and_grad(
            lambda *a: jnp.sum(nn.rotary_embedding(*a, mode=mode) * x), (0, 1, 2)))(x, cos, sin)
        with aclnn.reference_path():
            want = jax.value_and_grad(lambda *a: jnp.sum(nn.rotary_embedding(*a, mode=mode) * x),
                                      (0, 1, 2))(x, cos, sin)
        for u, v in zip(jax.tree.leaves((out, grads)), jax.tree.leaves(want)):
            close(u, v, 1e-4)
    # cross entropy
    logits = rng.normal(size=(5, 7)).astype(np.float32)
    labels = rng.integers(0, 7, 5).astype(np.int32)
    loss, g = jax.jit(jax.value_and_grad(lambda l: jnp.sum(
        nn.softmax_cross_entropy_with_integer_labels(l, labels) ** 2)))(logits)
    tl = t64(logits)
    tloss = (F.cross_entropy(tl, torch.from_numpy(labels).long(), reduction="none") ** 2).sum()
    tloss.backward()
    close(loss, tloss.item()), close(g, tl.grad)
    return calls()


def check_model() -> tuple[list[float], list[float], dict[str, int], dict[str, int]]:
    """The model of tests/llm_model.py trained through the aclnn operators
    and written with Flax/optax/jax.numpy: both losses, the aclnn calls, and
    the compiled step's aclnn custom calls by target."""
    import llm_model as m

    route_through_the_test_provider()
    aclnn.reset_runtime_stats()
    ours, _ = m.train(m.ACLNN, steps=4)
    counted = calls()
    theirs, _ = m.train(m.PLAIN, steps=4)
    model, optimizer = m.make(m.ACLNN)
    x, y = next(m.batches(1))
    hlo = m.train_step.lower(model, optimizer, x, y).compile().as_text()
    targets = {}
    for line in hlo.splitlines():
        if 'custom_call_target="aclnn_' in line:
            t = line.split('custom_call_target="')[1].split('"')[0]
            targets[t] = targets.get(t, 0) + 1
    return ours, theirs, counted, targets


def check_sharded_step() -> tuple[str, float, float]:
    """The model's step with the batch sharded over 4 devices: its compiled
    text and its first loss, and the first loss on one device."""
    import llm_model as m
    from flax import nnx
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    route_through_the_test_provider()
    x, y = next(m.batches(1, batch=8))
    model, optimizer = m.make(m.ACLNN)
    single = float(m.train_step(model, optimizer, x, y))
    mesh = jax.make_mesh((4,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    model, optimizer = m.make(m.ACLNN)
    data = NamedSharding(mesh, P("data"))
    xs, ys = jax.device_put(x, data), jax.device_put(y, data)
    hlo = m.train_step.lower(model, optimizer, xs, ys).compile().as_text()
    sharded = float(m.train_step(model, optimizer, xs, ys))
    del nnx
    return hlo, single, sharded


def check_attention() -> dict[str, int]:
    """dot_product_attention through aclnnFlashAttentionScore(Grad) equals
    jax.nn.dot_product_attention (values and gradients; causal, masked,
    grouped-query, biased), in a shard_map over heads too (each device's
    call with its local head count); returns the operators' call counts."""
    from jax.sharding import PartitionSpec as P

    route_through_the_test_provider()
    aclnn.reset_runtime_stats()
    rng = np.random.default_rng(0)
    for n, k, causal, masked, biased in [(4, 4, False, False, False), (4, 2, True, False, False),
                                         (4, 1, False, True, True), (4, 4, True, True, False)]:
        q = rng.normal(size=(2, 5, n, 8)).astype(np.float32)
        kk, v = (rng.normal(size=(2, 7, k, 8)).astype(np.float32) for _ in range(2))
        mask = None
        if masked:
            mask = rng.random((2, 1, 5, 7)) > 0.3
            mask[..., 0] = True  # no query without a key
        bias = rng.normal(size=(1, n, 5, 7)).astype(np.float32) if biased else None

        def loss(attention, q, kk, v, bias):
            return jnp.sum(jnp.sin(attention(q, kk, v, bias, mask, is_causal=causal)))

        argnums = (1, 2, 3, 4) if biased else (1, 2, 3)
        ours = jax.jit(jax.value_and_grad(loss, argnums), static_argnums=0)(
            nn.dot_product_attention, q, kk, v, bias)
        want = jax.value_and_grad(loss, argnums)(jax.nn.dot_product_attention, q, kk, v, bias)
        for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(want)):
            close(a, b, 2e-5)
    # an additive mask of float32's minimum hiding every key from query 0 (the
    # pse once overflowed to -inf: NaN in every key's gradient)
    bias = np.zeros((5, 7), np.float32)
    bias[0] = np.finfo(np.float32).min
    q = rng.normal(size=(2, 5, 4, 8)).astype(np.float32)
    kk, v = (rng.normal(size=(2, 7, 2, 8)).astype(np.float32) for _ in range(2))
    masked_loss = lambda attention: lambda q, kk, v: jnp.sum(  # noqa: E731
        jnp.sin(attention(q, kk, v, bias)[:, 1:]))
    ours = jax.jit(jax.value_and_grad(masked_loss(nn.dot_product_attention), (0, 1, 2)))(q, kk, v)
    want = jax.value_and_grad(masked_loss(jax.nn.dot_product_attention), (0, 1, 2))(q, kk, v)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(want)):
        close(a, b, 2e-5)
    mesh = jax.make_mesh((4,), ("heads",), axis_types=(jax.sharding.AxisType.Auto,))
    q, kk, v = (rng.normal(size=(2, 5, 8, 8)).astype(np.float32) for _ in range(3))
    local = jax.jit(jax.shard_map(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True),
                                  mesh=mesh, in_specs=P(None, None, "heads"),
                                  out_specs=P(None, None, "heads")))
    close(local(q, kk, v), jax.nn.dot_product_attention(q, kk, v, is_causal=True), 2e-5)
    stats = aclnn.runtime_stats()["calls"]
    return {op: stats[op]["execute"] for op in ("aclnnFlashAttentionScore",
                                                 "aclnnFlashAttentionScoreGrad")}


def check_ragged_dot() -> dict[str, int]:
    """ragged_dot through aclnnGroupedMatmulV4 (64-bit group sizes, as CANN
    takes them) equals jax.lax.ragged_dot, values and gradients."""
    route_through_the_test_provider()
    jax.config.update("jax_enable_x64", True)
    try:
        aclnn.reset_runtime_stats()
        rng = np.random.default_rng(0)
        lhs = rng.normal(size=(10, 4)).astype(np.float32)
        rhs = rng.normal(size=(3, 4, 5)).astype(np.float32)
        sizes = np.array([3, 0, 5], np.int64)
        loss = lambda dot: lambda a, b: jnp.sum(jnp.sin(dot(a, b, sizes)))  # noqa: E731
        ours = jax.jit(jax.value_and_grad(loss(nn.ragged_dot), (0, 1)))(lhs, rhs)
        want = jax.value_and_grad(loss(jax.lax.ragged_dot), (0, 1))(lhs, rhs)
        for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(want)):
            close(a, b)
        return {"aclnnGroupedMatmulV4": aclnn.runtime_stats()["calls"]["aclnnGroupedMatmulV4"]["execute"]}
    finally:
        jax.config.update("jax_enable_x64", False)


def check_adamw_half() -> tuple[list, list, int]:
    """adamw's updates of bfloat16 parameters through the test provider's
    aclnnApplyAdamWV2 (which refuses mixed dtypes), optax.adamw's float32
    updates of the same steps (tests/test_optax.py), and the kernel's calls."""
    from test_optax import half_precision_steps

    route_through_the_test_provider()
    aclnn.reset_runtime_stats()
    ours, theirs = half_precision_steps(jnp.bfloat16)
    as_f32 = lambda tree: jax.tree.map(lambda a: np.asarray(a, np.float32), tree)  # noqa: E731
    return as_f32(ours), as_f32(theirs), calls()["aclnnApplyAdamWV2"]


def check_update_and_apply() -> tuple[dict, dict, int]:
    """jax_aclnn.optax.update_and_apply's float32 steps in place through the
    test provider's aclnnApplyAdamWV2 (varRef the parameter; a mask), the
    same steps by optax.adamw and optax.apply_updates, and the kernel's
    calls."""
    import optax
    from test_optax import STEPS, random_tree

    from jax_aclnn import optax as aclnn_optax

    route_through_the_test_provider()
    aclnn.reset_runtime_stats()
    rng = np.random.default_rng(0)
    kwargs = dict(weight_decay=0.3, mask={"w": True, "b": False, "inner": True})
    tx, ref = aclnn_optax.adamw(1e-2, **kwargs), optax.adamw(1e-2, **kwargs)
    step = jax.jit(lambda p, s, g: aclnn_optax.update_and_apply(tx, g, s, p))
    ref_step = jax.jit(lambda p, s, g: (lambda u, s: (optax.apply_updates(p, u), s))(
        *ref.update(g, s, p)))
    ours = theirs = random_tree(rng)
    state, their_state = tx.init(ours), ref.init(theirs)
    for _ in range(STEPS):
        g = random_tree(rng)
        ours, state = step(ours, state, g)
        theirs, their_state = ref_step(theirs, their_state, g)
    as_f32 = lambda tree: jax.tree.map(lambda a: np.asarray(a, np.float32), tree)  # noqa: E731
    return as_f32(ours), as_f32(theirs), calls()["aclnnApplyAdamWV2"]


def check_explicit_meshes() -> tuple[dict[str, int], int]:
    """Layouts of tensor parallelism and FSDP on an explicit mesh of the 4
    devices (issue 44: their gradients failed), through the test
    provider's operators: SwiGLU's hidden dimension, the norm's weight,
    RoPE's head size sharded (tests/test_nn_meshes.py has every layout);
    each value and gradient equals the same math in jax.numpy. Returns the
    operators' calls, and those of aclnnRmsNormGrad in one per-example
    gradient (``vmap(grad)``, no mesh)."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    route_through_the_test_provider()
    aclnn.reset_runtime_stats()
    rng = np.random.default_rng(0)
    mesh = jax.make_mesh((4,), ("m",), axis_types=(jax.sharding.AxisType.Explicit,))
    x = rng.normal(size=(2, 8, 16)).astype(np.float32)
    w = (1 + 0.1 * rng.normal(size=16)).astype(np.float32)
    xr, cs = rng.normal(size=(2, 8, 2, 16)).astype(np.float32), rng.normal(size=(1, 8, 1, 16))

    def rms(x, w):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * w

    def swiglu(x):
        a, b = jnp.split(x, 2, -1)
        return jax.nn.silu(a) * b

    def rope(x, cos, sin):
        a, b = jnp.split(x, 2, -1)
        return x * cos + jnp.concatenate([-b, a], -1) * sin

    layouts = [  # (ours, the same math, operands, their specs)
        (nn.swiglu, swiglu, (x,), (P(None, None, "m"),)),
        (nn.rms_norm, rms, (x, w), (P(), P("m"))),
        (nn.rotary_embedding, rope, (xr, cs, cs), (P(None, None, None, "m"), P(), P())),
    ]
    with jax.set_mesh(mesh):
        for ours, theirs, operands, specs in layouts:
            args = [jax.device_put(np.asarray(a, np.float32), NamedSharding(mesh, s))
                    for a, s in zip(operands, specs)]
            argnums = tuple(range(len(args)))
            loss = lambda f: lambda *a: jnp.sum(jnp.sin(f(*a)))  # noqa: E731
            got = jax.jit(jax.value_and_grad(loss(ours), argnums))(*args)
            want = jax.jit(jax.value_and_grad(loss(theirs), argnums))(*args)
            for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
                close(a, b, 1e-4)
    counted = calls()
    before = aclnn.runtime_stats()["calls"]["aclnnRmsNormGrad"]["execute"]
    per_example = jax.jit(jax.vmap(jax.grad(lambda x, w: jnp.sum(jnp.sin(nn.rms_norm(x, w))),
                                            (0, 1)), (0, None)))(x, w)
    want = jax.vmap(jax.grad(lambda x, w: jnp.sum(jnp.sin(rms(x, w))), (0, 1)), (0, None))(x, w)
    for a, b in zip(per_example, want):
        close(a, b, 1e-4)
    return counted, aclnn.runtime_stats()["calls"]["aclnnRmsNormGrad"]["execute"] - before
