"""The API reference's operator tables, generated from the package's lists.

``docs/api.rst`` includes ``_operator_tables.rst``, which :func:`write`
makes at configuration time: an autosummary table of the aclnn operators
(``jax_aclnn.ops.OPERATOR_NAMES``) and one of the differentiable operators
(the rest of ``jax_aclnn.ops.__all__``). A new operator gets its pages
without an edit here or in ``api.rst``.
"""

from __future__ import annotations

from pathlib import Path

import jax_aclnn

#: Where the generated tables go, relative to docs/ (beside api.rst, so that
#: their pages go where api.rst's own tables put theirs).
GENERATED = Path("_operator_tables.rst")


def tables() -> dict[str, list[str]]:
    """Each table's title -> the public names it lists."""
    operators = list(jax_aclnn.ops.OPERATOR_NAMES)
    return {
        "aclnn operators": operators,
        "Differentiable operators": [n for n in jax_aclnn.ops.__all__ if n not in operators],
    }


INTROS = {
    "aclnn operators": "Each is one XLA custom call running the aclnn operator its page names.",
    "Differentiable operators": (
        "Forward in ``jax.numpy``, derivatives through the operators above (see "
        ":doc:`transformations` and :ref:`api-ops`)."),
}


def text() -> str:
    """The reStructuredText of the tables."""
    out = [".. currentmodule:: jax_aclnn", ""]
    for title, names in tables().items():
        out += [title, "-" * len(title), "", INTROS[title], "", ".. autosummary::",
                "   :toctree: _autosummary", "   :nosignatures:", ""]
        out += [f"   {name}" for name in names] + [""]
    return "\n".join(out)


def write(docs: Path) -> None:
    """Writes the tables under ``docs`` (only when they changed, so that
    Sphinx does not rebuild api.rst for nothing)."""
    path = docs / GENERATED
    if not path.exists() or path.read_text(encoding="utf-8") != text():
        path.write_text(text(), encoding="utf-8")
