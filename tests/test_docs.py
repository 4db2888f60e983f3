"""The documentation site's API reference (docs/api.rst) documents every
public name: each name in ``jax_aclnn.__all__`` and each Flax layer is in
one of its autosummary tables (which give each its own page), and every
entry names a public object; their docstrings' Returns sections read as
prose. Every code block of the pages names its language. Fast: the tables,
docstrings and blocks are read from the sources; the full build (``bash
.ci/docs``) checks that they render without warnings and that no page
scrolls sideways in a 1280-px-wide window."""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

import jax_aclnn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "_ext"))
import operator_tables  # noqa: E402  (docs/_ext)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
API_PAGE = DOCS / "api.rst"
FLAX_MODULES = ("linen", "nnx")
DIRECTIVE = re.compile(r"^\.\. ([\w:-]+)::\s*(\S*)")
# An opening or closing fence of a Markdown code block (``` or ~~~), with
# what follows it.
FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
# Inline literals and roles (``x: y``, :func:`a`), whose colons are text.
LITERAL = re.compile(r"``.*?``|:[\w:]+:`[^`]*`")


def documented() -> list[str]:
    """The full names in the API page's autosummary tables (each entry
    relative to the ``currentmodule`` above it), the generated operator
    tables it includes first (docs/_ext/operator_tables.py)."""
    names, module, in_table = [], "", False
    text = API_PAGE.read_text(encoding="utf-8").replace(
        f".. include:: {operator_tables.GENERATED}",
        operator_tables.text())
    for line in text.splitlines():
        directive = DIRECTIVE.match(line)
        if directive:
            in_table = directive[1] == "autosummary"
            if directive[1] in ("currentmodule", "py:currentmodule"):
                module = directive[2]
        elif in_table and line.startswith((" ", "\t")):
            entry = line.strip()
            if entry and not entry.startswith(":"):  # not an option such as :toctree:
                names.append(f"{module}.{entry.lstrip('~')}")
        elif line.strip():
            in_table = False
    return names


def flax_layers() -> set[str]:
    """The public classes of jax_aclnn.flax.linen/nnx, read from their source
    (without importing Flax, an optional extra)."""
    names = set()
    for module in FLAX_MODULES:
        tree = ast.parse((ROOT / "jax_aclnn" / "flax" / f"{module}.py").read_text(encoding="utf-8"))
        names |= {f"jax_aclnn.flax.{module}.{node.name}" for node in tree.body
                  if isinstance(node, ast.ClassDef) and not node.name.startswith("_")}
    return names


def public_names() -> set[str]:
    from jax_aclnn import network

    from jax_aclnn import nn, optax

    return ({f"jax_aclnn.{name}" for name in jax_aclnn.__all__} | flax_layers()
            | {f"jax_aclnn.network.{name}" for name in network.__all__ if name[0].islower()
               or name == "Layer"}
            | {f"jax_aclnn.nn.{name}" for name in nn.__all__}
            | {f"jax_aclnn.optax.{name}" for name in optax.__all__})


def test_every_public_name_is_in_the_api_reference():
    missing = sorted(public_names() - set(documented()))
    assert not missing, f"{API_PAGE.relative_to(ROOT)} lacks an autosummary entry for {missing}"


def test_the_api_reference_documents_public_names_once():
    names = documented()
    assert sorted(set(names) - public_names()) == [], "not public"
    assert len(names) == len(set(names)), "documented twice"


def test_the_flax_layers_are_found():
    # Guards the source reading above against finding nothing.
    assert flax_layers() == {"jax_aclnn.flax.linen.BatchNorm", "jax_aclnn.flax.nnx.BatchNorm",
                             "jax_aclnn.flax.linen.RMSNorm", "jax_aclnn.flax.nnx.RMSNorm"}


def test_the_api_tables_generate_pages():
    # Every autosummary table has :toctree: (a page per name), and the pages
    # are written at build time, never committed.
    text = API_PAGE.read_text(encoding="utf-8") + operator_tables.text()
    tables = text.count(".. autosummary::")
    assert tables >= 4 and text.count(":toctree: _autosummary") == tables
    assert "_autosummary/" in (DOCS / ".gitignore").read_text(encoding="utf-8").split()


def test_every_code_block_names_its_language():
    # A block without one is highlighted as Python (a diagram or a shell
    # command comes out miscoloured): ```text, ```bash, ```python, ...
    unnamed = []
    for page in sorted(DOCS.glob("*.md")):
        opening = None
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            fence = FENCE.match(line)
            if not fence:
                continue
            if opening is None:
                opening = fence[1]
                if not fence[2].strip():
                    unnamed.append(f"{page.relative_to(ROOT)}:{number}")
            elif fence[1] == opening and not fence[2].strip():
                opening = None
    assert not unnamed, f"code blocks without a language: {unnamed}"


def public_docstrings() -> dict[str, str]:
    """The docstrings of the public functions and of the Flax layers and
    their ``__call__`` (the latter read from the source)."""
    docs = {f"jax_aclnn.{name}": inspect.getdoc(getattr(jax_aclnn, name)) or ""
            for name in jax_aclnn.__all__}
    for module in FLAX_MODULES:
        tree = ast.parse((ROOT / "jax_aclnn" / "flax" / f"{module}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                docs[f"jax_aclnn.flax.{module}:{node.name}"] = ast.get_docstring(node) or ""
    return docs


def test_returns_sections_are_prose():
    # napoleon reads a Returns section's first line "A: b" as the type A
    # (shown in italics, "A -- b"); the type is in the signature, so the
    # first line has no colon outside literals and roles.
    typed = []
    for name, doc in public_docstrings().items():
        returns = re.search(r"^Returns:\n[ \t]+(.*)$", doc, re.M)
        if returns and ":" in LITERAL.sub("", returns[1]):
            typed.append(f"{name}: {returns[1]!r}")
    assert not typed, f"Returns sections read as a type: {typed}"


def test_the_declaring_page_runs_as_written():
    """docs/declaring.md's Python blocks, run in order in one namespace as a
    user copies them: the softplus training step (its reference on this CPU,
    whose host provider lacks aclnnSoftplusBackward), the RmsNorm pair and
    check_dims of its rule and of one that does not hold."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    text = (ROOT / "docs" / "declaring.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 4
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/declaring.md", "exec"), namespace)  # noqa: S102
    assert jax.tree.leaves(namespace["grads"])[0].shape == (4, 2)
    assert namespace["y"].shape == (4, 8) and namespace["rstd"].shape == (4, 1)
    # the vjp's gradient of a loss through y and rstd equals the reference's
    # (the page's vjp once left rstd's cotangent out, issue 36)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    gamma = np.linspace(0.5, 1.5, 8, dtype=np.float32)

    def loss(norm):
        return lambda x, g: sum(jnp.sum(jnp.sin(o)) for o in norm(x, g, epsilon=1e-6))

    want = jax.grad(loss(namespace["rms_norm_reference"]), (0, 1))(x, gamma)
    got = jax.grad(loss(namespace["rms_norm"]), (0, 1))(x, gamma)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert namespace["dx"].shape == namespace["x"].shape
    assert namespace["per_example"].shape == namespace["x"].shape
    # check_dims names the factor of the rule that does not hold (issue 44)
    assert namespace["message"].startswith(
        "check_dims(rms_norm_lying): partitioning factor 'h' (size 16, over 8 devices) "
        "changes yOut"), namespace["message"]
