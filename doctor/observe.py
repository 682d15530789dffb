"""Reads a live server for the doctor: the config, a window of traffic, the trace settings.

Two sources for the window. Without Prometheus the doctor reads Triton's statistics
API at the start and the end of a short window, and Triton's ``/metrics`` every
``poll_s`` in between (pending requests, GPU utilisation). With Prometheus it reads the
exporter's counters over a longer window (``increase()`` of each, so a Triton restart
inside the window is a counter reset, not a negative number).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from advisor import inputs
from advisor.costs import ServerCpu
from advisor.inputs import ServerWindow
from doctor.checks import Finding, Prescription, ShapeMix, check
from doctor.window import Window, from_statistics
from promapi import PromClient, increase_with_new, promql_duration
from tritonapi import (
    ModelConfig,
    ModelStats,
    TritonClient,
    TritonError,
    metrics_text,
    newest_version,
)
from tritonapi.metrics import parse_metrics
from tritonapi.stats import parse_statistics
from tritonapi.traces import (
    REASON_TEXT,
    REASONS,
    ExporterUnavailable,
    group_batches,
    percentile,
    read_exporter,
    with_reasons,
)

TRACES_OFF = "traces off"


@dataclass
class Diagnosis:
    model: str
    config: ModelConfig
    window: Window | None
    traces: str
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)
    # The one search's answer for this model and window (doctor.prescribe), which the
    # batching findings' fix lines come from; None when the search did not run.
    prescription: Prescription | None = None


def diagnose(
    client: TritonClient,
    model: str,
    window: Window | None,
    notes: Iterable[str] = (),
    exporter_url: str = "",
    mix: ShapeMix | None = None,
) -> Diagnosis:
    """Run every check on one model (its config as Triton loaded it) and its window.

    With ``exporter_url``, the batch traces the exporter holds for the model (if any) are
    summarised beside the trace setting. ``mix``: the shapes a stored load run of the model
    sent, for the shape-fragmentation check.
    """
    config = client.model_config(model)
    traces = trace_state(client, model)
    if exporter_url:
        traces = traces_read(exporter_url, config) or traces
    return Diagnosis(model, config, window, traces, check(config, window, mix), list(notes))


def traces_read(exporter_url: str, config: ModelConfig, seconds: float = 120.0) -> str:
    """What the exporter's batch traces of the last ``seconds`` say; "" when it has none."""
    try:
        found = read_exporter(exporter_url, config.name, seconds)
    except ExporterUnavailable:
        return ""
    if not found.requests:
        return ""
    waits = [r.queue_wait_ns for r in found.requests]
    p50, p99 = (percentile(waits, q) for q in (0.5, 0.99))
    text = (
        f"{len(waits):,} traced requests in the exporter's last {seconds:g} s: queue wait "
        f"p50 {(p50 or 0) / 1e6:.3f} ms, p99 {(p99 or 0) / 1e6:.3f} ms (exact)"
    )
    if found.trace_rate != 1:
        return text + "; sampled, so batch sizes and why batches left are unknown"
    batches = with_reasons(group_batches(found.requests), {config.name: config})
    reasons = Counter(b.reason for b in batches)
    shares = ", ".join(
        f"{REASON_TEXT[r]} {reasons[r] / len(batches):.0%}" for r in REASONS if reasons[r]
    )
    return f"{text}; {len(batches):,} batches: {shares}"


def trace_state(client: TritonClient, model: str) -> str:
    """Whether Triton writes per-request traces for this model."""
    try:
        settings = client.trace_settings(model)
    except TritonError:
        return f"{TRACES_OFF} (trace settings not readable)"
    level = settings.get("trace_level") or ["OFF"]
    if level == ["OFF"] or level == "OFF":
        return TRACES_OFF
    levels = ", ".join(level) if isinstance(level, list) else str(level)
    return f"traces on ({levels}); none read yet"


# ---- the statistics API over a short window ------------------------------------------


