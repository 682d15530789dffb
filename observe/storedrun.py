"""Stored load runs, read as windows: a run of the load generator's store holds what a
window of the live server holds (the statistics delta, as ``ServerSummary``), and beside it
each request's due time, latency and outcome, and the traces taken during it.

:func:`read` reads one run once, all of it, for the advisor's fits; :func:`window` is a
run's window (:class:`observe.window.Window`), which the doctor's checks read as they read a
live one.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.results.stored import load_run
from loadgen.results.summary import LoadRun, ServerSummary
from observe.window import Window, from_summary
from runs.errors import StoreError
from runs.store import RunStore
from tritonapi.traces import TracedRequest


@dataclass(frozen=True)
class Read:
    """One stored run as the store holds it: read once."""

    run_id: int
    run: LoadRun
    server: ServerSummary
    due_s: list[float]
    latencies_s: list[float]  # of the answered requests
    traced: list[TracedRequest]
    samples: list[tuple[float, float, float, int]]


def window(run: LoadRun, server: ServerSummary, source: str = "") -> Window:
    """The run's window: the server's statistics over the run's time."""
    return from_summary(server, max(run.finished_at - run.started_at, 1e-3), source)


def read(runs: RunStore, run_id: int) -> Read:
    """Run ``run_id``, its records and traces; ValueError (one line) when it has no
    server-side statistics."""
    run = load_run(runs, run_id)
    records = runs.load_records(run_id)
    traced = runs.load_traced_requests(run_id, run.params.model)
    try:
        samples = runs.load_traced_latencies(run_id)
    except StoreError:  # a store without the traced tables: no time outside
        samples = []
    server = run.summary.server
    if server is None or not server.executions:
        raise ValueError(
            f"run {run_id} has no server-side statistics to fit service times from "
            f"({run.summary.server_error or 'the model executed nothing'})"
        )
    return Read(
        run_id,
        run,
        server,
        sorted(float(r["start_s"]) for r in records),
        [float(r["latency_s"]) for r in records if r["outcome"] == "ok"],
        traced,
        samples,
    )
