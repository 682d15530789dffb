"""One record per request, the same shape for every outcome (Locust's request event).

The senders call :meth:`Recorder.record` from a ``finally`` block, exactly once per request
they sent, so ``sent == ok + failed + timed_out`` holds by construction. Records are kept in
typed arrays (a million requests take about 20 MB), latencies also go into log-bucket
histograms: one for the run, one per second for the timeline.
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass
from typing import Any

from loadgen.histogram import Histogram
from loadgen.summary import ClientSummary, Latency

OK, FAILED, TIMED_OUT = 0, 1, 2
OUTCOMES = ("ok", "failed", "timed_out")
QUANTILES = (0.5, 0.9, 0.95, 0.99)


@dataclass
class Second:
    """What completed during one second of the run (by completion time)."""

    sent: int = 0
    ok: int = 0
    failed: int = 0
    timed_out: int = 0
    latency: Histogram | None = None


class Recorder:
    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.wall_t0 = time.time()
        # Seconds since t0 (wall clock: wall_t0, stored as the run's started_at), when the
        # request was due to go out.
        self.start = array("d")
        self.latency = array("d")  # seconds until its outcome was known
        self.outcome = array("b")
        self.error = array("i")  # index into self.errors, -1 for none
        self.index = array("q")  # the request's index in the run (its inputs, its id)
        self.errors: list[str] = []
        self._error_index: dict[str, int] = {}
        self.counts = [0, 0, 0]
        self.sent = 0
        self.hist = Histogram()  # latency of successful requests
        self.seconds: dict[int, Second] = {}
        self.first_send: float | None = None
        self.last_done = 0.0

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def mark_sent(self, at: float) -> None:
        self.sent += 1
        if self.first_send is None:
            self.first_send = at
        sec = self.seconds.get(int(at))
        if sec is None:
            sec = self.seconds[int(at)] = Second()
        sec.sent += 1

    def record(self, start: float, outcome: int, error: str | None = None, index: int = -1) -> None:
        done = self.now()
        self.index.append(index)
        latency = done - start
        self.start.append(start)
        self.latency.append(latency)
        self.outcome.append(outcome)
        if error is None:
            self.error.append(-1)
        else:
            kind = self._error_index.get(error)
            if kind is None:
                kind = self._error_index[error] = len(self.errors)
                self.errors.append(error)
            self.error.append(kind)
        self.counts[outcome] += 1
        self.last_done = done
        sec = self.seconds.get(int(done))
        if sec is None:
            sec = self.seconds[int(done)] = Second()
        if outcome == OK:
            sec.ok += 1
            self.hist.add(latency)
            if sec.latency is None:
                sec.latency = Histogram()
            sec.latency.add(latency)
        elif outcome == FAILED:
            sec.failed += 1
        else:
            sec.timed_out += 1

    @property
    def done(self) -> int:
        return len(self.outcome)

    @property
    def in_flight(self) -> int:
        return self.sent - self.done

    def elapsed(self) -> float:
        """From the first request out to the last outcome known."""
        if self.first_send is None:
            return 0.0
        return max(self.last_done - self.first_send, 0.0)

    def errors_by_kind(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for index in self.error:
            if index >= 0:
                kind = self.errors[index]
                counts[kind] = counts.get(kind, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))

    def summary(self) -> ClientSummary:
        ok, failed, timed_out = self.counts
        elapsed = self.elapsed()
        p50, p90, p95, p99 = (self.hist.quantile(q) for q in QUANTILES)
        return ClientSummary(
            sent=self.sent,
            ok=ok,
            failed=failed,
            timed_out=timed_out,
            duration_s=elapsed,
            throughput_per_s=ok / elapsed if elapsed > 0 else None,
            latency_s=Latency(p50, p90, p95, p99, self.hist.quantile(1.0), self.hist.mean),
            errors=self.errors_by_kind(),
        )

    def timeline(self) -> list[dict[str, Any]]:
        rows = []
        for second in sorted(self.seconds):
            sec = self.seconds[second]
            hist = sec.latency or Histogram()
            rows.append(
                {
                    "second": second,
                    "sent": sec.sent,
                    "ok": sec.ok,
                    "failed": sec.failed,
                    "timed_out": sec.timed_out,
                    "p50_s": hist.quantile(0.5),
                    "p99_s": hist.quantile(0.99),
                    "mean_s": hist.mean,
                }
            )
        return rows

    def records(self) -> list[tuple[int, float, float, str, str | None]]:
        """(seq, start_s, latency_s, outcome, error) per request, in completion order."""
        errors = self.errors
        return [
            (i, s, lat, OUTCOMES[o], errors[e] if e >= 0 else None)
            for i, (s, lat, o, e) in enumerate(
                zip(self.start, self.latency, self.outcome, self.error, strict=True)
            )
        ]
