"""What the simulator needs to know besides the batcher config: costs and traffic.

Costs
    :class:`ServiceModel` -- wall time of one model execution of ``size`` requests,
    ``base_s + per_item_s * size`` (fitted from Triton's per-batch-size statistics).
    :class:`CpuModel` -- the work batching does not remove. Every request costs
    ``request_s`` of CPU outside the model (the client and Triton's HTTP front end:
    parse, copy, respond, receive), split half before the queue and half after the
    execution, gamma-distributed with coefficient of variation ``request_cv``, plus
    ``request_latency_s`` of wall time that needs no CPU. The batcher's timer wakes
    ``timer_slack_s`` (plus an exponential ``timer_slack_tail_s`` on average) after a
    queue-delay deadline. With
    ``cores`` set, those front-end jobs and the executions share one pool of ``cores``
    CPUs (processor sharing, each job at most one core), so at high load the front end
    slows execution down and vice versa. ``cores=None`` means no
    contention: every job runs at full speed.

Traffic
    :class:`OpenLoop` -- arrivals at ``rate_per_s`` whatever the server does, with
    inter-arrival times of coefficient of variation ``cv`` (0: constant, 1: Poisson,
    >1: bursty; a gamma renewal process of shape 1/cv^2).
    :class:`ClosedLoop` -- ``concurrency`` clients, each sending its next request
    when the previous one returns (perf_analyzer's ``--concurrency-range``), after
    ``think_s``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceModel:
    base_s: float
    per_item_s: float

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.per_item_s < 0 or self.base_s + self.per_item_s <= 0:
            raise ValueError(
                f"service time must be positive (base {self.base_s} s, "
                f"per item {self.per_item_s} s)"
            )

    def time_s(self, size: int) -> float:
        return self.base_s + self.per_item_s * size


@dataclass(frozen=True)
class CpuModel:
    cores: float | None = None
    request_s: float = 0.0
    # Spread of the per-request front-end work (coefficient of variation, gamma).
    # Without it closed-loop clients move in lockstep, which real clients never do.
    request_cv: float = 0.0
    # Wall time per request that uses no CPU here (network, thread and process
    # hand-offs), half before the queue and half after the execution.
    request_latency_s: float = 0.0
    # How late the batcher thread wakes after a queue-delay deadline (a timed
    # condition-variable wait on a busy machine overshoots): at least timer_slack_s,
    # plus an exponential part of mean timer_slack_tail_s.
    timer_slack_s: float = 0.0
    timer_slack_tail_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("request_cv", "request_latency_s", "timer_slack_s", "timer_slack_tail_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.cores is not None and self.cores <= 0:
            raise ValueError(f"cores must be positive, got {self.cores}")
        if self.request_s < 0:
            raise ValueError(f"request_s must be >= 0, got {self.request_s}")


@dataclass(frozen=True)
class OpenLoop:
    rate_per_s: float
    cv: float = 1.0

    def __post_init__(self) -> None:
        if self.rate_per_s <= 0:
            raise ValueError(f"arrival rate must be positive, got {self.rate_per_s}")
        if self.cv < 0:
            raise ValueError(f"burstiness (cv) must be >= 0, got {self.cv}")

    def describe(self) -> str:
        kind = "constant" if self.cv == 0 else "Poisson" if self.cv == 1 else f"cv {self.cv:g}"
        return f"open loop {self.rate_per_s:g}/s ({kind})"


@dataclass(frozen=True)
class ClosedLoop:
    concurrency: int
    think_s: float = 0.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.think_s < 0:
            raise ValueError(f"think time must be >= 0, got {self.think_s}")

    def describe(self) -> str:
        return f"closed loop, concurrency {self.concurrency}"


Traffic = OpenLoop | ClosedLoop
