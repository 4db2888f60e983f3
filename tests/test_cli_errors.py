"""User errors of ``python -m jax_aclnn train|bench|info``: each ends with
one line on stderr naming the problem and the fix, exit status 2, and no
traceback unless asked for. The commands run in this process through
``main(argv)``: every error here is found before anything is compiled."""

from __future__ import annotations

import importlib.util
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np
import pytest

from jax_aclnn.__main__ import main

PROG = "python -m jax_aclnn"
ROOT = Path(__file__).resolve().parents[1]
CLI_PACKAGES = {"optax": "optax", "sklearn": "scikit-learn", "tqdm": "tqdm", "rich": "rich",
                "matplotlib": "matplotlib"}


def error_of(capsys, *argv: str) -> str:
    """The one stderr line of a command that must fail as a user error."""
    status = main(list(argv))
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(PROG) and ": error: " in lines[0], err
    return lines[0]


def write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def numeric_rows(n: int) -> str:
    return "".join(f"{i},{2 * i},{i % 3}\n" for i in range(n))


# --- files ------------------------------------------------------------------


def test_missing_file(capsys, tmp_path):
    line = error_of(capsys, "train", "--data", str(tmp_path / "missing.csv"), "--target", "x")
    assert "missing.csv: no such file; check the --data path" in line


def test_a_folder_is_not_a_file(capsys, tmp_path):
    assert "is a directory" in error_of(capsys, "train", "--data", str(tmp_path), "--target", "x")


def test_unreadable_file(capsys, tmp_path, monkeypatch):
    csv = write(tmp_path / "locked.csv", "a,y\n")

    def refuse(*args, **kwargs):  # chmod 000 does not stop root, who runs CI
        raise PermissionError(13, "Permission denied", csv)

    monkeypatch.setattr("jax_aclnn.cli.csv_data.open", refuse, raising=False)
    assert "permission denied; make the file readable" in error_of(
        capsys, "train", "--data", csv, "--target", "y")


def test_binary_file_is_not_a_csv(capsys, tmp_path):
    png = tmp_path / "plot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    line = error_of(capsys, "train", "--data", str(png), "--target", "y")
    assert "is not a CSV text file (byte 0x89 at offset 0 is not UTF-8 text); save it as a UTF-8 CSV" in line


def test_spreadsheet_is_not_a_csv(capsys, tmp_path):
    import zipfile

    xlsx = tmp_path / "data.xlsx"  # a workbook is a zip archive
    with zipfile.ZipFile(xlsx, "w") as z:
        z.writestr(zipfile.ZipInfo("xl/workbook.xml"), b"\xd0\xcf\x11\xe0 binary")
    line = error_of(capsys, "train", "--data", str(xlsx), "--target", "y")
    assert "data.xlsx is not a CSV text file (byte 0x" in line and "save it as a UTF-8 CSV" in line


def test_empty_file(capsys, tmp_path):
    csv = write(tmp_path / "empty.csv", "\n\n")
    assert "empty.csv is empty; it needs a header row" in error_of(
        capsys, "train", "--data", csv, "--target", "y")


def test_no_header(capsys, tmp_path):
    csv = write(tmp_path / "raw.csv", numeric_rows(20))
    line = error_of(capsys, "train", "--data", csv, "--target", "y")
    assert "raw.csv has no header: its first row (0,0,0) is numbers; add a first row naming" in line


def test_duplicate_column_names(capsys, tmp_path):
    csv = write(tmp_path / "d.csv", "a,a,y\n" + numeric_rows(20))
    assert "column 'a' appears twice" in error_of(capsys, "train", "--data", csv, "--target", "y")


def test_row_with_too_few_values(capsys, tmp_path):
    csv = write(tmp_path / "ragged.csv", "a,b,y\n1,2,3\n4,5\n")
    assert "line 3 of" in (line := error_of(capsys, "train", "--data", csv, "--target", "y"))
    assert "has 2 values, its header has 3 columns" in line


# --- columns and rows -----------------------------------------------------


