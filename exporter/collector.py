"""The collector: reads every target at scrape time and builds fresh metric families.

Triton's cumulative counters are re-exported as they are; after a Triton
restart they start again from zero and Prometheus' ``rate()`` treats that as a
counter reset. The derived gauges are ratios of the current cumulative values,
so a reset can never make them negative or huge. Missing data gives no series:
a target that fails reports only ``triton_batching_target_up 0``, its scrape
duration and its data age; an endpoint that is down (exporter.scrape) takes away only
the series read from it, and says so in ``triton_batching_endpoint_up``; a ratio
without a denominator is left out. What it writes, by example: :class:`BatchingCollector`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from exporter import exposition
from exporter.features import FeatureFamilies, batches_of
from exporter.scrape import (
    Fetcher,
    Memo,
    ModelView,
    Snapshot,
    TargetView,
    endpoint_urls,
    parse_snapshot,
)
from exporter.targets import Target
from tritonapi.modelconfig import ModelConfig
from tritonapi.stats import ModelStats

log = logging.getLogger(__name__)

Fetch = Callable[[Target, float], Snapshot]

MODEL = ["target", "model", "version"]
TARGET_UP_HELP = (
    "1 if the target was read: its HTTP API answered (readiness and statistics, or a "
    "statistics API that is restricted) and no endpoint answered with something that is "
    "not Triton's; else 0, and the target exports nothing else. An endpoint that is down "
    "on its own is in triton_batching_endpoint_up."
)
STATS = "Triton statistics API /v2/models/stats"


def _phase(name: str, seconds: bool) -> Callable[[ModelStats], float | None]:
    def value(s: ModelStats) -> float | None:
        if name not in s.phases:
            return None
        return s.phases[name].seconds if seconds else s.phases[name].count

    return value


# (name without _total, help, value from the statistics; None means no series)
COUNTERS: list[tuple[str, str, Callable[[ModelStats], float | None]]] = [
    (
        "triton_batching_requests_success",
        f"Requests that succeeded ({STATS}: inference_stats.success.count).",
        _phase("success", seconds=False),
    ),
    (
        "triton_batching_requests_failure",
        f"Requests that failed ({STATS}: inference_stats.fail.count).",
        _phase("fail", seconds=False),
    ),
    (
        "triton_batching_inferences",
        f"Inferences, counting each batch element of a request ({STATS}: inference_count).",
        lambda s: s.inference_count,
    ),
    (
        "triton_batching_executions",
        f"Model executions, one per formed batch ({STATS}: execution_count).",
        lambda s: s.execution_count,
    ),
    (
        "triton_batching_queue_seconds",
        f"Seconds requests waited in the queue ({STATS}: inference_stats.queue.ns).",
        _phase("queue", seconds=True),
    ),
    (
        "triton_batching_compute_input_seconds",
        f"Seconds spent preparing inputs ({STATS}: inference_stats.compute_input.ns).",
        _phase("compute_input", seconds=True),
    ),
    (
        "triton_batching_compute_infer_seconds",
        f"Seconds spent executing the model ({STATS}: inference_stats.compute_infer.ns).",
        _phase("compute_infer", seconds=True),
    ),
    (
        "triton_batching_compute_output_seconds",
        f"Seconds spent extracting outputs ({STATS}: inference_stats.compute_output.ns).",
        _phase("compute_output", seconds=True),
    ),
]


# An ensemble has no batcher: Triton's inference and execution counts for it repeat those
# of its steps (exporter.features), so they are left out rather than counted twice.
ENSEMBLE_LEFT_OUT = frozenset({"triton_batching_inferences", "triton_batching_executions"})

GPU = ["target", "gpu_uuid"]
METRICS = "Triton /metrics"

# (name, help, field of tritonmetrics.GpuStats)
GPU_GAUGES: list[tuple[str, str, str]] = [
    (
        "triton_batching_gpu_utilization_ratio",
        f"GPU utilization, 0 to 1 ({METRICS}: nv_gpu_utilization).",
        "utilization",
    ),
    (
        "triton_batching_gpu_memory_used_bytes",
        f"GPU memory in use ({METRICS}: nv_gpu_memory_used_bytes).",
        "memory_used_bytes",
    ),
    (
        "triton_batching_gpu_memory_total_bytes",
        f"GPU memory in all ({METRICS}: nv_gpu_memory_total_bytes).",
        "memory_total_bytes",
    ),
    (
        "triton_batching_gpu_power_watts",
        f"GPU power draw in watts ({METRICS}: nv_gpu_power_usage).",
        "power_watts",
    ),
]


@dataclass(frozen=True)
class Work:
    """Work done by a collector's reads, for the tests that keep an unchanged read cheap."""

    metrics_parsed: int
    models_parsed: int
    configs_parsed: int
    models_rendered: int


