"""The load-run store as one object, opened once per use::

    with RunStore(path) as store:
        row = store.load_row(3)

A run is written while it goes: its ``runs`` row first, with status ``running``, then a
commit each second with the records and timeline seconds since the last one and the counts so
far, and at the end the final status, summary and server side (``loadgen.engine.writer``).
The store is in WAL mode, so readers never wait for the writer and never see half a second.
A run whose process died stays ``running`` with everything up to its last commit; the next
writer (or ``prune``) marks it ``failed`` once it has had no commit for ``STALE_S``.

Values go in and come out plain (rows, JSON); the listing, timeline and records are lists of
dicts, and the ``*_frame`` variants pandas DataFrames (pandas is imported only when they are
called). ``prune`` keeps the store bounded.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from runs import changes, export, reads, writes
from runs import prune as pruning
from runs.schema import connect
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

    @contextmanager
    def transaction(self, busy_s: float | None = None) -> Iterator[sqlite3.Connection]:
        """The connection inside one write transaction, taken at once (``BEGIN IMMEDIATE``):
        everything done in it is in the store, or none of it. ``busy_s``: how long to wait
        for another writer's lock from now on."""
        if busy_s is not None:
            self.conn.execute(f"PRAGMA busy_timeout = {int(busy_s * 1000)}")
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise

    # ---- reads ----------------------------------------------------------------------
    def list_runs(self, limit: int = 100) -> list[dict[str, Any]]:
        return reads.list_runs(self.conn, limit)

    def load_row(self, run_id: int) -> dict[str, Any]:
        return reads.load_row(self.conn, run_id, str(self.path))

    def load_timeline(self, run_id: int) -> list[dict[str, Any]]:
        return reads.load_timeline(self.conn, run_id)

    def load_records(self, run_id: int, limit: int | None = None) -> list[dict[str, Any]]:
        return reads.load_records(self.conn, run_id, limit)

    def record_times(self, run_id: int) -> Iterator[tuple[float, float, str]]:
        return reads.record_times(self.conn, run_id)

    def load_server(self, run_id: int) -> tuple[str, dict[str, Any] | None]:
        return reads.load_server(self.conn, run_id)

    def load_traced(self, run_id: int) -> tuple[list[tuple[Any, ...]], int, str] | None:
        return reads.load_traced(self.conn, run_id)

    def load_traced_requests(self, run_id: int, model: str) -> list[TracedRequest]:
        return reads.load_traced_requests(self.conn, run_id, model)

    def load_traced_latencies(self, run_id: int) -> list[tuple[float, float, float, int]]:
        return reads.load_traced_latencies(self.conn, run_id)

    def window_outcomes(
        self, model: str, start: float, end: float
    ) -> list[tuple[float, float, str]]:
        return reads.window_outcomes(self.conn, model, start, end)

    def load_lateness(self, run_id: int) -> dict[str, Any] | None:
        return reads.load_lateness(self.conn, run_id)

    def runs_frame(self, limit: int = 100) -> pd.DataFrame:
        return reads.runs_frame(self.conn, limit)

    def timeline_frame(self, run_id: int) -> pd.DataFrame:
        return reads.timeline_frame(self.conn, run_id)

    def records_frame(self, run_id: int, limit: int | None = None) -> pd.DataFrame:
        return reads.records_frame(self.conn, run_id, limit)

    # ---- writes ---------------------------------------------------------------------
    def save(
        self,
        ending: writes.Ending,
        records: list[tuple[Any, ...]],
        timeline: list[dict[str, Any]],
    ) -> int:
        """A whole run at once (see ``writes.save``); its id."""
        return writes.save(self.conn, ending, records, timeline)

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

    # ---- export, prune --------------------------------------------------------------
    def export_csv(self, run_id: int, folder: str | Path) -> list[Path]:
        return export.export_csv(self.conn, run_id, folder, str(self.path))

    def prune(
        self,
        keep: int | None = None,
        older_than_s: float | None = None,
        now: float | None = None,
    ) -> pruning.Pruned:
        return pruning.prune(self.conn, self.path, keep, older_than_s, now)
