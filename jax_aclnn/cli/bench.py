"""``python -m jax_aclnn bench``: every operator against the baselines
measured in the same run.

For each operator, size and dtype, under ``jax.jit``:

* ``aclnn``: the operator through jax_aclnn (the host provider on the CPU);
* ``xla``: the same formula written in ``jax.numpy`` (the operator's pure-JAX
  reference) and compiled by XLA, on identical inputs;
* ``torch``: PyTorch's ATen CPU kernel for the same operator, when torch is
  installed (batch-norm reduce has no ATen CPU kernel: there, ATen's
  reductions of the same formula);
* the catalogue's functions the host provider runs (``nn.rms_norm``,
  ``nn.swiglu``; ``nn.<function>_grad``: forward and backward for a random
  cotangent, as training runs them), on rows of 1024 (SwiGLU: 2048;
  ``nn.rotary_embedding``: x (1, S, 8, 128) with cos and sin (1, S, 1,
  128); ``nn.softmax_cross_entropy_with_integer_labels``: rows of 32,000
  classes): the same ``jax_aclnn.nn`` function on its reference path is
  ``xla``, and PyTorch's ``F.rms_norm``, ``F.silu(a) * b``, the rotate-half
  formula and ``F.cross_entropy`` (gradients by autograd) ``torch``;
* the machine's memory-copy bandwidth (256 MiB copied by one thread per
  core), the physical limit of these bandwidth-bound operators, between
  warm buffers and into fresh memory ("fresh copy"): XLA allocates every
  call's output anew, so a large result's pages are new to the process and
  the kernel clears each one before its first write. Batch-norm
  reduce only reads, without a copy's write-allocate traffic, so it can
  exceed 100% of it.

Each case is measured in two process states (``--modes``): ``clean``, this
process, which has done nothing else, then ``realistic``, a second process
in a training process's state (:mod:`jax_aclnn.cli.training_state`: a
training step's arrays alive after a few steps of a model and its host-side
allocations and frees), right after the clean measurement. Where an output
lands and what its first write costs depend on that state; a case whose
"vs clean" ratio is well above 1, or whose min-max range is wide, is one
whose speed does not hold.

With ``--bn-memory-channels C`` it measures the resident memory (RSS) of a
process around one batch-norm reduce of a (16, C) float32 input, through
aclnn and through the pure-JAX reference, before the call, after it, and
after the program is freed (``jax.clear_caches()``).

It then measures what executor reuse saves (:func:`set_executor_reuse`):
a jitted training step of the ``train`` job (every operator in its
gradient) and a chain of tiny calls, alternately with reuse on and off.

Last, a training step's temporary memory (XLA's memory analysis), compile
time and step time, through jax_aclnn against the same model in pure JAX
(:mod:`jax_aclnn.cli.step_memory`), and the step and compile times of
``train-lm``'s training step (its model's gradients, then AdamW) through
:mod:`jax_aclnn.nn` and :mod:`jax_aclnn.optax` against the same step in
jax.numpy, ``jax.nn`` and optax and against its own references
(:mod:`jax_aclnn.cli.llm_step`), an AdamW step through
:func:`jax_aclnn.optax.update_and_apply` against optax and PyTorch's fused
AdamW (:mod:`jax_aclnn.cli.adamw_bench`), a mixture-of-experts grouped matmul's
forward and backward through jax_aclnn.nn, its reference and
``jax.lax.ragged_dot`` (:mod:`jax_aclnn.cli.ragged_dot_bench`), and causal
attention's forward and backward over ``--attention-tokens`` tokens through
jax_aclnn.nn, its references, ``jax.nn`` and PyTorch, with each path's peak
resident memory (:mod:`jax_aclnn.cli.attention_bench`), in each of ``--step-dtypes`` (float32 and bfloat16: the dtypes people train
in). Compile times are tracing, lowering and compiling, medians of three
compilations taking turns, on inputs made before.

Outputs are compared first (a fast wrong answer is no result). After
warm-up, each case is timed two ways, each in ``--repeats`` rounds that are
paired and interleaved (aclnn, xla, torch, then xla, torch, aclnn, ...:
each goes first in turn):

* bursts: each round times ``--burst`` calls in a row of each contender and
  keeps the burst's median call, as calls follow each other within a
  program. The first table gives the median round, GB/s (bytes read and
  written), the fractions of both copy bandwidths, and the median of the
  per-pair ratios (>1 means aclnn is faster), with the range of aclnn's
  rounds;
* alternating: each round times one call of each contender, as an eager
  loop or a debugging session calls operators between other work. A
  library's threads sleep while another library runs, so such a call
  also pays for waking them. ``--repeats`` times ``--burst`` rounds (as
  many calls as the bursts make); the second table gives the medians and
  the median ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

import jax_aclnn as aclnn
from jax_aclnn.cli.common import (UsageError, comma_list, integer, jax_devices, one_of,
                                  print_table, progress_disabled)
from jax_aclnn.cli import (adamw_bench, attention_bench, bench_cases, bn_memory, common, llm_step,
                           ragged_dot_bench, step_memory)
from jax_aclnn.cli.bench_cases import case_bytes, import_torch, measure, timed
from jax_aclnn.cli.training_state import RealisticProcess

OPS = list(aclnn.ops.OPERATOR_NAMES) + list(bench_cases.CATALOGUE)
DEFAULT_SIZES = "1K,64K,1M,16M"
DTYPES = ["float32", "float16", "bfloat16"]
MODES = ["clean", "realistic"]


def parse_size(text: str) -> int:
    """An element count such as ``4096``, ``64K`` or ``1.5M``; ``ValueError`` if not one."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    upper = text.strip().upper()
    try:
        size = int(float(upper[:-1]) * units[upper[-1]]) if upper[-1:] in units else int(upper)
    except (ValueError, OverflowError):
        size = 0
    if size < 1:
        raise ValueError(f"bad size {text!r}")
    return size


