"""The present, simulated and checked against the window it was fitted from.

Every prediction starts from the config being served, so the simulation must reproduce it
first. Triton's compute counters miss the time an instance stays unavailable between
executions (backend IPC, response sending, the batcher's dispatch): where the model's own CPU
work shares the cores, that time batches requests the simulation would serve alone. And
open-loop requests reach the batcher clustered, which a traffic law fitted over 200 ms bins
cannot see. :func:`check_present` simulates the served config under the fitted traffic and
costs, infers what the counters miss (:attr:`~advisor.model.CpuModel.release_s`; where that
alone cannot, :attr:`~advisor.model.CpuModel.queue_lag_s` or
:attr:`~advisor.model.CpuModel.arrival_cluster_share` beside it) so that the simulated average
batch and mean queue match the measured ones, and returns a :class:`PresentCheck`: each figure
simulated against measured, what was inferred, and a verdict against stated bounds. A present
still off is never a base for advice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from advisor.config import BatcherConfig
from advisor.model import CpuModel, OpenLoop, ServiceModel, Traffic
from advisor.simulator import SimResult, Simulation
from observe.window import Window
from tritonapi.stats import ModelStats

# The bounds of the verdict, relative to the measured figure. The average batch is what a
# change of config moves and what every prediction is judged on, so it is held tight; a mean
# queue is made of the hand-offs' tails, which vary between windows of one config far more.
BATCH_BOUND = 0.10
QUEUE_BOUND = 0.25
# A mean queue shorter than this is within the hand-offs' own spread: its error is taken
# against this floor, so that 8 us against 5 us is not called a miss of 60 %.
QUEUE_FLOOR_S = 20e-6
# A window of few requests measures a mean queue that varies between windows of one config
# by more than QUEUE_BOUND (requests queue behind one another, so their waits come in runs).
# The queue's bound is then this many spreads of the simulated present's own means over
# windows of as many consecutive requests (window_spread), when that is wider; fewer
# simulated windows than WINDOWS_FOR_SPREAD give no spread.
QUEUE_SPREADS = 2.0
WINDOWS_FOR_SPREAD = 8
# The widest the queue's bound is widened to. The spread is the simulated present's own:
# where that present queues far more than measured (costs the server does not have), its
# waits come in far longer runs than the measured ones, and a bound widened by them would
# accept any miss. At most a simulated mean twice the measured one.
QUEUE_WIDEST = 1.0
# The window's executions per second bound the hidden time (an instance cannot be busy or
# unavailable more than all the time); its rates are noisy over a short window, so the
# search may go this far past that bound.
CEILING_MARGIN = 1.25
# Requests per simulated present: enough that the average batch moves by well under 1 %
# between seeds, few enough that a check costs a small part of the search.
PRESENT_REQUESTS = 10_000
# Requests per simulation while the inferred parts are searched for (0: as many as the
# verdict's). The search compares points of one seed, whose figures move together with
# what is inferred, so half the requests find the same point at about half the cost (a
# quarter found worse ones: bench/present_replay.py); the point found is then simulated
# again with PRESENT_REQUESTS, and that is what is judged and shown.
SEARCH_REQUESTS = 5_000
# The quick search (false position on the two errors' sum) stops when that sum, in units
# of the bounds, is this close to 0, or after QUICK_STEPS simulations past the two ends.
QUICK_TOLERANCE = 0.05
QUICK_STEPS = 6
# Where the quick search leaves a figure off, the thorough one first tries this many equal
# steps from no hidden time to the ceiling (the figures need not move smoothly with it:
# clients in lockstep keep one batch size over a range, then jump), then narrows the best
# step's neighbourhood to this width, relative to the ceiling.
GRID_STEPS = 4
SEARCH_WIDTH = 0.02

# A point of the search: (release, queue lag, clustered share).
Key = tuple[float, float, float]

CALIBRATED = "calibrated"
OFF = "off"
NOT_EXECUTED = "not executed yet"

HIDDEN = "unavailable after each execution"
LAG = "queued before the batcher sees each request"
# Where no unavailability brings the queue up to measured without batching more than
# measured, the lag is fitted at the unavailability that matches the batch: this many
# corrections of it by the queue still missing (each one simulation).
LAG_STEPS = 3
# Clustered arrivals (CpuModel.arrival_cluster_share). Their signature, at the release the
# search ended on: a batch shorter and a queue longer than measured, each by more than
# CLUSTER_TRIGGER in units of its bound. A release grows both, so none brings both in,
# while arrivals that come together batch more and queue less. The share is fitted wherever
# the signature shows, the present within its bounds or not (CLUSTER_ONLY_WHERE_OFF False):
# a present the release alone brings just within them still predicts a longer delay's
# batches short where arrivals are clustered. Fitted only where the present is off, the
# check costs fewer simulations and predicts other configs worse
# (docs/validation/advisor-blind.md has both; bench/present_replay.py compares them).
CLUSTER_TRIGGER = 0.25
CLUSTER_ONLY_WHERE_OFF = False
# The fit (Broyden's method on the two errors over the release and the share) starts from
# one simulation a step away in each coordinate: these steps, in the fit's normalized
# coordinates (the release over the ceiling, the share over CLUSTER_MOST), long enough that
# the draws' own noise does not swamp the slopes they measure.
CLUSTER_PROBE = (0.25, 0.1)
# Then at most this many steps (one simulation each) ...
CLUSTER_STEPS = 4
# ... stopping where both errors are within this, in units of their bounds.
CLUSTER_TOLERANCE = 0.1
# The most share inferred: half the arrivals with the one before is more clustering than
# traces of sends on a schedule show, so a present that needs more misses for another reason.
CLUSTER_MOST = 0.5
CLUSTERED = "of requests reaching Triton with the one before"
# The figures' names in --json, with their units, and the scale to those units.
JSON_KEYS = {
    "average batch": "average_batch",
    "mean queue": "mean_queue_us",
    "executions per second": "executions_per_s",
}
JSON_SCALE = {"mean queue": 1e6}


@dataclass(frozen=True)
class Measured:
    """What Triton's statistics showed for the served config over the window."""

    avg_batch: float
    size_shares: Mapping[int, float]  # batch size -> share of executions
    mean_queue_s: float  # per request, QUEUE_START to COMPUTE_START
    executions_per_s: float
    requests: int = 0  # whose queue times make the mean (0: not known)

    def __post_init__(self) -> None:
        if min(self.avg_batch, self.mean_queue_s, self.executions_per_s) < 0:
            raise ValueError(f"measured figures must be >= 0: {self}")
        if any(size < 1 or share < 0 for size, share in self.size_shares.items()):
            raise ValueError(f"batch size shares must be of sizes >= 1: {self.size_shares}")

    @classmethod
    def from_counts(
        cls,
        executions: Mapping[int, int],
        queue_s: float,
        seconds: float,
        queued: int | None = None,
    ) -> Measured:
        """From a window's counts: executions per batch size, the summed queue time of the
        ``queued`` requests (one per batch row when not given) and the window's length."""
        n = sum(executions.values())
        rows = sum(size * count for size, count in executions.items())
        requests = rows if queued is None else queued
        return cls(
            avg_batch=rows / n if n else 0.0,
            size_shares={s: c / n for s, c in sorted(executions.items())} if n else {},
            mean_queue_s=queue_s / requests if requests else 0.0,
            executions_per_s=n / seconds if seconds > 0 else 0.0,
            requests=requests,
        )

    @classmethod
    def from_stats(cls, delta: ModelStats, seconds: float) -> Measured:
        """From the statistics API's difference over a window of ``seconds``."""
        queue = delta.phase("queue")
        return cls.from_counts(delta.executions_by_size(), queue.seconds, seconds, queue.count)

    @classmethod
    def from_window(cls, window: Window) -> Measured:
        """From any source's window: the statistics delta where the window holds one, else
        its counts (Prometheus', a stored run's) over the part of it with traffic."""
        if window.delta is not None:
            return cls.from_stats(window.delta, window.seconds)
        return cls.from_counts(
            {size: round(n) for size, n in window.executions_by_size.items()},
            window.queue_s,
            window.active_seconds or window.seconds,
            round(window.requests_ok),
        )

    @property
    def executed(self) -> bool:
        return self.executions_per_s > 0 and self.avg_batch > 0


