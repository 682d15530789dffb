"""GPU gauges passed through from Triton's /metrics.

The GPU fixture (data/gpu_from_docs/gpu_metrics.txt) is BUILT FROM TRITON'S DOCUMENTATION
(docs/user_guide/metrics.md, "GPU Metrics"), not captured: no GPU was available. It is
appended to a real capture of this project's CPU-only Triton, which itself has no nv_gpu_*
series and gives the "no GPU" case.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from exporter.collector import BatchingCollector
from exporter.scrape import Snapshot, parse_snapshot
from exporter.targets import Target
from tests.exporter.replay import DATA, snapshot
from tritonapi.metrics import GpuStats, parse_metrics

URL = "http://triton:8000"
TARGET = Target(URL, "http://triton:8002/metrics")
GPU_DOCS = (DATA / "gpu_from_docs" / "gpu_metrics.txt").read_text()
GPU_A = "GPU-00000000-1111-2222-3333-444444444444"
GPU_B = "GPU-55555555-6666-7777-8888-999999999999"
GPU_FAMILIES = [
    "triton_batching_gpu_utilization_ratio",
    "triton_batching_gpu_memory_used_bytes",
    "triton_batching_gpu_memory_total_bytes",
    "triton_batching_gpu_power_watts",
]


def with_gpus(moment: str = "rest") -> Snapshot:
    real = snapshot(moment)
    return replace(real, metrics_text=real.metrics_text + GPU_DOCS)


def registry_for(snap: Snapshot) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(BatchingCollector([TARGET], fetch=lambda _t, _s: snap))
    return registry


def test_the_gpus_of_the_docs_fixture_are_parsed() -> None:
    metrics = parse_metrics(with_gpus().metrics_text)
    assert metrics.gpus == [
        GpuStats(GPU_A, 0.75, 37688705024, 150754820096, 412.5),
        GpuStats(GPU_B, 0.125, 1073741824, 150754820096, 88),
    ]
    # The model series of the real capture are still read beside them.
    assert metrics.pending[("batch_add_model", "1")] == 0


def test_gpu_gauges_pass_through_with_the_target() -> None:
    registry = registry_for(with_gpus())
    labels = {"target": URL, "gpu_uuid": GPU_A}
    get = registry.get_sample_value
    assert get("triton_batching_gpu_utilization_ratio", labels) == 0.75
    assert get("triton_batching_gpu_memory_used_bytes", labels) == 37688705024
    assert get("triton_batching_gpu_memory_total_bytes", labels) == 150754820096
    assert get("triton_batching_gpu_power_watts", labels) == 412.5
    labels_b = {"target": URL, "gpu_uuid": GPU_B}
    assert get("triton_batching_gpu_utilization_ratio", labels_b) == 0.125
    # The model series are unchanged by the GPUs.
    assert (
        get(
            "triton_batching_model_ready",
            {"target": URL, "model": "batch_add_model", "version": "1"},
        )
        == 1
    )


@pytest.mark.parametrize("moment", ["rest", "load", "after_load", "restarted"])
def test_no_gpu_means_no_gpu_series_not_zeros(moment: str) -> None:
    """The real captures come from a CPU-only Triton: no family may appear, not even empty."""
    view = parse_snapshot(snapshot(moment))
    assert view.gpus == []
    names = {family.name for family in registry_for(snapshot(moment)).collect()}
    assert names.isdisjoint(GPU_FAMILIES)
    assert "triton_batching_target_up" in names


def test_a_gpu_missing_one_gauge_has_no_series_for_it() -> None:
    # Only utilization reported (e.g. a Triton started with a partial DCGM field set).
    text = snapshot("rest").metrics_text + (
        "# TYPE nv_gpu_utilization gauge\n"
        f'nv_gpu_utilization{{gpu_uuid="{GPU_A}"}} 0.5\n'
        # A sample without its GPU's uuid cannot be attributed: ignored.
        "nv_gpu_utilization 0.9\n"
    )
    registry = registry_for(replace(snapshot("rest"), metrics_text=text))
    labels = {"target": URL, "gpu_uuid": GPU_A}
    assert registry.get_sample_value("triton_batching_gpu_utilization_ratio", labels) == 0.5
    names = {f.name for f in registry.collect() if f.samples}
    assert "triton_batching_gpu_memory_used_bytes" not in names
    samples = [
        s for f in registry.collect() for s in f.samples if f.name.startswith("triton_batching_gpu")
    ]
    assert len(samples) == 1


def test_a_failed_target_reports_no_gpu_series() -> None:
    def fetch(_target: Target, _timeout_s: float) -> Snapshot:
        raise ConnectionError("refused")

    registry = CollectorRegistry()
    registry.register(BatchingCollector([TARGET], fetch=fetch))
    names = {f.name for f in registry.collect()}
    assert names.isdisjoint(GPU_FAMILIES)
    assert registry.get_sample_value("triton_batching_target_up", {"target": URL}) == 0
