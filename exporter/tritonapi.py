"""Small synchronous reads of Triton's HTTP API (statistics, config, readiness, metrics).

Every function takes an optional ``requests.Session`` so that the exporter can
keep one connection pool per target; without one, each call opens its own.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests

from exporter.tritonstats import ModelStats, parse_statistics


def _client(session: requests.Session | None) -> Any:
    return session if session is not None else requests


def get_json(
    base_url: str, path: str, timeout_s: float = 5.0, session: requests.Session | None = None
) -> Any:
    response = _client(session).get(f"{base_url.rstrip('/')}{path}", timeout=timeout_s)
    response.raise_for_status()
    return response.json()


def model_stats(base_url: str, model: str, version: str = "", timeout_s: float = 5.0) -> ModelStats:
    """Cumulative statistics of one model (its newest loaded version if none is given)."""
    path = f"/v2/models/{quote(model, safe='')}" + (f"/versions/{version}" if version else "")
    stats = parse_statistics(get_json(base_url, path + "/stats", timeout_s))
    if not stats:
        raise ValueError(f"Triton returned no statistics for model {model!r}")
    return max(stats, key=lambda s: int(s.version) if s.version.isdigit() else -1)


def all_stats(
    base_url: str, timeout_s: float = 5.0, session: requests.Session | None = None
) -> Any:
    """``GET /v2/models/stats``: every loaded model version, as decoded JSON."""
    return get_json(base_url, "/v2/models/stats", timeout_s, session)


def model_config(
    base_url: str, model: str, timeout_s: float = 5.0, session: requests.Session | None = None
) -> Any:
    """``GET /v2/models/<model>/config``: the model's effective configuration as JSON."""
    return get_json(base_url, f"/v2/models/{quote(model, safe='')}/config", timeout_s, session)


def repository_index(
    base_url: str, timeout_s: float = 5.0, session: requests.Session | None = None
) -> Any:
    """``POST /v2/repository/index``: every model in the repository with its state."""
    url = f"{base_url.rstrip('/')}/v2/repository/index"
    response = _client(session).post(url, json={}, timeout=timeout_s)
    response.raise_for_status()
    return response.json()


def server_ready(
    base_url: str, timeout_s: float = 5.0, session: requests.Session | None = None
) -> bool:
    """``GET /v2/health/ready``: 200 when ready, 400 when up but not ready."""
    url = f"{base_url.rstrip('/')}/v2/health/ready"
    return bool(_client(session).get(url, timeout=timeout_s).status_code == 200)


def metrics_text(
    metrics_url: str, timeout_s: float = 5.0, session: requests.Session | None = None
) -> str:
    """Triton's Prometheus text (``:8002/metrics``)."""
    response = _client(session).get(metrics_url, timeout=timeout_s)
    response.raise_for_status()
    return str(response.text)