def test_unknown_target_lists_the_columns(capsys, tmp_path):
    csv = write(tmp_path / "d.csv", "alpha,beta,price\n" + numeric_rows(20))
    line = error_of(capsys, "train", "--data", csv, "--target", "Price")
    assert "no column 'Price' in" in line and "did you mean --target 'price'?" in line
    assert line.endswith("its columns: alpha, beta, price")


@pytest.mark.parametrize("text", ["Notes on the data\nsee the y column\n", "a;b;y\n1;2;3\n4;5;6\n"])
def test_text_that_is_not_a_csv(capsys, tmp_path, text):
    csv = write(tmp_path / "d.csv", text)
    line = error_of(capsys, "train", "--data", csv, "--target", "y")
    assert "d.csv is not a comma-separated table: its first row (" in line
    assert ") holds one column; write the column names" in line


def test_categorical_target_is_refused(capsys, tmp_path):
    rows = "".join(f"{i},{i % 4},{['setosa', 'virginica'][i % 2]}\n" for i in range(20))
    csv = write(tmp_path / "iris.csv", "a,b,species\n" + rows)
    line = error_of(capsys, "train", "--data", csv, "--target", "species")
    assert "--target 'species' is not numeric ('setosa' on line 2, 2 distinct values)" in line
    assert "regression" in line


def test_grouped_numbers_in_the_target_say_what_to_write(capsys, tmp_path):
    """Regression (issue 28): "1_500" was read as 1500 (Python's float())."""
    rows = "".join(f"{i},{2 * i},{i}_500\n" for i in range(1, 21))
    csv = write(tmp_path / "d.csv", "a,b,y\n" + rows)
    assert error_of(capsys, "train", "--data", csv, "--target", "y").endswith(
        "error: --target 'y' has '1_500' on line 2, a number with grouped digits, which is text "
        "in a CSV file; write it as 1500 (no '_' or ',' between digits)")


def test_no_usable_feature(capsys, tmp_path):
    rows = "".join(f"id{i},{i}\n" for i in range(20))
    csv = write(tmp_path / "d.csv", "name,y\n" + rows)
    line = error_of(capsys, "train", "--data", csv, "--target", "y")
    assert "no usable feature column besides 'y'; left out column 'name'" in line


def test_too_few_rows(capsys, tmp_path):
    csv = write(tmp_path / "small.csv", "a,b,y\n" + numeric_rows(9))
    assert "small.csv has 9 complete rows; train needs at least 10" in error_of(
        capsys, "train", "--data", csv, "--target", "y")


def test_too_few_rows_after_dropping_says_why(capsys, tmp_path):
    csv = write(tmp_path / "holes.csv", "a,b,y\n" + numeric_rows(8) + "1,,2\nNA,1,2\n3,4,?\n")
    line = error_of(capsys, "train", "--data", csv, "--target", "y")
    assert "holes.csv has 8 complete rows; dropped 3 of 11 rows with missing values; train needs at least 10" in line


def test_batch_larger_than_the_training_rows(capsys, tmp_path):
    csv = write(tmp_path / "d.csv", "a,b,y\n" + numeric_rows(20))
    assert "--batch-size 32 is more than the 16 training rows of d.csv" in error_of(
        capsys, "train", "--data", csv, "--target", "y")


