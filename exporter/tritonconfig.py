"""The batching part of a model's configuration (``GET /v2/models/<m>/config``).

Triton answers with its effective configuration as protobuf JSON, where 64-bit
integers such as ``max_queue_delay_microseconds`` may come as strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BatchingConfig:
    name: str
    backend: str
    platform: str
    max_batch_size: int
    dynamic_batching: bool
    preferred_batch_sizes: tuple[int, ...]
    # None without dynamic batching: there is no queue delay to report then.
    max_queue_delay_s: float | None
    instances: int
    instance_kinds: tuple[str, ...]


def _instances(groups: Any) -> int:
    total = 0
    for group in groups or []:
        count = int(group.get("count", 1))
        # A GPU group places `count` instances on each listed GPU.
        gpus = group.get("gpus") or []
        total += count * len(gpus) if group.get("kind") == "KIND_GPU" and gpus else count
    return total


def parse_config(payload: Any) -> BatchingConfig:
    """Parse one model's config JSON; ValueError if it is not that."""
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        raise ValueError("not a Triton model config (no name)")
    try:
        dynamic = payload.get("dynamic_batching")
        has_dynamic = isinstance(dynamic, dict)
        groups = payload.get("instance_group") or []
        return BatchingConfig(
            name=payload["name"],
            backend=str(payload.get("backend", "")),
            platform=str(payload.get("platform", "")),
            max_batch_size=int(payload.get("max_batch_size", 0)),
            dynamic_batching=has_dynamic,
            preferred_batch_sizes=tuple(
                sorted({int(s) for s in (dynamic or {}).get("preferred_batch_size", [])})
            ),
            max_queue_delay_s=(
                int((dynamic or {}).get("max_queue_delay_microseconds", 0)) / 1e6
                if has_dynamic
                else None
            ),
            instances=_instances(groups),
            instance_kinds=tuple(sorted({str(g.get("kind", "")) for g in groups})),
        )
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed model config {payload.get('name')!r}: {exc!r}") from None
