"""Which Tritons the exporter reads: an HTTP base URL and a metrics URL for each."""

from __future__ import annotations

from dataclasses import dataclass

from tritonapi.urls import METRICS_PORT_OFFSET, default_metrics_url, normalize_url


@dataclass(frozen=True)
class Target:
    # Triton's HTTP endpoint (statistics, config, readiness); also the `target` label.
    url: str
    # Triton's Prometheus endpoint, on its own port.
    metrics_url: str


def make_targets(urls: list[str], metrics_urls: list[str]) -> list[Target]:
    """Pair each Triton URL with its metrics URL (given in the same order, or found by
    Triton's port layout: the HTTP port + 2)."""
    if not urls:
        raise ValueError("no Triton to read: give --triton-url (or TRITON_URL)")
    clean = [normalize_url(u, "--triton-url") for u in urls]
    if len(set(clean)) != len(clean):
        raise ValueError("--triton-url: the same Triton is given twice")
    if metrics_urls and len(metrics_urls) != len(urls):
        raise ValueError(
            f"--triton-metrics-url given {len(metrics_urls)} time(s) for {len(urls)} "
            "--triton-url: give one per --triton-url, in the same order, or none for "
            f"Triton's layout (the same host, the HTTP port + {METRICS_PORT_OFFSET}, /metrics)"
        )
    metrics = [normalize_url(m, "--triton-metrics-url") for m in metrics_urls] or [
        default_metrics_url(u) for u in clean
    ]
    return [Target(u, m) for u, m in zip(clean, metrics, strict=True)]
