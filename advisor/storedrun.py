"""The advisor's inputs from stored load runs (read once by :mod:`observe.storedrun`).

A run stores its scenario and parameters, one record per request (when it was due) and the
server's statistics delta for the window. From those come the service times per batch size
and the traffic (:func:`traffic_from_run`): a ``rate`` run is open loop, a ``concurrency``
run closed loop, a ``serial`` run one client with its gap as think time; ``concurrent`` and
``steps`` have no steady state to model and are refused. Several runs of one model, server,
config and traffic can be pooled (:func:`load_runs`), since one short traced run's fit moves
from run to run and the pooled one holds steadier. A run stored with the model's config and
Triton version uses them; an older one takes them from the server or the user.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from advisor.config import BatcherConfig, from_model_config
from advisor.costs import Calibration, fit_request_cost
from advisor.fit import fit_service_times
from advisor.handoff import (
    LINUX_DEFAULT_SLACK,
    MIN_REQUESTS,
    HandOff,
    Outside,
    TimerSlack,
    measure,
    outside,
)
from advisor.model import ClosedLoop, OpenLoop, ServiceModel, Traffic
from advisor.present import Measured
from loadgen.errors import LoadgenError
from loadgen.inputopts import InputOptions
from loadgen.results.histogram import Histogram
from loadgen.results.params import RunParams
from loadgen.results.summary import LoadRun, ServerSummary
from observe.storedrun import read, window
from observe.window import summed
from runs.errors import StoreError
from runs.store import RunStore

# The timer slack of a run's server, by its URL (advisor.handoff.timer_slack reads a local
# one's); Linux's default unless the caller can read it.
Lateness = Callable[[str], TimerSlack]


def _default_slack(url: str) -> TimerSlack:
    return LINUX_DEFAULT_SLACK


@dataclass(frozen=True)
class StoredRun:
    run_id: int
    model: str
    describe: str
    service: ServiceModel
    traffic: Traffic
    measured_batch_size: float | None
    measured_throughput_per_s: float | None
    # Share of the run's executions at each batch size (the statistics delta).
    measured_distribution: dict[int, float] = field(default_factory=dict)
    measured_client_p99_s: float | None = None  # the clients' p99 latency in the run
    # As the server reported them (None / "": a run stored before the store kept them).
    config: BatcherConfig | None = None
    triton_version: str = ""
    server: str = ""  # the run's Triton HTTP URL
    concurrency: int | None = None  # a closed-loop run's clients
    requests: int = 0  # sent in the run
    # A traced run: the time its requests spent outside Triton's queue and execution
    # (advisor.handoff.outside).
    outside: Outside | None = None
    # A traced run stored with Triton's timestamps (and its config): the batcher's
    # hand-offs measured from them, over ``traced_requests`` requests.
    handoff: HandOff | None = None
    traced_requests: int = 0
    shapes: dict[str, int] | None = None  # requests per shape sent (loadgen's record)
    inputs: InputOptions | None = None  # what the run's requests held, to replay them alike
    run_ids: tuple[int, ...] = ()  # the runs pooled (``run_id`` is the first)
    # The runs the service times came from: the untraced ones, when any were pooled.
    service_runs: tuple[int, ...] = ()
    # What Triton's statistics showed over those runs: the present the advisor checks.
    present: Measured | None = None

    @property
    def whose(self) -> str:
        """Whose statistics or traces a figure is: "run's", or "3 runs'" when pooled."""
        return _whose(len(self.run_ids))


def _whose(runs: int) -> str:
    return "run's" if runs < 2 else f"{runs} runs'"


def stored_config(model_config: dict | None) -> BatcherConfig | None:
    if model_config is None:
        return None
    try:
        return from_model_config(model_config)
    except ValueError:
        return None


def traffic_from_run(params: RunParams, due_s: list[float]) -> Traffic:
    return traffic_from_gaps(params, [b - a for a, b in zip(due_s, due_s[1:], strict=False)])


def traffic_from_gaps(params: RunParams, gaps: list[float]) -> Traffic:
    """The traffic of a run (or of runs of one traffic) from its scenario and, for a rate
    run, the gaps between its requests' due times."""
    scenario = params.scenario
    if scenario == "concurrency":
        return ClosedLoop(params.concurrency)
    if scenario == "serial":
        return ClosedLoop(1, think_s=float(params.gap_s))
    if scenario == "rate":
        if len(gaps) < 10 or statistics.mean(gaps) <= 0:
            return OpenLoop(float(params.rate), 1.0 if params.poisson else 0.0)
        mean = statistics.mean(gaps)
        return OpenLoop(1.0 / mean, statistics.pstdev(gaps) / mean)
    raise ValueError(
        f"a {scenario!r} run has no steady traffic to model: use a rate or concurrency run"
    )


