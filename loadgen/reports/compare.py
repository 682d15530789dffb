"""Two runs side by side: the one comparison that the CLI prints and the dashboard shows.

Every ratio is B / A, run B's value relative to run A's: above 1, B has more of it. More
throughput is a gain, more latency a cost; a run with batching as B and its unbatched twin
as A shows the batcher's gain as a throughput ratio above 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadgen.results.summary import RunSummary


@dataclass(frozen=True)
class Compared:
    """One measure of both runs; None where a run has no value for it."""

    measure: str
    a: float | None
    b: float | None

    @property
    def b_over_a(self) -> float | None:
        """B / A; None when either is missing or A is zero (no ratio of nothing)."""
        if self.a is None or self.b is None or self.a == 0:
            return None
        return self.b / self.a


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


# (measure, its value in a run's summary): what a person compares two runs by.
MEASURES: list[tuple[str, Callable[[RunSummary], float | None]]] = [
    ("requests sent", lambda s: s.client.sent),
    ("requests ok", lambda s: s.client.ok),
    ("requests failed or timed out", lambda s: s.client.failed + s.client.timed_out),
    ("total time (s)", lambda s: s.client.duration_s),
    ("throughput (req/s)", lambda s: s.client.throughput_per_s),
    ("p50 latency (ms)", lambda s: _ms(s.client.latency_s.p50)),
    ("p99 latency (ms)", lambda s: _ms(s.client.latency_s.p99)),
    ("model executions", lambda s: s.server.executions if s.server else None),
    ("inferences", lambda s: s.server.inferences if s.server else None),
    ("average batch size", lambda s: s.server.average_batch_size if s.server else None),
    ("queue per request (ms)", lambda s: _ms(s.server.queue_s_per_request) if s.server else None),
    (
        "compute per request (ms)",
        lambda s: _ms(s.server.compute_s_per_request) if s.server else None,
    ),
]


def compare(a: RunSummary, b: RunSummary) -> list[Compared]:
    """One row per measure, A's value, B's value, and (as a property) B / A."""
    return [Compared(measure, get(a), get(b)) for measure, get in MEASURES]
