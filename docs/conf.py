"""Sphinx configuration of the jax_aclnn documentation.

Build: ``bash .ci/docs`` (or ``sphinx-build -W --keep-going -n -b html docs build/docs``
with the package and its ``docs`` extra installed). The API reference is generated
by autodoc from the checkout's docstrings (the package must be installed,
for its compiled files); nothing is fetched from the
network (no remote intersphinx inventories).
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

from sphinx.util.inspect import stringify_signature

DOCS = Path(__file__).resolve().parent
# The docstrings of this checkout (its compiled files come from the installed
# copy, as when pytest runs from the repository root).
sys.path.insert(0, str(DOCS.parent))
sys.path.insert(0, str(DOCS / "_ext"))

import jax_aclnn  # noqa: E402

project = "jax_aclnn"
release = version = jax_aclnn.__version__
copyright = "the jax_aclnn authors"  # noqa: A001 - Sphinx's name

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "myst_parser",
    "layout",  # docs/_ext/layout.py: the generated "Layout" table
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "furo"
# Text as written: option names such as --data stay two hyphens.
smartquotes = False
html_title = f"jax_aclnn {release}"

# Headings get anchors for [text](page.md#anchor) links between pages.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# Docstrings are Google style (Args/Returns/Raises).
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
# Signatures as users call them, as in the docstrings' prose: the tensor
# arguments are ``Any`` (whatever jnp.asarray accepts) and the Flax layers'
# fields carry Flax's private type aliases; the docstrings give the dtypes
# and shapes.
autodoc_typehints = "none"
autodoc_preserve_defaults = True
# "Returns:" descriptions of the form "The loss: a scalar ..." are prose, not a
# return type to cross-reference: napoleon then shows them inline.
napoleon_use_rtype = False

# Nitpicky (-n) checks every reference in the public docstrings. Without
# network there is no inventory of these third-party projects or of Python's
# standard library: their names are exempt, nothing of jax_aclnn is.
nitpicky = True
_NO_INVENTORY = ["jax", "jaxlib", "flax", "optax", *sorted(sys.stdlib_module_names)]
nitpick_ignore_regex = [
    # JAX's, Flax's, optax's and the standard library's own names (e.g.
    # :func:`jax.export.export`, :mod:`contextvars` in a docstring).
    (r"py:(class|mod|func|obj|meth|attr|data|exc)", rf"({'|'.join(_NO_INVENTORY)})(\..*)?"),
]


def _constructor_signature(app, what, name, obj, options, signature, return_annotation):
    """A class whose metaclass hides its constructor (Flax nnx modules show
    ``(*args, **kwargs)``) gets its ``__init__``'s parameters, without hints."""
    if what != "class" or signature != "(*args, **kwargs)":
        return None
    sig = inspect.signature(obj.__init__)
    sig = sig.replace(parameters=list(sig.parameters.values())[1:])  # without self
    return stringify_signature(sig, show_annotation=False), None


def setup(app):
    app.connect("autodoc-process-signature", _constructor_signature)
