"""Costs without a server: the cache, the fit to a measured throughput, the scratch config."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from advisor import costs
from advisor.config import BatcherConfig
from advisor.model import ClosedLoop, CpuModel, ServiceModel
from advisor.simulator import Simulation
from autopilot import verify
from observe.cpu import local_cores, local_server_pid

SERVICE = ServiceModel(0.0004, 0.00005)


def test_the_cache_keeps_a_calibration_per_server_model_and_version(tmp_path: Path) -> None:
    cache = costs.CalibrationCache(tmp_path / "sub" / "calibrations.json")
    assert cache.get("http://a:8000", "m", "2.51.0") is None
    made = costs.Calibration(2, 150e-6, "a probe", time.time(), 900, "http://a:8000", "m", "2.51.0")
    cache.put(made)
    cache.put(costs.Calibration(4, 90e-6, "other", time.time(), 10, "http://a:8000", "m", "2.52.0"))
    assert cache.get("http://a:8000/", "m", "2.51.0") == made
    assert cache.get("http://a:8000", "m", "2.52.0").cores == 4  # type: ignore[union-attr]
    assert cache.get("http://a:8000", "other", "2.51.0") is None
    assert "UTC" in made.describe() and "150 us CPU per request" in made.describe()


def test_writers_at_once_each_replace_the_file_whole(tmp_path: Path) -> None:
    """The dashboard and `advisor advise` may calibrate at the same moment: no writer fails
    and the file is always whole JSON."""
    cache = costs.CalibrationCache(tmp_path / "calibrations.json")

    def write(n: int) -> None:
        for i in range(40):
            server = f"http://w{n}:8000"
            cache.put(costs.Calibration(2, 1e-4, "t", time.time(), i, server, "m", "2.51.0"))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(8)))  # re-raises a writer's error
    assert isinstance(json.loads(cache.path.read_text()), dict)
    assert [p.name for p in tmp_path.iterdir()] == ["calibrations.json"]  # no leftovers


def test_an_unreadable_cache_is_an_empty_one(tmp_path: Path) -> None:
    path = tmp_path / "calibrations.json"
    path.write_text("not json")
    assert costs.CalibrationCache(path).get("http://a:8000", "m", "") is None
    path.write_text(json.dumps({costs.cache_key("http://a:8000", "m", ""): {"cores": 2}}))
    assert costs.CalibrationCache(path).get("http://a:8000", "m", "") is None


def test_the_fitted_cost_gives_the_measured_throughput_back() -> None:
    config = BatcherConfig(4, (2, 4), 500)
    truth = CpuModel(cores=2, request_s=200e-6, request_cv=1.0)
    measured = Simulation(config, SERVICE, ClosedLoop(8), truth, 4000, seed=1).run()
    fitted = costs.fit_request_cost(config, SERVICE, 8, measured.throughput_per_s, 2)
    assert fitted == pytest.approx(200e-6, rel=0.1)


def test_service_times_too_slow_for_the_measured_throughput_cannot_calibrate() -> None:
    with pytest.raises(ValueError, match="too slow to calibrate against"):
        costs.fit_request_cost(BatcherConfig(1), ServiceModel(0.01, 0), 1, 1000.0, 2)


def test_not_a_loopback_url_has_no_local_process() -> None:
    assert local_server_pid("http://192.0.2.1:8000") is None
    assert local_cores("http://192.0.2.1:8000") is None


def test_the_scratch_config_changes_only_the_batching_and_the_name() -> None:
    server = {
        "name": "m",
        "max_batch_size": 4,
        "input": [{"name": "X"}],
        "dynamic_batching": {"preferred_batch_size": [2, 4], "max_queue_delay_microseconds": 500},
        "instance_group": [{"name": "m", "kind": "KIND_CPU", "count": 1}],
    }
    out = verify.scratch_config(server, BatcherConfig(16, (8, 16), 2000, 2), "m__advisor_x")
    assert out["name"] == "m__advisor_x" and out["input"] == server["input"]
    assert out["max_batch_size"] == 16
    assert out["dynamic_batching"]["preferred_batch_size"] == [8, 16]
    assert out["dynamic_batching"]["max_queue_delay_microseconds"] == 2000
    assert out["instance_group"][0]["count"] == 2
    assert server["max_batch_size"] == 4  # the server's config is not changed
    off = verify.scratch_config(server, BatcherConfig(4, dynamic_batching=False), "m__advisor_y")
    assert "dynamic_batching" not in off
