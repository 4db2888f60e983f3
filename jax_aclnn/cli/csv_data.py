"""A user's CSV file as a regression data set (``train --data FILE --target COLUMN``).

Parsed with Python's ``csv`` module (quoted fields, a UTF-8 byte-order mark),
which keeps each cell's text so that columns can be told apart by content;
numpy's ``genfromtxt`` turns text into NaN silently, and pandas is no
dependency of this package. The rules:

* the first row names the columns (a first row of numbers only is refused
  as a missing header); values are separated by commas; a value may be of
  any length (Python's ``csv`` module stops at 131,072 characters);
* a number is written as in C and as spreadsheets write it: a sign, ASCII
  digits with a decimal point and exponent, or ``inf``/``nan``; Python's
  ``float()`` also takes digit groups (``1_000``) and other scripts' digits,
  which are text here, as in spreadsheets and pandas (a grouped number is
  reported with the number to write instead);
* a cell that is empty, ``NA``, ``N/A``, ``NaN``, ``null``, ``None`` or ``?``
  (any case) is missing, as is an infinite number; a row with a missing value
  in a column that is used is dropped, and the drops are counted;
* a column without values is left out (as the empty column of a trailing
  comma); a column with any cell that is not a number is a text column: one-hot
  encoded (a 0/1 feature per value) when it has at most ``MAX_CATEGORIES``
  distinct values, else left out; both are reported;
* the target column must be numeric (``train`` fits a regression).
"""

from __future__ import annotations

import csv
import difflib
import math
import re
from dataclasses import dataclass

import numpy as np

from jax_aclnn.cli.common import UsageError

MISSING = frozenset({"", "na", "n/a", "nan", "null", "none", "?"})
#: Text columns with at most this many distinct values are one-hot encoded.
MAX_CATEGORIES = 10
#: The longest value the reader takes (the csv module's limit, a C long, is
#: 131,072 characters by default; a whole file is read into memory anyway).
MAX_FIELD = 2**31 - 1
#: A number as a CSV file writes it (see the module's rules), blanks around it allowed.
_NUMBER = re.compile(r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?|inf|infinity|nan)\s*",
                     re.ASCII | re.IGNORECASE)
#: A number with its digits in groups of three, the groups separated by '_'
#: (Python's 1_000) or ',' (a quoted "1,000"): text in a CSV file.
_GROUPED_NUMBER = re.compile(r"\s*[+-]?\d{1,3}(?:([_,])\d{3})(?:\1\d{3})*(?:\.\d*)?(?:e[+-]?\d+)?\s*",
                             re.ASCII | re.IGNORECASE)


@dataclass
class Table:
    """The usable part of a CSV file."""

    x: np.ndarray  # (rows, features) float64, all finite
    y: np.ndarray  # (rows,) float64, all finite
    features: list[str]  # a column name, or "column=value" for a one-hot feature
    notes: list[str]  # what was encoded, left out or dropped, for the user


def read_regression_csv(path: str, target: str) -> Table:
    """Features and a numeric target from ``path`` under the rules above.

    Raises:
      UsageError: the file cannot be read or is not a CSV with a header;
        ``target`` is not one of its columns or is not numeric; no feature
        column is usable.
    """
    header, rows = _read(path)
    if target not in header:
        raise UsageError(f"no column {target!r} in {path}; {_columns_hint(header, target)}")
    columns = {name: _Column.parse(name, [row[i] for _, row in rows], [n for n, _ in rows])
               for i, name in enumerate(header)}
    y = columns.pop(target)
    if y.text is not None and (plain := _ungrouped(y.text)) is not None:
        raise UsageError(
            f"--target {target!r} has {_preview(y.text)!r} on line {y.text_line}, a number "
            f"with grouped digits, which is text in a CSV file; write it as {plain} "
            "(no '_' or ',' between digits)")
    if y.text is not None:
        raise UsageError(
            f"--target {target!r} is not numeric ({y.text_cell()}, "
            f"{len(y.categories)} distinct values): train fits a regression; choose a numeric "
            "column, or encode the classes as numbers")
    notes, features, blocks = [], [], []
    for col in columns.values():
        if col.text is None and np.isnan(col.values).all():
            notes.append(f"left out column {col.name!r}: no values")
        elif col.text is None:
            features.append(col.name)
            blocks.append(col.values[:, None])
        elif len(col.categories) <= MAX_CATEGORIES:
            features += [f"{col.name}={c}" for c in col.categories]
            blocks.append(col.one_hot())
            values = ", ".join(repr(_preview(c)) for c in col.categories)
            notes.append(f"one-hot encoded text column {col.name!r} "
                         f"({len(col.categories)} values: {values}){col.grouped_hint()}")
        else:
            notes.append(f"left out column {col.name!r}: not numeric ({col.text_cell()}) and "
                         f"{len(col.categories)} distinct values (one-hot encoding takes at most "
                         f"{MAX_CATEGORIES}){col.grouped_hint()}")
    if not features:
        raise UsageError(f"{path} has no usable feature column besides {target!r}"
                         + "".join(f"; {n}" for n in notes) + "; add numeric columns")
    x = np.concatenate(blocks, axis=1)
    keep = np.isfinite(x).all(1) & np.isfinite(y.values)
    if not keep.all():
        notes.append(f"dropped {int((~keep).sum())} of {len(keep)} rows with missing values")
    return Table(x[keep], y.values[keep], features, notes)