class StatisticsSampler:
    """Reads the statistics of ``models`` at ``start()`` and ``finish()``; ``poll()`` between.

    Each poll reads the statistics too, so that the arrival rate is that of the time the
    model was busy (to one poll interval), not of the whole window. ``metrics_url``
    (Triton's ``/metrics``) adds pending requests and GPU utilisation; when it does not
    answer those stay unknown and ``notes`` says why.
    """

    def __init__(
        self,
        client: TritonClient,
        models: list[str],
        metrics_url: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.models = models
        self.metrics_url = metrics_url
        self.clock = clock
        self.notes: list[str] = []
        self._before: dict[str, ModelStats] = {}
        self._t0 = 0.0
        self._pending: dict[str, float] = {}
        self._gpu_samples: list[float] = []
        self._gpus: int | None = None
        self._metrics_ok = metrics_url is not None
        self._last: dict[str, tuple[float, int]] = {}  # model -> (when, requests so far)
        self._busy: dict[str, float] = {}
        self._reads = 0
        # Each model's request count at every read, and its statistics at the ends: what
        # the advisor fits the same window's traffic and service times from.
        self.counts: dict[str, list[tuple[float, float]]] = {}
        self._after: dict[str, ModelStats] = {}
        self._seconds = 0.0
        self._slow: dict[str, int] = {}  # model -> counts left out (slow reads)
        # Each model's requests received (executed + pending, ``TritonMetrics.received``)
        # at each read of the metrics after a count, as ``inputs.watch`` reads them: the
        # advisor fits the traffic from them. The version is the newest read's.
        self.received: dict[str, list[tuple[float, float]]] = {}
        self._versions: dict[str, str] = {}
        self._unreceived: set[str] = set()  # models a read of the metrics had no count for
        self._metrics_problem = ""

    def _stats(self) -> dict[str, ModelStats]:
        all_stats = parse_statistics(self.client.statistics_json())
        newest: dict[str, ModelStats] = {}
        for model in self.models:
            versions = [s for s in all_stats if s.name == model]
            if versions:
                top = newest_version(s.version for s in versions)
                newest[model] = next(s for s in versions if s.version == top)
        return newest

    def start(self) -> None:
        asked = self.clock()
        self._before = self._stats()
        self._t0 = self.clock()
        self._track(self._before, asked)
        self._poll_metrics()

    def poll(self) -> None:
        """Between start and finish: which models are busy, pending requests, GPUs."""
        try:
            asked = self.clock()
            self._track(self._stats(), asked)
        except (TritonError, ValueError):
            pass  # finish() reads the statistics again, and says so if it cannot
        self._poll_metrics()

    def _track(self, stats: dict[str, ModelStats], asked: float) -> None:
        """Add the time since the previous read to a model's busy time if requests came,
        and each model's request count to its samples, as the advisor samples it (a slow
        read's count left out: ``inputs.count_sample``)."""
        now = self.clock()
        for model, s in stats.items():
            sample = inputs.count_sample(asked, now, float(s.inference_count))
            if sample is None:
                self._slow[model] = self._slow.get(model, 0) + 1
            else:
                self.counts.setdefault(model, []).append(sample)
            self._versions[model] = s.version
            total = s.phase("success").count + s.phase("fail").count
            last = self._last.get(model)
            if last is not None and total > last[1]:
                self._busy[model] = self._busy.get(model, 0.0) + now - last[0]
            self._last[model] = (now, total)
        self._reads += 1

    def _poll_metrics(self) -> None:
        if not self._metrics_ok or self.metrics_url is None:
            return
        try:
            asked = self.clock()
            text = self._metrics_text(self.metrics_url)
            answered = self.clock()
            metrics = parse_metrics(text)
        except (TritonError, ValueError) as exc:
            self._metrics_ok = False
            self._metrics_problem = f"Triton's metrics at {self.metrics_url} not read ({exc})"
            self.notes.append(f"{self._metrics_problem}: pending requests and GPU unknown")
            return
        for (model, _version), value in metrics.pending.items():
            if model in self.models:
                self._pending[model] = max(self._pending.get(model, 0.0), value)
        for model, version in self._versions.items():
            received = metrics.received(model, version)
            if received is None:
                self._unreceived.add(model)
                continue
            sample = inputs.count_sample(asked, answered, received)
            if sample is None:
                self._slow[model] = self._slow.get(model, 0) + 1
            else:
                self.received.setdefault(model, []).append(sample)
        self._gpus = len(metrics.gpus)
        readings = [g.utilization for g in metrics.gpus if g.utilization is not None]
        if readings:
            self._gpu_samples.append(math.fsum(readings) / len(readings))

    def _metrics_text(self, url: str) -> str:
        return metrics_text(url, timeout_s=2.0, session=self.client.session)

    def finish(self) -> dict[str, Window]:
        asked = self.clock()
        after = self._stats()
        self._track(after, asked)
        self._poll_metrics()
        seconds = max(self.clock() - self._t0, 1e-3)
        self._after, self._seconds = after, seconds
        # Busy time needs reads in between; with only the two ends it is the whole window.
        polled = self._reads > 2
        gpu = math.fsum(self._gpu_samples) / len(self._gpu_samples) if self._gpu_samples else None
        windows = {}
        for model, stats in after.items():
            before = self._before.get(model)
            windows[model] = from_statistics(
                before if before is not None else _empty(stats),
                stats,
                seconds,
                pending_max=self._pending.get(model) if self._metrics_ok else None,
                gpu_utilization=gpu,
                gpus=self._gpus if self._metrics_ok else None,
                active_seconds=min(seconds, self._busy.get(model, 0.0)) if polled else None,
            )
        return windows

    def server_window(
        self, model: str, cpu: ServerCpu | None = None, cores: int | None = None
    ) -> ServerWindow | None:
        """After :meth:`finish`: the same window as the advisor's inputs (``cpu``: the
        server's CPU over it, measured by the caller); None for a model not read."""
        after = self._after.get(model)
        if after is None:
            return None
        before = self._before.get(model) or _empty(after)
        counts = self.counts.get(model, [])
        received = self.received.get(model, [])
        problem = self._unread(model)
        return ServerWindow(
            after.minus(before),
            counts,
            after,
            self._seconds,
            cpu,
            cores,
            slow_reads=self._slow.get(model, 0),
            received=[] if problem else list(received),
            pending_note=problem,
        )

    def _unread(self, model: str) -> str:
        """Why ``model`` has no requests received to fit ("" when it has)."""
        if self.metrics_url is None:
            return "Triton's metrics not read: give --metrics-url"
        if self._metrics_problem:
            return self._metrics_problem
        if model in self._unreceived:
            return inputs.no_received_count(self.metrics_url, model, self._versions[model])
        if not self.received.get(model):
            return inputs.all_slow(self.metrics_url)
        return ""


def _empty(stats: ModelStats) -> ModelStats:
    return ModelStats(stats.name, stats.version, 0, 0)


def sample_statistics(
    client: TritonClient,
    models: list[str],
    seconds: float,
    metrics_url: str | None = None,
    poll_s: float | None = None,
) -> tuple[dict[str, Window], list[str], dict[str, ServerWindow]]:
    """Watch ``models`` for ``seconds``: their windows, notes on what was not read, and the
    same windows as the advisor's inputs (with the server's CPU when it runs here). Reads
    every ``poll_s`` (default: the advisor's step, so both fit the same traffic)."""
    step = inputs.sample_step(seconds) if poll_s is None else poll_s
    sampler = StatisticsSampler(client, models, metrics_url)
    cpu_meter = inputs.meter(client.url)
    if cpu_meter is not None:
        cpu_meter.start()
    sampler.start()
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(step, left))
        sampler.poll()
    windows = sampler.finish()
    cpu = cpu_meter.stop() if cpu_meter is not None else None
    cores = cpu_meter.cores if cpu_meter is not None else None
    server = {m: w for m in models if (w := sampler.server_window(m, cpu, cores)) is not None}
    return windows, sampler.notes, server


