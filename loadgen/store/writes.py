"""Writing runs: a ``runs`` row's values, the records, timeline, traces and server of a run,
a whole run at once (``save``), and the final status of a run that did not end normally.

Each function takes the connection of an open ``RunStore`` (``loadgen.store.runstore``) or of
the streaming writer (``loadgen.store.writer``); the caller holds the transaction.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable
from typing import Any

from loadgen.results.histogram import Histogram, hist_json
from loadgen.results.params import RunParams
from loadgen.results.recorder import TIMELINE_COLUMNS
from loadgen.results.result import RunResult
from loadgen.results.summary import ClientSummary, LoadRun, RunSummary
from loadgen.store.schema import ABANDONED, STALE_S


def settle_abandoned(conn: sqlite3.Connection, now: float | None = None) -> list[int]:
    """Runs left ``running`` with no commit for ``STALE_S``: their process died. Mark them
    ``failed``, saying so, with the figures of their last commit; returns their ids."""
    now = time.time() if now is None else now
    rows = conn.execute(
        "SELECT id, summary FROM runs WHERE status = 'running' AND finished_at < ?",
        (now - STALE_S,),
    ).fetchall()
    for row in rows:
        mark_ended(conn, int(row["id"]), "failed", ABANDONED)
    return [int(r["id"]) for r in rows]


def mark_ended(conn: sqlite3.Connection, run_id: int, status: str, error: str) -> None:
    """Give a run that did not end normally its final ``status``, with ``error`` (why) in
    its client summary; its figures stay those of its last commit."""
    row = conn.execute("SELECT summary FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        return
    summary = json.loads(row["summary"])
    summary["error"] = error
    conn.execute(
        "UPDATE runs SET status = ?, summary = ?, server = ? WHERE id = ?",
        (status, json.dumps(summary), json.dumps({"error": error}), run_id),
    )


RUN_VALUES = (
    "group_id, label, scenario, model, protocol, target, status, started_at, finished_at, "
    "sent, ok, failed, timed_out, throughput_per_s, p99_s, params, summary, server"
)


def run_values(
    params: RunParams,
    group_id: str,
    status: str,
    started_at: float,
    finished_at: float,
    client: ClientSummary,
    server: dict[str, Any],
) -> tuple[Any, ...]:
    """A ``runs`` row in the order of ``RUN_VALUES``."""
    target = params.grpc_url if params.protocol == "grpc" else params.url
    return (
        group_id,
        params.label,
        params.scenario,
        params.model,
        params.protocol,
        target,
        status,
        started_at,
        finished_at,
        client.sent,
        client.ok,
        client.failed,
        client.timed_out,
        client.throughput_per_s,
        client.latency_s.p99,
        json.dumps(params.to_json()),
        json.dumps(client.to_json()),
        json.dumps(server),
    )


def final_values(result: RunResult) -> tuple[Any, ...]:
    return run_values(
        result.params,
        result.group_id,
        result.status,
        result.started_at,
        result.finished_at,
        result.summary.client,
        server_column(result.summary),
    )


def save(conn: sqlite3.Connection, result: RunResult) -> int:
    """Store a run made without a store (its records in memory) in one transaction, with its
    records and timeline; returns its id. ``loadgen.engine.runner.run`` streams instead
    (``loadgen.store.writer``)."""
    with conn:
        cur = conn.execute(
            f"INSERT INTO runs ({RUN_VALUES}) VALUES ({','.join('?' * 18)})",
            final_values(result),
        )
        run_id = int(cur.lastrowid or 0)
        insert_records(conn, run_id, result.records())
        upsert_timeline(conn, run_id, result.timeline)
        if result.trace is not None:
            save_trace(conn, run_id, result)
        save_server(conn, run_id, result)
        if result.summary.client.send_lateness_s is not None:
            save_lateness(conn, run_id, result.recorder.lateness)
    return run_id


def insert_records(conn: sqlite3.Connection, run_id: int, rows: Iterable[tuple[Any, ...]]) -> int:
    """(seq, start_s, latency_s, outcome, error) rows of run ``run_id``; returns how many."""
    cur = conn.executemany(
        "INSERT INTO records VALUES (?,?,?,?,?,?)", ((run_id, *row) for row in rows)
    )
    return max(cur.rowcount, 0)


def upsert_timeline(conn: sqlite3.Connection, run_id: int, rows: Iterable[dict[str, Any]]) -> None:
    """Timeline rows of run ``run_id``; a second written before is replaced (it was still
    going then)."""
    conn.executemany(
        "INSERT OR REPLACE INTO timeline VALUES (?,?,?,?,?,?,?,?,?)",
        ((run_id, *(r[c] for c in TIMELINE_COLUMNS)) for r in rows),
    )


def save_trace(conn: sqlite3.Connection, run_id: int, result: RunResult) -> None:
    """The traced requests, each joined to its client record by the request's index."""
    assert result.trace is not None
    record_of = result.recorder.seq_of or {}
    conn.execute(
        "INSERT INTO trace_windows VALUES (?,?,?)",
        (run_id, result.trace.sent, result.trace.note),
    )
    conn.executemany(
        "INSERT INTO traced VALUES (?,?,?,?,?,?,?,?)",
        (
            (
                run_id,
                t.index,
                record_of.get(t.index),
                t.queue_wait_s,
                t.compute_s,
                t.batch,
                t.batch_size,
                t.reason,
            )
            for t in result.traced or []
        ),
    )
    conn.executemany(
        "INSERT OR IGNORE INTO traced_times VALUES (?,?,?,?,?,?)",
        (
            (
                run_id,
                r.trace_id,
                r.request_id,
                r.queue_start_ns,
                r.compute_start_ns,
                r.compute_end_ns,
            )
            for r in result.traced_requests or []
        ),
    )


def save_lateness(conn: sqlite3.Connection, run_id: int, lateness: Histogram) -> None:
    """An open-loop run's send-lateness histogram, so that runs made side by side merge
    its percentiles exactly (``loadgen.reports.merge``)."""
    conn.execute(
        "INSERT OR REPLACE INTO send_lateness VALUES (?,?)",
        (run_id, json.dumps(hist_json(lateness))),
    )


def save_server(conn: sqlite3.Connection, run_id: int, run: LoadRun) -> None:
    """The Triton version and model config the run was made against (if they were read)."""
    if run.triton_version or run.model_config is not None:
        conn.execute(
            "INSERT OR REPLACE INTO run_server VALUES (?,?,?)",
            (run_id, run.triton_version, json.dumps(run.model_config)),
        )


def server_column(summary: RunSummary) -> dict[str, Any]:
    server = summary.server_json()
    if summary.server_restarted:
        server["server_restarted"] = True
    return server
