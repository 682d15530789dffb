"""``batchscope advise``: predict and recommend a batching config from a running Triton
or a stored load run; ``--verify`` checks it by experiment, ``--apply`` makes the change."""

from __future__ import annotations

import argparse
from pathlib import Path

from advisor.storedrun import run_ids
from autopilot import apply
from batchscope import advising, options
from batchscope import advisoropts as ao
from batchscope.base import CommandError
from loadgen import inputopts
from stacksettings import from_env_or_default

EPILOG = (
    "exit codes: 0 advice given (a change, or keep it); 1 --apply's change not kept; "
    f"2 a usage error; {advising.PRESENT_OFF} nothing recommended: the simulation of the "
    "config being served does not reproduce the window it was fitted from (the 'present:' "
    "line says which figure is off and what would help), or nothing executed in it"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    ao.add_traffic(parser)
    ao.add_search(parser)
    ao.add_config(parser)
    options.add_url(parser, "Triton HTTP base URL (config, statistics, traffic)")
    options.add_model(parser, "model name (with --url)")
    parser.add_argument(
        "--window",
        type=ao.positive(float, "--window"),
        default=10.0,
        help="seconds to watch the server's traffic (default 10)",
    )
    options.add_metrics_url(parser, ao.METRICS_URL_HELP, type=ao.http_url("--metrics-url"))
    parser.add_argument(
        "--prometheus",
        help="Prometheus URL: fit from the exporter's counters over --window instead",
    )
    parser.add_argument("--store", type=Path, help="the load generator's SQLite store")
    parser.add_argument(
        "--run",
        type=run_ids,
        help="run id in --store (batchscope load runs); several of one model, config and "
        "traffic, comma-separated (3,4,5), are pooled: one short traced run's fit moves "
        "from run to run",
    )
    parser.add_argument(
        "--probe",
        action="store_true",
        help="measure the costs with a short closed-loop load on --url now (a few seconds "
        "of load on the server)",
    )
    parser.add_argument(
        "--server-side",
        action="store_true",
        help="judge the p99 bound server-side (queue + compute): send no probe load. By "
        "default, on --url the time the clients spend outside Triton is measured with "
        "--probe's load (--probe-s seconds) after the window, so that the bound is the "
        "clients' p99",
    )
    parser.add_argument(
        "--probe-s",
        type=ao.positive(float, "--probe-s"),
        default=3.0,
        help="seconds of probe load (default 3)",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="check by experiment: load each config as a scratch copy of the model "
        "(repository API), replay the traffic, compare with the prediction, unload",
    )
    parser.add_argument(
        "--verify-s",
        type=ao.positive(float, "--verify-s"),
        default=5.0,
        help="seconds of replayed traffic per config (default 5)",
    )
    parser.add_argument(
        "--model-repository",
        type=Path,
        default=from_env_or_default().model_repository,
        help="where the model's files are, for --verify's scratch copy "
        "(default: the project's model_repository)",
    )
    parser.add_argument(
        "--admin-key-file",
        type=Path,
        default=from_env_or_default().admin_key_file,
        help="key of Triton's restricted APIs, for --verify (default .stack/triton-admin.key)",
    )
    applying = parser.add_argument_group(
        "apply the recommendation to the live model (dry run without --apply)"
    )
    applying.add_argument(
        "--apply",
        action="store_true",
        help="load the recommended config on --model as a config override (repository "
        "API, with --admin-key-file; config.pbtxt is not touched), watch a window before "
        "and after, and roll back by itself when clients fare worse; exit 1 when the "
        "change is not kept",
    )
    applying.add_argument(
        "--watch-s",
        type=ao.positive(float, "--watch-s"),
        help="seconds of each window before and after the change (default: long enough "
        f"for {apply.WATCH_REQUESTS:,} requests at the current rate, "
        f"{apply.MIN_WATCH_S:g}..{apply.MAX_WATCH_S:g} s)",
    )
    options.add_db(
        applying,
        type=Path,
        default=from_env_or_default().store,
        help="load-run store: the change is recorded there, and the clients' latencies of "
        "the model's load runs going on meanwhile are read from it "
        "(default .stack/loadgen.sqlite3)",
    )
    parser.add_argument(
        "--traces",
        metavar="EXPORTER_URL",
        help="measure the batcher's hand-offs (dispatch, timer slack, release, execution "
        "spread) from the exporter's retained traces of --model; trace every request first: "
        "batchscope trace --model M",
    )
    loads = parser.add_argument_group(
        "what --probe's and --verify's requests hold (as in batchscope load; --verify "
        "replays a stored run's own when none is given)"
    )
    inputopts.add_arguments(loads)
    parser.add_argument(
        "--calibrations",
        type=Path,
        default=from_env_or_default().state_dir / "advisor-calibrations.json",
        help="cache of measured costs per server, model and Triton version "
        "(default .stack/advisor-calibrations.json)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        return advising.advise(args)
    except advising.UsageError as exc:
        raise CommandError(str(exc)) from None
