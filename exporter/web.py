"""The exporter's HTTP side: ``/metrics``, a landing page at ``/``, and ``/healthz``."""

from __future__ import annotations

import html
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import ThreadingWSGIServer

from exporter import exposition
from exporter.targets import Target
from exporter.tracing import TraceBook

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def landing_page(targets: list[Target]) -> bytes:
    rows = "".join(
        f"<li>{html.escape(t.url)} (metrics: {html.escape(t.metrics_url)})</li>" for t in targets
    )
    return (
        "<!DOCTYPE html><html><head><title>Triton batching exporter</title></head><body>"
        "<h1>Triton batching exporter</h1>"
        "<p>Batch-size distribution and batch efficiency of Triton's dynamic batcher.</p>"
        '<p><a href="/metrics">Metrics</a> · <a href="/healthz">Health</a></p>'
        f"<h2>Targets</h2><ul>{rows}</ul></body></html>"
    ).encode()


MAX_TRACE_WINDOW_S = 120.0


def traces_answer(books: Sequence[TraceBook], query: str) -> tuple[str, dict[str, Any]]:
    """``/api/traces?model=M[&seconds=S][&target=URL]``: the retained traced requests.

    Times are Triton's steady-clock ns; ``clock_offset_ns`` turns them into unix ns on
    this host (Triton's clock is the kernel's CLOCK_MONOTONIC, the same in every
    container of one machine).
    """
    params = {k: v[-1] for k, v in parse_qs(query).items()}
    model = params.get("model", "")
    try:
        seconds = float(params.get("seconds", "10"))
    except ValueError:
        seconds = -1.0
    if not model or not 0 < seconds <= MAX_TRACE_WINDOW_S:
        return "400 Bad Request", {
            "error": f"give model=NAME and seconds in (0, {MAX_TRACE_WINDOW_S:g}]"
        }
    chosen = [b for b in books if params.get("target", b.target.url) == b.target.url]
    if not chosen:
        return "404 Not Found", {"error": "no trace files are read for that target"}
    book = chosen[0]
    requests = book.window(model, seconds)
    since = min((r.queue_start_ns for r in requests), default=time.monotonic_ns())
    spans = book.incomplete_spans(model, since)
    return "200 OK", {
        "target": book.target.url,
        "model": model,
        "seconds": seconds,
        "clock_offset_ns": time.time_ns() - time.monotonic_ns(),
        "sample_ratio": book.sample_ratio.get(model),
        "trace_rate": book.trace_rate.get(model),
        "gaps": book.follower.stats.gaps,
        "requests": [r.to_json() for r in requests],
        # Windows that ended unfinished (Triton died, or tracing was stopped): the
        # requests traced in these steady-clock spans are all there is of them.
        "incomplete": [list(span) for span in spans],
    }


def make_app(
    registry: CollectorRegistry, targets: list[Target], books: Sequence[TraceBook] = ()
) -> WSGIApp:
    page = landing_page(targets)
    gzip = exposition.Gzip()

    def metrics(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """The text format (Prometheus reads it as well as OpenMetrics; the series are the
        same), gzipped at a fast level when the scraper accepts it."""
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b"use GET\n"]
        texts = exposition.texts(registry.collect())
        headers = [("Content-Type", exposition.CONTENT_TYPE)]
        if exposition.gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body = gzip.compress(texts)
            headers.append(("Content-Encoding", "gzip"))
        else:
            body = "".join(texts).encode("utf-8")
        headers.append(("Content-Length", str(len(body))))
        start_response("200 OK", headers)
        return [body]

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [page]
        if path == "/api/traces":
            status, body = traces_answer(books, environ.get("QUERY_STRING", ""))
            start_response(status, [("Content-Type", "application/json")])
            return [json.dumps(body).encode()]
        if path == "/healthz":
            # The exporter's own liveness; whether Triton is up is triton_batching_target_up.
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ok\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /metrics\n"]

    return app


class _QuietHandler(WSGIRequestHandler):
    # wsgiref prints one line per request to stderr; a 1 s scrape would flood the log.
    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)


def make_web_server(host: str, port: int, app: WSGIApp) -> WSGIServer:
    """Bound and listening; OSError if the address is taken or not ours."""
    return make_server(host, port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
