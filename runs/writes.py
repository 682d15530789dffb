"""Writing runs: a ``runs`` row from the run's JSON, its records, timeline, traces, server and
send lateness, a whole run at once, a run's progress while it goes, and the final status of
a run that did not end normally.

The values are plain: the parameters and the client summary as the JSON the load generator
writes (``RunParams.to_json``, ``ClientSummary.to_json``), rows as tuples. Each function
takes the connection of an open ``RunStore`` (``runs.store``); the caller holds the
transaction.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runs.schema import ABANDONED, STALE_S, TIMELINE_COLUMNS

RUN_VALUES = (
    "group_id, label, scenario, model, protocol, target, status, started_at, finished_at, "
    "sent, ok, failed, timed_out, throughput_per_s, p99_s, params, summary, server"
)
_SLOTS = ",".join("?" * 18)


@dataclass(frozen=True)
class Trace:
    """A traced run's window: requests sent, a note when the traces are incomplete, one
    (idx, record, queue_wait_s, compute_s, batch, batch_size, reason) row per traced request
    and one (trace_id, request_id, queue_start_ns, compute_start_ns, compute_end_ns) row of
    Triton's timestamps per request of the model in the window."""

    sent: int
    note: str
    traced: list[tuple[Any, ...]]
    times: list[tuple[Any, ...]]


@dataclass(frozen=True)
class Ending:
    """What a run's end writes: its final row (``run_values``), its traces, the server it
    was made against and its send-lateness histogram (JSON), each when it has one."""

    values: tuple[Any, ...]
    trace: Trace | None = None
    triton_version: str = ""
    model_config: dict[str, Any] | None = None
    lateness: dict[str, Any] | None = None


def run_values(
    params: dict[str, Any],
    group_id: str,
    status: str,
    started_at: float,
    finished_at: float,
    client: dict[str, Any],
    server: dict[str, Any],
) -> tuple[Any, ...]:
    """A ``runs`` row in the order of ``RUN_VALUES``, from the run's parameters, client
    summary and server side as JSON."""
    target = params["grpc_url"] if params["protocol"] == "grpc" else params["url"]
    return (
        group_id,
        params["label"],
        params["scenario"],
        params["model"],
        params["protocol"],
        target,
        status,
        started_at,
        finished_at,
        *_counts(client),
        json.dumps(params),
        json.dumps(client),
        json.dumps(server),
    )


def _counts(client: dict[str, Any]) -> tuple[Any, ...]:
    """sent, ok, failed, timed_out, throughput_per_s, p99_s of a client summary's JSON."""
    return (
        client["sent"],
        client["ok"],
        client["failed"],
        client["timed_out"],
        client["throughput_per_s"],
        client["latency_s"]["p99"],
    )


def insert_run(conn: sqlite3.Connection, values: tuple[Any, ...]) -> int:
    """A new ``runs`` row; its id."""
    cur = conn.execute(f"INSERT INTO runs ({RUN_VALUES}) VALUES ({_SLOTS})", values)
    return int(cur.lastrowid or 0)


def update_run(conn: sqlite3.Connection, run_id: int, values: tuple[Any, ...]) -> None:
    conn.execute(f"UPDATE runs SET ({RUN_VALUES}) = ({_SLOTS}) WHERE id = ?", (*values, run_id))


def update_progress(
    conn: sqlite3.Connection, run_id: int, at: float, client: dict[str, Any]
) -> None:
    """A run still going: its counts and client summary so far, committed at ``at``."""
    conn.execute(
        "UPDATE runs SET finished_at = ?, sent = ?, ok = ?, failed = ?, timed_out = ?, "
        "throughput_per_s = ?, p99_s = ?, summary = ? WHERE id = ?",
        (at, *_counts(client), json.dumps(client), run_id),
    )


def begin_run(conn: sqlite3.Connection, values: tuple[Any, ...]) -> int:
    """A run's row as it starts (status ``running``), after settling the runs abandoned
    before it; its id."""
    settle_abandoned(conn)
    return insert_run(conn, values)


def end_run(conn: sqlite3.Connection, run_id: int, ending: Ending) -> None:
    """A run's final row, traces, server and send lateness."""
    update_run(conn, run_id, ending.values)
    _write_ending(conn, run_id, ending)


def delete_run(conn: sqlite3.Connection, run_id: int) -> None:
    """A run begun that sent nothing after all: its row, records and timeline go."""
    for table in ("records", "timeline", "runs"):
        column = "id" if table == "runs" else "run_id"
        conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (run_id,))


def save(
    conn: sqlite3.Connection,
    ending: Ending,
    records: Iterable[tuple[Any, ...]],
    timeline: Iterable[dict[str, Any]],
) -> int:
    """A whole run made without a store (its records in memory) in one transaction, with
    its records and timeline; returns its id. A run with a store streams instead."""
    with conn:
        run_id = insert_run(conn, ending.values)
        insert_records(conn, run_id, records)
        upsert_timeline(conn, run_id, timeline)
        _write_ending(conn, run_id, ending)
    return run_id


