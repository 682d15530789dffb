"""A load run and its summary as typed values: what the client saw, what the server did.

``ClientSummary`` comes from the recorder (every request accounted for), ``ServerSummary``
from the statistics-API delta of the run's window (``serverside.summarize``), and
``RunSummary`` holds both. ``LoadRun`` is a finished run: its parameters, status, times and
summary, as the API returns it and as the store reads it back.

``to_json`` / ``from_json`` keep the JSON shape the store and ``--json`` have always used
(batch sizes as text keys, ``not_sent`` and ``late_sends`` only for open-loop runs, ``error``
only when sending failed, ``ended`` only in runs stored since it is recorded), so a store
written before these types existed reads as the same values.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from loadgen.results.params import RunParams
from loadgen.results.tracing import TraceSummary

SCHEDULE_KEPT_S = 0.001  # an open-loop run's p99 send lateness past this: schedule missed


@dataclass(frozen=True)
class Latency:
    """Latency of the successful requests, in seconds; None when none succeeded."""

    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None
    mean: float | None = None


# What can end a run: its own limits (duration, requests), a stop (Ctrl-C, SIGTERM, the
# dashboard's button), or an error. Nothing else: no hidden cap cuts a run short.
ENDED = {
    "duration": "its duration",
    "requests": "its number of requests",
    "stop": "a stop (Ctrl-C, SIGTERM or the stop button)",
    "error": "an error",
}


@dataclass(frozen=True)
class ClientSummary:
    """The client's account of a run: sent = ok + failed + timed_out, by construction."""

    sent: int
    ok: int
    failed: int
    timed_out: int
    duration_s: float  # from the first request out to the last outcome known
    throughput_per_s: float | None  # successful requests per second
    latency_s: Latency
    errors: dict[str, int]  # error kind -> requests, most frequent first
    not_sent: int | None = None  # open loop only: due requests dropped at the stop
    # Open loop only: requests sent more than ``late_threshold_s`` after they were due
    # (perf_analyzer's "delayed" requests; their latency still counts from the due time).
    # A plain count: the late sends of runs merged together add up.
    late_sends: int | None = None
    late_threshold_s: float | None = None
    # Open loop only: how late each request went out after its due time, as a distribution
    # (p50 ... max, seconds; engine.pacing aims at microseconds). A run whose p99 is past
    # SCHEDULE_KEPT_S did not keep its schedule, and its report says so.
    send_lateness_s: Latency | None = None
    error: str = ""  # why sending ended early (the run's status is then failed)
    # What ended it: one of ENDED (runs stored before this was recorded: "").
    ended: str = ""
    # Requests sent per shape (``ids[1,12] mask[1,12]``), and what answers were checked
    # against beyond shapes and datatypes (runs stored before these were recorded: None, "").
    shapes: dict[str, int] | None = None
    checked: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("error", "ended", "checked"):
            if not data[key]:
                del data[key]
        for key in ("not_sent", "late_sends", "late_threshold_s", "shapes", "send_lateness_s"):
            if data[key] is None:
                del data[key]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClientSummary:
        lateness = data.get("send_lateness_s")
        return cls(
            **{
                **data,
                "latency_s": Latency(**data["latency_s"]),
                "send_lateness_s": None if lateness is None else Latency(**lateness),
            }
        )

    def schedule_missed(self) -> str:
        """One line when an open-loop run did not keep its schedule (p99 send lateness past
        ``SCHEDULE_KEPT_S``), else "": the figures of such a run describe a different
        arrival process than the one asked for."""
        late = self.send_lateness_s
        if late is None or late.p99 is None or late.p99 <= SCHEDULE_KEPT_S:
            return ""
        return (
            f"schedule not kept: 1 % of requests went out more than {late.p99 * 1e3:.2f} ms "
            f"after they were due (p99 send lateness; the bound is {SCHEDULE_KEPT_S * 1e3:g} ms)"
        )


