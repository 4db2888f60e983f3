"""A network whose gradient runs every aclnn operator of the package.

Each operator's module registers how its differentiable op enters a
network (:func:`register`): a normalization or an activation (``h -> h``
of the same shape), or a loss (``(prediction, target) -> scalar``). The
network is built from the registry, so an operator added to the package is
part of it with nothing else to edit::

    h = x
    for each block:  h = h @ w;  every normalization;  every activation
    p = sigmoid(h @ w_out)        # predictions in (0, 1)
    loss = the sum of every loss of (p, y)

It is the model of ``python -m jax_aclnn train``, of the training step
``python -m jax_aclnn bench`` measures and of the tests that check that a
training step runs every operator; a quick way to check an install::

    from jax_aclnn import network
    params = network.init(jax.random.key(0), features=10, width=32, blocks=2)
    grads = jax.jit(jax.grad(network.loss))(params, x, y)   # x (N, 10), y (N,)

Each layer also has its ``plain`` form: the same formula in jax.numpy,
differentiated by JAX itself (the pure-JAX baseline of ``bench`` and of
the tests): ``network.loss(params, x, y, plain=True)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

#: The kinds of layer, in the order a block applies them.
KINDS = ("normalization", "activation", "loss")


@dataclass(frozen=True)
class Layer:
    """How a differentiable op enters the network.

    ``apply`` runs it through jax_aclnn, ``plain`` is the same formula in
    jax.numpy. A normalization's take ``(h, axis_name)`` (``axis_name``:
    the mapped axis to synchronize over, or None), an activation's ``h``,
    a loss's ``(prediction, target)``.
    """

    op: str
    kind: str
    apply: Callable[..., Any]
    plain: Callable[..., Any]


#: The registered layers, in the order their operators' modules register them.
LAYERS: list[Layer] = []


def register(op: str, kind: str, apply: Callable[..., Any], plain: Callable[..., Any]) -> None:
    """Adds ``op``'s layer (called by the operators' modules)."""
    if kind not in KINDS:
        raise ValueError(f"{op}: layer kind {kind!r} is not one of {KINDS}")
    LAYERS.append(Layer(op, kind, apply, plain))


def _of(kind: str) -> list[Layer]:
    return [layer for layer in LAYERS if layer.kind == kind]


def init(key: jax.Array, features: int, width: int, blocks: int,
         dtype: Any = jnp.float32) -> list[jax.Array]:
    """The weights: ``(features, width)``, ``blocks - 1`` of ``(width,
    width)``, and ``(width, 1)`` for the prediction (Glorot normal)."""
    sizes = [features] + [width] * blocks + [1]
    keys = jax.random.split(key, len(sizes) - 1)
    glorot = jax.nn.initializers.glorot_normal()
    return [glorot(k, (a, b), dtype) for k, a, b in zip(keys, sizes[:-1], sizes[1:])]


def predict(params: list[jax.Array], x: jax.Array, *, plain: bool = False,
            axis_name: Any = None) -> jax.Array:
    """Predictions in (0, 1), shape ``(batch,)``, in ``x``'s dtype; with
    ``plain``, every layer in jax.numpy. ``axis_name`` (inside ``shard_map``
    or ``pmap``) synchronizes the normalizations over that axis."""
    h = x
    for w in params[:-1]:
        h = h @ w.astype(h.dtype)
        for layer in _of("normalization"):
            h = (layer.plain if plain else layer.apply)(h, axis_name)
        for layer in _of("activation"):
            h = (layer.plain if plain else layer.apply)(h)
    return jax.nn.sigmoid(h @ params[-1].astype(h.dtype))[:, 0]


def loss(params: list[jax.Array], x: jax.Array, y: jax.Array, *, plain: bool = False,
         axis_name: Any = None) -> jax.Array:
    """The sum of every registered loss of the predictions and ``y``
    (shape ``(batch,)``), as a float32 scalar."""
    p = predict(params, x, plain=plain, axis_name=axis_name)
    y = y.astype(p.dtype)
    return sum((layer.plain if plain else layer.apply)(p, y).astype(jnp.float32)
               for layer in _of("loss"))


__all__ = ["KINDS", "LAYERS", "Layer", "init", "loss", "predict", "register"]
