"""Predictions for a config under given traffic, and the search for a better config.

:func:`predict` simulates one config; :func:`recommend` simulates a grid of configs
and keeps the best one whose p99 latency meets the user's bound.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from advisor.config import BatcherConfig
from advisor.model import ClosedLoop, CpuModel, OpenLoop, ServiceModel, Traffic
from advisor.simulator import DEADLINE, SimResult, Simulation

# auto: latency under open-loop traffic, throughput under closed-loop clients.
OBJECTIVES = ("auto", "latency", "headroom", "throughput", "cost")
# A preferred size reached by fewer executions than this share is "not reached".
REACHED = 0.01
SEEDS = 5
# The smallest predicted gain worth a change of config. The simulation's noise over seeds is
# not all of it: a p99 latency measured over 2,000 requests moved by up to 20 % between runs
# of the same config on this machine (batch_add_model at 200/s: traced p99 queue wait 699 to
# 1,060 us in seven runs), and the advisor's validation measured gains predicted at x1.13 to
# x1.18 as x0.91 to x1.06. Below it the advice is "keep it".
MIN_GAIN = 1.2


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
    # Sent to answered: the client's view when the time outside Triton is known
    # (client_terms); without it, queue + compute + the front end's CPU only.
    latency_p50_s: float
    latency_p99_s: float
    # The most this config serves (clients never waiting on each other); None without a
    # measured cost model: the capacity is unknown, never invented.
    throughput_limit_per_s: float | None
    # Busy core-seconds per inference (front end + execution): the cost objective.
    cpu_s_per_inference: float
    # Open loop: the offered rate exceeds what the config serves; queues grow.
    saturated: bool
    # Reaching Triton's queue to the execution's end: the server-side figure (what Triton's
    # statistics and traces measure), beside the client's.
    server_latency_p99_s: float = 0.0
    # Whether latency_p99_s includes the time outside Triton (the client, the network, the
    # front end), measured by a probe or a traced stored run. Without it the client's
    # latency is unknown, and said so.
    client_terms: bool = False
    # Stopped before its requests were done (the search's deadline, or the event budget):
    # its figures are of part of a run, so it is never recommended.
    cut: bool = False

    @property
    def client_latency_p99_s(self) -> float | None:
        return self.latency_p99_s if self.client_terms else None

    def latency_line(self) -> str:
        """Both figures, labelled: what a client sees, and Triton's side alone."""
        server = f"server-side p99 {self.server_latency_p99_s * 1e3:.2f} ms (queue + compute)"
        if self.client_terms:
            return (
                f"client p99 {self.latency_p99_s * 1e3:.2f} ms (queue + compute + time "
                f"outside Triton); {server}"
            )
        return f"client p99 unknown (time outside Triton not measured); {server}"

    def unreached_preferred(self) -> tuple[int, ...]:
        """The config's preferred sizes that the predicted distribution does not reach."""
        shares = self.batch_size_distribution
        return tuple(s for s in self.config.preferred_batch_sizes if shares.get(s, 0.0) < REACHED)

    def summary(self) -> dict[str, object]:
        return {
            "config": self.config.describe(),
            "traffic": self.traffic.describe(),
            "throughput_per_s": round(self.throughput_per_s, 1),
            "throughput_limit_per_s": None
            if self.throughput_limit_per_s is None
            else round(self.throughput_limit_per_s, 1),
            "mean_batch_size": round(self.mean_batch_size, 3),
            "batch_size_distribution": {
                s: round(f, 4) for s, f in sorted(self.batch_size_distribution.items())
            },
            "queue_delay_p50_us": round(self.queue_delay_p50_s * 1e6, 1),
            "queue_delay_p99_us": round(self.queue_delay_p99_s * 1e6, 1),
            # What a client sees (None: the time outside Triton was not measured), and
            # Triton's side alone (queue + compute).
            "client_latency_p99_us": None
            if self.client_latency_p99_s is None
            else round(self.client_latency_p99_s * 1e6, 1),
            "server_latency_p99_us": round(self.server_latency_p99_s * 1e6, 1),
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

    ``with_limit=False`` skips the second simulation that finds the throughput limit, and
    so does a CPU model without cores (no measured costs): the limit is None then.
    """
    cpu = cpu or CpuModel()
    result = Simulation(config, service, traffic, cpu, requests, seed=seed).run()
    limit = (
        max(throughput_limit(config, service, cpu, requests, seed), result.throughput_per_s)
        if with_limit and cpu.cores is not None
        else None
    )
    # Open loop: saturated when the run answered under 95 % of the rate offered, the
    # traffic's or the one its own arrivals came at, whichever is lower. Against the
    # traffic's alone, a short run (the autopilot's 800 requests) whose draws came a few %
    # slow read as saturated now and then, and a config served that reads saturated needs
    # no gain to be replaced (tests/advisor/test_simulator.py).
    offered = (
        min(traffic.rate_per_s, result.offered_per_s or math.inf)
        if isinstance(traffic, OpenLoop)
        else 0.0
    )
    saturated = result.cut or (
        isinstance(traffic, OpenLoop)
        and (result.throughput_per_s < 0.95 * offered or result.backlog > 4 * config.batch_limit)
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
        throughput_limit_per_s=limit,
        cpu_s_per_inference=_cpu_per_inference(result, service, cpu),
        saturated=saturated,
        server_latency_p99_s=quantile(result.server_latencies_s, 0.99),
        client_terms=knows_outside(cpu),
        cut=result.cut,
    )


def knows_outside(cpu: CpuModel) -> bool:
    """Whether ``cpu`` carries a measured time outside Triton (advisor.handoff.Outside)."""
    return bool(cpu.outside_spread or cpu.outside_own) or cpu.request_latency_s > 0


@dataclass(frozen=True)
class SearchSpace:
    """The configs :func:`recommend` tries (the cross product, deduplicated)."""

    max_batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    delays_us: tuple[int, ...] = (0, 100, 250, 500, 1000, 2000)
    # Empty: the current config's instance count only. The hand-offs are measured with the
    # instances the model runs; another count is extrapolated, and on the 2-core machine
    # here it went wrong: with a second MLP instance, 1.2 % of requests waited for the
    # other instance's execution to end although theirs was free (traced p99 queue wait
    # 1.1 ms, predicted 0.27 ms). Other counts are searched when asked (--try-instances).
    instances: tuple[int, ...] = ()
    # Per max_batch_size m: no preferred sizes, and [m/2, m].
    half_and_full_preferred: bool = True
    # The preferred sizes a config may name (a policy's; None: any). With them, [m/2, m] is
    # tried only when both are allowed, and the allowed sizes up to m are tried as a list.
    preferred_allowed: tuple[int, ...] | None = None

    def instance_counts(self, current: BatcherConfig) -> tuple[int, ...]:
        return self.instances or (current.instances,)

    def configs(self, current: BatcherConfig) -> Iterable[BatcherConfig]:
        seen = set()
        for m, delay, count in itertools.product(
            self.max_batch_sizes, self.delays_us, self.instance_counts(current)
        ):
            for preferred in self._preferred(m):
                config = BatcherConfig(m, preferred, delay if m > 1 else 0, count)
                key = (m, preferred, config.max_queue_delay_us, count)
                if key not in seen:
                    seen.add(key)
                    yield config

    def _preferred(self, m: int) -> list[tuple[int, ...]]:
        options: list[tuple[int, ...]] = [()]
        if self.half_and_full_preferred and m >= 2:
            options.append((m // 2, m))
        if self.preferred_allowed is None:
            return options
        allowed = set(self.preferred_allowed)
        options = [o for o in options if set(o) <= allowed]
        fitting = tuple(s for s in sorted(allowed) if s <= m)
        if fitting and fitting not in options:
            options.append(fitting)
        return options


def resolve_objective(objective: str, traffic: Traffic, cpu: CpuModel | None) -> str:
    """The objective ``auto`` stands for, checked against what is known; ValueError (one
    line) for one that cannot be computed."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r} (use one of {', '.join(OBJECTIVES)})")
    open_loop = isinstance(traffic, OpenLoop)
    if objective == "auto":
        return "latency" if open_loop else "throughput"
    if objective == "throughput" and open_loop:
        # Under open-loop traffic every unsaturated config serves the offered rate: the
        # throughput that can differ is the capacity, i.e. the headroom.
        objective = "headroom"
    if objective == "headroom":
        if not open_loop:
            raise ValueError("the headroom objective is for open-loop traffic (give --rate)")
        if cpu is None or cpu.cores is None:
            raise ValueError(
                "capacity: unknown (run with --probe): the headroom objective needs measured costs"
            )
    return objective


