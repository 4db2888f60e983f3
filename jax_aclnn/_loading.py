"""Runtime loading: finds and imports the compiled extension ``_aclnn_ffi``,
checks that it fits the jaxlib and the Python that import it, and loads the
bundled host aclnn provider into it.

The nanobind module ``_aclnn_ffi`` holds the XLA FFI handlers. They reach an
aclnn provider only through ``dlopen``: the bundled host provider
(``libaclnn_host.so``, beside this file) serves JAX's ``"cpu"`` platform, and
CANN's libraries serve the Ascend NPU platform, loaded on first use
(:func:`jax_aclnn.load_cann`). Every other module reaches the extension
through this one.

The checks, each an ImportError of one line naming the stale side and the
fix: the extension's XLA FFI API version against the installed jaxlib's
(before any handler is registered), and its package version and operator
list against this Python's (:func:`check_operators`, once ``jax_aclnn.ops``
has defined the operators).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import jaxlib.version

from jax_aclnn import _compat


def _compiled_dir() -> Path:
    """The directory holding the compiled extension and the host provider.

    Normally this package's own. When an uninstalled source checkout shadows
    the installed package (``python -m jax_aclnn`` run from the repository
    root), the compiled files are those of the installed copy.
    """
    here = Path(__file__).resolve().parent
    for entry in [str(here.parent)] + sys.path:
        candidate = Path(entry or ".").resolve() / "jax_aclnn"
        if any(candidate.glob("_aclnn_ffi*.so")):
            return candidate
    raise ImportError(
        "jax_aclnn's compiled extension (_aclnn_ffi) is missing: install the package with "
        "`pip install .`"
    )


#: Directory of the compiled extension and the host provider library.
PACKAGE_DIR = _compiled_dir()
#: This Python's own directory (``jax_aclnn/`` of a source checkout when it
#: differs from :data:`PACKAGE_DIR`).
PYTHON_DIR = Path(__file__).resolve().parent
if PACKAGE_DIR != PYTHON_DIR:
    sys.modules["jax_aclnn"].__path__.append(str(PACKAGE_DIR))

from jax_aclnn import _aclnn_ffi  # noqa: E402,F401  (imported from here by the library)


def _stale(difference: str) -> ImportError:
    """The error for an extension built from other sources than this Python:
    which side is stale, and the fix."""
    if PACKAGE_DIR != PYTHON_DIR:  # a source checkout importing an installed build
        return ImportError(
            f"jax_aclnn: the installed build in {PACKAGE_DIR} is stale for the source checkout "
            f"{PYTHON_DIR.parent}, whose Python imports it ({difference}): run `pip install .` "
            f"in {PYTHON_DIR.parent}")
    return ImportError(
        f"jax_aclnn: the compiled extension in {PACKAGE_DIR} is stale for the Python beside it "
        f"({difference}): reinstall jax_aclnn (`pip install .` in its source)")


# Before any handler is registered: an XLA of an older FFI API version than
# the headers' refuses the handlers (or they write past its structs).
if not hasattr(_aclnn_ffi, "ffi_api_version"):  # built before the build recorded its versions
    raise _stale("the extension predates the versions it records")
_compat.check_ffi_api(tuple(_aclnn_ffi.ffi_api_version()), jaxlib.version.__version__)


def check_operators(version: str, operators: Mapping[str, str]) -> None:
    """Raises ImportError unless the extension was built from this Python's
    package version (when the build recorded it: Bazel's does not) and
    operator list, ``{function name: aclnn operator}``, as csrc/operators.h
    lists them (``_aclnn_ffi.operators()``)."""
    if not hasattr(_aclnn_ffi, "package_version"):
        raise _stale("the extension predates the package version it records")
    built = _aclnn_ffi.package_version()
    if built is not None and built != version:
        raise _stale(f"the extension is jax_aclnn {built}'s, the Python {version}'s")
    compiled = dict(_aclnn_ffi.operators())
    if compiled != dict(operators):
        only_compiled = [f"{k} ({v})" for k, v in compiled.items() if operators.get(k) != v]
        only_python = [f"{k} ({v})" for k, v in operators.items() if compiled.get(k) != v]
        raise _stale("operators only in the extension: " + (", ".join(only_compiled) or "none")
                     + "; only in the Python: " + (", ".join(only_python) or "none"))


#: The bundled host aclnn provider.
HOST_PROVIDER_LIBRARY = PACKAGE_DIR / "libaclnn_host.so"

_aclnn_ffi.load_host_provider(str(HOST_PROVIDER_LIBRARY))
