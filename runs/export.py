"""Exporting one stored run as CSV files: its row (flattened), its timeline, its records."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

from runs.reads import load_records, load_row, load_timeline


def export_csv(conn: sqlite3.Connection, run_id: int, folder: str | Path, where: str) -> list[Path]:
    """Write run-<id>-summary.csv, -timeline.csv and -records.csv into ``folder``."""
    run = load_row(conn, run_id, where)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    flat = {k: v for k, v in run.items() if k not in ("params", "summary", "server")}
    flat.update({f"params.{k}": json.dumps(v) for k, v in run["params"].items()})
    flat.update({f"server.{k}": json.dumps(v) for k, v in run["server"].items()})
    tables = {
        "summary": [flat],
        "timeline": load_timeline(conn, run_id),
        "records": load_records(conn, run_id),
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
