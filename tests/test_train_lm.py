"""``python -m jax_aclnn train-lm`` (issue 39) as a user runs it: the
default data (the standard library's sources), the loss against the
unigram baseline, data parallelism, sampling, the exported step."""

from __future__ import annotations

import os
import re
import signal
import tracemalloc

import jax
import pytest

from test_cli import run

import jax_aclnn as aclnn  # noqa: F401  (registers the targets the exported step calls)
from jax_aclnn import nn  # noqa: F401  (declares the catalogue's operators)
from jax_aclnn import optax  # noqa: F401  (registers its state for deserialization)
from jax_aclnn.__main__ import build_parser, main
from jax_aclnn.cli import train_lm

PROG = "python -m jax_aclnn train-lm"
#: The smallest model and batches: a run in this process that compiles quickly.
TINY = ["--dim", "8", "--heads", "2", "--kv-heads", "1", "--hidden", "8", "--seq", "8",
        "--layers", "1", "--batch-size", "2", "--eval-windows", "2", "--quiet"]


def first_loss(out: str) -> str:
    return re.search(r"first step's training loss (\S+)", out)[1]


@pytest.mark.long_run
def test_train_lm_learns_below_the_unigram_baseline_and_exports_the_step(tmp_path):
    exported = tmp_path / "step.bin"
    out = run("train-lm", "--steps", "200", "--quiet", "--sample", "16",
              "--export-npu", str(exported))
    baseline = float(re.search(r"unigram baseline \(no context\): (\S+)", out)[1])
    final = float(re.search(r"-> (\S+) nats/byte", out)[1])
    assert final < baseline - 0.3, out
    assert "tokens/s" in out and "Sample:" in out
    calls = dict(re.findall(r"^    (aclnn\w+) +(\d+)$", out, re.M))
    # the cosine schedule of the traced count: aclnnApplyAdamW in place
    assert calls == {"aclnnAddRmsNorm": "2", "aclnnApplyAdamW": "16",
                     "aclnnCrossEntropyLoss": "1", "aclnnCrossEntropyLossGrad": "1",
                     "aclnnFlashAttentionScore": "2", "aclnnFlashAttentionScoreGrad": "2",
                     "aclnnRmsNorm": "3", "aclnnRmsNormGrad": "5",
                     "aclnnRotaryPositionEmbedding": "4", "aclnnRotaryPositionEmbeddingGrad": "4",
                     "aclnnSwiGlu": "2", "aclnnSwiGluGrad": "2"}, out
    step = jax.export.deserialize(exported.read_bytes())
    assert step.platforms == ("cpu", "npu")
    # one call per use (2 layers: forward and gradient) in each platform's
    # lowering: the NPU's and the CPU's (the host provider runs attention)
    assert step.mlir_module().count("stablehlo.custom_call @aclnn_nn_flash_attention_score") == 8


@pytest.mark.long_run
def test_train_lm_on_four_devices_takes_the_same_first_step():
    one = run("train-lm", "--steps", "1", "--quiet")
    four = run("train-lm", "--steps", "1", "--quiet", "--devices", "4")
    assert "data-parallel over 4 cpu device(s)" in four
    assert first_loss(one) == first_loss(four)


MOE_CALLS = {"aclnnGroupedMatmulV4": "18", "aclnnMoeGatingTopKSoftmaxV2": "2",
             "aclnnMoeTokenPermute": "2", "aclnnMoeTokenPermuteGrad": "2",
             "aclnnMoeTokenUnpermute": "2", "aclnnMoeTokenUnpermuteGrad": "2"}


