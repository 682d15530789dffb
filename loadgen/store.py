"""The results store: load runs in SQLite, for the CLI and the dashboard.

Three tables:

- ``runs``: one row per run: scenario, model, protocol, status (``ok``, ``interrupted``,
  ``failed``), start and end (unix seconds), the parameters, the client summary and the
  server-side statistics deltas (JSON), and a ``group_id`` shared by the runs of one sweep
  or comparison.
- ``records``: one row per request: ``seq``, ``start_s`` (seconds since the run's clock
  started, when the request was due), ``latency_s``, ``outcome`` (``ok``, ``failed``,
  ``timed_out``), ``error``.
- ``timeline``: one row per second of the run: requests sent, ok, failed and timed out
  (by completion), and p50/p99/mean latency of the successful ones.
- ``traced`` (``--trace`` runs): one row per request Triton traced: its index in the run
  (the number in its request id), ``record`` (its row in ``records``), the server-side
  queue wait and compute time, the batch it ran in (numbered within the run), that batch's
  size and why it left; and ``trace_windows``: one row per traced run, the requests sent
  and a note when the traces are incomplete.

The ``summary`` and ``server`` columns hold ``ClientSummary.to_json()`` and
``RunSummary.server_json()`` (``loadgen.summary``), the shape the store has always had; a
restart of the server during the run adds ``"server_restarted": true`` to ``server``.

A run is written in one transaction at its end: a reader never sees half a run.
``load_run`` reads one back as a typed ``LoadRun``; the listing, timeline and records are
plain lists of dicts, and the ``*_frame`` variants pandas DataFrames (pandas is imported
only when they are called).
"""

from __future__ import annotations

import csv
import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.errors import LoadgenError
from loadgen.params import RunParams
from loadgen.summary import LoadRun, RunSummary
from loadgen.tracing import TracedRecord, summarize

