"""``batchscope doctor``: the troubleshooting guide's checks against a live Triton and its
telemetry, or a stored load run; the local stack's addresses are the defaults."""

from __future__ import annotations

import argparse
from pathlib import Path

from advisor.advice import SearchOptions
from advisor.storedrun import run_ids
from batchscope import options, stackopts
from batchscope.base import CommandError
from doctor import checkup
from doctor.checkup import EPILOG, P99_MS, PROMETHEUS_S, SAMPLE_S
from tritonapi import TritonError

DESCRIPTION = "Run the troubleshooting checks against a live Triton and its telemetry."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = stackopts.doctor_defaults()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    options.add_model(parser, "one model (default: every ready model)")
    options.add_url(
        parser, f"Triton's HTTP endpoint ({defaults.triton_url})", default=defaults.triton_url
    )
    options.add_metrics_url(
        parser,
        "Triton's /metrics, for pending requests (the traffic received) and GPUs "
        "(default: the stack's with the stack's --url, port 8002 of --url's host when --url "
        "has port 8000, else none)",
    )
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        help="read traffic from this Prometheus (default: the stack's, when it runs)",
    )
    parser.add_argument(
        "--window",
        type=float,
        metavar="SECONDS",
        help=f"traffic window ({SAMPLE_S:g} s sampled, or {PROMETHEUS_S:g} s of Prometheus)",
    )
    parser.add_argument(
        "--admin-key-file",
        metavar="FILE",
        help="key of Triton's restricted APIs, for its repository index (default: the stack's "
        "key, with the stack's --url)",
    )
    parser.add_argument(
        "--exporter-url",
        metavar="URL",
        help="the exporter whose batch traces (/api/traces) to read (default: the stack's, "
        "with the stack's --url)",
    )
    parser.add_argument(
        "--store",
        metavar="DB",
        type=Path,
        help="diagnose a stored load run instead (with --run): its statistics, config and "
        "shape mix, the same inputs as `advisor advise --store DB --run ID` (a live "
        "diagnosis reads the shape mix from LOADGEN_DB or .stack/loadgen.sqlite3)",
    )
    parser.add_argument(
        "--run",
        type=run_ids,
        metavar="ID[,ID...]",
        help="the run in --store; several of one model, config and traffic, comma-separated "
        "(3,4,5), are diagnosed together: their statistics summed, the search pooled as "
        "`advise --run 3,4,5` pools them",
    )
    parser.add_argument(
        "--p99-ms",
        type=float,
        default=P99_MS,
        help=f"the p99 latency bound of the advisor's config search (default {P99_MS:g}; "
        "the same search as `batchscope advise`)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=SearchOptions.seeds,
        help=f"the search's seeds per finalist (default {SearchOptions.seeds}, as advise's)",
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=SearchOptions.requests,
        help=f"simulated requests per config (default {SearchOptions.requests:,}, as advise's)",
    )
    options.add_json(parser)


def run(args: argparse.Namespace) -> int:
    try:
        return checkup.run(args, stackopts.doctor_defaults())
    except (checkup.UsageError, TritonError) as exc:
        raise CommandError(str(exc)) from None
