"""The collector on real captures from this project's Triton (tests/exporter/data/).

Expected numbers are read off the captured JSON by hand; the data were taken by
tests/exporter/capture_data.py with three models: batch_add_model (max 4,
preferred [2, 4], 500 us), add_unbatched (max 4, no dynamic batching) and
add_max_batch_0 (max_batch_size 0).
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporter.collector import BatchingCollector
from exporter.scrape import Snapshot
from exporter.targets import Target
from tests.exporter.replay import DATA, snapshot

URL = "http://127.0.0.1:8000"
TARGET = Target(URL, "http://127.0.0.1:8002/metrics")


def registry_for(*moments: str) -> CollectorRegistry:
    """A registry whose successive scrapes see the given moments in turn, then the last one.

    (get_sample_value runs a whole scrape each time it is called.)
    """
    snapshots = [snapshot(m) for m in moments]

    def fetch(_target: Target, _timeout_s: float) -> Snapshot:
        return snapshots.pop(0) if len(snapshots) > 1 else snapshots[0]

    registry = CollectorRegistry()
    registry.register(BatchingCollector([TARGET], fetch=fetch))
    return registry


def value(registry: CollectorRegistry, name: str, model: str, **labels: str) -> float | None:
    return registry.get_sample_value(
        name, {"target": URL, "model": model, "version": "1", **labels}
    )


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
    }


def test_counters_after_load_are_triton_statistics_in_base_units() -> None:
    registry = registry_for("after_load")
    m = "batch_add_model"
    assert value(registry, "triton_batching_requests_success_total", m) == 3283
    assert value(registry, "triton_batching_requests_failure_total", m) == 0
    assert value(registry, "triton_batching_inferences_total", m) == 3283
    assert value(registry, "triton_batching_executions_total", m) == 2213
    assert value(registry, "triton_batching_queue_seconds_total", m) == 2.232996373
    assert value(registry, "triton_batching_compute_input_seconds_total", m) == 0.059287659
    assert value(registry, "triton_batching_compute_infer_seconds_total", m) == 2.817963593
    assert value(registry, "triton_batching_compute_output_seconds_total", m) == 0.16775419
    assert value(registry, "triton_batching_pending_requests", m) == 0
    assert registry.get_sample_value("triton_batching_target_up", {"target": URL}) == 1
    assert registry.get_sample_value("triton_batching_server_ready", {"target": URL}) == 1


def test_batch_size_distribution_after_load() -> None:
    registry = registry_for("after_load")
    m = "batch_add_model"
    executions = {
        size: value(registry, "triton_batching_batch_executions_total", m, batch_size=str(size))
        for size in range(1, 6)
    }
    assert executions == {1: 1234, 2: 913, 3: 41, 4: 25, 5: None}
    assert sum(n for n in executions.values() if n) == 2213  # = execution_count
    assert sum(size * n for size, n in executions.items() if n) == 3283  # = inference_count
    seconds = value(
        registry, "triton_batching_batch_compute_infer_seconds_total", m, batch_size="2"
    )
    assert seconds == 0.795558233


def test_derived_gauges_after_load() -> None:
    registry = registry_for("after_load")
    m = "batch_add_model"
    assert value(registry, "triton_batching_average_batch_size", m) == 3283 / 2213
    assert value(registry, "triton_batching_efficiency_ratio", m) == 3283 / 2213 / 4
    assert value(registry, "triton_batching_preferred_hit_ratio", m) == (913 + 25) / 2213


def test_average_batch_size_agrees_with_tritons_own_metrics() -> None:
    """after_load was captured with no request in flight: both sources agree exactly."""
    registry = registry_for("after_load")
    families = {
        f.name: f
        for f in text_string_to_metric_families((DATA / "after_load/metrics.txt").read_text())
    }

    def nv(name: str, model: str) -> float:
        family = families[name]
        # The parser renames counter samples to <name>_total.
        return next(
            s.value
            for s in family.samples
            if s.name == f"{name}_total" and s.labels["model"] == model
        )

    for model in ("batch_add_model", "add_unbatched", "add_max_batch_0"):
        expected = nv("nv_inference_count", model) / nv("nv_inference_exec_count", model)
        assert value(registry, "triton_batching_average_batch_size", model) == expected


def test_config_gauges_of_the_batching_model() -> None:
    registry = registry_for("after_load")
    m = "batch_add_model"
    assert value(registry, "triton_batching_max_batch_size", m) == 4
    assert value(registry, "triton_batching_dynamic_batching_enabled", m) == 1
    assert value(registry, "triton_batching_preferred_batch_size", m, size="2") == 2
    assert value(registry, "triton_batching_preferred_batch_size", m, size="4") == 4
    assert value(registry, "triton_batching_preferred_batch_size", m, size="3") is None
    assert value(registry, "triton_batching_max_queue_delay_seconds", m) == 0.0005
    assert value(registry, "triton_batching_instances", m) == 1
    assert value(registry, "triton_batching_model_ready", m) == 1
    info = {
        "backend": "python",
        "platform": "",
        "preferred_batch_sizes": "2,4",
        "instance_kinds": "KIND_CPU",
    }
    assert value(registry, "triton_batching_model_config_info", m, **info) == 1


def test_model_without_dynamic_batching() -> None:
    registry = registry_for("after_load")
    m = "add_unbatched"
    assert value(registry, "triton_batching_dynamic_batching_enabled", m) == 0
    assert value(registry, "triton_batching_max_batch_size", m) == 4
    assert value(registry, "triton_batching_executions_total", m) == 2477
    assert value(registry, "triton_batching_batch_executions_total", m, batch_size="1") == 2477
    assert value(registry, "triton_batching_average_batch_size", m) == 1
    assert value(registry, "triton_batching_efficiency_ratio", m) == 0.25
    # No batcher: no queue delay, no preferred sizes, so no hit ratio either.
    assert value(registry, "triton_batching_max_queue_delay_seconds", m) is None
    assert value(registry, "triton_batching_preferred_hit_ratio", m) is None
    assert not [
        k
        for k in scrape(registry)
        if k[0] == "triton_batching_preferred_batch_size" and ("model", m) in k[1]
    ]


def test_model_with_max_batch_size_0() -> None:
    registry = registry_for("after_load")
    m = "add_max_batch_0"
    assert value(registry, "triton_batching_max_batch_size", m) == 0
    assert value(registry, "triton_batching_dynamic_batching_enabled", m) == 0
    assert value(registry, "triton_batching_executions_total", m) == 2268
    assert value(registry, "triton_batching_batch_executions_total", m, batch_size="1") == 2268
    assert value(registry, "triton_batching_average_batch_size", m) == 1
    # Efficiency would divide by max_batch_size 0: no series, not 0 or infinity.
    assert value(registry, "triton_batching_efficiency_ratio", m) is None
    assert value(registry, "triton_batching_preferred_hit_ratio", m) is None
    assert value(registry, "triton_batching_max_queue_delay_seconds", m) is None


def test_under_load_pending_requests_and_distribution() -> None:
    registry = registry_for("load")
    m = "batch_add_model"
    assert value(registry, "triton_batching_pending_requests", m) == 1
    assert value(registry, "triton_batching_pending_requests", "add_unbatched") == 1
    assert value(registry, "triton_batching_pending_requests", "add_max_batch_0") == 0
    sizes = {
        size: value(registry, "triton_batching_batch_executions_total", m, batch_size=str(size))
        for size in range(1, 5)
    }
    assert sizes == {1: 939, 2: 693, 3: 30, 4: 23}
    assert value(registry, "triton_batching_executions_total", m) == 1685
    assert value(registry, "triton_batching_inferences_total", m) == 2507
    assert value(registry, "triton_batching_preferred_hit_ratio", m) == (693 + 23) / 1685


def test_at_rest_counters_are_zero_and_ratios_absent() -> None:
    registry = registry_for("rest")
    for m in ("batch_add_model", "add_unbatched", "add_max_batch_0"):
        # Zeros Triton reported, not invented ones.
        assert value(registry, "triton_batching_executions_total", m) == 0
        assert value(registry, "triton_batching_requests_success_total", m) == 0
        assert value(registry, "triton_batching_model_ready", m) == 1
        for ratio in (
            "triton_batching_average_batch_size",
            "triton_batching_efficiency_ratio",
            "triton_batching_preferred_hit_ratio",
        ):
            assert value(registry, ratio, m) is None, (ratio, m)
    names = {name for name, _ in scrape(registry)}
    assert "triton_batching_batch_executions_total" not in names


def test_counter_reset_between_two_scrapes() -> None:
    """Triton restarted between scrapes: values follow it down, nothing negative or huge."""
    registry = registry_for("after_load", "restarted")
    first = scrape(registry)
    second = scrape(registry)
    m = "batch_add_model"
    key = ("triton_batching_executions_total", (("model", m), ("target", URL), ("version", "1")))
    assert (first[key], second[key]) == (2213, 3)
    assert value_in(second, "triton_batching_batch_executions_total", m, batch_size="1") == 3
    # Sizes 2-4 were not formed since the restart: their series are gone, not zero or stale.
    assert value_in(second, "triton_batching_batch_executions_total", m, batch_size="2") is None
    assert value_in(second, "triton_batching_average_batch_size", m) == 1.0
    assert value_in(second, "triton_batching_efficiency_ratio", m) == 0.25
    assert value_in(second, "triton_batching_preferred_hit_ratio", m) == 0.0
    # Models without requests since the restart have no ratios at all.
    assert value_in(second, "triton_batching_average_batch_size", "add_unbatched") is None
    for (name, _labels), number in second.items():
        assert number >= 0, name
        if name.endswith("_ratio"):
            assert number <= 1, name
        if name == "triton_batching_average_batch_size":
            assert 1 <= number <= 4


def value_in(samples: dict, name: str, model: str, **labels: str) -> float | None:
    key = (name, tuple(sorted({"target": URL, "model": model, "version": "1", **labels}.items())))
    return samples.get(key)


def test_every_series_carries_model_version_and_target() -> None:
    registry = registry_for("after_load")
    for name, labels in scrape(registry):
        keys = dict(labels)
        assert keys.get("target") == URL, name
        if name not in (
            "triton_batching_target_up",
            "triton_batching_scrape_duration_seconds",
            "triton_batching_data_age_seconds",
            "triton_batching_server_ready",
            "triton_batching_response_cache_configured",
            "triton_batching_endpoint_up",
            "triton_batching_endpoint_info",
        ):
            assert {"model", "version"} <= keys.keys(), name


def test_registering_does_not_fetch() -> None:
    def fetch(_t: Target, _s: float) -> Snapshot:
        raise AssertionError("fetched at registration")

    CollectorRegistry().register(BatchingCollector([TARGET], fetch=fetch))


@pytest.mark.parametrize("moment", ["rest", "load", "after_load", "restarted"])
def test_every_capture_gives_target_up(moment: str) -> None:
    registry = registry_for(moment)
    assert registry.get_sample_value("triton_batching_target_up", {"target": URL}) == 1
