"""A run's latency as HdrHistogram's percentile distribution text (``.hgrm``).

The format is the one ``AbstractHistogram.outputPercentileDistribution`` writes in
HdrHistogram's Java reference: a header, one line per percentile step (Value, Percentile,
TotalCount, 1/(1-Percentile)), the 100 % line without the last column, and a footer with the
mean, standard deviation, max, total count, buckets and sub-buckets. Tools that plot HDR
latency (HdrHistogram's plotter, hdr-plot) read it.

The run's histogram (``loadgen.results.histogram``) is already an HDR histogram: integer
microseconds, values below 256 exact and each power of two split into 128 sub-buckets, the
layout of an HdrHistogram with a lowest discernible value of 1 and 2 significant digits
(256 sub-buckets). So the text here is what HdrHistogram itself writes for the same
latencies recorded in microseconds: the values are each bucket's highest equivalent value,
the mean and deviation are HdrHistogram's (from each bucket's median equivalent value), not
the exact ones of the run's summary.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from loadgen.results.histogram import SUB, Histogram, bucket_bounds, bucket_of

SIGNIFICANT_DIGITS = 2  # the digits of the HdrHistogram whose layout ours is
SUB_BUCKETS = 2 * SUB
UNITS = {"us": 1.0, "ms": 1000.0}  # outputValueUnitScalingRatio from microseconds


def _median_equivalent(bucket: int) -> int:
    low, high = bucket_bounds(bucket)
    return low + ((high - low) >> 1)


def bucket_count(highest: int) -> int:
    """HdrHistogram's bucketsNeededToCoverValue for the highest value recorded (at least
    2, as a histogram must cover twice its lowest value)."""
    untrackable, needed = SUB_BUCKETS, 1
    while untrackable <= max(highest, 2):
        untrackable <<= 1
        needed += 1
    return needed


def percentiles(h: Histogram, ticks_per_half: int = 5) -> Iterator[tuple[int, float, int]]:
    """(value, percentile level 0..100, count up to it) per step, as HdrHistogram's
    PercentileIterator yields them: steps halve their distance to 100 % every
    ``ticks_per_half`` steps, a step is reported at the first value that reaches it, and a
    last step at 100 %."""
    total = h.n
    if total == 0:
        return
    level, seen = 0.0, 0
    buckets = sorted(b for b, n in h.counts.items() if n)
    for b in buckets:
        seen += h.counts[b]
        value = bucket_bounds(b)[1] - 1  # highest equivalent value
        while 100.0 * seen / total >= level:
            yield value, level, seen
            level += 100.0 / _ticks(level, ticks_per_half)
            if seen == total:  # all counted: one step here, then the last at 100 %
                break
        last = value
    yield last, 100.0, seen


def _ticks(level: float, ticks_per_half: int) -> int:
    return ticks_per_half * int(2 ** (int(math.log(100.0 / (100.0 - level)) / math.log(2)) + 1))


def hgrm(h: Histogram, unit: str = "us", ticks_per_half: int = 5) -> str:
    """The ``.hgrm`` text of ``h`` (latencies in seconds), values in ``unit`` (us or ms)."""
    scale = UNITS[unit]
    d = SIGNIFICANT_DIGITS
    lines = [f"{'Value':>12} {'Percentile':>14} {'TotalCount':>10} {'1/(1-Percentile)':>14}", ""]
    for value, level, count in percentiles(h, ticks_per_half):
        row = f"{value / scale:12.{d}f} {level / 100:2.12f} {count:10d}"
        if level != 100.0:
            row += f" {1 / (1 - level / 100):14.2f}"
        lines.append(row)
    mean, std = _mean_std(h)
    top = bucket_bounds(bucket_of(int(h.high * 1e6)))[1] - 1 if h.n else 0
    lines += [
        f"#[Mean    = {mean / scale:12.{d}f}, StdDeviation   = {std / scale:12.{d}f}]",
        f"#[Max     = {top / scale:12.{d}f}, Total count    = {h.n:12d}]",
        f"#[Buckets = {bucket_count(top):12d}, SubBuckets     = {SUB_BUCKETS:12d}]",
    ]
    return "\n".join(lines) + "\n"


def _mean_std(h: Histogram) -> tuple[float, float]:
    if h.n == 0:
        return 0.0, 0.0
    mean = sum(_median_equivalent(b) * n for b, n in h.counts.items()) / h.n
    dev = sum((_median_equivalent(b) - mean) ** 2 * n for b, n in h.counts.items())
    return mean, math.sqrt(dev / h.n)
