"""The package's layout (issue 20): the library's modules import one another
without cycles, the library never imports the command-line tools
(``jax_aclnn.cli``, entered only through ``jax_aclnn.__main__``), and the
tools use only the public API.

The imports are read from the source (``ast``), every ``import`` statement
counted wherever it stands (in a function too). ``from jax_aclnn import x``
is an edge to the module ``jax_aclnn.x`` when that is a module, else to
``jax_aclnn``; the implicit import of a module's parent packages is not an
edge (as import-linter counts).
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jax_aclnn"
CLI = "jax_aclnn.cli"
ENTRY_POINT = "jax_aclnn.__main__"


def module_name(path: Path) -> str:
    parts = ("jax_aclnn",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
#: Compiled extension modules (no source here): no part of the graph.
COMPILED = {"jax_aclnn._aclnn_ffi", "jax_aclnn._ffi_testing"}


def imports(name: str) -> set[str]:
    """The jax_aclnn modules that module ``name`` imports."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for a in node.names:
                full = f"{base}.{a.name}"
                found.add(full if full in MODULES or full in COMPILED else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: imports(name) for name in MODULES}


def is_private(name: str) -> bool:
    return any(part.startswith("_") and part not in ("__init__", "__main__")
               for part in name.split("."))


def test_the_import_graph_is_read():
    assert "jax_aclnn._primitive" in GRAPH["jax_aclnn.ops.swish_backward"]
    assert "jax_aclnn.cli.common" in GRAPH["jax_aclnn.cli.train"]
    assert "jax_aclnn._autodiff" in GRAPH["jax_aclnn._primitive"]


def test_the_library_has_no_import_cycle():
    try:
        order = list(graphlib.TopologicalSorter(GRAPH).static_order())
    except graphlib.CycleError as e:
        pytest.fail(f"import cycle: {' -> '.join(e.args[1])}")
    assert set(order) == set(MODULES)


def test_the_library_never_imports_the_tools():
    offenders = {name: sorted(m for m in deps if m == CLI or m.startswith(CLI + "."))
                 for name, deps in GRAPH.items()
                 if name != ENTRY_POINT and not (name == CLI or name.startswith(CLI + "."))}
    assert {n: d for n, d in offenders.items() if d} == {}


def test_the_tools_use_only_the_public_api():
    offenders = {name: sorted(m for m in deps if is_private(m))
                 for name, deps in GRAPH.items() if name == CLI or name.startswith(CLI + ".")}
    assert {n: d for n, d in offenders.items() if d} == {}


def test_importing_the_library_imports_no_tool():
    code = ("import sys, jax_aclnn, jax_aclnn.flax; "
            "print(sorted(m for m in sys.modules if m.startswith('jax_aclnn.cli')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent)
    assert out.stdout.strip() == "[]"
