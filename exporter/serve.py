"""Run the exporter: register its collectors, serve /metrics until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from prometheus_client import CollectorRegistry

from exporter.changes import ChangesCollector
from exporter.collector import BatchingCollector
from exporter.options import Options
from exporter.scrape import Fetcher
from exporter.tracing import TraceBook, TraceCollector
from exporter.web import make_app, make_web_server


def serve(opts: Options) -> int:
    """Serve until stopped; ValueError (one line) when the address cannot be listened on."""
    logging.basicConfig(
        level=opts.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    registry = CollectorRegistry(auto_describe=False)
    batching = BatchingCollector(
        opts.targets,
        timeout_s=opts.timeout_s,
        fetch=Fetcher(opts.headers, config_ttl_s=opts.config_ttl_s),
        read_interval_s=opts.read_interval_s,
    )
    registry.register(batching)
    books = [
        TraceBook(
            target,
            path,
            timeout_s=opts.timeout_s,
            headers=opts.headers,
            sample_rate=opts.trace_sample,
        )
        for target, path in zip(opts.targets, opts.trace_files, strict=False)
    ]
    if books:
        registry.register(TraceCollector(books))
    if opts.changes_db is not None:
        registry.register(ChangesCollector(opts.changes_db))
    try:
        app = make_app(registry, opts.targets, books)
        server = make_web_server(opts.host, opts.port, app)
    except OSError as exc:
        raise ValueError(
            f"--web.listen-address: cannot listen on {opts.host}:{opts.port} "
            f"({exc.strerror or exc}); choose a free address"
        ) from None

    def stop(signum: int, _frame: Any) -> None:
        # shutdown() blocks until serve_forever returns, so it must not run on this thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logging.getLogger("exporter").info(
        "listening on http://%s:%d/metrics, reading %s (timeout %.1fs, %s)",
        opts.host,
        opts.port,
        ", ".join(t.url for t in opts.targets),
        opts.timeout_s,
        f"every {opts.read_interval_s:g}s" if opts.read_interval_s else "at each scrape",
    )
    try:
        server.serve_forever()
    finally:
        server.server_close()
        batching.close()
    return 0
