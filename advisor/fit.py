"""Fitting the simulator's inputs from what Triton and Prometheus report.

Service time per batch size
    Triton's statistics API gives, per formed batch size, the number of executions
    (``compute_infer.count``) and their summed nanoseconds. The mean per size is fitted
    to ``base + per_item * size`` by least squares, weighted by the number of
    executions of each size (a size seen twice says little). The exporter's
    ``triton_batching_batch_*`` counters carry the same numbers through Prometheus.

Traffic
    The arrival rate is the request count's increase over the window divided by its
    length. Burstiness is the coefficient of variation of the inter-arrival times,
    estimated from counts in short bins: for a renewal process the index of
    dispersion of counts (variance / mean) tends to cv^2 (1 for Poisson).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from advisor.model import OpenLoop, ServiceModel
from promapi import PromClient, PrometheusError, Range, increase_with_new
from tritonapi.stats import ModelStats

if TYPE_CHECKING:
    import pandas as pd

# A batch size executed at least this often keeps its own measured mean time, when some
# such size is further than LINE_TOLERANCE from the fitted line (the MLP here: 1.1 ms for
# one row, 4.2 ms for two, where a line says 1.4 and 2.8).
MEASURED_EXECUTIONS = 20
LINE_TOLERANCE = 0.25
# name of the phase sums that occupy a model instance during one execution
EXECUTION_PHASES = ("compute_input", "compute_infer", "compute_output")


def batch_times(
    stats: ModelStats, phases: Sequence[str] = EXECUTION_PHASES
) -> dict[int, tuple[int, float]]:
    """Per batch size: (executions, total seconds of the given phases)."""
    out = {}
    for size, b in sorted(stats.batches.items()):
        ns = {
            "compute_input": b.compute_input_ns,
            "compute_infer": b.compute_infer_ns,
            "compute_output": b.compute_output_ns,
        }
        if b.executions > 0:
            out[size] = (b.executions, sum(ns[p] for p in phases) / 1e9)
    return out


def fit_service_times(
    data: ModelStats | Mapping[int, tuple[int, float]],
    phases: Sequence[str] = EXECUTION_PHASES,
) -> ServiceModel:
    """Fit ``base_s + per_item_s * size`` to per-size (executions, seconds).

    ``data`` is a :class:`ModelStats` (a delta over a window is best: cumulative
    statistics mix in warm-up) or a mapping ``size -> (executions, seconds)``.
    Sizes with under 0.5 % of the executions (and under 3) are left out when others
    remain. With a single size observed, the per-item part cannot be separated: it is 0.
    When a size with at least :data:`MEASURED_EXECUTIONS` executions is further than
    :data:`LINE_TOLERANCE` from the line, those sizes keep their own means
    (:attr:`ServiceModel.measured`). Raises ValueError when there are no executions.
    """
    points = batch_times(data, phases) if isinstance(data, ModelStats) else dict(data)
    points = {s: (n, t) for s, (n, t) in points.items() if n > 0}
    if not points:
        raise ValueError("no executions to fit service times from (send some load first)")
    # A size seen a handful of times (one slow execution on a busy machine) would pull
    # the line by its leverage: leave out sizes below 0.5 % of the executions.
    floor = max(3.0, 0.005 * sum(n for n, _ in points.values()))
    common = {s: v for s, v in points.items() if v[0] >= floor}
    if common:
        points = common
    weights = {s: float(n) for s, (n, _) in points.items()}
    means = {s: t / n for s, (n, t) in points.items()}
    total = sum(weights.values())
    mean_size = sum(w * s for s, w in weights.items()) / total
    mean_time = sum(w * means[s] for s, w in weights.items()) / total
    var = sum(w * (s - mean_size) ** 2 for s, w in weights.items())
    if var == 0:
        return ServiceModel(mean_time, 0.0)
    cov = sum(w * (s - mean_size) * (means[s] - mean_time) for s, w in weights.items())
    slope = cov / var
    base = mean_time - slope * mean_size
    # A negative part is noise around a flat (or a purely per-item) cost: clamp it and
    # refit the other so the model still passes through the weighted mean.
    if slope < 0:
        line = ServiceModel(mean_time, 0.0)
    elif base < 0:
        line = ServiceModel(0.0, mean_time / mean_size)
    else:
        line = ServiceModel(base, slope)
    # A model whose time is not a line in the batch size keeps the measured means of the
    # sizes executed often enough; one that is keeps the line, which averages out noise.
    measured = tuple((s, means[s]) for s in sorted(points) if points[s][0] >= MEASURED_EXECUTIONS)
    if any(abs(t - line.time_s(s)) > LINE_TOLERANCE * line.time_s(s) for s, t in measured):
        return ServiceModel(line.base_s, line.per_item_s, measured)
    return line


def fit_traffic(samples: Sequence[tuple[float, float]], min_bins: int = 5) -> OpenLoop:
    """Arrival rate and burstiness from ``(time_s, cumulative_request_count)`` samples.

    Each interval between samples is one bin. The burstiness is the CV of inter-arrival a
    renewal process with the bins' index of dispersion would have (1 for Poisson): each
    bin's count is held against the rate times that bin's own length. A poller on a busy
    machine does not read at even steps, and bins a tenth longer at 2,000/s hold 40 more
    requests: read as equal bins, that was a burst. Raises ValueError with too few samples
    or no traffic.
    """
    if len(samples) < min_bins + 1:
        raise ValueError(
            f"need at least {min_bins + 1} samples of the request count, got {len(samples)}"
        )
    times = [t for t, _ in samples]
    counts = [c for _, c in samples]
    if any(b < a for a, b in zip(counts, counts[1:], strict=False)):
        raise ValueError("the request count went backwards (server restarted): sample again")
    span = times[-1] - times[0]
    total = counts[-1] - counts[0]
    if span <= 0 or total <= 0:
        raise ValueError("no requests arrived while sampling: the model has no traffic to fit")
    rate = total / span
    # Pearson's dispersion with unequal exposures: sum((n - rate*d)^2 / (rate*d)) / (k - 1).
    spread = sum(
        (n1 - n0 - rate * (t1 - t0)) ** 2 / (rate * (t1 - t0))
        for (t0, n0), (t1, n1) in zip(samples, samples[1:], strict=False)
        if t1 > t0
    )
    return OpenLoop(rate, math.sqrt(spread / (len(samples) - 2)))


def received_counts(received: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The requests received, ``(time, count)`` at each read of Triton's metrics (its
    executed count plus its pending gauge from that one read), with a dip held at the
    count before it. What a client sent is received at once, answered only after a wait
    in the queue: a model stalled for a moment answers in a lump what arrived evenly, and
    the answered count reads that as a burst. Requests executing are in neither series, so
    the sum can dip by a batch between reads."""
    held: list[tuple[float, float]] = []
    for t, n in received:
        held.append((t, max(n, held[-1][1]) if held else n))
    return held


