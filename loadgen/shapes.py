"""Open-loop load shapes in Locust's style: small objects whose ``tick(elapsed)`` returns the
arrival rate (requests/s) at that moment of the run, or None when the run is over."""

from __future__ import annotations

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
