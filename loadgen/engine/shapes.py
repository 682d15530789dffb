"""Open-loop load shapes in Locust's style: small objects whose ``tick(elapsed)`` returns the
arrival rate (requests/s) at that moment of the run, or None when the run is over."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class LoadShape(Protocol):
    def tick(self, elapsed: float) -> float | None: ...


@dataclass(frozen=True)
class ConstantRate:
    rate: float
    duration: float

    def tick(self, elapsed: float) -> float | None:
        return self.rate if elapsed < self.duration else None


@dataclass(frozen=True)
class Steps:
    """Stages of (rate, seconds), one after another."""

    stages: Sequence[tuple[float, float]]

    def tick(self, elapsed: float) -> float | None:
        end = 0.0
        for rate, seconds in self.stages:
            end += seconds
            if elapsed < end:
                return rate
        return None


class Arrivals:
    """The due times of an open-loop run, as offsets from its start: one rate per
    ``shape.tick``, exponential gaps when ``poisson``, drawn from ``seed`` alone, so the
    schedule (and how many requests it holds) is known before the run."""

    def __init__(self, shape: LoadShape, poisson: bool, seed: int) -> None:
        self.shape, self.poisson = shape, poisson
        self.rng = random.Random(seed)
        self.offset = 0.0

    def rate(self) -> float | None:
        """The rate at the next request's due time; None once the shape has ended."""
        return self.shape.tick(self.offset)

    def advance(self, rate: float) -> None:
        self.offset += self.rng.expovariate(rate) if self.poisson else 1.0 / rate


def count_arrivals(shape: LoadShape, poisson: bool, seed: int) -> int:
    """How many requests an open-loop run of ``shape`` sends when nothing stops it."""
    arrivals, n = Arrivals(shape, poisson, seed), 0
    while (rate := arrivals.rate()) is not None:
        n += 1
        arrivals.advance(rate)
    return n
