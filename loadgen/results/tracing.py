"""Load runs with ``--trace``: Triton's own record of every request, joined to the client's.

Each request of a traced run carries the id ``<run token>-<index>``. A trace window
(``tritonapi.traces``) covers exactly the run's requests; once Triton has written it, the
exporter serves the traces (``/api/traces``), and each traced request is joined to its
client record by that id. The run then knows, per request, its exact server-side queue
wait and the batch it ran in; per run, the exact queue-wait percentiles and how its
requests were grouped. A window holds at most ``tritonapi.traces.MAX_COUNT`` requests,
so ``--trace`` needs a run of known size; on a Triton with the tracing crash (before 2.57)
the run must also fit the measured safe region under its own load
(``tritonapi.tracesafety``), or it is refused before a request is sent.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from dataclasses import dataclass, field

import requests

from loadgen.clients.target import admin_client
from loadgen.errors import LoadgenError
from loadgen.results.params import RunParams
from tritonapi.client import TritonError
from tritonapi.modelconfig import ModelConfig
from tritonapi.traces import (
    MAX_COUNT,
    ExporterUnavailable,
    TracedRequest,
    group_batches,
    percentile,
    read_exporter,
    start_window,
    stop_window,
    window_left,
    with_reasons,
)
from tritonapi.tracesafety import Load, UnsafeTrace, safe_window

WAIT_S = 10.0  # the longest to wait for Triton to write the window and the exporter to read it


def expected_requests(p: RunParams) -> int | None:
    """How many requests the run sends, when that is known before it starts."""
    if p.scenario in ("serial", "concurrent"):
        return p.requests
    if p.scenario == "concurrency":
        return p.requests
    if p.scenario == "rate":
        return round(p.rate * p.duration_s)
    return round(sum(rate * seconds for rate, seconds in p.stages))


def run_load(p: RunParams) -> Load | None:
    """The requests the run keeps in flight, where its scenario fixes them (None: an
    open-loop run, whose in-flight count depends on the server's speed)."""
    if p.scenario == "serial":
        return Load.closed(1)
    if p.scenario == "concurrency":
        return Load.closed(p.concurrency)
    if p.scenario == "concurrent":
        return Load.closed(min(p.requests or 1, p.max_in_flight))
    return None


def check(p: RunParams, exact: int | None = None) -> int:
    """The window's size (``exact``: the open-loop schedule's own count, when known);
    LoadgenError (one line) when the run cannot be traced."""
    count = exact if exact is not None else expected_requests(p)
    if count is None:
        raise LoadgenError(
            "--trace needs a run of known size: give --requests N with concurrency runs"
        )
    if count > MAX_COUNT:
        raise LoadgenError(
            f"--trace covers at most {MAX_COUNT:,} requests and this run sends about "
            f"{count:,}: Triton 2.51 crashes under longer traced streams; send fewer"
        )
    return max(count, 1)


def new_token() -> str:
    return f"lg{secrets.token_hex(4)}"


@dataclass(frozen=True)
class TracedRecord:
    """One request of the run as Triton traced it."""

    index: int  # the request's index in the run (its id's number)
    queue_wait_s: float
    compute_s: float
    batch: int  # the batch it ran in, numbered in order of execution within the run
    batch_size: int  # traced requests in that batch (the batch size when all were traced)
    reason: str  # why the batch left (tritonapi.traces.REASONS), "" without a config


@dataclass
class TraceSummary:
    """What the traces say about a run's requests."""

    sent: int
    traced: int
    queue_wait_s: dict[str, float | None] = field(default_factory=dict)  # p50 p90 p99 max
    batches_by_size: dict[int, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    note: str = ""


def summarize(records: list[TracedRecord], sent: int, note: str = "") -> TraceSummary:
    waits = [round(r.queue_wait_s * 1e9) for r in records]
    quantiles = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0}
    batches = {r.batch: (r.batch_size, r.reason) for r in records}
    return TraceSummary(
        sent=sent,
        traced=len(records),
        queue_wait_s={
            name: (None if (ns := percentile(waits, q)) is None else ns / 1e9)
            for name, q in quantiles.items()
        },
        batches_by_size=dict(sorted(Counter(size for size, _ in batches.values()).items())),
        reasons=dict(Counter(reason for _, reason in batches.values() if reason)),
        note=note,
    )


class Window:
    """A trace window over one run: opened before the first request, read after the last."""

    def __init__(self, p: RunParams, exporter_url: str, exact: int | None = None) -> None:
        self.params = p
        self.count = check(p, exact)
        self.token = new_token()
        self.exporter_url = exporter_url.rstrip("/")
        self.triton = admin_client(p.url)  # trace settings are a restricted API
        self.started_ns = 0
        self.requests: list[TracedRequest] = []

    def open(self) -> None:
        """Check the exporter serves traces, then start the window; LoadgenError if not."""
        url = f"{self.exporter_url}/api/traces"
        try:
            answer = requests.get(url, params={"model": self.params.model}, timeout=5)
            answer.json()
        except (requests.RequestException, ValueError):
            raise LoadgenError(
                f"--trace reads Triton's traces through the exporter, and {url} does not "
                "answer: start the stack (./stack/up) or give --exporter-url"
            ) from None
        if answer.status_code != 200:
            raise LoadgenError(f"--trace: {url} answered {answer.status_code}: {answer.text}")
        try:
            safe_window(self.triton, self.params.model, self.count, 1, False, run_load(self.params))
            start_window(self.triton, self.params.model, count=self.count)
        except UnsafeTrace as exc:
            raise LoadgenError(f"--trace: {exc}; or send fewer requests") from None
        except TritonError as exc:
            raise LoadgenError(f"--trace: cannot turn Triton's tracing on: {exc}") from None
        self.started_ns = time.monotonic_ns()

    def close(self, sent: int, config: ModelConfig | None) -> list[TracedRecord] | str:
        """The run's traced requests, or why there are none (one line)."""
        deadline = time.monotonic() + WAIT_S
        try:
            while window_left(self.triton, self.params.model) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = window_left(self.triton, self.params.model)
            if left:
                stop_window(self.triton, self.params.model)
        except TritonError as exc:
            return f"Triton's trace settings could not be read after the run: {exc}"
        if left:
            return (
                f"the trace window did not complete ({left:,} of {self.count:,} traces never "
                "came: the run sent fewer requests than planned); an unfinished window "
                "keeps only the parts Triton had written"
            )
        traced = self._fetch(sent)
        self.requests = window_requests(traced, self.token, self.params.model)
        return join(traced, self.token, config)

    def _fetch(self, sent: int) -> list[TracedRequest]:
        seconds = min((time.monotonic_ns() - self.started_ns) / 1e9 + 5, 120)
        found: list[TracedRequest] = []
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                found = read_exporter(self.exporter_url, self.params.model, round(seconds)).requests
            except ExporterUnavailable:
                found = []
            mine = sum(r.request_id.startswith(self.token + "-") for r in found)
            if mine >= sent:
                break
            time.sleep(0.25)
        return found


def window_requests(traced: list[TracedRequest], token: str, model: str) -> list[TracedRequest]:
    """The requests of ``model`` that Triton traced while the run's own were in it: the run's
    and any other client's that shared its batches, not the exporter's older ones (the
    advisor measures the batcher's hand-offs from their timestamps: advisor.handoff)."""
    own = [r for r in traced if r.request_id.startswith(token + "-")]
    if not own:
        return []
    first = min(r.queue_start_ns for r in own)
    last = max(r.compute_end_ns for r in own)
    return [r for r in traced if r.model == model and first <= r.queue_start_ns <= last]


def join(traced: list[TracedRequest], token: str, config: ModelConfig | None) -> list[TracedRecord]:
    """Each traced request of the run with its batch (numbered by start) and reason.

    ``traced`` holds every traced request of the model in the window: batches are formed
    from all of them (another client's request in a batch counts in its size), then the
    run's own requests are kept.
    """
    batches = [
        b
        for b in group_batches(traced)
        if any(r.request_id.startswith(token + "-") for r in b.requests)
    ]
    if config is not None:
        batches = with_reasons(batches, {config.name: config})
    out = []
    for number, batch in enumerate(sorted(batches, key=lambda b: b.compute_start_ns)):
        for r in batch.requests:
            if not r.request_id.startswith(token + "-"):
                continue
            out.append(
                TracedRecord(
                    index=int(r.request_id.rsplit("-", 1)[1]),
                    queue_wait_s=r.queue_wait_ns / 1e9,
                    compute_s=r.compute_ns / 1e9,
                    batch=number,
                    batch_size=batch.size,
                    reason=batch.reason,
                )
            )
    return sorted(out, key=lambda t: t.index)
