"""``python -m jax_aclnn train-lm``: a byte-level language model on CANN's fused operators.

A small decoder-only transformer (token embedding; per layer RMSNorm,
grouped-query attention with RoPE, the residual add and norm, a SwiGLU MLP;
a final RMSNorm and the embedding tied as the output) trained with the
cross-entropy loss and AdamW, every piece a jax_aclnn function whose
forward and backward run CANN's fused aclnn operators
(``jax_aclnn.nn``, ``jax_aclnn.optax``). The text is real and needs no
download: by default the source files of the Python standard library that
runs this command; ``--data`` takes a file or a directory of your own.

``--experts E --top-k K`` replaces each SwiGLU MLP by a mixture of E SwiGLU
experts (``jax_aclnn.nn.moe_ffn``: CANN's routing, permutation and grouped
matmul operators), optionally beside one shared expert
(``--shared-expert``); Switch's load-balancing loss, averaged over the
layers, is added to the cross entropy with ``--load-balancing-coef``
(default 0.01, Switch Transformer's); the losses printed are the cross
entropy alone. ``--expert-parallel`` splits the experts over the
``--devices`` (``moe_ffn``'s ``expert_axis`` inside ``jax.shard_map``,
tokens exchanged with ``jax.lax.all_to_all``).

The held-out split is evaluated by one ``jax.vmap``'d call; ``--devices N``
trains data parallel (host devices on the CPU); the summary lists the
aclnn operators each step calls on an NPU and how often, and
``--export-npu FILE`` writes the step exported for ``["cpu", "npu"]``.

Sizes that need more memory than the machine has available are refused
before anything starts, as is an ``--export-npu`` file that cannot be
written; a loss that becomes NaN or infinite stops the run (exit status 1)
with the advice to lower ``--lr``.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sysconfig
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from tqdm import tqdm

import jax_aclnn as aclnn
from jax_aclnn import nn
from jax_aclnn import optax as aclnn_optax
from jax_aclnn.cli.common import (
    MAX_DEVICES,
    MAX_SEED,
    MAX_STEPS,
    UsageError,
    check_converging,
    check_memory,
    check_output_file,
    integer,
    positive_float,
    print_counts,
    progress_disabled,
)
from jax_aclnn.cli.train import BATCH_AXIS, data_parallel_mesh

VOCAB = 256  # bytes
#: Text read at most (bytes, 4 MiB): enough for the default run, quick to
#: load; only that much of ``--data`` is read.
MAX_TEXT = 4 << 20


@dataclass(frozen=True)
class Config:
    dim: int
    layers: int
    heads: int
    kv_heads: int
    hidden: int
    seq: int
    #: Mixture of experts: ``experts`` SwiGLU experts of ``expert_hidden``
    #: each, ``top_k`` per token, and the dense MLP beside them as a shared
    #: expert if ``shared_expert`` (``experts == 0``: the dense MLP alone).
    experts: int = 0
    top_k: int = 2
    expert_hidden: int = 0
    shared_expert: bool = False

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def dense_mlp(self) -> bool:
        return not self.experts or self.shared_expert


def read_text(path: str | None) -> tuple[np.ndarray, str]:
    """The bytes to train on and where they came from: ``path`` (a file, or
    every file below a directory that holds no NUL byte), else the standard
    library's ``.py`` files; at most :data:`MAX_TEXT` bytes, and no more is
    read (the first bytes of a large file, the first files of a large tree)."""
    files: Iterable[Path]
    if path is None:
        root = Path(sysconfig.get_paths()["stdlib"])
        files, name = sorted(root.glob("*.py")), f"the Python standard library ({root})"
    else:
        root = Path(path)
        if not root.exists():
            raise UsageError(f"--data {path}: no such file or directory")
        files, name = files_below(root), str(root)
    chunks, total = [], 0
    for f in files:
        try:
            with open(f, "rb") as opened:
                data = opened.read(MAX_TEXT - total)
        except OSError:
            continue
        if b"\0" in data:
            continue  # not text
        chunks.append(data)
        total += len(data)
        if total >= MAX_TEXT:
            break
    text = np.frombuffer(b"\n".join(chunks), np.uint8)
    return text, name


def files_below(root: Path) -> Iterator[Path]:
    """``root`` if it is a file, else the regular files below it, folder by
    folder in sorted order, listed as they are reached (a large tree is not
    listed whole)."""
    if root.is_file():
        yield root
        return
    for folder, subfolders, names in os.walk(root):
        subfolders.sort()
        yield from (f for f in map(Path(folder).joinpath, sorted(names)) if f.is_file())


def init(cfg: Config, key: jax.Array) -> dict[str, Any]:
    """The parameters: float32, scaled normal initialisation."""
    per_layer = 9 if cfg.experts else 5  # (the dense model's draws as they always were)
    keys = iter(jax.random.split(key, 2 + per_layer * cfg.layers))
    normal = lambda shape, fan_in: jax.random.normal(next(keys), shape) / math.sqrt(fan_in)  # noqa: E731
    h, kv = cfg.head_dim, cfg.kv_heads * cfg.head_dim
    e, f = cfg.experts, cfg.expert_hidden

    def layer() -> dict[str, jax.Array]:
        weights = {
            "norm1": jnp.ones(cfg.dim), "norm2": jnp.ones(cfg.dim),
            "wq": normal((cfg.dim, cfg.heads * h), cfg.dim),
            "wkv": normal((cfg.dim, 2 * kv), cfg.dim),
            "wo": normal((cfg.heads * h, cfg.dim), cfg.dim * cfg.layers)}
        if cfg.dense_mlp:
            weights.update(up=normal((cfg.dim, 2 * cfg.hidden), cfg.dim),
                           down=normal((cfg.hidden, cfg.dim), cfg.hidden * cfg.layers))
        if e:
            weights.update(router=normal((cfg.dim, e), cfg.dim),
                           **{w: normal((e, cfg.dim, f), cfg.dim) for w in EXPERT_WEIGHTS[:2]},
                           w_down=normal((e, f, cfg.dim), f * cfg.layers))
        return weights

    return {"embed": normal((VOCAB, cfg.dim), cfg.dim), "norm": jnp.ones(cfg.dim),
            "layers": [layer() for _ in range(cfg.layers)]}


#: The experts' weights, split along their first dimension (the experts)
#: under ``--expert-parallel``.
EXPERT_WEIGHTS = ("w_gate", "w_up", "w_down")


def parameter_specs(tree: Any, expert_parallel: bool) -> Any:
    """The partition spec of each leaf of ``tree`` (the parameters, or
    AdamW's state holding copies of them): the experts' weights split over
    the devices under ``expert_parallel``, everything else replicated."""
    def spec(path: tuple[Any, ...], leaf: Any) -> P:
        name = getattr(path[-1], "key", None) if path else None
        return P(BATCH_AXIS) if expert_parallel and name in EXPERT_WEIGHTS else P()
    return jax.tree_util.tree_map_with_path(spec, tree)


def rope_tables(cfg: Config) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of LLaMA's rotary embedding, ``(S, 1, head_dim)``."""
    h = cfg.head_dim
    angles = np.arange(cfg.seq)[:, None] * 10000.0 ** (-np.arange(0, h, 2) / h)
    angles = np.concatenate([angles, angles], -1)[:, None].astype(np.float32)
    return np.cos(angles), np.sin(angles)


def _rms_norm(x, weight, *, epsilon=1e-6):
    xf = x.astype(jnp.float32)
    rstd = jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + epsilon)
    return (xf * rstd * weight.astype(jnp.float32)).astype(x.dtype)


