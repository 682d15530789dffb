"""``batchscope status``: each service, its pid, URLs and health."""

from __future__ import annotations

import argparse

from batchscope import options, stackopts
from stack import control


def add_arguments(parser: argparse.ArgumentParser) -> None:
    stackopts.add_common(parser)
    options.add_json(parser)


def run(args: argparse.Namespace) -> int:
    return stackopts.run(args, lambda settings: control.status(settings, args.json))
