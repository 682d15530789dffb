"""The exporter's trace families, fed with real trace files (tests/tritonapi/data/traces)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from prometheus_client import CollectorRegistry

from exporter.targets import Target
from exporter.tracing import BUCKETS_S, TraceBook, TraceCollector
from exporter.web import traces_answer
from tritonapi.modelconfig import parse_json
from tritonapi.stats import parse_statistics

DATA = Path(__file__).resolve().parent.parent / "tritonapi" / "data" / "traces"
CONFIG = parse_json(json.loads((DATA / "config.json").read_text()))
TARGET = Target("http://127.0.0.1:8000", "http://127.0.0.1:8002/metrics")
LABELS = {"target": TARGET.url, "model": "batch_add_model", "version": "1"}


def stats_delta() -> dict[int, int]:
    before, after = (
        parse_statistics(json.loads((DATA / "concurrency" / f"stats_{when}.json").read_text()))[0]
        for when in ("before", "after")
    )
    return after.minus(before).executions_by_size()


def book(tmp_path: Path, rate: int, *captures: str) -> TraceBook:
    """A book over copies of captures, traced at ``rate`` (0: tracing off)."""
    for name in captures:
        for path in (DATA / name).glob("trace.json.*"):
            shutil.copy(path, tmp_path / path.name)
    return TraceBook(
        TARGET,
        tmp_path / "trace.json",
        config_of=lambda _model: CONFIG,
        ratio_of=lambda _model: (1 / rate if rate else 0.0, rate or 1000),
    )


def registry(b: TraceBook) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(TraceCollector([b]))
    return reg


def test_queue_waits_and_batches_by_reason(tmp_path: Path) -> None:
    b = book(tmp_path, 1, "concurrency")
    reg = registry(b)
    b.update(now_ns=2**62)  # long after the capture: every batch is final
    get = reg.get_sample_value
    assert get("triton_batching_queue_wait_seconds_count", LABELS) == 180
    assert get("triton_batching_queue_wait_seconds_bucket", {**LABELS, "le": "+Inf"}) == 180
    under_delay = get("triton_batching_queue_wait_seconds_bucket", {**LABELS, "le": "0.0005"})
    assert under_delay is not None and 0 < under_delay < 180
    counted = {
        reason: get("triton_batching_batches_total", {**LABELS, "reason": reason}) or 0
        for reason in ("max_batch_size", "preferred_size", "queue_delay", "instance_idle")
    }
    # Against the statistics API's deltas of the same window: full batches of 4, preferred
    # batches of 2, and the rest (1 and 3) left after waiting or to an idle instance.
    sizes = stats_delta()
    assert counted["max_batch_size"] == sizes.get(4, 0) > 0
    assert counted["preferred_size"] == sizes.get(2, 0) > 0
    assert counted["queue_delay"] + counted["instance_idle"] == sizes.get(1, 0) + sizes.get(3, 0)
    ratio = {"target": TARGET.url, "model": "batch_add_model"}
    assert get("triton_batching_trace_sample_ratio", ratio) == 1.0
    assert get("triton_batching_trace_files_read_total", {"target": TARGET.url}) == 1
    assert get("triton_batching_trace_gaps_total", {"target": TARGET.url}) == 0
    assert not list(tmp_path.glob("trace.json.*"))


def test_sampled_traces_give_waits_but_no_batches(tmp_path: Path) -> None:
    b = book(tmp_path, 100, "concurrency")
    reg = registry(b)
    b.update(now_ns=2**62)
    assert reg.get_sample_value("triton_batching_queue_wait_seconds_count", LABELS) == 180
    assert (
        reg.get_sample_value(
            "triton_batching_batches_total", {**LABELS, "reason": "preferred_size"}
        )
        is None
    )


def test_nothing_traced_exports_no_trace_series(tmp_path: Path) -> None:
    reg = registry(book(tmp_path, 0))
    names = {m.name for m in reg.collect()}
    assert names == {"triton_batching_trace_gaps", "triton_batching_trace_files_read"}


def test_buckets_resolve_common_queue_delays() -> None:
    for delay_s in (100e-6, 500e-6, 2e-3, 10e-3, 100e-3):
        near = [b for b in BUCKETS_S if abs(b - delay_s) <= 0.25 * delay_s]
        assert near, delay_s
    assert list(BUCKETS_S) == sorted(BUCKETS_S)


def test_the_timeline_api_answers_with_the_window(tmp_path: Path) -> None:
    b = book(tmp_path, 1, "concurrency", "lone")
    status, body = traces_answer([b], "model=batch_add_model&seconds=60")
    assert status == "200 OK"
    assert len(body["requests"]) == 181
    assert body["sample_ratio"] == 1.0 and isinstance(body["clock_offset_ns"], int)
    status, body = traces_answer([b], "model=batch_add_model&seconds=600")
    assert status.startswith("400") and "seconds" in body["error"]
    status, body = traces_answer([b], "model=batch_add_model&target=http://other:8000")
    assert status.startswith("404")