def _add_rms_norm(x1, x2, weight, *, epsilon=1e-6):
    x = x1 + x2
    return _rms_norm(x, weight, epsilon=epsilon), x


def _rotary_embedding(x, cos, sin):
    x1, x2 = jnp.split(x, 2, axis=-1)
    return (x * cos + jnp.concatenate([-x2, x1], -1) * sin).astype(x.dtype)


def _swiglu(x):
    a, b = jnp.split(x, 2, axis=-1)
    return jax.nn.silu(a) * b


#: The model's operations as written without jax_aclnn (jax.numpy, jax.nn
#: and optax, differentiated by JAX): the baseline of ``bench``'s LLM step.
#: The model takes ``nn`` (jax_aclnn's) or this.
PLAIN = SimpleNamespace(
    rms_norm=_rms_norm, add_rms_norm=_add_rms_norm, rotary_embedding=_rotary_embedding,
    dot_product_attention=jax.nn.dot_product_attention, swiglu=_swiglu,
    softmax_cross_entropy_with_integer_labels=optax.softmax_cross_entropy_with_integer_labels)


def mlp(m: jax.Array, layer: dict[str, jax.Array], cfg: Config, ops: Any = nn,
        expert_mesh: Mesh | None = None) -> tuple[jax.Array, jax.Array]:
    """A layer's feed-forward block of ``(B, T, dim)`` activations and its
    load-balancing loss: the SwiGLU MLP (loss 0), or the mixture of experts
    (``ops.moe_ffn``; with the MLP added as a shared expert if
    ``cfg.shared_expert``), expert parallel over ``expert_mesh``'s axis."""
    dense = ops.swiglu(m @ layer["up"]) @ layer["down"] if cfg.dense_mlp else 0.0
    if not cfg.experts:
        return dense, jnp.zeros((), jnp.float32)
    b, t, d = m.shape
    weights = (layer["router"], *(layer[w] for w in EXPERT_WEIGHTS))

    def moe(x, router, w_gate, w_up, w_down, expert_axis=None):
        y, aux = ops.moe_ffn(x, router, w_gate, w_up, w_down, k=cfg.top_k,
                             expert_axis=expert_axis)
        return y, aux["load_balancing_loss"]

    if expert_mesh is None:
        y, balance = moe(m.reshape(b * t, d), *weights)
    else:  # tokens and experts split over the axis; the loss is over all tokens (psum)
        split = P(BATCH_AXIS)
        y, balance = jax.shard_map(
            functools.partial(moe, expert_axis=BATCH_AXIS), mesh=expert_mesh,
            in_specs=(split, P(), split, split, split), out_specs=(split, P()),
        )(m.reshape(b * t, d), *weights)
    return y.reshape(b, t, d) + dense, balance


