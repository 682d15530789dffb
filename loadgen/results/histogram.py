"""Latency percentiles from compact log buckets (HDR-histogram style), not from sorting.

A latency in microseconds falls in a bucket whose width is at most 1/128 of its value:
values below 256 us get a bucket each, then every power of two is split into 128 buckets.
Recording is a few integer operations; a million requests fill a few hundred buckets; a
reported percentile is within 0.4 % of the true value (the bucket's midpoint).

Histograms merge exactly (bucket counts add; count, sum, min and max combine), so a run's
latency is the merge of its seconds', and runs made by several processes merge the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

SUB_BITS = 7
SUB = 1 << SUB_BITS


def bucket_of(micros: int) -> int:
    if micros < 2 * SUB:
        return max(micros, 0)
    shift = micros.bit_length() - SUB_BITS - 1
    return (shift << SUB_BITS) + (micros >> shift)


def bucket_bounds(index: int) -> tuple[int, int]:
    """[low, high) in microseconds of bucket ``index``."""
    if index < 2 * SUB:
        return index, index + 1
    shift = (index >> SUB_BITS) - 1
    low = (index - (shift << SUB_BITS)) << shift
    return low, low + (1 << shift)


class Histogram:
    """Counts per bucket, plus the exact count, sum, min and max."""

    __slots__ = ("counts", "n", "total", "low", "high")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n = 0
        self.total = 0.0
        self.low = math.inf
        self.high = 0.0

    def add(self, seconds: float) -> None:
        b = bucket_of(int(seconds * 1e6))
        self.counts[b] = self.counts.get(b, 0) + 1
        self.n += 1
        self.total += seconds
        if seconds > self.high:
            self.high = seconds
        if seconds < self.low:
            self.low = seconds

    def merge(self, other: Histogram) -> Histogram:
        """Add ``other``'s counts into this one (in place) and return it; exact, not an
        approximation: the result is what one histogram fed both inputs would hold."""
        counts = self.counts
        for b, n in other.counts.items():
            counts[b] = counts.get(b, 0) + n
        self.n += other.n
        self.total += other.total
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)
        return self

    @classmethod
    def merged(cls, parts: Iterable[Histogram]) -> Histogram:
        out = cls()
        for part in parts:
            out.merge(part)
        return out

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0..1) in seconds; None when empty. q=1 gives the exact max."""
        if self.n == 0:
            return None
        if q >= 1:
            return self.high
        rank = max(1, math.ceil(q * self.n))
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                low, high = bucket_bounds(b)
                value = (low + high - 1) / 2 / 1e6
                # Never outside what was seen.
                return min(max(value, self.low), self.high)
        return self.high

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None


def hist_json(h: Histogram) -> dict[str, Any]:
    """A histogram as JSON that merges as exactly as the histogram itself (a run's portable
    ``--json``, the store's ``send_lateness``)."""
    return {
        "n": h.n,
        "sum": h.total,
        "min": None if h.n == 0 else h.low,
        "max": h.high,
        "buckets": [[b, n] for b, n in sorted(h.counts.items())],
    }


def hist_from_json(data: dict[str, Any]) -> Histogram:
    h = Histogram()
    h.counts = {int(b): int(n) for b, n in data["buckets"]}
    h.n, h.total = int(data["n"]), float(data["sum"])
    h.low = math.inf if data["min"] is None else float(data["min"])
    h.high = float(data["max"])
    if sum(h.counts.values()) != h.n:
        raise ValueError("histogram buckets do not add up to its count")
    return h
