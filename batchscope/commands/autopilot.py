"""``batchscope autopilot``: watch a live model's traffic, re-advise when it shifts, and
apply the change within a policy (a dry run unless ``--apply``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from autopilot import loop as autopilot_loop
from autopilot import policy as policy_mod
from batchscope import advising, options
from batchscope import advisoropts as ao
from batchscope.base import CommandError
from stacksettings import from_env_or_default

DESCRIPTION = (
    "Each --interval-s: re-apply the last kept config if Triton no longer "
    "serves it (a restart forgets overrides); measure the traffic; when it has shifted "
    f"(rate beyond x{autopilot_loop.RATE_RATIO:g} or burstiness beyond +/-"
    f"{autopilot_loop.CV_CHANGE:g}, for {autopilot_loop.SUSTAINED} intervals running) from what "
    "the current config was chosen for, advise within the policy and apply the change "
    "with advise --apply's watch and rollback. A dry run unless --apply."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    ao.add_search(parser)
    options.add_url(parser, "Triton HTTP base URL", required=True)
    options.add_model(parser, "the model to pilot", required=True)
    options.add_metrics_url(parser, ao.METRICS_URL_HELP, type=ao.http_url("--metrics-url"))
    parser.add_argument(
        "--policy",
        type=Path,
        help="YAML policy: bounds on the delay, max_batch_size, preferred sizes and "
        "instances, min_minutes_between_changes, never_touch (default: no bounds, one "
        f"change per {policy_mod.DEFAULT_MINUTES:g} min)",
    )
    parser.add_argument(
        "--apply",
        action="store_true",
        help="make the changes (default: print what would be done, one line per decision)",
    )
    parser.add_argument(
        "--interval-s",
        type=ao.positive(float, "--interval-s"),
        default=autopilot_loop.DEFAULT_INTERVAL_S,
        help=f"seconds of traffic per step (default {autopilot_loop.DEFAULT_INTERVAL_S:g})",
    )
    bounded = parser.add_mutually_exclusive_group()
    bounded.add_argument(
        "--for-s",
        type=ao.positive(float, "--for-s"),
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    bounded.add_argument(
        "--once", action="store_true", help="one step: measure one interval, decide, exit"
    )
    parser.add_argument(
        "--watch-s",
        type=ao.positive(float, "--watch-s"),
        help="seconds of each window before and after a change (default: as advise --apply)",
    )
    options.add_db(
        parser,
        type=Path,
        default=from_env_or_default().store,
        help="load-run store: the changes' record (the last kept config is read from it) "
        "and the clients' latencies (default .stack/loadgen.sqlite3)",
    )
    parser.add_argument(
        "--admin-key-file",
        type=Path,
        default=from_env_or_default().admin_key_file,
        help="key of Triton's restricted APIs (default .stack/triton-admin.key)",
    )
    parser.add_argument(
        "--calibrations",
        type=Path,
        default=from_env_or_default().state_dir / "advisor-calibrations.json",
        help="cache of measured costs (default .stack/advisor-calibrations.json)",
    )
    ao.add_costs(parser)


def run(args: argparse.Namespace) -> int:
    try:
        return advising.autopilot_command(args)
    except advising.UsageError as exc:
        raise CommandError(str(exc)) from None