def forward(params: dict[str, Any], tokens: jax.Array, cfg: Config, ops: Any = nn,
            expert_mesh: Mesh | None = None) -> tuple[jax.Array, jax.Array]:
    """``(B, T, 256)`` next-byte logits of ``(B, T)`` bytes, through ``ops``
    (``jax_aclnn.nn``, or :data:`PLAIN`), and the load-balancing loss
    averaged over the layers (0 for the dense model)."""
    b, t = tokens.shape
    cos, sin = (v[:t] for v in rope_tables(cfg))
    x = params["embed"][tokens]
    balance = []
    for layer in params["layers"]:
        a = ops.rms_norm(x, layer["norm1"])
        q = (a @ layer["wq"]).reshape(b, t, cfg.heads, cfg.head_dim)
        k, v = jnp.split((a @ layer["wkv"]).reshape(b, t, 2 * cfg.kv_heads, cfg.head_dim), 2, 2)
        q, k = ops.rotary_embedding(q, cos, sin), ops.rotary_embedding(k, cos, sin)
        attended = ops.dot_product_attention(q, k, v, is_causal=True).reshape(b, t, -1)
        m, x = ops.add_rms_norm(x, attended @ layer["wo"], layer["norm2"])
        out, layer_balance = mlp(m, layer, cfg, ops, expert_mesh)
        x = x + out
        balance.append(layer_balance)
    return ops.rms_norm(x, params["norm"]) @ params["embed"].T, jnp.mean(jnp.stack(balance))


def logits(params: dict[str, Any], tokens: jax.Array, cfg: Config, ops: Any = nn,
           expert_mesh: Mesh | None = None) -> jax.Array:
    """``(B, T, 256)`` next-byte logits of ``(B, T)`` bytes, through ``ops``
    (``jax_aclnn.nn``, or :data:`PLAIN`)."""
    return forward(params, tokens, cfg, ops, expert_mesh)[0]


def losses(params: dict[str, Any], windows: jax.Array, cfg: Config, ops: Any = nn,
           expert_mesh: Mesh | None = None) -> tuple[jax.Array, jax.Array]:
    """The mean next-byte cross entropy (nats) of ``(B, T + 1)`` byte
    windows and the load-balancing loss (:func:`forward`)."""
    out, balance = forward(params, windows[:, :-1], cfg, ops, expert_mesh)
    return jnp.mean(ops.softmax_cross_entropy_with_integer_labels(out, windows[:, 1:])), balance