# --- option values ----------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["train", "--epochs", "-1"], f"argument --epochs: must be an integer from 1 to {2**31 - 1}, got '-1'"),
    (["train", "--epochs", "many"], f"argument --epochs: must be an integer from 1 to {2**31 - 1}, got 'many'"),
    (["train", "--batch-size", "0"], "argument --batch-size: must be an integer >= 2, got '0'"),
    # Regression (issue 28): batch norm of one example trained nothing (zero
    # gradients) for the whole run, which ended with exit status 0.
    (["train", "--batch-size", "1", "--epochs", "1", "--ensemble", "1"],
     "argument --batch-size: must be an integer >= 2, got '1': batch norm of one example gives "
     "the same output whatever the input, so nothing would train"),
    (["train", "--ensemble", "0"], "argument --ensemble: must be an integer from 1 to 1024"),
    (["train", "--devices", "0"], "argument --devices: must be an integer from 1 to 1024"),
    (["train", "--lr", "0"], "argument --lr: must be a number > 0, got '0'"),
    (["train", "--lr", "nan"], "argument --lr: must be a number > 0, got 'nan'"),
    (["train", "--seed", "-1"], f"argument --seed: must be an integer from 0 to {2**63 - 1}, got '-1'"),
    (["train", "--dtype", "float64"], "argument --dtype: invalid choice: 'float64'"),
    (["train", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["train", "--devices", "3"], "--batch-size 32 must be a multiple of --devices 3"),
    (["train", "--devices", "64", "--batch-size", "64"], "--devices 64: only 8 cpu device(s)"),
    (["train", "--target", "y"], "--target y needs --data FILE.csv"),
    (["train", "--data", "x.csv"], "--data x.csv needs --target COLUMN"),
    (["train", "--plot", "/no/such/folder/loss.png"], "no folder /no/such/folder; create it"),
    (["train", "--plot", "loss.txt"], "not an image type matplotlib writes; end the name with .png"),
    (["bench", "--sizes", "1K,1X"], "argument --sizes: bad size '1X' in '1K,1X'; expected element counts"),
    (["bench", "--sizes", "0"], "argument --sizes: bad size '0'"),
    (["bench", "--ops", "logit_grad,relu"], "argument --ops: unknown 'relu' in 'logit_grad,relu'; expected some of"),
    (["bench", "--dtypes", "float64"], "argument --dtypes: unknown 'float64'"),
    (["bench", "--repeats", "0"], "argument --repeats: must be an integer >= 1"),
    (["bench", "--reuse-repeats", "-1"], "argument --reuse-repeats: must be an integer >= 0"),
    (["bench", "--bn-channels", "4"], "argument --bn-channels: must be an integer from 16 to 1024, got '4'"),
    (["info", "--verbose"], "unrecognized arguments: --verbose"),
    # Regression (issue 44): each ended in a traceback, an out-of-memory
    # error, or a hang (the windows were gathered one by one), or --devices
    # asked JAX for 100,000 host devices, which takes it minutes.
    (["train", "--epochs", "1" + "0" * 29], f"argument --epochs: must be an integer from 1 to {2**31 - 1}"),
    (["train-lm", "--steps", "1" + "0" * 29],
     f"argument --steps: must be an integer from 1 to {2**31 - 1}, got '1{'0' * 29}'"),
    (["train-lm", "--devices", "100000"], "argument --devices: must be an integer from 1 to 1024, got '100000'"),
    (["train-lm", "--hidden", "1000000000"],
     "error: a run of --dim 64, --layers 2, --heads 4, --hidden 1000000000, --seq 64, --batch-size 16, "
     "--eval-windows 256 needs about "),
    (["train-lm", "--dim", "100000"], "error: a run of --dim 100000, --layers 2, --heads 4, --hidden 128, "
     "--seq 64, --batch-size 16, --eval-windows 256 needs about "),
    (["train-lm", "--batch-size", "1000000000"], "--batch-size 1000000000, --eval-windows 256 needs about "),
    (["train-lm", "--eval-windows", "1000000000"], "--eval-windows 1000000000 needs about "),
    (["train-lm", "--export-npu", ""], "--export-npu needs a file name, e.g. --export-npu step.bin"),
])
def test_bad_option_values(capsys, argv, message):
    jax.devices()  # JAX's CPU backend started with conftest's 8 devices (--devices 64 asks for more)
    assert message in error_of(capsys, *argv)


def test_bench_out_must_be_a_folder(capsys, tmp_path):
    out = write(tmp_path / "taken", "")
    assert "--out " + out + " is a file; give a writable folder" in error_of(
        capsys, "bench", "--sizes", "1K", "--repeats", "1", "--reuse-repeats", "0", "--out", out)


@pytest.mark.parametrize("argv", [[], ["fly"]])
def test_no_or_unknown_command(capsys, argv):
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"{PROG}: error: ") and err.endswith(f"(see {PROG} --help)")


# --- tracebacks on request ------------------------------------------------------