@dataclass(frozen=True)
class Figure:
    """One figure of the present, simulated against measured; ``bound`` is the relative
    error the verdict allows (None: shown, not judged)."""

    name: str
    simulated: float
    measured: float
    bound: float | None = None
    floor: float = 0.0  # the error is taken against at least this
    widened: str = ""  # why the bound is wider than its constant, when it is

    @property
    def error(self) -> float:
        """Relative to the measured figure (or the floor, when that is larger)."""
        scale = max(self.measured, self.floor)
        return (self.simulated - self.measured) / scale if scale > 0 else 0.0

    @property
    def within(self) -> bool:
        return self.bound is None or abs(self.error) <= self.bound


@dataclass(frozen=True)
class PresentCheck:
    """The served config's present, simulated against measured, and what was inferred.

    ``cpu`` is the cost model with the inferred parts in place: the one to predict other
    configs with, when :attr:`recommend_ready`."""

    status: str  # CALIBRATED, OFF or NOT_EXECUTED
    figures: tuple[Figure, ...] = ()  # average batch, mean queue, executions per second
    shares: tuple[tuple[int, float, float], ...] = ()  # (size, simulated, measured)
    inferred: tuple[tuple[str, float], ...] = ()  # (what, seconds)
    cpu: CpuModel | None = None
    # The inferred share of arrivals that come with the one before (cpu carries it too).
    clustered: float = 0.0
    help: tuple[str, ...] = ()
    simulations: int = 0
    # Set when traces measured the release: nothing is inferred over them.
    traced: bool = False
    # Why a present stays off, when the search can tell.
    note: str = ""

    @property
    def recommend_ready(self) -> bool:
        return self.status == CALIBRATED

    @property
    def off(self) -> tuple[str, ...]:
        """The judged figures outside their bounds."""
        return tuple(f.name for f in self.figures if not f.within)

    def figure(self, name: str) -> Figure:
        return next(f for f in self.figures if f.name == name)

    def line(self) -> str:
        """One line a person reads at a glance."""
        if self.status == NOT_EXECUTED:
            why = f"; {self.note}" if self.note else ""
            return (
                f"present: not executed yet (no executions in the window{why}): nothing recommended"
            )
        batch, queue = self.figure("average batch"), self.figure("mean queue")
        text = (
            f"present: batch {batch.simulated:.2f} vs {batch.measured:.2f} measured"
            f"{_miss(batch)}, queue {_ms(queue.simulated, queue.measured)} ms{_miss(queue)}"
        )
        if self.traced:
            text += " (unavailability after executions from traces)"
        elif self.inferred:
            parts = [f"{v * 1e3:.2f} ms {what}" for what, v in self.inferred]
            if self.clustered:
                parts.append(f"{self.clustered:.0%} {CLUSTERED}")
            text += f" (inferred: {', '.join(parts)})"
        if self.status == OFF:
            why = f" ({self.note})" if self.note else ""
            text += f"; off{why}, nothing recommended: try {', '.join(self.help)}"
        return text

    def to_json(self) -> dict[str, object]:
        """The same for ``--json``."""
        figures = {
            JSON_KEYS[f.name]: {
                "simulated": round(f.simulated * JSON_SCALE.get(f.name, 1.0), 3),
                "measured": round(f.measured * JSON_SCALE.get(f.name, 1.0), 3),
                "error": round(f.error, 4),
                "bound": f.bound,
                "within": f.within,
            }
            for f in self.figures
        }
        return {
            "status": self.status,
            "recommend_ready": self.recommend_ready,
            "figures": figures,
            "batch_size_shares": {
                s: {"simulated": round(sim, 4), "measured": round(meas, 4)}
                for s, sim, meas in self.shares
            },
            "inferred_us": {what.replace(" ", "_"): round(v * 1e6, 1) for what, v in self.inferred},
            "inferred_clustered_share": round(self.clustered, 3),
            "from_traces": self.traced,
            "note": self.note,
            "off": list(self.off),
            "help": list(self.help),
            "simulations": self.simulations,
            "line": self.line(),
        }


