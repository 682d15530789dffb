"""The one window type: what a model did during one window of time, whichever source filled
it: the sampler (:mod:`observe.sampler`: Triton's statistics API and ``/metrics``), the
exporter's counters in Prometheus (:mod:`observe.prometheus`) or a stored load run
(:mod:`observe.storedrun`).

The doctor's checks read its figures; the advisor fits the traffic from its counts and the
service times from its statistics; the autopilot judges a change by two of them. The derived
numbers are computed here, once, and a ratio without a denominator is ``None``, never a
made-up zero. What a source cannot give stays empty (Prometheus has no statistics delta).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from loadgen.results.summary import ServerSummary
from observe.cpu import ServerCpu
from tritonapi.stats import ModelStats

COMPUTE_PHASES = ("compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class Window:
    seconds: float
    source: str  # where the numbers come from, for the report
    requests_ok: float
    requests_failed: float
    inferences: float  # batch elements
    executions: float  # formed batches
    queue_s: float  # summed over successful requests
    compute_s: float  # input + infer + output, summed over successful requests
    executions_by_size: dict[int, float] = field(default_factory=dict)
    pending_max: float | None = None  # None: not read
    gpu_utilization: float | None = None  # mean over the window, 0..1; None: no GPU reported
    gpus: int | None = None  # None: not read
    # The part of the window with traffic; None: all of it. A load run of 10 s in a
    # 5-minute window must not look like a thirtieth of its rate to the overlap check.
    active_seconds: float | None = None
    # Read from Triton's statistics API (None from Prometheus or a stored run): the delta
    # over the window (counts and times per batch size) and the cumulative one at its end.
    delta: ModelStats | None = None
    cumulative: ModelStats | None = None
    # The request count sampled through the window, ``(monotonic s, count)`` stamped at
    # the middle of each read; a read slower than ``observe.sampler.SLOW_READ_S`` is left
    # out and counted in ``slow_reads``.
    samples: Sequence[tuple[float, float]] = ()
    slow_reads: int = 0
    # The requests Triton had received, ``(monotonic s, count)`` at each read of its
    # metrics (``TritonMetrics.received``: its executed count and pending gauge from that
    # one read); empty, with ``pending_note`` saying why, when they were not read through
    # the whole window (part of a window is not fitted).
    received: Sequence[tuple[float, float]] = ()
    pending_note: str = ""
    # The server process's CPU over the window, and its cores, when it runs here.
    cpu: ServerCpu | None = None
    cores: int | None = None
    # The statistics started over inside the window (the model reloaded, or Triton
    # restarted): the delta holds only what came after, including requests queued across.
    reset: bool = False

    @property
    def requests(self) -> float:
        return self.requests_ok + self.requests_failed

    @property
    def arrival_rate(self) -> float:
        """Requests per second that reached the model (answered or rejected) while busy."""
        seconds = self.active_seconds if self.active_seconds else self.seconds
        return self.requests / seconds if seconds > 0 else 0.0

    @property
    def average_batch(self) -> float | None:
        return self.inferences / self.executions if self.executions > 0 else None

    @property
    def queue_per_request_s(self) -> float | None:
        return self.queue_s / self.requests_ok if self.requests_ok > 0 else None

    @property
    def compute_per_request_s(self) -> float | None:
        """The execution time of the batch a request ran in (Triton counts it per request)."""
        return self.compute_s / self.requests_ok if self.requests_ok > 0 else None

    @property
    def in_server(self) -> float | None:
        """Little's law: requests inside Triton at once on average (arrivals x time inside)."""
        q, c = self.queue_per_request_s, self.compute_per_request_s
        return None if q is None or c is None else self.arrival_rate * (q + c)

    @property
    def failure_ratio(self) -> float | None:
        return self.requests_failed / self.requests if self.requests > 0 else None

    @property
    def batched_share(self) -> float | None:
        """Share of inferences that ran in a batch of two or more.

        From the distribution alone: in Prometheus each counter's increase() is
        extrapolated on its own, so mixing it with the inference counter would not add up.
        """
        total = sum(size * n for size, n in self.executions_by_size.items())
        if total <= 0:
            return None
        return sum(size * n for size, n in self.executions_by_size.items() if size > 1) / total

    def hit_ratio(self, preferred: tuple[int, ...]) -> float | None:
        """Executions at a preferred size / all executions; None without either."""
        total = sum(self.executions_by_size.values())
        if not preferred or total <= 0:
            return None
        return sum(n for size, n in self.executions_by_size.items() if size in preferred) / total

    def distribution(self) -> dict[int, float]:
        """Share of executions at each batch size."""
        total = sum(self.executions_by_size.values())
        if total <= 0:
            return {}
        return {size: n / total for size, n in sorted(self.executions_by_size.items()) if n > 0}


