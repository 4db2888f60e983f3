"""``python -m jax_aclnn train``: the main job.

Trains a small regression network whose ``jax.grad`` runs every aclnn
operator of the package, on scikit-learn's bundled diabetes data set (442
patients, 10 features; no network needed) or on a user's CSV file. The
network is built from the operators' own layers (``jax_aclnn.network``):
each block is a matmul, the normalizations (``batch_norm``:
aclnnBatchNormReduceBackward) and the activations (``logit`` of a sigmoid:
aclnnLogitGrad; ``hardshrink``: aclnnHardshrinkBackward; ``swish``:
aclnnSwishBackward), then a prediction in (0, 1) and the losses
(``smooth_l1_loss``: aclnnSmoothL1LossBackward) against the target.

An ensemble of models from several seeds trains in one ``jax.vmap``'d,
jit-compiled step (per-example batching rules, one custom call per operator),
and is evaluated in one vmapped call at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from tqdm import tqdm

import jax_aclnn as aclnn
from jax_aclnn import network
from jax_aclnn.cli.common import (
    MAX_DEVICES,
    MAX_SEED,
    MAX_STEPS,
    UsageError,
    check_converging,
    check_output_file,
    integer,
    jax_devices,
    positive_float,
    print_counts,
    progress_disabled,
)
from jax_aclnn.cli.csv_data import MAX_CATEGORIES, read_regression_csv

HIDDEN = 64
#: Blocks of the network (matmul, normalizations, activations).
BLOCKS = 2
#: Range the target is scaled into, inside (0, 1) so that logit is finite.
TARGET_RANGE = (0.05, 0.95)
#: Fewest complete rows a data set needs (8 to train on, 2 to validate).
MIN_ROWS = 10
#: The most ensemble members: models of their own, trained and evaluated at once.
MAX_ENSEMBLE = 1024
#: Fewest examples in a (global) training batch. Batch norm of one example
#: subtracts it from itself: its output is the layer's shift whatever the
#: input, so every weight before it gets a zero gradient (with the shift at
#: its initial zero, every weight does). PyTorch refuses it in training too.
MIN_BATCH = 2


@dataclass
class Data:
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    name: str
    notes: list[str] = field(default_factory=list)  # what was left out of a CSV file, and why


def load_data(csv: str | None, target: str | None, seed: int) -> Data:
    """Standardised features and a target scaled into TARGET_RANGE, split 80/20.

    ``csv`` is read by the rules of :mod:`jax_aclnn.cli.csv_data`; its problems
    (and too few rows) raise :class:`~jax_aclnn.cli.common.UsageError`.
    """
    notes: list[str] = []
    if csv is None:
        from sklearn.datasets import load_diabetes

        x, y = load_diabetes(return_X_y=True)
        name = "diabetes (scikit-learn)"
    else:
        if target is None:
            raise UsageError(f"--data {csv} needs --target COLUMN: the column to predict")
        table = read_regression_csv(csv, target)
        x, y, notes = table.x, table.y, table.notes
        name = Path(csv).name
    if len(x) < MIN_ROWS:
        raise UsageError(f"{name} has {len(x)} complete rows"
                         + "".join(f"; {n}" for n in notes)
                         + f"; train needs at least {MIN_ROWS}")
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = unit_scaled(x[order]), unit_scaled(y[order])
    split = int(0.8 * len(x))
    mu, sd = x[:split].mean(0), x[:split].std(0)
    sd[sd == 0] = 1.0  # a constant column: all zeros
    lo, hi = y[:split].min(), y[:split].max()
    a, b = TARGET_RANGE
    scale = lambda v: np.clip(a + (b - a) * (v - lo) / (hi - lo + 1e-12), 0.01, 0.99)  # noqa: E731
    xs = ((x - mu) / sd).astype(np.float32)
    ys = scale(y).astype(np.float32)
    return Data(xs[:split], ys[:split], xs[split:], ys[split:], name, notes)


def unit_scaled(a: np.ndarray) -> np.ndarray:
    """``a`` divided by each column's largest magnitude (a column of zeros
    as it is): values in [-1, 1], whose mean, standard deviation and range
    cannot overflow float64 (those of values near 1e200 or 1.7e308 do).
    Standardizing and min-max scaling give the same result either way."""
    biggest = np.abs(a).max(axis=0)
    return a / np.where(biggest > 0, biggest, 1.0)


def init_params(key: jax.Array, features: int) -> list[jax.Array]:
    """The network's weights (:func:`jax_aclnn.network.init`, float32)."""
    return network.init(key, features, HIDDEN, BLOCKS)


def loss_fn(params, x, y, dtype, axis_name: str | None = None):
    """The network's loss on ``x`` in ``dtype`` (float32 weights cast to it);
    with ``axis_name`` (inside ``shard_map``) the normalizations are
    synchronized over that axis and the loss is the mean over its devices
    (equal shards: the global batch's loss)."""
    loss = network.loss(params, x.astype(dtype), y, axis_name=axis_name)
    return loss if axis_name is None else jax.lax.pmean(loss, axis_name)