def check_present(
    config: BatcherConfig,
    traffic: Traffic,
    service: ServiceModel,
    measured: Measured,
    cpu: CpuModel | None = None,
    requests: int = PRESENT_REQUESTS,
    seed: int = 1,
    stored: bool = False,
    search_requests: int | None = None,
) -> PresentCheck:
    """Simulate the served ``config`` under the fitted ``traffic`` and costs, infer the time
    an instance stays unavailable after each execution so that the simulated present
    matches ``measured``, and judge the match. Where no such time matches both the batch and
    the queue, and the queue is short, a queue lag is fitted at the time that matches the
    batch (:func:`_fit_lag`) and kept if it brings both within their bounds. Where the
    release alone leaves a figure off with the batch short and the queue long
    (:func:`clustered_signature`: open-loop arrivals with no measured gaps, which reach
    Triton clustered), the release is fitted again beside a share of arrivals that come
    with the one before (:func:`_fit_clustering`), kept if its larger error is smaller.

    The hidden time is searched between 0 and what the measured executions per second leave
    of each instance's time (:func:`ceiling`), for the value whose larger error, the batch's
    or the queue's in units of its bound, is smallest (:func:`_search`). Every simulation
    uses the same seed, so the figures move with the hidden time and not with the draws.
    Where traces measured the release (``cpu.release_samples``), nothing is inferred over
    them: the present is checked as it is. ``stored``: the measurement is of stored load
    runs, which cannot be watched longer (what would help is said for them).
    ``search_requests``: the requests each simulation of the search runs (default
    :data:`SEARCH_REQUESTS`); the point it ends on is judged on ``requests``.
    """
    cpu = cpu or CpuModel()
    if not measured.executed:
        return not_executed(cpu)
    traced = bool(cpu.release_samples)
    searched = SEARCH_REQUESTS if search_requests is None else search_requests
    searched = min(searched, requests) if searched > 0 and not traced else requests

    def trial(hidden_s: float, lag_s: float, share: float) -> CpuModel:
        if traced:
            return cpu
        return replace(cpu, release_s=hidden_s, queue_lag_s=lag_s, arrival_cluster_share=share)

    def simulated(key: Key, n: int) -> SimResult:
        return Simulation(config, service, traffic, trial(*key), n, seed=seed).run()

    def within(result: SimResult) -> bool:
        return all(f.within for f in present_figures(result, measured))

    def search(n: int) -> tuple[Key, str, dict[Key, SimResult]]:
        return _infer(traced, cpu, config, service, traffic, measured, lambda k: simulated(k, n))

    key, note, runs = search(searched)
    result, simulations = runs[key], len(runs)
    if searched < requests:
        # The search's point judged on the verdict's requests. Where it is off, the search
        # is done again on the verdict's requests: the cheaper search never turns a present
        # off, and an off present's inferred parts and why are the full search's.
        result = simulated(key, requests)
        simulations += 1
        if not within(result):
            key, note, runs = search(requests)
            result, simulations = runs[key], simulations + len(runs)
    hidden, lag, share = key
    calibrated = trial(hidden, lag, share)
    figures = present_figures(result, measured)
    off = tuple(f.name for f in figures if not f.within)
    inferred = ((HIDDEN, hidden),) + (((LAG, lag),) if lag else ())
    return PresentCheck(
        status=OFF if off else CALIBRATED,
        figures=figures,
        shares=_shares(result, measured),
        inferred=() if traced else inferred,
        cpu=calibrated,
        clustered=share,
        help=_help(cpu, stored) if off else (),
        simulations=simulations,
        traced=traced,
        note=note if off else "",
    )


