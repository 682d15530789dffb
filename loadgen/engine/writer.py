"""Writing a run into the store while it goes, so that a run of any length holds nothing
per request in memory and a crash loses at most the last second.

``runner.execute`` hands the writer, once a second, the records completed since the last
time, the timeline seconds that changed and a summary of the run so far (``push``); the
writer commits them in a thread of its own, so a slow or locked store never holds up the
requests. The run's row says ``running`` until ``finish`` writes its final status.

When the store cannot take a commit, nothing is dropped. Locked: the items wait in memory
and are tried again at the next second, up to ``MAX_BACKLOG`` records. Full, corrupt, not a
store, or locked past that backlog or at the end: the run goes to files beside the store,
``<store>.run-<start time>.records.csv`` and, at the end, ``<store>.run-<start time>.json``
(the run as ``--json`` prints it, and which records are where); ``note`` says where, and
``loadgen import`` puts the run back (``loadgen.engine.saved``).
"""

from __future__ import annotations

import csv
import json
import queue
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.errors import LoadgenError
from loadgen.results import stored
from loadgen.results.params import RunParams
from loadgen.results.recorder import Records
from loadgen.results.result import RunResult
from loadgen.results.summary import ClientSummary, result_json
from runs import writes
from runs.errors import StoreError
from runs.schema import IN_PROGRESS, RECORD_COLUMNS, TIMELINE_COLUMNS, is_locked
from runs.store import RunStore

MAX_BACKLOG = 2_000_000  # records held while the store is locked (about 100 MB)
BUSY_S = 2.0  # SQLite's busy wait for a commit during the run (the next second retries)
FINAL_BUSY_S = 10.0  # and for the last one, after which the run goes beside the store


@dataclass
class Tick:
    """One second's worth for the store."""

    records: Records
    errors: list[str]  # the recorder's error kinds (append-only: indices stay valid)
    timeline: list[dict[str, Any]]  # the seconds that changed
    client: ClientSummary  # the run so far
    at: float  # wall clock


