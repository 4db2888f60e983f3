"""docs/adding-an-operator.md is the truth: its table of files is exactly
what its code blocks touch, at most three new files and three edited ones,
every edited file holds each marker once, and applied to a copy of the
repository the blocks make exactly those files differ. (``.ci/new-operator``
goes on: it builds that copy and runs every test of every operator on it.)"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import adding_an_operator as recipe

ROOT = recipe.ROOT


def test_the_page_has_blocks_and_a_table():
    assert recipe.blocks() and recipe.table()


def test_a_caption_holding_a_hash_is_quoted():
    """MyST parses a directive's options as YAML: unquoted, a caption's
    ``# marker`` is a comment, dropped from the page (and a warning, which
    the strict docs build fails on)."""
    captions = re.findall(r"^:caption: (.*)$", recipe.PAGE.read_text(encoding="utf-8"), re.M)
    unquoted = [c for c in captions if " #" in c and not (c.startswith('"') and c.endswith('"'))]
    assert not unquoted


def test_the_table_lists_exactly_the_files_the_blocks_touch():
    blocks = recipe.blocks()
    touched = {b.path: "new" if b.marker is None else "edited" for b in blocks}
    assert touched == recipe.table()


def test_a_new_operator_is_at_most_three_new_files_and_three_edited_ones():
    # The FFI side has nothing per operator (one handler serves every one).
    kinds = list(recipe.table().values())
    assert kinds.count("new") <= 3 and kinds.count("edited") <= 3, recipe.table()


def test_every_marker_is_on_one_line_of_its_file():
    for block in recipe.blocks():
        path = ROOT / block.path
        if block.marker is None:
            assert not path.exists(), f"{block.path} exists: the page adds it"
        else:
            recipe.marker_line(path.read_text(encoding="utf-8").splitlines(), block.marker,
                               block.path)


def test_applied_to_a_copy_it_changes_exactly_the_listed_files(tmp_path):
    copy = tmp_path / "checkout"
    # The working tree's files, as .ci/new-operator copies them: tracked
    # and untracked ones not ignored.
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    files = [name for name in files if name]
    for name in files:
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    touched = recipe.apply(copy)
    changed = {name for name in files if (ROOT / name).is_file()
               and (copy / name).read_bytes() != (ROOT / name).read_bytes()}
    added = {str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file()} - set(files)
    assert changed | added == set(touched) == set(recipe.table())


def test_a_caption_of_another_form_is_refused():
    page = "```{code-block} c++\n:caption: csrc/x.h somewhere\n\nint x;\n```\n"
    with pytest.raises(ValueError, match="neither"):
        recipe.blocks(page)


def test_the_new_python_files_import_what_the_package_has():
    """Each ``from jax_aclnn[.x] import name`` of the page's Python names an
    existing module or attribute (a renamed module breaks the page here, not
    only in .ci/new-operator's build)."""
    import ast
    import importlib

    for block in recipe.blocks():
        if not block.path.endswith(".py") or block.marker is not None:
            continue
        for node in ast.walk(ast.parse(block.text, block.path)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jax_aclnn"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    assert hasattr(module, alias.name) or importlib.util.find_spec(name), (
                        f"{block.path}: {name} does not exist")