def check_memory(args: argparse.Namespace) -> None:
    """Refuses ``--sizes`` and ``--bn-memory-channels`` that cannot fit in
    the available memory, before anything is measured."""
    need, size = max((case_bytes(op, size), size) for op in args.ops for size in args.sizes)
    common.check_memory(need, f"--sizes: a case of {size:,} elements", "choose smaller sizes")
    if args.bn_memory_channels:
        common.check_memory(bn_memory.BYTES_PER_CHANNEL * args.bn_memory_channels,
                            f"--bn-memory-channels {args.bn_memory_channels:,}", "choose fewer channels")
    if args.step_repeats and args.attention_tokens:
        common.check_memory(attention_bench.memory_needed(args.attention_tokens),
                            f"--attention-tokens {args.attention_tokens:,}", "choose fewer tokens")


def copy_bandwidth(repeats: int, fresh: bool = False) -> float:
    """GB/s (bytes read + written) of copying 256 MiB, split across one thread
    per core as the operators are (numpy releases the GIL while it copies):
    between warm buffers, or with ``fresh`` into memory allocated for each
    copy, as XLA allocates each call's output (the kernel clears every new
    page on its first write)."""
    from concurrent.futures import ThreadPoolExecutor

    threads = os.cpu_count() or 1
    src = np.ones(1 << 26, np.float32)
    warm = np.empty_like(src)
    with ThreadPoolExecutor(threads) as pool:
        def copy():
            dst = np.empty_like(src) if fresh else warm
            parts = zip(np.array_split(dst, threads), np.array_split(src, threads))
            list(pool.map(lambda p: np.copyto(*p), parts))
        times = [timed(copy) for _ in range(max(3, repeats))]
    return 2 * src.nbytes / statistics.median(times) / 1e9