def objective_value(prediction: Prediction, objective: str) -> float:
    """Bigger is better."""
    if objective == "latency":
        return -prediction.latency_p99_s
    if objective == "headroom":
        return prediction.throughput_limit_per_s or 0.0
    if objective == "throughput":
        if isinstance(prediction.traffic, OpenLoop):
            return prediction.throughput_limit_per_s or 0.0
        return prediction.throughput_per_s
    if objective == "cost":
        return -prediction.cpu_s_per_inference
    raise ValueError(f"unknown objective {objective!r} (use one of {', '.join(OBJECTIVES)})")


@dataclass(frozen=True)
class Interval:
    """An objective over seeds (bigger is better), with the seeds' predictions."""

    runs: tuple[Prediction, ...]
    objective: str

    @property
    def values(self) -> list[float]:
        return [objective_value(p, self.objective) for p in self.runs]

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    def beats(self, other: Interval) -> bool:
        """Better at every seed than ``other`` at any: a difference beyond the noise."""
        return self.low > other.high

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def user_terms(self) -> tuple[float, float, float]:
        """(mean, low, high) in the objective's own unit: ms, requests/s or us."""
        scale = {"latency": -1e3, "cost": -1e6}.get(self.objective, 1.0)
        values = sorted(v * scale for v in self.values)
        return sum(values) / len(values), values[0], values[-1]