@dataclass
class _Column:
    name: str
    values: np.ndarray  # float64; NaN where missing or text
    text: str | None  # the first cell that is not a number, if any
    text_line: int | None  # its line in the file
    categories: list[str]  # distinct non-missing cells, sorted (if text)
    cells: list[str]

    @classmethod
    def parse(cls, name: str, cells: list[str], lines: list[int]) -> _Column:
        values = np.full(len(cells), np.nan)
        text = text_line = None
        for i, cell in enumerate(cells):
            if cell.strip().lower() in MISSING:
                continue
            try:
                values[i] = _number(cell)
            except ValueError:
                if text is None:
                    text, text_line = cell, lines[i]
        categories = sorted({c.strip() for c in cells if c.strip().lower() not in MISSING}) if text is not None else []
        return cls(name, values, text, text_line, categories, cells)

    def text_cell(self) -> str:
        """Where the column's first text is, for a message: ``'abc' on line 3``."""
        return f"{_preview(self.text)!r} on line {self.text_line}"

    def grouped_hint(self) -> str:
        """For a text column whose first text is a number with grouped digits:
        the number to write instead, for a note; else empty."""
        plain = _ungrouped(self.text) if self.text is not None else None
        return "" if plain is None else (f"; {_preview(self.text)!r} is a number with grouped "
                                         f"digits: to use it as one, write {plain}")

    def one_hot(self) -> np.ndarray:
        """(rows, categories) of 0/1; NaN in every column where a cell is missing."""
        cells = [c.strip() for c in self.cells]
        out = np.array([[float(c == k) for k in self.categories] for c in cells])
        out[[c.lower() in MISSING for c in cells]] = np.nan
        return out.reshape(len(cells), len(self.categories))


def _read(path: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header's column names and the non-blank rows with the lines they
    start on (a quoted value can span lines)."""
    start = 1  # the line of the record being read
    limit = csv.field_size_limit()  # process-wide: restored below
    try:
        csv.field_size_limit(MAX_FIELD)
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f, strict=True)  # strict: an unclosed quote is an error
            records = []
            for row in reader:
                if any(c.strip() for c in row):
                    records.append((start, row))
                start = reader.line_num + 1
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; check the --data path") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory; --data takes a CSV file") from None
    except PermissionError:
        raise UsageError(f"{path}: permission denied; make the file readable") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{path} is not a CSV text file (byte {e.object[e.start]:#04x} at offset "
                         f"{e.start} is not UTF-8 text); save it as a UTF-8 CSV") from None
    except csv.Error as e:
        if "end of data" in str(e):
            raise UsageError(f"line {start} of {path} opens a quoted value that is not closed before "
                             "the end of the file; add the closing quote") from None
        if "field limit" in str(e):
            raise UsageError(f"line {start} of {path} has a value of more than {MAX_FIELD:,} "
                             "characters; shorten it, or remove its column from the file") from None
        if "expected after" in str(e):
            raise UsageError(f"line {start} of {path} has a quoted value with more text after its "
                             f"closing quote ({e}); end the value at the quote, or write a quote "
                             'inside a quoted value twice ("")') from None
        raise UsageError(f"line {start} of {path} is not readable CSV ({e}); save it as a UTF-8 CSV") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    finally:
        csv.field_size_limit(limit)
    if not records:
        raise UsageError(f"{path} is empty; it needs a header row naming the columns, then data rows")
    (_, first), rows = records[0], records[1:]
    header = [c.strip() or f"(unnamed column {i + 1})" for i, c in enumerate(first)]
    if len(header) < 2:
        raise UsageError(f"{path} is not a comma-separated table: its first row "
                         f"({_preview(first[0])}) holds one column; write the column names, "
                         "then one row per example, with the values separated by commas")
    if all(_is_number(c) for c in first):
        raise UsageError(f"{path} has no header: its first row ({_preview(','.join(first))}) "
                         "is numbers; add a first row naming the columns, e.g. x1,x2,y")
    for name in header:
        if header.count(name) > 1:
            raise UsageError(f"column {name!r} appears twice in the header of {path}; "
                             "give the columns distinct names")
    for line, row in rows:
        if len(row) != len(header):
            raise UsageError(f"line {line} of {path} has {len(row)} values, its header has "
                             f"{len(header)} columns; give every row one value per column")
    return header, rows


def _preview(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(cell: str) -> float:
    """The number a cell writes (the module's rules); ValueError if it is text."""
    if not _NUMBER.fullmatch(cell):
        raise ValueError(f"not a number: {cell!r}")
    return float(cell)


def _is_number(cell: str) -> bool:
    try:
        return math.isfinite(_number(cell))
    except ValueError:
        return False


def _ungrouped(cell: str) -> str | None:
    """A number written with grouped digits (``1_000``, ``-12,345.5``) as it
    is written in a CSV file (``1000``, ``-12345.5``); None for other text."""
    match = _GROUPED_NUMBER.fullmatch(cell)
    return match and cell.strip().replace(match.group(1), "")


def _columns_hint(header: list[str], target: str) -> str:
    close = difflib.get_close_matches(target, header, n=1) or [
        c for c in header if c.lower() == target.lower()]
    hint = f"did you mean --target {close[0]!r}? " if close else ""
    return f"{hint}its columns: {', '.join(header)}"
