"""``batchscope predict``: what one batching config does under given traffic, no server."""

from __future__ import annotations

import argparse

from batchscope import advising
from batchscope import advisoropts as ao
from batchscope.base import CommandError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    ao.add_traffic(parser)
    ao.add_config(parser)
    parser.add_argument(
        "--service-us", type=ao.service, required=True, help="BASE,PER_ITEM execution microseconds"
    )


def run(args: argparse.Namespace) -> int:
    try:
        return advising.predict_command(args)
    except advising.UsageError as exc:
        raise CommandError(str(exc)) from None
