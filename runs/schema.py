"""The store's tables, its connection settings and the migrations of older stores.

Tables (what each holds is said above ``SCHEMA``): ``runs``, ``records``,
``timeline``, ``traced``, ``traced_times``, ``trace_windows``, ``send_lateness``,
``run_server``, ``config_changes``. A writer's
connection (``create``) makes the file and missing tables, puts the store in WAL mode and
teaches an older ``runs`` table the ``running`` status; tables added later (traces, the
server's config) are made by ``CREATE TABLE IF NOT EXISTS`` and read as empty where missing.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from runs.errors import StoreError

# - ``runs``: one row per run: scenario, model, protocol, status (``running``, ``ok``,
#   ``interrupted``, ``failed``), start and end (unix seconds), the parameters, the client
#   summary and the server-side statistics deltas (JSON: ``RunParams.to_json``,
#   ``ClientSummary.to_json``, ``RunSummary.server_json`` of ``loadgen.results``, the shape
#   the store has always had; a restart of the server during the run adds
#   ``"server_restarted": true`` to ``server``), and a ``group_id`` shared by the runs of one
#   sweep or comparison.
# - ``records``: one row per request: ``seq``, ``start_s`` (seconds since the run's clock
#   started, when the request was due), ``latency_s``, ``outcome`` (``ok``, ``failed``,
#   ``timed_out``), ``error``.
# - ``timeline``: one row per second of the run: requests sent, ok, failed and timed out
#   (by completion), and p50/p99/mean latency of the successful ones.
# - ``traced`` (``--trace`` runs): one row per request Triton traced: its index in the run
#   (the number in its request id), ``record`` (its row in ``records``), the server-side
#   queue wait and compute time, the batch it ran in (numbered within the run), that batch's
#   size and why it left; ``trace_windows``: one row per traced run, the requests sent and a
#   note when the traces are incomplete; ``traced_times``: Triton's timestamps of every
#   request of the model in the run's window (QUEUE_START, COMPUTE_START, COMPUTE_END, ns of
#   the server's clock), from which the advisor measures the batcher's hand-offs
#   (``advisor.handoff``).
# - ``send_lateness`` (open-loop runs): the histogram of how late each request went out after
#   its due time (``loadgen.engine.pacing``), from which runs made side by side merge its
#   percentiles exactly; the client summary holds its p50 ... max.
# - ``run_server``: one row per run, the Triton version and the model's config (JSON) as the
#   server reported them when the run began, so that a stored run can be modelled
#   (``batchscope advise --store``) without the server. A table of its own rather than
#   columns of ``runs``: a store without it (older) is still read.
# - ``config_changes``: one row per config change made on a live model (``batchscope advise
#   --apply``, ``batchscope autopilot``): time, server, model, old and new config,
#   prediction, the windows before and after, outcome and why (``runs.changes``).
# A store from before a table is read as before, and gets the table from its next writer.
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
CREATE TABLE IF NOT EXISTS send_lateness (
    run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    histogram TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS run_server (
    run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    triton_version TEXT NOT NULL,
    model_config TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS config_changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    server TEXT NOT NULL,
    model TEXT NOT NULL,
    old_config TEXT NOT NULL,
    new_config TEXT NOT NULL,
    prediction TEXT NOT NULL,
    before TEXT NOT NULL,
    after TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL
);
"""
# A run's per-second rows and per-request rows, in the order of the ``timeline`` and
# ``records`` tables (the recorder's rows and the files beside the store use them too).
TIMELINE_COLUMNS = ("second", "sent", "ok", "failed", "timed_out", "p50_s", "p99_s", "mean_s")
RECORD_COLUMNS = ("seq", "start_s", "latency_s", "outcome", "error")
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
        raise StoreError(f"no load-run store at {path} (run a load first, or pass --db)")
    if path.exists() and not path.is_file():
        # SQLite opens /dev/null (and reads it as an empty store) or fails on a folder late.
        raise StoreError(
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
        raise StoreError(f"{path} is not a usable load-run store: {exc}") from None


def check_writable(db: str | Path) -> None:
    """StoreError (one line) unless a run can be stored at ``db``: missing (it is made),
    or an existing load-run store. Checked before a run sends anything."""
    path = Path(db)
    try:
        path.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(
            f"--db {path}: cannot be read ({exc.strerror or exc}); pass --db with the path of "
            "a load-run store, or of a new file"
        ) from None
    with closing(connect(path)) as conn:
        try:
            conn.execute("SELECT name FROM sqlite_master").fetchall()
        except sqlite3.DatabaseError as exc:
            if is_locked(exc):
                return
            raise StoreError(
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