UNITS = {
    "latency": ("p99 latency", "ms"),
    "headroom": ("capacity", "/s"),
    "throughput": ("throughput", "/s"),
    "cost": ("CPU per inference", "us"),
}


def knobs_changed(a: BatcherConfig, b: BatcherConfig) -> int:
    return sum(
        (
            a.max_batch_size != b.max_batch_size,
            a.effective_preferred != b.effective_preferred,
            a.delay_s != b.delay_s,
            a.instances != b.instances,
        )
    )


@dataclass(frozen=True)
class Recommendation:
    current: Prediction
    best: Prediction | None  # None: no config meets the bound; current: keep it
    objective: str
    p99_bound_s: float
    considered: int
    candidates: list[Prediction] = field(default_factory=list, repr=False)
    current_interval: Interval | None = None
    best_interval: Interval | None = None
    # Candidates left out because a preferred size of theirs is not reached.
    unreachable: int = 0
    # The smallest gain a change needed (MIN_GAIN unless asked otherwise).
    min_gain: float = MIN_GAIN
    # Set when the search ran out of its time budget: configs of the space never simulated.
    skipped: int = 0
    budget_s: float | None = None

    def cut_note(self) -> str | None:
        """One line when the search ran past its time budget, else None."""
        if self.budget_s is None:
            return None
        return (
            f"the search stopped at its {self.budget_s:g} s budget: {self.skipped} configs of "
            "the space not simulated, and runs still going were cut (a cut run is never "
            "recommended)"
        )

    @property
    def keep(self) -> bool:
        return self.best is self.current

    @property
    def seeds(self) -> int:
        return len(self.current_interval.runs) if self.current_interval else 1

    @property
    def gain_ratio(self) -> float:
        """Objective of the best config over the current one (>1 is better), on the means
        over seeds."""
        if self.best is None:
            return math.nan
        if self.keep:
            return 1.0
        if self.current_interval and self.best_interval:
            return _ratio(self.current_interval.mean, self.best_interval.mean)
        return _ratio(
            objective_value(self.current, self.objective),
            objective_value(self.best, self.objective),
        )

    def measure_name(self) -> tuple[str, str]:
        """The objective's name and unit; a latency says whose it is."""
        name, unit = UNITS[self.objective]
        if self.objective == "latency":
            name = (
                "client p99 latency"
                if self.current.client_terms
                else "p99 latency without the time outside Triton"
            )
        return name, unit

    def noise_line(self, which: str = "current") -> str:
        """'p99 latency 4.10 ms (3.90-4.40 over 5 seeds)' for the current or best config."""
        interval = self.current_interval if which == "current" else self.best_interval
        if interval is None:
            return ""
        name, unit = self.measure_name()
        mean, low, high = interval.user_terms()
        digits = 2 if unit == "ms" else 0
        return (
            f"{name} {mean:,.{digits}f} {unit} ({low:,.{digits}f} to {high:,.{digits}f} "
            f"over {len(interval.runs)} seeds)"
        ).replace(" /s", "/s")

    def gain_line(self) -> str:
        """The gain in the user's terms, e.g. 'p99 latency 4.10 ms -> 2.05 ms (x2.00)'."""
        if self.best is None or self.keep or not self.current_interval or not self.best_interval:
            return ""
        name, unit = self.measure_name()
        now, best = self.current_interval.user_terms()[0], self.best_interval.user_terms()[0]
        digits = 2 if unit == "ms" else 0
        extra = ""
        traffic = self.current.traffic
        if self.objective == "headroom" and isinstance(traffic, OpenLoop):
            extra = (
                f", headroom x{now / traffic.rate_per_s:.2f} -> x{best / traffic.rate_per_s:.2f}"
                f" over the offered {traffic.rate_per_s:,.0f}/s"
            )
        if self.objective == "throughput" and isinstance(traffic, ClosedLoop):
            extra = f" at concurrency {traffic.concurrency}"
        return (
            f"{name} {now:,.{digits}f} {unit} -> {best:,.{digits}f} {unit}".replace(" /s", "/s")
            + extra
        )


