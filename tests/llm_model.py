"""A small Flax nnx language-model block for the catalogue's tests: token
embedding, RMSNorm, a projection with RoPE, a SwiGLU MLP, a tied output and
the cross-entropy loss, trained by AdamW; written once over two sets of
operations: jax_aclnn's (``ACLNN``) and Flax/optax/jax.numpy's (``PLAIN``)."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jax_aclnn import nn as aclnn_nn
from jax_aclnn import optax as aclnn_optax
from jax_aclnn.flax import nnx as aclnn_nnx


def _swiglu(x):
    a, b = jnp.split(x, 2, axis=-1)
    return jax.nn.silu(a) * b


def _rope(x, cos, sin):
    x1, x2 = jnp.split(x, 2, axis=-1)
    return x * cos + jnp.concatenate([-x2, x1], -1) * sin


ACLNN = SimpleNamespace(RMSNorm=aclnn_nnx.RMSNorm, swiglu=aclnn_nn.swiglu,
                        rope=aclnn_nn.rotary_embedding,
                        cross_entropy=aclnn_nn.softmax_cross_entropy_with_integer_labels,
                        adamw=aclnn_optax.adamw)
PLAIN = SimpleNamespace(RMSNorm=nnx.RMSNorm, swiglu=_swiglu, rope=_rope,
                        cross_entropy=optax.softmax_cross_entropy_with_integer_labels,
                        adamw=optax.adamw)


class Block(nnx.Module):
    def __init__(self, ops, vocab=32, dim=16, heads=2, hidden=32, seq=8, *, rngs):
        self.ops, self.heads = ops, heads
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)
        self.norm1, self.norm2 = ops.RMSNorm(dim, rngs=rngs), ops.RMSNorm(dim, rngs=rngs)
        self.proj = nnx.Linear(dim, dim, use_bias=False, rngs=rngs)
        self.up = nnx.Linear(dim, 2 * hidden, use_bias=False, rngs=rngs)
        self.down = nnx.Linear(hidden, dim, use_bias=False, rngs=rngs)
        d = dim // heads
        angles = np.arange(seq)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
        angles = np.concatenate([angles, angles], -1)[:, None].astype(np.float32)
        self.cos, self.sin = nnx.Variable(np.cos(angles)), nnx.Variable(np.sin(angles))

    def __call__(self, tokens):
        b, s = tokens.shape
        h = self.embed(tokens)
        q = self.proj(self.norm1(h)).reshape(b, s, self.heads, -1)
        h = h + self.ops.rope(q, self.cos[...][:s], self.sin[...][:s]).reshape(b, s, -1)
        h = h + self.down(self.ops.swiglu(self.up(self.norm2(h))))
        return self.embed.attend(h)


def loss_fn(model, tokens, targets):
    logits = model(tokens)
    return jnp.mean(model.ops.cross_entropy(logits, targets))


def make(ops, seed=0, learning_rate=1e-2):
    """The model and its optimizer, initialized from ``seed``."""
    model = Block(ops, rngs=nnx.Rngs(seed))
    optimizer = nnx.Optimizer(model, ops.adamw(learning_rate, weight_decay=0.01), wrt=nnx.Param)
    return model, optimizer


@nnx.jit
def train_step(model, optimizer, tokens, targets):
    loss, grads = nnx.value_and_grad(loss_fn)(model, tokens, targets)
    optimizer.update(model, grads)
    return loss


def batches(steps, batch=4, seq=8, vocab=32, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        data = rng.integers(0, vocab, (batch, seq + 1)).astype(np.int32)
        yield data[:, :-1], data[:, 1:]


def train(ops, steps=5, **kwargs):
    """The losses of ``steps`` steps and the final parameters."""
    model, optimizer = make(ops, **kwargs)
    losses = [float(train_step(model, optimizer, x, y)) for x, y in batches(steps)]
    return losses, nnx.state(model, nnx.Param)
