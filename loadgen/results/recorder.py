"""One record per request, the same shape for every outcome (Locust's request event), in
memory that does not grow with the run.

The senders call :meth:`Recorder.record` from a ``finally`` block, exactly once per request
they sent, so ``sent == ok + failed + timed_out`` holds by construction. What a run's summary
needs is aggregated as the run goes: the counts, the errors by kind, and latency in
mergeable log-bucket histograms, one per second of the timeline; a second's histogram is
folded into the run's when the second is over, and only its p50/p99/mean stay (the timeline
keeps 56 bytes a second in typed arrays).

The per-request records wait in typed arrays (about 20 bytes each) until :meth:`drain` hands
them on: a run with a store drains them every second (``loadgen.engine.writer.RunWriter``), so they
never pile up. A run without one keeps the first ``keep`` records and counts the rest as
``dropped``.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadgen.clients.slots import OK
from loadgen.results.histogram import Histogram
from loadgen.results.summary import ClientSummary, Latency
from runs.schema import TIMELINE_COLUMNS

OUTCOMES = ("ok", "failed", "timed_out")
QUANTILES = (0.5, 0.9, 0.95, 0.99)
# Distinct error texts kept as their own kind; past this, one kind for the rest (an error
# text that names something per request must not grow memory with the run).
MAX_ERROR_KINDS = 1000
OTHER_ERRORS = f"other errors (past {MAX_ERROR_KINDS:,} distinct kinds)"
KEEP_RECORDS = 1_000_000  # records a run without a store keeps in memory (about 20 MB)
# An open-loop request sent later than this after its due time counts as a late send, as
# perf_analyzer counts its "delayed" requests. The pacer (engine.pacing) sends within
# microseconds; a millisecond late is a backlog or a client out of breath, and the run's
# send-lateness distribution (Recorder.lateness) shows everything under it.
LATE_THRESHOLD_S = 0.001


@dataclass
class Records:
    """Per-request records in completion order, from ``first_seq`` on."""

    first_seq: int = 0
    start: array = field(default_factory=lambda: array("d"))  # when due, seconds since t0
    latency: array = field(default_factory=lambda: array("d"))  # until its outcome was known
    outcome: array = field(default_factory=lambda: array("b"))
    error: array = field(default_factory=lambda: array("i"))  # index into the kinds, -1: none

    def __len__(self) -> int:
        return len(self.outcome)

    def rows(self, errors: list[str]) -> list[tuple[int, float, float, str, str | None]]:
        """(seq, start_s, latency_s, outcome, error) per record."""
        return [
            (self.first_seq + i, s, lat, OUTCOMES[o], errors[e] if e >= 0 else None)
            for i, (s, lat, o, e) in enumerate(
                zip(self.start, self.latency, self.outcome, self.error, strict=True)
            )
        ]


class Timeline:
    """What completed during each second of the run (sent: by when it was due).

    Counts live in typed arrays indexed by the second; a second's latency histogram only
    while the second can still change (its p50/p99/mean are kept once it is over).
    ``dirty`` names the seconds changed since :meth:`take_changed` last ran.
    """

    def __init__(self) -> None:
        self.counts = array("q")  # sent, ok, failed, timed_out per second
        self.stats = array("d")  # p50, p99, mean per second (nan: none yet)
        self.open: dict[int, Histogram] = {}
        self.dirty: set[int] = set()

    def _at(self, second: int) -> int:
        second = max(second, 0)
        missing = second + 1 - len(self.counts) // 4
        if missing > 0:
            self.counts.extend([0] * (4 * missing))
            self.stats.extend([math.nan] * (3 * missing))
        self.dirty.add(second)
        return second

    def sent(self, at: float) -> None:
        self.counts[4 * self._at(int(at))] += 1

    def done(self, at: float, outcome: int, latency: float) -> None:
        second = self._at(int(at))
        self.counts[4 * second + 1 + outcome] += 1
        if outcome == OK:
            hist = self.open.get(second)
            if hist is None:
                hist = self.open[second] = Histogram()
            hist.add(latency)

    def close_before(self, second: float, into: Histogram) -> None:
        """Seconds before ``second`` are over: keep their p50/p99/mean, merge their
        histograms into ``into`` (the run's) and let them go."""
        for s in [s for s in self.open if s < second]:
            hist = self.open.pop(s)
            self.stats[3 * s : 3 * s + 3] = array(
                "d", [hist.quantile(0.5) or 0.0, hist.quantile(0.99) or 0.0, hist.mean or 0.0]
            )
            into.merge(hist)
            self.dirty.add(s)

    def row(self, second: int) -> dict[str, Any]:
        sent, ok, failed, timed_out = self.counts[4 * second : 4 * second + 4]
        hist = self.open.get(second)
        if hist is not None:
            p50, p99, mean = hist.quantile(0.5), hist.quantile(0.99), hist.mean
        else:
            p50, p99, mean = (
                None if math.isnan(v) else v for v in self.stats[3 * second : 3 * second + 3]
            )
        values = (second, sent, ok, failed, timed_out, p50, p99, mean)
        return dict(zip(TIMELINE_COLUMNS, values, strict=True))

    def rows(self) -> list[dict[str, Any]]:
        """One row per second in which anything happened, in order."""
        n = len(self.counts) // 4
        return [self.row(s) for s in range(n) if any(self.counts[4 * s : 4 * s + 4])]

    def take_changed(self) -> list[dict[str, Any]]:
        changed = sorted(self.dirty)
        self.dirty = set()
        return [self.row(s) for s in changed if any(self.counts[4 * s : 4 * s + 4])]

    def nbytes(self) -> int:
        return self.counts.itemsize * len(self.counts) + self.stats.itemsize * len(self.stats)


class Recorder:
    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        keep: int = KEEP_RECORDS,
        track_index: bool = False,
        late_threshold_s: float | None = None,
    ) -> None:
        self.clock = clock
        self.t0 = clock()
        self.wall_t0 = time.time()
        self.keep = keep
        self.pending = Records()  # records not yet drained
        self.dropped = 0  # records let go because nothing drained them (no store)
        self.errors: list[str] = []  # error kinds, append-only
        self._error_index: dict[str, int] = {}
        self.error_counts: list[int] = []
        self.counts = [0, 0, 0]
        self.sent = 0
        self.done = 0
        # Open-loop runs: sends later than the threshold after their due time (else None).
        self.late_threshold_s = late_threshold_s
        self.late_sends = 0
        self.lateness = Histogram()  # open loop: how late each send left after it was due
        self.hist = Histogram()  # latency of successful requests, seconds that are over
        self.per_second = Timeline()
        self.first_send: float | None = None
        self.last_done = 0.0
        # --trace runs (a few thousand requests): the request index -> its record's seq.
        self.seq_of: dict[int, int] | None = {} if track_index else None

    def now(self) -> float:
        return self.clock() - self.t0

    def mark_sent(self, at: float) -> None:
        """A request due at ``at`` goes out now (its latency will count from ``at``)."""
        self.sent += 1
        if self.late_threshold_s is not None:
            late = self.now() - at
            self.lateness.add(max(late, 0.0))
            if late > self.late_threshold_s:
                self.late_sends += 1
        if self.first_send is None:
            self.first_send = at
        self.per_second.sent(at)

    def _kind(self, error: str) -> int:
        kind = self._error_index.get(error)
        if kind is None:
            if len(self.errors) >= MAX_ERROR_KINDS:
                return self._kind(OTHER_ERRORS) if error != OTHER_ERRORS else self._add(error)
            kind = self._add(error)
        return kind

    def _add(self, error: str) -> int:
        kind = self._error_index[error] = len(self.errors)
        self.errors.append(error)
        self.error_counts.append(0)
        return kind

    def record(self, start: float, outcome: int, error: str | None = None, index: int = -1) -> None:
        done = self.now()
        latency = done - start
        kind = -1
        if error is not None:
            kind = self._kind(error)
            self.error_counts[kind] += 1
        if self.seq_of is not None:
            self.seq_of[index] = self.done
        self.done += 1
        self.counts[outcome] += 1
        self.last_done = done
        self.per_second.done(done, outcome, latency)
        rec = self.pending
        if len(rec.outcome) < self.keep:
            rec.start.append(start)
            rec.latency.append(latency)
            rec.outcome.append(outcome)
            rec.error.append(kind)
        else:
            self.dropped += 1

    def drain(self) -> Records:
        """The records since the last drain (for the store); memory starts afresh."""
        out = self.pending
        self.pending = Records(first_seq=self.done)
        return out

    def close_seconds(self, everything: bool = False) -> None:
        """Fold the seconds that are over (with ``everything``: all, the run has ended)
        into the run's histogram; call it every second or so."""
        self.per_second.close_before(math.inf if everything else math.floor(self.now()), self.hist)

    @property
    def in_flight(self) -> int:
        return self.sent - self.done

    def latency(self) -> Histogram:
        """The run's latency histogram so far: the closed seconds plus the open ones."""
        return Histogram.merged([self.hist, *self.per_second.open.values()])

    def elapsed(self) -> float:
        """From the first request out to the last outcome known."""
        if self.first_send is None:
            return 0.0
        return max(self.last_done - self.first_send, 0.0)

    def errors_by_kind(self) -> dict[str, int]:
        counts = {k: n for k, n in zip(self.errors, self.error_counts, strict=True) if n}
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))

    def summary(self) -> ClientSummary:
        ok, failed, timed_out = self.counts
        elapsed = self.elapsed()
        hist = self.latency()
        p50, p90, p95, p99 = (hist.quantile(q) for q in QUANTILES)
        return ClientSummary(
            sent=self.sent,
            ok=ok,
            failed=failed,
            timed_out=timed_out,
            duration_s=elapsed,
            throughput_per_s=ok / elapsed if elapsed > 0 else None,
            latency_s=Latency(p50, p90, p95, p99, hist.quantile(1.0), hist.mean),
            errors=self.errors_by_kind(),
            late_sends=None if self.late_threshold_s is None else self.late_sends,
            late_threshold_s=self.late_threshold_s,
            send_lateness_s=lateness_of(self.lateness)
            if self.late_threshold_s is not None
            else None,
        )

    def timeline(self) -> list[dict[str, Any]]:
        return self.per_second.rows()

    def records(self) -> list[tuple[int, float, float, str, str | None]]:
        """(seq, start_s, latency_s, outcome, error) of the records not drained yet, in
        completion order: every record of a run made without a store (up to ``keep``)."""
        return self.pending.rows(self.errors)


def lateness_of(hist: Histogram) -> Latency | None:
    """A send-lateness histogram as p50 ... max (None when nothing was sent)."""
    if hist.n == 0:
        return None
    p50, p90, p95, p99 = (hist.quantile(q) for q in QUANTILES)
    return Latency(p50, p90, p95, p99, hist.quantile(1.0), hist.mean)