@dataclass
class _Result:
    target: Target
    view: TargetView | None
    duration_s: float
    # time.monotonic() when the read ended
    read_at: float = 0.0


class BatchingCollector(Collector):
    """Triton's dynamic batching as Prometheus metrics, read from every target per scrape.

    ``fetch(target, timeout_s)`` returns a target's raw answers; the default reads
    them over HTTP. Each target has ``timeout_s`` in all, and targets are read
    concurrently, so one dead target costs one timeout, not one per target.

    With ``read_interval_s`` > 0 the targets are read off the scrape path instead, every
    ``read_interval_s`` while scrapes come, and a scrape serves the latest complete read
    (already rendered), so its time no longer grows with the fleet or waits for a slow
    target. ``triton_batching_data_age_seconds`` says how old each target's data is; a
    scrape that finds a read older than twice the interval waits for a fresh one.

    Example (one model, one target)::

        # HELP triton_batching_batch_executions_total Executions per formed batch size ...
        # TYPE triton_batching_batch_executions_total counter
        triton_batching_batch_executions_total{target="http://127.0.0.1:8000",model="batch_add_model",version="1",batch_size="2"} 913.0
        # HELP triton_batching_average_batch_size Inferences per execution since Triton started ...
        # TYPE triton_batching_average_batch_size gauge
        triton_batching_average_batch_size{target="http://127.0.0.1:8000",model="batch_add_model",version="1"} 1.483
        # HELP triton_batching_target_up 1 if the target was read: its HTTP API answered ...
        # TYPE triton_batching_target_up gauge
        triton_batching_target_up{target="http://127.0.0.1:8000"} 1.0

    While a target is read, each endpoint says whether it answered and where it is read
    from; one that is down (here a refused metrics port) takes away only its own series::

        triton_batching_endpoint_up{target="http://127.0.0.1:18000",endpoint="metrics"} 0.0
        triton_batching_endpoint_up{target="http://127.0.0.1:18000",endpoint="statistics"} 1.0
        triton_batching_endpoint_info{target="http://127.0.0.1:18000",endpoint="metrics",url="http://127.0.0.1:18002/metrics",reason="connection refused"} 1.0

    On a server where Triton reports GPUs (through DCGM), their gauges pass through
    with the target added; without a GPU these families are absent, never zero::

        triton_batching_gpu_utilization_ratio{target="http://triton:8000",gpu_uuid="GPU-5a1f..."} 0.42
    """  # noqa: E501

    def __init__(
        self,
        targets: Sequence[Target],
        timeout_s: float = 2.0,
        fetch: Fetch | None = None,
        read_interval_s: float = 0.0,
    ) -> None:
        if not targets:
            raise ValueError("no targets")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if read_interval_s < 0:
            raise ValueError("read_interval_s must not be negative")
        self.targets = list(targets)
        self.timeout_s = timeout_s
        self.fetch: Fetch = fetch if fetch is not None else Fetcher()
        # Kept between scrapes: starting a thread per target on every scrape cost ~0.5 ms
        # each. Twice the targets, so that a fetch still stuck past its time does not
        # hold up the next scrape's.
        self._pool = ThreadPoolExecutor(
            max_workers=2 * len(self.targets), thread_name_prefix="scrape"
        )

        # Per target: what its last answers parsed into (exporter.scrape.Memo).
        self._memos = {t.url: Memo() for t in self.targets}
        self._renderer = _Renderer()
        self._reader = _Reader(self, read_interval_s) if read_interval_s > 0 else None

    def close(self) -> None:
        """Stop reading: the background reader ends (its thread joined) and the scrape
        threads are let go. A collector whose owner is done with it reads no target and
        logs nothing more; collecting afterwards is a programming error."""
        if self._reader is not None:
            self._reader.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def describe(self) -> list[Metric]:
        # Registering must not touch the network.
        return []

    def collect(self) -> Iterator[Metric]:
        if self._reader is not None:
            yield from self._reader.latest()
            return
        results = self._scrape_all()
        yield from self._renderer.families(results)
        yield _ages(results, time.monotonic())

    def read(self) -> tuple[list[Metric], list[_Result]]:
        """One read of every target, as rendered families (for the background reader)."""
        results = self._scrape_all()
        return self._renderer.families(results), results

    def work(self) -> Work:
        """What the reads so far parsed and rendered, counted in models and texts."""
        memos = list(self._memos.values())
        return Work(
            metrics_parsed=sum(m.parsed_metrics for m in memos),
            models_parsed=sum(m.parsed_models for m in memos),
            configs_parsed=sum(m.parsed_configs for m in memos),
            models_rendered=self._renderer.models_rendered,
        )

    def _scrape_all(self) -> list[_Result]:
        futures = [self._pool.submit(self._scrape_one, t) for t in self.targets]
        # The fetcher keeps to the timeout; the margin covers parsing and thread start
        # and stays proportional, so the scrape still ends well inside Prometheus' timeout.
        wait(futures, timeout=self.timeout_s * 1.2)
        results = []
        for target, future in zip(self.targets, futures, strict=True):
            if future.done():
                results.append(future.result())
            else:
                # A stuck fetch finishes on its own thread; the scrape does not wait for it.
                future.cancel()
                log.warning("target %s: no answer within %.1fs", target.url, self.timeout_s)
                results.append(_Result(target, None, self.timeout_s))
        return results

    def _scrape_one(self, target: Target) -> _Result:
        start = time.monotonic()
        try:
            view = parse_snapshot(self.fetch(target, self.timeout_s), self._memos[target.url])
        except Exception as exc:  # any failure of one target must not fail the whole scrape
            log.warning("target %s: scrape failed: %s: %s", target.url, type(exc).__name__, exc)
            view = None
        end = time.monotonic()
        return _Result(target, view, end - start, end)


