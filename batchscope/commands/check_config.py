"""``batchscope check-config``: validate the model configs, local or served."""

from __future__ import annotations

import argparse

from batchscope import options, stackopts
from stack import control


def add_arguments(parser: argparse.ArgumentParser) -> None:
    stackopts.add_common(parser)
    # --triton-url as `up` spells attach mode's servers (the manual shows it).
    options.add_url(
        parser,
        "check the configs this running Triton serves; repeatable (STACK_TRITON_URLS)",
        "--triton-url",
        dest="triton_url",
        action="append",
        default=[],
        metavar="URL",
    )


def run(args: argparse.Namespace) -> int:
    return stackopts.run(args, control.check_config)
