"""One target's scrape: fetch the raw answers of Triton, then parse them into a view.

Fetching and parsing are separate so that unit tests feed recorded answers
(real captures) through the same parsing the live exporter uses.

Each endpoint stands on its own: a metrics port that is refused, missing or slow, a
statistics, repository or config API that is restricted (401/403), and configs that come
too late, each take away only what is read from them, and are named in ``Snapshot.down``
with the reason. An answer that is not Triton's (garbage), an error status elsewhere, or an
HTTP port that does not answer still fails the whole target: a wrong URL or a server down.
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
from tritonapi.client import (
    TritonClient,
    TritonError,
    TritonHTTPError,
    TritonUnreachable,
    metrics_text,
)
from tritonapi.metrics import GpuStats, TritonMetrics, parse_wanted, wanted_lines
from tritonapi.modelconfig import ModelConfig, parse_json
from tritonapi.stats import ModelStats, parse_statistics

T = TypeVar("T")
log = logging.getLogger(__name__)
# What a restricted API answers without the right header: 403 from Triton 2.51 (checked),
# 401 from an authenticating proxy in front of it.
RESTRICTED_STATUSES = (401, 403)

# The endpoints a target is read from, as named in triton_batching_endpoint_up.
METRICS, STATISTICS, REPOSITORY, CONFIG = "metrics", "statistics", "repository", "config"
ENDPOINTS = (METRICS, STATISTICS, REPOSITORY, CONFIG)
# What a user does about an endpoint that is down, for the log line.
FIXES = {
    METRICS: "give --triton-metrics-url",
    STATISTICS: "give --triton-admin-key-file if Triton restricts it",
    REPOSITORY: "give --triton-admin-key-file to read model states",
    CONFIG: "give --triton-admin-key-file if Triton restricts it; a config that timed out "
    "is asked again at the next read",
}


def endpoint_urls(target: Target) -> dict[str, str]:
    """Where each endpoint of ``target`` is read from (MODEL stands for each model)."""
    return {
        METRICS: target.metrics_url,
        STATISTICS: f"{target.url}/v2/models/stats",
        REPOSITORY: f"{target.url}/v2/repository/index",
        CONFIG: f"{target.url}/v2/models/MODEL/config",
    }


class UpstreamError(Exception):
    """One of Triton's endpoints did not give a usable answer; the message names it."""


@dataclass(frozen=True)
class Snapshot:
    """Triton's answers as received (decoded JSON, metrics text); None ("" for the metrics
    text) where the endpoint is down, and then ``down`` says why."""

    metrics_text: str
    stats: Any
    index: Any
    configs: dict[str, Any]
    ready: bool
    # Configs already parsed (the fetcher's cache), by model; the rest are parsed here.
    parsed: dict[str, ModelConfig] = field(default_factory=dict)
    # Endpoints that did not answer usably, by name (ENDPOINTS): why, in a few words.
    down: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelView:
    stats: ModelStats
    # None while the config API is down for this model: its config series are left out.
    config: ModelConfig | None
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
    # Whether Triton has a response cache configured (--cache-config); None without /metrics.
    cache_configured: bool | None = False
    # Every endpoint that was read: "" if it answered, else why not (Snapshot.down).
    endpoints: dict[str, str] = field(default_factory=dict)
    # /metrics' per-model values (pending, failures by reason) of models that the
    # statistics API did not list because it is down.
    unlisted: dict[tuple[str, str], tuple[float | None, dict[str, float]]] = field(
        default_factory=dict
    )