def meets(prediction: Prediction, p99_bound_s: float) -> bool:
    return not prediction.saturated and prediction.latency_p99_s <= p99_bound_s


def _same(a: BatcherConfig, b: BatcherConfig) -> bool:
    return knobs_changed(a, b) == 0


def _ratio(now: float, best: float) -> float:
    """The gain of objective value ``best`` over ``now`` (>1 is better). The "smaller is
    better" objectives are stored negated: their ratio is now / best."""
    if now == 0:
        return math.inf
    return best / now if best > 0 else now / best


@dataclass(frozen=True)
class _Job:
    """One simulation of the search, as plain values, so that a worker process can run it.

    ``bound_s`` set: a candidate, first simulated without its throughput limit, and again
    with it where it meets the bound and ``with_limit`` is asked. ``deadline``: the
    search's end (time.monotonic(), one clock for every process); a job that starts past
    it is skipped (None), and a run still going then is cut."""

    config: BatcherConfig
    traffic: Traffic
    service: ServiceModel
    cpu: CpuModel | None
    requests: int
    seed: int
    with_limit: bool
    deadline: float | None
    bound_s: float | None = None

    def __call__(self) -> Prediction | None:
        if self.bound_s is not None and self.deadline is not None:
            if time.monotonic() > self.deadline:
                return None
        token = DEADLINE.set(self.deadline)
        try:
            args = (self.config, self.traffic, self.service, self.cpu, self.requests, self.seed)
            if self.bound_s is None:
                return predict(*args, with_limit=self.with_limit)
            quick = predict(*args, with_limit=False)
            if meets(quick, self.bound_s) and self.with_limit:
                return predict(*args)
            return quick
        finally:
            DEADLINE.reset(token)


def _run(job: _Job) -> Prediction | None:
    return job()


def _run_all(jobs: Sequence[_Job], pool: ProcessPoolExecutor | None) -> list[Prediction | None]:
    """Every job's prediction, in the jobs' order, in ``pool`` when there is one: each job's
    simulations are seeded, so the answers are the same in any process."""
    if pool is None:
        return [job() for job in jobs]
    return list(pool.map(_run, jobs))


def _pool(workers: int) -> ProcessPoolExecutor | None:
    """Worker processes for the search, or None for one (run in this process). Forked from
    a fresh server process (``forkserver``), never from the caller, which may hold threads
    (the dashboard's, the autopilot's) whose locks a fork would copy held. Also None where
    the system gives no process pool (no POSIX semaphores in a sandbox): the same search,
    in this process."""
    if workers <= 1:
        return None
    try:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["advisor.predict"])
        return ProcessPoolExecutor(max_workers=workers, mp_context=context)
    except (OSError, ImportError, NotImplementedError, ValueError):
        return None


