"""Triton releases differ in what /metrics holds; none of it may break a scrape.

- 2.49 and later label failed requests with a ``reason`` (REJECTED, CANCELED, BACKEND,
  OTHER): the exporter passes them through per model. Before, there is no reason label,
  and no series.
- 2.52 and later add ``nv_inference_first_response_histogram_ms``; GPU builds add GPU and
  cache families. Families the exporter does not read are skipped, whatever they hold.

The base is a real capture of this project's Triton 2.51 (tests/exporter/data/after_load).
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from exporter.collector import BatchingCollector
from exporter.scrape import Snapshot, parse_snapshot
from exporter.targets import Target
from tests.exporter.replay import snapshot
from tritonapi.metrics import parse_metrics

URL = "http://127.0.0.1:8000"
TARGET = Target(URL, "http://127.0.0.1:8002/metrics")
REASONS = {"REJECTED", "CANCELED", "BACKEND", "OTHER"}

# What newer releases and GPU builds add (names from Triton's docs/user_guide/metrics.md).
NEWER = """\
# HELP nv_inference_first_response_histogram_ms Duration from request to first response
# TYPE nv_inference_first_response_histogram_ms histogram
nv_inference_first_response_histogram_ms_bucket{model="batch_add_model",version="1",le="1"} 3
nv_inference_first_response_histogram_ms_bucket{model="batch_add_model",version="1",le="+Inf"} 9
nv_inference_first_response_histogram_ms_sum{model="batch_add_model",version="1"} 17.5
nv_inference_first_response_histogram_ms_count{model="batch_add_model",version="1"} 9
# HELP nv_cache_num_hits_per_model Number of cache hits per model
# TYPE nv_cache_num_hits_per_model counter
nv_cache_num_hits_per_model{model="batch_add_model",version="1"} 4
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-1"} 0.5
# HELP nv_some_future_family a family no release has yet, with labels nobody knows
# TYPE nv_some_future_family gauge
nv_some_future_family{shard="a",model="batch_add_model"} 1
"""


def collected(snap: Snapshot) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(BatchingCollector([TARGET], fetch=lambda _t, _s: snap))
    return registry


def reasons(registry: CollectorRegistry, model: str) -> dict[str, float]:
    return {
        s.labels["reason"]: s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == "triton_batching_request_failures_by_reason_total"
        and s.labels["model"] == model
    }


def test_failure_reasons_pass_through_per_model() -> None:
    registry = collected(snapshot("after_load"))
    assert reasons(registry, "batch_add_model") == dict.fromkeys(REASONS, 0.0)
    bumped = snapshot("after_load").metrics_text.replace(
        'nv_inference_request_failure{model="batch_add_model",reason="BACKEND",version="1"} 0',
        'nv_inference_request_failure{model="batch_add_model",reason="BACKEND",version="1"} 7',
    )
    registry = collected(replace(snapshot("after_load"), metrics_text=bumped))
    assert reasons(registry, "batch_add_model")["BACKEND"] == 7.0


def test_an_older_triton_without_reasons_gives_no_reason_series() -> None:
    old = re.sub(r'reason="\w+",', "", snapshot("after_load").metrics_text)
    # Without the label the samples of one model collapse into one; keep one per model.
    lines, seen = [], set()
    for line in old.splitlines():
        key = line.split(" ")[0]
        if line.startswith("nv_inference_request_failure{") and key in seen:
            continue
        seen.add(key)
        lines.append(line)
    registry = collected(replace(snapshot("after_load"), metrics_text="\n".join(lines) + "\n"))
    assert reasons(registry, "batch_add_model") == {}
    assert registry.get_sample_value("triton_batching_target_up", {"target": URL}) == 1.0


def test_newer_and_unknown_families_never_break_a_scrape() -> None:
    snap = snapshot("after_load")
    newer = replace(snap, metrics_text=snap.metrics_text + NEWER)
    view = parse_snapshot(newer)
    assert {m.stats.name for m in view.models} == {
        m.stats.name for m in parse_snapshot(snap).models
    }
    assert [g.uuid for g in view.gpus] == ["GPU-1"]
    registry = collected(newer)
    assert registry.get_sample_value("triton_batching_target_up", {"target": URL}) == 1.0


def test_only_the_families_read_are_parsed_and_triton_is_still_recognised() -> None:
    parsed = parse_metrics(snapshot("after_load").metrics_text + NEWER)
    assert parsed.pending and parsed.failures and parsed.gpus
    # Another program's metrics are refused, as before.
    with pytest.raises(ValueError, match=r"no nv_\* metrics"):
        parse_metrics("# TYPE go_goroutines gauge\ngo_goroutines 7\n")


def test_the_requests_received_are_the_executed_count_and_the_gauge_of_one_read() -> None:
    # a capture taken under load: 2,504 executed and 1 pending for batch_add_model
    parsed = parse_metrics(snapshot("load").metrics_text)
    assert parsed.inferences[("batch_add_model", "1")] == 2504
    assert parsed.received("batch_add_model", "1") == 2504 + 1
    assert parsed.received("batch_add_model", "2") is None  # no such version
    assert parsed.received("no_such_model", "1") is None
