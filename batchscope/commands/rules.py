"""``batchscope rules``: generate the Prometheus rules and Alertmanager config."""

from __future__ import annotations

import argparse
from pathlib import Path

from batchscope import stackopts
from batchscope.generated import write_or_check
from rules import rulegen
from rules.generated import generated_files
from stacksettings import RULES_SETTINGS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--settings",
        type=Path,
        default=RULES_SETTINGS,
        help="thresholds, windows, severities (default: rules/settings.yaml)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=rulegen.GENERATED_DIR,
        help="folder for the generated files (default: rules/generated)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the files in --output differ from what would be written",
    )


def run(args: argparse.Namespace) -> int:
    def rules() -> int:
        output = args.output.resolve()
        files = {
            output / name: text for name, text in generated_files(args.settings.resolve()).items()
        }
        return write_or_check("rules", files, args.check)

    return stackopts.guarded(args, rules)