# ---- Prometheus (the exporter's metric contract) ------------------------------------------


# A request that waits in Triton's queue longer than this many executions, on average,
# plus the config's delay and SATURATED_FLOOR_S, waits behind a backlog: even at 95 % of
# capacity a queue of single executions averages under 10 (M/D/1: rho / (2 (1 - rho))).
SATURATED_EXECUTIONS = 20
SATURATED_FLOOR_S = 0.010
# A saturated model's answered rate is a floor of what clients send; the advice is asked for
# this many times it: a config with the headroom to drain the backlog and serve up to that.
# Clients that send more still find it saturated, and the next advice starts from its new
# capacity (the autopilot's loop).
SATURATED_RATE = 2.0


def queue_and_execution(delta: ModelStats) -> tuple[float, float] | None:
    """The mean wait in Triton's queue and the mean execution (each request's share of its
    batch's compute phases), in seconds per request answered in ``delta``; None with none."""
    queued = delta.phase("queue")
    if not queued.count:
        return None
    execution = sum(delta.phase(p).ns for p in EXECUTION_PHASES)
    return queued.ns / queued.count / 1e9, execution / queued.count / 1e9


def saturation(delta: ModelStats, delay_s: float) -> str:
    """Why the window's requests waited behind a backlog ("" when they did not).

    Triton's statistics count the requests it answered. A model that cannot keep up answers
    at its capacity, and a rate fitted from those counts is what it served, not what clients
    sent: a floor. The sign is the mean wait in Triton's queue against the mean execution
    (each request's share of its batch's compute phases) and the config's delay."""
    means = queue_and_execution(delta)
    if means is None:
        return ""
    wait, execution = means
    bound = delay_s + SATURATED_EXECUTIONS * execution + SATURATED_FLOOR_S
    if wait <= bound:
        return ""
    return (
        f"its requests waited {wait * 1e3:,.1f} ms in Triton's queue on average, past "
        f"{SATURATED_EXECUTIONS} executions ({execution * 1e3:.2f} ms each) and the delay: a "
        "backlog, so the rate it answered is its capacity, and clients send more"
    )