def _infer(
    traced: bool,
    cpu: CpuModel,
    config: BatcherConfig,
    service: ServiceModel,
    traffic: Traffic,
    measured: Measured,
    run: Callable[[Key], SimResult],
) -> tuple[Key, str, dict[Key, SimResult]]:
    """The search of :func:`check_present`, each point simulated by ``run``: the point
    ``(release, lag, share)`` it ends on, why the present stays off where nothing brings it
    in (or ""), and every point it simulated."""
    runs: dict[Key, SimResult] = {}

    def simulate(hidden_s: float, lag_s: float = 0.0, share: float = 0.0) -> SimResult:
        key = (hidden_s, lag_s, share)
        if key not in runs:
            runs[key] = run(key)
        return runs[key]

    def errors(hidden_s: float, lag_s: float = 0.0, share: float = 0.0) -> tuple[float, float]:
        """The batch's and the queue's errors, each in units of its bound."""
        batch, queue = present_figures(simulate(hidden_s, lag_s, share), measured)[:2]
        assert batch.bound is not None and queue.bound is not None
        return batch.error / batch.bound, queue.error / queue.bound

    def settled(at: tuple[float, float]) -> bool:
        """The quick root is final: within the bounds, or clustering will be fitted from it."""
        return _worst(at) <= 1 or clustered_signature(traffic, cpu, *at)

    note, lag, share = "", 0.0, 0.0
    if traced:
        hidden = cpu.release_s
        simulate(hidden)
    else:
        high = ceiling(config, service, measured)
        hidden = _search(errors, high, settled)
        batch_error, queue_error = at = errors(hidden)
        if (
            high > 0
            and (_worst(at) > 1 or not CLUSTER_ONLY_WHERE_OFF)
            and clustered_signature(traffic, cpu, batch_error, queue_error)
        ):
            release, fitted = _fit_clustering(errors, hidden, high)
            if _worst(errors(release, 0.0, fitted)) < _worst(at):
                hidden, share = release, fitted
        elif _worst(at) > 1 and queue_error < 0:
            lagged = _fit_lag(errors, simulate, measured, high)
            if lagged is not None and _worst(errors(*lagged)) <= 1:
                hidden, lag = lagged
        if not lag and not share:
            note = _why_off(errors, hidden, high)
    return (hidden, lag, share), note, runs


