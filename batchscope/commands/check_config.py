"""``batchscope check-config``: validate the model configs, local or served."""

from __future__ import annotations

import argparse

from batchscope import stackopts
from stack import control


def add_arguments(parser: argparse.ArgumentParser) -> None:
    stackopts.add_common(parser)
    parser.add_argument(
        "--triton-url",
        action="append",
        default=[],
        metavar="URL",
        help="check the configs this running Triton serves; repeatable (STACK_TRITON_URLS)",
    )


def run(args: argparse.Namespace) -> int:
    return stackopts.run(args, control.check_config)
