"""Dimension rules: what each tensor dimension of an operator means.

A rule is written in the notation of Shardy sharding rules
(``jax.experimental.custom_partitioning``'s ``sharding_rule``): one group per
tensor parameter, the inputs, ``->``, then the outputs; groups separated by
``,``; each group a space-separated list of factor names, one per
dimension; ``...`` for any number of leading dimensions (the same in every
group that uses it); ``1`` for a dimension of size 1 that is never sharded.
aclnnRmsNorm's: ``"... h, h -> ... h, ... 1"``.

From a rule and the operands' shapes come the *factors* of
:mod:`jax_aclnn._sharding` (a name per dimension, None for one never
sharded): a factor an output has is partitioned, one only inputs have is
summed over (a reduction), one in ``replicated`` is never sharded. The
batching rule of a declared operator reads the rule too: a mapped
dimension joins ``...`` (:meth:`Rule.batchable`) or a named factor that
leads every output (:mod:`jax_aclnn._declared_batching`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: A token of a group: a factor name, ``...`` or ``1``.
_TOKEN = re.compile(r"\.\.\.|1|[A-Za-z][A-Za-z0-9_]*")
#: Names this module and :mod:`jax_aclnn._sharding` give factors themselves.
_RESERVED = re.compile(r"(lead|unsharded)[0-9]+")
ELLIPSIS = "..."
#: Factor names of the dimensions ``...`` stands for (``lead0`` the outermost;
#: Shardy's factor names start with a letter and hold no dots).
_LEADING = "lead{}"

Factors = tuple[str | None, ...]


@dataclass(frozen=True)
class Rule:
    """A parsed rule: ``inputs`` and ``outputs`` hold one group (a tuple of
    tokens) per tensor parameter; ``replicated`` the factors never sharded."""

    text: str
    inputs: tuple[tuple[str, ...], ...]
    outputs: tuple[tuple[str, ...], ...]
    replicated: frozenset[str]

    def batchable(self, mapped: Sequence[int]) -> bool:
        """Whether ``vmap`` can run one call: every group of a mapped input
        (indices into ``inputs``) starts with ``...``, which the mapped
        dimension then joins, and so does an output's at least (the outputs
        whose groups lack it, sums over ``...``, come per example from the
        reference)."""
        return (any(g[:1] == (ELLIPSIS,) for g in self.outputs)
                and all(self.inputs[i][:1] == (ELLIPSIS,) for i in mapped))

    def factors(self, inputs: Sequence[Sequence[Any]], outputs: Sequence[Sequence[Any]],
                where: str, labels: tuple[Sequence[str], Sequence[str]] | None = None
                ) -> tuple[list[Factors], list[Factors]]:
        """The factors of each array, from the arrays of each tensor
        parameter (``inputs``/``outputs``: a list of avals per parameter, a
        tensor list's several, an absent tensor's placeholder None);
        ``labels`` names the parameters in messages (default ``input 0``,
        ..., ``output 0``, ...).

        Raises:
          ValueError: an array's rank does not match its group, ``...``
            stands for different dimensions in two groups, a factor has two
            sizes, or a ``1`` dimension is not of size 1; naming ``where``,
            the parameter and the group.
        """
        sizes: dict[str, int] = {}
        leading: list[tuple[int, ...]] = []

        def one(group: tuple[str, ...], aval: Any, label: str) -> Factors:
            if aval is None:  # an absent tensor's placeholder
                return (None,)
            shape = tuple(aval.shape)
            fixed = [t for t in group if t != ELLIPSIS]
            has_ellipsis = len(fixed) != len(group)
            if len(shape) < len(fixed) or (not has_ellipsis and len(shape) != len(fixed)):
                raise ValueError(f"{where}: dims group {' '.join(group)!r} of {label} has "
                                 f"{len(fixed)}{' or more' if has_ellipsis else ''} dimensions, "
                                 f"the array has shape {shape}")
            lead = shape[: len(shape) - len(fixed)] if has_ellipsis else ()
            if has_ellipsis:
                if leading and leading[0] != lead:
                    raise ValueError(f"{where}: '...' stands for dimensions {leading[0]} in one "
                                     f"group and {lead} in {label}'s ({' '.join(group)!r})")
                leading.append(lead)
            names: list[str | None] = [_LEADING.format(i) for i in range(len(lead))]
            for token, n in zip(fixed, shape[len(lead):]):
                if token == "1":
                    if n != 1:
                        raise ValueError(f"{where}: dims group {' '.join(group)!r} of {label}: "
                                         f"a '1' dimension has size {n}")
                    names.append(None)
                    continue
                if sizes.setdefault(token, n) != n:
                    raise ValueError(f"{where}: factor {token!r} has size {sizes[token]} and "
                                     f"{n} (in {label}'s group {' '.join(group)!r})")
                names.append(None if token in self.replicated else token)
            return tuple(names)

        def side(groups, arrays, names):
            return [one(g, a, name) for name, g, per in zip(names, groups, arrays) for a in per]

        in_labels, out_labels = labels or ([f"input {i}" for i in range(len(self.inputs))],
                                           [f"output {i}" for i in range(len(self.outputs))])
        return side(self.inputs, inputs, in_labels), side(self.outputs, outputs, out_labels)

    def size(self, factor: str, inputs: Sequence[Sequence[Any]]) -> int:
        """The size of ``factor`` in the input arrays (as :meth:`factors`
        takes them); a ValueError when no input has it."""
        for group, arrays in zip(self.inputs, inputs):
            if factor in group:
                for aval in arrays:
                    if aval is not None:
                        return aval.shape[group.index(factor) - len(group)]
        raise ValueError(f"dims: factor {factor!r} is in no input tensor given")


def describe(factor: str) -> str:
    """A factor of :meth:`Rule.factors` for messages: ``factor 'h'``, or
    ``dimension 0 of '...'``."""
    lead = re.fullmatch(_LEADING.format(r"([0-9]+)"), factor)
    return f"dimension {lead.group(1)} of '...'" if lead else f"factor {factor!r}"


def parse(text: str, n_inputs: int, n_outputs: int, replicated: Iterable[str] = (),
          where: str = "dims") -> Rule:
    """The :class:`Rule` of ``text`` for ``n_inputs`` input and ``n_outputs``
    output tensor parameters (an empty group is a rank-0 tensor's).

    Raises:
      TypeError: ``text`` is not a string.
      ValueError: naming the token: the text is not such a rule (no ``->``,
        an unknown character, ``...`` not in front or twice in a group, a
        factor twice in a group, an empty group), its group counts are not
        the parameters', or
        ``replicated`` names a factor the rule does not use.
    """
    if not isinstance(text, str):
        raise TypeError(f"{where}: a dims rule is a string, got {type(text).__name__}")
    replicated = (replicated,) if isinstance(replicated, str) else tuple(replicated)
    if text.count("->") != 1:
        raise ValueError(f"{where}: expected one '->' between the inputs' and the outputs' "
                         f"groups in {text!r}")
    lhs, rhs = text.split("->")

    def groups(part: str, count: int, kind: str) -> tuple[tuple[str, ...], ...]:
        if count == 0 and not part.strip():
            return ()
        out = []
        for raw in part.split(","):
            tokens = raw.split()
            for t in tokens:
                if not _TOKEN.fullmatch(t):
                    raise ValueError(f"{where}: unexpected token {t!r} in {text!r} (a factor "
                                     f"name, a letter then letters, digits or '_'; '...' "
                                     f"or '1')")
                if _RESERVED.fullmatch(t):
                    raise ValueError(f"{where}: factor name {t!r} in {text!r} is reserved "
                                     f"(jax_aclnn names factors so); pick another")
            if ELLIPSIS in tokens[1:]:
                raise ValueError(f"{where}: '...' stands for leading dimensions: it comes first "
                                 f"in a group, not as in {raw.strip()!r}")
            twice = next((t for i, t in enumerate(tokens) if t in tokens[:i] and t != "1"), None)
            if twice:
                raise ValueError(f"{where}: factor {twice!r} names two dimensions of one tensor "
                                 f"in {raw.strip()!r} of {text!r} (Shardy takes a factor once "
                                 f"per group): give each dimension its own factor")
            out.append(tuple(tokens))
        if len(out) != count:
            raise ValueError(f"{where}: {len(out)} groups for the {kind} in {text!r}, the "
                             f"prototype has {count} {kind} tensors")
        return tuple(out)

    rule = Rule(text, groups(lhs, n_inputs, "inputs"), groups(rhs, n_outputs, "outputs"),
                frozenset(replicated))
    used = {t for g in rule.inputs + rule.outputs for t in g}
    unknown = [r for r in replicated if r not in used or r in (ELLIPSIS, "1")]
    if unknown:
        raise ValueError(f"{where}: replicated names {', '.join(map(repr, unknown))}, which "
                         f"the rule {text!r} does not use as a factor")
    return rule


def elementwise(in_shapes: Sequence[Sequence[int]], out_shape: Sequence[int],
                n_outputs: int = 1) -> str:
    """The rule of an element-wise operator with numpy broadcasting: a factor
    per dimension of the broadcast result ``out_shape``; an operand's
    dimension that broadcasts along it is a ``1``."""
    names = [f"d{i}" for i in range(len(out_shape))]

    def group(shape: Sequence[int]) -> str:
        offset = len(out_shape) - len(shape)
        return " ".join(names[offset + i] if offset + i >= 0 and n == out_shape[offset + i]
                        else "1" for i, n in enumerate(shape))

    outs = ", ".join([" ".join(names)] * n_outputs)
    return f"{', '.join(group(s) for s in in_shapes)} -> {outs}"


__all__ = ["ELLIPSIS", "Factors", "Rule", "describe", "elementwise", "parse"]
