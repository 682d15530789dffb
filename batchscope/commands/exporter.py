"""``batchscope exporter``: the Prometheus exporter alone, flags with environment
fallbacks, serving until SIGTERM or SIGINT.

``--url``, ``--metrics-url`` and ``--db`` are the shared spellings; ``--triton-url``,
``--triton-metrics-url`` and ``--changes-db`` stay, as compose, Kubernetes and the stack
pass them.
"""

from __future__ import annotations

import argparse
import os

from batchscope import options
from batchscope.base import CommandError
from exporter.options import (
    DEFAULT_LISTEN,
    DEFAULT_TIMEOUT_S,
    DEFAULT_TRITON,
    LOG_LEVELS,
    options_from,
)
from exporter.scrape import CONFIG_TTL_S
from exporter.serve import serve
from stacksettings import ADMIN_KEY_HEADER
from tritonapi.urls import METRICS_PORT_OFFSET

DESCRIPTION = (
    "Prometheus exporter for Triton's dynamic batching: batch-size "
    "distribution, batch efficiency, queue time, per model."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_url(
        parser,
        "Triton HTTP endpoint to read, repeatable for several Tritons (TRITON_URL, "
        f"comma-separated; default {DEFAULT_TRITON})",
        "--triton-url",
        dest="triton_url",
        action="append",
        metavar="URL",
    )
    options.add_metrics_url(
        parser,
        "Triton's /metrics URL, once per --triton-url in the same order (TRITON_METRICS_URL,"
        f" comma-separated; default: the same host, the HTTP port + {METRICS_PORT_OFFSET},"
        " /metrics)",
        "--triton-metrics-url",
        dest="triton_metrics_url",
        action="append",
        metavar="URL",
    )
    parser.add_argument(
        "--trace-file",
        action="append",
        metavar="PREFIX",
        help="Triton's trace file (its --trace-config triton,file=PREFIX), once per "
        "--triton-url in the same order, or none: the exporter reads and removes PREFIX.N "
        "as Triton writes them (TRITON_TRACE_FILE, comma-separated)",
    )
    parser.add_argument(
        "--trace-sample",
        metavar="N",
        help="keep each Triton tracing 1 request in N all the time, written to its trace "
        "file in rotating parts, so the queue-wait histogram stays live (TRITON_TRACE_SAMPLE;"
        " default 0: off). Only on Triton 2.57 (25.04) or newer: older releases crash under "
        "a trace stream that never ends, and the exporter then leaves tracing off and says so",
    )
    parser.add_argument(
        "--triton-timeout",
        metavar="SECONDS",
        help="time allowed to read one Triton per scrape; keep it well under Prometheus' "
        f"scrape_timeout (TRITON_TIMEOUT, {DEFAULT_TIMEOUT_S})",
    )
    parser.add_argument(
        "--triton-admin-key-file",
        metavar="FILE",
        help="file holding the key of Triton's restricted APIs (the repository index), sent "
        f"as the {ADMIN_KEY_HEADER} header (TRITON_ADMIN_KEY_FILE; none by default)",
    )
    parser.add_argument(
        "--config-cache-ttl",
        metavar="SECONDS",
        help="longest an unchanged model config is served from the cache; a reload or a new "
        f"version refetches it at once; 0 reads every config on every scrape "
        f"(EXPORTER_CONFIG_CACHE_TTL, {CONFIG_TTL_S:g})",
    )
    parser.add_argument(
        "--read-interval",
        metavar="SECONDS",
        help="read the Tritons every SECONDS off the scrape path and serve the latest read "
        "(its age is triton_batching_data_age_seconds; a read older than twice this is "
        "refreshed before the scrape answers); 0 reads them at each scrape "
        "(EXPORTER_READ_INTERVAL, 0)",
    )
    options.add_db(
        parser,
        "the load-run store (SQLite) whose config_changes table `batchscope advise "
        "--apply` writes: exported as triton_batching_config_changes_total by outcome "
        "(EXPORTER_CHANGES_DB; none by default)",
        "--changes-db",
        dest="changes_db",
        metavar="FILE",
    )
    parser.add_argument(
        "--web.listen-address",
        dest="listen_address",
        metavar="HOST:PORT",
        help=f"address to serve /metrics on (EXPORTER_LISTEN_ADDRESS, {DEFAULT_LISTEN})",
    )
    parser.add_argument(
        "--log.level",
        dest="log_level",
        choices=LOG_LEVELS,
        help="log level (EXPORTER_LOG_LEVEL, info)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        return serve(options_from(args, os.environ))
    except ValueError as exc:
        raise CommandError(str(exc)) from None