# An unchanged model config is served from the cache this long at most: a reload that
# resets no counter (a model without traffic) is seen within this time.
CONFIG_TTL_S = 60.0
# Concurrent requests of one scrape (shared by the targets).
MAX_PARALLEL = 8
# The fetch threads: twice that, so that requests still running past a read's deadline do not
# hold up the next read's. All of them may be asking one target at once (its configs).
FETCH_THREADS = 2 * MAX_PARALLEL


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
    for entry in (stats or {}).get("model_stats") or []:
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
        # (target URL, endpoint) of the endpoints logged as down.
        self._warned: set[tuple[str, str]] = set()
        self.config_ttl_s = config_ttl_s
        self._clock = clock
        self._configs: dict[tuple[str, str], _CachedConfig] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=FETCH_THREADS, thread_name_prefix="fetch")
        # Config requests made (cache misses), for tests and the benchmark.
        self.config_fetches = 0

    def __call__(self, target: Target, timeout_s: float) -> Snapshot:
        client = self._clients.get(target.url)
        if client is None:
            client = self._clients.setdefault(
                target.url,
                TritonClient(
                    target.url,
                    headers=self.headers,
                    reuse_unchanged=True,
                    connections=FETCH_THREADS,
                ),
            )
        deadline = time.monotonic() + timeout_s

        def step(call: Callable[[float], T]) -> Callable[[], T]:
            def run() -> T:
                # Each request gets what is left of the target's budget, not a fresh one.
                return call(max(deadline - time.monotonic(), 0.01))

            return run

        down: dict[str, str] = {}
        outcomes = self._settle(
            deadline,
            [
                step(lambda t: metrics_text(target.metrics_url, t, client.session)),
                step(lambda t: client.statistics_json(timeout_s=t)),
                step(lambda t: client.repository_index(t)),
                step(lambda t: client.ready(t)),
            ],
        )
        # The metrics port is a server of its own: any failure there is that endpoint's.
        metrics = _or_down(outcomes[0], METRICS, down, _failed_to_answer)
        stats = _or_down(outcomes[1], STATISTICS, down, _restricted)
        index = _or_down(outcomes[2], REPOSITORY, down, _restricted)
        ready = _or_down(outcomes[3], "readiness", down, lambda _exc: False)
        names = _model_names(stats) if STATISTICS not in down else set()
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

        fetched = self._settle(deadline, [step(config(name)) for name in missing])
        with self._lock:
            self.config_fetches += len(missing)
            for name, outcome in zip(missing, fetched, strict=True):
                body = _or_down(outcome, CONFIG, down, _restricted_or_late)
                if CONFIG in down and body is None:
                    continue  # restricted or late: not cached, asked again next read
                configs[name] = body
                versions, counters = prints.get(name, (frozenset(), (0, 0, 0)))
                self._configs[(target.url, name)] = _CachedConfig(
                    body, _parsed_or_none(body), versions, counters, now
                )
        self._log_changes(target.url, down)
        return Snapshot(metrics or "", stats, index, configs, ready, parsed, down)

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

    def _settle(self, deadline: float, calls: list[Callable[[], Any]]) -> list[Any]:
        """Run ``calls`` concurrently; each one's result in order, or the exception it
        raised (``_Late`` for one still running at the deadline)."""
        if len(calls) == 1:  # no thread for one request
            try:
                return [calls[0]()]
            except Exception as exc:  # sorted out by _or_down, as for the others
                return [exc]
        futures = [self._pool.submit(call) for call in calls]
        wait(futures, timeout=max(deadline - time.monotonic(), 0.01) + 0.05)
        outcomes: list[Any] = []
        for future in futures:
            if not future.done():
                future.cancel()
                outcomes.append(_Late())
            elif future.exception() is not None:
                outcomes.append(future.exception())
            else:
                outcomes.append(future.result())
        return outcomes

    def _log_changes(self, url: str, down: dict[str, str]) -> None:
        """One line when an endpoint goes down and one when it is back, not one per read."""
        with self._lock:
            for endpoint, why in sorted(down.items()):
                if (url, endpoint) not in self._warned:
                    self._warned.add((url, endpoint))
                    log.warning(
                        "target %s: the %s endpoint is down (%s); only its series are left "
                        "out (%s)",
                        url,
                        endpoint,
                        why,
                        FIXES[endpoint],
                    )
            for key in [k for k in self._warned if k[0] == url and k[1] not in down]:
                self._warned.discard(key)
                log.info("target %s: the %s endpoint answers again", url, key[1])


class _Late(Exception):
    """A request that had not answered when the target's time budget ran out."""


def _failed_to_answer(exc: Exception) -> bool:
    """Refused, timed out or an error status: not a bug of ours, nor garbage."""
    return isinstance(exc, TritonError | _Late)


def _restricted(exc: Exception) -> bool:
    return isinstance(exc, TritonHTTPError) and exc.status in RESTRICTED_STATUSES


def _restricted_or_late(exc: Exception) -> bool:
    """A config's own failures: restricted, or not answered within the read's budget. A server
    of hundreds of models answers a first read's configs (one request each) for longer than
    the budget while it answers the rest: it is not down, and the configs that came are kept."""
    late = isinstance(exc, _Late) or (isinstance(exc, TritonUnreachable) and exc.timed_out)
    return late or _restricted(exc)


def _why(exc: Exception) -> str:
    if isinstance(exc, _Late):
        return "timed out"
    if isinstance(exc, TritonUnreachable):
        return exc.reason
    if isinstance(exc, TritonHTTPError):
        return f"HTTP {exc.status}"
    return type(exc).__name__


def _or_down(
    outcome: Any, endpoint: str, down: dict[str, str], its_own: Callable[[Exception], bool]
) -> Any:
    """``outcome``'s value; None with ``down[endpoint]`` set when it failed in a way that is
    the endpoint's alone (``its_own``); any other failure fails the whole target."""
    if not isinstance(outcome, Exception):
        return outcome
    if its_own(outcome):
        down.setdefault(endpoint, _why(outcome))
        return None
    if isinstance(outcome, _Late):
        raise UpstreamError("no answer within the target's time budget")
    if isinstance(outcome, TritonError):
        raise UpstreamError(str(outcome)) from outcome
    raise outcome


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


