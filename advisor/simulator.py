"""A discrete-event simulation of Triton's dynamic batcher and the clients around it.

The batcher follows Triton's documented behaviour (``docs/user_guide/batcher.md``)
and its scheduler (``DynamicBatchScheduler::GetDynamicBatch`` in triton-inference-
server/core), for requests of batch size 1:

* A batch is only formed when a model instance is free; requests queue meanwhile.
* Looking at the queue in arrival order, the batcher takes up to ``max_batch_size``
  requests. If that reaches a preferred size, the largest preferred size reached
  is sent at once.
* Otherwise, if at least the largest preferred size is queued (the batch cannot
  grow into a preferred size any more), everything up to ``max_batch_size`` goes.
* Otherwise the batch waits until the OLDEST queued request has waited
  ``max_queue_delay_microseconds``; then whatever is queued goes. With a delay of
  0 it goes at once.
* Without preferred sizes Triton uses ``[max_batch_size]`` (its normalisation), so
  a batch leaves early only when it is full.

Around it: the batcher's hand-offs (a batch starts executing a moment after it is
sent, and its instance is free a moment after it ends), the front-end CPU cost of
every request and the execution time of every batch (spread around its size's
mean), on a shared pool of cores (see :mod:`advisor.model`), and open- or
closed-loop clients.
"""

from __future__ import annotations

import functools
import heapq
import math
import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from advisor.config import BatcherConfig
from advisor.model import ClosedLoop, CpuModel, OpenLoop, ServiceModel, Traffic

# Float slack when comparing a request's age with the queue delay: the timer fires at
# exactly oldest + delay, and (oldest + delay) - oldest may round below delay.
EPS_S = 1e-12


@dataclass
class _Request:
    client: int
    sent: float
    enqueued: float = math.nan
    started: float = math.nan
    done: float = math.nan


@dataclass
class SimResult:
    """What one simulated run observed (after the warm-up)."""

    duration_s: float
    inferences: int
    batch_sizes: Counter[int]
    queue_delays_s: list[float]
    latencies_s: list[float]
    backlog: int  # requests still waiting in the queue at the end
    offered: int  # requests sent during the measured period

    @property
    def throughput_per_s(self) -> float:
        return self.inferences / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def executions(self) -> int:
        return sum(self.batch_sizes.values())

    @property
    def mean_batch_size(self) -> float:
        n = self.executions
        return sum(s * c for s, c in self.batch_sizes.items()) / n if n else 0.0


def decide(
    config: BatcherConfig, queued: int, oldest_s: float, now: float
) -> tuple[int, float | None]:
    """The batcher's choice with ``queued`` requests waiting and an instance free.

    Returns ``(size, None)`` to send a batch of ``size`` now, or ``(0, wake_at)``
    to wait until ``wake_at`` (the oldest request's queue-delay deadline).
    """
    if queued == 0:
        return 0, None
    limit = config.batch_limit
    preferred = config.effective_preferred
    delay = config.delay_s
    n = min(queued, limit)
    exceeded = delay > 0 and now - oldest_s >= delay - EPS_S
    best = max((p for p in preferred if p <= n), default=0)
    if best and not exceeded:
        return best, None
    if n >= max(preferred) or exceeded or delay == 0:
        return n, None
    return 0, oldest_s + delay


class _CpuPool:
    """Processor sharing over ``cores`` CPUs; each job runs at most at one core's speed.

    Every job runs at the same rate, so progress is kept as one "virtual work"
    clock: a job started at virtual time V with work w finishes at V + w. The
    next completion is the smallest finish in a heap (O(log n) per event).
    """

    def __init__(self, cores: float | None) -> None:
        self.cores = cores
        self.finish: list[tuple[float, int]] = []  # (virtual finish, job id)
        self.virtual = 0.0
        self.now = 0.0

    def rate(self) -> float:
        if self.cores is None or not self.finish:
            return 1.0
        return min(1.0, self.cores / len(self.finish))

    def add(self, job: int, work_s: float) -> None:
        heapq.heappush(self.finish, (self.virtual + work_s, job))

    def advance(self, t: float) -> None:
        if t > self.now:
            self.virtual += (t - self.now) * self.rate()
            self.now = t

    def next_completion(self) -> tuple[float, int]:
        if not self.finish:
            return math.inf, -1
        v, job = self.finish[0]
        return self.now + max(v - self.virtual, 0.0) / self.rate(), job

    def pop(self) -> None:
        heapq.heappop(self.finish)


@dataclass
class Simulation:
    config: BatcherConfig
    service: ServiceModel
    traffic: Traffic
    cpu: CpuModel = field(default_factory=CpuModel)
    requests: int = 20_000
    warmup_fraction: float = 0.1
    seed: int = 1

    def run(self) -> SimResult:
        return _Run(self).run()