@pytest.mark.long_run
def test_a_mixture_of_experts_learns_and_its_exported_step_calls_the_moe_operators(tmp_path):
    """Issue 45: --experts 8 --top-k 2 below the unigram baseline; the step's
    NPU lowering holds CANN's MoE operators (per layer: the routing, the
    permutation and its gradient, the combine and its gradient, three grouped
    matmuls forward and six backward), the SwiGLU MLP's operators gone."""
    exported = tmp_path / "step.bin"
    out = run("train-lm", "--experts", "8", "--top-k", "2", "--steps", "100", "--quiet",
              "--export-npu", str(exported))
    assert "8 SwiGLU experts of 64, top 2, load-balancing loss x 0.01" in out
    baseline = float(re.search(r"unigram baseline \(no context\): (\S+)", out)[1])
    assert float(re.search(r"-> (\S+) nats/byte", out)[1]) < baseline - 0.3, out
    calls = dict(re.findall(r"^    (aclnn\w+) +(\d+)$", out, re.M))
    assert {op: calls.get(op) for op in MOE_CALLS} == MOE_CALLS, out
    assert "aclnnSwiGlu" not in calls and calls["aclnnApplyAdamW"] == "20", out
    module = jax.export.deserialize(exported.read_bytes()).mlir_module()
    # and its grad, per layer, in the NPU's branch and the CPU's (the host provider has them)
    assert module.count("stablehlo.custom_call @aclnn_nn_moe_token_permute") == 8


@pytest.mark.long_run
def test_expert_parallel_takes_the_same_steps_as_one_device():
    """Issue 45: the experts split over 4 devices (all_to_all inside
    shard_map) give one device's losses, with a shared expert."""
    moe = ["train-lm", "--experts", "8", "--top-k", "2", "--shared-expert", "--steps", "3",
           "--log-every", "1", "--eval-windows", "4", "--dim", "32", "--hidden", "32",
           "--seq", "16", "--batch-size", "8", "--quiet"]
    one = run(*moe)
    four = run(*moe, "--devices", "4", "--expert-parallel")
    assert "split over the 4 devices (expert parallel)" in four
    losses = [[float(v) for v in re.findall(r"train loss (\S+)", out)] for out in (one, four)]
    assert len(losses[0]) == 3 and losses[0] == pytest.approx(losses[1], rel=1e-5), losses
    final = [float(re.search(r"-> (\S+) nats/byte", out)[1]) for out in (one, four)]
    assert final[0] == pytest.approx(final[1], rel=1e-5)


@pytest.mark.long_run
def test_train_lm_on_a_file_of_the_users(tmp_path):
    text = tmp_path / "poem.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 200)
    out = run("train-lm", "--data", str(text), "--steps", "60", "--quiet", "--seq", "16")
    assert f"bytes of {text}" in out
    assert float(re.search(r"-> (\S+) nats/byte", out)[1]) < 1.5


@pytest.mark.parametrize("args,message", [
    (["--data", "/nonexistent/text"], "--data /nonexistent/text: no such file or directory"),
    (["--heads", "3"], "must split into --heads 3"),
])
def test_train_lm_refuses_bad_options(args, message):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "jax_aclnn", "train-lm", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and message in out.stderr, out.stderr


@pytest.mark.long_run
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_plain_model_is_the_same_model(dtype):
    """bench's language-model baseline (train_lm.PLAIN: jax.numpy, jax.nn,
    optax) computes the loss and gradients the catalogue does, so the
    step table compares the same model; and the table's row has every
    mode's times (jax_aclnn.nn, its references, the plain model)."""
    import jax.numpy as jnp
    import numpy as np

    from conftest import assert_close, f64
    from jax_aclnn.cli import llm_step, train_lm

    cfg = train_lm.Config(16, 1, 4, 2, 32, 8)
    params = jax.tree.map(lambda a: a.astype(dtype), train_lm.init(cfg, jax.random.key(0)))
    windows = jnp.asarray(np.random.default_rng(0).integers(0, 256, (2, cfg.seq + 1)), jnp.int32)
    grad = {m: jax.jit(jax.value_and_grad(lambda p, w, ops=ops: train_lm.loss_fn(p, w, cfg, ops)))(
        params, windows) for m, ops in llm_step.MODES.items()}
    for ours, plain in zip(jax.tree.leaves(grad["aclnn"]), jax.tree.leaves(grad["jnp"])):
        assert ours.dtype == plain.dtype
        assert_close(ours, f64(plain), jnp.dtype(dtype), scale=16.0)
    row = llm_step.measure("tiny", cfg, 2, repeats=1, dtype=dtype)
    assert all(row[f"{m}_s"] > 0 and row[f"{m}_compile_s"] > 0 for m in llm_step.MODES)