class Memo:
    """What one target's last answers parsed into, reused while they stay the same.

    Parsing is the part of a read that grows with the models: an unchanged statistics entry
    (a model without traffic), an unchanged config body and unchanged lines of ``/metrics``
    are not parsed again. Each is kept with the exact input it came from and swapped in whole,
    so a read on another thread sees either the old pair or the new one. Answers are kept,
    not copied: a fetch must not change an answer once it has returned it.
    """

    def __init__(self) -> None:
        # (wanted lines of /metrics, their parse)
        self._metrics: tuple[str, TritonMetrics] | None = None
        # (name, version) -> (statistics entry, its parse)
        self._stats: dict[tuple[str, str], tuple[Any, ModelStats]] = {}
        # (the last statistics answer, its parse): the same object again (the fetcher's
        # client returns it for an unchanged answer) is not even compared entry by entry.
        self._payload: tuple[Any, list[ModelStats]] | None = None
        # model -> (config body, its parse)
        self._configs: dict[str, tuple[Any, ModelConfig]] = {}
        # Work done, counted for the tests that keep an unchanged read from costing it again.
        self.parsed_metrics = 0
        self.parsed_models = 0
        self.parsed_configs = 0

    def metrics(self, text: str) -> TritonMetrics:
        wanted, triton = wanted_lines(text)
        kept = self._metrics
        if kept is not None and kept[0] == wanted and triton:
            return kept[1]
        parsed = parse_wanted(wanted, triton)
        self._metrics = (wanted, parsed)
        self.parsed_metrics += 1
        return parsed

    def statistics(self, payload: Any) -> list[ModelStats]:
        last = self._payload
        if last is not None and last[0] is payload:
            return last[1]
        entries = _statistics_entries(payload)
        kept, fresh = self._stats, {}
        models = []
        for entry in entries:
            key = _entry_key(entry)
            old = kept.get(key)
            if old is not None and old[0] == entry:
                stats = old[1]
            else:
                stats = _parse_entry(entry)
                self.parsed_models += 1
            fresh[key] = (entry, stats)
            models.append(stats)
        self._stats = fresh
        self._payload = (payload, models)
        return models

    def configs(self, snapshot: Snapshot) -> dict[str, ModelConfig]:
        kept, fresh = self._configs, {}
        for name, body in snapshot.configs.items():
            old = kept.get(name)
            if name in snapshot.parsed:
                config = snapshot.parsed[name]
            elif old is not None and old[0] == body:
                config = old[1]
            else:
                config = parse_json(body)
                self.parsed_configs += 1
            fresh[name] = (body, config)
        self._configs = fresh
        return {name: config for name, (_, config) in fresh.items()}


def _statistics_entries(payload: Any) -> list[Any]:
    if not isinstance(payload, dict) or not isinstance(payload.get("model_stats"), list):
        raise ValueError("not a Triton statistics response (no model_stats list)")
    return list(payload["model_stats"])


def _entry_key(entry: Any) -> tuple[str, str]:
    if isinstance(entry, dict):
        return (str(entry.get("name")), str(entry.get("version", "")))
    return ("", "")


def _parse_entry(entry: Any) -> ModelStats:
    """One statistics entry, with parse_statistics' error for a malformed one."""
    return parse_statistics({"model_stats": [entry]})[0]


def parse_snapshot(snapshot: Snapshot, memo: Memo | None = None) -> TargetView:
    """Everything the collector exports for one target; ValueError on any malformed part.

    An endpoint named in ``snapshot.down`` gives nothing, and what needs it is left out.
    With a ``memo`` (one per target), what did not change since its last read is not
    parsed again."""
    memo = memo if memo is not None else Memo()
    down = snapshot.down
    metrics = (
        memo.metrics(snapshot.metrics_text)
        if METRICS not in down
        else TritonMetrics(pending={}, gpus=[])
    )
    configs = memo.configs(snapshot)
    failures: dict[tuple[str, str], dict[str, float]] = {}
    for (model, version, reason), value in metrics.failures.items():
        failures.setdefault((model, version), {})[reason] = value
    models = []
    listed = memo.statistics(snapshot.stats) if STATISTICS not in down else []
    for stats in listed:
        if stats.name not in configs and CONFIG not in down:
            raise ValueError(f"no config fetched for model {stats.name!r}")
        models.append(
            ModelView(
                stats,
                configs.get(stats.name),
                metrics.pending.get(stats.key),
                failures.get(stats.key, {}),
            )
        )
    unlisted = {}
    if STATISTICS in down:
        for key in sorted(set(metrics.pending) | set(failures)):
            unlisted[key] = (metrics.pending.get(key), failures.get(key, {}))
    endpoints = {e: down.get(e, "") for e in (METRICS, STATISTICS, REPOSITORY)}
    if snapshot.configs or CONFIG in down:  # asked only for the models the statistics list
        endpoints[CONFIG] = down.get(CONFIG, "")
    return TargetView(
        snapshot.ready,
        models,
        parse_index(snapshot.index),
        metrics.gpus,
        metrics.cache_configured if METRICS not in down else None,
        endpoints,
        unlisted,
    )
