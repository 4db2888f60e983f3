"""The command line as a user runs it."""

from __future__ import annotations

import subprocess
import sys
import tempfile

import pytest


def run(*args: str) -> str:
    # outside the source tree, so that the installed package is imported
    out = subprocess.run([sys.executable, "-m", "jax_aclnn", *args], capture_output=True,
                         text=True, timeout=300, cwd=tempfile.gettempdir())
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("command", [[], ["train"], ["bench"], ["info"]])
def test_help(command):
    assert "usage:" in run(*command, "--help")


def test_train_loss_falls_and_reports_the_provider(tmp_path):
    png = tmp_path / "loss.png"
    out = run("train", "--epochs", "3", "--ensemble", "2", "--quiet", "--plot", str(png))
    assert "(fell)" in out and "aclnn provider: host" in out
    for op in ("SmoothL1LossBackward", "LogitGrad", "HardshrinkBackward", "SwishBackward",
               "BatchNormReduceBackward"):
        assert f"aclnn{op}" in out
    assert png.stat().st_size > 1000


def test_train_on_a_csv(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = x @ [1.0, -2.0, 0.5] + 0.1 * rng.normal(size=200)
    csv = tmp_path / "data.csv"
    np.savetxt(csv, np.column_stack([x, y]), delimiter=",", header="a,b,c,price", comments="")
    out = run("train", "--data", str(csv), "--target", "price", "--epochs", "4", "--quiet",
              "--dtype", "bfloat16")
    assert "data.csv" in out and "(fell)" in out


def test_info():
    out = run("info")
    assert "platforms with aclnn handlers" in out and "cpu" in out
    assert "CANN" in out and "not found" in out


def test_bench_small_run_writes_its_results(tmp_path):
    import json

    out = run("bench", "--ops", "hardshrink_backward,batch_norm_reduce_backward", "--sizes", "1K",
              "--dtypes", "float32,bfloat16", "--repeats", "2", "--reuse-repeats", "2",
              "--quiet", "--out", str(tmp_path))
    assert "memory copy bandwidth" in out and "executor reuse" in out
    result = json.loads((tmp_path / "bench.json").read_text())
    assert len(result["rows"]) == 4 and all(r["vs_xla"] > 0 for r in result["rows"])
    step = result["executor_reuse"]["training step, batch 32"]
    assert step["aclnn_calls"] > 0 and step["workspace_queries_with_reuse"] == 0
    assert (tmp_path / "bench.png").stat().st_size > 1000


def test_train_data_parallel_matches_one_device():
    def curve(devices: str) -> list[str]:
        out = run("train", "--epochs", "2", "--ensemble", "2", "--quiet", "--devices", devices)
        assert f"data-parallel over {devices} cpu device(s)" in out
        return [line for line in out.splitlines() if line.startswith("epoch")]

    one, four = curve("1"), curve("4")
    assert len(one) == 2 and one == four  # the same losses to the printed 4 digits


def test_train_devices_must_divide_the_batch():
    out = subprocess.run([sys.executable, "-m", "jax_aclnn", "train", "--devices", "3"],
                         capture_output=True, text=True, timeout=120, cwd=tempfile.gettempdir())
    assert out.returncode != 0 and "multiple of --devices 3" in out.stderr
