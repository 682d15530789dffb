"""Each endpoint on its own: real captures (tests/exporter/data) with one endpoint taken away.

A missing or refused /metrics, a statistics API that answers 403, a repository index or a
model config that is restricted each take away only the series read from that endpoint;
the batch-size distribution needs only the statistics API and the model config.
triton_batching_endpoint_up / _info say which endpoint is down, why, and where it is read.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
from prometheus_client import CollectorRegistry

from exporter.collector import BatchingCollector
from exporter.scrape import Snapshot
from exporter.targets import Target
from stacksettings import free_ports
from tests.exporter.replay import Reply, captured_replies, replay_server, snapshot

URL = "http://127.0.0.1:18000"
TARGET = Target(URL, "http://127.0.0.1:18002/metrics")
MODEL = {"target": URL, "model": "batch_add_model", "version": "1"}
# Read off tests/exporter/data/after_load/stats.json: batch_add_model's batch_stats.
DISTRIBUTION = {"1": 1234.0, "2": 913.0, "3": 41.0, "4": 25.0}

# The series each endpoint alone gives (besides endpoint_up/_info).
FROM_METRICS = {
    "triton_batching_pending_requests",
    "triton_batching_request_failures_by_reason_total",
    "triton_batching_response_cache_configured",
    "triton_batching_cache_hits_total",
    "triton_batching_cache_misses_total",
}
FROM_REPOSITORY = {"triton_batching_model_ready"}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(snap: Snapshot, target: Target = TARGET) -> Samples:
    registry = CollectorRegistry()
    registry.register(BatchingCollector([target], fetch=lambda _t, _s: snap))
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name != "triton_batching_scrape_duration_seconds"
        and s.name != "triton_batching_data_age_seconds"
    }


def without(moment: str, **down: str) -> Snapshot:
    """The capture with the endpoints in ``down`` taken away, as the fetcher leaves them."""
    snap = snapshot(moment)
    return dataclasses.replace(
        snap,
        down=down,
        metrics_text="" if "metrics" in down else snap.metrics_text,
        stats=None if "statistics" in down else snap.stats,
        index=None if "repository" in down else snap.index,
        configs={} if {"statistics", "config"} & down.keys() else snap.configs,
    )


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


def endpoint(samples: Samples, name: str) -> float | None:
    return samples.get(("triton_batching_endpoint_up", (("endpoint", name), ("target", URL))), None)


def distribution(samples: Samples) -> dict[str, float]:
    return {
        dict(labels)["batch_size"]: v
        for (name, labels), v in samples.items()
        if name == "triton_batching_batch_executions_total"
        and dict(labels)["model"] == "batch_add_model"
    }


def info(samples: Samples) -> dict[str, dict[str, str]]:
    return {
        dict(labels)["endpoint"]: dict(labels)
        for (name, labels), _ in samples.items()
        if name == "triton_batching_endpoint_info"
    }


def test_every_endpoint_up_names_the_url_it_is_read_from() -> None:
    samples = scrape(snapshot("after_load"))
    assert {e: endpoint(samples, e) for e in ("metrics", "statistics", "repository", "config")} == {
        "metrics": 1.0,
        "statistics": 1.0,
        "repository": 1.0,
        "config": 1.0,
    }
    assert {e: (i["url"], i["reason"]) for e, i in info(samples).items()} == {
        "metrics": ("http://127.0.0.1:18002/metrics", ""),
        "statistics": (f"{URL}/v2/models/stats", ""),
        "repository": (f"{URL}/v2/repository/index", ""),
        "config": (f"{URL}/v2/models/MODEL/config", ""),
    }
    assert distribution(samples) == DISTRIBUTION


@pytest.mark.parametrize("moment", ["rest", "load", "after_load", "restarted"])
def test_without_metrics_only_the_series_from_metrics_go(moment: str) -> None:
    full = scrape(snapshot(moment))
    part = scrape(without(moment, metrics="connection refused"))
    assert part[("triton_batching_target_up", (("target", URL),))] == 1
    assert endpoint(part, "metrics") == 0
    assert endpoint(part, "statistics") == 1
    assert info(part)["metrics"]["reason"] == "connection refused"
    gone = names(full) - names(part)
    assert gone and gone <= FROM_METRICS, gone
    # Everything else is there, with the same values.
    kept = {k: v for k, v in full.items() if k[0] not in FROM_METRICS and "endpoint" not in k[0]}
    assert {k: part[k] for k in kept} == kept


def test_without_metrics_the_distribution_keeps_flowing() -> None:
    samples = scrape(without("after_load", metrics="HTTP 404"))
    assert distribution(samples) == DISTRIBUTION
    assert samples[("triton_batching_average_batch_size", tuple(sorted(MODEL.items())))] == (
        pytest.approx(3283 / 2213)
    )
    assert ("triton_batching_pending_requests", tuple(sorted(MODEL.items()))) not in samples


def test_a_restricted_repository_takes_away_only_the_model_states() -> None:
    full = scrape(snapshot("after_load"))
    part = scrape(without("after_load", repository="HTTP 403"))
    assert endpoint(part, "repository") == 0
    assert names(full) - names(part) == FROM_REPOSITORY
    assert distribution(part) == DISTRIBUTION


def test_a_restricted_config_takes_away_the_distribution_and_keeps_the_counts() -> None:
    """Without its config a model may be an ensemble (no batches of its own): its batch
    series and ratios need the config, its request counts and times do not."""
    part = scrape(without("after_load", config="HTTP 403"))
    assert endpoint(part, "config") == 0
    assert distribution(part) == {}
    labels = tuple(sorted(MODEL.items()))
    assert part[("triton_batching_requests_success_total", labels)] == 3283
    assert part[("triton_batching_queue_seconds_total", labels)] == 2.232996373
    assert ("triton_batching_max_batch_size", labels) not in part
    assert ("triton_batching_executions_total", labels) not in part
    assert ("triton_batching_pending_requests", labels) in part


def test_a_forbidden_statistics_api_keeps_what_metrics_and_the_repository_give() -> None:
    part = scrape(without("after_load", statistics="HTTP 403"))
    assert endpoint(part, "statistics") == 0
    assert endpoint(part, "metrics") == 1
    assert "config" not in info(part)  # asked only for the models the statistics list
    labels = tuple(sorted(MODEL.items()))
    assert part[("triton_batching_pending_requests", labels)] == 0
    assert part[("triton_batching_model_ready", labels)] == 1
    assert distribution(part) == {}
    assert ("triton_batching_requests_success_total", labels) not in part


# Over real HTTP: the real fetcher sorts each failure to its endpoint.


def registry_for(target: Target) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(BatchingCollector([target], timeout_s=2.0))
    return registry


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_a_refused_metrics_port_is_that_endpoint_down_over_http(
    caplog: pytest.LogCaptureFixture,
) -> None:
    (dead,) = free_ports(1)
    with replay_server(captured_replies("after_load")) as server:
        target = Target(server.target.url, f"http://127.0.0.1:{dead}/metrics")
        registry = registry_for(target)
        with caplog.at_level(logging.WARNING, logger="exporter.scrape"):
            for _ in range(3):
                assert value(registry, "triton_batching_target_up", target=target.url) == 1
        up = {"target": target.url, "endpoint": "metrics"}
        assert value(registry, "triton_batching_endpoint_up", **up) == 0
        reason = {**up, "url": target.metrics_url, "reason": "connection refused"}
        assert value(registry, "triton_batching_endpoint_info", **reason) == 1
        labels = {"target": target.url, "model": "batch_add_model", "version": "1"}
        sizes = {
            size: value(
                registry, "triton_batching_batch_executions_total", **labels, batch_size=size
            )
            for size in DISTRIBUTION
        }
        assert sizes == DISTRIBUTION
        assert value(registry, "triton_batching_pending_requests", **labels) is None
        # Logged once when it went down, not once per read.
        lines = [r.getMessage() for r in caplog.records if target.url in r.getMessage()]
        assert len(lines) == 1 and "--triton-metrics-url" in lines[0], lines


@pytest.mark.parametrize(
    ("path", "name"),
    [
        (("GET", "/metrics"), "metrics"),
        (("GET", "/v2/models/stats"), "statistics"),
        (("POST", "/v2/repository/index"), "repository"),
        (("GET", "/v2/models/batch_add_model/config"), "config"),
    ],
)
def test_a_403_is_that_endpoint_down_and_the_target_read(path: tuple[str, str], name: str) -> None:
    replies = {**captured_replies("after_load"), path: Reply(403, b'{"error":"restricted"}')}
    with replay_server(replies) as server:
        registry = registry_for(server.target)
        url = server.target.url
        assert value(registry, "triton_batching_target_up", target=url) == 1
        ups = {
            e: value(registry, "triton_batching_endpoint_up", target=url, endpoint=e)
            for e in ("metrics", "statistics", "repository", "config")
        }
        if name == "statistics":  # no model listed: no config asked
            assert ups == {"metrics": 1, "statistics": 0, "repository": 1, "config": None}
        else:
            assert ups == {e: 0.0 if e == name else 1.0 for e in ups}
        labels = {"target": url, "model": "batch_add_model", "version": "1"}
        executions = value(
            registry, "triton_batching_batch_executions_total", **labels, batch_size="2"
        )
        assert executions == (None if name in ("statistics", "config") else 913)


def test_an_endpoint_that_answers_again_is_up_again() -> None:
    with replay_server(captured_replies("after_load")) as server:
        registry = registry_for(server.target)
        url = server.target.url
        metrics = ("GET", "/metrics")
        answer = server.replies[metrics]
        server.replies[metrics] = Reply(404, b"not found", "text/plain")
        up = {"target": url, "endpoint": "metrics"}
        assert value(registry, "triton_batching_endpoint_up", **up) == 0
        server.replies[metrics] = answer
        assert value(registry, "triton_batching_endpoint_up", **up) == 1


def test_a_config_that_answers_too_late_is_that_endpoint_down_and_the_target_read() -> None:
    """A server of hundreds of models answers every config a first read asks for, but not all
    within the read's time budget (the fleet of 10 x 100 stand-ins did so at start): that is
    the config endpoint late, not the server down, which would page TritonDown. The models
    whose config came keep every series; the next read asks again for the others."""
    late = "/v2/models/batch_add_model/config"
    with replay_server(captured_replies("after_load"), hang={late}) as server:
        registry = CollectorRegistry()
        registry.register(BatchingCollector([server.target], timeout_s=0.5))
        url = server.target.url
        unbatched = (("model", "add_unbatched"), ("target", url), ("version", "1"))
        batched = (("model", "batch_add_model"), ("target", url), ("version", "1"))
        config = (("endpoint", "config"), ("target", url))
        read = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect()
            for s in family.samples
        }
        assert read[("triton_batching_target_up", (("target", url),))] == 1
        assert read[("triton_batching_endpoint_up", config)] == 0
        why = [dict(k[1])["reason"] for k in read if k[0] == "triton_batching_endpoint_info"]
        assert sorted(why) == ["", "", "", "timed out"], why
        assert read[("triton_batching_max_batch_size", unbatched)] == 4
        assert ("triton_batching_max_batch_size", batched) not in read
        assert read[("triton_batching_requests_success_total", batched)] == 3283
        server.hang.clear()
        assert value(registry, "triton_batching_endpoint_up", target=url, endpoint="config") == 1
        assert value(registry, "triton_batching_max_batch_size", **dict(batched)) == 4
