"""A discrete-event simulation of Triton's dynamic batcher and the clients around it.

The advisor cannot try every config on a live model, so it runs them here. The batcher is a
port of Triton 2.51's ``DynamicBatchScheduler`` (``Enqueue``, ``BatcherThread``,
``GetDynamicBatch`` in triton-inference-server/core) and of the rate limiter's payload queue,
for requests of batch size 1, following ``batcher.md`` (the rules: :class:`Simulation`).

Around it: the batcher's hand-offs (a payload reaches an idle instance a moment after it is
sent; a running instance takes the next one a measured gap after its execution ends), the
front-end CPU cost of every request and the execution time of every batch (spread around
its size's mean), on a shared pool of cores (see :mod:`advisor.model`), executions that
hold up the front end (arrivals and the batcher wait for them to end, as measured from
traces), and open- or closed-loop clients (open-loop arrivals drawn as runs of the gaps
measured at Triton, when there are some: :data:`GAP_RUN`; else from the traffic's law, a
share of them with the one before where the present check inferred that clustering).
"""

from __future__ import annotations

import contextvars
import functools
import heapq
import math
import random
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from advisor.config import BatcherConfig
from advisor.model import ClosedLoop, CpuModel, OpenLoop, ServiceModel, Traffic

# Float slack when comparing the clock with a request's queue-delay deadline (oldest + delay,
# the sum the timer was set to, so the timer's own wake-up always passes it).
EPS_S = 1e-12
# Measured arrival gaps (CpuModel.arrival_gaps) are drawn in runs of this many consecutive
# ones from a random place: a run keeps a burst and the long gap before it together, so
# the arrivals cluster as measured without more spread over milliseconds than measured.
GAP_RUN = 32
# An idle instance takes its payload this far into the hand-off (the rest is the backend's
# hand-off to the stub): until then the payload of a config with no delay still grows.
# Traced (var_add, max_batch_size 16, no delay, 2 instances): where a request started alone
# on a free instance, its hand-off took 51 to 72 us (the median); the later arrivals that
# joined such a batch came 24 to 32 us after its first (the median), and those that came
# before its start but did not join, 40 to 78 us after. Growing for the whole hand-off,
# the simulator gave batches 11 to 35 % too large there.
TAKE_SHARE = 0.5


@dataclass
class _Request:
    client: int
    sent: float
    enqueued: float = math.nan
    started: float = math.nan
    executed: float = math.nan  # its batch's execution ended (Triton's COMPUTE_END)
    done: float = math.nan


@dataclass
class _Payload:
    """Triton's payload: the batch the batcher fills, sends to the instances' queue (the
    rate limiter's), and an instance takes."""

    requests: list[_Request] = field(default_factory=list)
    state: str = "new"  # new -> ready -> sent -> executing
    assigned: bool = False  # an instance is on its way to take it (the hand-off)
    by_timer: bool = False  # sent when the batcher's timer woke it (its delay ran out)


@dataclass
class _Execution:
    done: bool = False
    held: bool = False  # holding up the front end (CpuModel.hold_share)


@dataclass
class SimResult:
    """What one simulated run observed (after the warm-up)."""

    duration_s: float
    inferences: int
    batch_sizes: Counter[int]
    queue_delays_s: list[float]
    latencies_s: list[float]  # sent to answered: what a client sees
    backlog: int  # requests still waiting in the queue at the end
    offered: int  # requests sent during the measured period
    # From the measured period's start to its last send: ``offered`` over it is the rate
    # the run's own arrivals offered, which a short run's draws put a few % off the
    # traffic's rate.
    offered_s: float = 0.0
    # Reaching the queue to the execution's end: queue + compute, Triton's side only.
    server_latencies_s: list[float] = field(default_factory=list)
    # The run was stopped at its event budget (MAX_EVENTS_PER_REQUEST) before every request
    # was answered: its figures cover only what was answered, and predict() calls it
    # saturated, so it is never recommended.
    cut: bool = False

    @property
    def throughput_per_s(self) -> float:
        return self.inferences / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def offered_per_s(self) -> float | None:
        """The rate the measured period's arrivals came at; None without two sends."""
        return self.offered / self.offered_s if self.offered_s > 0 else None

    @property
    def executions(self) -> int:
        return sum(self.batch_sizes.values())

    @property
    def mean_batch_size(self) -> float:
        n = self.executions
        return sum(s * c for s, c in self.batch_sizes.items()) / n if n else 0.0