def paired_reuse_times(fn: Callable[[], Any], repeats: int) -> dict[str, Any]:
    """Calls ``fn`` alternately with executor reuse on and off (paired, after
    warm-up); medians, their ratio and the aclnn calls per ``fn`` call."""
    times: dict[bool, list[float]] = {True: [], False: []}
    previous = aclnn.set_executor_reuse(True)
    try:
        for i in range(repeats + 5):
            for reuse in (True, False):
                aclnn.set_executor_reuse(reuse)
                aclnn.reset_runtime_stats()
                elapsed = timed(fn)
                if reuse:
                    calls = aclnn.runtime_stats()["calls"].values()
                    queries = sum(c["get_workspace_size"] for c in calls)
                    executes = sum(c["execute"] for c in calls)
                if i >= 5:  # the first pairs are warm-up
                    times[reuse].append(elapsed)
    finally:
        aclnn.set_executor_reuse(previous)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    return {"aclnn_calls": executes, "workspace_queries_with_reuse": queries,
            "reuse_s": on, "one_shot_s": off, "saved_per_call_s": (off - on) / max(1, executes),
            "ratio": statistics.median(b / a for a, b in zip(times[True], times[False]))}


def reuse_overhead(repeats: int, batch_size: int = 32, chain: int = 64) -> dict[str, Any]:
    """What executor reuse saves: on a training step of the ``train`` job
    (its gradient runs every operator), and per call on a chain of
    ``chain`` dependent 16-element calls (dispatch cost only)."""
    import optax

    from jax_aclnn.cli import train

    data = train.load_data(None, None, seed=0)
    optimizer = optax.adam(1e-3)
    params = train.init_params(jax.random.key(0), data.x_train.shape[1])
    opt_state = optimizer.init(params)

    step = jax.jit(train.make_train_step(optimizer, jnp.float32))

    @jax.jit
    def calls(x):
        for _ in range(chain):
            x = aclnn.hardshrink_backward(x, x, lambd=0.1)
        return x

    x, y = jax.device_put(data.x_train[:batch_size]), jax.device_put(data.y_train[:batch_size])
    small = jnp.ones(16, jnp.float32)
    return {
        f"training step, batch {batch_size}": paired_reuse_times(lambda: step(params, opt_state, x, y), repeats),
        f"{chain} chained 16-element calls": paired_reuse_times(lambda: calls(small), repeats),
    }


#: (batch, width, layers) of the training-step memory table.
STEP_SHAPES = [(4096, 512, 4), (1024, 1024, 6), (256, 256, 3)]


def print_step_table(rows: list[dict[str, Any]]) -> None:
    mib = lambda r, m: f"{r[m + '_temp_bytes'] / 2**20:,.2f} MiB"  # noqa: E731
    print_table(
        "training step jit(grad(loss)) through jax_aclnn vs pure JAX: temporary memory "
        "(XLA's analysis; ratio < 1: aclnn smaller), step and compile times (medians; "
        "ratios > 1: aclnn faster)",
        ["batch x width x layers", "dtype", "aclnn temp", "reference temp", "ratio", "jnp temp", "ratio",
         "aclnn step", "vs reference", "vs jnp", "aclnn compile", "vs reference", "vs jnp"], 2,
        [[f"{r['batch']} x {r['width']} x {r['layers']}", r["dtype"], mib(r, "aclnn"), mib(r, "reference"),
          f"{r['aclnn_temp_bytes'] / r['reference_temp_bytes']:.2f}", mib(r, "jnp"),
          f"{r['aclnn_temp_bytes'] / r['jnp_temp_bytes']:.2f}", f"{r['aclnn_s'] * 1e3:,.1f} ms",
          f"{r['reference_s'] / r['aclnn_s']:.2f}x", f"{r['jnp_s'] / r['aclnn_s']:.2f}x",
          f"{r['aclnn_compile_s']:.2f} s", f"{r['reference_compile_s'] / r['aclnn_compile_s']:.2f}x",
          f"{r['jnp_compile_s'] / r['aclnn_compile_s']:.2f}x"] for r in rows], width=170)
    print("reference: the same model under JAX_ACLNN_REFERENCE=all; jnp: its formulas in "
          "jax.numpy, differentiated by JAX; compile: tracing, lowering and compiling "
          f"(median of {step_memory.COMPILE_ROUNDS}, inputs made before)")


