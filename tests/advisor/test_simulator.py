"""The simulator on cases whose answer is known without simulating."""

from __future__ import annotations

import pytest

from advisor.config import BatcherConfig
from advisor.model import ClosedLoop, CpuModel, OpenLoop, ServiceModel
from advisor.predict import predict
from advisor.simulator import Simulation, decide

FLAT_1MS = ServiceModel(0.001, 0.0)


def run(config: BatcherConfig, service: ServiceModel, traffic, cpu=None, requests=4000):
    return Simulation(config, service, traffic, cpu or CpuModel(), requests).run()


def test_arrivals_faster_than_service_fill_the_max_batch() -> None:
    # One request every 50 us, executions take 1 ms: 20 arrive per execution, so
    # after the first batch every batch is full (8), whatever the queue delay.
    for delay_us in (0, 500):
        result = run(BatcherConfig(8, (), delay_us), FLAT_1MS, OpenLoop(20_000, cv=0))
        assert set(result.batch_sizes) == {8}, result.batch_sizes
        assert result.throughput_per_s == pytest.approx(8 / 0.001, rel=0.01)
        assert result.backlog > 0  # overloaded: the queue keeps growing


def test_overload_is_reported_as_saturated() -> None:
    cores = CpuModel(cores=8)  # a measured cost model (free front end on 8 cores)
    p = predict(BatcherConfig(8, (), 0), OpenLoop(20_000, cv=0), FLAT_1MS, cores, requests=4000)
    assert p.saturated
    assert p.throughput_limit_per_s == pytest.approx(8000, rel=0.01)
    assert p.mean_batch_size == pytest.approx(8.0)


def test_without_a_cost_model_the_capacity_is_unknown() -> None:
    p = predict(BatcherConfig(8, (), 0), OpenLoop(2_000), FLAT_1MS, requests=2000)
    assert p.throughput_limit_per_s is None
    assert p.summary()["throughput_limit_per_s"] is None


def test_a_single_request_waits_exactly_the_max_queue_delay() -> None:
    # 10 requests/s, each served long before the next arrives: each waits alone
    # for the whole 500 us queue delay, then goes as a batch of 1.
    result = run(BatcherConfig(8, (), 500), FLAT_1MS, OpenLoop(10, cv=0), requests=200)
    assert set(result.batch_sizes) == {1}
    assert result.queue_delays_s
    for delay in result.queue_delays_s:
        assert delay == pytest.approx(500e-6, abs=1e-9)


def test_timer_slack_adds_to_the_wait() -> None:
    cpu = CpuModel(timer_slack_s=300e-6)
    result = run(BatcherConfig(8, (), 500), FLAT_1MS, OpenLoop(10, cv=0), cpu, requests=100)
    assert min(result.queue_delays_s) == pytest.approx(800e-6, abs=1e-9)


def test_preferred_sizes_cut_batches_early() -> None:
    # One request every 100 us, a 10 ms delay, fast executions. Without preferred
    # sizes a batch leaves only when full (8 requests, the first has waited 700 us);
    # with preferred [2] it leaves as soon as the second request arrives.
    fast = ServiceModel(10e-6, 0.0)
    traffic = OpenLoop(10_000, cv=0)
    full = run(BatcherConfig(8, (), 10_000), fast, traffic)
    early = run(BatcherConfig(8, (2,), 10_000), fast, traffic)
    assert set(full.batch_sizes) == {8}
    assert max(full.queue_delays_s) == pytest.approx(700e-6, abs=1e-9)
    assert set(early.batch_sizes) == {2}
    assert max(early.queue_delays_s) == pytest.approx(100e-6, abs=1e-9)


def test_largest_preferred_size_reached_is_sent() -> None:
    config = BatcherConfig(8, (2, 4), 500)
    assert decide(config, 3, oldest_s=0.0, now=0.0) == (2, None)
    assert decide(config, 5, oldest_s=0.0, now=0.0) == (4, None)
    assert decide(config, 11, oldest_s=0.0, now=0.0) == (4, None)


def test_the_spec_experiment_three_at_once_make_a_2_and_a_late_1() -> None:
    config = BatcherConfig(4, (2, 4), 500)
    assert decide(config, 3, oldest_s=0.0, now=0.0) == (2, None)
    size, wake = decide(config, 1, oldest_s=0.0, now=0.0)
    assert (size, wake) == (0, pytest.approx(500e-6))
    assert decide(config, 1, oldest_s=0.0, now=500e-6) == (1, None)


def test_past_the_delay_everything_up_to_the_max_goes() -> None:
    config = BatcherConfig(8, (2, 4), 500)
    assert decide(config, 7, oldest_s=0.0, now=600e-6) == (7, None)
    assert decide(config, 20, oldest_s=0.0, now=600e-6) == (8, None)


def test_without_preferred_sizes_only_a_full_batch_leaves_early() -> None:
    config = BatcherConfig(8, (), 1000)
    assert decide(config, 7, oldest_s=0.0, now=0.0) == (0, pytest.approx(1e-3))
    assert decide(config, 9, oldest_s=0.0, now=0.0) == (8, None)
    # A zero delay sends whatever is queued at once.
    assert decide(BatcherConfig(8, (), 0), 3, oldest_s=0.0, now=0.0) == (3, None)


def test_no_dynamic_batching_executes_one_request_at_a_time() -> None:
    config = BatcherConfig(8, (), 1000, dynamic_batching=False)
    result = run(config, FLAT_1MS, ClosedLoop(4))
    assert set(result.batch_sizes) == {1}


def test_instances_execute_in_parallel_without_cpu_limits() -> None:
    one = run(BatcherConfig(1, (), 0, instances=1), FLAT_1MS, ClosedLoop(8))
    two = run(BatcherConfig(1, (), 0, instances=2), FLAT_1MS, ClosedLoop(8))
    assert one.throughput_per_s == pytest.approx(1000, rel=0.01)
    assert two.throughput_per_s == pytest.approx(2000, rel=0.01)


def test_one_core_serialises_two_instances() -> None:
    # Two instances cannot run two executions at once on one core.
    cpu = CpuModel(cores=1)
    two = run(BatcherConfig(1, (), 0, instances=2), FLAT_1MS, ClosedLoop(8), cpu)
    assert two.throughput_per_s == pytest.approx(1000, rel=0.01)


def test_front_end_cost_caps_throughput_on_shared_cores() -> None:
    # 100 us of front-end CPU per request on 1 core caps any config at 10,000/s even
    # with free executions; with batches of 8 at 1 ms the execution costs 125 us per
    # request more: 1 / 225 us.
    cpu = CpuModel(cores=1, request_s=100e-6)
    result = run(BatcherConfig(8, (), 0), FLAT_1MS, ClosedLoop(64), cpu, requests=8000)
    assert result.mean_batch_size == pytest.approx(8.0)
    assert result.throughput_per_s == pytest.approx(1 / 225e-6, rel=0.02)


def test_same_seed_same_answer() -> None:
    config = BatcherConfig(8, (4,), 300)
    a = run(config, FLAT_1MS, OpenLoop(3000, cv=1.5))
    b = run(config, FLAT_1MS, OpenLoop(3000, cv=1.5))
    assert a.batch_sizes == b.batch_sizes


def test_bad_models_are_refused() -> None:
    with pytest.raises(ValueError, match="preferred batch size 8"):
        BatcherConfig(4, (8,), 0)
    with pytest.raises(ValueError, match="arrival rate"):
        OpenLoop(0)
    with pytest.raises(ValueError, match="concurrency"):
        ClosedLoop(0)
    with pytest.raises(ValueError, match="service time"):
        ServiceModel(0, 0)
