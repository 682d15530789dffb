"""The batcher's hand-offs, measured from Triton's own traces.

A request's queue wait in Triton's traces runs from QUEUE_START to COMPUTE_START: it holds the
batching decision and also the time the batch takes to reach the model, a large part of the
traced p99 that a simulator of the decision alone does not predict (the figures:
docs/validation/handoff.md). So each part is read from traced batches whose cause is
unambiguous (:class:`HandOff` lists them: the dispatch, the timer's lateness, the release,
the executions' spread, the holds, the arrival gaps), and the simulator draws from the
measured distributions themselves, whose tails make the p99.

A part without enough batches of its kind (:data:`MIN_BATCHES`) is left at 0 and named in
:attr:`HandOff.unmeasured`; the prediction leaves it out and says so. :func:`outside` joins
traces to a load run's records: the time a client waits outside Triton's queue and execution.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from advisor.config import BatcherConfig
from advisor.model import HANDOFF_FIELDS, CpuModel
from tritonapi.traces import Batch, TracedRequest, group_batches

# Fewer batches of a kind than this say too little about their hand-off.
MIN_BATCHES = 10
# Fewer traced requests than this say too little about the hand-offs at all.
MIN_REQUESTS = 200
LN_5 = math.log(5)  # p90 - p50 of an exponential, in units of its mean
SAMPLES = 1000  # quantiles kept of each measured distribution


@dataclass(frozen=True)
class TimerSlack:
    """How late Linux may fire a sleeping thread's timer: the batcher's delay ends that
    much after its deadline (the kernel waits for the end of the slack unless another
    interrupt comes first).

    Where the traces split the overshoots, the lateness came to about the slack (Triton's
    threads keep Linux's default). Counted whole into the dispatch, it would make every
    batch that leaves at once wait for it, and the batches grow while they wait; so it is
    kept apart. A model whose hand-off moves with the rate cannot show its lateness in its
    own runs. The measurements: docs/validation/handoff.md.
    """

    seconds: float
    source: str  # where the figure comes from, for the output


# Unless a thread asks otherwise (prctl PR_SET_TIMERSLACK; 0 for real-time threads).
LINUX_DEFAULT_SLACK = TimerSlack(50e-6, "Linux's default")


def timer_slack(pid: int | None) -> TimerSlack:
    """The timer slack of the server ``pid``'s threads (the most common one), read from
    ``/proc`` when it can be (the owner or root); Linux's default otherwise (a remote
    server)."""
    if pid is None:
        return LINUX_DEFAULT_SLACK
    values: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:  # each thread's own, under its id
                values.append(int(Path(f"/proc/{task.name}/timerslack_ns").read_text()))
            except (OSError, ValueError):
                continue  # gone, or not ours to read
    except OSError:
        return LINUX_DEFAULT_SLACK
    if not values:
        return LINUX_DEFAULT_SLACK
    common = statistics.mode(values)
    return TimerSlack(common / 1e9, f"read from Triton's threads, pid {pid}")


# Fewer hand-offs than this leave a distribution's tail to chance: the p99 of 63 is their
# largest (see measure()).
TAIL_SAMPLES = 200


@dataclass(frozen=True)
class HandOff:
    """The hand-offs measured from traces: the :class:`CpuModel` fields that
    :data:`advisor.model.HANDOFF_FIELDS` names, carried on a CpuModel (``cpu``; its other
    fields stay at their defaults), and what they were measured from.

    ``dispatch_s``
        A batch that reached a preferred size (or the maximum) while an instance was free left
        when its last request arrived: COMPUTE_START minus that arrival is the hand-off from
        the batcher to the instance (a thread wake-up, the python backend's message to its
        stub). The median over such batches.
    ``timer_slack_s`` / ``timer_slack_tail_s``
        A batch that left on its queue delay while an instance was free (from its oldest
        request's arrival to its deadline: one that came during an execution waits for what
        that execution holds up too) started at its oldest request's arrival + the delay +
        the timer's lateness + the dispatch. The overshoot beyond the delay, less the
        dispatch, is fitted as a shifted exponential: its median and 90th percentile give the
        shift and the mean of the tail (p90 - p50 = tail x ln 5). With fewer than
        :data:`TAIL_SAMPLES` direct hand-offs beside many overshoots, the dispatch's tail is
        shaped by the overshoots (:func:`measure`). Without batches that completed a
        preferred size on a free instance, the traces cannot split the overshoots into
        dispatch and lateness: the lateness is taken as the timer slack of Triton's threads
        (:class:`TimerSlack`).
    ``release_s`` / the gaps
        A batch that was due (its delay ran out, or it was complete) while every instance was
        busy started after one of them ended: the gap from the end of the previous batch on
        its lane to its start is how soon an instance that just finished takes its next batch
        (no wake-up: its thread is running). The simulator draws these gaps there, and the
        dispatch for an idle instance; ``release_s`` is their median less the dispatch.
    ``execution_cv``
        The spread of executions around their size's mean (COMPUTE_START to COMPUTE_END),
        pooled over the sizes with :data:`MIN_BATCHES` batches: the relative root mean square
        deviation.
    ``hold_share`` / ``hold_onsets``
        Executions that hold up the front end: requests stop reaching the queue while they
        run, from some time after their start (:func:`holds`).
    ``arrival_gaps``
        The gaps between consecutive requests reaching Triton, in order: they come clustered
        (:func:`arrival_gaps`), and the simulator draws its arrivals as runs of them.

    The simulator draws from the measured distributions themselves (the hand-offs, the
    timer's lateness beyond the median dispatch, each execution's ratio to its size's mean),
    kept as :data:`SAMPLES` quantiles: on a busy machine their tails are heavy, and the p99
    queue wait is made of those tails.
    """

    cpu: CpuModel = CpuModel()
    # batches each part was measured from
    counts: tuple[int, int, int] = (0, 0, 0)  # dispatch, queue delay, release
    # Where the timer's lateness came from when the traces could not split it from the
    # dispatch (TimerSlack.source); "" when they did.
    slack_source: str = ""

    @property
    def unmeasured(self) -> tuple[str, ...]:
        dispatch, delay, release = (c >= MIN_BATCHES for c in self.counts)
        known = {"dispatch": dispatch or delay, "timer slack": delay, "release": release}
        return tuple(name for name, ok in known.items() if not ok)

    @property
    def dispatch_from_overshoots(self) -> bool:
        return self.counts[0] < MIN_BATCHES <= self.counts[1]

    @property
    def dispatch_tail_from_overshoots(self) -> bool:
        return MIN_BATCHES <= self.counts[0] < TAIL_SAMPLES <= self.counts[1]

    def apply(self, cpu: CpuModel) -> CpuModel:
        """``cpu`` with these hand-offs in place of its own."""
        return replace(cpu, **{name: getattr(self.cpu, name) for name in HANDOFF_FIELDS})

    def describe(self) -> str:
        m = self.cpu
        bound = (
            f" (the delay's overshoots less the timer's {m.timer_slack_s * 1e6:.0f} us "
            f"slack, {self.slack_source})"
            if self.dispatch_from_overshoots
            else ""
        )
        dispatch = f"dispatch {m.dispatch_s * 1e6:.0f} us"
        if m.dispatch_samples:
            dispatch = f"dispatch p50 {m.dispatch_s * 1e6:.0f} us, p99 {_us(m.dispatch_samples)}"
        dispatch += bound
        if self.dispatch_tail_from_overshoots:
            dispatch += (
                f" ({self.counts[0]} batches; the tail shaped by the delay's "
                f"{self.counts[1]:,} overshoots)"
            )
        slack = f"timer slack {m.timer_slack_s * 1e6:.0f} + {m.timer_slack_tail_s * 1e6:.0f} us"
        if m.timer_slack_samples:
            slack += (
                f" (the delay's overshoot, dispatch included: p99 {_us(m.timer_slack_samples)})"
            )
        if self.dispatch_from_overshoots:
            slack = (
                f"timer slack {m.timer_slack_s * 1e6:.0f} us (the delay's overshoot, "
                f"dispatch included: p99 {_us(m.timer_slack_samples)})"
            )
        parts = [
            dispatch,
            slack,
            f"release {m.release_s * 1e6:.0f} us",
            f"execution spread cv {m.execution_cv:.2f}",
        ]
        if m.hold_share > 0 and m.hold_onsets:
            parts.append(
                f"front end held by {m.hold_share:.0%} of executions "
                f"(from {_quantile(m.hold_onsets, 0.5) * 1e6:.0f} us after their start, "
                "the median)"
            )
        if m.arrival_gaps:
            parts.append(clustering(m.arrival_gaps))
        text = "hand-offs from traces: " + ", ".join(parts)
        if self.unmeasured:
            text += f" (too few batches for: {', '.join(self.unmeasured)}; left at 0)"
        return text


def _us(samples: Sequence[float]) -> str:
    return f"{_quantile(samples, 0.99) * 1e6:.0f} us"


def _grid(values: Sequence[float]) -> tuple[float, ...]:
    """The distribution of ``values`` in at most :data:`SAMPLES` evenly spaced quantiles."""
    ordered = sorted(values)
    if len(ordered) <= SAMPLES:
        return tuple(ordered)
    return tuple(ordered[(i * (len(ordered) - 1)) // (SAMPLES - 1)] for i in range(SAMPLES))


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class _Busy:
    """How many traced batches were executing at a moment (a batch never counts itself)."""

    def __init__(self, batches: Sequence[Batch]) -> None:
        self.spans = sorted((b.compute_start_ns, b.compute_end_ns) for b in batches)

    def at(self, t_ns: int, me: Batch) -> int:
        return sum(
            1 for start, end in self.spans if start <= t_ns < end and start != me.compute_start_ns
        )


def measure(
    requests: Iterable[TracedRequest],
    config: BatcherConfig,
    lateness: TimerSlack = LINUX_DEFAULT_SLACK,
) -> HandOff:
    """The hand-offs of one model's traced requests (every request of a window traced: a
    batch's size is then its real size). ``lateness``: the timer's, when the traces cannot
    split it from the dispatch (see :class:`TimerSlack`)."""
    requests = list(requests)
    batches = group_batches(requests)
    busy = _Busy(batches)
    preferred = set(config.effective_preferred) | {config.batch_limit}
    delay_ns = config.delay_s * 1e9
    handoffs: list[float] = []
    overshoots: list[float] = []
    for b in batches:
        oldest = min(r.queue_start_ns for r in b.requests)
        if b.size in preferred and busy.at(b.last_arrival_ns, b) < config.instances:
            handoffs.append((b.compute_start_ns - b.last_arrival_ns) / 1e9)
        elif (
            delay_ns > 0
            and b.size not in preferred
            and busy.at(oldest, b) < config.instances
            and busy.at(round(oldest + delay_ns), b) < config.instances
        ):
            overshoots.append((b.compute_start_ns - oldest - delay_ns) / 1e9)
    gaps: list[float] = []
    lanes: dict[int, list[Batch]] = {}
    for b in batches:
        lanes.setdefault(b.lane, []).append(b)
    for lane in lanes.values():
        for previous, batch in zip(lane, lane[1:], strict=False):
            oldest = min(r.queue_start_ns for r in batch.requests)
            # Due before the instance was free: its delay ran out, or it was complete.
            due = min(
                oldest + delay_ns if delay_ns > 0 else oldest,
                batch.last_arrival_ns if batch.size in preferred else math.inf,
            )
            if due <= previous.compute_end_ns and busy.at(round(due), batch) >= config.instances:
                gaps.append((batch.compute_start_ns - previous.compute_end_ns) / 1e9)
    direct, delayed = len(handoffs) >= MIN_BATCHES, len(overshoots) >= MIN_BATCHES
    overshoots = [max(o, 0.0) for o in overshoots]
    dispatch = slack = tail = 0.0
    dispatches: tuple[float, ...] = ()
    slacks: tuple[float, ...] = ()
    if direct:
        dispatch = statistics.median(handoffs)
        shaped = handoffs
        if len(handoffs) < TAIL_SAMPLES <= len(overshoots):
            # A few dozen hand-offs put their largest at the p99, and the simulator passes
            # it to every batch that leaves at once. The delay's overshoots, counted in the
            # thousands, hold the same hand-off after a lateness that varies little:
            # shifted by the medians' difference, they give the tail (the replays that
            # chose this: docs/validation/handoff.md).
            late = statistics.median(overshoots) - dispatch
            shaped = handoffs + [o - late for o in overshoots]
        dispatches = _grid([max(h, 0.0) for h in shaped])
    if direct and delayed:
        p50, p90 = _quantile(overshoots, 0.5), _quantile(overshoots, 0.9)
        tail = max(p90 - p50, 0.0) / LN_5
        # The median of shift + Exp(tail) is shift + tail x ln 2.
        slack = max(p50 - dispatch - tail * math.log(2), 0.0)
        # Whole: the simulator draws a batch's lateness and hand-off together when it leaves
        # on its delay, as they were measured (a dispatch drawn on top counted the
        # dispatch's tail twice: the add model's predicted p99 followed it).
        slacks = _grid(overshoots)
    elif delayed:
        # The overshoots are lateness + dispatch and the traces cannot split them: the
        # lateness is the timer slack. Batches that leave on their delay draw the
        # overshoots whole, as above; those that leave at once, the rest.
        slack = lateness.seconds
        dispatch = max(statistics.median(overshoots) - slack, 0.0)
        dispatches = _grid([max(o - slack, 0.0) for o in overshoots])
        slacks = _grid(overshoots)
    release = max(statistics.median(gaps) - dispatch, 0.0) if len(gaps) >= MIN_BATCHES else 0.0
    share, onsets = holds(batches)
    measured = CpuModel(
        dispatch_s=dispatch,
        timer_slack_s=slack,
        timer_slack_tail_s=tail,
        release_s=release,
        execution_cv=execution_spread(batches),
        dispatch_samples=dispatches,
        timer_slack_samples=slacks,
        execution_ratios=_grid(execution_ratios(batches)),
        hold_share=share,
        hold_onsets=onsets,
        release_samples=_grid([max(g, 0.0) for g in gaps]) if len(gaps) >= MIN_BATCHES else (),
        arrival_gaps=arrival_gaps(requests),
    )
    return HandOff(
        measured,
        (len(handoffs), len(overshoots), len(gaps)),
        slack_source=lateness.source if delayed and not direct else "",
    )


# A gap this long is the traffic pausing, not its shape.
IDLE_GAP_S = 1.0
CLUSTER_S = 50e-6


def arrival_gaps(requests: Sequence[TracedRequest]) -> tuple[float, ...]:
    """The gaps between consecutive arrivals at Triton (their traced REQUEST_START), in
    their order; pauses of a second or more left out. The simulator draws open-loop
    arrivals from runs of them (advisor.simulator.GAP_RUN), scaled to the traffic's rate.

    Why the traced gaps and not Poisson's: requests sent on a Poisson schedule reach
    Triton clustered at short scales (near Poisson over a millisecond or more), and a
    short queue delay batches those clusters. Why runs of gaps and not single ones: a
    short gap tends to follow a long one. The measurements: docs/validation/handoff.md.
    """
    starts = sorted(r.request_start_ns or r.queue_start_ns for r in requests)
    gaps = [(b - a) / 1e9 for a, b in zip(starts, starts[1:], strict=False)]
    gaps = [g for g in gaps if 0 <= g < IDLE_GAP_S]
    return tuple(gaps) if len(gaps) >= MIN_REQUESTS else ()


def clustering(gaps: Sequence[float]) -> str:
    """'arrivals clustered: 11 % of gaps under 50 us (Poisson: 1.5 %)'."""
    mean = statistics.fmean(gaps)
    under = sum(g < CLUSTER_S for g in gaps) / len(gaps)
    poisson = 1 - math.exp(-CLUSTER_S / mean) if mean > 0 else 1.0
    return (
        f"arrivals clustered: {under:.0%} of gaps under {CLUSTER_S * 1e6:.0f} us "
        f"(Poisson: {poisson:.1%})"
    )


# Arrivals are counted by the phase of the execution running when they came, in bins of
# this width; bins are pooled until they expect this many arrivals.
HOLD_BIN_S = 50e-6
HOLD_MIN_EXPECTED = 20.0


def holds(batches: Sequence[Batch]) -> tuple[float, tuple[float, ...]]:
    """How often, and from when, an execution holds up the front end: ``(share of
    executions, onsets after their start in seconds as quantiles)``; ``(0.0, ())`` when
    the traces show no hold.

    Requests reach Triton's queue (QUEUE_START) at random under Poisson traffic, so the
    arrivals during executions, counted by how long the running execution had been running,
    should match the rate times the time spent in each phase. Where cores are few they do
    not: during an execution that keeps its stub busy on a core, arrivals stop and come when
    it ends, so those requests queue for less and batch with what came (measured on a 2-core
    machine: docs/validation/handoff.md). A sleeping execution
    does not do it. The missing share at each
    phase, made non-decreasing (a hold lasts until the execution ends), is the share of
    executions held by then: the share that ever holds, and the onsets' distribution.
    """
    if not batches:
        return 0.0, ()
    arrivals = sorted(r.queue_start_ns for b in batches for r in b.requests)
    span_s = (arrivals[-1] - arrivals[0]) / 1e9
    if span_s <= 0 or len(arrivals) < MIN_REQUESTS:
        return 0.0, ()
    rate = len(arrivals) / span_s
    bin_ns = HOLD_BIN_S * 1e9
    expected: list[float] = []
    observed: list[int] = []
    for b in batches:
        length = b.compute_end_ns - b.compute_start_ns
        bins = int(length // bin_ns) + 1
        while len(expected) < bins:
            expected.append(0.0)
            observed.append(0)
        for i in range(bins):
            expected[i] += rate * min(bin_ns, length - i * bin_ns) / 1e9
        lo = bisect.bisect_left(arrivals, b.compute_start_ns)
        hi = bisect.bisect_left(arrivals, b.compute_end_ns)
        for t in arrivals[lo:hi]:
            observed[int((t - b.compute_start_ns) // bin_ns)] += 1
    # Pool bins until each expects enough arrivals to say something.
    pooled: list[tuple[float, float, float]] = []  # (phase start s, expected, observed)
    start, exp_sum, obs_sum = 0, 0.0, 0
    for i, (e, o) in enumerate(zip(expected, observed, strict=True)):
        exp_sum, obs_sum = exp_sum + e, obs_sum + o
        if exp_sum >= HOLD_MIN_EXPECTED:
            pooled.append((start * HOLD_BIN_S, exp_sum, float(obs_sum)))
            start, exp_sum, obs_sum = i + 1, 0.0, 0
    if not pooled:
        return 0.0, ()
    held = _increasing([1 - o / e for _, e, o in pooled], [e for _, e, _ in pooled])
    held = [min(max(h, 0.0), 1.0) for h in held]
    share = held[-1]
    if share <= 0:
        return 0.0, ()
    # Onsets: the held share grows from one pooled phase to the next; spread it evenly
    # over the phase it grew in.
    # Counted on the cumulative share, so that small steps spread over many phases still
    # add up to their samples (rounded one by one, each could round to none).
    onsets: list[float] = []
    before = 0
    for k, (phase, _, _) in enumerate(pooled):
        end = pooled[k + 1][0] if k + 1 < len(pooled) else phase + HOLD_BIN_S
        upto = round(held[k] * SAMPLES)
        count = upto - before
        onsets += [phase + (end - phase) * (j + 0.5) / count for j in range(count)]
        before = upto
    if not onsets:  # a share too small for one sample: no hold the simulator can draw
        return 0.0, ()
    return share, tuple(onsets)


def _increasing(values: list[float], weights: list[float]) -> list[float]:
    """The weighted least-squares non-decreasing fit (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [value, weight, count]
    for v, w in zip(values, weights, strict=True):
        blocks.append([v, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, n2 = blocks.pop()
            v1, w1, n1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return [v for v, _, n in blocks for _ in range(int(n))]


def execution_ratios(batches: Iterable[Batch]) -> list[float]:
    """Each execution's time over its size's mean, for the sizes with enough batches."""
    by_size: dict[int, list[float]] = {}
    for b in batches:
        by_size.setdefault(b.size, []).append(float(b.compute_end_ns - b.compute_start_ns))
    ratios: list[float] = []
    for times in by_size.values():
        mean = statistics.fmean(times)
        if len(times) >= MIN_BATCHES and mean > 0:
            ratios += [t / mean for t in times]
    return ratios


def execution_spread(batches: Iterable[Batch]) -> float:
    """Relative RMS deviation of execution times from their size's mean (0 if too few)."""
    ratios = execution_ratios(batches)
    return math.sqrt(statistics.fmean([(r - 1) ** 2 for r in ratios])) if ratios else 0.0


@dataclass(frozen=True)
class Outside:
    """The time traced requests spent outside Triton's queue and execution (client latency
    less queue wait and execution: the client, the network, the front end)."""

    median_s: float
    # Each request's time outside less the median (seconds, either sign).
    spread_s: tuple[float, ...]

    # Where it was measured, for the output.
    source: str = "traced requests"
    # The spread split as the simulator draws it (CpuModel.outside_spread, outside_own):
    # per execution, its requests' mean less the median (the part the requests answered
    # together share), and, from executions of two or more, each request's own part. Empty
    # when the requests' executions are not known: the spread is then each request's own.
    shared_s: tuple[float, ...] = ()
    own_s: tuple[float, ...] = ()

    @property
    def requests(self) -> int:
        return len(self.spread_s)

    def quantile_s(self, q: float) -> float:
        ordered = sorted(self.spread_s) or [0.0]
        index = min(int(q * len(ordered)), len(ordered) - 1)
        return max(self.median_s + ordered[index], 0.0)

    def apply(self, cpu: CpuModel) -> CpuModel:
        """``cpu`` with this time outside Triton: the part of the median beyond the CPU the
        simulator already charges per request is waiting that costs no CPU, and the spread
        is drawn around it. A measured spread holds the front end's too: the spread assumed
        for its work (``request_cv``) is dropped, not drawn on top of it."""
        if not self.spread_s:  # a probe's mean: the time is known, its spread is not
            return replace(
                cpu,
                request_latency_s=max(self.median_s - cpu.request_s, 0.0),
                outside_spread=(0.0,),
            )
        return replace(
            cpu,
            request_latency_s=max(self.median_s - cpu.request_s, 0.0),
            request_cv=0.0,
            outside_spread=self.shared_s or (0.0,),
            outside_own=self.own_s if self.shared_s else self.spread_s,
        )

    def describe(self) -> str:
        """'time outside Triton's queue and execution: 812 us median, p99 2,104 us (...)'."""
        head = "time outside Triton's queue and execution: "
        if not self.spread_s:
            mean = f"{self.median_s * 1e6:,.0f} us mean"
            return f"{head}{mean} ({self.source}; its spread not measured)"
        return (
            f"{head}{self.median_s * 1e6:,.0f} us median, p99 "
            f"{self.quantile_s(0.99) * 1e6:,.0f} us ({self.source})"
        )


def outside(samples: Iterable[tuple[float, float, float, Hashable]]) -> Outside | None:
    """The time outside Triton's queue and execution over ``(latency_s, queue_wait_s,
    compute_s, execution)`` of traced requests (``execution``: a key its batch's requests
    share). None without samples."""
    rows = [(latency - queue - compute, batch) for latency, queue, compute, batch in samples]
    if not rows:
        return None
    median = statistics.median(t for t, _ in rows)
    by_batch: dict[Hashable, list[float]] = {}
    for t, batch in rows:
        by_batch.setdefault(batch, []).append(t)
    shared: list[float] = []
    own: list[float] = []
    for times in by_batch.values():
        mean = statistics.fmean(times)
        shared.append(mean - median)
        if len(times) > 1:
            # Deviations from their own mean understate a request's spread by n - 1 of n.
            scale = math.sqrt(len(times) / (len(times) - 1))
            own += [(t - mean) * scale for t in times]
    return Outside(
        max(median, 0.0),
        tuple(t - median for t, _ in rows),
        shared_s=tuple(shared),
        own_s=tuple(own),
    )