@dataclass(frozen=True)
class ServerSummary:
    """The statistics-API delta over a run's window (every request the model served in it,
    ours or not): requests, executions, the batch sizes formed, and where the time went."""

    model: str
    version: str
    requests: int
    requests_success: int
    requests_failure: int
    inferences: int
    executions: int  # model calls (server calls); one per formed batch
    average_batch_size: float | None  # inferences / executions
    executions_by_batch_size: dict[int, int]
    queue_s_total: float
    compute_s_total: float
    compute_s_by_phase: dict[str, float]  # compute_input, compute_infer, compute_output
    queue_s_per_request: float | None
    compute_s_per_request: float | None
    request_s_per_request: float | None
    compute_infer_s_per_execution: float | None
    compute_infer_s_per_execution_by_batch_size: dict[int, float | None]
    # compute_input + compute_infer + compute_output per execution at each size, as the
    # live fit counts an execution (advisor.fit.batch_times); empty in a run stored before
    # it was kept (and then not written).
    compute_s_per_execution_by_batch_size: dict[int, float | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in BY_SIZE:
            data[key] = {str(size): value for size, value in data[key].items()}
        if not data[LATER_BY_SIZE]:  # the shape a store held before it was kept
            del data[LATER_BY_SIZE]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerSummary:
        by_size = {
            key: {int(size): value for size, value in data.get(key, {}).items()} for key in BY_SIZE
        }
        return cls(**{**data, **by_size})


# Keyed by batch size: JSON object keys are text, so the size is written as text.
LATER_BY_SIZE = "compute_s_per_execution_by_batch_size"  # absent from older stores
BY_SIZE = (
    "executions_by_batch_size",
    "compute_infer_s_per_execution_by_batch_size",
    LATER_BY_SIZE,
)


@dataclass(frozen=True)
class RunSummary:
    """Both sides of one run. ``server`` is None when the statistics could not be read
    (the server went away during the run); ``server_error`` says why."""

    client: ClientSummary
    server: ServerSummary | None
    server_error: str = ""
    server_restarted: bool = False  # counters reset in the window: figures cover since then

    def server_json(self) -> dict[str, Any]:
        """The server side as JSON: the summary, or ``{"error": ...}``."""
        return {"error": self.server_error} if self.server is None else self.server.to_json()

    def to_json(self) -> dict[str, Any]:
        return {
            "client": self.client.to_json(),
            "server": self.server_json(),
            "server_restarted": self.server_restarted,
        }

    @classmethod
    def from_json(
        cls, client: dict[str, Any], server: dict[str, Any], restarted: bool = False
    ) -> RunSummary:
        if "error" in server:
            return cls(ClientSummary.from_json(client), None, str(server["error"]), restarted)
        return cls(ClientSummary.from_json(client), ServerSummary.from_json(server), "", restarted)


@dataclass(kw_only=True)
class LoadRun:
    """A finished load run: what was asked, how it ended, what was measured."""

    params: RunParams
    status: str  # ok | interrupted | failed
    started_at: float  # unix seconds
    finished_at: float
    summary: RunSummary
    run_id: int | None = None  # None: not stored
    group_id: str = ""  # shared by the runs of one sweep or comparison
    trace: TraceSummary | None = None  # --trace runs: what Triton's traces say
    # As the server reported them when the run began ("" / None: not read, or an old store).
    triton_version: str = ""
    model_config: dict[str, Any] | None = None

    def describe(self) -> str:
        """One line naming the run: id, label (or what it did), model, start time."""
        p = self.params
        name = "(not stored)" if self.run_id is None else f"#{self.run_id}"
        when = time.strftime("%H:%M:%S", time.localtime(self.started_at))
        return f"{name} {p.label or p.describe()} on {p.model} at {when}"


def result_json(run: LoadRun) -> dict[str, Any]:
    """A run as ``--json`` prints it (and as a run saved beside the store keeps it)."""
    return {
        "run_id": run.run_id,
        "group_id": run.group_id,
        "status": run.status,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "params": run.params.to_json(),
        **run.summary.to_json(),
        **({"trace": asdict(run.trace)} if run.trace is not None else {}),
    }
