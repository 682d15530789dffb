"""``batchscope up``: start every service, wait until healthy (or attach to running Tritons)."""

from __future__ import annotations

import argparse
from pathlib import Path

from batchscope import stackopts
from stack import control
from stacksettings import PORTS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    stackopts.add_common(parser)
    parser.add_argument(
        "--detach",
        action="store_true",
        help="return once everything is healthy; `down` stops it later",
    )
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the few seconds of load sent after start so the dashboard has data",
    )
    parser.add_argument("--host", help="address every service binds (STACK_HOST, 127.0.0.1)")
    parser.add_argument(
        "--expose",
        action="store_true",
        help="allow a --host off loopback (every service becomes reachable from the network)",
    )
    # The detached stack's own supervising process (started by `up --detach`).
    parser.add_argument("--supervisor-child", action="store_true", help=argparse.SUPPRESS)
    for name, (default, var) in PORTS.items():
        parser.add_argument(
            f"--{name.replace('_', '-')}-port",
            dest=f"port_{name}",
            metavar="PORT",
            help=f"{name.replace('_', ' ')} port ({var}, {default})",
        )
    parser.add_argument(
        "--scrape-interval",
        type=float,
        metavar="SECONDS",
        help="Prometheus scrape and rule interval (STACK_SCRAPE_INTERVAL, 5)",
    )
    parser.add_argument(
        "--hung-after",
        metavar="SECONDS",
        help="restart a running service whose health check has failed this long, as if it "
        "had died (STACK_HUNG_AFTER, 20; 0: never)",
    )
    parser.add_argument(
        "--rules-settings",
        type=Path,
        metavar="FILE",
        help="thresholds of the alert rules (STACK_RULES_SETTINGS, rules/settings.yaml)",
    )
    attach = parser.add_argument_group(
        "attach mode",
        "watch Tritons that already run; the stack then starts no Triton of its own",
    )
    attach.add_argument(
        "--triton-url",
        action="append",
        default=[],
        metavar="URL",
        help="an existing Triton's HTTP endpoint, http(s)://HOST:PORT; repeatable "
        "(STACK_TRITON_URLS, comma-separated)",
    )
    attach.add_argument(
        "--triton-metrics-url",
        action="append",
        default=[],
        metavar="URL",
        help="its metrics URL, once per --triton-url in the same order (STACK_TRITON_METRICS_URLS;"
        " default: the same host, the HTTP port + 2, /metrics)",
    )
    attach.add_argument(
        "--triton-admin-key-file",
        type=Path,
        metavar="FILE",
        help="the key of the attached Tritons' restricted APIs, sent as the "
        "x-batchscope-admin-key header (STACK_TRITON_ADMIN_KEY_FILE; none by default)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="SERVICE",
        help="leave a service out (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    if args.supervisor_child:
        return stackopts.run(args, control.supervise_detached)
    return stackopts.run(
        args,
        lambda settings: control.up(
            settings, args.detach, warm=not args.no_warmup, argv=list(args.command_line[1:])
        ),
    )
