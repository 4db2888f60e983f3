"""Shared machinery of the command line (``python -m jax_aclnn``): the
error a user can fix, the check for the ``cli`` extra, argument types
that refuse bad option values while parsing, the checks of an output
file and of the memory a run needs, and the environment and errors of
``bench``'s measuring child processes.

A :class:`UsageError` raised anywhere in a command (or by argparse) ends
the command with one line on stderr and exit status 2, a
:class:`Diverged` training run with one line and exit status 1;
``--debug`` or ``JAX_ACLNN_DEBUG=1`` prints its traceback first.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PROG = "python -m jax_aclnn"
DEBUG_ENV = "JAX_ACLNN_DEBUG"
#: The largest seed: JAX's keys and NumPy's generators take a signed 64-bit integer.
MAX_SEED = 2**63 - 1
#: The most training steps (or epochs): optax's optimizers count their updates in int32.
MAX_STEPS = 2**31 - 1
#: The most data-parallel devices: JAX takes over a minute to make 100,000 host devices.
MAX_DEVICES = 1024

#: What the commands import beyond the library, by import name: the name
#: pip knows it by. ``pip install "jax_aclnn[cli]"`` installs them all.
CLI_PACKAGES = {
    "optax": "optax",
    "sklearn": "scikit-learn",
    "tqdm": "tqdm",
    "rich": "rich",
    "matplotlib": "matplotlib",
}
CLI_INSTALL = 'pip install "jax_aclnn[cli]"'


class UsageError(Exception):
    """A mistake the user can fix (a file, a column, an option value).

    The message names the problem and the fix, on one line. ``prog`` is the
    command it concerns (``None``: the command being run).
    """

    #: The command's exit status.
    status = 2

    def __init__(self, message: str, prog: str | None = None):
        super().__init__(message)
        self.prog = prog


class Diverged(UsageError):
    """A training run whose loss became NaN or infinite: the options were
    valid, the run failed (exit status 1); the message suggests a smaller
    ``--lr``."""

    status = 1


def check_converging(losses: dict[str, float], when: str, lr: float, fix: str = "") -> None:
    """Raises :class:`Diverged` if one of ``losses`` (name: value) is NaN or
    infinite; ``when`` says where in the run (``"at step 50"``), ``fix`` is
    told after lowering ``--lr`` (now ``lr``)."""
    if not all(math.isfinite(v) for v in losses.values()):
        found = ", ".join(f"{name} {value}" for name, value in losses.items())
        raise Diverged(f"training diverged: {found} {when}; lower --lr (now {lr:g}){fix}")


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are :class:`UsageError` (so they
    print like every other user error: one line, exit status 2)."""

    def error(self, message: str):  # argparse's hook; never returns
        raise UsageError(f"{message} (see {self.prog} --help)", prog=self.prog)


def debugging(argv: Sequence[str]) -> bool:
    """Whether the user asked for tracebacks (``--debug`` or ``$JAX_ACLNN_DEBUG``)."""
    return "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def add_debug_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true",
                   help=f"show a traceback for user errors too (or set {DEBUG_ENV}=1)")


def require_cli_packages() -> None:
    """Raises :class:`UsageError` naming the packages of the ``cli`` extra
    that are not installed. Looks them up without importing them."""
    missing = [pip for name, pip in CLI_PACKAGES.items() if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"the command line needs {', '.join(missing)}, not installed; "
                         f"install it with: {CLI_INSTALL}")


def check_environment() -> None:
    """Raises :class:`UsageError` for a jax_aclnn environment variable set
    to a value the library refuses (it would refuse it only when an
    operator is first compiled; :func:`jax_aclnn.build_info` checks them)."""
    import jax_aclnn as aclnn

    try:
        aclnn.build_info()
    except ValueError as e:
        raise UsageError(str(e)) from None


