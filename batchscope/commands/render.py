"""``batchscope render``: generate the compose and Kubernetes configs (deploy/)."""

from __future__ import annotations

import argparse

from batchscope import stackopts
from stack import control


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a committed file differs from what would be written",
    )


def run(args: argparse.Namespace) -> int:
    return stackopts.guarded(args, lambda: control.render(args.check))