class _Run:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.rng = random.Random(sim.seed)
        self.pool = _CpuPool(sim.cpu.cores)
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = 0
        self.jobs: dict[int, Callable[[], None]] = {}
        self.queue: deque[_Request] = deque()
        self.free = sim.config.instances
        self.timer_at = math.inf
        self.sent = 0
        self.completed = 0
        self.warm_at = math.inf
        self.batches: Counter[int] = Counter()
        self.finished: list[_Request] = []

    # ---- plumbing ----------------------------------------------------------------------
    def at(self, t: float, action: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, action))

    def cpu_job(self, work_s: float, then: Callable[[], None]) -> None:
        if work_s <= 0:
            then()
            return
        self.seq += 1
        self.pool.add(self.seq, work_s)
        self.jobs[self.seq] = then

    def run(self) -> SimResult:
        traffic = self.sim.traffic
        if isinstance(traffic, ClosedLoop):
            for client in range(traffic.concurrency):
                self.at(0.0, functools.partial(self.send, client))
        else:
            self.at(0.0, self.open_arrival)
        while self.completed < self.sim.requests:
            t_event = self.events[0][0] if self.events else math.inf
            t_job, job = self.pool.next_completion()
            if t_job == math.inf and t_event == math.inf:
                break
            if t_job <= t_event:
                self.pool.advance(t_job)
                self.pool.pop()
                self.jobs.pop(job)()
            else:
                _, _, action = heapq.heappop(self.events)
                self.pool.advance(t_event)
                action()
        return self.result()

    @property
    def now(self) -> float:
        return self.pool.now

    # ---- clients -----------------------------------------------------------------------
    def open_arrival(self) -> None:
        traffic = self.sim.traffic
        assert isinstance(traffic, OpenLoop)
        self.send(-1)
        if self.sent < self.sim.requests * 1.5:
            self.at(self.now + self.interarrival(traffic), self.open_arrival)

    def interarrival(self, traffic: OpenLoop) -> float:
        mean = 1.0 / traffic.rate_per_s
        if traffic.cv == 0:
            return mean
        shape = 1.0 / (traffic.cv * traffic.cv)
        return self.rng.gammavariate(shape, mean / shape)

    def send(self, client: int) -> None:
        self.sent += 1
        if self.sent == int(self.sim.requests * self.sim.warmup_fraction) + 1:
            self.warm_at = self.now
        request = _Request(client, self.now)
        self.after_latency(
            lambda: self.cpu_job(self.front_end_work(), lambda: self.enqueue(request))
        )

    def after_latency(self, then: Callable[[], None]) -> None:
        half = self.sim.cpu.request_latency_s / 2
        if half > 0:
            self.at(self.now + half, then)
        else:
            then()

    def front_end_work(self) -> float:
        half, cv = self.sim.cpu.request_s / 2, self.sim.cpu.request_cv
        if half <= 0 or cv == 0:
            return half
        shape = 1.0 / (cv * cv)
        return self.rng.gammavariate(shape, half / shape)

    def finish(self, request: _Request) -> None:
        request.done = self.now
        self.completed += 1
        self.finished.append(request)
        traffic = self.sim.traffic
        if isinstance(traffic, ClosedLoop):
            self.at(self.now + traffic.think_s, lambda: self.send(request.client))

    # ---- the batcher -------------------------------------------------------------------
    def enqueue(self, request: _Request) -> None:
        request.enqueued = self.now
        self.queue.append(request)
        self.dispatch()

    def on_timer(self) -> None:
        self.timer_at = math.inf
        self.dispatch()

    def dispatch(self) -> None:
        while self.free and self.queue:
            size, wake = decide(self.sim.config, len(self.queue), self.queue[0].enqueued, self.now)
            if not size:
                if wake is not None and wake < self.timer_at:
                    self.timer_at = wake
                    self.at(wake + self.slack(), self.on_timer)
                return
            batch = [self.queue.popleft() for _ in range(size)]
            # A request's queue wait ends when its execution starts (Triton's COMPUTE_START),
            # after the hand-off to the instance.
            start = self.now + self.dispatch_time()
            for request in batch:
                request.started = start
            if self.now >= self.warm_at:
                self.batches[size] += 1
            self.free -= 1
            execute = functools.partial(
                self.cpu_job, self.execution_work(size), functools.partial(self.executed, batch)
            )
            if start > self.now:
                self.at(start, execute)
            else:
                execute()

    def execution_work(self, size: int) -> float:
        mean, cpu = self.sim.service.time_s(size), self.sim.cpu
        if cpu.execution_ratios:
            return mean * self.rng.choice(cpu.execution_ratios)
        if cpu.execution_cv == 0:
            return mean
        shape = 1.0 / (cpu.execution_cv * cpu.execution_cv)
        return self.rng.gammavariate(shape, mean / shape)

    def dispatch_time(self) -> float:
        cpu = self.sim.cpu
        return self.rng.choice(cpu.dispatch_samples) if cpu.dispatch_samples else cpu.dispatch_s

    def slack(self) -> float:
        cpu = self.sim.cpu
        if cpu.timer_slack_samples:
            return self.rng.choice(cpu.timer_slack_samples)
        tail = cpu.timer_slack_tail_s
        return cpu.timer_slack_s + (self.rng.expovariate(1 / tail) if tail > 0 else 0.0)

    def executed(self, batch: list[_Request]) -> None:
        for request in batch:
            self.cpu_job(
                self.front_end_work(),
                functools.partial(self.after_latency, functools.partial(self.finish, request)),
            )
        if self.sim.cpu.release_s > 0:
            self.at(self.now + self.sim.cpu.release_s, self.released)
        else:
            self.released()

    def released(self) -> None:
        self.free += 1
        self.dispatch()

    # ---- results -----------------------------------------------------------------------
    def result(self) -> SimResult:
        measured = [r for r in self.finished if r.sent >= self.warm_at]
        end = max((r.done for r in measured), default=self.now)
        duration = end - self.warm_at if self.warm_at < end else 0.0
        offered = self.sent - int(self.sim.requests * self.sim.warmup_fraction)
        return SimResult(
            duration_s=duration,
            inferences=len([r for r in self.finished if r.done >= self.warm_at]),
            batch_sizes=self.batches,
            queue_delays_s=[r.started - r.enqueued for r in measured],
            latencies_s=[r.done - r.sent for r in measured],
            backlog=len(self.queue),
            offered=offered,
        )