class RunWriter:
    def __init__(
        self,
        db: str | Path,
        params: RunParams,
        group_id: str = "",
        busy_s: float = BUSY_S,
        final_busy_s: float = FINAL_BUSY_S,
    ) -> None:
        self.db = Path(db)
        self.busy_s, self.final_busy_s = busy_s, final_busy_s
        self.params = params
        self.group_id = group_id
        self.run_id: int | None = None  # the run's row, once committed
        self.records_in_store = 0
        self.records_beside = 0
        self.error = ""  # why the store did not take (all of) the run
        self.note = ""  # one line for the user when part of the run is beside the store
        self.saved_to: Path | None = None
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._beside: Path | None = None  # the records file, once the store failed
        self._started_at = 0.0

    # ---- the run's side (the event loop's thread) -----------------------------------
    def start(self, started_at: float, client: ClientSummary) -> None:
        self._started_at = started_at
        self._queue.put(("begin", (started_at, client)))
        self._thread = threading.Thread(target=self._work, name="loadgen-store", daemon=True)
        self._thread.start()

    def push(self, tick: Tick) -> None:
        self._queue.put(("tick", tick))

    @property
    def queued(self) -> int:
        """Items not yet taken by the store's thread (each a second's records, at most)."""
        return self._queue.qsize()

    def finish(self, result: RunResult, last: Tick) -> None:
        """The last records and the final row; returns once they are committed or saved
        beside the store."""
        self._queue.put(("tick", last))
        self._queue.put(("end", result))
        self._join()
        result.run_id = None if self._beside is not None else self.run_id

    def abort(self, status: str, error: str) -> None:
        """The run ended by an exception after it started: keep what was committed, and
        give the row a final status that says why."""
        self._queue.put(("abort", (status, error)))
        self._join()

    def discard(self) -> None:
        """Nothing was sent after all: remove the run's row."""
        self._queue.put(("discard", None))
        self._join()

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    # ---- the writer's thread -------------------------------------------------------
    def _work(self) -> None:
        opened: RunStore | None = None
        pending: list[tuple[str, Any]] = []
        done = False
        while not done:
            pending.append(self._queue.get())
            while True:
                try:
                    pending.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            done = pending[-1][0] in ("end", "discard", "abort")
            if self._beside is None:
                try:
                    if opened is None:
                        opened = RunStore(self.db, create=True, timeout=self.busy_s)
                    self._commit(opened, pending, self.final_busy_s if done else None)
                    pending = []
                except (sqlite3.Error, StoreError, LoadgenError, OSError) as exc:
                    self.error = str(exc)
                    locked = is_locked(exc)
                    if done or not locked or _backlog(pending) > MAX_BACKLOG:
                        self._go_beside()
            if self._beside is not None:
                self._save_beside(pending)
                pending = []
        if opened is not None:
            opened.close()

    def _commit(self, store: RunStore, items: list[tuple[str, Any]], busy_s: float | None) -> None:
        """Every item in one transaction: all of them are in the store, or none."""
        run_id, stored_now = self.run_id, 0
        with store.transaction(busy_s) as conn:
            for kind, item in items:
                if kind == "begin":
                    started_at, client = item
                    run_id = writes.begin_run(conn, self._row("running", started_at, client))
                elif kind == "tick":
                    assert run_id is not None
                    stored_now += writes.insert_records(
                        conn, run_id, item.records.rows(item.errors)
                    )
                    writes.upsert_timeline(conn, run_id, item.timeline)
                    writes.update_progress(conn, run_id, item.at, item.client.to_json())
                elif kind == "end":
                    assert run_id is not None
                    writes.end_run(conn, run_id, stored.ending(item))
                elif kind == "abort" and run_id is not None:
                    writes.mark_ended(conn, run_id, *item)
                elif kind == "discard" and run_id is not None:
                    writes.delete_run(conn, run_id)
        self.run_id = run_id
        self.records_in_store += stored_now
        self.error = ""  # a lock that went away cost nothing

    def _row(self, status: str, started_at: float, client: ClientSummary) -> Any:
        server = {"error": IN_PROGRESS}
        return stored.row_values(
            self.params, self.group_id, status, started_at, started_at, client, server
        )

    def _go_beside(self) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(self._started_at))
        self._beside = self.db.with_name(f"{self.db.name}.run-{stamp}.records.csv")

    def _save_beside(self, items: list[tuple[str, Any]]) -> None:
        assert self._beside is not None
        try:
            new = not self._beside.exists()
            with self._beside.open("a", newline="") as fh:
                out = csv.writer(fh)
                if new:
                    out.writerow(RECORD_COLUMNS)
                for kind, item in items:
                    if kind == "tick":
                        rows = item.records.rows(item.errors)
                        out.writerows(rows)
                        self.records_beside += len(rows)
            for kind, item in items:
                if kind == "end":
                    self._save_run_beside(item)
                elif kind == "abort":
                    self.note = (
                        f"the store {self.db} could not take the run ({self.error}); its "
                        f"{self.records_beside:,} records not in the store are in {self._beside}"
                    )
                elif kind == "discard":
                    self._beside.unlink(missing_ok=True)
        except OSError as exc:
            self.note = (
                f"the store {self.db} could not take the run ({self.error}), nor could a "
                f"file beside it ({exc}): the figures above are all that is left"
            )

    def _save_run_beside(self, result: RunResult) -> None:
        assert self._beside is not None
        path = self._beside.with_name(self._beside.name.replace(".records.csv", ".json"))
        data = {
            "store": str(self.db),
            "store_error": self.error,
            "run_id_in_store": self.run_id,
            "records_in_store": self.records_in_store,
            "records_file": self._beside.name,
            "records_in_file": self.records_beside,
            **result_json(result),
            "run_id": None,
            "timeline": [{c: r[c] for c in TIMELINE_COLUMNS} for r in result.timeline],
        }
        path.write_text(json.dumps(data, indent=2))
        self.saved_to = path
        where = (
            f"{self.records_in_store:,} records are in the store's run #{self.run_id}, "
            f"{self.records_beside:,} in {self._beside}"
            if self.run_id is not None
            else f"its {self.records_beside:,} records in {self._beside}"
        )
        self.note = (
            f"the store {self.db} could not take the run ({self.error}); it is saved in "
            f"{path} ({where})"
        )


def _backlog(items: list[tuple[str, Any]]) -> int:
    return sum(len(item.records) for kind, item in items if kind == "tick")
