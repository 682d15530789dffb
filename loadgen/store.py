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
  and a note when the traces are incomplete; and ``traced_times``: Triton's timestamps of
  every request of the model in the run's window (QUEUE_START, COMPUTE_START,
  COMPUTE_END, ns of the server's clock), from which the advisor measures the batcher's
  hand-offs (``advisor.handoff``). A store from before it is read as before and gets it
  from its next writer.
- ``run_server``: one row per run, the Triton version and the model's config (JSON) as the
  server reported them when the run began, so that a stored run can be modelled (``python
  -m advisor advise --store``) without the server. A table of its own rather than columns
  of ``runs``: a store without it (older) is still read, and gets it from its next writer.

The ``summary`` and ``server`` columns hold ``ClientSummary.to_json()`` and
``RunSummary.server_json()`` (``loadgen.summary``), the shape the store has always had; a
restart of the server during the run adds ``"server_restarted": true`` to ``server``.

A run is written while it goes (``RunWriter``): its ``runs`` row first, with status
``running``, then a commit each second with the records and timeline seconds since the last
one and the counts so far (the row's ``finished_at`` is then the time of the last commit),
and at the end the final status, summary and server side. The store is in WAL mode, so
readers never wait for the writer and never see half a second. A run whose process died
stays ``running`` with everything up to its last commit; the next writer (or ``prune``)
marks it ``failed`` once it has had no commit for ``STALE_S``.

A store that is locked, full or corrupt never costs a run: the writer keeps what it could
not commit and tries again each second; if it still cannot (a lock held to the end, a full
disk, a file that is not a store), the run goes to files beside the store
(``<store>.run-<time>.json`` and ``.records.csv``) and the writer says where.

``load_run`` reads one back as a typed ``LoadRun``; the listing, timeline and records are
plain lists of dicts, and the ``*_frame`` variants pandas DataFrames (pandas is imported
only when they are called). ``prune`` keeps the store bounded.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import time
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.errors import LoadgenError
from loadgen.params import RunParams
from loadgen.recorder import TIMELINE_COLUMNS
from loadgen.summary import ClientSummary, LoadRun, RunSummary
from loadgen.tracing import TracedRecord, summarize
from tritonapi.traces import TracedRequest

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
    status TEXT NOT NULL CHECK (status IN ('running', 'ok', 'interrupted', 'failed')),
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
CREATE TABLE IF NOT EXISTS traced_times (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    trace_id INTEGER NOT NULL,
    request_id TEXT NOT NULL,
    queue_start_ns INTEGER NOT NULL,
    compute_start_ns INTEGER NOT NULL,
    compute_end_ns INTEGER NOT NULL,
    PRIMARY KEY (run_id, trace_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trace_windows (
    run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    sent INTEGER NOT NULL,
    note TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS run_server (
    run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    triton_version TEXT NOT NULL,
    model_config TEXT NOT NULL
);
"""
RUN_COLUMNS = (
    "id, group_id, label, scenario, model, protocol, target, status, started_at, finished_at, "
    "sent, ok, failed, timed_out, throughput_per_s, p99_s"
)


STALE_S = 60.0  # a running run with no commit for this long: its process died
IN_PROGRESS = "the run is still going"
ABANDONED = (
    "the load generator stopped writing this run before it ended (killed, crashed, or it "
    "lost the store); the figures are those of its last commit"
)


def connect(db: str | Path, create: bool = False, timeout: float = 10.0) -> sqlite3.Connection:
    """A connection to the store; with ``create`` (writers) the file and tables are made if
    missing, the store is put in WAL mode and an older store's ``runs`` table learns the
    ``running`` status."""
    path = Path(db)
    if not create and not path.exists():
        raise LoadgenError(f"no load-run store at {path} (run a load first, or pass --db)")
    if path.exists() and not path.is_file():
        # SQLite opens /dev/null (and reads it as an empty store) or fails on a folder late.
        raise LoadgenError(
            f"{path} is not a file (a folder or a device); pass --db with the path of a "
            "load-run store (SQLite)"
        )
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(str(path), timeout=timeout)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        if create:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL: a commit survives our crash
            conn.executescript(SCHEMA)
            _learn_running(conn)
        return conn
    except sqlite3.DatabaseError as exc:
        if is_locked(exc):  # a store in use, not a bad one: the caller waits or says so
            raise
        raise LoadgenError(f"{path} is not a usable load-run store: {exc}") from None


def check_writable(db: str | Path) -> None:
    """LoadgenError (one line) unless a run can be stored at ``db``: missing (it is made),
    or an existing load-run store. Checked before a run sends anything."""
    path = Path(db)
    try:
        path.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise LoadgenError(
            f"--db {path}: cannot be read ({exc.strerror or exc}); pass --db with the path of "
            "a load-run store, or of a new file"
        ) from None
    with closing(connect(path)) as conn:
        try:
            conn.execute("SELECT name FROM sqlite_master").fetchall()
        except sqlite3.DatabaseError as exc:
            if is_locked(exc):
                return
            raise LoadgenError(
                f"--db {path} is not a load-run store ({exc}); pass --db with the SQLite file "
                "loadgen writes, or a new file"
            ) from None


def is_locked(exc: BaseException) -> bool:
    """SQLite's answer when another connection holds the lock past the busy wait."""
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def _learn_running(conn: sqlite3.Connection) -> None:
    """Stores written before runs were streamed refuse status 'running' (a CHECK); SQLite
    cannot alter a CHECK, so the table is rebuilt with its rows and ids (SQLite's own
    procedure: foreign keys off, copy, drop, rename, in one transaction)."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'runs'").fetchone()
    if row is None or "'running'" in row[0]:
        return
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'runs'").fetchone()
        if "'running'" not in row[0]:  # another writer may have done it meanwhile
            new = SCHEMA[SCHEMA.index("CREATE TABLE IF NOT EXISTS runs") : SCHEMA.index(");") + 2]
            conn.execute(new.replace("IF NOT EXISTS runs", "runs_with_running"))
            conn.execute("INSERT INTO runs_with_running SELECT * FROM runs")
            conn.execute("DROP TABLE runs")
            conn.execute("ALTER TABLE runs_with_running RENAME TO runs")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.execute("PRAGMA foreign_keys = ON")


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
        _server_column(result.summary),
    )


def save(db: str | Path, result: RunResult) -> int:
    """Store a run made without a store (its records in memory) in one transaction, with its
    records and timeline; returns its id. ``loadgen.api.run`` streams instead
    (``loadgen.writer``)."""
    with closing(connect(db, create=True)) as conn, conn:
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


def save_server(conn: sqlite3.Connection, run_id: int, run: LoadRun) -> None:
    """The Triton version and model config the run was made against (if they were read)."""
    if run.triton_version or run.model_config is not None:
        conn.execute(
            "INSERT OR REPLACE INTO run_server VALUES (?,?,?)",
            (run_id, run.triton_version, json.dumps(run.model_config)),
        )


def load_server(db: str | Path, run_id: int) -> tuple[str, dict[str, Any] | None]:
    """(Triton version, model config JSON) a run was made against; ("", None) for a run
    stored before they were kept."""
    with closing(connect(db)) as conn:
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


def load_traced_requests(db: str | Path, run_id: int, model: str) -> list[TracedRequest]:
    """Triton's timestamps of the requests of ``model`` in a traced run's window; empty if
    the run was not traced or was stored before they were kept."""
    with closing(connect(db)) as conn:
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


def load_traced_latencies(db: str | Path, run_id: int) -> list[tuple[float, float, float]]:
    """(client latency, traced queue wait, traced execution) in seconds of each answered
    traced request of a run; empty if the run was not traced."""
    with closing(connect(db)) as conn:
        try:
            rows = conn.execute(
                "SELECT r.latency_s, t.queue_wait_s, t.compute_s FROM traced t "
                "JOIN records r ON r.run_id = t.run_id AND r.seq = t.record "
                "WHERE t.run_id = ? AND r.outcome = 'ok'",
                (run_id,),
            ).fetchall()
        except sqlite3.OperationalError:  # a store from before --trace: no such table
            return []
    return [(float(a), float(b), float(c)) for a, b, c in rows]


def _server_column(summary: RunSummary) -> dict[str, Any]:
    server = summary.server_json()
    if summary.server_restarted:
        server["server_restarted"] = True
    return server


def list_runs(db: str | Path, limit: int = 100) -> list[dict[str, Any]]:
    """The newest runs first: id, group, scenario, model, status, counts, throughput, p99."""
    with closing(connect(db)) as conn:
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
    version, config = load_server(db, run_id)
    return LoadRun(
        params=RunParams.from_json(row["params"]),
        status=str(row["status"]),
        started_at=float(row["started_at"]),
        finished_at=float(row["finished_at"]),
        summary=RunSummary.from_json(row["summary"], server, restarted),
        run_id=int(row["id"]),
        group_id=str(row["group_id"]),
        trace=None if (traced := load_traced(db, run_id)) is None else summarize(*traced),
        triton_version=version,
        model_config=config,
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


@dataclass(frozen=True)
class Pruned:
    runs: list[int]  # the ids deleted
    records: int
    bytes_before: int
    bytes_after: int


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def prune(
    db: str | Path,
    keep: int | None = None,
    older_than_s: float | None = None,
    now: float | None = None,
) -> Pruned:
    """Delete the runs past the newest ``keep`` and those started more than
    ``older_than_s`` ago (either rule deletes), with their records, timeline and traces,
    then give the space back (VACUUM). A run still going is never deleted."""
    if keep is None and older_than_s is None:
        raise LoadgenError("prune needs --keep N, --older-than AGE or both")
    if keep is not None and keep < 0:
        raise LoadgenError(f"--keep must be 0 or more (got {keep})")
    if older_than_s is not None and not older_than_s >= 0:
        raise LoadgenError("--older-than must be 0 or more")
    now = time.time() if now is None else now
    path = Path(db)
    before = _size(path) if path.exists() else 0
    with closing(connect(path)) as conn:
        with conn:
            settle_abandoned(conn, now)
            doomed: set[int] = set()
            if keep is not None:
                rows = conn.execute(
                    "SELECT id FROM runs ORDER BY id DESC LIMIT -1 OFFSET ?", (keep,)
                )
                doomed |= {int(r[0]) for r in rows}
            if older_than_s is not None:
                rows = conn.execute(
                    "SELECT id FROM runs WHERE started_at < ?", (now - older_than_s,)
                )
                doomed |= {int(r[0]) for r in rows}
            live = {int(r[0]) for r in conn.execute("SELECT id FROM runs WHERE status = 'running'")}
            ids = sorted(doomed - live)
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            records = 0
            for run_id in ids:
                records += conn.execute(
                    "SELECT COUNT(*) FROM records WHERE run_id = ?", (run_id,)
                ).fetchone()[0]
                # Children first: stores whose foreign keys were off still end up clean.
                for table in ("traced_times", "traced", "trace_windows", "records", "timeline"):
                    if table in tables:
                        conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
                conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        if ids:
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return Pruned(ids, records, before, _size(path))


def import_saved(db: str | Path, saved: str | Path) -> tuple[int, int]:
    """A run that ``loadgen.writer`` saved beside the store (``<store>.run-<time>.json`` and
    its records file) into the store ``db``: the run's row (the one it had begun in the
    store, if any, else a new one), its timeline and its records. Importing twice changes
    nothing. Returns the run's id and the records added."""
    path = Path(saved)
    try:
        data = json.loads(path.read_text())
        records_path = path.with_name(data["records_file"])
        params = RunParams.from_json(data["params"])
        summary = RunSummary.from_json(data["client"], data["server"], data["server_restarted"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LoadgenError(f"{path} is not a run saved beside a store: {exc}") from None
    values = run_values(
        params,
        data.get("group_id", ""),
        data["status"],
        data["started_at"],
        data["finished_at"],
        summary.client,
        _server_column(summary),
    )
    with closing(connect(db, create=True)) as conn, conn:
        run_id = data.get("run_id_in_store")
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
            cur = conn.execute(
                f"INSERT INTO runs ({RUN_VALUES}) VALUES ({','.join('?' * 18)})", values
            )
            run_id = int(cur.lastrowid or 0)
        else:
            conn.execute(
                f"UPDATE runs SET ({RUN_VALUES}) = ({','.join('?' * 18)}) WHERE id = ?",
                (*values, run_id),
            )
        upsert_timeline(conn, run_id, data["timeline"])
        added = 0
        if records_path.exists():
            with records_path.open(newline="") as fh:
                rows = (
                    (
                        run_id,
                        int(r["seq"]),
                        float(r["start_s"]),
                        float(r["latency_s"]),
                        r["outcome"],
                        r["error"] or None,
                    )
                    for r in csv.DictReader(fh)
                )
                added = conn.executemany(
                    "INSERT OR IGNORE INTO records VALUES (?,?,?,?,?,?)", rows
                ).rowcount
    return run_id, max(added, 0)
