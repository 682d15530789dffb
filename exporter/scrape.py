"""One target's scrape: fetch the raw answers of Triton, then parse them into a view.

Fetching and parsing are separate so that unit tests feed recorded answers
(real captures) through the same parsing the live exporter uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import requests

from exporter import tritonapi
from exporter.targets import Target
from exporter.tritonconfig import BatchingConfig, parse_config
from exporter.tritonmetrics import parse_pending
from exporter.tritonstats import ModelStats, parse_statistics

T = TypeVar("T")


class UpstreamError(Exception):
    """One of Triton's endpoints did not give a usable answer; the message names it."""


@dataclass(frozen=True)
class Snapshot:
    """Triton's answers as received (decoded JSON, metrics text)."""

    metrics_text: str
    stats: Any
    index: Any
    configs: dict[str, Any]
    ready: bool


@dataclass(frozen=True)
class ModelView:
    stats: ModelStats
    config: BatchingConfig
    pending: float | None


@dataclass(frozen=True)
class TargetView:
    ready: bool
    models: list[ModelView]
    # (model, version, ready) for every model of the repository index.
    states: list[tuple[str, str, bool]] = field(default_factory=list)


class Fetcher:
    """Reads a target's endpoints, one connection pool per target, all within one deadline."""

    def __init__(self) -> None:
        self._sessions: dict[str, requests.Session] = {}

    def __call__(self, target: Target, timeout_s: float) -> Snapshot:
        session = self._sessions.get(target.url)
        if session is None:
            session = self._sessions.setdefault(target.url, requests.Session())
        deadline = time.monotonic() + timeout_s

        def step(what: str, call: Callable[..., T], *args: str) -> T:
            # Each request gets what is left of the target's budget, not a fresh one.
            left = max(deadline - time.monotonic(), 0.01)
            try:
                return call(*args, left, session)
            except requests.JSONDecodeError as exc:
                raise UpstreamError(f"{what}: the body is not JSON ({exc})") from exc
            except requests.RequestException as exc:
                raise UpstreamError(f"{what}: {exc}") from exc

        url = target.url
        metrics = step(f"GET {target.metrics_url}", tritonapi.metrics_text, target.metrics_url)
        stats = step(f"GET {url}/v2/models/stats", tritonapi.all_stats, url)
        index = step(f"POST {url}/v2/repository/index", tritonapi.repository_index, url)
        configs = {
            name: step(f"GET {url}/v2/models/{name}/config", tritonapi.model_config, url, name)
            for name in sorted(_model_names(stats))
        }
        ready = step(f"GET {url}/v2/health/ready", tritonapi.server_ready, url)
        return Snapshot(metrics, stats, index, configs, ready)


def _model_names(stats: Any) -> set[str]:
    entries = stats.get("model_stats") if isinstance(stats, dict) else None
    if not isinstance(entries, list):
        raise UpstreamError("/v2/models/stats: not a Triton statistics response (no model_stats)")
    return {str(e["name"]) for e in entries if isinstance(e, dict) and "name" in e}


def parse_index(payload: Any) -> list[tuple[str, str, bool]]:
    if not isinstance(payload, list):
        raise ValueError("not a repository index (expected a JSON list)")
    try:
        return [
            (str(e["name"]), str(e.get("version", "")), e.get("state") == "READY") for e in payload
        ]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed repository index entry: {exc!r}") from None


def parse_snapshot(snapshot: Snapshot) -> TargetView:
    """Everything the collector exports for one target; ValueError on any malformed part."""
    pending = parse_pending(snapshot.metrics_text)
    configs = {name: parse_config(body) for name, body in snapshot.configs.items()}
    models = []
    for stats in parse_statistics(snapshot.stats):
        if stats.name not in configs:
            raise ValueError(f"no config fetched for model {stats.name!r}")
        models.append(ModelView(stats, configs[stats.name], pending.get(stats.key)))
    return TargetView(snapshot.ready, models, parse_index(snapshot.index))
