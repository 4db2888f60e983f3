"""Command line: ``python -m jax_aclnn {train,bench,info}``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jax_aclnn",
        description="Ascend CANN aclnn backward operators as differentiable JAX operations.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,bench,info}")

    from jax_aclnn import bench, info, train

    p = sub.add_parser("train", help="train a model whose jax.grad runs all five aclnn operators",
                       description=train.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_arguments(p)
    p.set_defaults(run=train.run)

    p = sub.add_parser("bench", help="measure the operators against XLA, PyTorch and memory bandwidth",
                       description=bench.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_arguments(p)
    p.set_defaults(run=bench.run)

    p = sub.add_parser("info", help="show JAX, platforms, providers and the build",
                       description=info.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(run=info.run)

    args = parser.parse_args(argv)
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