if TYPE_CHECKING:
    import pandas as pd

    from loadgen.api import RunResult

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id TEXT NOT NULL DEFAULT '',
    label TEXT NOT NULL DEFAULT '',
    scenario TEXT NOT NULL,
    model TEXT NOT NULL,
    protocol TEXT NOT NULL,
    target TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'interrupted', 'failed')),
    started_at REAL NOT NULL,
    finished_at REAL NOT NULL,
    sent INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    timed_out INTEGER NOT NULL,
    throughput_per_s REAL,
    p99_s REAL,
    params TEXT NOT NULL,
    summary TEXT NOT NULL,
    server TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    start_s REAL NOT NULL,
    latency_s REAL NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS timeline (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    second INTEGER NOT NULL,
    sent INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    timed_out INTEGER NOT NULL,
    p50_s REAL,
    p99_s REAL,
    mean_s REAL,
    PRIMARY KEY (run_id, second)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS traced (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    record INTEGER,
    queue_wait_s REAL NOT NULL,
    compute_s REAL NOT NULL,
    batch INTEGER NOT NULL,
    batch_size INTEGER NOT NULL,
    reason TEXT NOT NULL,
    PRIMARY KEY (run_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trace_windows (
    run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    sent INTEGER NOT NULL,
    note TEXT NOT NULL
);
"""
RUN_COLUMNS = (
    "id, group_id, label, scenario, model, protocol, target, status, started_at, finished_at, "
    "sent, ok, failed, timed_out, throughput_per_s, p99_s"
)


def connect(db: str | Path, create: bool = False) -> sqlite3.Connection:
    """A connection to the store; with ``create`` the file and tables are made if missing."""
    path = Path(db)
    if not create and not path.exists():
        raise LoadgenError(f"no load-run store at {path} (run a load first, or pass --db)")
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(str(path), timeout=10.0)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        if create:
            conn.executescript(SCHEMA)
        return conn
    except sqlite3.DatabaseError as exc:
        raise LoadgenError(f"{path} is not a usable load-run store: {exc}") from None


def save(db: str | Path, result: RunResult) -> int:
    """Store one run with its records and timeline in one transaction; returns its id."""
    client = result.summary.client
    p = result.params
    target = p.grpc_url if p.protocol == "grpc" else p.url
    with closing(connect(db, create=True)) as conn, conn:
        cur = conn.execute(
            "INSERT INTO runs (group_id, label, scenario, model, protocol, target, status, "
            "started_at, finished_at, sent, ok, failed, timed_out, throughput_per_s, p99_s, "
            "params, summary, server) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                result.group_id,
                p.label,
                p.scenario,
                p.model,
                p.protocol,
                target,
                result.status,
                result.started_at,
                result.finished_at,
                client.sent,
                client.ok,
                client.failed,
                client.timed_out,
                client.throughput_per_s,
                client.latency_s.p99,
                json.dumps(p.to_json()),
                json.dumps(client.to_json()),
                json.dumps(_server_column(result.summary)),
            ),
        )
        run_id = int(cur.lastrowid or 0)
        conn.executemany(
            "INSERT INTO records VALUES (?,?,?,?,?,?)",
            ((run_id, *record) for record in result.records()),
        )
        conn.executemany(
            "INSERT INTO timeline VALUES (?,?,?,?,?,?,?,?,?)",
            (
                (
                    run_id,
                    r["second"],
                    r["sent"],
                    r["ok"],
                    r["failed"],
                    r["timed_out"],
                    r["p50_s"],
                    r["p99_s"],
                    r["mean_s"],
                )
                for r in result.timeline
            ),
        )
        if result.trace is not None:
            _save_trace(conn, run_id, result)
    return run_id


def _save_trace(conn: sqlite3.Connection, run_id: int, result: RunResult) -> None:
    """The traced requests, each joined to its client record by the request's index."""
    assert result.trace is not None
    record_of = {index: seq for seq, index in enumerate(result.recorder.index)}
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


def load_traced(db: str | Path, run_id: int) -> tuple[list[TracedRecord], int, str] | None:
    """A traced run's requests as Triton traced them, requests sent and note; None if the
    run was not traced (or the store predates tracing)."""
    with closing(connect(db)) as conn:
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
    return [TracedRecord(*row) for row in rows], int(window["sent"]), str(window["note"])


def _server_column(summary: RunSummary) -> dict[str, Any]:
    server = summary.server_json()
    if summary.server_restarted:
        server["server_restarted"] = True
    return server


def list_runs(db: str | Path, limit: int = 100) -> list[dict[str, Any]]:
    """The newest runs first: id, group, scenario, model, status, counts, throughput, p99."""
    with closing(connect(db)) as conn:
        rows = conn.execute(
            f"SELECT {RUN_COLUMNS} FROM runs ORDER BY id DESC LIMIT ?", (limit,)
        ).fetchall()
    return [dict(r) for r in rows]


def load_row(db: str | Path, run_id: int) -> dict[str, Any]:
    """One run's row as stored, with ``params``, ``summary`` (client side) and ``server``
    decoded from JSON (what ``show`` prints and ``export`` writes)."""
    with closing(connect(db)) as conn:
        row = conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        raise LoadgenError(f"no run {run_id} in {db} (see `python -m loadgen runs`)")
    run = dict(row)
    for key in ("params", "summary", "server"):
        run[key] = json.loads(run[key])
    return run


def load_run(db: str | Path, run_id: int) -> LoadRun:
    """One run as the typed ``LoadRun`` that ``loadgen.api.run`` returned for it."""
    row = load_row(db, run_id)
    server = dict(row["server"])
    restarted = bool(server.pop("server_restarted", False))
    return LoadRun(
        params=RunParams.from_json(row["params"]),
        status=str(row["status"]),
        started_at=float(row["started_at"]),
        finished_at=float(row["finished_at"]),
        summary=RunSummary.from_json(row["summary"], server, restarted),
        run_id=int(row["id"]),
        group_id=str(row["group_id"]),
        trace=None if (traced := load_traced(db, run_id)) is None else summarize(*traced),
    )


def load_timeline(db: str | Path, run_id: int) -> list[dict[str, Any]]:
    """Per-second rows of one run, in order."""
    with closing(connect(db)) as conn:
        rows = conn.execute(
            "SELECT second, sent, ok, failed, timed_out, p50_s, p99_s, mean_s FROM timeline "
            "WHERE run_id = ? ORDER BY second",
            (run_id,),
        ).fetchall()
    return [dict(r) for r in rows]


def load_records(db: str | Path, run_id: int, limit: int | None = None) -> list[dict[str, Any]]:
    """Per-request rows of one run (seq, start_s, latency_s, outcome, error), in order."""
    sql = (
        "SELECT seq, start_s, latency_s, outcome, error FROM records WHERE run_id = ? ORDER BY seq"
    )
    args: tuple[Any, ...] = (run_id,)
    if limit is not None:
        sql += " LIMIT ?"
        args += (limit,)
    with closing(connect(db)) as conn:
        return [dict(r) for r in conn.execute(sql, args).fetchall()]


def runs_frame(db: str | Path, limit: int = 100) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(list_runs(db, limit))


def timeline_frame(db: str | Path, run_id: int) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        load_timeline(db, run_id),
        columns=["second", "sent", "ok", "failed", "timed_out", "p50_s", "p99_s", "mean_s"],
    )


def records_frame(db: str | Path, run_id: int, limit: int | None = None) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        load_records(db, run_id, limit),
        columns=["seq", "start_s", "latency_s", "outcome", "error"],
    )


def export_csv(db: str | Path, run_id: int, folder: str | Path) -> list[Path]:
    """Write run-<id>-summary.csv, -timeline.csv and -records.csv into ``folder``."""
    run = load_row(db, run_id)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    flat = {k: v for k, v in run.items() if k not in ("params", "summary", "server")}
    flat.update({f"params.{k}": json.dumps(v) for k, v in run["params"].items()})
    flat.update({f"server.{k}": json.dumps(v) for k, v in run["server"].items()})
    tables = {
        "summary": [flat],
        "timeline": load_timeline(db, run_id),
        "records": load_records(db, run_id),
    }
    paths = []
    for name, rows in tables.items():
        path = out / f"run-{run_id}-{name}.csv"
        with path.open("w", newline="") as fh:
            if rows:
                writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
        paths.append(path)
    return paths
