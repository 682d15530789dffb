"""Predictions for a config under given traffic, and the search for a better config.

:func:`predict` simulates one config; :func:`recommend` simulates a grid of configs
and keeps the best one whose p99 latency meets the user's bound.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from advisor.config import BatcherConfig
from advisor.model import ClosedLoop, CpuModel, OpenLoop, ServiceModel, Traffic
from advisor.simulator import SimResult, Simulation

OBJECTIVES = ("throughput", "cost")


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class Prediction:
    config: BatcherConfig
    traffic: Traffic
    throughput_per_s: float
    mean_batch_size: float
    batch_size_distribution: dict[int, float]  # size -> fraction of executions
    queue_delay_p50_s: float
    queue_delay_p99_s: float
    queue_delay_mean_s: float
    latency_p50_s: float
    latency_p99_s: float
    # The most this config serves (clients never waiting on each other).
    throughput_limit_per_s: float
    # Busy core-seconds per inference (front end + execution): the cost objective.
    cpu_s_per_inference: float
    # Open loop: the offered rate exceeds what the config serves; queues grow.
    saturated: bool

    def summary(self) -> dict[str, object]:
        return {
            "config": self.config.describe(),
            "traffic": self.traffic.describe(),
            "throughput_per_s": round(self.throughput_per_s, 1),
            "throughput_limit_per_s": round(self.throughput_limit_per_s, 1),
            "mean_batch_size": round(self.mean_batch_size, 3),
            "batch_size_distribution": {
                s: round(f, 4) for s, f in sorted(self.batch_size_distribution.items())
            },
            "queue_delay_p50_us": round(self.queue_delay_p50_s * 1e6, 1),
            "queue_delay_p99_us": round(self.queue_delay_p99_s * 1e6, 1),
            "latency_p99_us": round(self.latency_p99_s * 1e6, 1),
            "cpu_us_per_inference": round(self.cpu_s_per_inference * 1e6, 1),
            "saturated": self.saturated,
        }


def _cpu_per_inference(result: SimResult, service: ServiceModel, cpu: CpuModel) -> float:
    if not result.executions:
        return math.inf
    executions = sum(n * service.time_s(s) for s, n in result.batch_sizes.items())
    return cpu.request_s + executions / (result.mean_batch_size * result.executions)


def throughput_limit(
    config: BatcherConfig, service: ServiceModel, cpu: CpuModel, requests: int, seed: int
) -> float:
    """Throughput with so many clients that a full batch is always waiting."""
    # Enough clients that every instance is busy and a full batch is waiting.
    clients = min(256, 2 * config.instances * config.batch_limit + 8)
    sim = Simulation(
        config, service, ClosedLoop(clients), cpu, max(requests, 10 * clients), seed=seed
    )
    return sim.run().throughput_per_s


def predict(
    config: BatcherConfig,
    traffic: Traffic,
    service: ServiceModel,
    cpu: CpuModel | None = None,
    requests: int = 20_000,
    seed: int = 1,
    with_limit: bool = True,
) -> Prediction:
    """Simulate ``config`` under ``traffic``: batch sizes, queue delay, throughput.

    ``with_limit=False`` skips the second simulation that finds the throughput limit
    (reported as 0 then).
    """
    cpu = cpu or CpuModel()
    result = Simulation(config, service, traffic, cpu, requests, seed=seed).run()
    limit = throughput_limit(config, service, cpu, requests, seed) if with_limit else 0.0
    saturated = isinstance(traffic, OpenLoop) and (
        result.throughput_per_s < 0.95 * traffic.rate_per_s
        or result.backlog > 4 * config.batch_limit
    )
    executions = result.executions
    return Prediction(
        config=config,
        traffic=traffic,
        throughput_per_s=result.throughput_per_s,
        mean_batch_size=result.mean_batch_size,
        batch_size_distribution={s: n / executions for s, n in sorted(result.batch_sizes.items())}
        if executions
        else {},
        queue_delay_p50_s=quantile(result.queue_delays_s, 0.50),
        queue_delay_p99_s=quantile(result.queue_delays_s, 0.99),
        queue_delay_mean_s=sum(result.queue_delays_s) / max(len(result.queue_delays_s), 1),
        latency_p50_s=quantile(result.latencies_s, 0.50),
        latency_p99_s=quantile(result.latencies_s, 0.99),
        throughput_limit_per_s=max(limit, result.throughput_per_s),
        cpu_s_per_inference=_cpu_per_inference(result, service, cpu),
        saturated=saturated,
    )


@dataclass(frozen=True)
class SearchSpace:
    """The configs :func:`recommend` tries (the cross product, deduplicated)."""

    max_batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    delays_us: tuple[int, ...] = (0, 100, 250, 500, 1000, 2000)
    instances: tuple[int, ...] = (1, 2)
    # Per max_batch_size m: no preferred sizes, and [m/2, m].
    half_and_full_preferred: bool = True

    def configs(self) -> Iterable[BatcherConfig]:
        seen = set()
        for m, delay, count in itertools.product(
            self.max_batch_sizes, self.delays_us, self.instances
        ):
            options: list[tuple[int, ...]] = [()]
            if self.half_and_full_preferred and m >= 2:
                options.append((m // 2, m))
            for preferred in options:
                config = BatcherConfig(m, preferred, delay if m > 1 else 0, count)
                key = (m, preferred, config.max_queue_delay_us, count)
                if key not in seen:
                    seen.add(key)
                    yield config


def objective_value(prediction: Prediction, objective: str) -> float:
    """Bigger is better."""
    if objective == "throughput":
        if isinstance(prediction.traffic, OpenLoop):
            # Every unsaturated config serves the offered rate: compare headroom.
            return prediction.throughput_limit_per_s
        return prediction.throughput_per_s
    if objective == "cost":
        return -prediction.cpu_s_per_inference
    raise ValueError(f"unknown objective {objective!r} (use one of {', '.join(OBJECTIVES)})")


@dataclass(frozen=True)
class Recommendation:
    current: Prediction
    best: Prediction | None  # None: no config meets the bound
    objective: str
    p99_bound_s: float
    considered: int
    candidates: list[Prediction] = field(default_factory=list, repr=False)

    @property
    def gain_ratio(self) -> float:
        """Objective of the best config over the current one (>1 is better)."""
        if self.best is None:
            return math.nan
        if self.objective == "cost":
            return self.current.cpu_s_per_inference / self.best.cpu_s_per_inference
        now = objective_value(self.current, self.objective)
        return objective_value(self.best, self.objective) / now if now else math.inf


def meets(prediction: Prediction, p99_bound_s: float) -> bool:
    return not prediction.saturated and prediction.latency_p99_s <= p99_bound_s


def recommend(
    current: BatcherConfig,
    traffic: Traffic,
    service: ServiceModel,
    p99_bound_s: float,
    cpu: CpuModel | None = None,
    objective: str = "throughput",
    space: SearchSpace | None = None,
    requests: int = 5_000,
    seed: int = 1,
) -> Recommendation:
    """The config of ``space`` that is best for ``objective`` with p99 latency <= the bound.

    The current config is always a candidate, so the gain is never below 1 when the
    current config meets the bound.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r} (use one of {', '.join(OBJECTIVES)})")
    if p99_bound_s <= 0:
        raise ValueError(f"the p99 latency bound must be positive, got {p99_bound_s}")
    space = space or SearchSpace()
    now = predict(current, traffic, service, cpu, requests, seed)
    candidates = [now]
    for config in space.configs():
        if (
            config.max_batch_size,
            config.effective_preferred,
            config.delay_s,
            config.instances,
        ) == (
            current.max_batch_size,
            current.effective_preferred,
            current.delay_s,
            current.instances,
        ):
            continue
        quick = predict(config, traffic, service, cpu, requests, seed, with_limit=False)
        # The limit only matters for configs that meet the bound: simulate it for those.
        if meets(quick, p99_bound_s):
            quick = predict(config, traffic, service, cpu, requests, seed)
        candidates.append(quick)
    fitting = [p for p in candidates if meets(p, p99_bound_s)]
    best = max(fitting, key=lambda p: objective_value(p, objective), default=None)
    return Recommendation(now, best, objective, p99_bound_s, len(candidates), candidates)