@pytest.mark.parametrize("ask", ["--debug", "JAX_ACLNN_DEBUG"])
def test_debug_shows_the_traceback(capsys, tmp_path, monkeypatch, ask):
    argv = ["train", "--data", str(tmp_path / "missing.csv"), "--target", "x"]
    if ask == "--debug":
        argv.append("--debug")
    else:
        monkeypatch.setenv(ask, "1")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and "UsageError" in err
    assert err.strip().splitlines()[-1].startswith(f"{PROG} train: error: ")


def test_missing_file_from_the_shell():
    """The real entry point: exit status 2 and one line, no traceback."""
    out = subprocess.run([sys.executable, "-m", "jax_aclnn", "train", "--data", "missing.csv",
                          "--target", "x"], capture_output=True, text=True, timeout=120,
                         cwd=tempfile.gettempdir())
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == f"{PROG} train: error: missing.csv: no such file; check the --data path\n"


# --- the cli extra ----------------------------------------------------------------


@pytest.mark.parametrize("module", sorted(CLI_PACKAGES))
@pytest.mark.parametrize("command", ["train", "bench", "info"])
def test_missing_cli_package(capsys, monkeypatch, module, command):
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    line = error_of(capsys, command)
    assert line == (f"{PROG}: error: the command line needs {CLI_PACKAGES[module]}, not installed; "
                    'install it with: pip install "jax_aclnn[cli]"')


def test_missing_cli_package_from_the_shell():
    script = ("import runpy, sys; sys.modules['rich'] = sys.modules['optax'] = None; "
              "sys.argv[0] = 'jax_aclnn'; runpy.run_module('jax_aclnn', run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", script, "info"], capture_output=True, text=True,
                         timeout=120, cwd=tempfile.gettempdir())
    assert out.returncode == 2
    assert out.stderr == (f"{PROG}: error: the command line needs optax, rich, not installed; "
                          'install it with: pip install "jax_aclnn[cli]"\n')


