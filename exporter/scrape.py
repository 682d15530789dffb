"""One target's scrape: fetch the raw answers of Triton, then parse them into a view.

Fetching and parsing are separate so that unit tests feed recorded answers
(real captures) through the same parsing the live exporter uses.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
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
    # Configs already parsed (the fetcher's cache), by model; the rest are parsed here.
    parsed: dict[str, ModelConfig] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelView:
    stats: ModelStats
    config: ModelConfig
    pending: float | None
    # Failed requests by Triton's reason label (2.49+); empty where Triton has none.
    failures: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TargetView:
    ready: bool
    models: list[ModelView]
    # (model, version, ready) for every model of the repository index.
    states: list[tuple[str, str, bool]] = field(default_factory=list)
    # The GPUs Triton reports; empty without a GPU.
    gpus: list[GpuStats] = field(default_factory=list)
    # Whether Triton has a response cache configured (--cache-config).
    cache_configured: bool = False


# An unchanged model config is served from the cache this long at most: a reload that
# resets no counter (a model without traffic) is seen within this time.
CONFIG_TTL_S = 60.0
# Concurrent requests of one scrape (shared by the targets; urllib3 pools 10 per host).
MAX_PARALLEL = 8


@dataclass
class _CachedConfig:
    body: Any
    parsed: ModelConfig | None
    # What a reload changes: the loaded versions, and the statistics API's counters, which
    # Triton 2.51 resets when it reloads a model (checked: inference_count, execution_count
    # and last_inference go back to 0, while /metrics keeps counting).
    versions: frozenset[str]
    counters: tuple[int, int, int]
    fetched: float


def _parsed_or_none(body: Any) -> ModelConfig | None:
    """Parsed once for the cache; a config that does not parse is reported at parse time."""
    try:
        return parse_json(body)
    except ValueError:
        return None


def _fingerprint(stats: Any) -> dict[str, tuple[frozenset[str], tuple[int, int, int]]]:
    """Model name -> (versions, summed counters) from a statistics API answer."""
    versions: dict[str, set[str]] = {}
    counters: dict[str, list[int]] = {}
    for entry in stats.get("model_stats") or []:
        if not isinstance(entry, dict) or "name" not in entry:
            continue
        name = str(entry["name"])
        versions.setdefault(name, set()).add(str(entry.get("version", "")))
        total = counters.setdefault(name, [0, 0, 0])
        for i, key in enumerate(("inference_count", "execution_count", "last_inference")):
            value = entry.get(key)
            total[i] += int(value) if isinstance(value, int | float) else 0
    return {name: (frozenset(versions[name]), (c[0], c[1], c[2])) for name, c in counters.items()}


class Fetcher:
    """Reads a target's endpoints, one connection pool per target, all within one deadline.

    The fixed endpoints (metrics, statistics, index, readiness) are read concurrently, then
    the configs of the models whose config is not cached, concurrently too. A cached config
    is dropped when the model's versions change, when one of its statistics counters goes
    back (Triton reset them: the model was reloaded, perhaps with a new config), and after
    ``config_ttl_s`` in any case.
    """

    def __init__(
        self,
        headers: dict[str, str] | None = None,
        config_ttl_s: float = CONFIG_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clients: dict[str, TritonClient] = {}
        # The admin key header: the repository index is a restricted API.
        self.headers = dict(headers or {})
        self._warned: set[str] = set()
        self.config_ttl_s = config_ttl_s
        self._clock = clock
        self._configs: dict[tuple[str, str], _CachedConfig] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=2 * MAX_PARALLEL, thread_name_prefix="fetch")
        # Config requests made (cache misses), for tests and the benchmark.
        self.config_fetches = 0

    def __call__(self, target: Target, timeout_s: float) -> Snapshot:
        client = self._clients.get(target.url)
        if client is None:
            client = self._clients.setdefault(
                target.url, TritonClient(target.url, headers=self.headers)
            )
        deadline = time.monotonic() + timeout_s

        def step(call: Callable[[float], T]) -> Callable[[], T]:
            def run() -> T:
                # Each request gets what is left of the target's budget, not a fresh one.
                left = max(deadline - time.monotonic(), 0.01)
                try:
                    return call(left)
                except TritonError as exc:
                    raise UpstreamError(str(exc)) from exc

            return run

        metrics, stats, index, ready = self._all(
            deadline,
            [
                step(lambda t: metrics_text(target.metrics_url, t, client.session)),
                step(lambda t: client.statistics_json(timeout_s=t)),
                step(lambda t: self._index(client, t)),
                step(lambda t: client.ready(t)),
            ],
        )
        names = _model_names(stats)
        prints = _fingerprint(stats)
        now = self._clock()
        configs: dict[str, Any] = {}
        parsed: dict[str, ModelConfig] = {}
        missing = []
        with self._lock:
            for name in sorted(names):
                cached = self._configs.get((target.url, name))
                if cached is not None and self._still_valid(cached, prints.get(name), now):
                    cached.counters = prints[name][1]
                    configs[name] = cached.body
                    if cached.parsed is not None:
                        parsed[name] = cached.parsed
                else:
                    missing.append(name)
            # Models no longer loaded leave the cache.
            for key in [k for k in self._configs if k[0] == target.url and k[1] not in names]:
                del self._configs[key]

        def config(name: str) -> Callable[[float], Any]:
            return lambda t: client.model_config_json(name, timeout_s=t)

        fetched = self._all(deadline, [step(config(name)) for name in missing])
        with self._lock:
            self.config_fetches += len(missing)
            for name, body in zip(missing, fetched, strict=True):
                configs[name] = body
                versions, counters = prints.get(name, (frozenset(), (0, 0, 0)))
                self._configs[(target.url, name)] = _CachedConfig(
                    body, _parsed_or_none(body), versions, counters, now
                )
        return Snapshot(metrics, stats, index, configs, ready, parsed)

    def _still_valid(
        self,
        cached: _CachedConfig,
        now_print: tuple[frozenset[str], tuple[int, int, int]] | None,
        now: float,
    ) -> bool:
        if now_print is None or now - cached.fetched > self.config_ttl_s:
            return False
        versions, counters = now_print
        went_back = any(n < c for n, c in zip(counters, cached.counters, strict=True))
        return versions == cached.versions and not went_back

    def _all(self, deadline: float, calls: list[Callable[[], Any]]) -> list[Any]:
        """Run ``calls`` concurrently; their results in order, or the first error."""
        if len(calls) <= 1:
            return [call() for call in calls]
        futures = [self._pool.submit(call) for call in calls]
        done, pending = wait(futures, timeout=max(deadline - time.monotonic(), 0.01) + 0.05)
        if pending:
            for future in pending:
                future.cancel()
            raise UpstreamError("no answer within the target's time budget")
        return [future.result() for future in futures]

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
    configs = {
        name: snapshot.parsed.get(name) or parse_json(body)
        for name, body in snapshot.configs.items()
    }
    failures: dict[tuple[str, str], dict[str, float]] = {}
    for (model, version, reason), value in metrics.failures.items():
        failures.setdefault((model, version), {})[reason] = value
    models = []
    for stats in parse_statistics(snapshot.stats):
        if stats.name not in configs:
            raise ValueError(f"no config fetched for model {stats.name!r}")
        models.append(
            ModelView(
                stats,
                configs[stats.name],
                metrics.pending.get(stats.key),
                failures.get(stats.key, {}),
            )
        )
    return TargetView(
        snapshot.ready, models, parse_index(snapshot.index), metrics.gpus, metrics.cache_configured
    )
