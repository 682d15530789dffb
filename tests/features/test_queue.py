"""max_queue_size on a real Triton: what rejects, who counts it, and what the stack shows.

add_slow_queue executes batches of at most 2 in 50 ms with a queue of 2: at 100 requests/s
most requests get HTTP 503 'Exceeds maximum queue size'.
"""

from __future__ import annotations

import pytest

from loadgen.engine.runner import RunParams, run
from stacksettings import Settings
from tests.features.conftest import registry_for

pytestmark = pytest.mark.integration

MODEL = "add_slow_queue"
FULL = "Exceeds maximum queue size"


def test_rejections_are_counted_by_the_client_and_nowhere_in_triton(
    features_triton: Settings,
) -> None:
    registry = registry_for(features_triton)
    labels = {"target": features_triton.url("triton_http"), "model": MODEL, "version": "1"}

    def failures(reason: str) -> float | None:
        return registry.get_sample_value(
            "triton_batching_request_failures_by_reason_total", {**labels, "reason": reason}
        )

    before = registry.get_sample_value("triton_batching_requests_failure_total", labels)
    params = RunParams(
        scenario="rate",
        model=MODEL,
        url=features_triton.url("triton_http"),
        rate=100.0,
        duration_s=2.0,
    )
    client = run(params).summary.client
    rejected = sum(n for error, n in client.errors.items() if "HTTP 503" in error and FULL in error)
    # The load generator sees every rejection, with Triton's reason.
    assert rejected > 50, client.errors
    assert client.ok + rejected == client.sent
    # Triton 2.51 counts them nowhere: no failure, no REJECTED reason (the label exists).
    assert registry.get_sample_value("triton_batching_requests_failure_total", labels) == before
    assert failures("REJECTED") == 0
    # What the exporter shows instead: the bound, for the alert to compare the pending with.
    assert (
        registry.get_sample_value(
            "triton_batching_max_queue_size", {**labels, "priority": "default"}
        )
        == 2
    )


def test_unbounded_queues_have_no_bound_series(features_triton: Settings) -> None:
    registry = registry_for(features_triton)
    target = features_triton.url("triton_http")
    bounds = {
        (s.labels["model"], s.labels["priority"]): s.value
        for family in registry.collect()
        if family.name == "triton_batching_max_queue_size"
        for s in family.samples
    }
    # add_priority: level 1 unbounded (no series), level 2 holds 16.
    assert bounds == {("add_slow_queue", "default"): 2, ("add_priority", "2"): 16}
    timeout = registry.get_sample_value(
        "triton_batching_queue_timeout_seconds",
        {"target": target, "model": "add_priority", "version": "1", "priority": "2"},
    )
    assert timeout == pytest.approx(0.5)
