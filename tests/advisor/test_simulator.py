"""The simulator on cases whose answer is known without simulating."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from advisor import simulator
from advisor.config import BatcherConfig
from advisor.model import ClosedLoop, CpuModel, OpenLoop, ServiceModel
from advisor.predict import predict
from advisor.simulator import TAKE_SHARE, Simulation, decide, get_dynamic_batch

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


def test_a_short_run_whose_arrivals_came_slow_is_not_saturated() -> None:
    """800 requests at 200/s (the autopilot's search in the tests): a run's draws come a
    few % off the rate. Saturation is judged against the rate the run was offered, so a
    config far from its capacity never reads saturated, and an overloaded one always does."""
    service, traffic = ServiceModel(0.005, 0.0001), OpenLoop(200.0, cv=1.04)
    light, heavy = BatcherConfig(10, (), 0), BatcherConfig(1, (), 0)
    slow = []
    for seed in range(1, 101):
        result = Simulation(light, service, traffic, CpuModel(), 800, seed=seed).run()
        assert result.offered_per_s is not None
        if result.throughput_per_s < 0.95 * traffic.rate_per_s:
            slow.append(seed)  # under 95 % of the traffic's rate, by the draws alone
            assert result.offered_per_s < 0.97 * traffic.rate_per_s, seed
        assert not predict(light, traffic, service, None, 800, seed, with_limit=False).saturated
    assert slow  # the case occurs in these seeds
    over = OpenLoop(400.0, cv=1.04)  # 5.1 ms per execution of one: about 196/s at most
    for seed in range(1, 21):
        assert predict(heavy, over, service, None, 800, seed, with_limit=False).saturated


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


def test_a_held_front_end_queues_arrivals_when_the_execution_ends() -> None:
    # 1 ms executions one at a time, 500 requests/s. Held from 100 us into every
    # execution, the requests that come later in it reach the queue when it ends: their
    # queue wait shrinks by what is left of it, while what the client waits stays.
    config, load = BatcherConfig(1, (), 0, 1), OpenLoop(500)
    held_cpu = CpuModel(hold_share=1.0, hold_onsets=(100e-6,))
    plain = run(config, FLAT_1MS, load, requests=6000)
    held = run(config, FLAT_1MS, load, held_cpu, requests=6000)
    plain_wait = sum(plain.queue_delays_s) / len(plain.queue_delays_s)
    held_wait = sum(held.queue_delays_s) / len(held.queue_delays_s)
    assert held_wait < 0.7 * plain_wait, (plain_wait, held_wait)
    assert quantile_of(held.latencies_s, 0.5) == pytest.approx(
        quantile_of(plain.latencies_s, 0.5), rel=0.1
    )


def test_a_held_front_end_keeps_a_free_instance_idle() -> None:
    # Two instances, each busy a quarter of the time: a request rarely waits. When every
    # execution holds the front end from its start, nothing reaches the second instance
    # until the first ends: the clients wait as for one instance (the queue wait, which
    # starts when a request reaches the queue, does not show it).
    config, load = BatcherConfig(1, (), 0, 2), OpenLoop(500)
    plain = run(config, FLAT_1MS, load, requests=6000)
    held = run(config, FLAT_1MS, load, CpuModel(hold_share=1.0, hold_onsets=(0.0,)), 6000)
    assert quantile_of(plain.latencies_s, 0.9) < 1.1e-3
    assert quantile_of(held.latencies_s, 0.9) > quantile_of(plain.latencies_s, 0.9) + 0.5e-3
    assert max(held.queue_delays_s) < 1.1e-3  # each waits at most one execution queued


def test_a_hold_needs_its_onsets_and_a_share_in_0_to_1() -> None:
    with pytest.raises(ValueError, match="hold_share must be in 0..1"):
        CpuModel(hold_share=1.5, hold_onsets=(0.0,))
    with pytest.raises(ValueError, match="hold_share needs hold_onsets"):
        CpuModel(hold_share=0.5)


def quantile_of(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def test_a_payload_sent_while_the_instance_is_busy_takes_no_later_arrival() -> None:
    # Triton 2.51 (GetDynamicBatch, Enqueue): a request every 600 us, 4 ms executions, a
    # 1 ms delay. The second batch is sent at 2.2 ms, when its oldest request's delay runs
    # out, with the 2 queued then; the 5 that come before the instance is free at 5 ms do
    # not wake the batcher (fewer than the next preferred size, 16) and wait for the next
    # batch. Forming batches only when an instance is free would send all 7 at once.
    result = Simulation(
        BatcherConfig(16, (), 1000),
        ServiceModel(0.004, 0.0),
        OpenLoop(1 / 600e-6, cv=0),
        CpuModel(),
        requests=9,
        warmup_fraction=0.0,
    ).run()
    assert result.batch_sizes[2] == 2 and 7 not in result.batch_sizes, result.batch_sizes


def test_without_a_delay_a_sent_payload_grows_until_an_instance_takes_it() -> None:
    # A request every 100 us, a 250 us hand-off to the idle instance, which takes the
    # payload half way (125 us): the first batch, sent with one request, takes the next one
    # (100 us) but not the one after (200 us), although that comes before it starts. The
    # following ones fill to 4 while they wait for the busy instance.
    def first_batch(dispatch_s: float) -> int:
        sim = Simulation(
            BatcherConfig(4, (), 0),
            FLAT_1MS,
            OpenLoop(10_000, cv=0),
            CpuModel(dispatch_s=dispatch_s),
            requests=40,
            warmup_fraction=0.0,
        )
        result = sim.run()
        assert set(result.batch_sizes) - {4} == {min(result.batch_sizes)}
        assert result.batch_sizes[min(result.batch_sizes)] == 1, result.batch_sizes
        return min(result.batch_sizes)

    assert TAKE_SHARE == 0.5
    assert first_batch(250e-6) == 2
    assert first_batch(150e-6) == 1  # taken at 75 us, before the second request


def test_the_batcher_decides_like_get_dynamic_batch() -> None:
    config = BatcherConfig(16, (), 1000)
    # a new payload, its oldest request not yet due: wait for it, woken by 16 queued
    d = get_dynamic_batch(config, 0, 3, oldest_s=0.0, now=0.0)
    assert (d.take, d.wake_at, d.next_preferred) == (0, pytest.approx(1e-3), 16)
    # due: all 3 go
    assert get_dynamic_batch(config, 0, 3, oldest_s=0.0, now=1e-3).take == 3
    # a payload sent short of a preferred size takes what is queued, whatever the delay
    d = get_dynamic_batch(config, 5, 1, oldest_s=0.0, now=0.0)
    assert d.take == 1 and d.next_preferred == 11
    # a full payload takes nothing more and is saturated
    d = get_dynamic_batch(config, 16, 2, oldest_s=0.0, now=0.0)
    assert d.take == 0 and d.saturated


def test_a_measured_overshoot_holds_the_hand_off_of_a_batch_that_leaves_on_its_delay() -> None:
    # Traces measure a delay's overshoot whole (timer lateness + the hand-off to a free
    # instance): drawn so, no dispatch is added on top of it; a preferred batch, which
    # leaves at once, still pays the dispatch.
    cpu = CpuModel(timer_slack_samples=(300e-6,), dispatch_s=70e-6)
    alone = run(BatcherConfig(8, (2,), 500), FLAT_1MS, OpenLoop(10, cv=0), cpu, requests=100)
    assert min(alone.queue_delays_s) == pytest.approx(800e-6, abs=1e-9)
    assert max(alone.queue_delays_s) == pytest.approx(800e-6, abs=1e-9)


def test_the_spread_outside_triton_reaches_the_latency_but_not_the_queue() -> None:
    """Each request draws one deviation around the median wait outside Triton, after its
    execution: latencies spread by exactly the draws (floored at no wait), queue waits
    and batches do not change."""
    config, traffic = BatcherConfig(8, (), 0), OpenLoop(10, cv=0)  # each request alone
    plain = CpuModel(request_latency_s=2e-3)
    spread = CpuModel(request_latency_s=2e-3, outside_spread=(-2e-3, 0.0, 3e-3))
    before = run(config, FLAT_1MS, traffic, plain, requests=300)
    after = run(config, FLAT_1MS, traffic, spread, requests=300)
    assert before.queue_delays_s == after.queue_delays_s
    assert before.batch_sizes == after.batch_sizes
    assert set(round(x * 1e6) for x in before.latencies_s) == {3000}  # 1 ms + 2 ms
    # The response half is 1 ms: -2 ms floors it at 0 (latency 2 ms), +3 ms makes 4 ms.
    assert set(round(x * 1e6) for x in after.latencies_s) == {2000, 3000, 6000}


def test_a_queue_lag_adds_to_every_queue_wait_and_forms_no_other_batch() -> None:
    """A lag the same for every request shifts what the batcher sees, not its choices: the
    same batches, each request's queue wait and latency longer by exactly the lag."""
    config, traffic = BatcherConfig(8, (), 0), OpenLoop(3000)  # batches of several
    plain = run(config, ServiceModel(500e-6, 50e-6), traffic, CpuModel(), requests=3000)
    lagged = run(
        config, ServiceModel(500e-6, 50e-6), traffic, CpuModel(queue_lag_s=1e-3), requests=3000
    )
    # Batches are counted from the warm-up's end on the clock: the lag moves a batch or two
    # across that edge, and nothing else.
    moved = (lagged.batch_sizes - plain.batch_sizes) + (plain.batch_sizes - lagged.batch_sizes)
    assert sum(moved.values()) <= 2 and max(plain.batch_sizes) > 1, moved
    for before, after in (
        (plain.queue_delays_s, lagged.queue_delays_s),
        (plain.latencies_s, lagged.latencies_s),
    ):
        longer_ns = {round((b - a) * 1e9) for a, b in zip(before, after, strict=True)}
        assert longer_ns == {1_000_000}


def test_the_answers_of_one_execution_share_its_spread_and_keep_their_clients_together() -> None:
    """Two closed-loop clients batched in pairs (preferred 2): the spread their execution
    shares sends them back together, so every batch stays a pair that leaves at once; the
    same draws per request part them, and a lone request waits for its delay."""
    config, traffic = BatcherConfig(2, (2,), 1000), ClosedLoop(2)
    draws = (-0.5e-3, 0.0, 0.5e-3)
    shared = CpuModel(request_latency_s=1e-3, outside_spread=draws)
    own = CpuModel(request_latency_s=1e-3, outside_own=draws)
    together = run(config, FLAT_1MS, traffic, shared, requests=1000)
    apart = run(config, FLAT_1MS, traffic, own, requests=1000)
    assert set(together.batch_sizes) == {2} and max(together.queue_delays_s) < 1e-9
    assert together.throughput_per_s > 1.2 * apart.throughput_per_s
    assert apart.batch_sizes[1] > 0.2 * apart.executions
    assert sum(apart.queue_delays_s) / len(apart.queue_delays_s) > 0.2e-3


def test_arrivals_are_drawn_as_runs_of_the_measured_gaps_at_the_traffics_rate() -> None:
    """Gaps of 10 and 1,990 us in turn (a pair every 2 ms), drawn at 500/s: they double
    (20 us), still inside a 100 us delay, so nearly every batch is a pair; runs of them
    keep the order, so pairs seldom run into longer clusters. Poisson arrivals at 500/s
    rarely pair within 100 us."""
    config, traffic = BatcherConfig(8, (), 100), OpenLoop(500)
    gaps = CpuModel(arrival_gaps=(10e-6, 1990e-6) * 200)
    clustered = run(config, FLAT_1MS, traffic, gaps, requests=4000)
    poisson = run(config, FLAT_1MS, traffic, requests=4000)
    assert clustered.mean_batch_size > 1.8
    # (a triple only where one run ends on a short gap and the next starts on one)
    assert clustered.batch_sizes[3] < 0.05 * clustered.executions
    assert set(clustered.batch_sizes) <= {1, 2, 3}
    assert poisson.mean_batch_size < 1.1
    assert clustered.throughput_per_s == pytest.approx(500, rel=0.05)


def test_a_share_of_arrivals_comes_with_the_one_before_at_the_traffics_rate() -> None:
    """A share of 0.3, no measured gaps: 40,000 sends at 2,000/s. The zero gaps are a
    binomial count, whose share has a standard deviation of sqrt(0.3 * 0.7 / 40,000) =
    0.0023: 0.01 is over 4 of them. The mean gap, of a mix of zeros and exponential gaps
    stretched by 1 / 0.7, has one of sqrt(2 / 0.7 - 1) / sqrt(40,000) = 0.7 % of its mean:
    3 % is over 4 of them."""
    config, traffic = BatcherConfig(8, (), 100), OpenLoop(2000)
    cpu = CpuModel(arrival_cluster_share=0.3)
    sim = Simulation(config, ServiceModel(100e-6, 10e-6), traffic, cpu, 40_000)
    clustered = simulator._Run(sim)
    result = clustered.run()
    sends = sorted(r.sent for r in clustered.finished)
    gaps = [b - a for a, b in itertools.pairwise(sends)]
    assert len(gaps) > 39_000
    assert sum(g == 0 for g in gaps) / len(gaps) == pytest.approx(0.3, abs=0.01)
    assert len(gaps) / (sends[-1] - sends[0]) == pytest.approx(2000, rel=0.03)
    assert result.offered_per_s == pytest.approx(2000, rel=0.03)
    # Arrivals that come together batch: the same traffic unclustered batches less.
    plain = Simulation(config, ServiceModel(100e-6, 10e-6), traffic, CpuModel(), 40_000).run()
    assert result.mean_batch_size > plain.mean_batch_size + 0.2


def test_no_share_of_clustered_arrivals_draws_as_before() -> None:
    """With no share, no random number is drawn for it: constant arrivals and no other
    spread leave the generator untouched, and a share of 0 given explicitly changes no
    figure."""
    config, traffic = BatcherConfig(8, (), 100), OpenLoop(2000, cv=0)
    sim = Simulation(config, FLAT_1MS, traffic, CpuModel(arrival_cluster_share=0.0), 2000)
    untouched = simulator._Run(sim)
    untouched.run()
    assert untouched.rng.getstate() == random.Random(sim.seed).getstate()
    clustered = simulator._Run(replace(sim, cpu=CpuModel(arrival_cluster_share=0.3)))
    clustered.run()
    assert clustered.rng.getstate() != random.Random(sim.seed).getstate()
    poisson = OpenLoop(3000, cv=1.5)
    given = run(config, FLAT_1MS, poisson, CpuModel(arrival_cluster_share=0.0, request_cv=1))
    default = run(config, FLAT_1MS, poisson, CpuModel(request_cv=1))
    assert given.batch_sizes == default.batch_sizes
    assert given.queue_delays_s == default.queue_delays_s
    assert given.latencies_s == default.latencies_s


def test_a_share_of_clustered_arrivals_is_in_0_to_1() -> None:
    for share in (-0.1, 1.0):
        with pytest.raises(ValueError, match=r"arrival_cluster_share must be in \[0, 1\)"):
            CpuModel(arrival_cluster_share=share)


def test_a_run_past_its_event_budget_is_cut_and_called_saturated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, traffic = BatcherConfig(8, (), 500), OpenLoop(100, cv=1)
    whole = predict(config, traffic, FLAT_1MS, requests=2000)
    assert not whole.saturated  # 100/s against 8,000/s: light load, every request answered
    monkeypatch.setattr(simulator, "MAX_EVENTS_PER_REQUEST", 1)
    result = Simulation(config, FLAT_1MS, traffic, requests=2000).run()
    assert result.cut and result.inferences < 2000
    assert predict(config, traffic, FLAT_1MS, requests=2000).saturated


def test_a_lone_request_leaves_at_its_delay_even_hours_into_a_run() -> None:
    # 0.05 requests/s: 4000 requests take about 22 simulated hours, each alone in the queue.
    # Late in the run the clock's low bits are coarser than the comparison's slack; the
    # deadline must still pass when its timer fires (the timer re-armed at the same instant
    # instead, until the run's event budget cut it).
    result = run(BatcherConfig(4, (2, 4), 500), FLAT_1MS, OpenLoop(0.05))
    assert not result.cut
    assert set(result.batch_sizes) == {1}
    assert max(result.queue_delays_s) == pytest.approx(0.0005, abs=1e-6)
    assert min(result.queue_delays_s) == pytest.approx(0.0005, abs=1e-6)