def from_statistics(
    before: ModelStats,
    after: ModelStats,
    seconds: float,
    pending_max: float | None = None,
    gpu_utilization: float | None = None,
    gpus: int | None = None,
    active_seconds: float | None = None,
    samples: Sequence[tuple[float, float]] = (),
    slow_reads: int = 0,
    received: Sequence[tuple[float, float]] = (),
    pending_note: str = "",
    cpu: ServerCpu | None = None,
    cores: int | None = None,
) -> Window:
    """The window between two reads of the statistics API (a restart counts from zero),
    with what was read between them."""
    delta = after.minus(before)
    return Window(
        seconds=seconds,
        source=f"Triton's statistics API over {seconds:.1f} s"
        + (f", requests during {active_seconds:.1f} s of it" if active_seconds is not None else ""),
        requests_ok=delta.phase("success").count,
        requests_failed=delta.phase("fail").count,
        inferences=delta.inference_count,
        executions=delta.execution_count,
        queue_s=delta.phase("queue").seconds,
        compute_s=math.fsum(delta.phase(p).seconds for p in COMPUTE_PHASES),
        executions_by_size={s: float(n) for s, n in delta.executions_by_size().items()},
        pending_max=pending_max,
        gpu_utilization=gpu_utilization,
        gpus=gpus,
        active_seconds=active_seconds,
        delta=delta,
        cumulative=after,
        samples=samples,
        slow_reads=slow_reads,
        received=received,
        pending_note=pending_note,
        cpu=cpu,
        cores=cores,
        reset=after.is_reset_since(before),
    )


def from_summary(server: ServerSummary, seconds: float, source: str) -> Window:
    """The window of a stored load run: the statistics delta the run kept."""
    return Window(
        seconds=seconds,
        source=source,
        requests_ok=server.requests_success,
        requests_failed=server.requests_failure,
        inferences=server.inferences,
        executions=server.executions,
        queue_s=server.queue_s_total,
        compute_s=server.compute_s_total,
        executions_by_size={s: float(n) for s, n in server.executions_by_batch_size.items()},
    )


def summed(windows: list[Window], source: str) -> Window:
    """Several stored runs' windows as one: counts, seconds and times added (the runs are
    of one traffic: ``advisor.storedrun.check_poolable``). Gaps between the runs are not
    part of it, so the arrival rate is the runs' own."""
    sizes: dict[int, float] = {}
    for w in windows:
        for size, n in w.executions_by_size.items():
            sizes[size] = sizes.get(size, 0.0) + n
    return Window(
        seconds=sum(w.seconds for w in windows),
        source=source,
        requests_ok=sum(w.requests_ok for w in windows),
        requests_failed=sum(w.requests_failed for w in windows),
        inferences=sum(w.inferences for w in windows),
        executions=sum(w.executions for w in windows),
        queue_s=sum(w.queue_s for w in windows),
        compute_s=sum(w.compute_s for w in windows),
        executions_by_size=sizes,
    )
