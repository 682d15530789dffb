"""``batchscope restart SERVICE``: ask the supervising process to restart one service."""

from __future__ import annotations

import argparse

from batchscope import stackopts
from stack import control


def add_arguments(parser: argparse.ArgumentParser) -> None:
    stackopts.add_common(parser)
    parser.add_argument("service", metavar="SERVICE", help="triton, exporter, prometheus, ...")


def run(args: argparse.Namespace) -> int:
    return stackopts.run(args, lambda settings: control.restart(settings, args.service))
