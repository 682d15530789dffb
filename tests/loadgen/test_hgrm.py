"""export --hgrm: HdrHistogram's percentile distribution text, checked against HdrHistogram's
Python implementation (hdrhistogram on PyPI) fed the same latencies: the same buckets,
counts, mean, deviation, max and layout, in the Java reference's format."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from loadgen.reports.hgrm import hgrm
from loadgen.results.histogram import Histogram

# HdrHistogram's Java reference writes this header (printStream.format "%12s %14s %10s %14s").
HEADER = "       Value     Percentile TotalCount 1/(1-Percentile)"


def fed(seed: int = 3) -> tuple[Histogram, HdrHistogram, np.ndarray]:
    rng = np.random.default_rng(seed)
    seconds = np.concatenate([rng.lognormal(-7, 1, 20_000), rng.lognormal(-4, 0.3, 300)])
    ours = Histogram()
    micros = [int(float(s) * 1e6) for s in seconds]
    reference = HdrHistogram(1, max(micros), 2)  # 1 us, 2 significant digits: our layout
    for s, us in zip(seconds, micros, strict=True):
        ours.add(float(s))
        reference.record_value(us)
    return ours, reference, np.array(micros)


def test_the_text_is_hdrhistograms_for_the_same_latencies() -> None:
    ours, reference, micros = fed()
    text = hgrm(ours)
    lines = text.splitlines()
    assert lines[0] == HEADER and lines[1] == ""
    rows = [ln for ln in lines[2:] if not ln.startswith("#")]
    # Java's PercentileIterator with 5 ticks per half distance: 0, 10, ... 50, 55, ...
    levels = [float(r.split()[1]) for r in rows]
    assert levels[:8] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.55, 0.6]
    assert levels[-1] == 1.0 and len(rows[-1].split()) == 3  # the 100 % line, 3 columns
    for row in rows:
        value, level, count = float(row.split()[0]), float(row.split()[1]), int(row.split()[2])
        # Each value is the highest value of its HDR bucket, and TotalCount the recorded
        # values up to it, as HdrHistogram counts them.
        assert reference.get_highest_equivalent_value(int(value)) == int(value)
        assert count == int((micros <= value).sum())
        assert 100 * count / len(micros) >= level * 100 - 1e-9
    # The footer: the same mean, deviation, max and layout as HdrHistogram's own.
    out = io.BytesIO()
    reference.output_percentile_distribution(out, 1.0)
    theirs = out.getvalue().decode().splitlines()
    assert lines[-3] == theirs[-3]  # Mean, StdDeviation
    assert lines[-1] == theirs[-1]  # Buckets, SubBuckets
    max_value = float(re.findall(r"Max\s+=\s+([0-9.]+)", lines[-2])[0])
    assert max_value == reference.get_max_value()
    assert f"Total count    = {len(micros):12d}]" in lines[-2]  # Java's label and %12d


def test_milliseconds_divide_every_value_by_1000() -> None:
    ours, _, _ = fed(5)
    us = [ln.split() for ln in hgrm(ours, "us").splitlines()[2:] if not ln.startswith("#")]
    ms = [ln.split() for ln in hgrm(ours, "ms").splitlines()[2:] if not ln.startswith("#")]
    assert [r[1:] for r in us] == [r[1:] for r in ms]
    assert all(abs(float(a[0]) / 1000 - float(b[0])) < 0.006 for a, b in zip(us, ms, strict=True))


@pytest.mark.parametrize("n", [0, 1])
def test_an_empty_or_one_value_histogram(n: int) -> None:
    h = Histogram()
    for _ in range(n):
        h.add(0.0012)
    lines = hgrm(h).splitlines()
    rows = [ln for ln in lines[2:] if ln and not ln.startswith("#")]
    assert len(rows) == (0 if n == 0 else 2)  # 0 %, then the last step at 100 %
    assert f"Total count    = {n:12d}" in lines[-2]
