"""What a model's traces say: whether Triton writes them (its trace settings), and what the
exporter's retained batch traces of it show (queue waits, batch sizes, why batches left).
"""

from __future__ import annotations

from collections import Counter

from tritonapi import ModelConfig, TritonClient, TritonError
from tritonapi.traces import (
    REASON_TEXT,
    REASONS,
    ExporterUnavailable,
    group_batches,
    percentile,
    read_exporter,
    with_reasons,
)

TRACES_OFF = "traces off"


def traces_read(exporter_url: str, config: ModelConfig, seconds: float = 120.0) -> str:
    """What the exporter's batch traces of the last ``seconds`` say; "" when it has none."""
    try:
        found = read_exporter(exporter_url, config.name, seconds)
    except ExporterUnavailable:
        return ""
    if not found.requests:
        return ""
    waits = [r.queue_wait_ns for r in found.requests]
    p50, p99 = (percentile(waits, q) for q in (0.5, 0.99))
    text = (
        f"{len(waits):,} traced requests in the exporter's last {seconds:g} s: queue wait "
        f"p50 {(p50 or 0) / 1e6:.3f} ms, p99 {(p99 or 0) / 1e6:.3f} ms (exact)"
    )
    if found.trace_rate != 1:
        return text + "; sampled, so batch sizes and why batches left are unknown"
    batches = with_reasons(group_batches(found.requests), {config.name: config})
    reasons = Counter(b.reason for b in batches)
    shares = ", ".join(
        f"{REASON_TEXT[r]} {reasons[r] / len(batches):.0%}" for r in REASONS if reasons[r]
    )
    return f"{text}; {len(batches):,} batches: {shares}"


def trace_state(client: TritonClient, model: str) -> str:
    """Whether Triton writes per-request traces for this model."""
    try:
        settings = client.trace_settings(model)
    except TritonError:
        return f"{TRACES_OFF} (trace settings not readable)"
    level = settings.get("trace_level") or ["OFF"]
    if level == ["OFF"] or level == "OFF":
        return TRACES_OFF
    levels = ", ".join(level) if isinstance(level, list) else str(level)
    return f"traces on ({levels}); none read yet"
