"""The recipe of docs/adding-an-operator.md, read from the page itself.

The page's captioned code blocks are the complete change that adds its
example operator: a caption ``<path> (new file)`` gives a whole new file,
``<path>, above the line: <marker>`` lines to insert above the one line of
that file that holds the marker. :func:`blocks` reads them, :func:`apply`
makes the change in a copy of the repository. ``.ci/new-operator`` applies
them to a fresh copy, builds it and runs every test of every operator on
it; ``tests/test_adding_an_operator.py`` checks the page against the
repository without building.

    python tests/adding_an_operator.py DIRECTORY   # applies the page to a copy
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "adding-an-operator.md"
_BLOCK = re.compile(r"^```\{code-block\} \S+\n:caption: (?P<caption>[^\n]+)\n\n(?P<body>.*?)^```$",
                    re.M | re.S)
_NEW = re.compile(r"^(?P<path>\S+) \(new file\)$")
_ABOVE = re.compile(r"^(?P<path>\S+), above the line: (?P<marker>.+)$")
#: The page's table of files: | `path` | ... |
_TABLE_ROW = re.compile(r"^\| `(?P<path>[^`]+)` \| (?P<what>new|edited):", re.M)


@dataclass(frozen=True)
class Block:
    """A code block of the page: a new file (``marker`` None) or lines to
    insert above the line holding ``marker``."""

    path: str
    text: str
    marker: str | None = None


def blocks(page: str | None = None) -> list[Block]:
    """The page's captioned code blocks, in order.

    Raises:
      ValueError: a caption is neither form.
    """
    out = []
    for m in _BLOCK.finditer(page if page is not None else PAGE.read_text(encoding="utf-8")):
        caption, body = m["caption"], m["body"]
        # Quoted where it holds a "#", which MyST's option parser takes for
        # the start of a comment.
        if len(caption) > 1 and caption[0] == caption[-1] == '"':
            caption = caption[1:-1]
        if new := _NEW.match(caption):
            out.append(Block(new["path"], body))
        elif above := _ABOVE.match(caption):
            out.append(Block(above["path"], body, above["marker"].strip()))
        else:
            raise ValueError(f"{PAGE.name}: a code block's caption is neither '<path> (new "
                             f"file)' nor '<path>, above the line: <marker>': {caption!r}")
    return out


def table(page: str | None = None) -> dict[str, str]:
    """The page's table of files: path -> "new" or "edited"."""
    text = page if page is not None else PAGE.read_text(encoding="utf-8")
    return {m["path"]: m["what"] for m in _TABLE_ROW.finditer(text)}


def marker_line(lines: list[str], marker: str, path: str) -> int:
    """The index of the one line of ``lines`` that holds ``marker``.

    Raises:
      ValueError: no line or several lines hold it.
    """
    found = [i for i, line in enumerate(lines) if marker in line]
    if len(found) != 1:
        raise ValueError(f"{path}: {len(found)} lines hold the page's marker {marker!r} "
                         "(one must)")
    return found[0]


def apply(directory: Path, page: str | None = None) -> list[str]:
    """Makes the page's change in ``directory`` (a copy of the repository);
    returns the paths it touched.

    Raises:
      ValueError: a new file exists already, an edited one does not, or a
        marker is not on exactly one line.
    """
    touched = []
    for block in blocks(page):
        target = directory / block.path
        if block.marker is None:
            if target.exists():
                raise ValueError(f"{block.path}: the page adds it, but it exists")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text, encoding="utf-8")
        else:
            if not target.exists():
                raise ValueError(f"{block.path}: the page edits it, but it does not exist")
            lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
            at = marker_line(lines, block.marker, block.path)
            lines[at:at] = [line + "\n" for line in block.text.splitlines()]
            target.write_text("".join(lines), encoding="utf-8")
        if block.path not in touched:
            touched.append(block.path)
    return touched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="a copy of the repository to change")
    args = parser.parse_args()
    for path in apply(args.directory):
        print(path)


if __name__ == "__main__":
    main()