def not_executed(cpu: CpuModel | None = None, note: str = "") -> PresentCheck:
    """The check of a window in which the model executed nothing: no present to reproduce,
    so nothing to stand a prediction on (``note``: what would help)."""
    return PresentCheck(
        NOT_EXECUTED, cpu=cpu or CpuModel(), help=("a window with traffic",), note=note
    )


def _fit_lag(
    errors: Callable[[float, float], tuple[float, float]],
    simulate: Callable[[float, float], SimResult],
    measured: Measured,
    high: float,
) -> tuple[float, float] | None:
    """The unavailability that matches the measured average batch, and the queue lag that
    then brings the mean queue up to measured: ``(release, lag)``, or None when no
    unavailability matches the batch or no lag is missing.

    Unavailability after executions raises the average batch and the mean queue together;
    a window whose queue is longer than any unavailability that keeps its batches as small
    as measured waited where no batch grows: counted as queued before the batcher could
    take the request (a front end descheduled between stamping the queue start and handing
    the request over, on cores the model's own work shares). A lag the same for every
    request adds to each one's queue and forms no other batch, so it is fitted after the
    batch, by the queue still missing."""
    release = _quick(lambda u: errors(u, 0.0)[0], high)
    if release is None:
        return None
    lag = 0.0
    for _ in range(LAG_STEPS):
        delays = simulate(release, lag).queue_delays_s
        missing = measured.mean_queue_s - (sum(delays) / len(delays) if delays else 0.0)
        lag = max(lag + missing, 0.0)
        if abs(errors(release, lag)[1]) <= QUICK_TOLERANCE:
            break
    return (release, lag) if lag > 0 else None


