"""Keeping the store bounded: delete old runs with everything they own, give the space back."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from runs.errors import StoreError
from runs.writes import settle_abandoned


@dataclass(frozen=True)
class Pruned:
    runs: list[int]  # the ids deleted
    records: int
    bytes_before: int
    bytes_after: int


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def check_rules(keep: int | None, older_than_s: float | None) -> None:
    """One clear line for a prune without a rule or with a negative one."""
    if keep is None and older_than_s is None:
        raise StoreError("prune needs --keep N, --older-than AGE or both")
    if keep is not None and keep < 0:
        raise StoreError(f"--keep must be 0 or more (got {keep})")
    if older_than_s is not None and not older_than_s >= 0:
        raise StoreError("--older-than must be 0 or more")


def prune(
    conn: sqlite3.Connection,
    path: Path,
    keep: int | None = None,
    older_than_s: float | None = None,
    now: float | None = None,
) -> Pruned:
    """Delete the runs past the newest ``keep`` and those started more than
    ``older_than_s`` ago (either rule deletes), with their records, timeline and traces,
    then give the space back (VACUUM). A run still going is never deleted."""
    check_rules(keep, older_than_s)
    now = time.time() if now is None else now
    before = _size(path) if path.exists() else 0
    with conn:
        settle_abandoned(conn, now)
        doomed: set[int] = set()
        if keep is not None:
            rows = conn.execute("SELECT id FROM runs ORDER BY id DESC LIMIT -1 OFFSET ?", (keep,))
            doomed |= {int(r[0]) for r in rows}
        if older_than_s is not None:
            rows = conn.execute("SELECT id FROM runs WHERE started_at < ?", (now - older_than_s,))
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
            children = (
                "traced_times",
                "traced",
                "trace_windows",
                "send_lateness",
                "run_server",
                "records",
                "timeline",
            )
            for table in children:
                if table in tables:
                    conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
    if ids:
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return Pruned(ids, records, before, _size(path))
