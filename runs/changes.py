"""The record of config changes made on live models (``advise --apply``): one row each.

A row holds when, on which server and model, the config before and the one applied (Triton's
config JSON), what the advisor predicted, what clients saw in the window before and the
window after (JSON), the outcome (one of :data:`OUTCOMES`) and why. The store keeps them
beside the load runs because the runs going on at the time are what the change was judged
by. A store from before the table reads as having no changes.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# kept: the new config stays; rolled_back: the previous config was loaded again (why is in
# the reason); failed_to_apply: the new config did not load, and the previous one was
# loaded again; rollback_failed: the previous config could not be loaded again (the reason
# says what the server serves now). reapplied / reapply_failed: ``batchscope autopilot`` found
# the model no longer serving the last kept config (a restarted Triton forgets an override)
# and loaded it again, or could not.
OUTCOMES = (
    "kept",
    "rolled_back",
    "failed_to_apply",
    "rollback_failed",
    "reapplied",
    "reapply_failed",
)


@dataclass(frozen=True)
class Change:
    server: str
    model: str
    old_config: dict[str, Any]
    new_config: dict[str, Any]
    prediction: dict[str, Any]
    before: dict[str, Any]
    after: dict[str, Any]
    outcome: str
    reason: str
    at: float = 0.0
    id: int | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r} is not one of {', '.join(OUTCOMES)}")


def record(conn: sqlite3.Connection, change: Change, now: float | None = None) -> int:
    """Write ``change`` (stamped ``now``, default the time of writing); returns its id."""
    at = change.at or (time.time() if now is None else now)
    cursor = conn.execute(
        "INSERT INTO config_changes (at, server, model, old_config, new_config, prediction, "
        "before, after, outcome, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            at,
            change.server,
            change.model,
            json.dumps(change.old_config),
            json.dumps(change.new_config),
            json.dumps(change.prediction),
            json.dumps(change.before),
            json.dumps(change.after),
            change.outcome,
            change.reason,
        ),
    )
    return int(cursor.lastrowid or 0)


def list_changes(conn: sqlite3.Connection, model: str = "", limit: int = 100) -> list[Change]:
    """The newest ``limit`` changes (of ``model`` when given), newest first."""
    sql = "SELECT * FROM config_changes"
    args: tuple[Any, ...] = ()
    if model:
        sql += " WHERE model = ?"
        args = (model,)
    sql += " ORDER BY id DESC LIMIT ?"
    try:
        rows = conn.execute(sql, (*args, limit)).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # a store from before the table
            return []
        raise
    return [
        Change(
            server=r["server"],
            model=r["model"],
            old_config=json.loads(r["old_config"]),
            new_config=json.loads(r["new_config"]),
            prediction=json.loads(r["prediction"]),
            before=json.loads(r["before"]),
            after=json.loads(r["after"]),
            outcome=r["outcome"],
            reason=r["reason"],
            at=float(r["at"]),
            id=int(r["id"]),
        )
        for r in rows
    ]


def count_changes(store: Path, busy_s: float = 0.5) -> dict[tuple[str, str, str], int]:
    """(server, model, outcome) -> changes in the store at ``store``, read-only with a short
    busy wait (a scrape must not wait on a writer); {} without a store or its table. Any
    other SQLite error is raised."""
    if not store.is_file():
        return {}
    try:
        with closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=busy_s)) as conn:
            rows = conn.execute(
                "SELECT server, model, outcome, COUNT(*) FROM config_changes "
                "GROUP BY server, model, outcome"
            ).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # a store from before the table
            return {}
        raise
    return {(str(s), str(m), str(o)): int(n) for s, m, o, n in rows}
