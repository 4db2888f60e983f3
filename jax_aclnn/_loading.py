"""Runtime loading: finds and imports the compiled extension ``_aclnn_ffi``
and loads the bundled host aclnn provider into it.

The nanobind module ``_aclnn_ffi`` holds the XLA FFI handlers. They reach an
aclnn provider only through ``dlopen``: the bundled host provider
(``libaclnn_host.so``, beside this file) serves JAX's ``"cpu"`` platform, and
CANN's libraries serve the Ascend NPU platform, loaded on first use
(:func:`jax_aclnn.load_cann`). Every other module reaches the extension
through this one.
"""

from __future__ import annotations

import sys
from pathlib import Path


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
if PACKAGE_DIR != Path(__file__).resolve().parent:
    sys.modules["jax_aclnn"].__path__.append(str(PACKAGE_DIR))

from jax_aclnn import _aclnn_ffi  # noqa: E402,F401  (imported from here by the library)

#: The bundled host aclnn provider.
HOST_PROVIDER_LIBRARY = PACKAGE_DIR / "libaclnn_host.so"

_aclnn_ffi.load_host_provider(str(HOST_PROVIDER_LIBRARY))
