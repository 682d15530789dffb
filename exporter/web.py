"""The exporter's HTTP side: ``/metrics``, a landing page at ``/``, and ``/healthz``."""

from __future__ import annotations

import html
import logging
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from exporter.targets import Target

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


def make_app(registry: CollectorRegistry, targets: list[Target]) -> WSGIApp:
    metrics = make_wsgi_app(registry)
    page = landing_page(targets)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [page]
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