def _write_ending(conn: sqlite3.Connection, run_id: int, ending: Ending) -> None:
    if ending.trace is not None:
        save_trace(conn, run_id, ending.trace)
    if ending.triton_version or ending.model_config is not None:
        conn.execute(
            "INSERT OR REPLACE INTO run_server VALUES (?,?,?)",
            (run_id, ending.triton_version, json.dumps(ending.model_config)),
        )
    if ending.lateness is not None:
        save_lateness(conn, run_id, ending.lateness)


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


def save_trace(conn: sqlite3.Connection, run_id: int, trace: Trace) -> None:
    """The traced requests, each joined to its client record by the request's index."""
    conn.execute("INSERT INTO trace_windows VALUES (?,?,?)", (run_id, trace.sent, trace.note))
    conn.executemany(
        "INSERT INTO traced VALUES (?,?,?,?,?,?,?,?)", ((run_id, *t) for t in trace.traced)
    )
    conn.executemany(
        "INSERT OR IGNORE INTO traced_times VALUES (?,?,?,?,?,?)",
        ((run_id, *r) for r in trace.times),
    )


def save_lateness(conn: sqlite3.Connection, run_id: int, histogram: dict[str, Any]) -> None:
    """An open-loop run's send-lateness histogram (its JSON), so that runs made side by side
    merge its percentiles exactly (``loadgen.reports.merge``)."""
    conn.execute(
        "INSERT OR REPLACE INTO send_lateness VALUES (?,?)", (run_id, json.dumps(histogram))
    )


def import_run(
    conn: sqlite3.Connection,
    values: tuple[Any, ...],
    begun_id: int | None,
    timeline: Iterable[dict[str, Any]],
    records: Iterable[tuple[Any, ...]],
) -> tuple[int, int]:
    """A run saved beside the store put back, in one transaction: into the row it had begun
    in the store (``begun_id``, if still there), else the row of the same start and
    parameters, else a new one; then its timeline and the records not yet in. Importing
    twice changes nothing. Returns the run's id and the records added."""
    with conn:
        run_id = begun_id
        begun = (
            run_id is not None
            and conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone()
        )
        if not begun:
            found = conn.execute(
                "SELECT id FROM runs WHERE started_at = ? AND params = ?",
                (values[7], values[15]),
            ).fetchone()
            run_id = None if found is None else int(found[0])
        if run_id is None:
            run_id = insert_run(conn, values)
        else:
            update_run(conn, run_id, values)
        upsert_timeline(conn, run_id, timeline)
        added = conn.executemany(
            "INSERT OR IGNORE INTO records VALUES (?,?,?,?,?,?)",
            ((run_id, *row) for row in records),
        ).rowcount
    return run_id, max(added, 0)


def save_merged(
    conn: sqlite3.Connection,
    values: tuple[Any, ...],
    timeline: Iterable[dict[str, Any]],
    lateness: dict[str, Any] | None,
    sources: Sequence[tuple[Path, int, float]] | None,
) -> int:
    """A run merged from several (``loadgen.reports.merge``): its row, timeline and send
    lateness in one transaction, then, when every part came from a store (``sources``: the
    store, the run's id there, and its offset on the common clock), every part's records
    numbered in order of completion. Returns its id."""
    with conn:
        run_id = insert_run(conn, values)
        upsert_timeline(conn, run_id, timeline)
        if lateness is not None:
            save_lateness(conn, run_id, lateness)
    if sources is not None:
        _copy_records(conn, run_id, sources)
    return run_id


def _copy_records(
    conn: sqlite3.Connection, run_id: int, sources: Sequence[tuple[Path, int, float]]
) -> None:
    """Every source run's records, their start on the common clock, numbered by completion."""
    conn.execute(
        "CREATE TEMP TABLE merging (start_s REAL, latency_s REAL, outcome TEXT, error TEXT)"
    )
    try:
        for i, (src, src_id, offset) in enumerate(sources):
            conn.execute(f"ATTACH DATABASE ? AS part{i}", (str(src),))
            try:
                conn.execute(
                    f"INSERT INTO merging SELECT start_s + ?, latency_s, outcome, error "
                    f"FROM part{i}.records WHERE run_id = ?",
                    (offset, src_id),
                )
                conn.commit()
            finally:
                conn.execute(f"DETACH DATABASE part{i}")
        with conn:
            conn.execute(
                "INSERT INTO records SELECT ?, ROW_NUMBER() OVER "
                "(ORDER BY start_s + latency_s, start_s) - 1, start_s, latency_s, outcome, "
                "error FROM merging",
                (run_id,),
            )
    finally:
        conn.execute("DROP TABLE IF EXISTS temp.merging")
