"""The command line as a user runs it."""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import statistics
import sys
import tempfile

import numpy as np
import pytest

from jax_aclnn.__main__ import main


def run(*args: str, env: dict[str, str] | None = None) -> str:
    # outside the source tree, so that the installed package is imported
    out = subprocess.run([sys.executable, "-m", "jax_aclnn", *args], capture_output=True,
                         text=True, timeout=300, cwd=tempfile.gettempdir(),
                         env=None if env is None else {**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("command", [[], ["train"], ["train-lm"], ["bench"], ["info"]])
def test_help(command):
    assert "usage:" in run(*command, "--help")


def test_bench_help_documents_the_modes():
    out = run("bench", "--help")
    assert "--modes" in out and "realistic" in out and "training process" in out


def test_bench_reports_a_failing_realistic_process(tmp_path, monkeypatch, capsys):
    from jax_aclnn.__main__ import main

    child = tmp_path / "python"
    child.write_text("#!/bin/sh\necho 'child: no memory today' >&2\nexit 1\n")
    child.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(child))
    assert main(["bench", "--ops", "logit_grad", "--sizes", "1K", "--dtypes", "float32", "--repeats", "1",
                 "--reuse-repeats", "0", "--step-repeats", "0", "--quiet"]) == 2
    assert capsys.readouterr().err.endswith(
        "bench: error: the realistic mode's measuring process failed: child: no memory today\n")


def test_bench_clean_mode_alone(tmp_path):
    import json

    run("bench", "--ops", "logit_grad", "--sizes", "1K", "--dtypes", "float32", "--modes", "clean",
        "--repeats", "2", "--reuse-repeats", "0", "--step-repeats", "0", "--quiet", "--out", str(tmp_path))
    assert [r["mode"] for r in json.loads((tmp_path / "bench.json").read_text())["rows"]] == ["clean"]


def test_bench_measures_the_catalogue_functions_the_host_runs(capsys):
    """Issue 46: bench's nn.* cases time jax_aclnn.nn's host kernels against
    the same function on its reference path and PyTorch's kernels (its
    outputs checked against XLA's first)."""
    from jax_aclnn.__main__ import main

    assert main(["bench", "--ops", "nn.rms_norm_grad,nn.swiglu", "--sizes", "2K",
                 "--dtypes", "bfloat16", "--modes", "clean", "--repeats", "1",
                 "--reuse-repeats", "0", "--step-repeats", "0", "--quiet"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if " nn." in line]
    assert len(rows) == 4 and all("bfloat16" in r and "2,048" in r for r in rows), rows
    assert all(len(re.findall(r"\d\.\d\dx", r)) == 2 for r in rows), rows  # vs XLA, vs torch


def test_bench_measures_rope_and_cross_entropy_on_the_host(capsys):
    """Issue 46: bench's RoPE and cross-entropy cases, forward and gradient
    (integer labels made torch tensors), against the reference path and
    PyTorch's formulas."""
    from jax_aclnn.__main__ import main

    ops = ("nn.rotary_embedding,nn.rotary_embedding_grad,"
           "nn.softmax_cross_entropy_with_integer_labels,"
           "nn.softmax_cross_entropy_with_integer_labels_grad")
    assert main(["bench", "--ops", ops, "--sizes", "2K", "--dtypes", "float32,bfloat16",
                 "--modes", "clean", "--repeats", "1", "--reuse-repeats", "0",
                 "--step-repeats", "0", "--quiet"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if " nn." in line]
    assert len(rows) == 16 and all("2,048" in r for r in rows), rows
    assert all(len(re.findall(r"\d\.\d\dx", r)) == 2 for r in rows), rows  # vs XLA, vs torch


def test_train_loss_falls_and_reports_the_provider(tmp_path):
    png = tmp_path / "loss.png"
    out = run("train", "--epochs", "3", "--ensemble", "2", "--quiet", "--plot", str(png))
    assert "(fell)" in out and "aclnn provider: host" in out
    # Regression (issue 44): the summary listed the catalogue's operators the
    # job never calls, with "0 executions", the longest name past the column.
    counts = re.findall(r"^    (aclnn\w+) +(\d+) executions$", out, re.M)
    assert {op for op, _ in counts} == {
        f"aclnn{op}" for op in ("SmoothL1LossBackward", "LogitGrad", "HardshrinkBackward",
                                "SwishBackward", "BatchNormReduceBackward")}, out
    assert all(int(n) > 0 for _, n in counts), out
    assert len({line.index(" executions") for line in out.splitlines() if line.endswith(" executions")}) == 1
    assert png.stat().st_size > 1000


def test_train_on_a_csv(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = x @ [1.0, -2.0, 0.5] + 0.1 * rng.normal(size=200)
    path = tmp_path / "data.csv"
    np.savetxt(path, np.column_stack([x, y]), delimiter=",", header="a,b,c,price", comments="")
    out = run("train", "--data", str(path), "--target", "price", "--epochs", "4", "--quiet",
              "--dtype", "bfloat16")
    assert "data.csv" in out and "(fell)" in out


def write_wine(path, edit=lambda rows: rows) -> str:
    """scikit-learn's wine data (178 rows, 13 columns) as a CSV with a header."""
    from sklearn.datasets import load_wine

    wine = load_wine()
    rows = [list(wine.feature_names)] + [[repr(float(v)) for v in row] for row in wine.data]
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(edit(rows))
    return str(path)


def train_in_process(capsys, *argv: str) -> tuple[str, str]:
    assert main(["train", *argv, "--epochs", "1", "--ensemble", "1", "--quiet"]) == 0
    out = capsys.readouterr()
    return out.out, out.err


def test_train_on_the_wine_data(capsys, tmp_path):
    out, err = train_in_process(capsys, "--data", write_wine(tmp_path / "wine.csv"), "--target", "proline")
    assert "wine.csv, 142 train / 36 validation rows, 12 features" in out and err == ""


def test_train_on_messy_wine_data(capsys, tmp_path):
    """Regression (issue 15): a text column and one empty cell dropped every
    row ("need at least 10 complete rows, got 0")."""
    def mess(rows):
        rows = [["name", *rows[0], "colour"]] + [
            [f"wine {i}", *row, ["red", "white", "rose"][i % 3]] for i, row in enumerate(rows[1:])]
        rows[5][3] = ""
        return rows

    out, err = train_in_process(capsys, "--data", write_wine(tmp_path / "wine.csv", mess), "--target", "proline")
    assert "wine.csv, 141 train / 36 validation rows, 15 features" in out  # 12 + 3 one-hot
    assert err.splitlines() == [
        "jax_aclnn train: warning: wine.csv: left out column 'name': not numeric ('wine 0' on line 2) "
        "and 178 distinct values (one-hot encoding takes at most 10)",
        "jax_aclnn train: warning: wine.csv: one-hot encoded text column 'colour' (3 values: 'red', 'rose', 'white')",
        "jax_aclnn train: warning: wine.csv: dropped 1 of 178 rows with missing values",
    ]


def test_csv_rules(tmp_path):
    from jax_aclnn.cli.csv_data import read_regression_csv

    path = tmp_path / "rules.csv"
    path.write_text(
        "\ufeffsize, city ,price,\n"  # a byte-order mark, spaces around a name, a trailing comma
        '1.5,"Oslo, NO",10,\n'       # a quoted comma
        "\n"                         # a blank line
        "2,Rome,NA,\n"               # missing target
        "3,,30,\n"                   # missing category
        "inf,Rome,40,\n"             # not finite
        "4,Rome,40,\n"
        '5e0,"Oslo, NO",-1,\n',
        encoding="utf-8")
    table = read_regression_csv(str(path), "price")
    assert table.features == ["size", "city=Oslo, NO", "city=Rome"]
    np.testing.assert_array_equal(table.x, [[1.5, 1, 0], [4, 0, 1], [5, 1, 0]])
    np.testing.assert_array_equal(table.y, [10, 40, -1])
    assert table.notes == ["one-hot encoded text column 'city' (2 values: 'Oslo, NO', 'Rome')",
                           "left out column '(unnamed column 4)': no values",
                           "dropped 3 of 6 rows with missing values"]


def test_csv_numbers_are_written_as_in_a_csv_file(tmp_path):
    """Regression (issue 28): cells were numbers if Python's float() took
    them, so digit groups ("1_000") and other scripts' digits were read as
    numbers, which no spreadsheet or CSV reader does. They are text now, and
    a column of grouped numbers is reported with the number to write."""
    from jax_aclnn.cli.csv_data import read_regression_csv

    path = tmp_path / "grouped.csv"
    rows = [(f"{i}_000", f"\u0661{i}", f"{i}", f" {i}e1 ", f"{i % 3}") for i in range(1, 21)]
    path.write_text("grouped,arabic,plain,blanks,y\n" + "".join(",".join(r) + "\n" for r in rows),
                    encoding="utf-8")
    table = read_regression_csv(str(path), "y")
    assert table.features == ["plain", "blanks"]
    np.testing.assert_array_equal(table.x, [[i, 10 * i] for i in range(1, 21)])
    assert table.notes == [
        "left out column 'grouped': not numeric ('1_000' on line 2) and 20 distinct values "
        "(one-hot encoding takes at most 10); '1_000' is a number with grouped digits: to use it "
        "as one, write 1000",
        "left out column 'arabic': not numeric ('\u06611' on line 2) and 20 distinct values "
        "(one-hot encoding takes at most 10)",
    ]


def test_csv_values_of_any_length(tmp_path):
    """Regression (issue 28): a value longer than the csv module's 131,072
    characters stopped the reader with "save it as a UTF-8 CSV" (the file
    was one); now it is read as any other, and messages show its start."""
    from jax_aclnn.cli.csv_data import read_regression_csv

    path = tmp_path / "long.csv"
    long = "x" * 200_000
    path.write_text("a,notes,y\n" + "".join(f"{i},{long if i == 1 else f'note {i}'},{i % 3}\n"
                                            for i in range(1, 21)))
    table = read_regression_csv(str(path), "y")
    assert table.features == ["a"] and table.x[:, 0].tolist() == list(range(1, 21))
    assert table.notes == [f"left out column 'notes': not numeric ('{'x' * 37}...' on line 2) and "
                           "20 distinct values (one-hot encoding takes at most 10)"]


def test_info():
    out = run("info")
    assert "platforms with aclnn handlers" in out and "cpu" in out
    assert "CANN" in out and "not found" in out
    assert re.search(r"host kernels \(chosen at run time\)\s*│?\s*(x86-64|baseline|native)", out), out
    assert re.search(r"host float16 conversions\s*│?\s*(F16C|NEON|portable)", out), out


def test_info_shows_full_paths_when_not_a_terminal():
    """Regression (issue 15): the table was cut at 80 columns with "…"."""
    home = "/opt/" + "/".join(f"long-folder-name-{i}" for i in range(12))
    out = run("info", env={"ASCEND_HOME_PATH": home})
    assert f"{home}/lib64 (missing" in out and "…" not in out


def test_info_folds_long_values_in_a_terminal():
    from rich.console import Console

    from jax_aclnn.cli import info

    path = "/opt/" + "/".join(f"folder-{i}" for i in range(20)) + "/libaclnn_host.so"
    console = Console(file=io.StringIO(), width=60, force_terminal=True, color_system=None)
    info.print_table({"host provider library": path}, console)
    text = console.file.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 60
    assert path in "".join(line.strip("│ ").removeprefix("host provider library")
                           for line in text.splitlines())


@pytest.mark.long_run
def test_bench_attention_table_measures_every_path(capsys):
    """Issue 46: bench's attention table times causal jit(grad) through
    jax_aclnn.nn (the host's blocked kernels), its references, jax.nn and
    PyTorch, each in a fresh process, with its peak resident memory."""
    from jax_aclnn.cli import attention_bench

    rows = attention_bench.measure(256, ["float32"], 1, torch_installed=True)
    assert [r["path"] for r in rows] == list(attention_bench.PATHS)
    assert all(r["wall_s"] > 0 and r["cpu_s"] > 0 and r["peak_bytes"] >= 0 for r in rows)
    attention_bench.print_results(rows)
    out = capsys.readouterr().out
    assert "256 tokens" in out and out.count("float32") == 4


@pytest.mark.long_run
def test_bench_grouped_matmul_table_times_every_path(capsys):
    """Issue 46: bench's grouped-matmul table times jit(grad) of a ragged
    product (uneven groups, one empty) through jax_aclnn.nn (the host's
    aclnnGroupedMatmulV4), its reference and jax.lax.ragged_dot, paired."""
    from jax_aclnn.cli import ragged_dot_bench

    assert list(ragged_dot_bench.group_sizes(100, 4)) == [12, 0, 37, 51]
    row = ragged_dot_bench.measure(64, 16, 24, 4, 1, "bfloat16")
    assert all(row[f"{m}_s"] > 0 and row[f"{m}_compile_s"] > 0 for m in ragged_dot_bench.MODES)
    ragged_dot_bench.print_results([row])
    out = capsys.readouterr().out
    assert "64 x 16 x 24, 4" in out and "bfloat16" in out


@pytest.mark.long_run
def test_bench_adamw_table_times_every_path(capsys, monkeypatch):
    """Issue 46: bench's optimizer table times an AdamW step through
    update_and_apply (the host's aclnnApplyAdamWV2 in place), optax and
    torch's fused AdamW, paired, on donated parameters carried from step
    to step."""
    import jax_aclnn as aclnn
    from jax_aclnn.cli import adamw_bench

    monkeypatch.setattr(adamw_bench, "SIZE", 3000)
    aclnn.reset_runtime_stats()
    row = adamw_bench.measure("float32", 1, torch_installed=True)
    assert all(row[f"{p}_s"] > 0 for p in adamw_bench.PATHS)
    calls = aclnn.runtime_stats()["calls"]["aclnnApplyAdamWV2"]["execute"]
    assert calls == 3 * adamw_bench.TENSORS  # the warm-up rounds and the timed one, in place
    assert row["aclnn_gbps"] == pytest.approx(3000 * 28 / row["aclnn_s"] / 1e9)  # float32: 7 passes
    adamw_bench.print_results([row], 20.0)
    out = capsys.readouterr().out
    assert "3,000 parameters in 30 tensors" in out and "copy 20.0 GB/s" in out


@pytest.mark.long_run
def test_bench_small_run_writes_its_results(tmp_path):
    import json

    out = run("bench", "--ops", "hardshrink_backward,batch_norm_reduce_backward", "--sizes", "1K",
              "--dtypes", "float32,bfloat16", "--repeats", "2", "--reuse-repeats", "2",
              "--step-repeats", "0", "--quiet", "--out", str(tmp_path))
    assert "memory copy bandwidth" in out and "executor reuse" in out and "realistic" in out
    result = json.loads((tmp_path / "bench.json").read_text())
    rows = result["rows"]
    assert len(rows) == 8 and all(r["vs_xla"] > 0 for r in rows)
    assert sorted(r["mode"] for r in rows) == ["clean"] * 4 + ["realistic"] * 4  # both by default
    assert all(r["aclnn_min_s"] <= r["aclnn_s"] <= r["aclnn_max_s"] for r in rows)
    step = result["executor_reuse"]["training step, batch 32"]
    assert step["aclnn_calls"] > 0 and step["workspace_queries_with_reuse"] == 0
    assert (tmp_path / "bench.png").stat().st_size > 1000


@pytest.mark.parametrize("op", ["smooth_l1_loss_backward", "batch_norm_reduce_backward"])
def test_bench_compares_the_custom_call_with_the_pure_jax_reference(op):
    """bench's "xla" column is the operator's pure-JAX reference (no custom
    call), its "aclnn" column the custom call, whichever is compiled first."""
    import numpy as np

    from jax_aclnn.cli import bench_cases

    ours, xla, _, args, _ = bench_cases.make_case(op, 1024, np.float32, 16, np.random.default_rng(0))
    assert "aclnn_" not in xla.as_text()
    assert f"aclnn_{op}" in ours.lower(*args).as_text()


def test_bench_measures_an_operator_without_a_case(monkeypatch):
    """An element-wise operator without an entry in bench's ``ELEMENTWISE``
    (a new one) is measured on default operands; without an ATen kernel its
    torch column is "-"."""
    import argparse

    import torch

    from jax_aclnn.cli import bench_cases

    monkeypatch.setattr(bench_cases, "torch", torch)
    monkeypatch.delitem(bench_cases.ELEMENTWISE, "hardshrink_backward")
    row = bench_cases.measure("hardshrink_backward", 1024, np.float32,
                        argparse.Namespace(repeats=2, burst=1, bn_channels=16), np.random.default_rng(0))
    assert row["vs_xla"] > 0 and "vs_torch" not in row
    assert row["bytes"] == 3 * 1024 * 4  # two full-size operands and the result
    assert bench_cases.case_bytes("hardshrink_backward", 1024) > 0


def test_bench_times_each_repeat_as_the_median_call_of_a_burst(monkeypatch):
    """Each repeat runs ``burst`` calls of a contender in a row (after a
    library's call, another's threads must wake) and keeps their median."""
    import argparse
    import itertools

    from jax_aclnn.cli import bench_cases

    monkeypatch.setattr(bench_cases, "torch", None)
    clock = itertools.count()
    calls = []

    def fake_timed(fn):
        calls.append(fn)
        return float(next(clock) % 5 + 1)  # a burst of 5 calls: 1, 2, 3, 4, 5 (median 3)

    monkeypatch.setattr(bench_cases, "timed", fake_timed)
    row = bench_cases.measure("logit_grad", 1024, np.float32,
                              argparse.Namespace(repeats=3, burst=5, bn_channels=16),
                              np.random.default_rng(0))
    warm_up = 2 * 2  # two calls of each contender (aclnn, xla)
    # the bursts, then as many single calls alternating (3 x 5 rounds of one call each)
    assert len(calls) == warm_up + 3 * 5 * 2 + 3 * 5 * 2
    # after warm-up's 4 calls, every burst is 5 consecutive counts: 1-5 in some order
    assert row["aclnn_s"] == row["aclnn_min_s"] == row["aclnn_max_s"] == 3.0
    assert row["xla_s"] == 3.0
    # alternating: counts 34-63, one call of each in turn, each contender
    # first in turn: round i's calls are counts 34 + 2i and 35 + 2i, aclnn
    # first in even rounds
    alt = [(34 + 2 * i + (i % 2), 35 + 2 * i - (i % 2)) for i in range(15)]  # (aclnn, xla)
    assert row["aclnn_alt_s"] == statistics.median(a % 5 + 1 for a, _ in alt)
    assert row["xla_alt_s"] == statistics.median(x % 5 + 1 for _, x in alt)
    assert row["vs_xla_alt"] == statistics.median((x % 5 + 1) / (a % 5 + 1) for a, x in alt)


@pytest.mark.long_run
def test_train_data_parallel_matches_one_device():
    def curve(devices: str) -> list[str]:
        out = run("train", "--epochs", "2", "--ensemble", "2", "--quiet", "--devices", devices)
        assert f"data-parallel over {devices} cpu device(s)" in out
        return [line for line in out.splitlines() if line.startswith("epoch")]

    one, four = curve("1"), curve("4")
    assert len(one) == 2 and one == four  # the same losses to the printed 4 digits