def loss_fn(params: dict[str, Any], windows: jax.Array, cfg: Config, ops: Any = nn,
            expert_mesh: Mesh | None = None) -> jax.Array:
    """Mean next-byte cross entropy (nats) of ``(B, T + 1)`` byte windows,
    through ``ops`` (``jax_aclnn.nn``, or :data:`PLAIN`)."""
    return losses(params, windows, cfg, ops, expert_mesh)[0]


#: train-lm's defaults: AdamW's peak learning rate, the training steps
#: (the cosine schedule's length) and the weight decay.
LEARNING_RATE, STEPS, WEIGHT_DECAY = 3e-3, 600, 0.01


def optimizer(lr: float = LEARNING_RATE, steps: int = STEPS,
              adamw: Callable[..., optax.GradientTransformation] = aclnn_optax.adamw,
              ) -> optax.GradientTransformation:
    """train-lm's optimizer: ``adamw`` (:func:`jax_aclnn.optax.adamw`, or
    :func:`optax.adamw`, which takes the same arguments) at peak learning
    rate ``lr``, decayed over ``steps`` steps by a cosine schedule of the
    step count, weight decay :data:`WEIGHT_DECAY`."""
    return adamw(optax.cosine_decay_schedule(lr, steps), weight_decay=WEIGHT_DECAY)


def unigram_baseline(train: np.ndarray, val: np.ndarray) -> float:
    """Cross entropy (nats) of the validation bytes under the training
    bytes' frequencies (add-one smoothed): what a model without context gets."""
    counts = np.bincount(train, minlength=VOCAB) + 1.0
    return float(-np.mean(np.log(counts / counts.sum())[val]))


def windows(text: np.ndarray, starts: np.ndarray, seq: int) -> np.ndarray:
    """The ``(len(starts), seq + 1)`` windows of ``text`` at ``starts``, int32."""
    return text[starts[:, None] + np.arange(seq + 1)].astype(np.int32)


def memory_needed(cfg: Config, batch: int, eval_windows: int) -> int:
    """About the bytes (float32) a run needs: the parameters with their
    gradients, AdamW's moments and the update (six copies); a training
    step's activations (the attention probabilities of every layer, the
    logits, the layers' inputs and hidden units, kept for the backward); the
    held-out evaluation (all windows in one vmapped call: the logits, the
    hidden units and one layer's attention at a time). From 0.9 to 2.2
    times what XLA's memory analysis gives, on the sizes measured (the
    defaults, a wider and deeper model, a longer context, a larger hidden
    size, a wider single layer)."""
    kv = cfg.kv_heads * cfg.head_dim
    hidden = cfg.hidden if cfg.dense_mlp else 0
    # a mixture of experts: each token's k rows through an expert (in, out,
    # hidden units), the router's and experts' weights
    k, f = (cfg.top_k, cfg.expert_hidden) if cfg.experts else (0, 0)
    params = (VOCAB * cfg.dim + cfg.dim
              + cfg.layers * (2 * cfg.dim + 2 * cfg.dim * (cfg.dim + kv) + 3 * cfg.dim * hidden
                              + cfg.experts * cfg.dim * (1 + 3 * f)))
    attention = cfg.heads * cfg.seq * cfg.seq
    step = batch * (cfg.seq * (4 * VOCAB + cfg.layers * (8 * cfg.dim + 4 * hidden
                                                         + k * (2 * cfg.dim + 4 * f)))
                    + 2 * cfg.layers * attention)
    evaluation = eval_windows * (cfg.seq * (VOCAB + 4 * cfg.dim + 3 * hidden
                                            + k * (2 * cfg.dim + 3 * f)) + 2 * attention)
    return 4 * (6 * params + step + evaluation)


def sample(params: dict[str, Any], cfg: Config, prompt: bytes, length: int,
           key: jax.Array, temperature: float, expert_mesh: Mesh | None = None) -> bytes:
    """``length`` bytes generated after ``prompt`` (the model's last
    ``seq`` bytes of context, sampled at ``temperature``)."""
    step = jax.jit(lambda p, w: logits(p, w[None], cfg, expert_mesh=expert_mesh)[0])
    out = list(prompt) or [10]
    for _ in range(length):
        context = out[-cfg.seq:]
        # one window length, one compilation: causal, the padding after the
        # context changes nothing before it
        window = np.zeros(cfg.seq, np.int32)
        window[: len(context)] = context
        key, sub = jax.random.split(key)
        row = step(params, window)[len(context) - 1]
        out.append(int(jax.random.categorical(sub, row / temperature)))
    return bytes(out[len(prompt):])


