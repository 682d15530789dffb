"""What the exporter makes of Triton's per-request traces (see ``tritonapi.traces``).

One :class:`TraceBook` per target whose trace files the exporter can read. At each
scrape (and each ``/api/traces`` call) it reads the files Triton has written since,
removes them, and keeps:

- per model, a histogram of traced queue waits (sampled: only traced requests count);
- per model and departure reason, the batches rebuilt from traces, counted only while
  the model is traced at rate 1 (with sampling, a batch's size is unknown);
- the last ``retain_s`` seconds of traced requests, for the dashboard's batch timeline;
- the windows that ended before their count was reached (Triton died or tracing was
  stopped): their traces written so far are kept, and marked incomplete by the span of
  Triton's steady clock the window covered (``/api/traces`` returns the spans).

What it writes, by example: :class:`TraceCollector`.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from exporter.targets import Target
from tritonapi.client import TritonClient, TritonError
from tritonapi.modelconfig import ModelConfig
from tritonapi.traces import (
    Batch,
    TracedRequest,
    TraceFollower,
    departure_reason,
    group_batches,
)
from tritonapi.tracesafety import continuous_allowed, server_version

log = logging.getLogger(__name__)

# Upper bounds in seconds: 1-1.5-2-3-4-5-6-8 per decade from 10 µs to 10 s, so that any
# max_queue_delay_microseconds between 100 µs and 1 s falls within ±25 % of a bound.
BUCKETS_S: tuple[float, ...] = tuple(
    round(m * 10.0**e, 9) for e in range(-5, 1) for m in (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
) + (10.0,)
# A batch's requests may land in two consecutive files; it is counted once a request that
# started this much after its end has been read, or once it is this old.
SETTLE_NS = 50_000_000
STALE_NS = 10_000_000_000
CONFIG_TTL_S = 30.0
TRACE = "Triton per-request traces"


@dataclass
class _ModelCounts:
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_S) + 1))
    wait_sum_s: float = 0.0
    reasons: dict[str, int] = field(default_factory=dict)

    def observe(self, wait_s: float) -> None:
        self.buckets[bisect.bisect_left(BUCKETS_S, wait_s)] += 1
        self.wait_sum_s += wait_s


# Always-on sampling: Triton writes a file every this many traces, and the setting is
# checked (and put back after a Triton restart) this often.
SAMPLE_LOG_FREQUENCY = 1_000
SAMPLER_CHECK_S = 30.0


class Sampler:
    """Keeps one Triton tracing 1 request in ``rate`` all the time, where its version can.

    Triton's global trace setting (``POST /v2/trace/setting``): level TIMESTAMPS, no count,
    a file every ``log_frequency`` traces (PREFIX.0, PREFIX.1, ... which the exporter
    reads as they come). Only on releases without the tracing crash
    (``tritonapi.tracesafety.continuous_allowed``): before 2.57 a stream that never ends
    kills the server, so the sampler stays off and ``state`` says why in one line. The
    setting is checked every ``check_s``, which also turns it on again after a restart.
    Models with a setting of their own (a window) keep it: Triton prefers it.
    """

    def __init__(
        self,
        client: TritonClient,
        rate: int,
        log_frequency: int = SAMPLE_LOG_FREQUENCY,
        check_s: float = SAMPLER_CHECK_S,
        version_of: Callable[[], str] | None = None,
    ) -> None:
        if rate < 1:
            raise ValueError(f"trace sample rate {rate}: give 1 in N with N >= 1")
        self.client = client
        self.rate = rate
        self.log_frequency = log_frequency
        self.check_s = check_s
        self.version_of = version_of or (lambda: server_version(client))
        self.checked = -float("inf")
        self.state = "not checked yet"

    @property
    def on(self) -> bool:
        return self.state == "on"

    def wanted(self) -> dict[str, Any]:
        return {
            "trace_level": ["TIMESTAMPS"],
            "trace_rate": str(self.rate),
            "trace_count": "-1",
            "log_frequency": str(self.log_frequency),
        }

    def ensure(self, now: float | None = None) -> None:
        """Check the version and the setting (at most every ``check_s``); fix the setting."""
        now = time.monotonic() if now is None else now
        if now - self.checked < self.check_s:
            return
        self.checked = now
        try:
            why = continuous_allowed(self.version_of())
            if why:
                if why != self.state:
                    log.warning("%s", why)
                self.state = why
                return
            current = self.client.trace_settings()
            wanted = self.wanted()
            if any(current.get(k) != v for k, v in wanted.items()):
                self.client.update_trace_settings(wanted)
                log.info("trace sampling on: 1 request in %d", self.rate)
        except TritonError as exc:
            self.state = f"trace sampling not set: {exc}"
            self.checked = -float("inf")  # try again at the next read
            return
        self.state = "on"


class TraceBook:
    """One target's traces: cumulative counts for Prometheus and a window for the timeline."""

    def __init__(
        self,
        target: Target,
        prefix: Path,
        retain_s: float = 120.0,
        max_requests: int = 50_000,
        settle_s: float = 1.0,
        timeout_s: float = 2.0,
        config_of: Callable[[str], ModelConfig | None] | None = None,
        ratio_of: Callable[[str], tuple[float, int] | None] | None = None,
        headers: dict[str, str] | None = None,
        sample_rate: int = 0,
    ) -> None:
        self.target = target
        self.follower = TraceFollower(prefix, settle_s=settle_s)
        self.retain_ns = int(retain_s * 1e9)
        self.recent: deque[TracedRequest] = deque(maxlen=max_requests)
        self.counts: dict[tuple[str, str], _ModelCounts] = {}
        self.open: dict[tuple[str, str, int], list[TracedRequest]] = {}
        self.newest_start_ns = 0
        # Per model: the share traced now (0 when off), and the rate its traces were taken
        # at (the setting outlives the level: traces flushed after OFF keep their rate).
        self.sample_ratio: dict[str, float] = {}
        self.trace_rate: dict[str, int] = {}
        self._configs: dict[str, tuple[float, ModelConfig]] = {}
        # Trace settings are a restricted API: the stack's admin key goes in ``headers``.
        self._client = TritonClient(target.url, timeout_s=timeout_s, headers=headers)
        # Where a model's config and trace rate come from (Triton's API unless given).
        self.config_of = config_of or self._cached_config
        self.ratio_of = ratio_of or self._ratio
        # Always-on sampling (0: off): 1 request in sample_rate, where the version allows.
        self.sampler = Sampler(self._client, sample_rate) if sample_rate else None
        self._lock = threading.Lock()
        # Per model: when (steady ns) a window was first seen open, while it is; the traces
        # still to come in it at the last read of the setting (None: unreadable).
        self._opened_ns: dict[str, int] = {}
        self._left: dict[str, int | None] = {}
        self._closed_ns: dict[str, int] = {}  # the last read that saw no window
        # Per model: (from, to) steady-clock ns of each window that ended unfinished.
        self.cut: dict[str, list[tuple[int, int]]] = {}

    # -- reading --------------------------------------------------------------------------

    def update(self, now_ns: int | None = None) -> None:
        """Read what Triton has written since the last call (thread-safe)."""
        with self._lock:
            if self.sampler is not None:
                self.sampler.ensure()
            new = self.follower.poll()
            models = {r.model for r in new}
            now = time.monotonic_ns() if now_ns is None else now_ns
            for model in models | set(self.sample_ratio) | set(self._opened_ns):
                found = self.ratio_of(model)
                if found is not None:
                    self.sample_ratio[model], self.trace_rate[model] = found
                first = min((r.queue_start_ns for r in new if r.model == model), default=now)
                self._follow_window(model, found, now, first)
            for r in new:
                counts = self.counts.setdefault((r.model, r.version), _ModelCounts())
                counts.observe(r.queue_wait_ns / 1e9)
                self.recent.append(r)
                self.newest_start_ns = max(self.newest_start_ns, r.compute_start_ns)
                if self.trace_rate.get(r.model) == 1:
                    self.open.setdefault((r.model, r.version, r.compute_start_ns), []).append(r)
            self._settle(time.monotonic_ns() if now_ns is None else now_ns)
            while self.recent and self.recent[0].compute_start_ns < (
                self.newest_start_ns - self.retain_ns
            ):
                self.recent.popleft()

    def _follow_window(
        self, model: str, found: tuple[float, int] | None, now_ns: int, first_ns: int
    ) -> None:
        """Mark a window that ended before its count: Triton unreadable (gone, restarting)
        or its setting off with traces still to come (stopped, or a fresh Triton).

        A window is seen open only at a read; it opened after the last read that saw it
        closed, and no later than the first request of it read now (``first_ns``)."""
        tracing = found is not None and found[0] > 0
        opened = self._opened_ns.get(model)
        if tracing and opened is None:
            self._opened_ns[model] = min(self._closed_ns.get(model, now_ns), first_ns)
        elif not tracing:
            self._closed_ns[model] = now_ns
        if not tracing and opened is not None:
            del self._opened_ns[model]
            # Only what this book read itself tells (a ratio_of given from outside does not).
            if model in self._left and (found is None or self._left[model] != 0):
                self.cut.setdefault(model, []).append((opened, now_ns))
                log.warning("trace window of %s ended unfinished: its traces are incomplete", model)
            if found is not None and self.sampler is not None and self.sampler.on:
                self._resume_sampling(model)

    def _resume_sampling(self, model: str) -> None:
        """A window's setting outlives it (count used up, or level OFF) and Triton prefers
        it to the global one: clear it, so the model is sampled again."""
        try:
            self._client.update_trace_settings(
                {
                    "trace_level": None,
                    "trace_rate": None,
                    "trace_count": None,
                    "log_frequency": None,
                },
                model=model,
            )
        except TritonError as exc:
            log.warning("trace sampling of %s not resumed after its window: %s", model, exc)

    def incomplete_spans(self, model: str, since_ns: int) -> list[tuple[int, int]]:
        """The unfinished windows of ``model`` that reach past ``since_ns``."""
        with self._lock:
            return [(a, b) for a, b in self.cut.get(model, []) if b >= since_ns]

    def _settle(self, now_ns: int) -> None:
        """Count the batches that can no longer grow."""
        done = [
            key
            for key, members in self.open.items()
            if max(r.compute_end_ns for r in members) + SETTLE_NS < self.newest_start_ns
            or max(r.compute_end_ns for r in members) + STALE_NS < now_ns
        ]
        for key in done:
            members = self.open.pop(key)
            (batch,) = group_batches(members)
            config = self.config_of(batch.model)
            if config is None:
                continue
            reasons = self.counts[(batch.model, batch.version)].reasons
            reason = departure_reason(batch, config)
            reasons[reason] = reasons.get(reason, 0) + 1

    def _ratio(self, model: str) -> tuple[float, int] | None:
        """(1/trace_rate now, 0 when tracing is off; trace_rate); None if unknown."""
        try:
            setting = self._client.trace_settings(model)
            level = setting.get("trace_level") or ["OFF"]
            rate = int(setting.get("trace_rate", "0") or 0)
            # A window whose count is used up traces nothing more, whatever the level says.
            left = int(setting.get("trace_count", "-1") or -1)
        except (TritonError, ValueError) as exc:
            log.debug("trace settings of %s: %s", model, exc)
            self._left[model] = None
            return None
        self._left[model] = left
        tracing = rate > 0 and "OFF" not in level and left != 0
        return (1.0 / rate if tracing else 0.0), rate

    def _cached_config(self, model: str) -> ModelConfig | None:
        cached = self._configs.get(model)
        if cached is not None and time.monotonic() - cached[0] < CONFIG_TTL_S:
            return cached[1]
        try:
            config = self._client.model_config(model)
        except TritonError as exc:
            log.warning("trace: no config for %s: %s", model, exc)
            return None
        self._configs[model] = (time.monotonic(), config)
        return config

    # -- reading out ------------------------------------------------------------------------

    def window(self, model: str, seconds: float) -> list[TracedRequest]:
        """The retained requests of ``model`` that started in the last ``seconds`` traced."""
        self.update()
        with self._lock:
            since = self.newest_start_ns - int(seconds * 1e9)
            return [r for r in self.recent if r.model == model and r.compute_start_ns >= since]

    def batches(self, model: str, seconds: float) -> list[Batch]:
        return group_batches(self.window(model, seconds))


