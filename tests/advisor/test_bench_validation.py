"""``python -m bench.advisor_validation --ceiling``'s accounting, on known measurements: the
criteria applied to a second measurement of each point, as if it were the prediction."""

from __future__ import annotations

import argparse
from typing import cast

import pytest

from advisor.config import BatcherConfig
from advisor.predict import Prediction
from bench.advisor_validation import Point, ceiling_line, factors


def point(first: tuple[float, float], again: tuple[float, float] | None) -> Point:
    """A point whose first and second measurements have these (average batch, p99 ms)."""
    measured = Point("m", 100.0, "own", BatcherConfig(4, (), 0), cast(Prediction, None), [], [])
    measured.batches, measured.client_p99s = [first[0]], [first[1] / 1e3]
    if again is not None:
        measured.again_batches, measured.again_p99s = [again[0]], [again[1] / 1e3]
    return measured


def test_the_second_measurement_is_judged_by_the_criteria_against_the_first() -> None:
    points = [
        point((1.50, 10.0), (1.60, 12.4)),  # +7 % and +24 %: both within
        point((1.50, 10.0), (1.70, 7.4)),  # +13 % and -26 %: neither
        point((1.50, 10.0), None),  # measured once: not counted
    ]
    line = ceiling_line(points)
    assert "average batch at 1/2" in line and "client p99 at 1/2" in line, line


def test_without_a_second_measurement_there_is_no_ceiling_line() -> None:
    assert ceiling_line([point((1.5, 10.0), None)]) == ""


def test_judged_at_takes_multiples_of_r_with_r_among_them() -> None:
    assert factors("1.5,0.5,1,0.75,1.25") == (0.5, 0.75, 1.0, 1.25, 1.5)
    for bad in ("0.5,1.5", "0,1", "1,x", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            factors(bad)
