"""Importing a run that the writer saved beside the store when the store could not take it."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

from loadgen.errors import LoadgenError
from loadgen.results.params import RunParams
from loadgen.results.summary import RunSummary
from loadgen.store.writes import RUN_VALUES, run_values, server_column, upsert_timeline


def import_saved(conn: sqlite3.Connection, saved: str | Path) -> tuple[int, int]:
    """A run that ``loadgen.store.writer`` saved beside the store (``<store>.run-<time>.json`` and
    its records file) into the open store ``conn``: the run's row (the one it had begun in the
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
        server_column(summary),
    )
    with conn:
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