def _why_off(errors: Callable[[float], tuple[float, float]], hidden: float, high: float) -> str:
    """Which figure no hidden time brings within its bound, and which way, if one is."""
    names = ("average batch", "mean queue")
    at = errors(hidden)
    if high <= 0 and max(abs(e) for e in at) > 1:
        return "the fitted compute alone fills the instances at the measured executions per second"
    for k, name in enumerate(names):
        if abs(at[k]) <= 1:
            continue
        if errors(0.0)[k] > 1:
            return (
                f"{name} larger than measured with no hidden time: the traffic or cost fit is off"
            )
        if high > 0 and errors(high)[k] < -1:
            return f"{name} short of measured with the most hidden time the window allows"
    return ""


def ceiling(config: BatcherConfig, service: ServiceModel, measured: Measured) -> float:
    """The most an instance can stay unavailable after each execution: the time each
    execution leaves of its instance (instances / executions per second) less its mean
    compute time over the measured batch sizes, with :data:`CEILING_MARGIN` for noise.
    0 when the compute alone fills the instances (the cost fit is then too slow)."""
    shares = measured.size_shares or _shares_of_average(measured.avg_batch)
    total = sum(shares.values())
    compute = sum(service.time_s(size) * share for size, share in shares.items()) / total
    cycle = config.instances / measured.executions_per_s
    return max(cycle - compute, 0.0) * CEILING_MARGIN


def _search(
    errors: Callable[[float], tuple[float, float]],
    high: float,
    settled: Callable[[tuple[float, float]], bool] = lambda at: _worst(at) <= 1,
) -> float:
    """The hidden time in [0, high] whose larger error (in units of its bound) is smallest.

    Where both figures grow with the hidden time, that is the root of their sum, which false
    position finds in a few simulations (:func:`_quick`). Where that root leaves a figure
    off, or there is none, the figures may not move together: :func:`_thorough` looks over
    the whole range before a present is called off. Unless ``settled`` takes the root's
    errors as final (the clustering fit follows from it, and a wider search would only
    spend its simulations)."""
    if high <= 0:
        return 0.0
    quick = _quick(lambda u: sum(errors(u)), high)
    if quick is not None and settled(errors(quick)):
        return quick
    return _thorough(lambda u: _worst(errors(u)), high)


def _worst(at: tuple[float, float]) -> float:
    """The larger of two errors, in units of their bounds."""
    return max(abs(e) for e in at)


def clustered_signature(
    traffic: Traffic, cpu: CpuModel, batch_error: float, queue_error: float
) -> bool:
    """Whether a present misses as arrivals that reach Triton clustered make it miss: a
    batch shorter and a queue longer than measured beyond :data:`CLUSTER_TRIGGER` (errors
    in units of their bounds), under open-loop traffic whose arrivals no trace measured
    (closed-loop clients send as they are answered, and measured gaps carry the clustering
    already) and with releases not traced (nothing is inferred over them)."""
    return (
        isinstance(traffic, OpenLoop)
        and not cpu.arrival_gaps
        and not cpu.release_samples
        and batch_error < -CLUSTER_TRIGGER
        and queue_error > CLUSTER_TRIGGER
    )