def saturated_traffic(answered: OpenLoop) -> OpenLoop:
    """The traffic to advise for when ``answered`` is a saturated model's: SATURATED_RATE
    times its rate, and Poisson's burstiness unless the answers were burstier (they come at
    the executions' pace, whatever the clients' pace)."""
    return OpenLoop(answered.rate_per_s * SATURATED_RATE, max(1.0, answered.cv))


def _query(prom_url: str, run: Callable[[PromClient], pd.DataFrame]) -> pd.DataFrame:
    """One read of Prometheus; ValueError (one line) naming what went wrong."""
    try:
        return run(PromClient(prom_url, timeout_s=10.0, hint="check --prometheus"))
    except PrometheusError as exc:
        raise ValueError(str(exc)) from None


def batch_times_from_prometheus(
    prom_url: str, model: str, window: str = "10m"
) -> dict[int, tuple[int, float]]:
    """Per batch size (executions, compute-infer seconds) over ``window``, from the exporter."""
    selector = f'{{job="exporter",model="{model}"}}'

    def per_size(counter: str) -> dict[int, float]:
        expr = f"sum by (batch_size) ({increase_with_new(counter + selector, window)})"
        frame = _query(prom_url, lambda client: client.query(expr))
        if frame.empty:
            return {}
        return {
            int(size): float(v) for size, v in zip(frame["batch_size"], frame["value"], strict=True)
        }

    counts = per_size("triton_batching_batch_executions_total")
    secs = per_size("triton_batching_batch_compute_infer_seconds_total")
    return {
        size: (round(n), secs[size]) for size, n in counts.items() if round(n) > 0 and size in secs
    }


def traffic_from_prometheus(
    prom_url: str,
    model: str,
    window_s: float = 600.0,
    step_s: float = 10.0,
    now: float | None = None,
) -> OpenLoop:
    """Arrival rate and burstiness over the last ``window_s``, from the exporter's counter.

    The cumulative success counter sampled every ``step_s`` (at least the scrape interval)
    goes to :func:`fit_traffic`.
    """
    end = time.time() if now is None else now
    counter = f'triton_batching_requests_success_total{{job="exporter",model="{model}"}}'
    query = f"sum({counter})"
    # A step shorter than the scrape interval repeats samples: bins of zero beside bins of
    # several scrapes' worth read as bursts (a 10 s window at 1 s steps over 5 s scrapes
    # fitted a Poisson load as cv 25.7). The interval comes from the samples themselves.
    scrapes = _query(
        prom_url,
        lambda client: client.query(
            f"max(count_over_time({counter}[{max(1, round(window_s))}s]))", end
        ),
    )
    if not scrapes.empty and float(scrapes["value"].iloc[0]) > 1:
        step_s = max(step_s, window_s / float(scrapes["value"].iloc[0]))
    window = Range(end - window_s, end, max(1, round(step_s)))
    frame = _query(prom_url, lambda client: client.query_range(query, window))
    if frame.empty:
        raise ValueError(f"Prometheus has no {query} (is the exporter scraped?)")
    samples = [
        (t.timestamp(), float(v)) for t, v in zip(frame["time"], frame["value"], strict=True)
    ]
    return fit_traffic(samples)
