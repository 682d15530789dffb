"""``batchscope trace``: trace a model's next requests with Triton's own tracing."""

from __future__ import annotations

import argparse

from batchscope import options, stackopts
from stack import tracewindow
from stacksettings import Settings, admin_headers
from tritonapi.traces import DEFAULT_COUNT, MAX_COUNT

DESCRIPTION = (
    "Trace the next --count requests of one model with Triton's own "
    "per-request tracing. Triton writes them to its trace file when the last one is "
    "done; the exporter reads (and removes) it: the dashboard's batch timeline and "
    "triton_batching_queue_wait_seconds show them. Exit 0 when the window completed, "
    "1 when --seconds ran out first (its traces are then not written), 2 on misuse."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    stackopts.add_common(parser)
    options.add_model(parser, "the model to trace", required=True)
    parser.add_argument(
        "--count",
        type=int,
        default=None,
        metavar="N",
        help=f"traced requests in the window (default {DEFAULT_COUNT:,}, at most {MAX_COUNT:,}; "
        "Triton before 2.57 takes fewer: the default shrinks to its safe region, a larger "
        "--count is refused)",
    )
    parser.add_argument(
        "--rate",
        type=int,
        default=1,
        metavar="N",
        help="trace 1 request in N (default 1: every request, which batch sizes and "
        "departure reasons need; queue-wait percentiles are fine with a sample)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=60.0,
        help=f"the longest to wait for the window (default 60, at most "
        f"{tracewindow.MAX_SECONDS:g})",
    )
    options.add_url(parser, "Triton's HTTP endpoint (default: the stack's, from STACK_* settings)")


def run(args: argparse.Namespace) -> int:
    def trace(settings: Settings) -> int:
        url = args.url or settings.url("triton_http")
        headers = admin_headers(settings.admin_key_file)
        return tracewindow.run(url, args.model, args.count, args.rate, args.seconds, headers)

    return stackopts.run(args, trace)