def _fit_clustering(
    errors: Callable[[float, float, float], tuple[float, float]],
    start_release: float,
    high: float,
) -> tuple[float, float]:
    """The release in [0, high] and the share of arrivals with the one before in [0,
    :data:`CLUSTER_MOST`] that bring the batch's and the queue's errors to 0 together:
    ``(release, share)``, the best point tried.

    The two move both figures, the release both up and the share the batch up and the queue
    down, so they are fitted together, by Broyden's method from ``(start_release, 0)``, its
    steps taken in coordinates scaled to the two ranges: a probe a step away in each
    (:data:`CLUSTER_PROBE`) gives the first Jacobian, then each step solves it and updates
    it by the errors it met, one simulation a step, :data:`CLUSTER_STEPS` at most."""
    scale = (high, CLUSTER_MOST)
    tried: dict[tuple[float, float], tuple[float, float]] = {}

    def at(x: tuple[float, float]) -> tuple[float, float]:
        if x not in tried:
            tried[x] = errors(x[0], 0.0, x[1])
        return tried[x]

    x = (start_release, 0.0)
    f = at(x)
    # One probe a step away in each coordinate (a release near the ceiling steps down),
    # and the Jacobian in the scaled coordinates from them: slopes[figure][coordinate].
    up = CLUSTER_PROBE[0] * high
    release = start_release + up if start_release + up <= high else start_release - up
    probes = ((release, 0.0), (start_release, CLUSTER_PROBE[1] * CLUSTER_MOST))
    slopes = [
        [(at(p)[i] - f[i]) * scale[k] / (p[k] - x[k]) for k, p in enumerate(probes)] for i in (0, 1)
    ]
    for _ in range(CLUSTER_STEPS):
        if _worst(f) <= CLUSTER_TOLERANCE:
            break
        step = _solve(slopes, (-f[0], -f[1]))
        if step is None:
            break
        moved = (
            _clamp(x[0] + step[0] * high, high),
            _clamp(x[1] + step[1] * CLUSTER_MOST, CLUSTER_MOST),
        )
        dx = ((moved[0] - x[0]) / high, (moved[1] - x[1]) / CLUSTER_MOST)
        norm = dx[0] ** 2 + dx[1] ** 2
        if norm == 0:
            break
        f_moved = at(moved)
        # Broyden's update: the least change of the Jacobian that meets the errors just seen.
        miss = [f_moved[i] - f[i] - slopes[i][0] * dx[0] - slopes[i][1] * dx[1] for i in (0, 1)]
        slopes = [[slopes[i][k] + miss[i] * dx[k] / norm for k in (0, 1)] for i in (0, 1)]
        x, f = moved, f_moved
    return min(tried, key=lambda p: _worst(tried[p]))


def _solve(a: Sequence[Sequence[float]], b: tuple[float, float]) -> tuple[float, float] | None:
    """The ``x`` with ``a x = b`` for a 2x2 ``a`` (Cramer's rule); None when ``a`` is
    singular (the probes moved the errors in one direction only)."""
    det = a[0][0] * a[1][1] - a[0][1] * a[1][0]
    scale = max(abs(v) for row in a for v in row)
    if scale == 0 or abs(det) <= 1e-12 * scale * scale:
        return None
    return (
        (b[0] * a[1][1] - a[0][1] * b[1]) / det,
        (a[0][0] * b[1] - b[0] * a[1][0]) / det,
    )


def _clamp(v: float, high: float) -> float:
    return min(max(v, 0.0), high)


def _quick(error: Callable[[float], float], high: float) -> float | None:
    """The root of the increasing ``error`` in [0, high], by false position (the Illinois
    variant: the kept end's error is halved when the same end moves twice); 0 when the
    error is not negative there (no hidden time is needed), None when it stays negative."""
    lo, f_lo = 0.0, error(0.0)
    if f_lo >= 0:
        return 0.0
    hi, f_hi = high, error(high)
    if f_hi <= 0:
        return None
    tried = {lo: f_lo, hi: f_hi}
    side = 0
    for _ in range(QUICK_STEPS):
        u = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        if u in tried:
            break
        f = tried[u] = error(u)
        if abs(f) <= QUICK_TOLERANCE:
            break
        if f > 0:
            hi, f_hi = u, f
            f_lo = f_lo / 2 if side > 0 else f_lo
            side = 1
        else:
            lo, f_lo = u, f
            f_hi = f_hi / 2 if side < 0 else f_hi
            side = -1
    return min(tried, key=lambda u: abs(tried[u]))


def _thorough(worst: Callable[[float], float], high: float) -> float:
    """The smallest ``worst`` over [0, high]: the best of :data:`GRID_STEPS` equal steps,
    then a golden-section search between its neighbours."""
    grid = [high * i / GRID_STEPS for i in range(GRID_STEPS + 1)]
    scores = {u: worst(u) for u in grid}
    best = min(grid, key=scores.__getitem__)
    at = grid.index(best)
    lo, hi = grid[max(at - 1, 0)], grid[min(at + 1, GRID_STEPS)]
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    while hi - lo > SEARCH_WIDTH * high:
        if worst(a) <= worst(b):
            hi, b = b, a
            a = hi - ratio * (hi - lo)
        else:
            lo, a = a, b
            b = lo + ratio * (hi - lo)
        scores.update({a: worst(a), b: worst(b)})
    return min(scores, key=scores.__getitem__)


