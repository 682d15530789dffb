"""One target's scrape: fetch the raw answers of Triton, then parse them into a view.

Fetching and parsing are separate so that unit tests feed recorded answers
(real captures) through the same parsing the live exporter uses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from exporter.targets import Target
from tritonapi.client import TritonClient, TritonError, TritonHTTPError, metrics_text
from tritonapi.metrics import GpuStats, parse_metrics
from tritonapi.modelconfig import ModelConfig, parse_json
from tritonapi.stats import ModelStats, parse_statistics

T = TypeVar("T")
log = logging.getLogger(__name__)
# What a restricted API answers without the right header: 403 from Triton 2.51 (checked),
# 401 from an authenticating proxy in front of it.
RESTRICTED_STATUSES = (401, 403)


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
    config: ModelConfig
    pending: float | None


@dataclass(frozen=True)
class TargetView:
    ready: bool
    models: list[ModelView]
    # (model, version, ready) for every model of the repository index.
    states: list[tuple[str, str, bool]] = field(default_factory=list)
    # The GPUs Triton reports; empty without a GPU.
    gpus: list[GpuStats] = field(default_factory=list)


class Fetcher:
    """Reads a target's endpoints, one connection pool per target, all within one deadline."""

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self._clients: dict[str, TritonClient] = {}
        # The admin key header: the repository index is a restricted API.
        self.headers = dict(headers or {})
        self._warned: set[str] = set()

    def __call__(self, target: Target, timeout_s: float) -> Snapshot:
        client = self._clients.get(target.url)
        if client is None:
            client = self._clients.setdefault(
                target.url, TritonClient(target.url, headers=self.headers)
            )
        deadline = time.monotonic() + timeout_s

        def step(call: Callable[[float], T]) -> T:
            # Each request gets what is left of the target's budget, not a fresh one.
            left = max(deadline - time.monotonic(), 0.01)
            try:
                return call(left)
            except TritonError as exc:
                raise UpstreamError(str(exc)) from exc

        metrics = step(lambda t: metrics_text(target.metrics_url, t, client.session))
        stats = step(lambda t: client.statistics_json(timeout_s=t))
        index = step(lambda t: self._index(client, t))

        def config(name: str) -> Any:
            return step(lambda t: client.model_config_json(name, timeout_s=t))

        configs = {name: config(name) for name in sorted(_model_names(stats))}
        ready = step(lambda t: client.ready(t))
        return Snapshot(metrics, stats, index, configs, ready)

    def _index(self, client: TritonClient, timeout_s: float) -> Any:
        """The repository index, or None where it is restricted and we hold no key for it
        (an attached Triton with its own key): then only the models' READY states are
        missing, and the rest of the target is read as usual."""
        try:
            return client.repository_index(timeout_s)
        except TritonHTTPError as exc:
            if exc.status not in RESTRICTED_STATUSES:
                raise
            if client.url not in self._warned:
                self._warned.add(client.url)
                log.warning(
                    "target %s: the repository index is restricted (%s); model states are "
                    "not exported (give --triton-admin-key-file to read them)",
                    client.url,
                    exc.status,
                )
            return None


def _model_names(stats: Any) -> set[str]:
    entries = stats.get("model_stats") if isinstance(stats, dict) else None
    if not isinstance(entries, list):
        raise UpstreamError("/v2/models/stats: not a Triton statistics response (no model_stats)")
    return {str(e["name"]) for e in entries if isinstance(e, dict) and "name" in e}


def parse_index(payload: Any) -> list[tuple[str, str, bool]]:
    if payload is None:  # restricted, and no key: no states (see Fetcher._index)
        return []
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
    metrics = parse_metrics(snapshot.metrics_text)
    configs = {name: parse_json(body) for name, body in snapshot.configs.items()}
    models = []
    for stats in parse_statistics(snapshot.stats):
        if stats.name not in configs:
            raise ValueError(f"no config fetched for model {stats.name!r}")
        models.append(ModelView(stats, configs[stats.name], metrics.pending.get(stats.key)))
    return TargetView(snapshot.ready, models, parse_index(snapshot.index), metrics.gpus)
