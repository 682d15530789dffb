"""The GPU panel's data layer and figure.

The GPU case runs on the exporter's output for a fixture BUILT FROM TRITON'S DOCUMENTATION
(tests/exporter/data/gpu_from_docs/, the "GPU Metrics" table of docs/user_guide/metrics.md),
not a capture: no GPU was available. The no-GPU case is a real capture of this project's
CPU-only Triton.
"""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
from prometheus_client import CollectorRegistry

from dashboard import gpu
from exporter.collector import BatchingCollector
from exporter.scrape import Snapshot
from tests.exporter.replay import snapshot
from tests.exporter.test_gpu import GPU_A, GPU_B, TARGET, with_gpus


def instant_results(snap: Snapshot) -> dict[str, pd.DataFrame]:
    """What Prometheus would answer to each of gpu.QUERIES after scraping the exporter:
    ``max by (target, gpu_uuid) (metric)`` over the exporter's samples, as a DataFrame
    with the labels as columns and ``value`` (the shape of an instant query's result)."""
    registry = CollectorRegistry()
    registry.register(BatchingCollector([TARGET], fetch=lambda _t, _s: snap))
    samples = [s for family in registry.collect() for s in family.samples]
    results = {}
    for column, query in gpu.QUERIES.items():
        match = re.fullmatch(r"max by \(target, gpu_uuid\) \((\w+)\)", query)
        assert match, query
        rows = [
            {"target": s.labels["target"], "gpu_uuid": s.labels["gpu_uuid"], "value": s.value}
            for s in samples
            if s.name == match.group(1)
        ]
        results[column] = pd.DataFrame(rows)
    return results


def test_gpu_frame_from_the_exporter_on_the_docs_fixture() -> None:
    frame = gpu.gpu_frame(instant_results(with_gpus()))
    assert list(frame["gpu_uuid"]) == [GPU_A, GPU_B]
    a = frame.iloc[0]
    assert a["target"] == TARGET.url
    assert a["utilization"] == 0.75
    assert a["memory_used_ratio"] == pytest.approx(37688705024 / 150754820096)
    assert frame.iloc[1]["memory_used_ratio"] == pytest.approx(1073741824 / 150754820096)


def test_gpu_figure_shows_percentages_per_gpu() -> None:
    fig = gpu.render_gpu(gpu.gpu_frame(instant_results(with_gpus())))
    assert fig is not None
    utilization, memory = fig.data
    assert list(utilization.y) == [75.0, 12.5]
    assert memory.y[0] == pytest.approx(25.0)
    assert list(utilization.x) == [GPU_A[:12], GPU_B[:12]]


@pytest.mark.parametrize("moment", ["rest", "after_load"])
def test_no_gpu_gives_the_message_not_an_empty_chart(moment: str) -> None:
    frame = gpu.gpu_frame(instant_results(snapshot(moment)))
    assert frame.empty
    assert gpu.render_gpu(frame) is None
    assert gpu.NO_GPU.startswith("No GPU on this server")


def test_a_gpu_without_memory_gauges_keeps_its_utilisation() -> None:
    results = {
        "utilization": pd.DataFrame([{"target": "t", "gpu_uuid": "GPU-1", "value": 0.5}]),
        "memory_used_bytes": pd.DataFrame(),
        # A total of 0 (a broken reading) must not divide.
        "memory_total_bytes": pd.DataFrame([{"target": "t", "gpu_uuid": "GPU-1", "value": 0.0}]),
    }
    frame = gpu.gpu_frame(results)
    assert frame.iloc[0]["utilization"] == 0.5
    assert math.isnan(frame.iloc[0]["memory_used_ratio"])
    assert gpu.render_gpu(frame) is not None
