"""Load runs in and out of the store (``runs``): the typed run here, plain rows and JSON there.

``row_values`` and ``ending`` turn a run into what the store writes; ``load_run`` reads one
back as the typed ``LoadRun`` that ``loadgen.engine.runner.run`` returned for it. The JSON
is the one shape ``to_json`` / ``from_json`` of ``loadgen.results`` define.
"""

from __future__ import annotations

from typing import Any

from loadgen.results.histogram import Histogram, hist_from_json, hist_json
from loadgen.results.params import RunParams
from loadgen.results.result import RunResult
from loadgen.results.summary import ClientSummary, LoadRun, RunSummary
from loadgen.results.tracing import TracedRecord, summarize
from runs.store import RunStore
from runs.writes import Ending, Trace, run_values


def row_values(
    params: RunParams,
    group_id: str,
    status: str,
    started_at: float,
    finished_at: float,
    client: ClientSummary,
    server: dict[str, Any],
) -> tuple[Any, ...]:
    """A run's ``runs`` row."""
    return run_values(
        params.to_json(), group_id, status, started_at, finished_at, client.to_json(), server
    )


def final_values(run: LoadRun) -> tuple[Any, ...]:
    """A finished run's ``runs`` row."""
    return row_values(
        run.params,
        run.group_id,
        run.status,
        run.started_at,
        run.finished_at,
        run.summary.client,
        server_column(run.summary),
    )


def server_column(summary: RunSummary) -> dict[str, Any]:
    """The ``server`` column: the server side's JSON, and whether the server restarted."""
    server = summary.server_json()
    if summary.server_restarted:
        server["server_restarted"] = True
    return server


def ending(result: RunResult) -> Ending:
    """What the store writes at a run's end: its final row, traces, server, send lateness."""
    trace = None
    if result.trace is not None:
        record_of = result.recorder.seq_of or {}
        trace = Trace(
            result.trace.sent,
            result.trace.note,
            [
                (
                    t.index,
                    record_of.get(t.index),
                    t.queue_wait_s,
                    t.compute_s,
                    t.batch,
                    t.batch_size,
                    t.reason,
                )
                for t in result.traced or []
            ],
            [
                (r.trace_id, r.request_id, r.queue_start_ns, r.compute_start_ns, r.compute_end_ns)
                for r in result.traced_requests or []
            ],
        )
    lateness = None
    if result.summary.client.send_lateness_s is not None:
        lateness = hist_json(result.recorder.lateness)
    return Ending(
        final_values(result),
        trace,
        result.triton_version,
        result.model_config,
        lateness,
    )


def save(store: RunStore, result: RunResult) -> int:
    """A run made without a store (its records in memory) into ``store`` at once; its id.
    ``loadgen.engine.runner.run`` streams instead (``loadgen.engine.writer``)."""
    return store.save(ending(result), result.records(), result.timeline)


def load_run(store: RunStore, run_id: int) -> LoadRun:
    """One stored run as the typed ``LoadRun`` that ``loadgen.engine.runner.run`` returned."""
    row = store.load_row(run_id)
    server = dict(row["server"])
    restarted = bool(server.pop("server_restarted", False))
    version, config = store.load_server(run_id)
    traced = store.load_traced(run_id)
    return LoadRun(
        params=RunParams.from_json(row["params"]),
        status=str(row["status"]),
        started_at=float(row["started_at"]),
        finished_at=float(row["finished_at"]),
        summary=RunSummary.from_json(row["summary"], server, restarted),
        run_id=int(row["id"]),
        group_id=str(row["group_id"]),
        trace=None if traced is None else summarize(traced_records(traced[0]), *traced[1:]),
        triton_version=version,
        model_config=config,
    )


def traced_records(rows: list[tuple[Any, ...]]) -> list[TracedRecord]:
    """The rows of ``RunStore.load_traced`` as typed records."""
    return [TracedRecord(*row) for row in rows]


def load_lateness(store: RunStore, run_id: int) -> Histogram | None:
    """An open-loop run's send-lateness histogram; None for closed-loop and older runs."""
    data = store.load_lateness(run_id)
    return None if data is None else hist_from_json(data)
