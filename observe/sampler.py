"""The one loop over a model's statistics, shared by the advisor, the doctor and the autopilot:
one clock reads one server, and one window type comes out (:class:`observe.window.Window`).

:class:`Sampler` reads Triton's statistics API at ``start()``, each ``poll()`` and
``finish()``; after each read, Triton's ``/metrics`` (when given): the requests received
(executed count + pending gauge from that one read), the pending gauge's maximum and the
GPUs. Each count is stamped at the middle of its read, and a read slower than
:data:`SLOW_READ_S` is left out of the counts (its time is not known). A failed read of the
metrics stops their reads (each could wait its timeout) and drops the received count: part
of a window is not fitted. :func:`watch` runs the loop for a window, with the local server's
CPU over it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from observe.cpu import CpuMeter, meter
from observe.window import Window, from_statistics
from tritonapi.client import (
    TritonBadResponse,
    TritonClient,
    TritonError,
    metrics_text,
    newest_version,
)
from tritonapi.metrics import parse_metrics
from tritonapi.stats import ModelStats, parse_statistics

# A request count whose read took longer than this is left out of the traffic's fit: while
# Triton loads or unloads a model a statistics read takes over a second (a few ms
# otherwise), and one such count, stamped at the middle of its read, makes Poisson traffic
# read as a burst (tests/advisor/test_fit.py).
SLOW_READ_S = 0.025


def count_sample(asked: float, answered: float, count: float) -> tuple[float, float] | None:
    """A read of the request count as a ``(time, count)`` sample stamped at the middle of
    the read; None when the read took over ``SLOW_READ_S`` (its time is not known)."""
    if answered - asked > SLOW_READ_S:
        return None
    return (asked + answered) / 2, count


def slow_reads_note(slow: int) -> str:
    """What the window's fit left out ("" when nothing)."""
    if not slow:
        return ""
    return (
        f"{slow} read(s) of Triton's request count took over {SLOW_READ_S * 1e3:.0f} ms and "
        "were left out of the traffic's fit (Triton busy, e.g. loading or unloading a model)"
    )


def sample_step(window_s: float) -> float:
    """Seconds between reads of the request count: 20 bins per window, enough to estimate
    burstiness, at most 1 s each, so that one window fits to one traffic whoever watched it."""
    return min(window_s / 20, 1.0)


def all_slow(metrics_url: str) -> str:
    """Why a window has no received count when every read of the metrics was slow."""
    return (
        f"every read of Triton's metrics at {metrics_url} took over "
        f"{SLOW_READ_S * 1e3:.0f} ms (its time not known)"
    )


def no_received_count(metrics_url: str, model: str, version: str) -> str:
    """Why a window has no received count when the metrics lack the model's series."""
    return (
        f"Triton's metrics at {metrics_url} have no pending gauge or inference count for "
        f"{model!r} version {version}"
    )


