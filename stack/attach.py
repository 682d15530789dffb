"""Attach mode: watch Tritons that already run (``up --triton-url URL``, repeatable).

The stack then starts no Triton of its own: the exporter, Prometheus, Alertmanager and
the dashboard read the given servers. Before anything starts, each URL is checked: one
that is not a Triton (HTML, a 404 on ``/v2``, a metrics page without Triton's series) is
refused with one line naming the flag; one that does not answer is only reported, since a
server that is down at start is what ``triton_batching_target_up`` and TritonDown are for.
Without ``--triton-metrics-url`` the metrics URL is found by Triton's port layout (the HTTP
port + 2), tried, and reported; when nothing answers there, one line names the flag and the
stack goes on without it. ``status`` then shows where the exporter reads each endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import requests
from prometheus_client.parser import text_string_to_metric_families

from exporter.scrape import FIXES
from exporter.targets import Target, make_targets
from stacksettings import SettingsError
from tritonapi.client import (
    TritonBadResponse,
    TritonClient,
    TritonError,
    TritonHTTPError,
    TritonUnreachable,
    metrics_text,
)
from tritonapi.urls import METRICS_PORT_OFFSET, default_metrics_url

PROBE_TIMEOUT_S = 3.0
# Every Triton exports these from its first start, with or without models or a GPU.
TRITON_METRIC_PREFIX = "nv_"


def targets(urls: Sequence[str], metrics_urls: Sequence[str]) -> list[Target]:
    """The attached servers, paired by order; SettingsError (one line, exit 2) on bad input."""
    for url in urls:
        _host_port(url, "--triton-url")
    try:
        found = make_targets(list(urls), [_with_metrics_path(m) for m in metrics_urls])
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    return found


def _with_metrics_path(value: str) -> str:
    """``http://host:8002`` means Triton's ``/metrics`` there."""
    text = value.strip().rstrip("/")
    if "://" in text and urlsplit(text).path == "":
        return f"{text}/metrics"
    return text


def _host_port(value: str, flag: str) -> None:
    """``http(s)://host[:port]`` and nothing else: a path would be a different API."""
    parts = urlsplit(value.strip())
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise SettingsError(f"{flag}: {value!r} has a bad port (use 1-65535)") from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
    ):
        raise SettingsError(
            f"{flag}: {value!r} is not an http(s)://host:port URL (e.g. http://gpu-host:8000)"
        )


def probe(found: Sequence[Target], timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
    """Check that each reachable URL is a Triton; return a warning per server that is down.

    Raises SettingsError for an answer that is not Triton's: a wrong port or a wrong host
    would otherwise be watched forever as a Triton that is "down".
    """
    warnings = []
    for target in found:
        try:
            TritonClient(target.url, timeout_s).server_metadata()
        except TritonUnreachable as exc:
            warnings.append(f"--triton-url {target.url} does not answer now ({exc}); watching it")
        except (TritonHTTPError, TritonBadResponse) as exc:
            raise SettingsError(
                f"--triton-url: {target.url} is not a Triton HTTP endpoint ({exc}); give "
                "Triton's HTTP port (8000 by default)"
            ) from None
        except TritonError as exc:
            raise SettingsError(f"--triton-url: {target.url}: {exc}") from None
        if target.metrics_url == default_metrics_url(target.url):
            warnings.append(_found_metrics(target, timeout_s))
            continue
        try:
            text = metrics_text(target.metrics_url, timeout_s)
        except TritonUnreachable as exc:
            warnings.append(
                f"--triton-metrics-url {target.metrics_url} does not answer now ({exc}); "
                "watching it"
            )
            continue
        except TritonError as exc:
            raise SettingsError(
                f"--triton-metrics-url: {target.metrics_url} is not Triton's metrics ({exc}); "
                "give Triton's metrics URL (http://HOST:8002/metrics by default)"
            ) from None
        if not _has_triton_series(text):
            raise SettingsError(
                f"--triton-metrics-url: {target.metrics_url} answers, but with no Triton "
                "metrics (no nv_* series); give Triton's metrics URL "
                "(http://HOST:8002/metrics by default)"
            )
    return warnings


def _found_metrics(target: Target, timeout_s: float) -> str:
    """One line on the metrics URL found by the port layout: found, or not there."""
    where = f"{target.metrics_url} (the HTTP port + {METRICS_PORT_OFFSET})"
    try:
        text = metrics_text(target.metrics_url, timeout_s)
        why = "" if _has_triton_series(text) else "answers without Triton's nv_* series"
    except TritonUnreachable as exc:
        why = exc.reason
    except TritonHTTPError as exc:
        why = f"answered {exc.status}"
    except TritonError as exc:
        why = str(exc)
    if not why:
        return f"--triton-url {target.url}: Triton's metrics found at {where}"
    return (
        f"--triton-url {target.url}: no Triton metrics at {where}: {why}; give "
        "--triton-metrics-url URL (the batch sizes are still read from the statistics API)"
    )


def _has_triton_series(text: str) -> bool:
    return any(
        line.startswith(TRITON_METRIC_PREFIX) or line.startswith(f"# TYPE {TRITON_METRIC_PREFIX}")
        for line in text.splitlines()
    )


def endpoint_rows(
    services: Sequence[dict[str, Any]], timeout_s: float = PROBE_TIMEOUT_S
) -> list[dict[str, Any]]:
    """What the stack's exporter (from ``status``' rows of ``services``) says of each
    endpoint of each Triton: its URL, whether it answered and why not
    (triton_batching_endpoint_info / _up); [] without an exporter that answers."""
    exporter = [s["urls"]["metrics"] for s in services if s["name"] == "exporter"]
    if not exporter:
        return []
    try:
        response = requests.get(exporter[0], timeout=timeout_s)
        response.raise_for_status()
    except requests.RequestException:
        return []
    up: dict[tuple[str, str], float] = {}
    info: dict[tuple[str, str], dict[str, str]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            key = (sample.labels.get("target", ""), sample.labels.get("endpoint", ""))
            if sample.name == "triton_batching_endpoint_up":
                up[key] = sample.value
            elif sample.name == "triton_batching_endpoint_info":
                info[key] = sample.labels
    return [
        {
            "target": target,
            "endpoint": endpoint,
            "url": labels.get("url", ""),
            "up": up.get((target, endpoint)) == 1,
            "reason": labels.get("reason", ""),
        }
        for (target, endpoint), labels in sorted(info.items())
    ]


def endpoint_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """``status``' lines for :func:`endpoint_rows`: one per endpoint, the fix where down."""
    lines = []
    for row in rows:
        state = "up" if row["up"] else f"down ({row['reason']}): {FIXES[row['endpoint']]}"
        lines.append(f"  {row['target']}  {row['endpoint']:<10} {row['url']}  {state}")
    return ["triton endpoints, as the exporter reads them:", *lines] if lines else []