def _traffic_key(run: LoadRun) -> tuple[object, ...]:
    """What must agree for runs to be one traffic: the scenario, its pace and the requests'
    contents (seeds and lengths may differ)."""
    p = run.params
    return (
        p.scenario,
        p.rate if p.scenario == "rate" else None,
        p.poisson if p.scenario == "rate" else None,
        p.concurrency if p.scenario == "concurrency" else None,
        p.gap_s if p.scenario == "serial" else None,
        *(getattr(p, f.name) for f in fields(InputOptions)),
    )


def _config_text(run: LoadRun) -> str:
    config = stored_config(run.model_config)
    return config.describe() if config else "not stored"


# What must agree for runs to be pooled: (what, its key, how it is shown).
_AGREE: tuple[tuple[str, Callable[[LoadRun], object], Callable[[LoadRun], str]], ...] = (
    ("model", lambda r: r.params.model, lambda r: r.params.model),
    ("server", lambda r: r.params.url, lambda r: r.params.url),
    ("config", lambda r: stored_config(r.model_config), _config_text),
    ("traffic", _traffic_key, lambda r: r.params.describe()),
)


def check_poolable(runs: Sequence[tuple[int, LoadRun]]) -> None:
    """ValueError (one line) unless the runs, (id, run) as the store holds them, can be
    pooled: one model on one server, one config, one traffic. The doctor checks with it
    before its checks read the runs' statistics summed; the advisor's fit with it too."""
    first_id, first = runs[0]
    for what, key, shown in _AGREE:
        for other_id, other in runs[1:]:
            if key(other) != key(first):
                raise ValueError(
                    f"runs {first_id} and {other_id} differ in their {what} "
                    f"({shown(first)} vs {shown(other)}): pool only runs of one model, "
                    "server, config and traffic"
                )


def _pooled_service(servers: list[ServerSummary]) -> ServiceModel:
    """Service times over several runs' statistics: per batch size, the executions and
    their compute seconds (input, infer and output, as the live fit counts them) summed.
    A run stored before the per-size total was kept has compute_infer per size and
    compute_input and compute_output as totals over the requests (Triton counts a batch's
    time once per request in it): their mean per request is added to every execution."""
    extra = 0.0
    if all(s.compute_s_per_execution_by_batch_size for s in servers):
        per_size = [s.compute_s_per_execution_by_batch_size for s in servers]
    else:
        per_size = [s.compute_infer_s_per_execution_by_batch_size for s in servers]
        requests = sum(s.requests_success for s in servers)
        in_out = sum(
            s.compute_s_by_phase.get(phase, 0.0)
            for s in servers
            for phase in ("compute_input", "compute_output")
        )
        extra = in_out / requests if requests else 0.0
    points: dict[int, tuple[int, float]] = {}
    for server, means in zip(servers, per_size, strict=True):
        for size, n in server.executions_by_batch_size.items():
            if (mean := means.get(size)) is None:
                continue
            count, seconds = points.get(size, (0, 0.0))
            points[size] = (count + n, seconds + n * (mean + extra))
    return fit_service_times(points)


def _p99(latencies_s: list[float]) -> float | None:
    hist = Histogram()
    for latency in latencies_s:
        hist.add(latency)
    return hist.quantile(0.99) if hist.n else None


def load(db: str | Path, run_id: int, lateness: Lateness = _default_slack) -> StoredRun:
    """Read run ``run_id``, all the advisor uses of it, in one place (callers read a run
    once); ValueError (one line) if it cannot be used."""
    return load_runs(db, (run_id,), lateness)


def run_ids(text: str) -> tuple[int, ...]:
    """``--run``'s value, "3" or "3,4,5", as an argparse type: one line on misuse (the CLIs
    of the advisor and the doctor exit 2 with it)."""
    try:
        ids = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        ids = ()
    if not ids or min(ids) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a run id or a comma-separated list of them (e.g. 3 or 3,4,5)"
        )
    if len(set(ids)) != len(ids):
        raise argparse.ArgumentTypeError(f"{text!r} names a run twice: each run is pooled once")
    return ids