def aclnn_calls_per_step(lowered_text: str) -> dict[str, int]:
    """The aclnn operators a step's NPU lowering calls, with how often."""
    counts: dict[str, int] = {}
    for line in lowered_text.splitlines():
        if "stablehlo.custom_call @aclnn_" in line and 'operator = "' in line:
            op = line.split('operator = "')[1].split('"')[0]
            counts[op] = counts.get(op, 0) + 1
    return counts


def check_options(args: argparse.Namespace, cfg: Config) -> None:
    """Refuses, before anything starts, a model the heads do not split, a
    run that needs more memory than is available (:func:`memory_needed`)
    and an ``--export-npu`` file that could be written only after training."""
    if args.dim % args.heads or args.heads % args.kv_heads or cfg.head_dim % 2:
        raise UsageError(f"--dim {args.dim} must split into --heads {args.heads} of an even size, "
                         f"and --heads into --kv-heads {args.kv_heads} groups")
    check_experts(args, cfg)
    sizes = {"--dim": cfg.dim, "--layers": cfg.layers, "--heads": cfg.heads, "--hidden": cfg.hidden,
             "--seq": cfg.seq, "--batch-size": args.batch_size, "--eval-windows": args.eval_windows}
    if cfg.experts:
        sizes.update({"--experts": cfg.experts, "--top-k": cfg.top_k,
                      "--expert-hidden": cfg.expert_hidden})
    check_memory(memory_needed(cfg, args.batch_size, args.eval_windows),
                 "a run of " + ", ".join(f"{option} {n}" for option, n in sizes.items()),
                 "choose smaller values")
    if args.export_npu is not None:
        check_output_file("--export-npu", args.export_npu, "step.bin")


def check_experts(args: argparse.Namespace, cfg: Config) -> None:
    """Refuses mixture-of-experts options that do not fit together: k
    experts of E, E split evenly over the devices and each window's tokens
    too (``--expert-parallel``), MoE options without ``--experts``."""
    moe_options = [name for name, given in (("--shared-expert", args.shared_expert),
                                            ("--expert-parallel", args.expert_parallel),
                                            ("--expert-hidden", args.expert_hidden))
                   if given]
    if not cfg.experts:
        if moe_options:
            raise UsageError(f"{moe_options[0]} needs --experts E (a mixture of experts)")
        return
    if cfg.top_k > cfg.experts:
        raise UsageError(f"--top-k {cfg.top_k} must be at most --experts {cfg.experts}")
    if args.expert_parallel and (cfg.experts % args.devices or cfg.seq % args.devices):
        raise UsageError(f"--expert-parallel: --experts {cfg.experts} and --seq {cfg.seq} "
                         f"must be multiples of --devices {args.devices}")


