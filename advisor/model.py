"""What the simulator needs to know besides the batcher config: costs and traffic.

The batcher config alone does not say what a change gives: the same config batches
differently as executions cost more or less, as the work batching does not remove grows, and
as the traffic arrives smoothly or in bursts. So the simulator takes these apart from the
config, as plain values a fit fills in (:mod:`advisor.fit`, :mod:`advisor.handoff`):

- :class:`ServiceModel`: the wall time of one execution of ``size`` requests;
- :class:`CpuModel`: the work batching does not remove, the batcher's hand-offs and the cores
  they share;
- :class:`OpenLoop` and :class:`ClosedLoop`: the traffic.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceModel:
    """Wall time of one model execution of ``size`` requests, ``base_s + per_item_s * size``
    (fitted from Triton's per-batch-size statistics), or the measured times where there are some.
    """

    base_s: float
    per_item_s: float
    # Mean execution time of each batch size seen often enough, ((size, seconds), ...) by
    # size: used as measured, since a model's time need not be a line in the batch size
    # (the MLP here takes 1.2 ms for one row and 4 ms for two). Between measured sizes the
    # time is interpolated; past the largest it grows by per_item_s.
    measured: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.per_item_s < 0 or self.base_s + self.per_item_s <= 0:
            raise ValueError(
                f"service time must be positive (base {self.base_s} s, "
                f"per item {self.per_item_s} s)"
            )
        if any(size < 1 or t <= 0 for size, t in self.measured):
            raise ValueError(f"measured service times must be positive: {self.measured}")

    def time_s(self, size: int) -> float:
        line = self.base_s + self.per_item_s * size
        if not self.measured:
            return line
        below = [(s, t) for s, t in self.measured if s <= size]
        above = [(s, t) for s, t in self.measured if s >= size]
        if below and below[-1][0] == size:
            return below[-1][1]
        if below and above:
            (s0, t0), (s1, t1) = below[-1], above[0]
            return t0 + (t1 - t0) * (size - s0) / (s1 - s0)
        if below:  # past the largest measured size
            s0, t0 = below[-1]
            return t0 + self.per_item_s * (size - s0)
        return line


@dataclass(frozen=True)
class CpuModel:
    """The work batching does not remove, and the batcher's hand-offs.

    Every request costs ``request_s`` of CPU outside the model (the client and Triton's HTTP
    front end: parse, copy, respond, receive), split half before the queue and half after the
    execution, gamma-distributed with coefficient of variation ``request_cv``, plus
    ``request_latency_s`` of wall time that needs no CPU. The batcher's timer wakes
    ``timer_slack_s`` (plus an exponential ``timer_slack_tail_s`` on average) after a
    queue-delay deadline. A batch starts ``dispatch_s`` after it is sent, and its instance takes
    the next one ``release_s`` after it ends (the batcher's hand-offs). With ``cores`` set, those
    front-end jobs and the executions share one pool of ``cores`` CPUs (processor sharing, each
    job at most one core), so at high load the front end slows execution down and vice versa.
    ``cores=None`` means no contention: every job runs at full speed.
    """

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
    # The batcher's hand-offs, in wall time (their CPU is in request_s): a formed batch
    # starts executing dispatch_s after the batcher sent it (waking the instance's thread,
    # the backend's hand-off to its stub), and an instance takes its next batch release_s
    # after an execution ends (responses sent, requests released). Both hold the instance.
    # Measured from Triton's traces (advisor.handoff); without traces, release_s is the
    # time Triton's compute counters do not show, inferred from the window (advisor.present).
    dispatch_s: float = 0.0
    release_s: float = 0.0
    # Wall time a request is counted as queued (Triton stamped its queue start) before the
    # batcher can take it: the same for every request, so it joins no batch and only adds
    # to the queue and the latency. Inferred from the window where Triton's queue time is
    # longer than any release that keeps the measured batch sizes allows (advisor.present).
    queue_lag_s: float = 0.0
    # Spread of one execution's time around its size's mean (coefficient of variation,
    # gamma), measured from traces: executions on a shared machine are never all alike.
    execution_cv: float = 0.0
    # Measured distributions, drawn from when given (they replace the parameters above):
    # hand-offs in seconds, the timer's lateness in seconds, and executions as ratios to
    # their size's mean. Traces show heavy tails (a hand-off's p99 five times its median
    # on a busy machine) that no two-parameter law keeps.
    dispatch_samples: tuple[float, ...] = ()
    # timer_slack_samples, when given, are the whole overshoot of a batch that leaves on its
    # delay: the timer's lateness and the hand-off to an idle instance, measured together
    # (no dispatch is drawn on top for such a batch).
    timer_slack_samples: tuple[float, ...] = ()
    execution_ratios: tuple[float, ...] = ()
    # The front end held by executions (advisor.handoff.holds): a share of executions,
    # from an onset after their start (drawn from hold_onsets, seconds) until they end,
    # keep requests from reaching the queue and the batcher from acting (its timer,
    # dispatching to another instance). Measured from traces: on a machine whose cores
    # the stub's execution takes, the front end waits for it.
    hold_share: float = 0.0
    hold_onsets: tuple[float, ...] = ()
    # Measured gaps from an execution's end to the same instance's next start when that
    # batch was already waiting (seconds; advisor.handoff): they replace release_s and the
    # dispatch there, as an instance that just finished takes its next batch at once,
    # without the wake-up an idle one needs.
    release_samples: tuple[float, ...] = ()
    # The spread of the time outside Triton's queue and execution (seconds, either sign;
    # advisor.handoff.outside), added to the wait after an execution (floored at no wait):
    # the part its requests share, drawn once per execution, and each request's own part,
    # drawn per request. Measured: its p99 is 2 to 3 times the median (the client's and the
    # network stack's scheduling), and without it the client p99 of a config whose queue
    # waits are short came out 20 to 37 % low. The answers of one execution travel back
    # together (a stalled client loop delays them all): drawn apart, closed-loop clients
    # that batch in pairs drifted apart in the simulation and lost the pairs they kept.
    outside_spread: tuple[float, ...] = ()
    outside_own: tuple[float, ...] = ()
    # Measured gaps between consecutive requests reaching Triton, in their order (seconds,
    # advisor.handoff.arrival_gaps): open-loop arrivals are drawn as runs of them, scaled
    # to the traffic's rate. Requests sent on a Poisson schedule reach the front end
    # clustered, which a short queue delay batches.
    arrival_gaps: tuple[float, ...] = ()
    # The share of open-loop arrivals that reach Triton with the one before (a gap of
    # nothing), the other gaps stretched to keep the rate. Requests sent on a Poisson
    # schedule reach the front end clustered, which a traffic law fitted over 200 ms bins
    # cannot see, and a short queue delay batches them. Used only where traces gave no
    # arrival_gaps; inferred from the window (advisor.present).
    arrival_cluster_share: float = 0.0

    def __post_init__(self) -> None:
        for name in (
            "request_cv",
            "request_latency_s",
            "timer_slack_s",
            "timer_slack_tail_s",
            "dispatch_s",
            "release_s",
            "queue_lag_s",
            "execution_cv",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.cores is not None and self.cores <= 0:
            raise ValueError(f"cores must be positive, got {self.cores}")
        if self.request_s < 0:
            raise ValueError(f"request_s must be >= 0, got {self.request_s}")
        if not 0 <= self.hold_share <= 1:
            raise ValueError(f"hold_share must be in 0..1, got {self.hold_share}")
        if not 0 <= self.arrival_cluster_share < 1:
            raise ValueError(
                f"arrival_cluster_share must be in [0, 1), got {self.arrival_cluster_share}"
            )
        if self.hold_share > 0 and not self.hold_onsets:
            raise ValueError("hold_share needs hold_onsets")
        for name in (
            "dispatch_samples",
            "timer_slack_samples",
            "execution_ratios",
            "hold_onsets",
            "release_samples",
            "arrival_gaps",
        ):
            if any(v < 0 for v in getattr(self, name)):
                raise ValueError(f"{name} must be >= 0")


# The CpuModel fields measured from Triton's traces (advisor.handoff.HandOff carries them).
HANDOFF_FIELDS = (
    "dispatch_s",
    "timer_slack_s",
    "timer_slack_tail_s",
    "release_s",
    "execution_cv",
    "dispatch_samples",
    "timer_slack_samples",
    "execution_ratios",
    "hold_share",
    "hold_onsets",
    "release_samples",
    "arrival_gaps",
)


@dataclass(frozen=True)
class OpenLoop:
    """Arrivals at ``rate_per_s`` whatever the server does, with inter-arrival times of
    coefficient of variation ``cv`` (0: constant, 1: Poisson, >1: bursty; a gamma renewal
    process of shape 1/cv^2).
    """

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
    """``concurrency`` clients, each sending its next request ``think_s`` after the previous one
    returns (perf_analyzer's ``--concurrency-range``).
    """

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
