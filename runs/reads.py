"""Reading runs back: the listing, one run's row, its timeline, records, traces, server and
send lateness, and pandas frames of them (pandas is imported only when a frame is asked for).

Values come back plain: rows as dicts or tuples, the stored JSON decoded (the typed run is
the load generator's ``loadgen.results.stored.load_run``). Each function takes the connection
of an open ``RunStore`` (``runs.store``). A table added after a store was made (traces, the
server's config) reads as empty in it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from runs.errors import StoreError
from runs.schema import RECORD_COLUMNS, RUN_COLUMNS, TIMELINE_COLUMNS
from tritonapi.traces import TracedRequest

if TYPE_CHECKING:
    import pandas as pd


def load_server(conn: sqlite3.Connection, run_id: int) -> tuple[str, dict[str, Any] | None]:
    """(Triton version, model config JSON) a run was made against; ("", None) for a run
    stored before they were kept."""
    try:
        row = conn.execute(
            "SELECT triton_version, model_config FROM run_server WHERE run_id = ?", (run_id,)
        ).fetchone()
    except sqlite3.OperationalError:  # a store from before run_server: no such table
        return "", None
    if row is None:
        return "", None
    config = json.loads(row["model_config"])
    return str(row["triton_version"]), config if isinstance(config, dict) else None


def load_traced(
    conn: sqlite3.Connection, run_id: int
) -> tuple[list[tuple[Any, ...]], int, str] | None:
    """A traced run's requests as Triton traced them (idx, queue_wait_s, compute_s, batch,
    batch_size, reason), requests sent and note; None if the run was not traced (or the
    store predates tracing)."""
    try:
        window = conn.execute(
            "SELECT sent, note FROM trace_windows WHERE run_id = ?", (run_id,)
        ).fetchone()
        rows = conn.execute(
            "SELECT idx, queue_wait_s, compute_s, batch, batch_size, reason FROM traced "
            "WHERE run_id = ? ORDER BY idx",
            (run_id,),
        ).fetchall()
    except sqlite3.OperationalError:  # a store from before --trace: no such table
        return None
    if window is None:
        return None
    return [tuple(row) for row in rows], int(window["sent"]), str(window["note"])


def load_traced_requests(conn: sqlite3.Connection, run_id: int, model: str) -> list[TracedRequest]:
    """Triton's timestamps of the requests of ``model`` in a traced run's window; empty if
    the run was not traced or was stored before they were kept."""
    try:
        rows = conn.execute(
            "SELECT trace_id, request_id, queue_start_ns, compute_start_ns, compute_end_ns "
            "FROM traced_times WHERE run_id = ? ORDER BY queue_start_ns",
            (run_id,),
        ).fetchall()
    except sqlite3.OperationalError:  # a store from before they were kept: no such table
        return []
    return [
        TracedRequest(int(r[0]), model, "", str(r[1]), int(r[2]), int(r[3]), int(r[4]))
        for r in rows
    ]


def load_traced_latencies(
    conn: sqlite3.Connection, run_id: int
) -> list[tuple[float, float, float, int]]:
    """(client latency, traced queue wait, traced execution) in seconds of each answered
    traced request of a run, and its batch (the requests executed together share it);
    empty if the run was not traced."""
    try:
        rows = conn.execute(
            "SELECT r.latency_s, t.queue_wait_s, t.compute_s, t.batch FROM traced t "
            "JOIN records r ON r.run_id = t.run_id AND r.seq = t.record "
            "WHERE t.run_id = ? AND r.outcome = 'ok'",
            (run_id,),
        ).fetchall()
    except sqlite3.OperationalError:  # a store from before --trace: no such table
        return []
    return [(float(a), float(b), float(c), int(d)) for a, b, c, d in rows]


def load_lateness(conn: sqlite3.Connection, run_id: int) -> dict[str, Any] | None:
    """An open-loop run's send-lateness histogram (its JSON); None for closed-loop runs and
    for runs stored before it was kept (a store without the table reads the same)."""
    try:
        row = conn.execute(
            "SELECT histogram FROM send_lateness WHERE run_id = ?", (run_id,)
        ).fetchone()
    except sqlite3.OperationalError:  # a store from before send_lateness: no such table
        return None
    return None if row is None else dict(json.loads(row[0]))


def list_runs(conn: sqlite3.Connection, limit: int = 100) -> list[dict[str, Any]]:
    """The newest runs first: id, group, scenario, model, status, counts, throughput, p99."""
    try:
        rows = conn.execute(
            f"SELECT {RUN_COLUMNS} FROM runs ORDER BY id DESC LIMIT ?", (limit,)
        ).fetchall()
    except sqlite3.OperationalError:
        if _has_runs(conn):
            raise
        return []  # the first writer is making the store this very moment
    return [dict(r) for r in rows]


def _has_runs(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone() is not None


def load_row(conn: sqlite3.Connection, run_id: int, where: str) -> dict[str, Any]:
    """One run's row as stored, with ``params``, ``summary`` (client side) and ``server``
    decoded from JSON (what ``show`` prints and ``export`` writes); ``where`` names the
    store in the error when there is no such run."""
    row = conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        raise StoreError(f"no run {run_id} in {where} (see `batchscope load runs`)")
    run = dict(row)
    for key in ("params", "summary", "server"):
        run[key] = json.loads(run[key])
    return run


def load_timeline(conn: sqlite3.Connection, run_id: int) -> list[dict[str, Any]]:
    """Per-second rows of one run, in order."""
    rows = conn.execute(
        "SELECT second, sent, ok, failed, timed_out, p50_s, p99_s, mean_s FROM timeline "
        "WHERE run_id = ? ORDER BY second",
        (run_id,),
    ).fetchall()
    return [dict(r) for r in rows]


def load_records(
    conn: sqlite3.Connection, run_id: int, limit: int | None = None
) -> list[dict[str, Any]]:
    """Per-request rows of one run (seq, start_s, latency_s, outcome, error), in order."""
    sql = (
        "SELECT seq, start_s, latency_s, outcome, error FROM records WHERE run_id = ? ORDER BY seq"
    )
    args: tuple[Any, ...] = (run_id,)
    if limit is not None:
        sql += " LIMIT ?"
        args += (limit,)
    return [dict(r) for r in conn.execute(sql, args).fetchall()]


def runs_frame(conn: sqlite3.Connection, limit: int = 100) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(list_runs(conn, limit))


def timeline_frame(conn: sqlite3.Connection, run_id: int) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        load_timeline(conn, run_id),
        columns=list(TIMELINE_COLUMNS),
    )


def records_frame(conn: sqlite3.Connection, run_id: int, limit: int | None = None) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        load_records(conn, run_id, limit),
        columns=list(RECORD_COLUMNS),
    )


def window_outcomes(
    conn: sqlite3.Connection, model: str, start: float, end: float
) -> list[tuple[float, float, str]]:
    """(end, latency_s, outcome) of every request to ``model``, of any run in the store, that
    ended between the unix times ``start`` and ``end``: what clients saw in a window of
    the server's life, whichever runs sent it. A request's end is its run's start plus its
    due time plus its latency (the run's start is taken a moment before its clock starts,
    so the ends read early by that moment)."""
    rows = conn.execute(
        "SELECT u.started_at + r.start_s + r.latency_s AS ended, r.latency_s, r.outcome "
        "FROM records r JOIN runs u ON r.run_id = u.id "
        "WHERE u.model = ? AND u.finished_at >= ? AND u.started_at <= ? "
        "AND ended >= ? AND ended < ?",
        (model, start - 1.0, end, start, end),
    ).fetchall()
    return [(float(r[0]), float(r[1]), str(r[2])) for r in rows]


def record_times(conn: sqlite3.Connection, run_id: int) -> Iterator[tuple[float, float, str]]:
    """(start_s, latency_s, outcome) of every request of a run, in no set order, read as
    they are consumed (a run may hold millions): consume them while the store is open."""
    rows = conn.execute(
        "SELECT start_s, latency_s, outcome FROM records WHERE run_id = ?", (run_id,)
    )
    return ((r[0], r[1], r[2]) for r in rows)