def jax_devices() -> list[Any]:
    """``jax.devices()``; :class:`UsageError` if JAX cannot start the
    platforms ``$JAX_PLATFORMS`` names (JAX itself ends in a bare
    ``AssertionError`` when it skips a ``cuda`` without a GPU)."""
    import jax

    try:
        return jax.devices()
    except (AssertionError, RuntimeError) as e:
        platforms = jax.config.jax_platforms
        if not platforms:
            raise
        detail = str(e).splitlines()[0] if str(e) else (
            f"no {' or '.join(platforms.split(','))} device on this machine; set JAX_PLATFORMS "
            "to a platform it has (e.g. cpu), or unset it")
        raise UsageError(f"JAX_PLATFORMS={platforms}: {detail}") from None


def available_memory() -> int:
    """Bytes a new allocation can have: Linux's ``MemAvailable``, else the
    physical memory."""
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(need: int, what: str, fix: str) -> None:
    """Raises :class:`UsageError` if ``need`` bytes (for ``what``, which
    starts the message) are more than :func:`available_memory`; ``fix``
    ends the message."""
    available = available_memory()
    if need > available:
        gib = lambda n: f"{n / 2**30:,.1f} GiB"  # noqa: E731
        raise UsageError(f"{what} needs about {gib(need)} of memory, {gib(available)} available; {fix}")


def check_output_file(option: str, path: str, example: str) -> None:
    """Refuses an ``option`` path a command would write only at its end:
    empty, a folder, in a missing folder, or not writable (tried by opening
    it for appending, and removing it again if it was not there).
    ``example`` is a file name to suggest."""
    if not path.strip():
        raise UsageError(f"{option} needs a file name, e.g. {option} {example}")
    file = Path(path)
    if file.is_dir():
        raise UsageError(f"{option} {path} is a folder; give a file name, e.g. {file / example}")
    folder = file.resolve().parent
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: no folder {folder}; create it or pick another path")
    existed = file.exists()
    try:
        with open(file, "ab"):
            pass
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot write there ({e.strerror}); pick another path") from None
    if not existed:
        file.unlink()


def progress_disabled(quiet: bool) -> bool | None:
    """tqdm's ``disable``: off when ``quiet`` or when stdout is not a terminal
    (a log file, CI: the bar's carriage-return frames would interleave with
    the printed lines); ``None`` lets tqdm also turn it off when stderr is
    not a terminal."""
    return True if quiet or not sys.stdout.isatty() else None


def integer(minimum: int, maximum: int | None = None, why: str | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer from ``minimum`` to ``maximum`` (if given);
    ``why``, if given, is the reason for the bounds, told with the refusal."""
    wanted = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
    reason = f": {why}" if why else ""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be an integer {wanted}, got {text!r}{reason}")
        return value

    return parse


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number above zero."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def comma_list(parse_item: Callable[[str], Any], what: str) -> Callable[[str], list[Any]]:
    """An argparse ``type``: a comma-separated list of ``parse_item(item)``;
    ``parse_item`` raises ``ValueError`` on a bad item."""

    def parse(text: str) -> list[Any]:
        items = [t.strip() for t in text.split(",")]
        try:
            return [parse_item(t) for t in items]
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{e} in {text!r}; expected {what}") from None

    return parse


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    """A ``parse_item`` for :func:`comma_list`: one of ``choices``."""

    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"unknown {text!r}")
        return text

    return parse


def child_env(**variables: str) -> dict[str, str]:
    """The environment of a measuring child process: this one's, importing
    this jax_aclnn."""
    package_root = str(Path(__file__).resolve().parents[2])
    return dict(os.environ, PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]),
                **variables)


def child_error(returncode: int, stderr: str) -> str:
    """The last line a failed child process wrote, or how it ended."""
    lines = stderr.strip().splitlines() or [
        f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"]
    return lines[-1]


def print_counts(counts: dict[str, int], unit: str = "") -> None:
    """One indented line per name and its count (then ``unit``), the names
    in a column as wide as the longest."""
    width = max(map(len, counts), default=0)
    for name, count in counts.items():
        print(f"    {name:{width}s} {count:6d}{unit}")


def print_table(title: str, columns: list[str], text_columns: int, rows: list[list[str]],
                width: int = 140) -> None:
    """A rich table: the first ``text_columns`` columns left-aligned, numbers right."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i < text_columns else "right", no_wrap=i < text_columns)
    for row in rows:
        table.add_row(*row)
    Console(width=width).print(table)
