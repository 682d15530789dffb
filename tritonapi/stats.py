"""Triton's statistics API (``GET /v2/models/stats``) as typed, comparable values.

Per model version Triton reports cumulative counts and nanoseconds, and in
``batch_stats[]`` one entry per formed batch size whose ``compute_infer.count``
is the number of executions of that size (there is no separate count field).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PHASES = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    # The response cache (a hit never reaches the batcher: it is not in inference_count).
    "cache_hit",
    "cache_miss",
)


@dataclass(frozen=True)
class Duration:
    count: int = 0
    ns: int = 0

    @property
    def seconds(self) -> float:
        return self.ns / 1e9


@dataclass(frozen=True)
class BatchStat:
    batch_size: int
    executions: int
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0


@dataclass(frozen=True)
class ModelStats:
    name: str
    version: str
    inference_count: int
    execution_count: int
    phases: dict[str, Duration] = field(default_factory=dict)
    batches: dict[int, BatchStat] = field(default_factory=dict)
    last_inference_ms: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.name, self.version)

    def phase(self, name: str) -> Duration:
        return self.phases.get(name, Duration())

    def accounts_for(self, answered: int) -> bool:
        """Whether this delta (one window's) counts ``answered`` requests and the executions
        that served them.

        A backend reports each request's statistics and then its batch's (Triton's backends
        do it in that order once the answers are sent, and skip the batch's when every
        request of it failed), so a read right after the last answer can count every request
        and miss the last execution. A request that succeeded without a cache hit was in a
        batch of at least its one row, so ``inference_count`` reaches the successes less the
        hits once every execution is in. (An ensemble's statistics count one inference and
        one execution per request.)"""
        success = self.phase("success").count
        if success + self.phase("fail").count < answered:
            return False
        return self.inference_count >= success - self.phase("cache_hit").count

    def executions_by_size(self) -> dict[int, int]:
        return {size: b.executions for size, b in sorted(self.batches.items())}

    def is_reset_since(self, earlier: ModelStats) -> bool:
        """True if a counter went backwards: the server restarted in between."""
        return (
            self.execution_count < earlier.execution_count
            or self.inference_count < earlier.inference_count
            or any(
                self.batches.get(size, BatchStat(size, 0)).executions < b.executions
                for size, b in earlier.batches.items()
            )
        )

    def minus(self, earlier: ModelStats | None) -> ModelStats:
        """What happened since ``earlier``; after a restart, everything since the restart."""
        if earlier is None or self.is_reset_since(earlier):
            return self
        phases = {
            k: Duration(v.count - earlier.phase(k).count, v.ns - earlier.phase(k).ns)
            for k, v in self.phases.items()
        }
        batches = {}
        for size, b in self.batches.items():
            e = earlier.batches.get(size, BatchStat(size, 0))
            if b.executions - e.executions:
                batches[size] = BatchStat(
                    size,
                    b.executions - e.executions,
                    b.compute_input_ns - e.compute_input_ns,
                    b.compute_infer_ns - e.compute_infer_ns,
                    b.compute_output_ns - e.compute_output_ns,
                )
        return ModelStats(
            self.name,
            self.version,
            self.inference_count - earlier.inference_count,
            self.execution_count - earlier.execution_count,
            phases,
            batches,
            self.last_inference_ms,
        )


def _duration(obj: Any) -> Duration:
    if not isinstance(obj, dict):
        return Duration()
    return Duration(int(obj.get("count", 0)), int(obj.get("ns", 0)))


def parse_model(entry: dict[str, Any]) -> ModelStats:
    inference = entry.get("inference_stats") or {}
    batches = {}
    for item in entry.get("batch_stats") or []:
        size = int(item["batch_size"])
        infer = _duration(item.get("compute_infer"))
        batches[size] = BatchStat(
            size,
            infer.count,
            _duration(item.get("compute_input")).ns,
            infer.ns,
            _duration(item.get("compute_output")).ns,
        )
    return ModelStats(
        name=str(entry["name"]),
        version=str(entry.get("version", "")),
        inference_count=int(entry.get("inference_count", 0)),
        execution_count=int(entry.get("execution_count", 0)),
        # Only the phases Triton reported: a missing one must not become an invented zero.
        phases={p: _duration(inference[p]) for p in PHASES if p in inference},
        batches=batches,
        last_inference_ms=int(entry.get("last_inference", 0)),
    )


def parse_statistics(payload: Any) -> list[ModelStats]:
    """Parse the JSON of ``/v2/models/stats``; ValueError if it is not that."""
    if not isinstance(payload, dict) or not isinstance(payload.get("model_stats"), list):
        raise ValueError("not a Triton statistics response (no model_stats list)")
    try:
        return [parse_model(entry) for entry in payload["model_stats"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed model_stats entry: {exc!r}") from None
