"""Triton's own per-request traces: read them as Triton writes them, rebuild the batches.

Triton (started with ``--trace-config triton,file=PREFIX``) writes the traces it has collected
to ``PREFIX.0``, ``PREFIX.1``, ... each time a model's buffer reaches its ``log_frequency``
(and when a trace setting changes, and at shutdown): one JSON list per file, several entries
per trace id, each with the id and either the model, version and request id, or one named
timestamp in nanoseconds of the server's steady clock (``CLOCK_MONOTONIC``)::

    {"id": 1, "model_name": "batch_add_model", "model_version": 1, "request_id": "w2-0"}
    {"id": 1, "timestamps": [{"name": "QUEUE_START", "ns": 834473969376}]}

Requests executed together share one COMPUTE_START (and COMPUTE_END). A trace carries no
batch size, so a batch's size and why it left (:func:`departure_reason`) are known only when
every request of the window was traced (rate 1). Queue waits are exact per traced request,
so their percentiles need only a sample.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tritonapi.client import TritonClient
from tritonapi.modelconfig import ModelConfig

# Departure reasons, in the order they are decided.
MAX_BATCH_SIZE = "max_batch_size"
PREFERRED_SIZE = "preferred_size"
QUEUE_DELAY = "queue_delay"
INSTANCE_IDLE = "instance_idle"
REASONS = (MAX_BATCH_SIZE, PREFERRED_SIZE, QUEUE_DELAY, INSTANCE_IDLE)
REASON_TEXT = {
    MAX_BATCH_SIZE: "reached max_batch_size",
    PREFERRED_SIZE: "reached a preferred size",
    QUEUE_DELAY: "its oldest request waited out the queue delay",
    INSTANCE_IDLE: "an idle instance took what was queued",
}
# A timer wakes up a little early or late: a wait within this fraction of the delay (or
# 50 µs) counts as having reached it.
DELAY_TOLERANCE = 0.1
DELAY_TOLERANCE_NS = 50_000

_INDEX = re.compile(r"\.(\d+)$")


@dataclass(frozen=True)
class TracedRequest:
    """One traced request; times in ns of the server's steady clock."""

    trace_id: int
    model: str
    version: str
    request_id: str
    queue_start_ns: int
    compute_start_ns: int
    compute_end_ns: int
    request_start_ns: int = 0
    request_end_ns: int = 0

    @property
    def queue_wait_ns(self) -> int:
        return self.compute_start_ns - self.queue_start_ns

    @property
    def compute_ns(self) -> int:
        return self.compute_end_ns - self.compute_start_ns

    def to_json(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "model": self.model,
            "version": self.version,
            "request_id": self.request_id,
            "queue_start_ns": self.queue_start_ns,
            "compute_start_ns": self.compute_start_ns,
            "compute_end_ns": self.compute_end_ns,
            "request_start_ns": self.request_start_ns,
            "request_end_ns": self.request_end_ns,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TracedRequest:
        return cls(
            trace_id=int(data["trace_id"]),
            model=str(data["model"]),
            version=str(data["version"]),
            request_id=str(data.get("request_id", "")),
            queue_start_ns=int(data["queue_start_ns"]),
            compute_start_ns=int(data["compute_start_ns"]),
            compute_end_ns=int(data["compute_end_ns"]),
            request_start_ns=int(data.get("request_start_ns", 0)),
            request_end_ns=int(data.get("request_end_ns", 0)),
        )


@dataclass
class Parsed:
    requests: list[TracedRequest] = field(default_factory=list)
    # Traces without the timestamps of an executed request (e.g. rejected before the queue).
    incomplete: int = 0


def parse_entries(entries: Iterable[Any]) -> Parsed:
    """The requests of one file's entries; entries of other shapes are ignored."""
    by_id: dict[int, dict[str, Any]] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), int):
            continue
        trace = by_id.setdefault(entry["id"], {"stamps": {}})
        if "model_name" in entry:
            trace["model"] = str(entry["model_name"])
            trace["version"] = str(entry.get("model_version", ""))
            trace["request_id"] = str(entry.get("request_id", ""))
        for stamp in entry.get("timestamps") or []:
            if isinstance(stamp, dict) and "name" in stamp and "ns" in stamp:
                # The first of a name wins: a request's own QUEUE_START, not a child's.
                trace["stamps"].setdefault(str(stamp["name"]), int(stamp["ns"]))
    parsed = Parsed()
    for trace_id, trace in sorted(by_id.items()):
        s = trace["stamps"]
        needed = ("QUEUE_START", "COMPUTE_START", "COMPUTE_END")
        if "model" not in trace or any(name not in s for name in needed):
            parsed.incomplete += 1
            continue
        parsed.requests.append(
            TracedRequest(
                trace_id=trace_id,
                model=trace["model"],
                version=trace["version"],
                request_id=trace["request_id"],
                queue_start_ns=s["QUEUE_START"],
                compute_start_ns=s["COMPUTE_START"],
                compute_end_ns=s["COMPUTE_END"],
                request_start_ns=s.get("REQUEST_START", 0),
                request_end_ns=s.get("REQUEST_END", 0),
            )
        )
    return parsed