def declared() -> tuple[
    HistogramMetricFamily,
    CounterMetricFamily,
    GaugeMetricFamily,
    CounterMetricFamily,
    GaugeMetricFamily,
    CounterMetricFamily,
    CounterMetricFamily,
]:
    """The trace families, empty, in exposition order (exporter.catalog lists them)."""
    labels = ["target", "model", "version"]
    wait = HistogramMetricFamily(
        "triton_batching_queue_wait_seconds",
        f"Queue wait (COMPUTE_START - QUEUE_START) of traced requests ({TRACE}). Sampled: "
        "only traced requests count (see triton_batching_trace_sample_ratio).",
        labels=labels,
    )
    batches = CounterMetricFamily(
        "triton_batching_batches",
        f"Batches rebuilt from {TRACE}, by why they left (max_batch_size, preferred_size, "
        "queue_delay, instance_idle); counted only while the model is traced at rate 1.",
        labels=[*labels, "reason"],
    )
    ratio = GaugeMetricFamily(
        "triton_batching_trace_sample_ratio",
        "Share of the model's requests Triton traces: 1/trace_rate, 0 when tracing is off "
        "(Triton /v2/models/<model>/trace/setting).",
        labels=["target", "model"],
    )
    cut = CounterMetricFamily(
        "triton_batching_trace_windows_cut",
        f"Trace windows that ended before their count ({TRACE}): Triton died or tracing "
        "was stopped; the traces written before are kept, marked incomplete.",
        labels=["target", "model"],
    )
    sampler = GaugeMetricFamily(
        "triton_batching_trace_sampler_on",
        "1 while the exporter keeps Triton sampling traces all the time (--trace-sample), "
        "0 when it cannot: a Triton before 2.57 (its tracing crash) or an error.",
        labels=["target"],
    )
    gaps = CounterMetricFamily(
        "triton_batching_trace_gaps",
        f"Trace files or parts of them lost before the exporter read them ({TRACE}).",
        labels=["target"],
    )
    files = CounterMetricFamily(
        "triton_batching_trace_files_read",
        f"Trace files read and removed ({TRACE}).",
        labels=["target"],
    )
    return wait, batches, ratio, cut, sampler, gaps, files