def make_train_step(optimizer: optax.GradientTransformation, dtype: Any):
    """One model's training step ``(params, opt_state, x, y) -> (params,
    opt_state, loss)``, not jitted."""

    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, dtype)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


#: The data-parallel mesh axis of the training step.
BATCH_AXIS = "batch"


def make_steps(optimizer: optax.GradientTransformation, dtype: Any, mesh: Mesh):
    """The jit-compiled training and evaluation steps of the ensemble.

    Training is data-parallel over ``mesh``: each device takes its slice of
    the global batch (``shard_map``), batch norm is synchronized across
    devices, the parameters are replicated and their gradients (taken
    outside the ``shard_map``) are those of the global batch. Inside, the
    ensemble members are ``jax.vmap``-ed. Evaluation runs the vmapped
    ensemble on the whole validation set.
    """

    def member_losses(params, x, y):  # on each device: (ensemble,) global losses
        return jax.vmap(lambda p: loss_fn(p, x, y, dtype, BATCH_AXIS))(params)

    data_parallel_losses = jax.shard_map(
        member_losses, mesh=mesh, in_specs=(P(), P(BATCH_AXIS), P(BATCH_AXIS)), out_specs=P())

    def train_step(params, opt_state, x, y):
        def total(params):
            losses = data_parallel_losses(params, x, y)
            return losses.sum(), losses  # members are independent: the sum separates

        (_, losses), grads = jax.value_and_grad(total, has_aux=True)(params)
        updates, opt_state = jax.vmap(optimizer.update)(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, losses

    def evaluate(params, x, y):
        p = network.predict(params, x.astype(dtype))
        return loss_fn(params, x, y, dtype), p.astype(jnp.float32)

    return jax.jit(train_step), jax.jit(jax.vmap(evaluate, in_axes=(0, None, None)))


def data_parallel_mesh(devices: int, batch_size: int) -> Mesh:
    """A 1-D mesh of the first ``devices`` JAX devices; on the CPU asks JAX
    for that many host devices first (before its CPU backend starts).
    ``UsageError`` if ``batch_size`` does not split evenly or the devices
    are not there."""
    if batch_size % devices:
        raise UsageError(f"--batch-size {batch_size} must be a multiple of --devices {devices}")
    if devices > 1:
        try:
            jax.config.update("jax_num_cpu_devices", devices)
        except RuntimeError:
            pass  # JAX has started already: use the devices it has
    available = jax_devices()
    if len(available) < devices:
        raise UsageError(f"--devices {devices}: only {len(available)} {available[0].platform} "
                         f"device(s); on the CPU set JAX_NUM_CPU_DEVICES={devices} or run "
                         "--devices before anything starts JAX")
    return Mesh(np.array(available[:devices]), (BATCH_AXIS,), axis_types=(AxisType.Auto,))


def check_options(args: argparse.Namespace) -> None:
    """Refuses option combinations and a ``--plot`` file that would fail only
    after training."""
    if args.target is not None and args.data is None:
        raise UsageError(f"--target {args.target} needs --data FILE.csv (the diabetes data has its own target)")
    if args.plot is not None:
        check_plot_path(args.plot)


def check_plot_path(path: str) -> None:
    """Refuses a ``--plot`` path that cannot take the image: not a file it
    can write (:func:`~jax_aclnn.cli.common.check_output_file`), or not an
    image type."""
    check_output_file("--plot", path, "loss.png")
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    if Path(path).suffix.lower().lstrip(".") not in formats:
        raise UsageError(f"--plot {path}: not an image type matplotlib writes; "
                         "end the name with .png (or .pdf, .svg)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    check_options(args)
    mesh = data_parallel_mesh(args.devices, args.batch_size)  # before anything starts JAX
    dtype = jnp.dtype(args.dtype)
    data = load_data(args.data, args.target, args.seed)
    if args.batch_size > len(data.x_train):
        raise UsageError(f"--batch-size {args.batch_size} is more than the {len(data.x_train)} "
                         f"training rows of {data.name}; choose a smaller --batch-size")
    for note in data.notes:
        print(f"jax_aclnn train: warning: {data.name}: {note}", file=sys.stderr)
    features = data.x_train.shape[1]
    keys = jax.random.split(jax.random.key(args.seed), args.ensemble)
    params = jax.vmap(lambda k: init_params(k, features))(keys)
    optimizer = optax.adam(args.lr)
    opt_state = jax.vmap(optimizer.init)(params)
    train_step, evaluate = make_steps(optimizer, dtype, mesh)
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P(BATCH_AXIS))
    params, opt_state = jax.device_put((params, opt_state), replicated)
    print(
        f"jax_aclnn train: {data.name}, {len(data.x_train)} train / {len(data.x_val)} validation "
        f"rows, {features} features; ensemble of {args.ensemble} seeds, {args.dtype}, "
        f"{args.epochs} epochs; data-parallel over {args.devices} {mesh.devices.flat[0].platform} "
        f"device(s), global batch {args.batch_size}, synchronized batch norm"
    )
    aclnn.reset_runtime_stats()
    rng = np.random.default_rng(args.seed)
    history: list[tuple[float, float]] = []
    initial_val = float(evaluate(params, data.x_val, data.y_val)[0].mean())
    start = time.perf_counter()
    n = len(data.x_train)
    steps = max(1, n // args.batch_size)
    with tqdm(range(1, args.epochs + 1), desc="epochs", unit="epoch",
              disable=progress_disabled(args.quiet)) as bar:
        for epoch in bar:
            order = rng.permutation(n)
            losses = []
            for s in range(steps):
                idx = order[s * args.batch_size : (s + 1) * args.batch_size]
                x, y = jax.device_put((data.x_train[idx], data.y_train[idx]), sharded)
                params, opt_state, loss = train_step(params, opt_state, x, y)
                losses.append(loss)
            train_loss = float(jnp.mean(jnp.stack(losses)))
            val_loss = float(evaluate(params, data.x_val, data.y_val)[0].mean())
            check_converging({"train loss": train_loss, "validation loss": val_loss},
                             f"in epoch {epoch}", args.lr,
                             "" if args.dtype == "float32" else " or use --dtype float32")
            history.append((train_loss, val_loss))
            bar.set_postfix(train=f"{train_loss:.4f}", val=f"{val_loss:.4f}")
            tqdm.write(f"epoch {epoch:3d}  train loss {train_loss:.4f}  validation loss {val_loss:.4f}")
    elapsed = time.perf_counter() - start

    member_losses, member_preds = evaluate(params, data.x_val, data.y_val)  # one vmapped call
    ensemble_pred = member_preds.mean(0)
    ensemble_mae = float(jnp.abs(ensemble_pred - data.y_val).mean())
    stats = aclnn.runtime_stats()
    summary = {
        "initial_validation_loss": initial_val,
        "final_train_loss": history[-1][0],
        "final_validation_loss": history[-1][1],
        "member_validation_losses": [float(v) for v in member_losses],
        "ensemble_validation_mae": ensemble_mae,
        "seconds": elapsed,
        "provider": stats["provider"],
        "executes": {k: v["execute"] for k, v in stats["calls"].items() if v["execute"]},
    }
    print("\nSummary")
    print(f"  validation loss: {initial_val:.4f} before training -> {history[-1][1]:.4f} after "
          f"({'fell' if history[-1][1] < initial_val else 'did NOT fall'}); "
          f"final train loss {history[-1][0]:.4f}")
    print(f"  ensemble of {args.ensemble} (one vmapped evaluation): member validation losses "
          + ", ".join(f"{v:.4f}" for v in summary["member_validation_losses"])
          + f"; ensemble-mean prediction MAE {ensemble_mae:.4f} (target scaled to {TARGET_RANGE})")
    print(f"  aclnn provider: {stats['provider']}; {elapsed:.1f} s of training")
    print_counts(summary["executes"], " executions")
    if args.plot:
        plot_history(history, args.plot)
        print(f"  loss curve: {args.plot}")
    return summary


def plot_history(history: list[tuple[float, float]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    epochs = np.arange(1, len(history) + 1)
    ax.plot(epochs, [h[0] for h in history], label="train")
    ax.plot(epochs, [h[1] for h in history], label="validation")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("jax_aclnn train")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="FILE.csv", help=f"train on this comma-separated file instead of the diabetes data: a header row naming the columns; rows with missing values are dropped, text columns one-hot encoded (at most {MAX_CATEGORIES} values) or left out, all reported")
    p.add_argument("--target", metavar="COLUMN", help="the numeric CSV column to predict (with --data)")
    p.add_argument("--epochs", type=integer(1, MAX_STEPS), default=30, help="training epochs (default: %(default)s)")
    p.add_argument("--batch-size", type=integer(MIN_BATCH, why="batch norm of one example gives the same output whatever the input, so nothing would train"), default=32, help=f"examples per step, at least {MIN_BATCH} (batch norm) (default: %(default)s)")
    p.add_argument("--devices", type=integer(1, MAX_DEVICES), default=1, help="data-parallel devices (on the CPU: host devices) sharing each global batch (default: %(default)s)")
    p.add_argument("--lr", type=positive_float, default=3e-3, help="Adam learning rate (default: %(default)s)")
    p.add_argument("--ensemble", type=integer(1, MAX_ENSEMBLE), default=4, help="models trained from different seeds in one vmapped step (default: %(default)s)")
    p.add_argument("--seed", type=integer(0, MAX_SEED), default=0, help="random seed (default: %(default)s)")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32", help="compute dtype (default: %(default)s)")
    p.add_argument("--plot", metavar="FILE.png", help="write the loss curve to this PNG")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
