"""``.. project-layout::``: the repository's source files with the first line
of each one's own description (a Python module's docstring, a C++ file's
leading ``//`` comment), generated at build time so that it cannot go stale.

Option ``:roots:``: the folders to walk for ``*.py``, ``*.h`` and ``*.cc``
files, space-separated, relative to the repository root, in this order.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive, directives

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = (".py", ".h", ".cc")
# Sphinx roles in a docstring (:func:`x`, :class:`~a.b`) shown as literals.
ROLE = re.compile(r":[a-z:]+:`~?([^`]+)`")


def description(path: Path) -> str:
    """The first sentence of the file's own description ('' if none; a
    ``.cc`` file without one refers to its header)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        doc = ast.get_docstring(ast.parse(text)) or ""
    else:
        lines = []
        for line in text.splitlines():
            if not line.startswith("//"):
                break
            lines.append(line[2:].strip())
        doc = " ".join(lines)
    doc = " ".join(doc.split("\n\n")[0].split())
    if not doc and path.suffix == ".cc" and path.with_suffix(".h").exists():
        return f"Implements {path.with_suffix('.h').name}."
    first = re.split(r"(?<=\.)\s", doc, maxsplit=1)[0]
    return ROLE.sub(r"\1", first).replace("``", "")


class ProjectLayout(Directive):
    has_content = False
    option_spec = {"roots": directives.unchanged_required}

    def run(self):
        rows = []
        for root in self.options["roots"].split():
            for path in sorted((ROOT / root).rglob("*")):
                rel = path.relative_to(ROOT)
                if path.suffix not in SUFFIXES:
                    continue
                rows.append((str(rel), description(path)))
                self.state.document.settings.env.note_dependency(str(path))
        table = nodes.table()
        group = nodes.tgroup(cols=2)
        table += group
        group += nodes.colspec(colwidth=35)
        group += nodes.colspec(colwidth=65)
        head = nodes.thead()
        body = nodes.tbody()
        group += head
        group += body
        head += self._row("file", "what it holds (its own first line)", literal=False)
        for rel, text in rows:
            body += self._row(rel, text)
        return [table]

    @staticmethod
    def _row(first: str, second: str, literal: bool = True):
        row = nodes.row()
        cell = nodes.entry()
        cell += nodes.paragraph("", "", nodes.literal(first, first) if literal else nodes.Text(first))
        row += cell
        cell = nodes.entry()
        cell += nodes.paragraph("", second)
        row += cell
        return row


def setup(app):
    app.add_directive("project-layout", ProjectLayout)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
