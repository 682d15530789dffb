"""Config changes made on live models (``batchscope advise --apply``), counted by outcome.

The autopilot records each change in the load-run store's change log; this collector asks
the store for the counts at scrape time (``runs.changes.count_changes``) and exports one
counter per server, model and outcome. The store is the count: nothing is mirrored in
memory, so an exporter restart loses nothing. No store, or a store from before the table:
no series.

Example::

    # HELP triton_batching_config_changes_total Config changes applied to a live model ...
    # TYPE triton_batching_config_changes_total counter
    triton_batching_config_changes_total{target="http://127.0.0.1:8000",model="batch_add_model",outcome="kept"} 2.0
    triton_batching_config_changes_total{target="http://127.0.0.1:8000",model="batch_add_model",outcome="rolled_back"} 1.0
"""  # noqa: E501

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from runs.changes import OUTCOMES, count_changes

log = logging.getLogger(__name__)


def declared() -> tuple[CounterMetricFamily]:
    """The family, empty (exporter.catalog lists it)."""
    return (
        CounterMetricFamily(
            "triton_batching_config_changes",
            "Config changes applied to a live model by `batchscope advise --apply` and "
            "`batchscope autopilot`, by outcome (kept, rolled_back, failed_to_apply, "
            "rollback_failed, reapplied, reapply_failed), from the load-run store's "
            "config_changes table.",
            labels=["target", "model", "outcome"],
        ),
    )


def read_counts(store: Path) -> dict[tuple[str, str, str], int]:
    """(server, model, outcome) -> changes, from the store; {} when it cannot be read."""
    try:
        return count_changes(store)
    except sqlite3.Error as exc:
        log.warning("config changes: cannot read %s (%s)", store, exc)
        return {}


class ChangesCollector(Collector):
    """``triton_batching_config_changes_total`` from the store at ``store``."""

    def __init__(self, store: Path) -> None:
        self.store = Path(store)

    def describe(self) -> list[Metric]:
        return []  # reads a file: nothing at registration

    def collect(self) -> Iterator[Metric]:
        counts = read_counts(self.store)
        if not counts:
            return
        (family,) = declared()
        for server, model in sorted({(s, m) for s, m, _ in counts}):
            outcomes = {o for s, m, o in counts if (s, m) == (server, model)}
            # Every known outcome, at 0 until it happens, so that rate() sees the first one.
            for outcome in (*OUTCOMES, *sorted(outcomes - set(OUTCOMES))):
                family.add_metric([server, model, outcome], counts.get((server, model, outcome), 0))
        yield family
