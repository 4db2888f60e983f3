"""The documentation site's API reference (docs/api.rst) documents every
public name: each name in ``jax_aclnn.__all__`` and each Flax layer has an
autodoc directive there, and every directive names a public object. Fast: the
directives are read from the page; the full build (``bash .ci/docs``) checks
that they render without warnings."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jax_aclnn

ROOT = Path(__file__).resolve().parents[1]
API_PAGE = ROOT / "docs" / "api.rst"
FLAX_MODULES = ("linen", "nnx")
DIRECTIVE = re.compile(r"^\.\. auto(?:function|class)::\s+(\S+)", re.M)


def documented() -> list[str]:
    """The objects the API page's autofunction/autoclass directives document."""
    return DIRECTIVE.findall(API_PAGE.read_text(encoding="utf-8"))


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
    return {f"jax_aclnn.{name}" for name in jax_aclnn.__all__} | flax_layers()


def test_every_public_name_is_in_the_api_reference():
    missing = sorted(public_names() - set(documented()))
    assert not missing, f"{API_PAGE.relative_to(ROOT)} lacks an autodoc directive for {missing}"


def test_the_api_reference_documents_public_names_once():
    names = documented()
    assert sorted(set(names) - public_names()) == [], "not in jax_aclnn.__all__ nor a Flax layer"
    assert len(names) == len(set(names)), "documented twice"


def test_the_flax_layers_are_found():
    # Guards the source reading above against finding nothing.
    assert flax_layers() == {"jax_aclnn.flax.linen.BatchNorm", "jax_aclnn.flax.nnx.BatchNorm"}
