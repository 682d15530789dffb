"""``batchscope rules``: generate the Prometheus rules and Alertmanager config."""

from __future__ import annotations

import argparse
from pathlib import Path

from batchscope import stackopts
from stack import control, rulegen
from stacksettings import RULES_SETTINGS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--settings",
        type=Path,
        default=RULES_SETTINGS,
        help="thresholds, windows, severities (default: stack/rules/settings.yaml)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=rulegen.GENERATED_DIR,
        help="folder for the generated files (default: stack/rules/generated)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the files in --output differ from what would be written",
    )


def run(args: argparse.Namespace) -> int:
    return stackopts.guarded(
        args, lambda: control.rules(args.settings.resolve(), args.output.resolve(), args.check)
    )
