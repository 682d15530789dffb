"""The advisor's inputs from a stored load run (the load generator's SQLite store).

A run stores its scenario and parameters, one record per request (when it was due),
and the server's statistics delta for the window (``loadgen.serverside.summarize``).
From those:

* service times: per batch size, the executions and the mean ``compute_infer``
  seconds per execution, fitted as usual (compute_input/output are not stored per
  size, so they are left out);
* traffic: a ``rate`` run is open loop, with rate and burstiness from the records'
  due times; a ``concurrency`` run is closed loop at its concurrency; a ``serial``
  run is one client with its gap as think time. ``concurrent`` (one burst) and
  ``steps`` (changing rates) have no steady state to model, and are refused.

The batching config is not in the store: the caller reads it from the server or
takes it from the user.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.fit import fit_service_times
from advisor.model import ClosedLoop, OpenLoop, ServiceModel, Traffic
from loadgen import store
from loadgen.errors import LoadgenError


@dataclass(frozen=True)
class StoredRun:
    run_id: int
    model: str
    describe: str
    service: ServiceModel
    traffic: Traffic
    measured_batch_size: float | None
    measured_throughput_per_s: float | None


def service_from_summary(server: dict[str, Any]) -> ServiceModel:
    counts = server.get("executions_by_batch_size") or {}
    means = server.get("compute_infer_s_per_execution_by_batch_size") or {}
    points = {
        int(size): (int(n), int(n) * float(means[size]))
        for size, n in counts.items()
        if means.get(size) is not None
    }
    return fit_service_times(points)


def traffic_from_run(params: dict[str, Any], due_s: list[float]) -> Traffic:
    scenario = params.get("scenario")
    if scenario == "concurrency":
        return ClosedLoop(int(params["concurrency"]))
    if scenario == "serial":
        return ClosedLoop(1, think_s=float(params.get("gap_s", 0.0)))
    if scenario == "rate":
        gaps = [b - a for a, b in zip(due_s, due_s[1:], strict=False)]
        if len(gaps) < 10 or statistics.mean(gaps) <= 0:
            return OpenLoop(float(params["rate"]), 1.0 if params.get("poisson") else 0.0)
        mean = statistics.mean(gaps)
        return OpenLoop(1.0 / mean, statistics.pstdev(gaps) / mean)
    raise ValueError(
        f"a {scenario!r} run has no steady traffic to model: use a rate or concurrency run"
    )


def load(db: str | Path, run_id: int) -> StoredRun:
    """Read run ``run_id``; ValueError (one line) if it cannot be used."""
    try:
        row = store.load_run(db, run_id)
        records = store.load_records(db, run_id)
    except LoadgenError as exc:
        raise ValueError(str(exc)) from None
    server = row.get("server") or {}
    if "error" in server or not server.get("executions"):
        raise ValueError(
            f"run {run_id} has no server-side statistics to fit service times from "
            f"({server.get('error', 'the model executed nothing')})"
        )
    due = sorted(float(r["start_s"]) for r in records)
    params = row["params"]
    return StoredRun(
        run_id=run_id,
        model=str(row["model"]),
        describe=f"run {run_id} ({row['scenario']}, {row['status']}, {row['sent']} requests)",
        service=service_from_summary(server),
        traffic=traffic_from_run(params, due),
        measured_batch_size=server.get("average_batch_size"),
        measured_throughput_per_s=row.get("throughput_per_s"),
    )