def salvage(text: str) -> list[Any]:
    """The complete entries at the start of a JSON list cut short (a partial write)."""
    decoder = json.JSONDecoder()
    entries: list[Any] = []
    pos = text.find("[")
    if pos < 0:
        return entries
    pos += 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return entries
        try:
            entry, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return entries
        entries.append(entry)


# ---- batches ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """Traced requests that shared one execution (one COMPUTE_START)."""

    model: str
    version: str
    compute_start_ns: int
    compute_end_ns: int
    requests: tuple[TracedRequest, ...]
    # Which lane of the timeline: batches that overlap in time ran on different instances.
    lane: int = 0
    reason: str = ""

    @property
    def size(self) -> int:
        """Traced requests in the batch: its size when every request was traced."""
        return len(self.requests)

    @property
    def oldest_wait_ns(self) -> int:
        return self.compute_start_ns - min(r.queue_start_ns for r in self.requests)

    @property
    def last_arrival_ns(self) -> int:
        return max(r.queue_start_ns for r in self.requests)


def group_batches(requests: Iterable[TracedRequest]) -> list[Batch]:
    """Batches in the order they started, each with a lane (see :func:`assign_lanes`)."""
    groups: dict[tuple[str, str, int], list[TracedRequest]] = {}
    for r in requests:
        groups.setdefault((r.model, r.version, r.compute_start_ns), []).append(r)
    batches = [
        Batch(
            model,
            version,
            start,
            max(r.compute_end_ns for r in members),
            tuple(sorted(members, key=lambda r: r.queue_start_ns)),
        )
        for (model, version, start), members in groups.items()
    ]
    batches.sort(key=lambda b: (b.model, b.compute_start_ns))
    return assign_lanes(batches)


def assign_lanes(batches: list[Batch]) -> list[Batch]:
    """Give each batch the first lane free at its start (per model).

    Traces do not name the instance; batches that overlap in time must have run on
    different instances, so this needs as many lanes as instances were busy at once.
    """
    out = []
    lanes: dict[str, list[int]] = {}  # model -> end of the last batch in each lane
    for batch in batches:
        ends = lanes.setdefault(batch.model, [])
        lane = next((i for i, end in enumerate(ends) if end <= batch.compute_start_ns), len(ends))
        if lane == len(ends):
            ends.append(batch.compute_end_ns)
        else:
            ends[lane] = batch.compute_end_ns
        out.append(
            Batch(
                batch.model,
                batch.version,
                batch.compute_start_ns,
                batch.compute_end_ns,
                batch.requests,
                lane,
                batch.reason,
            )
        )
    return out


def departure_reason(batch: Batch, config: ModelConfig) -> str:
    """Why the batcher sent ``batch`` when it did.

    From Triton's dynamic batcher (docs/user_guide/batcher.md): it sends a batch at once when
    it reaches ``max_batch_size`` or a preferred size; otherwise it holds the requests until
    the oldest has waited ``max_queue_delay_microseconds``, unless that delay is 0 or the
    next request does not fit, when an idle instance takes what is queued.
    """
    if config.dynamic is None or config.max_batch_size <= 1:
        return INSTANCE_IDLE  # no batcher: each request goes to the next free instance
    size = batch.size
    if size >= config.max_batch_size:
        return MAX_BATCH_SIZE
    # Triton's normalisation: dynamic batching without preferred sizes prefers the maximum.
    if size in config.preferred_batch_sizes:
        return PREFERRED_SIZE
    delay_ns = config.dynamic.max_queue_delay_us * 1000
    slack = max(DELAY_TOLERANCE * delay_ns, DELAY_TOLERANCE_NS)
    if delay_ns > 0 and batch.oldest_wait_ns >= delay_ns - slack:
        return QUEUE_DELAY
    return INSTANCE_IDLE


