"""``batchscope secrets``: make the stack's secrets (mode 0600) if they are missing."""

from __future__ import annotations

import argparse

from batchscope import stackopts
from stack import control


def add_arguments(parser: argparse.ArgumentParser) -> None:
    stackopts.add_common(parser)


def run(args: argparse.Namespace) -> int:
    return stackopts.run(args, control.secrets)