def recommend(
    current: BatcherConfig,
    traffic: Traffic,
    service: ServiceModel,
    p99_bound_s: float,
    cpu: CpuModel | None = None,
    objective: str = "auto",
    space: SearchSpace | None = None,
    requests: int = 5_000,
    seed: int = 1,
    seeds: int = SEEDS,
    finalists: int = 6,
    min_gain: float = MIN_GAIN,
    budget_s: float | None = None,
    workers: int = 1,
) -> Recommendation:
    """The config of ``space`` best for ``objective`` with p99 latency <= the bound, when
    it beats the current config beyond the simulation's noise (see the module doc).

    ``budget_s``: wall time after which no further config is simulated and a run still going
    is cut (:data:`advisor.simulator.DEADLINE`); the recommendation says so
    (:meth:`Recommendation.cut_note`). ``workers``: processes the simulations run in (the
    recommendation is the same for any count; 1 runs them here)."""
    deadline = None if budget_s is None else time.monotonic() + budget_s
    token = DEADLINE.set(deadline)
    pool = _pool(workers)
    try:
        return _recommend(
            current,
            traffic,
            service,
            p99_bound_s,
            cpu,
            objective,
            space,
            requests,
            seed,
            seeds,
            finalists,
            min_gain,
            deadline,
            budget_s,
            pool,
        )
    finally:
        DEADLINE.reset(token)
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def _recommend(
    current: BatcherConfig,
    traffic: Traffic,
    service: ServiceModel,
    p99_bound_s: float,
    cpu: CpuModel | None,
    objective: str,
    space: SearchSpace | None,
    requests: int,
    seed: int,
    seeds: int,
    finalists: int,
    min_gain: float,
    deadline: float | None,
    budget_s: float | None,
    pool: ProcessPoolExecutor | None = None,
) -> Recommendation:
    objective = resolve_objective(objective, traffic, cpu)
    if p99_bound_s <= 0:
        raise ValueError(f"the p99 latency bound must be positive, got {p99_bound_s}")
    space = space or SearchSpace()
    limit = objective == "headroom"

    def job(config: BatcherConfig, seed: int, with_limit: bool, bound: float | None = None) -> _Job:
        return _Job(config, traffic, service, cpu, requests, seed, with_limit, deadline, bound)

    def seeded(config: BatcherConfig) -> list[_Job]:
        # Seeds other than the search's: the finalists won the search on its seed, partly by
        # its luck (the best of many noisy p99s is low by chance); judged again on that
        # seed, the winner's gain would be too high.
        return [job(config, seed + i, limit) for i in range(1, seeds + 1)]

    def intervals_of(runs: Sequence[Prediction | None]) -> list[Interval]:
        found = [p for p in runs if p is not None]  # only candidates are ever skipped
        return [
            Interval(tuple(found[k : k + seeds]), objective) for k in range(0, len(found), seeds)
        ]

    # The current config, its seeds and every candidate are independent: one batch.
    others = [c for c in space.configs(current) if not _same(c, current)]
    first = _run_all(
        [job(current, seed, True), *seeded(current)]
        + [job(c, seed, limit, p99_bound_s) for c in others],
        pool,
    )
    now = first[0]
    assert now is not None  # the current config's jobs are never skipped
    [now_interval] = intervals_of(first[1 : 1 + seeds])
    quick_runs = first[1 + seeds :]
    candidates, unreachable = [now], 0
    fitting = []
    skipped = sum(p is None for p in quick_runs)
    out_of_time = skipped > 0
    for quick in quick_runs:
        if quick is None:
            continue
        candidates.append(quick)
        if not meets(quick, p99_bound_s):
            continue
        if quick.unreached_preferred():
            unreachable += 1
            continue
        fitting.append(quick)
    fitting.sort(key=lambda p: objective_value(p, objective), reverse=True)
    # A finalist with a run cut by the deadline has figures of part of a run (a throughput
    # of 0 divided the gain by zero): never recommended.
    finals = [j for p in fitting[:finalists] for j in seeded(p.config)]
    intervals = intervals_of(_run_all(finals, pool))
    intervals = [i for i in intervals if not any(p.cut for p in i.runs)]
    now_meets = meets(now, p99_bound_s)
    better = (
        [
            i
            for i in intervals
            if i.beats(now_interval) and _ratio(now_interval.mean, i.mean) >= min_gain
        ]
        if now_meets
        else intervals
    )
    best_interval: Interval | None = None
    if better:
        top = max(better, key=lambda i: i.mean)
        # Knobs whose change is within the winner's noise do not matter: change fewest.
        equivalent = [i for i in better if i.overlaps(top)]
        best_interval = min(
            equivalent, key=lambda i: (knobs_changed(i.runs[0].config, current), -i.mean)
        )
    if best_interval is not None:
        best: Prediction | None = best_interval.runs[0]
        if best is not None and best.throughput_limit_per_s is None and cpu and cpu.cores:
            best = predict(best.config, traffic, service, cpu, requests, seed)  # its capacity
    else:
        best = now if now_meets else None
    return Recommendation(
        now,
        best,
        objective,
        p99_bound_s,
        len(candidates),
        candidates,
        now_interval,
        best_interval,
        unreachable,
        min_gain,
        skipped,
        # Past the deadline in the loop or in the finalists' runs: either way runs were cut.
        budget_s if out_of_time or (deadline is not None and time.monotonic() > deadline) else None,
    )