@dataclass(frozen=True)
class Decision:
    """What one pass of Triton's ``GetDynamicBatch`` decides."""

    take: int  # queued requests to add to the payload now (0: none)
    wake_at: float | None  # wait until then (the oldest queued request's deadline)
    saturated: bool  # the payload takes no more requests
    # An arrival wakes the batcher once this many are queued; None: unchanged (Triton sets
    # it only when the batcher waits, and resets it with a new payload).
    next_preferred: int | None


def get_dynamic_batch(
    config: BatcherConfig,
    payload: int,
    queued: int,
    oldest_s: float,
    now: float,
    saturated: bool = False,
) -> Decision:
    """Triton 2.51's ``DynamicBatchScheduler::GetDynamicBatch`` for requests of one item:
    ``payload`` requests already in the current payload (sent or not), ``queued`` waiting,
    the oldest queued since ``oldest_s``."""
    preferred = config.effective_preferred
    max_preferred, limit, delay = max(preferred), config.batch_limit, config.delay_s
    best = pending = 0
    send_now = False
    for _ in range(queued):
        if payload + pending > 0:
            if payload + pending + 1 > max_preferred and best == 0:
                best, saturated = pending, True
            if payload + pending + 1 > limit:
                send_now = True
                break
        pending += 1
        if payload + pending in preferred:
            best = pending
    # Against the deadline as the timer computed it (oldest + delay): ``now - oldest`` loses
    # the delay's low bits once the clock is large (hours of simulated time at a low rate),
    # the deadline then never passed, and the timer re-armed at the same instant until the
    # run's event budget cut it (each config of a search took seconds).
    exceeded = delay > 0 and now >= oldest_s + delay - EPS_S
    if best and not exceeded:
        return Decision(best, None, saturated or delay == 0, None)
    if pending == 0:
        return Decision(0, None, saturated, None)
    if send_now or payload + pending >= max_preferred:
        return Decision(pending, None, True, None)
    if exceeded or delay == 0:
        return Decision(pending, None, saturated, None)
    above = [p for p in preferred if p > payload + pending]
    next_preferred = max((min(above) if above else min(preferred)) - payload, 0)
    if not saturated and payload and payload not in preferred:
        # a payload sent short of a preferred size takes what is queued
        return Decision(pending, None, saturated, next_preferred)
    return Decision(0, oldest_s + delay, saturated, next_preferred)


def decide(
    config: BatcherConfig, queued: int, oldest_s: float, now: float
) -> tuple[int, float | None]:
    """The batcher's choice for a new payload with ``queued`` requests waiting.

    Returns ``(size, None)`` to send a batch of ``size`` now, or ``(0, wake_at)``
    to wait until ``wake_at`` (the oldest request's queue-delay deadline).
    """
    if queued == 0:
        return 0, None
    d = get_dynamic_batch(config, 0, queued, oldest_s, now)
    return (d.take, None) if d.take else (0, d.wake_at)


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
    """One simulated run of ``requests`` requests through the batcher ``config``.

    The batcher's rules, as Triton 2.51 applies them:

    * The batcher fills a payload from the queue in arrival order, up to ``max_batch_size``.
      If that reaches a preferred size, the largest preferred size reached goes at once.
    * Otherwise, if at least the largest preferred size is queued (the batch cannot grow into
      a preferred size any more), everything up to ``max_batch_size`` goes.
    * Otherwise the payload waits until the OLDEST queued request has waited
      ``max_queue_delay_microseconds``; then whatever is queued goes. With a delay of 0 it
      goes at once.
    * Without preferred sizes Triton uses ``[max_batch_size]`` (its normalisation), so a batch
      leaves early only when it is full.
    * A payload goes to the instances' queue whether an instance is free or not (at most two
      per instance wait there); a free instance takes the first. Until one takes it, a payload
      sent short of a preferred size takes later arrivals, but only those that wake the
      batcher: with no delay, every arrival; with a delay, only once as many are queued as the
      next preferred size needs. The others wait for the next payload. An instance that has
      just finished takes the next payload at once (its thread is running); an idle one is
      woken first and takes it part way through the hand-off (:data:`TAKE_SHARE`).
    """

    config: BatcherConfig
    service: ServiceModel
    traffic: Traffic
    cpu: CpuModel = field(default_factory=CpuModel)
    requests: int = 20_000
    warmup_fraction: float = 0.1
    seed: int = 1

    def run(self) -> SimResult:
        return _Run(self).run()