class Sampler:
    """Reads the statistics of ``models`` at ``start()`` and ``finish()``, and ``poll()``
    between; ``metrics_url`` (Triton's ``/metrics``) adds the requests received, pending
    requests and GPU utilisation (when it does not answer, those stay unknown and ``notes``
    says why). ``cpu``: the local server's meter, read from start to finish.

    ``strict``: a failed read of the statistics in ``poll()`` raises (the advisor's and the
    autopilot's window: a server that stops answering ends it), rather than being skipped
    (the doctor's: ``finish()`` reads again, and raises if it cannot)."""

    def __init__(
        self,
        client: TritonClient,
        models: list[str],
        metrics_url: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        strict: bool = False,
        cpu: CpuMeter | None = None,
    ) -> None:
        self.client = client
        self.models = models
        self.metrics_url = metrics_url
        self.clock = clock
        self.strict = strict
        self.cpu = cpu
        self.notes: list[str] = []
        # Each model's statistics at the newest read (what the autopilot's drain compares).
        self.latest: dict[str, ModelStats] = {}
        self._before: dict[str, ModelStats] = {}
        self._t0 = 0.0
        self._pending: dict[str, float] = {}
        self._gpu_samples: list[float] = []
        self._gpus: int | None = None
        self._metrics_ok = metrics_url is not None
        self._metrics_problem = ""
        self._last: dict[str, tuple[float, int]] = {}  # model -> (when, requests so far)
        self._busy: dict[str, float] = {}
        self._reads = 0
        self._counts: dict[str, list[tuple[float, float]]] = {}
        self._received: dict[str, list[tuple[float, float]]] = {}
        self._slow: dict[str, int] = {}  # model -> counts left out (slow reads)
        self._unreceived: set[str] = set()  # models a read of the metrics had no count for

    def _stats(self) -> dict[str, ModelStats]:
        """The newest version's statistics of each model (one model: its own endpoint)."""
        named = self.models[0] if len(self.models) == 1 else ""
        try:
            all_stats = parse_statistics(self.client.statistics_json(named))
        except ValueError as exc:
            raise TritonBadResponse(self.client.url, "GET statistics", str(exc)) from None
        newest: dict[str, ModelStats] = {}
        for model in self.models:
            versions = [s for s in all_stats if s.name == model]
            if versions:
                top = newest_version(s.version for s in versions)
                newest[model] = next(s for s in versions if s.version == top)
        return newest

    def _read(self) -> dict[str, ModelStats]:
        asked = self.clock()
        stats = self._stats()
        self._track(stats, asked)
        self._poll_metrics()
        return stats

    def start(self) -> None:
        if self.cpu is not None:
            self.cpu.start()
        self._before = self._read()
        self._t0 = self.clock()

    def poll(self) -> None:
        """Between start and finish: the counts, which models are busy, pending requests,
        GPUs."""
        try:
            self._read()
        except (TritonError, ValueError):
            if self.strict:
                raise

    def _track(self, stats: dict[str, ModelStats], asked: float) -> None:
        """Add the time since the previous read to a model's busy time if requests came,
        and each model's request count to its samples (a slow read's left out)."""
        now = self.clock()
        for model, s in stats.items():
            sample = count_sample(asked, now, float(s.inference_count))
            if sample is None:
                self._slow[model] = self._slow.get(model, 0) + 1
            else:
                self._counts.setdefault(model, []).append(sample)
            total = s.phase("success").count + s.phase("fail").count
            last = self._last.get(model)
            if last is not None and total > last[1]:
                self._busy[model] = self._busy.get(model, 0.0) + now - last[0]
            self._last[model] = (now, total)
        self.latest.update(stats)
        self._reads += 1

    def _poll_metrics(self) -> None:
        if not self._metrics_ok or self.metrics_url is None:
            return
        try:
            asked = self.clock()
            text = metrics_text(self.metrics_url, timeout_s=2.0, session=self.client.session)
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
        for model, stats in self.latest.items():
            received = metrics.received(model, stats.version)
            if received is None:
                self._unreceived.add(model)
                continue
            sample = count_sample(asked, answered, received)
            if sample is None:
                self._slow[model] = self._slow.get(model, 0) + 1
            else:
                self._received.setdefault(model, []).append(sample)
        self._gpus = len(metrics.gpus)
        readings = [g.utilization for g in metrics.gpus if g.utilization is not None]
        if readings:
            self._gpu_samples.append(math.fsum(readings) / len(readings))

    def finish(self) -> dict[str, Window]:
        """The window of each model read at the end."""
        after = self._read()
        seconds = max(self.clock() - self._t0, 1e-3)
        cpu = self.cpu.stop() if self.cpu is not None else None
        cores = self.cpu.cores if self.cpu is not None else None
        # Busy time needs reads in between; with only the two ends it is the whole window.
        polled = self._reads > 2
        gpu = math.fsum(self._gpu_samples) / len(self._gpu_samples) if self._gpu_samples else None
        windows = {}
        for model, stats in after.items():
            before = self._before.get(model)
            problem = self._unread(model)
            windows[model] = from_statistics(
                before if before is not None else ModelStats(stats.name, stats.version, 0, 0),
                stats,
                seconds,
                pending_max=self._pending.get(model) if self._metrics_ok else None,
                gpu_utilization=gpu,
                gpus=self._gpus if self._metrics_ok else None,
                active_seconds=min(seconds, self._busy.get(model, 0.0)) if polled else None,
                samples=list(self._counts.get(model, [])),
                slow_reads=self._slow.get(model, 0),
                received=[] if problem else list(self._received.get(model, [])),
                pending_note=problem,
                cpu=cpu,
                cores=cores,
            )
        return windows

    def _unread(self, model: str) -> str:
        """Why ``model`` has no requests received to fit ("" when it has)."""
        if self.metrics_url is None:
            return "Triton's metrics not read: give --metrics-url"
        if self._metrics_problem:
            return self._metrics_problem
        if model in self._unreceived:
            return no_received_count(self.metrics_url, model, self.latest[model].version)
        if not self._received.get(model):
            return all_slow(self.metrics_url)
        return ""


@dataclass(frozen=True)
class Watched:
    """What :func:`watch` saw: each model's window, and notes on what was not read."""

    windows: dict[str, Window]
    notes: list[str]


def watch(
    client: TritonClient,
    models: list[str],
    seconds: float,
    metrics_url: str | None = None,
    step_s: float | None = None,
    strict: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> Watched:
    """Watch ``models`` for ``seconds``, reading every ``step_s`` (default
    :func:`sample_step`), with the server's CPU when it runs here. TritonError when the
    statistics cannot be read at the ends (or between them, ``strict``)."""
    step = sample_step(seconds) if step_s is None else step_s
    sampler = Sampler(client, models, metrics_url, strict=strict, cpu=meter(client.url))
    sampler.start()
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sleep(min(step, left))
        if deadline - time.monotonic() > 0:
            sampler.poll()
    return Watched(sampler.finish(), sampler.notes)