@pytest.mark.parametrize("args,message", [
    (["--expert-parallel"], "--expert-parallel needs --experts E"),
    (["--shared-expert"], "--shared-expert needs --experts E"),
    (["--experts", "2", "--top-k", "3"], "--top-k 3 must be at most --experts 2"),
    (["--experts", "6", "--devices", "4", "--batch-size", "8", "--expert-parallel"],
     "--experts 6 and --seq 64 must be multiples of --devices 4"),
])
def test_mixture_of_experts_options_that_do_not_fit_are_refused(args, message, capsys):
    assert main(["train-lm", *args]) == 2
    assert message in capsys.readouterr().err


# --- regressions of issue 44: each failed with a traceback, a hang, or in silence -------------


def test_a_diverging_run_stops_with_one_line(capsys):
    """A learning rate of 1e30 trained to NaN losses and ended with exit status 0."""
    status = main(["train-lm", *TINY, "--steps", "3", "--log-every", "1", "--lr", "1e30"])
    err = capsys.readouterr().err
    assert status == 1, err
    assert err == f"{PROG}: error: training diverged: train loss nan at step 3; lower --lr (now 1e+30)\n"


def test_a_prompt_is_the_bytes_the_shell_passed():
    """A prompt that is not UTF-8 (Python decodes argv with surrogateescape)
    ended in UnicodeEncodeError after training: the byte-level model takes
    the bytes the shell passed."""
    raw = b"\xff\xfedef "
    assert build_parser().parse_args(["train-lm", "--prompt", os.fsdecode(raw)]).prompt == raw
    assert build_parser().parse_args(["train-lm"]).prompt == b"def "


def test_the_export_path_is_checked_before_training(capsys, tmp_path):
    """A path that cannot be written failed after the whole run, in a traceback."""
    path = tmp_path / "missing" / "step.bin"
    status = main(["train-lm", *TINY, "--steps", "1", "--export-npu", str(path)])
    out = capsys.readouterr()
    assert status == 2 and out.out == "", out.out  # nothing trained
    assert out.err == (f"{PROG}: error: --export-npu {path}: no folder {path.parent}; "
                       "create it or pick another path\n")


def test_ctrl_c_ends_with_one_line(capsys, monkeypatch):
    """Ctrl-C printed a KeyboardInterrupt traceback of 21 to 57 lines."""
    def interrupted(path):
        signal.raise_signal(signal.SIGINT)  # as the terminal sends it

    monkeypatch.setattr(train_lm, "read_text", interrupted)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's, even if inherited as ignored
    try:
        status = main(["train-lm", *TINY])
    except KeyboardInterrupt:  # not to pytest, which would end the session
        pytest.fail("KeyboardInterrupt escaped main()")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert status == 130 and capsys.readouterr().err == f"{PROG}: interrupted\n"


def test_only_the_text_used_is_read(tmp_path, monkeypatch):
    """--data read a whole file to use its first 4 MiB (1.2 GB resident for a 1 GB file)."""
    monkeypatch.setattr(train_lm, "MAX_TEXT", 1 << 16)
    content = b"the quick brown fox\n" * (1 << 18)  # 5 MiB
    (tmp_path / "big.txt").write_bytes(content)
    tracemalloc.start()
    try:
        text, _ = train_lm.read_text(str(tmp_path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert text.tobytes() == content[: 1 << 16]
    assert peak < 1 << 20, peak  # a fraction of the file