def window_spread(values: Sequence[float], n: int, floor: float = 0.0) -> float:
    """How much the mean of ``n`` consecutive ``values`` varies between windows: the
    standard deviation of the means of the whole windows ``values`` holds, relative to
    their mean (or ``floor``, when that is larger). Consecutive, so that runs of long waits
    in a busy period count as a window of few requests sees them. 0 when ``values`` holds
    fewer than WINDOWS_FOR_SPREAD windows (a longer window needs no widening) or no mean."""
    windows = len(values) // n if n > 0 else 0
    if windows < WINDOWS_FOR_SPREAD:
        return 0.0
    means = [math.fsum(values[i * n : (i + 1) * n]) / n for i in range(windows)]
    mean = math.fsum(means) / windows
    scale = max(mean, floor)
    if scale <= 0:
        return 0.0
    return math.sqrt(math.fsum((m - mean) ** 2 for m in means) / (windows - 1)) / scale


def present_figures(result: SimResult, measured: Measured) -> tuple[Figure, ...]:
    """A simulated present's average batch, mean queue and executions per second against
    the measured ones, each with its bound (the queue's widened for a window of few
    requests, window_spread, up to QUEUE_WIDEST)."""
    delays = result.queue_delays_s
    executions_per_s = result.executions / result.duration_s if result.duration_s > 0 else 0.0
    spread = window_spread(delays, measured.requests, QUEUE_FLOOR_S)
    bound = min(max(QUEUE_BOUND, QUEUE_SPREADS * spread), QUEUE_WIDEST)
    wide = bound > QUEUE_BOUND
    widened = f"the spread of means over {measured.requests:,} requests" if wide else ""
    return (
        Figure("average batch", result.mean_batch_size, measured.avg_batch, BATCH_BOUND),
        Figure(
            "mean queue",
            sum(delays) / len(delays) if delays else 0.0,
            measured.mean_queue_s,
            bound,
            QUEUE_FLOOR_S,
            widened,
        ),
        Figure("executions per second", executions_per_s, measured.executions_per_s),
    )


def _shares(result: SimResult, measured: Measured) -> tuple[tuple[int, float, float], ...]:
    n = result.executions
    sizes = sorted(set(result.batch_sizes) | set(measured.size_shares))
    return tuple(
        (s, result.batch_sizes.get(s, 0) / n if n else 0.0, measured.size_shares.get(s, 0.0))
        for s in sizes
    )


def _shares_of_average(avg_batch: float) -> dict[int, float]:
    """Two neighbouring sizes whose mix has the average: when no shares were measured."""
    low = max(math.floor(avg_batch), 1)
    frac = max(avg_batch - low, 0.0)
    return {low: 1 - frac, low + 1: frac} if frac else {low: 1.0}


def _help(cpu: CpuModel, stored: bool = False) -> tuple[str, ...]:
    """What would make the measured present firmer or the model closer to it. A stored
    run's window is what was run: a longer run, or several of one traffic pooled, is."""
    traced = bool(cpu.release_samples or cpu.dispatch_samples)
    if stored:
        tips = ["a longer run, or several of its traffic pooled (--run A,B,...)"]
        if not traced:
            tips.append("a run made with --trace")
    else:
        tips = ["a longer window (--window)"]
        if not traced:
            tips.append("traces of the hand-offs (--traces)")
    if cpu.cores is None:
        tips.append("measured costs (--probe)")
    return tuple(tips)


def _miss(f: Figure) -> str:
    if f.within:
        return ""
    assert f.bound is not None
    why = f", {f.widened}" if f.widened else ""
    return f" (off by {f.error:+.0%}, bound ±{f.bound:.0%}{why})"


def _ms(simulated: float, measured: float) -> str:
    digits = 2 if max(simulated, measured) >= 1e-4 else 3
    return f"{simulated * 1e3:.{digits}f} vs {measured * 1e3:.{digits}f}"
