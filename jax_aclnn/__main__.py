"""Command line: ``python -m jax_aclnn {train,train-lm,bench,info}``.

User errors (a missing file, a bad column, a bad option value, a missing
package of the ``cli`` extra) end with one line on stderr and exit status 2;
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


def build_parser() -> argparse.ArgumentParser:
    from jax_aclnn.cli import bench, info, train, train_lm

    parser = Parser(prog=PROG, description="Ascend CANN aclnn backward operators as differentiable JAX operations.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,train-lm,bench,info}")

    p = sub.add_parser("train", help="train a model whose jax.grad runs every aclnn operator",
                       description=train.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_arguments(p)
    p.set_defaults(run=train.run)

    p = sub.add_parser("train-lm", help="train a byte-level language model on CANN's fused LLM operators",
                       description=train_lm.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    train_lm.add_arguments(p)
    p.set_defaults(run=train_lm.run)

    p = sub.add_parser("bench", help="measure the operators against XLA, PyTorch and memory bandwidth",
                       description=bench.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_arguments(p)
    p.set_defaults(run=bench.run)

    p = sub.add_parser("info", help="show JAX, platforms, providers and the build",
                       description=info.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(run=info.run)

    for p in sub.choices.values():
        add_debug_argument(p)
        p.set_defaults(parser=p)  # reports the command's unrecognized arguments
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
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
