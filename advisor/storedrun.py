"""The advisor's inputs from a stored load run (the load generator's SQLite store).

A run stores its scenario and parameters, one record per request (when it was due),
and the server's statistics delta for the window (``loadgen.results.summary.ServerSummary``).
From those:

* service times: per batch size, the executions and the mean ``compute_infer``
  seconds per execution, fitted as usual (compute_input/output are not stored per
  size, so they are left out);
* traffic: a ``rate`` run is open loop, with rate and burstiness from the records'
  due times; a ``concurrency`` run is closed loop at its concurrency; a ``serial``
  run is one client with its gap as think time. ``concurrent`` (one burst) and
  ``steps`` (changing rates) have no steady state to model, and are refused.

Runs stored since the store kept them carry the model's config and the Triton version as
the server reported them when the run began (``RunStore.load_server``); an older run
has neither, and the caller reads the config from the server or takes it from the user.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from advisor.config import BatcherConfig, from_model_config
from advisor.costs import Calibration, fit_request_cost
from advisor.fit import fit_service_times
from advisor.handoff import MIN_REQUESTS, HandOff, Outside, measure, outside
from advisor.model import ClosedLoop, OpenLoop, ServiceModel, Traffic
from loadgen.errors import LoadgenError
from loadgen.inputopts import InputOptions
from loadgen.results.params import RunParams
from loadgen.results.summary import ServerSummary
from loadgen.store.runstore import RunStore


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


def stored_config(model_config: dict | None) -> BatcherConfig | None:
    if model_config is None:
        return None
    try:
        return from_model_config(model_config)
    except ValueError:
        return None


def service_from_summary(server: ServerSummary) -> ServiceModel:
    means = server.compute_infer_s_per_execution_by_batch_size
    points = {
        size: (n, n * mean)
        for size, n in server.executions_by_batch_size.items()
        if (mean := means.get(size)) is not None
    }
    return fit_service_times(points)


def traffic_from_run(params: RunParams, due_s: list[float]) -> Traffic:
    scenario = params.scenario
    if scenario == "concurrency":
        return ClosedLoop(params.concurrency)
    if scenario == "serial":
        return ClosedLoop(1, think_s=float(params.gap_s))
    if scenario == "rate":
        gaps = [b - a for a, b in zip(due_s, due_s[1:], strict=False)]
        if len(gaps) < 10 or statistics.mean(gaps) <= 0:
            return OpenLoop(float(params.rate), 1.0 if params.poisson else 0.0)
        mean = statistics.mean(gaps)
        return OpenLoop(1.0 / mean, statistics.pstdev(gaps) / mean)
    raise ValueError(
        f"a {scenario!r} run has no steady traffic to model: use a rate or concurrency run"
    )


def load(db: str | Path, run_id: int) -> StoredRun:
    """Read run ``run_id``, all the advisor uses of it, in one place (callers read a run
    once); ValueError (one line) if it cannot be used."""
    try:
        with RunStore(db) as runs:
            run = runs.load_run(run_id)
            records = runs.load_records(run_id)
            traced = runs.load_traced_requests(run_id, run.params.model)
            try:
                samples = runs.load_traced_latencies(run_id)
            except LoadgenError:  # a store without the traced tables: no time outside
                samples = []
    except LoadgenError as exc:
        raise ValueError(str(exc)) from None
    server, client = run.summary.server, run.summary.client
    if server is None or not server.executions:
        raise ValueError(
            f"run {run_id} has no server-side statistics to fit service times from "
            f"({run.summary.server_error or 'the model executed nothing'})"
        )
    due = sorted(float(r["start_s"]) for r in records)
    measured_outside = outside(samples)
    if measured_outside is not None:
        source = f"the run's {measured_outside.requests:,} traced requests; the spread is simulated"
        measured_outside = replace(measured_outside, source=source)
    config = stored_config(run.model_config)
    handoff = measure(traced, config) if config and len(traced) >= MIN_REQUESTS else None
    return StoredRun(
        run_id=run_id,
        model=run.params.model,
        describe=f"run {run_id} ({run.params.scenario}, {run.status}, {client.sent} requests)",
        service=service_from_summary(server),
        traffic=traffic_from_run(run.params, due),
        measured_batch_size=server.average_batch_size,
        measured_distribution=_shares(server.executions_by_batch_size),
        measured_client_p99_s=client.latency_s.p99,
        measured_throughput_per_s=client.throughput_per_s,
        config=config,
        triton_version=run.triton_version,
        server=run.params.url,
        concurrency=run.params.concurrency if run.params.scenario == "concurrency" else None,
        requests=client.sent,
        outside=measured_outside,
        handoff=handoff,
        traced_requests=len(traced),
        shapes=client.shapes,
        inputs=InputOptions(**{f.name: getattr(run.params, f.name) for f in fields(InputOptions)}),
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