def with_reasons(batches: Iterable[Batch], configs: dict[str, ModelConfig]) -> list[Batch]:
    """The batches with their departure reasons, for the models whose config is known."""
    out = []
    for b in batches:
        config = configs.get(b.model)
        reason = departure_reason(b, config) if config is not None else ""
        out.append(
            Batch(
                b.model, b.version, b.compute_start_ns, b.compute_end_ns, b.requests, b.lane, reason
            )
        )
    return out


def percentile(values: list[int], q: float) -> int | None:
    """Nearest-rank percentile (q in 0..1) of exact values; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q * len(ordered))))
    return ordered[rank - 1]


# ---- following the files ------------------------------------------------------------------


@dataclass
class FollowStats:
    files_read: int = 0
    # Traces lost: files skipped in the sequence, or the unreadable tail of a file.
    gaps: int = 0
    incomplete: int = 0
    restarts: int = 0


class TraceFollower:
    """Reads ``PREFIX.N`` files in order as Triton writes them, and removes them once read.

    - A file that does not parse yet may still be being written: it is read again at
      the next poll; one that stays broken for ``settle_s`` gives up its complete
      entries, and the rest counts as a gap.
    - A file index lower than the next expected one means Triton restarted (it numbers
      files from 0 again): the sequence starts over.
    - A missing index (a file removed by someone else) counts as a gap.

    Disk use is bounded by how often it is polled: every file read is removed.
    """

    def __init__(self, prefix: Path, settle_s: float = 2.0, remove: bool = True) -> None:
        self.prefix = Path(prefix)
        self.settle_s = settle_s
        self.remove = remove
        self.next_index: int | None = None
        self.stats = FollowStats()

    def pending(self) -> list[tuple[int, Path]]:
        """The trace files present now, by index."""
        folder, name = self.prefix.parent, self.prefix.name
        found = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(folder):
                if entry.name.startswith(name + "."):
                    match = _INDEX.search(entry.name[len(name) :])
                    if match and entry.name[len(name) :] == match.group(0):
                        found.append((int(match.group(1)), Path(entry.path)))
        return sorted(found)

    def poll(self, now: float | None = None) -> list[TracedRequest]:
        """Every request in the files that are complete now, in file order."""
        now = time.time() if now is None else now
        out: list[TracedRequest] = []
        for index, path in self.pending():
            entries = self._read(path, now)
            if entries is None:
                break  # still being written: keep the order, read it next time
            self._advance(index)
            parsed = parse_entries(entries)
            self.stats.files_read += 1
            self.stats.incomplete += parsed.incomplete
            out.extend(parsed.requests)
            if self.remove:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        return out

    def _advance(self, index: int) -> None:
        if self.next_index is not None:
            if index < self.next_index:
                self.stats.restarts += 1
            elif index > self.next_index:
                self.stats.gaps += index - self.next_index
        self.next_index = index + 1

    def _read(self, path: Path, now: float) -> list[Any] | None:
        try:
            text = path.read_text()
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return []
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            if now - mtime < self.settle_s:
                return None
            self.stats.gaps += 1  # at least the cut-off trace is lost
            return salvage(text)
        return data if isinstance(data, list) else []


# ---- turning tracing on and off -----------------------------------------------------------
#
# A window traces the next ``count`` requests of one model. Triton writes them in parts of
# ``WRITE_EVERY`` traces (``log_frequency``: PREFIX.0, PREFIX.1, ...) and the rest when the
# count is reached, so that a window cut short (Triton died, or it was stopped) leaves
# what it had written; the part still in Triton's buffer of a stopped window is written
# only when Triton shuts down, and the last trace of a window is sometimes missing (4,999
# of 5,000 once): the reader reports what it found. Triton before 2.57 can crash while it
# traces (server PR #8144), the more likely the more traced requests it has handled:
# ``tritonapi.tracesafety`` holds the window sizes that stay safe there, from the map
# that bench/trace_safety.py draws (docs/validation/trace-safety.md).

# What one traced request costs on disk until it is read (measured: 50 traces of the add
# model, with HTTP timestamps, take 45 KB).
BYTES_PER_TRACE = 900
DEFAULT_COUNT = 2_000
MAX_COUNT = 5_000
# Written in parts this large: a cut-short window keeps all but its last part.
WRITE_EVERY = 100


def start_window(
    client: TritonClient,
    model: str,
    count: int = DEFAULT_COUNT,
    rate: int = 1,
    write_every: int = WRITE_EVERY,
) -> dict[str, Any]:
    """Trace the next ``count`` traced requests of ``model`` (1 in ``rate`` of them),
    written every ``write_every`` traces (0: once, when the window is full).

    The caller keeps the window inside the server's safe region
    (``tritonapi.tracesafety.safe_window``)."""
    if rate < 1:
        raise ValueError(f"trace rate {rate}: give 1 (every request) or more (1 in N)")
    if not 1 <= count <= MAX_COUNT:
        raise ValueError(f"trace count {count}: give 1 to {MAX_COUNT:,}")
    return client.update_trace_settings(
        {
            "trace_level": ["TIMESTAMPS"],
            "trace_rate": rate,
            "trace_count": count,
            "log_frequency": write_every,
        },
        model=model,
    )


def window_left(client: TritonClient, model: str) -> int:
    """Traces the model's window still waits for; 0 once Triton has written the file."""
    setting = client.trace_settings(model)
    if "OFF" in (setting.get("trace_level") or ["OFF"]):
        return 0
    return max(int(setting.get("trace_count", "0") or 0), 0)


