"""A run just made, as ``loadgen.engine.runner.run`` returns it: a ``LoadRun`` with what only
the run in memory has (its timeline, its recorder, Triton's traces of its requests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.results.recorder import Recorder
from loadgen.results.summary import LoadRun
from loadgen.results.tracing import TracedRecord
from tritonapi.traces import TracedRequest


@dataclass(kw_only=True)
class RunResult(LoadRun):
    """A run just made: a ``LoadRun`` with its per-second timeline and per-request records."""

    timeline: list[dict[str, Any]]
    recorder: Recorder
    traced: list[TracedRecord] | None = None  # --trace: each traced request of the run
    # --trace: the model's requests in the window with Triton's timestamps (not stored)
    traced_requests: list[TracedRequest] | None = None
    # Set when the store could not take (all of) the run: one line saying where it is.
    store_note: str = ""

    def records(self) -> list[tuple[int, float, float, str, str | None]]:
        """The records still in memory: every one of a run made without a store (up to
        ``recorder.keep``); none of a stored run (``store.load_records`` reads those)."""
        return self.recorder.records()
