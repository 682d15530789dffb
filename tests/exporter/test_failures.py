"""Targets that are down, slow or answer garbage, read over real HTTP by the real fetcher.

The replay server answers with real captures (tests/exporter/data/after_load)
except on the path a test breaks.
"""

from __future__ import annotations

import logging
import time

import pytest
from prometheus_client import CollectorRegistry

from exporter.collector import BatchingCollector
from exporter.targets import Target
from stacksettings import free_ports
from tests.exporter.replay import DATA, Reply, captured_replies, replay_server

LOGGER = "exporter.collector"


def up(registry: CollectorRegistry, target: Target) -> float | None:
    return registry.get_sample_value("triton_batching_target_up", {"target": target.url})


def executions(registry: CollectorRegistry, target: Target) -> float | None:
    labels = {"target": target.url, "model": "batch_add_model", "version": "1"}
    return registry.get_sample_value("triton_batching_executions_total", labels)


def collector_registry(targets: list[Target], timeout_s: float = 2.0) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(BatchingCollector(targets, timeout_s=timeout_s))
    return registry


def test_replayed_capture_over_http_is_read_like_the_recorded_one() -> None:
    with replay_server(captured_replies("after_load")) as server:
        registry = collector_registry([server.target])
        assert up(registry, server.target) == 1
        assert executions(registry, server.target) == 2213


STATS_JSON = (DATA / "after_load" / "stats.json").read_bytes()
GARBAGE = {
    "html_metrics": (
        ("GET", "/metrics"),
        Reply(200, b"<!DOCTYPE html>\n<html><body>Login</body></html>\n", "text/html"),
    ),
    "html_stats": (
        ("GET", "/v2/models/stats"),
        Reply(200, b"<html><body>Bad Gateway</body></html>", "text/html"),
    ),
    "truncated_stats_json": (
        ("GET", "/v2/models/stats"),
        Reply(200, STATS_JSON[: len(STATS_JSON) // 2]),
    ),
    "stats_500": (
        ("GET", "/v2/models/stats"),
        Reply(500, b'{"error":"internal"}'),
    ),
    "config_500": (
        ("GET", "/v2/models/batch_add_model/config"),
        Reply(500, b"Internal Server Error", "text/plain"),
    ),
    "index_not_a_list": (
        ("POST", "/v2/repository/index"),
        Reply(200, b'{"error":"no"}'),
    ),
    "metrics_of_another_program": (
        ("GET", "/metrics"),
        Reply(200, b"# TYPE go_goroutines gauge\ngo_goroutines 7\n", "text/plain"),
    ),
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_garbage_gives_up_0_and_one_log_line(case: str, caplog: pytest.LogCaptureFixture) -> None:
    path, reply = GARBAGE[case]
    with (
        replay_server({**captured_replies("after_load"), path: reply}) as bad,
        replay_server(captured_replies("after_load")) as good,
    ):
        registry = collector_registry([bad.target, good.target])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            families = list(registry.collect())
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples
        }
        assert samples[("triton_batching_target_up", (("target", bad.target.url),))] == 0
        assert samples[("triton_batching_target_up", (("target", good.target.url),))] == 1
        good_labels = (("model", "batch_add_model"), ("target", good.target.url), ("version", "1"))
        assert samples[("triton_batching_executions_total", good_labels)] == 2213
        # Nothing half-read from the bad target: only its up, and when and how long it was read.
        assert {name for name, labels in samples if ("target", bad.target.url) in labels} == {
            "triton_batching_target_up",
            "triton_batching_scrape_duration_seconds",
            "triton_batching_data_age_seconds",
        }
        # This test's targets only: another test's collector in this process is not its.
        ours = (bad.target.url, good.target.url)
        lines = [
            message
            for r in caplog.records
            if r.name == LOGGER and any(url in (message := r.getMessage()) for url in ours)
        ]
        assert len(lines) == 1, lines
        assert bad.target.url in lines[0] and "\n" not in lines[0]


def test_target_down_reports_0_and_the_others_still_report(
    caplog: pytest.LogCaptureFixture,
) -> None:
    (port,) = free_ports(1)  # nothing listens there once free_ports returns
    dead = Target(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/metrics")
    with replay_server(captured_replies("load")) as good:
        registry = collector_registry([dead, good.target])
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert up(registry, dead) == 0
        assert up(registry, good.target) == 1
        assert executions(registry, good.target) == 1685
        assert executions(registry, dead) is None
        assert any("refused" in r.getMessage() for r in caplog.records), caplog.text


def test_a_hanging_target_costs_only_its_own_timeout() -> None:
    """The hanging server would hold the scrape for 30 s; the collector gives up at its timeout."""
    with (
        replay_server(captured_replies("after_load"), hang={"/v2/models/stats"}) as slow,
        replay_server(captured_replies("after_load")) as good,
    ):
        registry = collector_registry([slow.target, good.target], timeout_s=0.5)
        start = time.monotonic()
        families = list(registry.collect())
        elapsed = time.monotonic() - start
        values = {(s.name, s.labels.get("target")): s.value for f in families for s in f.samples}
        assert values[("triton_batching_target_up", slow.target.url)] == 0
        assert values[("triton_batching_target_up", good.target.url)] == 1
        assert values[("triton_batching_executions_total", good.target.url)] == 2213
        # Far below the 30 s the server would hang: the scrape did not wait for it.
        assert elapsed < 10, elapsed


def test_a_recovered_target_reports_again() -> None:
    with replay_server(captured_replies("after_load")) as server:
        registry = collector_registry([server.target])
        server.replies[("GET", "/v2/models/stats")] = Reply(503, b"")
        assert up(registry, server.target) == 0
        server.replies.update(captured_replies("restarted"))
        assert up(registry, server.target) == 1
        assert executions(registry, server.target) == 3
