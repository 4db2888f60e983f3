"""Command line: ``python -m jax_aclnn {train,train-lm,bench,info}``.

User errors (a missing file, a bad column, a bad option value, a missing
package of the ``cli`` extra) end with one line on stderr and exit status 2;
a training run whose loss becomes NaN or infinite with one line and exit
status 1; Ctrl-C with one line (``interrupted``) and exit status 130.
``--debug`` or ``JAX_ACLNN_DEBUG=1`` shows the traceback too.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from jax_aclnn.cli.common import (
    PROG,
    Parser,
    UsageError,
    add_debug_argument,
    check_environment,
    debugging,
    require_cli_packages,
)

#: The exit status of a command ended by Ctrl-C (SIGINT): 128 + 2, as a shell gives.
INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    from jax_aclnn.cli import bench, info, train, train_lm

    parser = Parser(prog=PROG, description="Ascend CANN aclnn backward operators as differentiable JAX operations.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,train-lm,bench,info}")
    commands = {
        "train": (train, "train a model whose jax.grad runs every aclnn operator"),
        "train-lm": (train_lm, "train a byte-level language model on CANN's fused LLM operators"),
        "bench": (bench, "measure the operators against XLA, PyTorch and memory bandwidth"),
        "info": (info, "show JAX, platforms, providers and the build"),
    }
    for name, (command, summary) in commands.items():
        p = sub.add_parser(name, help=summary, description=command.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if hasattr(command, "add_arguments"):
            command.add_arguments(p)
        add_debug_argument(p)
        p.set_defaults(run=command.run, parser=p)  # parser: reports the command's unrecognized arguments
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    prog = PROG
    try:
        require_cli_packages()  # before the commands' modules import them
        args, unrecognized = build_parser().parse_known_args(argv)
        prog = f"{PROG} {args.command}"
        if unrecognized:
            args.parser.error(f"unrecognized arguments: {' '.join(unrecognized)}")
        check_environment()
        args.run(args)
    except UsageError as e:
        if debugging(argv):
            traceback.print_exc()
        print(f"{e.prog or prog}: error: {e}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:  # Ctrl-C: one line, as a user error, not a traceback
        if debugging(argv):
            traceback.print_exc()
        print(f"{prog}: interrupted", file=sys.stderr)
        return INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