class TraceCollector(Collector):
    """The trace families of every target that has a :class:`TraceBook`.

    Example::

        # HELP triton_batching_queue_wait_seconds Queue wait of traced requests ...
        # TYPE triton_batching_queue_wait_seconds histogram
        triton_batching_queue_wait_seconds_bucket{target="http://127.0.0.1:8000",model="batch_add_model",version="1",le="0.0005"} 412.0
        # TYPE triton_batching_batches_total counter
        triton_batching_batches_total{target="http://127.0.0.1:8000",model="batch_add_model",version="1",reason="preferred_size"} 388.0
        # TYPE triton_batching_trace_sample_ratio gauge
        triton_batching_trace_sample_ratio{target="http://127.0.0.1:8000",model="batch_add_model"} 1.0
    """  # noqa: E501

    def __init__(self, books: Sequence[TraceBook]) -> None:
        self.books = list(books)

    def describe(self) -> list[Any]:
        return []  # registering must not read files or the network

    def collect(self) -> Iterator[Any]:
        wait, batches, ratio, cut, sampler, gaps, files = declared()
        for book in self.books:
            try:
                book.update()
            except OSError as exc:  # an unreadable folder must not fail the scrape
                log.warning("trace files of %s: %s", book.target.url, exc)
            url = book.target.url
            for (model, version), counts in sorted(book.counts.items()):
                cumulative, running = [], 0
                for bound, n in zip((*BUCKETS_S, float("inf")), counts.buckets, strict=True):
                    running += n
                    cumulative.append((floatToGoString(bound), running))
                wait.add_metric([url, model, version], cumulative, counts.wait_sum_s)
                for reason, n in sorted(counts.reasons.items()):
                    batches.add_metric([url, model, version, reason], n)
            for model, value in sorted(book.sample_ratio.items()):
                ratio.add_metric([url, model], value)
            for model, spans in sorted(book.cut.items()):
                cut.add_metric([url, model], len(spans))
            if book.sampler is not None:
                sampler.add_metric([url], 1.0 if book.sampler.on else 0.0)
            gaps.add_metric([url], book.follower.stats.gaps)
            files.add_metric([url], book.follower.stats.files_read)
        families = (wait, batches, ratio, cut, sampler, gaps, files)
        yield from (f for f in families if f.samples)
