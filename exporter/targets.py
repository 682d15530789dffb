"""Which Tritons the exporter reads: an HTTP base URL and a metrics URL for each."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

DEFAULT_METRICS_PORT = 8002


@dataclass(frozen=True)
class Target:
    # Triton's HTTP endpoint (statistics, config, readiness); also the `target` label.
    url: str
    # Triton's Prometheus endpoint, on its own port.
    metrics_url: str


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
    """Triton's default layout: same host, port 8002, path /metrics."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal goes back in brackets
        host = f"[{host}]"
    return urlunsplit((parts.scheme, f"{host}:{DEFAULT_METRICS_PORT}", "/metrics", "", ""))


def make_targets(urls: list[str], metrics_urls: list[str]) -> list[Target]:
    """Pair each Triton URL with its metrics URL (given in the same order, or defaulted)."""
    if not urls:
        raise ValueError("no Triton to read: give --triton-url (or TRITON_URL)")
    clean = [normalize_url(u, "--triton-url") for u in urls]
    if len(set(clean)) != len(clean):
        raise ValueError("--triton-url: the same Triton is given twice")
    if metrics_urls and len(metrics_urls) != len(urls):
        raise ValueError(
            f"--triton-metrics-url given {len(metrics_urls)} time(s) for {len(urls)} "
            "--triton-url: give one per --triton-url, in the same order, or none for "
            f"the default http://HOST:{DEFAULT_METRICS_PORT}/metrics"
        )
    metrics = [normalize_url(m, "--triton-metrics-url") for m in metrics_urls] or [
        default_metrics_url(u) for u in clean
    ]
    return [Target(u, m) for u, m in zip(clean, metrics, strict=True)]
