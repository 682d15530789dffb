"""The advisor's flags, shared by ``advise``, ``predict`` and ``autopilot``: the traffic, the
costs, the search's bounds and a batching config, with the number, URL and list types that
name a bad value in one line.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from advisor.model import ServiceModel
from advisor.predict import MIN_GAIN, OBJECTIVES
from batchscope import options
from tritonapi.urls import normalize_url

# No flag of the advisor means anything past this (a rate, a window, a count): a bigger
# number is a typing slip, and would only make the simulator run for ever.
MAX_NUMBER = 1e9


def positive(kind: type, what: str, zero_ok: bool = False) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}: {text!r} is not a number") from None
        in_range = (0 <= value if zero_ok else 0 < value) and value < math.inf  # not NaN
        if not in_range:
            wanted = "0 or more" if zero_ok else "a positive number"
            raise argparse.ArgumentTypeError(f"{what} must be {wanted}, got {text}")
        if value > MAX_NUMBER:
            raise argparse.ArgumentTypeError(
                f"{what} {text} is past the bound of {MAX_NUMBER:g}; give a smaller number"
            )
        return value

    return parse


def non_negative_int(what: str) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}: {text!r} is not a whole number") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{what} must be 0 or more, got {text}")
        return value

    return parse


def http_url(what: str) -> Any:
    """The URL rule (``tritonapi.urls.normalize_url``), as an argparse type."""

    def parse(text: str) -> str:
        try:
            return normalize_url(text, what)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


METRICS_URL_HELP = (
    "Triton's /metrics: its pending-request gauge, read beside each count, makes the traffic "
    "that of the requests received, not answered (default: the stack's with the stack's "
    "--url, port 8002 of --url's host when --url has port 8000, else none; unread, the "
    "answered count is fitted, and the output says so)"
)


def sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"preferred sizes: {text!r} is not a comma-separated list of integers"
        ) from None
    return sizes


def instance_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(sorted({int(s) for s in text.split(",") if s.strip()}))
    except ValueError:
        counts = ()
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(
            f"instance counts: {text!r} is not a comma-separated list of positive integers "
            "(e.g. 1,2)"
        )
    return counts


def service(text: str) -> ServiceModel:
    try:
        base, per_item = (float(x) for x in text.split(","))
        return ServiceModel(base / 1e6, per_item / 1e6)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"--service-us: {text!r} must be BASE,PER_ITEM microseconds, e.g. 600,41 ({exc})"
        ) from None


def add_costs(parser: argparse.ArgumentParser) -> None:
    costs = parser.add_argument_group(
        "costs outside the model (default: measured from a local Triton's CPU, or cached)"
    )
    costs.add_argument(
        "--calibration",
        type=Path,
        help="capture written by bench/advisor_calibrate.py (sets the CPU model)",
    )
    costs.add_argument("--cores", type=positive(float, "--cores"), help="CPU cores the server has")
    costs.add_argument(
        "--request-us", type=float, help="CPU microseconds per request outside the model"
    )


def add_traffic(parser: argparse.ArgumentParser) -> None:
    """The traffic, the costs and ``--json`` (advise and predict)."""
    traffic = parser.add_argument_group("traffic (default: fitted from the server's own traffic)")
    traffic.add_argument("--rate", type=positive(float, "--rate"), help="open-loop requests/s")
    traffic.add_argument(
        "--cv",
        type=positive(float, "--cv", zero_ok=True),
        default=None,
        help="burstiness: coefficient of variation of inter-arrival times (1 = Poisson)",
    )
    traffic.add_argument(
        "--concurrency", type=positive(int, "--concurrency"), help="closed-loop clients"
    )
    add_costs(parser)
    options.add_json(parser)


def add_search(parser: argparse.ArgumentParser) -> None:
    """The config search's bound and effort (advise and autopilot)."""
    parser.add_argument(
        "--p99-ms", type=positive(float, "--p99-ms"), required=True, help="p99 latency bound"
    )
    parser.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="auto",
        help="auto (default): p99 latency under open-loop traffic, throughput under "
        "closed-loop clients; headroom: capacity over the offered rate (needs costs)",
    )
    parser.add_argument(
        "--seeds",
        type=positive(int, "--seeds"),
        default=5,
        help="random seeds per finalist: the noise interval (default 5)",
    )
    parser.add_argument(
        "--requests",
        type=positive(int, "--requests"),
        default=5000,
        help="simulated requests per config tried (default 5000; fewer is faster, noisier)",
    )
    parser.add_argument(
        "--max-batch-limit",
        type=positive(int, "--max-batch-limit"),
        default=64,
        help="largest max_batch_size the model accepts (default 64)",
    )
    parser.add_argument(
        "--min-gain",
        type=positive(float, "--min-gain"),
        default=MIN_GAIN,
        metavar="X",
        help=f"smallest predicted gain worth a change (default {MIN_GAIN:g}: a p99 latency "
        "measured over 2,000 requests moves by up to 20 %% between runs of one config)",
    )
    parser.add_argument(
        "--try-instances",
        type=instance_counts,
        default=(),
        metavar="N,N",
        help="instance counts to search, e.g. 1,2 (default: the current count only; the "
        "hand-offs are measured with it, and other counts are extrapolated)",
    )


def add_config(parser: argparse.ArgumentParser) -> None:
    """A batching config given by flags (advise and predict)."""
    group = parser.add_argument_group("batching config (advise reads it from --url)")
    group.add_argument("--max-batch-size", type=positive(int, "--max-batch-size"))
    group.add_argument("--preferred", type=sizes, default=(), help="e.g. 2,4")
    group.add_argument("--delay-us", type=non_negative_int("--delay-us"), default=0)
    group.add_argument("--instances", type=positive(int, "--instances"), default=1)
