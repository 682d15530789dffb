"""The results store: load runs in SQLite, for the CLI and the dashboard, as one object
opened once per use::

    with RunStore(path) as store:
        run = store.load_run(3)

Its parts: ``schema`` (tables, connection, migrations), ``writes`` and ``writer`` (a run
while it goes), ``reads``, ``export``, ``prune`` and ``imports``.

Its tables:

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
- ``send_lateness`` (open-loop runs): the histogram of how late each request went out after
  its due time (``loadgen.engine.pacing``), from which runs made side by side merge its
  percentiles exactly; the client summary holds its p50 ... max. A store from before it is
  read as before (no such histogram) and gets it from its next writer.
- ``run_server``: one row per run, the Triton version and the model's config (JSON) as the
  server reported them when the run began, so that a stored run can be modelled (``batchscope
  advise --store``) without the server. A table of its own rather than columns
  of ``runs``: a store without it (older) is still read, and gets it from its next writer.
- ``config_changes``: one row per config change made on a live model (``batchscope advise
  --apply``): time, server, model, old and new config, prediction, the windows before and
  after, outcome and why (``loadgen.store.changes``).

The ``summary`` and ``server`` columns hold ``ClientSummary.to_json()`` and
``RunSummary.server_json()`` (``loadgen.results.summary``), the shape the store has always had; a
restart of the server during the run adds ``"server_restarted": true`` to ``server``.

A run is written while it goes (``loadgen.store.writer.RunWriter``): its ``runs`` row
first, with status
``running``, then a commit each second with the records and timeline seconds since the last
one and the counts so far (the row's ``finished_at`` is then the time of the last commit),
and at the end the final status, summary and server side. The store is in WAL mode, so
readers never wait for the writer and never see half a second. A run whose process died
stays ``running`` with everything up to its last commit; the next writer (or ``prune``)
marks it ``failed`` once it has had no commit for ``STALE_S``.

A store that is locked, full or corrupt never costs a run: the writer keeps what it could
not commit and tries again each second; if it still cannot (a lock held to the end, a full
disk, a file that is not a store), the run goes to files beside the store
(``<store>.run-<time>.json`` and ``.records.csv``) and the writer says where;
``import_saved`` puts it back.

``load_run`` reads one back as a typed ``LoadRun``; the listing, timeline and records are
plain lists of dicts, and the ``*_frame`` variants pandas DataFrames (pandas is imported
only when they are called). ``prune`` keeps the store bounded.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from loadgen.results.histogram import Histogram
from loadgen.results.result import RunResult
from loadgen.results.summary import LoadRun
from loadgen.results.tracing import TracedRecord
from loadgen.store import changes, export, imports, reads, writes
from loadgen.store import prune as pruning
from loadgen.store.schema import connect
from tritonapi.traces import TracedRequest

if TYPE_CHECKING:
    import pandas as pd


class RunStore:
    """One open store: a single connection for everything done with it, closed on leaving
    the ``with`` block. ``create`` (writers) makes the file and tables if missing and
    migrates an older store; without it a missing store is one clear error."""

    def __init__(self, path: str | Path, create: bool = False, timeout: float = 10.0) -> None:
        self.path = Path(path)
        self.conn: sqlite3.Connection = connect(self.path, create, timeout)

    def __enter__(self) -> RunStore:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    # ---- reads ----------------------------------------------------------------------
    def list_runs(self, limit: int = 100) -> list[dict[str, Any]]:
        return reads.list_runs(self.conn, limit)

    def load_row(self, run_id: int) -> dict[str, Any]:
        return reads.load_row(self.conn, run_id, str(self.path))

    def load_run(self, run_id: int) -> LoadRun:
        return reads.load_run(self.conn, run_id, str(self.path))

    def load_timeline(self, run_id: int) -> list[dict[str, Any]]:
        return reads.load_timeline(self.conn, run_id)

    def load_records(self, run_id: int, limit: int | None = None) -> list[dict[str, Any]]:
        return reads.load_records(self.conn, run_id, limit)

    def load_server(self, run_id: int) -> tuple[str, dict[str, Any] | None]:
        return reads.load_server(self.conn, run_id)

    def load_traced(self, run_id: int) -> tuple[list[TracedRecord], int, str] | None:
        return reads.load_traced(self.conn, run_id)

    def load_traced_requests(self, run_id: int, model: str) -> list[TracedRequest]:
        return reads.load_traced_requests(self.conn, run_id, model)

    def load_traced_latencies(self, run_id: int) -> list[tuple[float, float, float]]:
        return reads.load_traced_latencies(self.conn, run_id)

    def window_outcomes(
        self, model: str, start: float, end: float
    ) -> list[tuple[float, float, str]]:
        return reads.window_outcomes(self.conn, model, start, end)

    def load_lateness(self, run_id: int) -> Histogram | None:
        return reads.load_lateness(self.conn, run_id)

    def runs_frame(self, limit: int = 100) -> pd.DataFrame:
        return reads.runs_frame(self.conn, limit)

    def timeline_frame(self, run_id: int) -> pd.DataFrame:
        return reads.timeline_frame(self.conn, run_id)

    def records_frame(self, run_id: int, limit: int | None = None) -> pd.DataFrame:
        return reads.records_frame(self.conn, run_id, limit)

    # ---- writes ---------------------------------------------------------------------
    def save(self, result: RunResult) -> int:
        return writes.save(self.conn, result)

    def record_change(self, change: changes.Change, now: float | None = None) -> int:
        """Keep one config change made on a live model (``advise --apply``); its id."""
        with self.conn:
            return changes.record(self.conn, change, now)

    def list_changes(self, model: str = "", limit: int = 100) -> list[changes.Change]:
        return changes.list_changes(self.conn, model, limit)

    def settle_abandoned(self, now: float | None = None) -> list[int]:
        with self.conn:
            return writes.settle_abandoned(self.conn, now)

    def mark_ended(self, run_id: int, status: str, error: str) -> None:
        with self.conn:
            writes.mark_ended(self.conn, run_id, status, error)

    # ---- export, prune, import ------------------------------------------------------
    def export_csv(self, run_id: int, folder: str | Path) -> list[Path]:
        return export.export_csv(self.conn, run_id, folder, str(self.path))

    def prune(
        self,
        keep: int | None = None,
        older_than_s: float | None = None,
        now: float | None = None,
    ) -> pruning.Pruned:
        return pruning.prune(self.conn, self.path, keep, older_than_s, now)

    def import_saved(self, saved: str | Path) -> tuple[int, int]:
        return imports.import_saved(self.conn, saved)