# A run's events (arrivals, wake-ups, executions) are a handful per request. A config whose
# timers keep firing without answering requests (seen in the dashboard's search on a model
# with almost no traffic, where one run went on for minutes) is stopped at this many per
# request and reported as cut, not left to hold up every caller.
MAX_EVENTS_PER_REQUEST = 200
# A search's end (time.monotonic()), set by advisor.predict.recommend: a run still going then
# stops and is reported as cut, so one slow config cannot hold up the caller past its budget.
DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("deadline", default=None)
# Events between two reads of the clock against DEADLINE.
CLOCK_EVERY = 4096


class _Run:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.cut = False
        self.rng = random.Random(sim.seed)
        self.pool = _CpuPool(sim.cpu.cores)
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = 0
        self.jobs: dict[int, Callable[[], None]] = {}
        self.queue: deque[_Request] = deque()
        self.free = sim.config.instances
        self.sent = 0
        self.last_sent_at = 0.0
        self.completed = 0
        self.warm_at = math.inf
        self.batches: Counter[int] = Counter()
        self.finished: list[_Request] = []
        # Executions holding up the front end, and what waits for them to end.
        self.holding = 0
        self.deferred: list[Callable[[], None]] = []
        # The batcher (Triton's DynamicBatchScheduler): its current payload, whether that
        # takes no more requests, the queued count at which an arrival wakes it, the
        # payloads sent and not yet taken (at most 2 per instance), and its timed wait.
        self.payload = _Payload()
        self.saturated = False
        self.next_preferred = 0
        self.payloads: deque[_Payload] = deque()
        self.slots = 2 * sim.config.instances
        self.wait_generation = 0
        # Measured arrival gaps: 1 / their mean (0: none), and where the current run is.
        gaps = sim.cpu.arrival_gaps
        self.gap_scale = len(gaps) / sum(gaps) if gaps and sum(gaps) > 0 else 0.0
        self.gap_at = self.gap_run = 0

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
        budget = MAX_EVENTS_PER_REQUEST * self.sim.requests
        deadline = DEADLINE.get()
        while self.completed < self.sim.requests:
            budget -= 1
            if budget < 0:
                self.cut = True
                break
            if deadline is not None and budget % CLOCK_EVERY == 0 and time.monotonic() > deadline:
                self.cut = True
                break
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
        gaps = self.sim.cpu.arrival_gaps
        if self.gap_scale:  # runs of the measured gaps, scaled to the rate
            if self.gap_run <= 0:
                self.gap_at, self.gap_run = self.rng.randrange(len(gaps)), GAP_RUN
            gap = gaps[self.gap_at % len(gaps)]
            self.gap_at, self.gap_run = self.gap_at + 1, self.gap_run - 1
            return gap * mean * self.gap_scale
        share = self.sim.cpu.arrival_cluster_share
        if share > 0:  # a share comes with the one before; the others keep the rate
            if self.rng.random() < share:
                return 0.0
            mean /= 1 - share
        if traffic.cv == 0:
            return mean
        shape = 1.0 / (traffic.cv * traffic.cv)
        return self.rng.gammavariate(shape, mean / shape)

    def send(self, client: int) -> None:
        self.sent += 1
        self.last_sent_at = self.now
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

    def after_response(self, shared: float, then: Callable[[], None]) -> None:
        """The wait after an execution: half the latency outside Triton, plus its measured
        spread around the median: ``shared``, its execution's draw, and its own."""
        cpu = self.sim.cpu
        own = self.rng.choice(cpu.outside_own) if cpu.outside_own else 0.0
        wait = max(cpu.request_latency_s / 2 + shared + own, 0.0)
        if wait > 0:
            self.at(self.now + wait, then)
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
    # Ported from Triton 2.51's DynamicBatchScheduler (Enqueue, BatcherThread and
    # GetDynamicBatch) and the rate limiter's payload queue. What it implies, and the traces
    # show (27 % of the MLP's requests at 500/s were queued before a batch started and
    # left to a later one): a payload is sent when its oldest request's delay runs out or
    # it reaches a preferred size, whether an instance is free or not, and an arrival joins
    # a sent payload only if it wakes the batcher: with no delay, or once as many are queued
    # as the next preferred size needs; else it waits until an instance takes the payload.

    def held(self, action: Callable[[], None]) -> bool:
        """While an execution holds up the front end, ``action`` waits for it to end."""
        if self.holding:
            self.deferred.append(action)
            return True
        return False

    def enqueue(self, request: _Request, lagged: bool = False) -> None:
        if self.held(functools.partial(self.enqueue, request, lagged)):
            return
        lag = self.sim.cpu.queue_lag_s
        if not lagged:
            request.enqueued = self.now
            if lag > 0:  # counted as queued from now; the batcher sees it after the lag
                self.at(self.now + lag, functools.partial(self.enqueue, request, True))
                return
        self.queue.append(request)
        if len(self.payloads) < self.slots and (
            self.saturated
            or self.payload.state == "executing"
            or len(self.queue) >= self.next_preferred
        ):
            self.batcher()

    def notify(self) -> None:
        """Wake the batcher thread (a payload taken or executed)."""
        if self.held(self.notify):
            return
        self.batcher()

    def on_timer(self, generation: int) -> None:
        if generation != self.wait_generation:
            return  # woken before: that wait is over
        if self.held(functools.partial(self.on_timer, generation)):
            return
        self.batcher(by_timer=True)

    def batcher(self, by_timer: bool = False) -> None:
        """One wake-up of the batcher thread: it loops until it sleeps."""
        self.wait_generation += 1
        config = self.sim.config
        while True:
            if self.saturated or self.payload.state == "executing":
                self.payload, self.saturated, self.next_preferred = _Payload(), False, 0
            if not self.queue or len(self.payloads) >= self.slots:
                return  # until an arrival, or a payload taken, wakes it
            decision = get_dynamic_batch(
                config,
                len(self.payload.requests),
                len(self.queue),
                self.queue[0].enqueued,
                self.now,
                self.saturated,
            )
            self.saturated = decision.saturated
            if decision.next_preferred is not None:
                self.next_preferred = decision.next_preferred
            if decision.take:
                self.payload.requests += [self.queue.popleft() for _ in range(decision.take)]
                if self.payload.state == "new":
                    self.payload.state = "ready"
            if self.payload.state == "ready":
                self.payload.state = "sent"
                self.payload.by_timer = by_timer
                self.payloads.append(self.payload)
                self.assign()
            if decision.wake_at is not None:
                wake = functools.partial(self.on_timer, self.wait_generation)
                self.at(decision.wake_at + self.slack(), wake)
                return
            if not decision.take and not self.saturated:
                return  # nothing to do until woken

    def assign(self, running: bool = False) -> None:
        """Free instances take the sent payloads in order; each starts after the hand-off.

        An instance whose thread is ``running`` (it just finished a batch) takes the next
        payload at once, before the batcher, which must be woken, can add to it; an idle
        one is woken first and takes it :data:`TAKE_SHARE` into the hand-off, and the
        payload grows until then when arrivals wake the batcher.
        """
        for payload in list(self.payloads):
            if not self.free:
                return
            if payload.assigned:
                continue
            payload.assigned = True
            self.free -= 1
            gaps = self.sim.cpu.release_samples
            if running:
                self.take(payload)
            if running and gaps:
                start = self.now + self.rng.choice(gaps)
            elif payload.by_timer and self.sim.cpu.timer_slack_samples:
                start = self.now  # the measured overshoot held the hand-off too
            else:
                hand_off = self.dispatch_time()
                start = self.now + hand_off
                if not running and hand_off > 0:
                    self.at(
                        self.now + TAKE_SHARE * hand_off, functools.partial(self.taken, payload)
                    )
            execute = functools.partial(self.start_execution, payload)
            if start > self.now:
                self.at(start, execute)
            else:
                execute()

    def taken(self, payload: _Payload) -> None:
        """An idle instance's thread, woken, dequeues its payload (if not yet done)."""
        if payload.state != "executing":
            self.take(payload)

    def take(self, payload: _Payload) -> None:
        """The instance dequeues the payload: it takes no more requests."""
        self.payloads.remove(payload)
        payload.state = "executing"
        self.notify()

    def start_execution(self, payload: _Payload) -> None:
        if self.held(functools.partial(self.start_execution, payload)):
            return
        if payload.state != "executing":
            self.take(payload)
        # A request's queue wait ends here (Triton's COMPUTE_START).
        batch = payload.requests
        for request in batch:
            request.started = self.now
        if self.now >= self.warm_at:
            self.batches[len(batch)] += 1
        execution = _Execution()
        cpu = self.sim.cpu
        if cpu.hold_share > 0 and self.rng.random() < cpu.hold_share:
            onset = self.rng.choice(cpu.hold_onsets)
            self.at(self.now + onset, functools.partial(self.hold, execution))
        self.cpu_job(
            self.execution_work(len(batch)), functools.partial(self.executed, batch, execution)
        )

    def hold(self, execution: _Execution) -> None:
        if not execution.done:
            execution.held = True
            self.holding += 1

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

    def executed(self, batch: list[_Request], execution: _Execution) -> None:
        execution.done = True
        for request in batch:
            request.executed = self.now
        if execution.held:
            self.holding -= 1
            if not self.holding:
                waiting, self.deferred = self.deferred, []
                for action in waiting:
                    action()
        spread = self.sim.cpu.outside_spread
        shared = self.rng.choice(spread) if spread else 0.0
        for request in batch:
            self.cpu_job(
                self.front_end_work(),
                functools.partial(
                    self.after_response, shared, functools.partial(self.finish, request)
                ),
            )
        # The instance's thread goes back for the next payload (after the release) while
        # the execution's callback wakes the batcher thread.
        cpu = self.sim.cpu
        if cpu.release_s > 0 and not cpu.release_samples:
            # Not measured (inferred, or given): its mean, drawn exponential, as the front
            # end's unmeasured spread is. Every release traces show varies (their p99 several
            # times the median), and a constant one never lets closed-loop clients that
            # batch in pairs meet in a batch of four, as they do now and then.
            self.at(self.now + self.rng.expovariate(1 / cpu.release_s), self.released)
        else:
            self.released()
        self.notify()

    def released(self) -> None:
        self.free += 1
        self.assign(running=True)

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
            server_latencies_s=[r.executed - r.enqueued for r in measured],
            backlog=len(self.queue) + sum(len(p.requests) for p in self.payloads),
            offered=offered,
            offered_s=max(self.last_sent_at - self.warm_at, 0.0) if self.warm_at < end else 0.0,
            cut=self.cut,
        )