def declared() -> list[Metric]:
    """The collector's families, empty: their names, types, labels and help."""
    return [*_Families().all(), _ages([], 0.0)]


def _ages(results: list[_Result], now: float) -> Metric:
    age = GaugeMetricFamily(
        "triton_batching_data_age_seconds",
        "Seconds since the exporter finished reading the target: about 0 when targets are "
        "read at scrape time, up to twice --read-interval when they are read in the background.",
        labels=["target"],
    )
    for result in results:
        age.add_metric([result.target.url], max(now - result.read_at, 0.0))
    return age


class _Reader:
    """Reads the targets on a thread of its own while scrapes keep coming.

    It reads every ``interval_s`` and stops reading when no scrape came for
    ``IDLE_READS`` intervals (a stack nobody scrapes costs its Tritons nothing); the
    next scrape then finds the data too old and waits for a fresh read. A read that runs
    longer than the interval (slow targets, a loaded machine) holds no scrape up while it
    is within its time budget: the scrape serves the last read, and its age says so.
    """

    IDLE_READS = 30

    def __init__(self, collector: BatchingCollector, interval_s: float) -> None:
        self.collector = collector
        self.interval_s = interval_s
        self.max_age_s = 2 * interval_s
        # The most one read may take: the scrape threads' wait (BatchingCollector._scrape_all).
        self.read_budget_s = collector.timeout_s * 1.2
        # time.monotonic() when the read in flight began; None between reads.
        self._reading_since: float | None = None
        self._changed = threading.Condition()
        self._families: list[Metric] = []
        self._results: list[_Result] = []
        self._last_scrape = time.monotonic()
        self._thread: threading.Thread | None = None
        self._closed = False

    def latest(self) -> list[Metric]:
        now = time.monotonic()
        with self._changed:
            self._last_scrape = now
            if not self._closed and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._run, name="reader", daemon=True)
                self._thread.start()
            if not self._fresh(now) and not self._read_running_late(now):
                self._changed.notify_all()  # wake an idle reader
                # One read's time at most (the fetch timeout and its margin).
                self._changed.wait_for(
                    lambda: self._fresh(time.monotonic()),
                    timeout=self.collector.timeout_s * 1.5,
                )
            families, results = self._families, self._results
        if not results:  # no read finished in time: every target as down
            timeout = self.collector.timeout_s
            missing = [_Result(t, None, timeout, now) for t in self.collector.targets]
            return [*_Families().fill(missing), _ages(missing, now)]
        return [*families, _ages(results, time.monotonic())]

    def close(self) -> None:
        """End the reading thread, waiting for a read in flight (one fetch timeout)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=self.collector.timeout_s * 1.5)

    def _fresh(self, now: float, slack_s: float = 0.0) -> bool:
        limit = self.max_age_s + slack_s
        return bool(self._results) and all(now - r.read_at <= limit for r in self._results)

    def _read_running_late(self, now: float) -> bool:
        """A read is in flight within its budget, and the data it replaces is old only by
        that much: waiting for it would hold the scrape up for data barely fresher."""
        since = self._reading_since
        return (
            since is not None
            and now - since <= self.read_budget_s
            and self._fresh(now, self.read_budget_s)
        )

    def _run(self) -> None:
        while True:
            with self._changed:
                if self._closed:
                    return
            start = time.monotonic()
            self._reading_since = start
            try:
                families, results = self.collector.read()
            except Exception:  # the reader must go on; the scrape then reports old data
                log.exception("reading the targets failed")
            else:
                with self._changed:
                    self._families, self._results = families, results
                    self._changed.notify_all()
            finally:
                self._reading_since = None
            with self._changed:
                if self._closed:
                    return
                idle = time.monotonic() - self._last_scrape > self.IDLE_READS * self.interval_s
                if idle:
                    self._changed.wait()  # until a scrape wakes it
                else:
                    self._changed.wait(max(self.interval_s - (time.monotonic() - start), 0.0))


class _Families:
    """Fresh metric families for one scrape."""

    def __init__(self) -> None:
        self.counters = [
            (CounterMetricFamily(name, text, labels=MODEL), value) for name, text, value in COUNTERS
        ]
        self.batch_executions = CounterMetricFamily(
            "triton_batching_batch_executions",
            f"Executions per formed batch size ({STATS}: batch_stats[].compute_infer.count).",
            labels=[*MODEL, "batch_size"],
        )
        self.batch_infer_seconds = CounterMetricFamily(
            "triton_batching_batch_compute_infer_seconds",
            f"Seconds executing the model per formed batch size "
            f"({STATS}: batch_stats[].compute_infer.ns).",
            labels=[*MODEL, "batch_size"],
        )
        self.failure_reasons = CounterMetricFamily(
            "triton_batching_request_failures_by_reason",
            "Failed requests by Triton's reason: REJECTED, CANCELED, BACKEND, OTHER "
            "(Triton /metrics: nv_inference_request_failure{reason}, Triton 2.49 and later; "
            "absent before).",
            labels=[*MODEL, "reason"],
        )
        self.pending = self._gauge(
            "triton_batching_pending_requests",
            "Requests received and not yet executed "
            "(Triton /metrics: nv_inference_pending_request_count).",
        )
        self.ready = self._gauge(
            "triton_batching_model_ready",
            "1 if the model version is READY, else 0 (Triton POST /v2/repository/index: state).",
        )
        config = "Triton /v2/models/<model>/config"
        self.max_batch_size = self._gauge(
            "triton_batching_max_batch_size",
            f"Largest batch the model accepts, 0 = no batching ({config}: max_batch_size).",
        )
        self.dynamic = self._gauge(
            "triton_batching_dynamic_batching_enabled",
            f"1 if the dynamic batcher is on, else 0 ({config}: dynamic_batching).",
        )
        self.preferred = GaugeMetricFamily(
            "triton_batching_preferred_batch_size",
            f"One series per preferred batch size, value = the size "
            f"({config}: dynamic_batching.preferred_batch_size).",
            labels=[*MODEL, "size"],
        )
        self.queue_delay = self._gauge(
            "triton_batching_max_queue_delay_seconds",
            f"Longest a request waits for a batch to fill "
            f"({config}: dynamic_batching.max_queue_delay_microseconds).",
        )
        self.instances = self._gauge(
            "triton_batching_instances",
            f"Model instances executing batches ({config}: instance_group[].count).",
        )
        self.config_info = InfoMetricFamily(
            "triton_batching_model_config",
            f"Model settings that are not numbers ({config}).",
            labels=MODEL,
        )
        self.average = self._gauge(
            "triton_batching_average_batch_size",
            f"Inferences per execution since Triton started ({STATS}: "
            "inference_count / execution_count).",
        )
        self.efficiency = self._gauge(
            "triton_batching_efficiency_ratio",
            f"Average batch size / max_batch_size since Triton started ({STATS} and {config}).",
        )
        self.preferred_hit = self._gauge(
            "triton_batching_preferred_hit_ratio",
            f"Share of executions whose batch size is a preferred size, since Triton started "
            f"({STATS}: batch_stats[], {config}: preferred_batch_size).",
        )
        self.up = GaugeMetricFamily(
            "triton_batching_target_up",
            TARGET_UP_HELP,
            labels=["target"],
        )
        self.endpoint_up = GaugeMetricFamily(
            "triton_batching_endpoint_up",
            "1 if the endpoint answered, else 0 and only the series read from it are left "
            "out (metrics: refused, timed out or an error status; config: restricted, 401 "
            "or 403, or some configs not answered in time; the others: restricted); present "
            "while target_up is 1. "
            "endpoint: metrics (Triton /metrics), statistics (/v2/models/stats), repository "
            "(/v2/repository/index), config (/v2/models/<model>/config).",
            labels=["target", "endpoint"],
        )
        self.endpoint_info = InfoMetricFamily(
            "triton_batching_endpoint",
            "The URL each endpoint of the target is read from, and why it is down "
            "(reason, empty while it answers); present while target_up is 1.",
            labels=["target", "endpoint"],
        )
        self.duration = GaugeMetricFamily(
            "triton_batching_scrape_duration_seconds",
            "Seconds the exporter took to read the target.",
            labels=["target"],
        )
        self.server_ready = GaugeMetricFamily(
            "triton_batching_server_ready",
            "1 if Triton says it is ready, else 0 (Triton /v2/health/ready).",
            labels=["target"],
        )
        self.features = FeatureFamilies()
        # Passed through from Triton's /metrics with the target added; none without a GPU.
        self.gpu = [
            (GaugeMetricFamily(name, text, labels=GPU), field_name)
            for name, text, field_name in GPU_GAUGES
        ]

    @staticmethod
    def _gauge(name: str, text: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, text, labels=MODEL)

    def fill(self, results: list[_Result]) -> list[Metric]:
        for result in results:
            self._head(result)
            view = result.view
            if view is None:
                continue
            self._states(result.target.url, view.states)
            self._cache(result.target.url, view.cache_configured)
            for model in view.models:
                self._model(result.target.url, model, bool(view.cache_configured))
            self._tail(result.target.url, view)
        return [f for f in self.all() if f.samples]

    # A target's series, in the order fill writes them (the renderer keeps that order).
    def _head(self, result: _Result) -> None:
        url = result.target.url
        self.up.add_metric([url], 1.0 if result.view is not None else 0.0)
        self.duration.add_metric([url], result.duration_s)
        if result.view is not None:
            self._endpoints(result.target, result.view.endpoints)
            self.server_ready.add_metric([url], 1.0 if result.view.ready else 0.0)

    def _states(self, url: str, states: list[tuple[str, str, bool]]) -> None:
        for model, version, ready in states:
            self.ready.add_metric([url, model, version], 1.0 if ready else 0.0)

    def _cache(self, url: str, cache: bool | None) -> None:
        if cache is not None:
            self.features.add_target(url, cache)

    def _tail(self, url: str, view: TargetView) -> None:
        for (model, version), (pending, failures) in view.unlisted.items():
            self._from_metrics([url, model, version], pending, failures)
        for gpu in view.gpus:
            for family, field_name in self.gpu:
                number = getattr(gpu, field_name)
                if number is not None:
                    family.add_metric([url, gpu.uuid], number)

    def all(self) -> list[Metric]:
        """Every family, filled or not, in exposition order (exporter.catalog lists them)."""
        families: list[Metric] = [family for family, _ in self.counters]
        families += [
            self.batch_executions,
            self.batch_infer_seconds,
            self.failure_reasons,
            self.pending,
            self.ready,
            self.max_batch_size,
            self.dynamic,
            self.preferred,
            self.queue_delay,
            self.instances,
            self.config_info,
            self.average,
            self.efficiency,
            self.preferred_hit,
            self.up,
            self.endpoint_up,
            self.endpoint_info,
            self.duration,
            self.server_ready,
            *(family for family, _ in self.gpu),
            *self.features.families(),
        ]
        return families

    def _endpoints(self, target: Target, endpoints: dict[str, str]) -> None:
        urls = endpoint_urls(target)
        for endpoint, why in endpoints.items():
            self.endpoint_up.add_metric([target.url, endpoint], 0.0 if why else 1.0)
            self.endpoint_info.add_metric(
                [target.url, endpoint], {"url": urls[endpoint], "reason": why}
            )

    def _from_metrics(
        self, labels: list[str], pending: float | None, failures: dict[str, float]
    ) -> None:
        if pending is not None:
            self.pending.add_metric(labels, pending)
        for reason, count in sorted(failures.items()):
            self.failure_reasons.add_metric([*labels, reason], count)

    def _model(self, url: str, view: ModelView, cache: bool = False) -> None:
        s, c = view.stats, view.config
        labels = [url, s.name, s.version]
        # An ensemble forms no batches of its own (exporter.features): no batch series.
        # Without its config a model may be one, so its batch series are left out too.
        own = c is not None and batches_of(c)
        for family, value in self.counters:
            number = value(s)
            if number is not None and (own or family.name not in ENSEMBLE_LEFT_OUT):
                family.add_metric(labels, number)
        for size, batch in sorted(s.batches.items() if own else ()):
            self.batch_executions.add_metric([*labels, str(size)], batch.executions)
            self.batch_infer_seconds.add_metric([*labels, str(size)], batch.compute_infer_ns / 1e9)
        self._from_metrics(labels, view.pending, view.failures)
        if c is None:
            return

        self.max_batch_size.add_metric(labels, c.max_batch_size)
        self.dynamic.add_metric(labels, 1.0 if c.dynamic_batching else 0.0)
        for size in c.preferred_batch_sizes:
            self.preferred.add_metric([*labels, str(size)], size)
        if c.max_queue_delay_s is not None:
            self.queue_delay.add_metric(labels, c.max_queue_delay_s)
        self.instances.add_metric(labels, c.instances)
        self.config_info.add_metric(
            labels,
            {
                "backend": c.backend,
                "platform": c.platform,
                "preferred_batch_sizes": ",".join(map(str, c.preferred_batch_sizes)),
                "instance_kinds": ",".join(c.instance_kinds),
            },
        )

        # Ratios of cumulative values: defined only once something was executed.
        if own and s.execution_count > 0:
            average = s.inference_count / s.execution_count
            self.average.add_metric(labels, average)
            if c.max_batch_size > 0:
                self.efficiency.add_metric(labels, average / c.max_batch_size)
        executed = sum(b.executions for b in s.batches.values())
        if own and c.preferred_batch_sizes and executed > 0:
            hits = sum(
                b.executions for size, b in s.batches.items() if size in c.preferred_batch_sizes
            )
            self.preferred_hit.add_metric(labels, hits / executed)
        self._features(labels, view.stats, c, cache)

    def _features(self, labels: list[str], s: ModelStats, config: ModelConfig, cache: bool) -> None:
        """Queue limits, priorities, the cache, the scheduler (exporter.features)."""
        self.features.add(labels, config)
        hit, miss = s.phases.get("cache_hit"), s.phases.get("cache_miss")
        if not cache:  # the model asks for a cache the server does not have: no counts
            hit = miss = None
        self.features.add_cache(
            labels, config, hit.count if hit else None, miss.count if miss else None
        )


# One part of a scrape's series: (index of the family in _Families.all(), its samples, their
# lines, None where the text writer leaves them to generate_latest).
Part = list[tuple[int, list[Sample], str | None]]


class _Renderer:
    """A scrape's families, from parts kept between reads: a model whose view (statistics,
    config, pending count, failures) did not change since the last read is neither written
    into families nor rendered again, nor is an unchanged repository index.

    Families are still fresh for each scrape; only their samples and lines are reused.
    """

    def __init__(self) -> None:
        self._work = _Families()  # filled with one part at a time, then emptied
        self._families = self._work.all()
        # target URL -> (model, version) -> (view, cache configured, its part)
        self._models: dict[str, dict[tuple[str, str], tuple[ModelView, bool, Part]]] = {}
        # target URL -> (model states, their part)
        self._states: dict[str, tuple[list[tuple[str, str, bool]], Part]] = {}
        # target URL -> (the kept parts of its states and models, those parts merged)
        self._merged: dict[str, tuple[list[Part], Part]] = {}
        # family index -> (the lines of its parts, the family's text): an unchanged family
        # keeps its text object, which the web side's gzip then finds compressed.
        self._texts: dict[int, tuple[list[str], str]] = {}
        self._lock = threading.Lock()
        self.models_rendered = 0

    def families(self, results: list[_Result]) -> list[Metric]:
        with self._lock:
            parts = []
            for result in results:
                parts.append(self._part(_Families._head, result))
                if result.view is not None:
                    parts += self._target(result.target.url, result.view)
            return self._assembled(parts)

    def _assembled(self, parts: list[Part]) -> list[Metric]:
        """Fresh families holding the parts' samples in order, each with its text kept."""
        families = _Families().all()
        lines: list[list[str | None]] = [[] for _ in families]
        for part in parts:
            for i, samples, text in part:
                families[i].samples.extend(samples)
                lines[i].append(text)
        out = []
        for i, (family, texts) in enumerate(zip(families, lines, strict=True)):
            if not family.samples:
                continue
            whole = [t for t in texts if t is not None]
            if len(whole) < len(texts):
                out.append(exposition.prerender(family))
                continue
            last = self._texts.get(i)
            if last is not None and _same(last[0], whole):
                out.append(exposition.kept(family, last[1]))
            else:
                out.append(exposition.assembled(family, whole))
                self._texts[i] = (whole, family.prerendered)  # type: ignore[attr-defined]
        return out

    def _target(self, url: str, view: TargetView) -> list[Part]:
        kept_states = self._states.get(url)
        if kept_states is None or kept_states[0] != view.states:
            kept_states = (view.states, self._part(_Families._states, url, view.states))
            self._states[url] = kept_states
        # The target-wide cache gauge goes first: no model's part writes its family.
        head = self._part(_Families._cache, url, view.cache_configured)
        kept_parts = [kept_states[1]]
        cache = bool(view.cache_configured)
        kept, fresh = self._models.get(url, {}), {}
        for model in view.models:
            old = kept.get(model.stats.key)
            if old is not None and old[1] == cache and old[0] == model:
                part = old[2]
            else:
                part = self._part(_Families._model, url, model, cache)
                self.models_rendered += 1
            fresh[model.stats.key] = (model, cache, part)
            kept_parts.append(part)
        self._models[url] = fresh
        merged = self._merged.get(url)
        if merged is None or not _same(merged[0], kept_parts):
            merged = (kept_parts, _merge(kept_parts))
            self._merged[url] = merged
        return [head, merged[1], self._part(_Families._tail, url, view)]

    def _part(self, write: Callable[..., None], *args: Any) -> Part:
        """What ``write`` adds to the families, taken out of them with its lines."""
        write(self._work, *args)
        part: Part = []
        for i, family in enumerate(self._families):
            if family.samples:
                part.append((i, family.samples, exposition.sample_lines(family)))
                family.samples = []
        return part


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _merge(parts: list[Part]) -> Part:
    """One part holding the parts' samples and lines in order: a target whose models did
    not change is then one part per family to assemble, not one per model."""
    samples: dict[int, list[Sample]] = {}
    lines: dict[int, list[str | None]] = {}
    for part in parts:
        for i, some, text in part:
            samples.setdefault(i, []).extend(some)
            lines.setdefault(i, []).append(text)
    merged: Part = []
    for i in sorted(samples):
        texts = lines[i]
        whole = "".join(t for t in texts if t is not None)
        merged.append((i, samples[i], whole if None not in texts else None))
    return merged