def test_the_library_imports_no_cli_package():
    script = ("import sys, jax_aclnn; jax_aclnn.swish(jax_aclnn.logit(0.5)); "
              f"print(sorted(set({sorted(CLI_PACKAGES)!r}) & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=tempfile.gettempdir())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --- from the shell (issue 19): one line on stderr, exit status 2, no traceback ----------
# Each runs as a user would, outside the source tree; arguments that would train
# or measure on a failing version (epochs, sizes) are kept small.

TINY_TRAIN = ["--epochs", "1", "--ensemble", "1"]
TINY_BENCH = ["--ops", "logit_grad", "--dtypes", "float32", "--sizes", "1K", "--repeats", "1",
              "--reuse-repeats", "0", "--step-repeats", "0", "--quiet"]
HAS_CUDA_PLUGIN = any(importlib.util.find_spec(m) is not None
                      for m in ("jax_cuda12_plugin", "jax_cuda13_plugin"))


def shell(*argv: str, env: dict[str, str] | None = None, merge: bool = False) -> subprocess.CompletedProcess:
    """``python ARGV`` in a temporary folder (the installed package); with
    ``merge``, stderr goes to stdout's pipe, as in ``> log 2>&1``."""
    return subprocess.run([sys.executable, *argv], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merge else subprocess.PIPE, text=True,
                          timeout=300, cwd=tempfile.gettempdir(), env={**os.environ, **(env or {})})


def shell_error(*argv: str, env: dict[str, str] | None = None) -> str:
    """The one stderr line of ``python ARGV``, which must fail as a user error."""
    out = shell(*argv, env=env)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


@pytest.mark.parametrize("argv, env, message", [
    (["train", "--plot", ""], {}, "train: error: --plot needs a file name, e.g. --plot loss.png"),
    (["train", "--plot", "/proc/loss.png"], {},
     "train: error: --plot /proc/loss.png: cannot write there (No such file or directory)"),
    (["train", "--seed", str(2**64)], {}, "train: error: argument --seed: must be an integer "
     f"from 0 to {2**63 - 1}, got '{2**64}'"),
    (["bench", "--sizes", "64G"], {},
     "bench: error: --sizes: a case of 68,719,476,736 elements needs about 2,304.0 GiB of memory, "),
    (["bench", *TINY_BENCH, "--bn-memory-channels", "64G"], {},
     "bench: error: --bn-memory-channels 68,719,476,736 needs about 16,384.0 GiB of memory, "),
    (["train", "--bogus"], {},
     f"train: error: unrecognized arguments: --bogus (see {PROG} train --help)"),
    (["train"], {"JAX_ACLNN_EXECUTOR_REUSE": "banana"},
     "train: error: JAX_ACLNN_EXECUTOR_REUSE='banana': expected 1 (reuse executors, the default) or 0"),
    pytest.param(["train"], {"JAX_PLATFORMS": "cuda"},
                 "train: error: JAX_PLATFORMS=cuda: no cuda device on this machine; set JAX_PLATFORMS",
                 marks=pytest.mark.skipif(HAS_CUDA_PLUGIN, reason="a CUDA plugin is installed")),
    (["info"], {"JAX_ACLNN_NPU_PLATFORM": "cpu"}, "info: error: JAX_ACLNN_NPU_PLATFORM='cpu' names"),
])
def test_tool_inputs_from_the_shell(argv, env, message):
    if argv[0] == "train":
        argv = [*argv, *TINY_TRAIN]
    assert shell_error("-m", "jax_aclnn", *argv, env=env).startswith(f"{PROG} {message}")


def test_plot_path_that_is_a_folder(tmp_path):
    folder = tmp_path / "curve.png"
    folder.mkdir()
    assert shell_error("-m", "jax_aclnn", "train", "--plot", str(folder), *TINY_TRAIN) == (
        f"{PROG} train: error: --plot {folder} is a folder; give a file name, e.g. {folder}/loss.png")


def test_unclosed_quote_is_reported_at_its_line(tmp_path):
    csv = write(tmp_path / "q.csv", 'a,b,y\n1,"2,3\n4,5,6\n' + numeric_rows(20))
    assert shell_error("-m", "jax_aclnn", "train", "--data", csv, "--target", "y") == (
        f"{PROG} train: error: line 2 of {csv} opens a quoted value that is not closed before "
        "the end of the file; add the closing quote")


def test_unclosed_quote_in_a_large_file_is_reported_at_its_line(capsys, tmp_path):
    """Regression (issue 28): past 131,072 characters the open quote was
    reported as a value over the csv module's limit, with the fix "save it
    as a UTF-8 CSV"."""
    csv = write(tmp_path / "q.csv", 'a,b,y\n1,"2,3\n' + numeric_rows(20_000))
    assert error_of(capsys, "train", "--data", csv, "--target", "y").endswith(
        f"error: line 2 of {csv} opens a quoted value that is not closed before the end of the "
        "file; add the closing quote")


def test_text_after_a_closing_quote(capsys, tmp_path):
    csv = write(tmp_path / "q.csv", 'a,b,y\n1,"2"x,3\n' + numeric_rows(20))
    assert error_of(capsys, "train", "--data", csv, "--target", "y").endswith(
        f"line 2 of {csv} has a quoted value with more text after its closing quote (',' expected "
        """after '"'); end the value at the quote, or write a quote inside a quoted value twice ("")""")


def test_a_diverging_run_does_not_end_well():
    """One line and exit status 1 (the options were valid; the run failed)."""
    # float16 weights of 1e30 overflow (batch norm keeps float32 ones bounded)
    out = shell("-m", "jax_aclnn", "train", "--lr", "1e30", "--epochs", "2", "--ensemble", "1",
                "--dtype", "float16", "--quiet")
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith(f"{PROG} train: error: training diverged: train loss nan")
    assert out.stderr.endswith("in epoch 1; lower --lr (now 1e+30) or use --dtype float32\n")


def test_extreme_csv_values_train_as_their_scaled_copy(tmp_path):
    """A feature column near 1e200 was zeroed (its std overflowed) and a
    target spanning +-1.7e308 trained on NaN losses: both train exactly as
    the same data at unit scale (standardizing is scale-invariant)."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 60))
    y = a - 2 * b + 0.1 * rng.normal(size=60)

    def curve(name: str, a, y) -> list[str]:
        path = tmp_path / name
        np.savetxt(path, np.column_stack([a, b, y]), delimiter=",", header="a,b,y", comments="")
        out = shell("-m", "jax_aclnn", "train", "--data", str(path), "--target", "y", "--epochs", "2",
                    "--ensemble", "1", "--batch-size", "8", "--quiet")
        assert out.returncode == 0 and out.stderr == "", out.stderr  # no overflow warning
        return [line for line in out.stdout.splitlines() if line.startswith("epoch")]

    plain = curve("plain.csv", a, y)
    assert len(plain) == 2 and "nan" not in "".join(plain)
    assert curve("extreme.csv", a * 1e200, y / np.abs(y).max() * 1.7e308) == plain


def test_no_progress_frames_when_stdout_is_not_a_terminal():
    out = shell("-m", "jax_aclnn", "train", "--epochs", "2", "--ensemble", "1", merge=True)
    assert out.returncode == 0, out.stdout
    assert "\r" not in out.stdout and "epochs:" not in out.stdout
    assert [line[:9] for line in out.stdout.splitlines() if line.startswith("epoch")] == ["epoch   1", "epoch   2"]


def test_a_failing_child_shows_its_own_error_first(capsys, monkeypatch):
    monkeypatch.setattr("jax_aclnn.cli.bn_memory._SCRIPT", "import sys; sys.exit('child: no memory today')")
    assert main(["bench", *TINY_BENCH, "--bn-memory-channels", "16"]) == 2
    out = capsys.readouterr()
    assert out.out == ""  # nothing was measured first
    assert out.err == (f"{PROG} bench: error: --bn-memory-channels 16: the measuring process (aclnn) "
                       "failed: child: no memory today\n")


@pytest.mark.parametrize("value, reuse", [("banana", None), ("0", False), ("1", True)])
def test_executor_reuse_variable(value, reuse):
    """The library refuses a bad value when an operator is first lowered."""
    script = ("import jax.numpy as jnp, jax_aclnn; x = jnp.ones(4); "
              "jax_aclnn.hardshrink_backward(x, x, lambd=0.1); print(jax_aclnn.set_executor_reuse(True))")
    out = shell("-c", script, env={"JAX_ACLNN_EXECUTOR_REUSE": value})
    if reuse is None:
        assert out.returncode == 1
        assert ("ValueError: JAX_ACLNN_EXECUTOR_REUSE='banana': expected 1 (reuse executors, the "
                "default) or 0 (do not); set one of them, or unset it") in out.stderr.splitlines()
    else:
        assert out.returncode == 0 and out.stdout.strip() == str(reuse), out.stderr


@pytest.fixture(scope="module")
def flax_example():
    """examples/train_flax.py's ``main(argv)``."""
    pytest.importorskip("flax")
    return runpy.run_path(str(ROOT / "examples" / "train_flax.py"), run_name="train_flax")["main"]


@pytest.mark.parametrize("argv, message", [
    (["--log-every", "0"], "argument --log-every: must be an integer >= 1, got '0'"),
    (["--hidden", "0"], "argument --hidden: must be an integer >= 1, got '0'"),
    (["--batch-size", "0"], "argument --batch-size: must be an integer >= 1, got '0'"),
    (["--batch-size", "100000"], "--batch-size 100000 is more than the 353 training rows"),
    (["--seed", str(2**63)], f"argument --seed: must be an integer from 0 to {2**63 - 1}"),
    (["--lr", "-1"], "argument --lr: must be a number > 0, got '-1'"),
])
def test_flax_example_arguments(capsys, monkeypatch, flax_example, argv, message):
    monkeypatch.setattr(sys, "argv", ["train_flax.py"])  # argparse's prog
    with pytest.raises(SystemExit) as exit:
        flax_example([*argv, "--steps", "2"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"train_flax.py: error: {message}")


def test_flax_example_argument_from_the_shell():
    pytest.importorskip("flax")
    line = shell_error(str(ROOT / "examples" / "train_flax.py"), "--log-every", "0")
    assert line == "train_flax.py: error: argument --log-every: must be an integer >= 1, got '0' (see --help)"