def make_config(args: argparse.Namespace) -> Config:
    """The model of the options; an expert's hidden size is ``--expert-hidden``,
    by default ``--hidden / --top-k`` (rounded up): the dense MLP's compute per
    token."""
    experts = args.experts or 0
    expert_hidden = args.expert_hidden or -(-args.hidden // args.top_k)
    return Config(args.dim, args.layers, args.heads, args.kv_heads, args.hidden, args.seq,
                  experts, args.top_k if experts else 2, expert_hidden if experts else 0,
                  bool(experts and args.shared_expert))


def describe_mlp(cfg: Config, args: argparse.Namespace) -> str:
    """The feed-forward block, as the run's header says it."""
    if not cfg.experts:
        return f"SwiGLU {cfg.hidden}"
    shared = f" beside a shared SwiGLU {cfg.hidden}" if cfg.shared_expert else ""
    parallel = (f", split over the {args.devices} devices (expert parallel)"
                if args.expert_parallel else "")
    return (f"{cfg.experts} SwiGLU experts of {cfg.expert_hidden}, top {cfg.top_k}{shared}"
            f"{parallel}, load-balancing loss x {args.load_balancing_coef:g}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    cfg = make_config(args)
    check_options(args, cfg)
    mesh = data_parallel_mesh(args.devices, args.batch_size)  # before anything starts JAX
    text, source = read_text(args.data)
    if len(text) < 20 * (args.seq + 1):
        raise UsageError(f"{source}: {len(text)} bytes of text, too few for --seq {args.seq}")
    split = int(len(text) * 0.9)
    train, val = text[:split], text[split:]
    rng = np.random.default_rng(args.seed)
    val_windows = windows(val, rng.integers(0, len(val) - args.seq - 1, args.eval_windows),
                          args.seq)
    baseline = unigram_baseline(train, val)
    print(f"train-lm: {len(text):,} bytes of {source}; {len(train):,} train, {len(val):,} held out")
    print(f"  model: {cfg.layers} layers, dim {cfg.dim}, {cfg.heads} query heads over "
          f"{cfg.kv_heads} key/value heads, {describe_mlp(cfg, args)}, context {cfg.seq} "
          f"bytes; data-parallel over {args.devices} {mesh.devices.flat[0].platform} device(s)")
    print(f"  unigram baseline (no context): {baseline:.3f} nats/byte")

    params = init(cfg, jax.random.key(args.seed))
    tx = optimizer(args.lr, args.steps)
    opt_state = tx.init(params)
    state = (params, opt_state)
    params, opt_state = jax.device_put(state, jax.tree.map(
        lambda spec: NamedSharding(mesh, spec), parameter_specs(state, args.expert_parallel)))
    sharded = NamedSharding(mesh, P(BATCH_AXIS))
    expert_mesh = mesh if args.expert_parallel else None

    def objective(params, batch):  # the cross entropy plus the weighted load-balancing loss
        cross_entropy, balance = losses(params, batch, cfg, expert_mesh=expert_mesh)
        return cross_entropy + args.load_balancing_coef * balance, cross_entropy

    def step(params, opt_state, batch):
        # parameters before the state (donated): update_and_apply's aliasing;
        # the cosine schedule of the traced count runs aclnnApplyAdamW in place
        (_, loss), grads = jax.value_and_grad(objective, has_aux=True)(params, batch)
        params, opt_state = aclnn_optax.update_and_apply(tx, grads, opt_state, params)
        return params, opt_state, loss

    train_step = jax.jit(step, donate_argnums=(0, 1))
    evaluate = jax.jit(jax.vmap(lambda p, w: loss_fn(p, w[None], cfg, expert_mesh=expert_mesh),
                                in_axes=(None, 0)))
    initial = float(evaluate(params, val_windows).mean())
    print(f"  validation loss before training: {initial:.3f}")

    first = None
    start = time.perf_counter()
    with tqdm(range(1, args.steps + 1), desc="steps", unit="step",
              disable=progress_disabled(args.quiet)) as bar:
        for i in bar:
            batch = windows(train, rng.integers(0, len(train) - args.seq - 1, args.batch_size),
                            args.seq)
            params, opt_state, loss = train_step(params, opt_state,
                                                 jax.device_put(batch, sharded))
            if first is None:
                first = float(loss)
            if i % args.log_every == 0 or i == args.steps:
                value = float(loss)
                check_converging({"train loss": value}, f"at step {i}", args.lr)
                tokens_per_s = i * args.batch_size * args.seq / (time.perf_counter() - start)
                bar.set_postfix(loss=f"{value:.3f}", tok_s=f"{tokens_per_s:,.0f}")
                tqdm.write(f"step {i:5d}  train loss {value:.3f}  {tokens_per_s:,.0f} tokens/s")
    elapsed = time.perf_counter() - start
    final = float(evaluate(params, val_windows).mean())  # one vmapped call
    check_converging({"validation loss": final}, f"after step {args.steps}", args.lr)

    # donation is per platform, which a program for several platforms cannot have
    step_args = (params, opt_state, jax.device_put(batch, sharded))

    def export(platforms: list[str]) -> jax.export.Exported:
        return jax.export.export(jax.jit(step), platforms=platforms,
                                 disabled_checks=aclnn.export_disabled_checks())(*step_args)

    # counted in the NPU's lowering alone: the CPU's calls the operators the
    # host provider has too
    per_step = aclnn_calls_per_step(export(["npu"]).mlir_module())
    if args.export_npu is not None:
        Path(args.export_npu).write_bytes(export(["cpu", "npu"]).serialize())

    print("\nSummary")
    relation = (f"{baseline - final:.3f} below" if final < baseline
                else f"NOT below: {final - baseline:.3f} above")
    print(f"  validation loss {initial:.3f} -> {final:.3f} nats/byte (the unigram baseline "
          f"{baseline:.3f}: {relation}); first step's training loss {first:.3f}")
    print(f"  {args.steps} steps in {elapsed:.1f} s, "
          f"{args.steps * args.batch_size * args.seq / elapsed:,.0f} tokens/s; "
          f"aclnn provider on this machine: {aclnn.runtime_stats()['provider']}")
    print("  aclnn operators each step calls on an NPU:")
    print_counts(dict(sorted(per_step.items())))
    if args.export_npu is not None:
        print(f"  the step exported for cpu and npu: {args.export_npu}")
    if args.sample:
        text_out = sample(params, cfg, args.prompt, args.sample, jax.random.key(args.seed + 1),
                          args.temperature, expert_mesh)
        print("\nSample:\n" + (args.prompt + text_out).decode("utf-8", errors="replace"))
    return {"initial_validation_loss": initial, "validation_loss": final,
            "unigram_baseline": baseline, "first_loss": first, "seconds": elapsed,
            "aclnn_calls_per_step": per_step}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="FILE_OR_DIR", help=f"train on this text file, or the files below this directory; only the first {MAX_TEXT >> 20} MiB of text is read (default: the Python standard library's sources)")
    p.add_argument("--steps", type=integer(1, MAX_STEPS), default=STEPS, help="training steps (default: %(default)s)")
    p.add_argument("--batch-size", type=integer(1), default=16, help="windows per step, split over --devices (default: %(default)s)")
    p.add_argument("--seq", type=integer(8, 2048), default=64, help="context length in bytes (default: %(default)s)")
    p.add_argument("--dim", type=integer(8), default=64, help="model width (default: %(default)s)")
    p.add_argument("--layers", type=integer(1), default=2, help="transformer layers (default: %(default)s)")
    p.add_argument("--heads", type=integer(1), default=4, help="query heads (default: %(default)s)")
    p.add_argument("--kv-heads", type=integer(1), default=2, help="key/value heads, grouped-query attention (default: %(default)s)")
    p.add_argument("--hidden", type=integer(1), default=128, help="SwiGLU hidden size (default: %(default)s)")
    p.add_argument("--experts", type=integer(1), metavar="E", help="a mixture of E SwiGLU experts in each layer instead of the SwiGLU MLP (default: the dense MLP)")
    p.add_argument("--top-k", type=integer(1), default=2, metavar="K", help="experts per token, with --experts (default: %(default)s)")
    p.add_argument("--expert-hidden", type=integer(1), metavar="N", help="an expert's SwiGLU hidden size (default: --hidden / --top-k, the dense MLP's compute per token)")
    p.add_argument("--shared-expert", action="store_true", help="keep the dense SwiGLU MLP beside the experts, as a shared expert every token goes through")
    p.add_argument("--load-balancing-coef", type=positive_float, default=0.01, help="weight of Switch's load-balancing loss in the training objective, with --experts (default: %(default)s, Switch Transformer's)")
    p.add_argument("--expert-parallel", action="store_true", help="split the experts over the --devices (each device computes its own experts; tokens exchanged with all_to_all)")
    p.add_argument("--lr", type=positive_float, default=LEARNING_RATE, help="AdamW peak learning rate, cosine decay (default: %(default)s)")
    p.add_argument("--devices", type=integer(1, MAX_DEVICES), default=1, help="data-parallel devices (on the CPU: host devices) (default: %(default)s)")
    p.add_argument("--eval-windows", type=integer(1), default=256, help="held-out windows, evaluated by one vmapped call (default: %(default)s)")
    p.add_argument("--seed", type=integer(0, MAX_SEED), default=0, help="random seed (default: %(default)s)")
    p.add_argument("--sample", type=integer(0), default=0, metavar="N", help="print N bytes generated after training (default: none)")
    p.add_argument("--prompt", type=os.fsencode, default="def ", help="the text generation starts from, as bytes (any, as the shell passes them) (default: %(default)r)")
    p.add_argument("--temperature", type=positive_float, default=0.8, help="sampling temperature (default: %(default)s)")
    p.add_argument("--export-npu", metavar="FILE", help="write the training step exported for cpu and npu (jax.export, serialized)")
    p.add_argument("--log-every", type=integer(1), default=50, help="steps between progress lines, each checking that the loss is finite (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