def print_llm_table(rows: list[dict[str, Any]]) -> None:
    print_table(
        "train-lm's step (jit, parameters and optimizer state donated and carried: the loss's value "
        "and gradients, then AdamW) through jax_aclnn.nn and "
        "jax_aclnn.optax vs jax.numpy/jax.nn/optax and vs their references (medians; ratios > 1: "
        "aclnn faster)",
        ["model", "dtype", "batch x seq", "aclnn step", "vs jnp", "vs reference", "aclnn compile",
         "vs jnp"], 3,
        [[f"{r['model']} (dim {r['dim']}, {r['layers']} layers)", r["dtype"], f"{r['batch']} x {r['seq']}",
          f"{r['aclnn_s'] * 1e3:,.1f} ms", f"{r['jnp_s'] / r['aclnn_s']:.2f}x",
          f"{r['reference_s'] / r['aclnn_s']:.2f}x",
          f"{r['aclnn_compile_s']:.2f} s", f"{r['jnp_compile_s'] / r['aclnn_compile_s']:.2f}x"]
         for r in rows])


def print_reuse_table(results: dict[str, dict[str, Any]]) -> None:
    print_table(
        "executor reuse (medians of paired runs; ratio > 1: reuse faster)",
        ["program", "aclnn calls", "GetWorkspaceSize (reuse)", "reuse", "one-shot", "ratio",
         "saved per call"], 1,
        [[name, str(r["aclnn_calls"]), str(r["workspace_queries_with_reuse"]),
          f"{r['reuse_s'] * 1e6:,.1f} us", f"{r['one_shot_s'] * 1e6:,.1f} us",
          f"{r['ratio']:.2f}x", f"{r['saved_per_call_s'] * 1e9:,.0f} ns"]
         for name, r in results.items()])


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import_torch()
    ops, sizes, dtypes = args.ops, args.sizes, [jnp.dtype(d) for d in args.dtypes]
    check_memory(args)
    devices = jax_devices()
    out = output_folder(args.out) if args.out else None
    # first, so that a failing child process stops the run before the measurements
    memory = bn_memory.measure(args.bn_memory_channels) if args.bn_memory_channels else None
    bandwidth = copy_bandwidth(args.repeats)
    fresh_bandwidth = copy_bandwidth(args.repeats, fresh=True)
    build = aclnn.build_info()
    print(f"memory copy bandwidth: {bandwidth:.1f} GB/s (into fresh memory: {fresh_bandwidth:.1f}); "
          f"{len(devices)} CPU device(s); "
          f"host kernels {build['host_kernel_target']} (float16: {build['host_half_conversions']}); "
          f"torch {'not installed' if bench_cases.torch is None else bench_cases.torch.__version__}")
    cases = [(o, s, d) for o in ops for d in dtypes for s in sizes]
    realistic = RealisticProcess(args) if "realistic" in args.modes else None
    rows = []
    try:
        for o, s, d in tqdm(cases, desc="bench", unit="case", disable=progress_disabled(args.quiet)):
            if "clean" in args.modes:
                rows.append(dict(measure(o, s, d, args, np.random.default_rng(0)), mode="clean"))
            if realistic is not None:
                rows.append(dict(realistic.measure(o, s, d), mode="realistic"))
    finally:
        if realistic is not None:
            realistic.close()
    for r in rows:
        r["copy_fraction"] = r["aclnn_gbps"] / bandwidth
        r["fresh_copy_fraction"] = r["aclnn_gbps"] / fresh_bandwidth
    print_results(rows, bandwidth)
    if memory is not None:
        bn_memory.print_results(args.bn_memory_channels, memory)
    reuse = None
    if args.reuse_repeats > 0:
        reuse = reuse_overhead(args.reuse_repeats)
        print_reuse_table(reuse)
    step = llm = grouped = optimizer = None
    if args.step_repeats > 0:
        step = [step_memory.measure(*shape, args.step_repeats, dtype)
                for shape in STEP_SHAPES for dtype in args.step_dtypes]
        print_step_table(step)
        llm = [llm_step.measure(name, cfg, batch, args.step_repeats, dtype)
               for name, cfg, batch in llm_step.SHAPES for dtype in args.step_dtypes]
        print_llm_table(llm)
        grouped = [ragged_dot_bench.measure(*shape, min(args.step_repeats, 5), dtype)
                   for shape in ragged_dot_bench.SHAPES for dtype in args.step_dtypes]
        ragged_dot_bench.print_results(grouped)
        optimizer = [adamw_bench.measure(dtype, args.step_repeats, bench_cases.torch is not None)
                     for dtype in args.step_dtypes]
        adamw_bench.print_results(optimizer, bandwidth)
    attention = None
    if args.step_repeats > 0 and args.attention_tokens > 0:
        attention = attention_bench.measure(args.attention_tokens, args.step_dtypes,
                                            min(args.step_repeats, 5), bench_cases.torch is not None)
        attention_bench.print_results(attention)
    if out is not None:
        (out / "bench.json").write_text(json.dumps(
            {"copy_gbps": bandwidth, "fresh_copy_gbps": fresh_bandwidth, "rows": rows, "training_step": step, "llm_step": llm, "grouped_matmul": grouped, "adamw": optimizer, "attention": attention, "executor_reuse": reuse,
             "bn_reduce_memory": memory}, indent=2))
        plot(rows, bandwidth, out / "bench.png")
        print(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")
    return rows


def output_folder(path: str) -> Path:
    """``--out``'s folder, created now rather than after the measurements."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        what = "a file" if out.is_file() else f"not creatable ({e.strerror})"
        raise UsageError(f"--out {path} is {what}; give a writable folder (created if missing)") from None
    return out


def print_results(rows: list[dict[str, Any]], bandwidth: float) -> None:
    """One row per case and mode, a case's modes together; "vs clean": a
    mode's median over the clean mode's (> 1: slower)."""
    case = lambda r: (OPS.index(r["op"]), DTYPES.index(r["dtype"]), r["size"])  # noqa: E731
    clean = {case(r): r["aclnn_s"] for r in rows if r["mode"] == "clean"}

    def vs_clean(r: dict[str, Any]) -> str:
        return f"{r['aclnn_s'] / clean[case(r)]:.2f}" if r["mode"] != "clean" and case(r) in clean else ""

    print_table(
        f"jax_aclnn bench (aclnn: median, min-max of the repeats; ratios to XLA and torch: medians "
        f"of the paired ratios, > 1: aclnn faster; copy {bandwidth:.1f} GB/s)",
        ["operator", "dtype", "elements", "mode", "aclnn", "min-max (us)", "GB/s", "of copy",
         "of fresh copy", "vs XLA", "vs torch", "vs clean"], 4,
        [[r["op"], r["dtype"], f"{r['size']:,}", r["mode"], f"{r['aclnn_s'] * 1e6:,.0f} us",
          f"{r['aclnn_min_s'] * 1e6:,.0f}-{r['aclnn_max_s'] * 1e6:,.0f}",
          f"{r['aclnn_gbps']:.1f}", f"{r['copy_fraction']:.0%}", f"{r['fresh_copy_fraction']:.0%}",
          f"{r['vs_xla']:.2f}x", f"{r['vs_torch']:.2f}x" if "vs_torch" in r else "-", vs_clean(r)]
         for r in sorted(rows, key=case)], width=170)
    us = lambda r, k: f"{r[k + '_alt_s'] * 1e6:,.0f} us" if k + "_alt_s" in r else "-"  # noqa: E731
    print_table(
        "the same calls one at a time, alternating with the other contenders (medians; ratios: "
        "medians of the paired ratios, > 1: aclnn faster)",
        ["operator", "dtype", "elements", "mode", "aclnn", "xla", "torch", "vs XLA", "vs torch"], 4,
        [[r["op"], r["dtype"], f"{r['size']:,}", r["mode"], us(r, "aclnn"), us(r, "xla"), us(r, "torch"),
          f"{r['vs_xla_alt']:.2f}x", f"{r['vs_torch_alt']:.2f}x" if "vs_torch_alt" in r else "-"]
         for r in sorted(rows, key=case)])


def plot(rows: list[dict[str, Any]], bandwidth: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = sorted({r["op"] for r in rows}, key=OPS.index)
    fig, axes = plt.subplots(1, len(ops), figsize=(4 * len(ops), 3.5), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for dtype in sorted({r["dtype"] for r in rows}):
            for mode in sorted({r["mode"] for r in rows}, key=MODES.index):
                pts = sorted((r["size"], r["aclnn_gbps"]) for r in rows
                             if (r["op"], r["dtype"], r["mode"]) == (op, dtype, mode))
                ax.plot(*zip(*pts), marker="o", label=f"{dtype} ({mode})",
                        linestyle="-" if mode == "clean" else ":")
        ax.axhline(bandwidth, color="gray", linestyle="--", label="memory copy")
        ax.set_xscale("log")
        ax.set_title(op, fontsize=9)
        ax.set_xlabel("elements")
    axes[0][0].set_ylabel("GB/s")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ops", default=",".join(OPS), type=comma_list(one_of(OPS), f"some of {', '.join(OPS)}"),
                   help="comma-separated operators (default: all of them)")
    p.add_argument("--sizes", default=DEFAULT_SIZES, type=comma_list(parse_size, "element counts such as 4096, 64K, 1M"),
                   help="comma-separated element counts, K/M suffixes (default: %(default)s)")
    p.add_argument("--dtypes", default=",".join(DTYPES), type=comma_list(one_of(DTYPES), f"some of {', '.join(DTYPES)}"),
                   help="comma-separated dtypes (default: %(default)s)")
    p.add_argument("--modes", default=",".join(MODES), type=comma_list(one_of(MODES), f"some of {', '.join(MODES)}"),
                   help="comma-separated process states to measure in (default: %(default)s; see above)")
    p.add_argument("--repeats", type=integer(1), default=15, help="timed rounds of bursts per case (alternating calls: --repeats x --burst rounds) (default: %(default)s)")
    p.add_argument("--burst", type=integer(1), default=5, help="calls in a row per contender and repeat; a repeat's time is their median (default: %(default)s)")
    p.add_argument("--bn-channels", type=integer(16, 1024), default=256, help="channels of the batch-norm shapes, 16 to 1024 (default: %(default)s)")
    p.add_argument("--bn-memory-channels", type=parse_size, metavar="C", help="also measure RSS around a (16, C) batch-norm reduce, e.g. 4M (default: skipped)")
    p.add_argument("--reuse-repeats", type=integer(0), default=200, help="paired runs with executor reuse on and off; 0 skips (default: %(default)s)")
    p.add_argument("--step-repeats", type=integer(0), default=10, help="timed runs of the training-step and language-model-step tables (the grouped-matmul and attention tables: at most 5); 0 skips them (default: %(default)s)")
    p.add_argument("--attention-tokens", type=integer(0), default=4096, metavar="T", help="tokens of the attention table (causal jit(grad), 8 heads of 64; each path in a fresh process, its peak RSS measured); 0 skips (default: %(default)s)")
    p.add_argument("--step-dtypes", default="float32,bfloat16", type=comma_list(one_of(DTYPES), f"some of {', '.join(DTYPES)}"),
                   help="comma-separated dtypes of the training-step and language-model-step tables (default: %(default)s)")
    p.add_argument("--out", metavar="DIR", help="write bench.json and bench.png here")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


