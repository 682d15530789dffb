"""``batchscope docs``: regenerate or check the manual's generated pages, or serve it."""

from __future__ import annotations

import argparse

from batchscope import docgen


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a committed page differs from what would be written",
    )
    parser.add_argument(
        "--serve",
        nargs="?",
        const="127.0.0.1:8800",
        metavar="ADDRESS",
        help="regenerate, then serve the manual with `mkdocs serve` at ADDRESS "
        "(127.0.0.1:8800; mkdocs comes with the test extra)",
    )


def run(args: argparse.Namespace) -> int:
    return docgen.regenerate(args.check, args.serve)
