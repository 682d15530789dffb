"""``batchscope down``: stop a detached stack."""

from __future__ import annotations

import argparse

from batchscope import stackopts
from stack import control


def add_arguments(parser: argparse.ArgumentParser) -> None:
    stackopts.add_common(parser)


def run(args: argparse.Namespace) -> int:
    return stackopts.run(args, control.down)
