"""Importing a run that the writer (``loadgen.engine.writer``) saved beside the store when the
store could not take it: ``<store>.run-<time>.json`` and its records file."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loadgen.errors import LoadgenError
from loadgen.results.params import RunParams
from loadgen.results.stored import row_values, server_column
from loadgen.results.summary import RunSummary
from runs import writes
from runs.store import RunStore


def import_saved(store: RunStore, saved: str | Path) -> tuple[int, int]:
    """A run saved beside the store into the open ``store``: the run's row (the one it had
    begun in the store, if any, else a new one), its timeline and its records. Importing
    twice changes nothing. Returns the run's id and the records added."""
    path = Path(saved)
    try:
        data = json.loads(path.read_text())
        records_path = path.with_name(data["records_file"])
        params = RunParams.from_json(data["params"])
        summary = RunSummary.from_json(data["client"], data["server"], data["server_restarted"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LoadgenError(f"{path} is not a run saved beside a store: {exc}") from None
    values = row_values(
        params,
        data.get("group_id", ""),
        data["status"],
        data["started_at"],
        data["finished_at"],
        summary.client,
        server_column(summary),
    )
    begun = data.get("run_id_in_store")
    return writes.import_run(store.conn, values, begun, data["timeline"], _records(records_path))


def _records(path: Path) -> Iterator[tuple[Any, ...]]:
    """The records file's rows, read as the store takes them (none when it is gone)."""
    if not path.exists():
        return
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            yield (
                int(r["seq"]),
                float(r["start_s"]),
                float(r["latency_s"]),
                r["outcome"],
                r["error"] or None,
            )