def load_runs(
    db: str | Path, run_ids: Sequence[int], lateness: Lateness = _default_slack
) -> StoredRun:
    """Read runs ``run_ids`` of one model, server, config and traffic, pooled: service times
    over all their statistics (the untraced runs' alone when there are any: tracing costs
    time in every execution), the traffic over all their arrival gaps (none between runs),
    the hand-offs over all their traces and the time outside Triton over all their traced
    requests. One short traced run's fit moves from run to run (docs/validation.md); several
    hold it steadier. ``lateness``: the timer slack of the runs' server (by its URL), for the
    hand-offs. ValueError (one line) if they cannot be used or pooled."""
    if not run_ids:
        raise ValueError("give at least one run id")
    if len(set(run_ids)) != len(run_ids):
        raise ValueError(f"runs {', '.join(map(str, run_ids))}: a run is named twice")
    try:
        with RunStore(db) as runs:
            reads = [read(runs, run_id) for run_id in run_ids]
    except (LoadgenError, StoreError) as exc:
        raise ValueError(str(exc)) from None
    check_poolable([(r.run_id, r.run) for r in reads])
    first = reads[0]
    run, params = first.run, first.run.params
    servers = [r.server for r in reads]
    # Tracing costs Triton time in every execution (measured: docs/validation.md, "Tracing
    # costs time in every execution"): untraced runs among those pooled give the service
    # times alone.
    timed = [r for r in reads if not r.run.params.trace] or reads
    sizes: Counter[int] = Counter()
    for server in servers:
        sizes.update(server.executions_by_batch_size)
    executions = sum(s.executions for s in servers)
    sent = sum(r.run.summary.client.sent for r in reads)
    # A batch is its run's: keyed by both when runs are pooled.
    samples = [(*sample[:3], (r.run_id, sample[3])) for r in reads for sample in r.samples]
    traced = [t for r in reads for t in r.traced]
    measured_outside = outside(samples)
    if measured_outside is not None:
        count = f"{measured_outside.requests:,}"
        source = f"the {_whose(len(reads))} {count} traced requests; the spread is simulated"
        measured_outside = replace(measured_outside, source=source)
    config = stored_config(run.model_config)
    handoff = (
        measure(traced, config, lateness(params.url))
        if config and len(traced) >= MIN_REQUESTS
        else None
    )
    if len(reads) == 1:
        describe = f"run {first.run_id} ({params.scenario}, {run.status}, {sent} requests)"
        p99 = run.summary.client.latency_s.p99
        throughput = run.summary.client.throughput_per_s
    else:
        statuses = ", ".join(sorted({r.run.status for r in reads}))
        ids = ", ".join(str(r.run_id) for r in reads)
        describe = f"runs {ids} pooled ({params.scenario}, {statuses}, {sent} requests)"
        p99 = _p99([latency for r in reads for latency in r.latencies_s])
        # requests over the runs' time together: each run's sent / throughput is its time
        times: list[float] = [
            r.run.summary.client.sent / thr
            for r in reads
            if (thr := r.run.summary.client.throughput_per_s)
        ]
        total_s = math.fsum(times)
        throughput = sent / total_s if len(times) == len(reads) and total_s > 0 else None
    gaps = [b - a for r in reads for a, b in zip(r.due_s, r.due_s[1:], strict=False)]
    shapes: Counter[str] = Counter()
    for r in reads:
        shapes.update(r.run.summary.client.shapes or {})
    return StoredRun(
        run_id=first.run_id,
        model=params.model,
        describe=describe,
        service=_pooled_service([r.server for r in timed]),
        traffic=traffic_from_gaps(params, gaps),
        measured_batch_size=sum(s.inferences for s in servers) / executions,
        measured_distribution=_shares(dict(sizes)),
        measured_client_p99_s=p99,
        measured_throughput_per_s=throughput,
        config=config,
        triton_version=run.triton_version,
        server=params.url,
        concurrency=params.concurrency if params.scenario == "concurrency" else None,
        requests=sent,
        outside=measured_outside,
        handoff=handoff,
        traced_requests=len(traced),
        shapes=dict(shapes) if any(r.run.summary.client.shapes for r in reads) else None,
        inputs=InputOptions(**{f.name: getattr(params, f.name) for f in fields(InputOptions)}),
        run_ids=tuple(r.run_id for r in reads),
        service_runs=tuple(r.run_id for r in timed),
        present=Measured.from_window(
            summed([window(r.run, r.server) for r in timed], "the runs pooled")
        ),
    )


def _shares(sizes: dict[int, int]) -> dict[int, float]:
    total = sum(sizes.values())
    return {size: n / total for size, n in sorted(sizes.items())} if total else {}


def calibration(run: StoredRun, config: BatcherConfig, cores: float) -> Calibration:
    """Costs fitted to a closed-loop run's measured throughput on ``cores`` (see
    :func:`advisor.costs.fit_request_cost`); ValueError (one line) when the run cannot
    give them (not closed loop, no throughput, service times too slow)."""
    if not run.concurrency or not run.measured_throughput_per_s:
        raise ValueError("only a concurrency run's throughput calibrates the costs")
    request_s = fit_request_cost(
        config, run.service, run.concurrency, run.measured_throughput_per_s, cores
    )
    return Calibration(
        cores,
        request_s,
        f"the throughput of stored run {run.run_id} at concurrency {run.concurrency} "
        f"({run.measured_throughput_per_s:,.0f}/s), fitted",
        time.time(),
        run.requests,
        server=run.server,
        model=run.model,
        triton_version=run.triton_version,
    )