# ---- the exporter's counters in Prometheus -----------------------------------------------


def _label(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


MAX_STEPS = 2000  # subquery steps when measuring the active part of a window


def _active_seconds(prom: PromClient, sel: str, seconds: float) -> float | None:
    """Seconds of the window in which requests arrived, to about one scrape interval.

    The scrape interval comes from the data: the samples of the success counter over its
    life in the window. Each step of a subquery then asks whether the counters grew over
    the last two to three scrapes; the steps that say yes are the busy time.
    """
    w = promql_duration(seconds)
    counter = f"triton_batching_requests_success_total{{{sel}}}"
    fine = max(1, math.ceil(seconds / MAX_STEPS))
    samples = prom.scalar(f"max(count_over_time({counter}[{w}]))")
    first = prom.scalar(f"time() - min_over_time(timestamp(max({counter}))[{w}:{fine}s])")
    if not samples or samples < 3 or not first:
        return None
    interval = first / (samples - 1)
    step = max(fine, math.ceil(interval))
    look = math.ceil(2.5 * interval)  # holds two samples wherever it falls
    grew = (
        f"sum(increase({counter}[{look}s]))"
        f" + sum(increase(triton_batching_requests_failure_total{{{sel}}}[{look}s])) > 0"
    )
    steps = prom.scalar(f"count_over_time(({grew})[{w}:{step}s])")
    return None if steps is None else min(seconds, steps * step)


def prometheus_window(
    prom: PromClient, model: str, seconds: float, target: str | None = None
) -> Window | None:
    """The model's last ``seconds`` from the exporter's counters; None if Prometheus has none."""
    sel = f"model={_label(model)}" + (f", target={_label(target)}" if target else "")
    w = promql_duration(seconds)

    def total(metric: str) -> float | None:
        return prom.scalar(f"sum(increase({metric}{{{sel}}}[{w}]))")

    if prom.scalar(f"count(triton_batching_executions_total{{{sel}}})") is None:
        return None
    executions = increase_with_new(f"triton_batching_batch_executions_total{{{sel}}}", w)
    by_size = prom.query(f"sum by (batch_size) ({executions})")
    sizes = (
        {int(row["batch_size"]): float(row["value"]) for _, row in by_size.iterrows()}
        if "batch_size" in by_size
        else {}
    )
    compute = [
        total(f"triton_batching_compute_{p}_seconds_total") for p in ("input", "infer", "output")
    ]
    gpu_sel = f"{{target={_label(target)}}}" if target else ""
    gpus = prom.scalar(f"count(triton_batching_gpu_utilization_ratio{gpu_sel})")
    active = _active_seconds(prom, sel, seconds)
    busy = f", traffic during {active:,.0f} s of it" if active is not None else ""
    return Window(
        seconds=seconds,
        source=f"Prometheus at {prom.base_url}, the exporter's counters over the last {w}{busy}",
        active_seconds=active,
        requests_ok=total("triton_batching_requests_success_total") or 0.0,
        requests_failed=total("triton_batching_requests_failure_total") or 0.0,
        inferences=total("triton_batching_inferences_total") or 0.0,
        executions=total("triton_batching_executions_total") or 0.0,
        queue_s=total("triton_batching_queue_seconds_total") or 0.0,
        compute_s=math.fsum(c or 0.0 for c in compute),
        executions_by_size=sizes,
        pending_max=prom.scalar(
            f"max(max_over_time(triton_batching_pending_requests{{{sel}}}[{w}]))"
        ),
        gpu_utilization=prom.scalar(
            f"avg(avg_over_time(triton_batching_gpu_utilization_ratio{gpu_sel}[{w}]))"
        ),
        gpus=int(gpus) if gpus is not None else 0,
    )
