"""Triton's URL rules: how a URL given by the user is cleaned, and where a Triton's metrics
are by default; the exporter, the stack and the advisor read URLs this one way.

Triton lays its ports out as HTTP, HTTP+1 (gRPC), HTTP+2 (metrics): 8000, 8001, 8002 by
default, 18000, 18001, 18002 when started with ``--http-port 18000 --grpc-port 18001
--metrics-port 18002``. The metrics URL is found from the HTTP URL that way.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

DEFAULT_METRICS_PORT = 8002
# Triton's metrics port, counted from its HTTP port.
METRICS_PORT_OFFSET = 2

# Longer than any real address: a paste gone wrong.
MAX_URL = 2048


def normalize_url(value: str, what: str) -> str:
    """``host:port`` or ``http(s)://host:port[/path]`` without a trailing slash."""
    text = value.strip()
    if len(text) > MAX_URL:
        raise ValueError(
            f"{what}: {value[:40]!r}... is {len(text):,} characters long; give the URL"
        )
    if "://" not in text:
        text = f"http://{text}"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what}: {value!r} is not an http(s) URL (e.g. http://127.0.0.1:8000)")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValueError(f"{what}: {value!r} has a bad port (use 1-65535)") from None
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), parts.query, ""))


def default_metrics_url(url: str) -> str:
    """Triton's layout: same host, the HTTP port + 2 (8002 when ``url`` names no port),
    path /metrics."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal goes back in brackets
        host = f"[{host}]"
    port = parts.port
    # Past 65535 the layout cannot hold: Triton's own default is the best guess left.
    if port is None or port + METRICS_PORT_OFFSET > 65535:
        metrics_port = DEFAULT_METRICS_PORT
    else:
        metrics_port = port + METRICS_PORT_OFFSET
    return urlunsplit((parts.scheme, f"{host}:{metrics_port}", "/metrics", "", ""))