def stop_window(client: TritonClient, model: str) -> dict[str, Any]:
    """Stop tracing ``model`` (an unfinished window keeps only its parts already written)."""
    return client.update_trace_settings({"trace_level": ["OFF"]}, model=model)


# ---- the exporter's window of traces ------------------------------------------------------


@dataclass(frozen=True)
class ExporterWindow:
    """What the exporter's ``/api/traces`` holds for one model (see exporter/web.py)."""

    requests: list[TracedRequest]
    clock_offset_ns: int  # unix ns = steady-clock ns + offset
    sample_ratio: float | None  # share traced now (0: off)
    trace_rate: int | None  # 1 in N: the rate the model is (or was last) traced at
    gaps: int
    # Steady-clock (from, to) ns of windows that ended unfinished (Triton died, or tracing
    # was stopped): the requests traced in them are all there is of those windows.
    incomplete: tuple[tuple[int, int], ...] = ()

    def cut(self, requests: Iterable[TracedRequest]) -> bool:
        """Whether any of ``requests`` belongs to a window that ended unfinished."""
        return any(a <= r.queue_start_ns <= b for r in requests for a, b in self.incomplete)


class ExporterUnavailable(RuntimeError):
    """The exporter's trace API did not answer usably; the message says why."""


def read_exporter(
    exporter_url: str, model: str, seconds: float, timeout_s: float = 5.0
) -> ExporterWindow:
    """The exporter's retained traced requests of ``model`` over its last ``seconds``."""
    url = f"{exporter_url.rstrip('/')}/api/traces"
    try:
        response = requests.get(
            url, params={"model": model, "seconds": f"{seconds:g}"}, timeout=timeout_s
        )
        body = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ExporterUnavailable(
            f"the exporter's trace API at {url} did not answer usably ({type(exc).__name__})"
        ) from None
    if response.status_code != 200 or not isinstance(body, dict):
        error = body.get("error") if isinstance(body, dict) else None
        raise ExporterUnavailable(f"{url} answered {response.status_code}: {error or body}")
    return ExporterWindow(
        requests=[TracedRequest.from_json(r) for r in body.get("requests", [])],
        clock_offset_ns=int(body.get("clock_offset_ns", 0)),
        sample_ratio=body.get("sample_ratio"),
        trace_rate=body.get("trace_rate"),
        gaps=int(body.get("gaps", 0)),
        incomplete=tuple((int(a), int(b)) for a, b in body.get("incomplete", [])),
    )
