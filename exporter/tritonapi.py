"""Small synchronous reads of Triton's HTTP API (statistics, config, readiness)."""

from __future__ import annotations

from typing import Any

import requests

from exporter.tritonstats import ModelStats, parse_statistics


def get_json(base_url: str, path: str, timeout_s: float = 5.0) -> Any:
    response = requests.get(f"{base_url.rstrip('/')}{path}", timeout=timeout_s)
    response.raise_for_status()
    return response.json()


def model_stats(base_url: str, model: str, version: str = "", timeout_s: float = 5.0) -> ModelStats:
    """Cumulative statistics of one model (its newest loaded version if none is given)."""
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/stats"
    stats = parse_statistics(get_json(base_url, path, timeout_s))
    if not stats:
        raise ValueError(f"Triton returned no statistics for model {model!r}")
    return max(stats, key=lambda s: int(s.version) if s.version.isdigit() else -1)
