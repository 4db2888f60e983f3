"""Trains a Flax MLP (linen or nnx) with optax; its gradient runs every aclnn operator of jax_aclnn's.

    python examples/train_flax.py --api nnx --steps 300
    python examples/train_flax.py --dtype bfloat16                  # mixed precision
    python examples/train_flax.py --dtype bfloat16 --layers flax    # the same with Flax's own

Needs the ``flax`` extra (``pip install ".[flax]"``). Data: scikit-learn's
bundled diabetes set (442 patients, 10 features), the target scaled into
(0.05, 0.95). ``--dtype bfloat16`` trains in mixed precision: bfloat16
activations, float32 parameters and target (Flax's ``dtype=bfloat16,
param_dtype=float32``). ``--layers flax`` trains the same model with Flax's
own ``BatchNorm`` and jax.numpy formulas instead of jax_aclnn, for
comparison. The model, the same in both APIs:

* ``Dense`` -> ``jax_aclnn.flax`` ``BatchNorm`` (aclnnBatchNormReduceBackward)
  -> ``aclnn.silu`` (aclnnSwishBackward);
* ``Dense`` -> ``aclnn.hardshrink`` (aclnnHardshrinkBackward);
* a first prediction ``p0 = sigmoid(Dense(h))``, refined as
  ``p1 = sigmoid(aclnn.logit(p0) + Dense(h))`` (aclnnLogitGrad);
* loss ``aclnn.smooth_l1_loss`` on ``p0`` and ``p1`` (aclnnSmoothL1LossBackward),
  which is ``optax.huber_loss(p, y, delta=beta).mean() / beta``.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from sklearn.datasets import load_diabetes

import jax_aclnn as aclnn
from jax_aclnn.flax import linen as aclnn_linen
from jax_aclnn.cli.common import integer, positive_float  # the command line's argument types
from jax_aclnn.flax import nnx as aclnn_nnx

BETA = 0.1  # smooth-L1 switch point
LAMBD = 0.05  # hardshrink threshold
MOMENTUM = 0.9


def load(seed: int):
    """Standardized features and the scaled target, split 80/20."""
    x, y = load_diabetes(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    split = int(0.8 * len(x))
    x = (x - x[:split].mean(0)) / x[:split].std(0)
    y = 0.05 + 0.9 * (y - y.min()) / (y.max() - y.min())
    as32 = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    return (as32(x[:split]), as32(y[:split])), (as32(x[split:]), as32(y[split:]))


class Layers(NamedTuple):
    """The layers and functions the model is made of."""

    linen_batch_norm: type
    nnx_batch_norm: type
    silu: Callable[[Any], Any]
    hardshrink: Callable[[Any, float], Any]
    logit: Callable[..., Any]
    smooth_l1_loss: Callable[..., Any]


def _logit(p, eps):  # in float32, as torch.logit and jax_aclnn's for half inputs
    z = jnp.clip(p.astype(jnp.float32), eps, 1 - eps)
    return jnp.log(z / (1 - z)).astype(p.dtype)


LAYERS = {
    "aclnn": Layers(aclnn_linen.BatchNorm, aclnn_nnx.BatchNorm, aclnn.silu, aclnn.hardshrink,
                    aclnn.logit, aclnn.smooth_l1_loss),
    # The same model with Flax's own layers and jax.numpy formulas.
    "flax": Layers(nn.BatchNorm, nnx.BatchNorm, jax.nn.silu,
                   lambda h, lambd: jnp.where(jnp.abs(h) <= lambd, 0, h), _logit,
                   lambda p, y, beta: optax.huber_loss(p, y, delta=beta).mean() / beta),
}


def heads(layers, h, p0_logit, delta):
    p0 = jax.nn.sigmoid(p0_logit[:, 0])
    p1 = jax.nn.sigmoid(layers.logit(p0, eps=1e-4) + delta[:, 0])
    return p0, p1


def loss_of(layers, p0, p1, y):
    """Smooth L1 of both predictions (in the activations' dtype) against the
    float32 target: the loss is float32, by JAX's type promotion."""
    return layers.smooth_l1_loss(p0, y, beta=BETA) + layers.smooth_l1_loss(p1, y, beta=BETA)


class LinenMLP(nn.Module):
    hidden: int
    dtype: Any  # the activations'; parameters are float32
    layers: Layers

    @nn.compact
    def __call__(self, x, train: bool):
        dense = lambda n: nn.Dense(n, dtype=self.dtype, param_dtype=jnp.float32)  # noqa: E731
        bn = self.layers.linen_batch_norm(use_running_average=not train, momentum=MOMENTUM,
                                          dtype=self.dtype, param_dtype=jnp.float32)
        h = self.layers.silu(bn(dense(self.hidden)(x)))
        h = self.layers.hardshrink(dense(self.hidden)(h), LAMBD)
        return heads(self.layers, h, dense(1)(h), dense(1)(h))


class NnxMLP(nnx.Module):
    def __init__(self, features: int, hidden: int, dtype: Any, layers: Layers, rngs: nnx.Rngs):
        kw = {"dtype": dtype, "param_dtype": jnp.float32, "rngs": rngs}
        self.layers = layers
        self.dense1 = nnx.Linear(features, hidden, **kw)
        self.bn = layers.nnx_batch_norm(hidden, momentum=MOMENTUM, **kw)
        self.dense2 = nnx.Linear(hidden, hidden, **kw)
        self.head0 = nnx.Linear(hidden, 1, **kw)
        self.head1 = nnx.Linear(hidden, 1, **kw)

    def __call__(self, x):
        h = self.layers.silu(self.bn(self.dense1(x)))
        h = self.layers.hardshrink(self.dense2(h), LAMBD)
        return heads(self.layers, h, self.head0(h), self.head1(h))


def train_linen(args, train, val):
    layers = LAYERS[args.layers]
    model = LinenMLP(args.hidden, jnp.dtype(args.dtype), layers)
    variables = model.init(jax.random.key(args.seed), train[0][:2], True)
    params, stats = variables["params"], variables["batch_stats"]
    tx = optax.adam(args.lr)
    opt_state = tx.init(params)

    @jax.jit
    def step(params, stats, opt_state, x, y):
        def loss(params):
            (p0, p1), new = model.apply({"params": params, "batch_stats": stats}, x, True,
                                        mutable=["batch_stats"])
            return loss_of(layers, p0, p1, y), new["batch_stats"]

        (value, stats), grads = jax.value_and_grad(loss, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), stats, opt_state, value

    @jax.jit
    def evaluate(params, stats, x, y):
        return loss_of(layers, *model.apply({"params": params, "batch_stats": stats}, x, False), y)

    def run_step(x, y):
        nonlocal params, stats, opt_state
        params, stats, opt_state, value = step(params, stats, opt_state, x, y)
        return value

    return run_step, lambda: evaluate(params, stats, *val)


def train_nnx(args, train, val):
    layers = LAYERS[args.layers]
    model = NnxMLP(train[0].shape[1], args.hidden, jnp.dtype(args.dtype), layers,
                   nnx.Rngs(args.seed))
    optimizer = nnx.Optimizer(model, optax.adam(args.lr), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, x, y):
        value, grads = nnx.value_and_grad(lambda m: loss_of(layers, *m(x), y))(model)
        optimizer.update(model, grads)
        return value

    @nnx.jit
    def evaluate(model, x, y):
        return loss_of(layers, *model(x), y)

    def run_step(x, y):
        model.train()
        return step(model, optimizer, x, y)

    def run_eval():
        model.eval()
        return evaluate(model, *val)

    return run_step, run_eval


class Parser(argparse.ArgumentParser):
    """Reports a bad argument on one line with exit status 2 (no usage block)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def main(argv=None) -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", choices=["linen", "nnx"], default="nnx", help="Flax API (default nnx)")
    parser.add_argument("--steps", type=integer(1), default=300, help="optimizer steps (default 300)")
    parser.add_argument("--batch-size", type=integer(1), default=64, help="examples per step (default 64)")
    parser.add_argument("--hidden", type=integer(1), default=64, help="hidden width (default 64)")
    parser.add_argument("--lr", type=positive_float, default=3e-3, help="Adam learning rate (default 3e-3)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="activations' dtype; parameters stay float32 (default float32)")
    parser.add_argument("--layers", choices=list(LAYERS), default="aclnn",
                        help="aclnn: jax_aclnn's operators and BatchNorm (default); flax: the same "
                             "model with Flax's own layers and jax.numpy formulas")
    parser.add_argument("--seed", type=integer(0, 2**63 - 1), default=0, help="data split, init and batches (default 0)")
    parser.add_argument("--log-every", type=integer(1), default=50, help="steps between loss lines (default 50)")
    args = parser.parse_args(argv)

    train, val = load(args.seed)
    if args.batch_size > len(train[0]):
        parser.error(f"--batch-size {args.batch_size} is more than the {len(train[0])} training rows")
    run_step, run_eval = (train_linen if args.api == "linen" else train_nnx)(args, train, val)
    print(f"{args.api}, {args.layers} layers, {args.dtype} activations: "
          f"validation loss before training {float(run_eval()):.5f}")
    batches = np.random.default_rng(args.seed)
    for i in range(args.steps):
        idx = batches.choice(len(train[0]), args.batch_size, replace=False)
        value = run_step(train[0][idx], train[1][idx])
        if i % args.log_every == 0 or i == args.steps - 1:
            print(f"step {i:5d}  train loss {float(value):.5f}")
    print(f"{args.api}: validation loss after training {float(run_eval()):.5f}")


if __name__ == "__main__":
    main()
