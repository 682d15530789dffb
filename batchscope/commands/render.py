"""``batchscope render``: generate the compose and Kubernetes configs (deploy/)."""

from __future__ import annotations

import argparse

from batchscope import stackopts
from batchscope.generated import write_or_check


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a committed file differs from what would be written",
    )


def run(args: argparse.Namespace) -> int:
    def render() -> int:
        # Imported here: only this command needs the renderer and the Grafana SDK it brings.
        from deploygen import deployfiles

        return write_or_check("render", deployfiles.render(), args.check)

    return stackopts.guarded(args, render)
