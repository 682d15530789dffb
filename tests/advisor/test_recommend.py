"""Recommendations on recorded telemetry: the spec's config under 32 closed-loop clients.

The telemetry is a real capture (``data/calibration.json``): the model config and
the statistics before and after perf_analyzer ran 32 clients against
max_batch_size 4 + preferred [2, 4] on this project's Triton, and the capture's
low-contention runs for the costs (as ``advise --calibration`` does).

Why not service times fitted from the 32-client window itself: on 2 saturated cores
an execution of 4 took 1.1 ms against 0.45 ms for 1, because big batches form exactly
when the CPU is busiest. That fit says batching saves nothing, and the simulator
would count the contention twice; ``test_a_saturated_window_hides_the_batching_gain``
keeps that limit visible.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.calibrate import load_capture
from advisor.config import BatcherConfig
from advisor.fit import fit_service_times
from advisor.model import ClosedLoop, CpuModel, OpenLoop, ServiceModel
from advisor.predict import SearchSpace, knobs_changed, recommend

DATA = Path(__file__).parent / "data" / "calibration.json"
SPACE = SearchSpace(max_batch_sizes=(4, 8, 16, 32), delays_us=(0, 500, 1000), instances=(1,))


def recorded():
    capture = load_capture(DATA)
    run = next(r for r in capture.crossover["max4_pref2_4"] if r.concurrency == 32)
    service, cpu = capture.calibrate()
    return run, service, cpu


def test_the_recorded_window_is_the_spec_config_under_32_clients() -> None:
    run, _, _ = recorded()
    assert run.config == BatcherConfig(4, (2, 4), 500)
    assert run.delta.inference_count > 1000
    assert set(run.delta.executions_by_size()) <= {1, 2, 3, 4}


def test_32_clients_are_served_better_by_bigger_batches() -> None:
    run, service, cpu = recorded()
    rec = recommend(run.config, ClosedLoop(32), service, 0.050, cpu, space=SPACE, requests=3000)
    assert rec.best is not None
    assert rec.best.config.max_batch_size > 4
    assert rec.best.throughput_per_s > rec.current.throughput_per_s
    assert rec.gain_ratio > 1.2
    assert rec.best.latency_p99_s <= 0.050


def test_cost_objective_lowers_cpu_per_inference() -> None:
    run, service, cpu = recorded()
    rec = recommend(run.config, ClosedLoop(32), service, 0.050, cpu, "cost", SPACE, requests=3000)
    assert rec.best is not None
    assert rec.best.cpu_s_per_inference < rec.current.cpu_s_per_inference
    assert rec.gain_ratio > 1.0


def test_an_impossible_bound_recommends_nothing() -> None:
    run, service, cpu = recorded()
    # No execution is shorter than the fitted base time: nothing meets a bound below it.
    rec = recommend(
        run.config,
        OpenLoop(500),
        service,
        service.time_s(1) / 2,
        cpu,
        space=SearchSpace(max_batch_sizes=(4, 8), delays_us=(0,), instances=(1,)),
        requests=2000,
    )
    assert rec.best is None
    assert rec.considered >= 3


def test_the_current_config_is_kept_when_nothing_beats_it() -> None:
    run, service, cpu = recorded()
    rec = recommend(
        run.config,
        ClosedLoop(32),
        service,
        0.050,
        cpu,
        space=SearchSpace(max_batch_sizes=(1, 2), delays_us=(0,), instances=(1,)),
        requests=3000,
    )
    assert rec.best is rec.current
    assert rec.gain_ratio == pytest.approx(1.0)


def test_a_saturated_window_hides_the_batching_gain() -> None:
    run, calibrated, _ = recorded()
    window = fit_service_times(run.delta)
    # Per request, a batch of 4 looks hardly cheaper than a batch of 1 in the busy
    # window, while the low-contention runs show most of the cost is per execution.
    saving_window = window.time_s(1) - window.time_s(4) / 4
    saving_calibrated = calibrated.time_s(1) - calibrated.time_s(4) / 4
    assert saving_window < saving_calibrated / 2


# ---- recommendations that matter -------------------------------------------------------------

FLAT = ServiceModel(0.001, 0.0001)  # 1 ms + 0.1 ms per request


def test_an_interval_over_seeds_and_keep_it_when_nothing_beats_the_noise() -> None:
    # Light traffic: every candidate serves it the same within the noise.
    current = BatcherConfig(4, (), 0)
    space = SearchSpace(max_batch_sizes=(4,), delays_us=(0, 100), instances=(1,))
    rec = recommend(current, OpenLoop(20), FLAT, 0.050, space=space, requests=1500, seeds=4)
    assert rec.objective == "latency"
    assert rec.current_interval is not None and len(rec.current_interval.runs) == 4
    assert rec.current_interval.low < rec.current_interval.high  # the seeds differ
    assert rec.keep and rec.best is rec.current and rec.gain_ratio == 1.0
    assert rec.noise_line().startswith("p99 latency ") and "over 4 seeds" in rec.noise_line()


def test_a_real_gain_is_said_in_the_users_terms() -> None:
    # One instance at 80 % utilisation: a second instance cuts the p99 latency, far
    # beyond the noise.
    current = BatcherConfig(1, (), 0, 1)
    space = SearchSpace(max_batch_sizes=(1,), delays_us=(0,), instances=(1, 2))
    rec = recommend(current, OpenLoop(730), FLAT, 0.100, space=space, requests=3000, seeds=3)
    assert not rec.keep and rec.best is not None and rec.best.config.instances == 2
    assert rec.best_interval is not None and rec.current_interval is not None
    assert rec.best_interval.beats(rec.current_interval)
    assert rec.gain_ratio > 1.5
    line = rec.gain_line()
    assert line.startswith("p99 latency ") and " ms -> " in line


def test_no_recommended_preferred_size_is_out_of_reach() -> None:
    # Sparse traffic never fills a batch of 32: [16, 32] would be dead config lines.
    current = BatcherConfig(4, (), 0)
    space = SearchSpace(max_batch_sizes=(32,), delays_us=(0, 500), instances=(1,))
    rec = recommend(current, OpenLoop(200), FLAT, 0.050, space=space, requests=1500, seeds=2)
    assert rec.unreachable > 0
    reached = [p for p in rec.candidates if p.config.preferred_batch_sizes]
    assert reached and all(p.unreached_preferred() for p in reached)
    if rec.best is not None:
        assert not rec.best.unreached_preferred()


def test_the_winner_changes_the_fewest_knobs_among_equivalents() -> None:
    # A second instance is the gain; a 25 us delay changes nothing beyond the noise at
    # 1.4 ms between arrivals: the recommendation leaves the delay as it was.
    current = BatcherConfig(4, (), 0, 1)
    space = SearchSpace(max_batch_sizes=(4,), delays_us=(0, 25), instances=(1, 2))
    rec = recommend(current, OpenLoop(730), FLAT, 0.100, space=space, requests=3000, seeds=3)
    assert rec.best is not None and not rec.keep
    assert rec.best.config.instances == 2
    assert rec.best.config.max_queue_delay_us == 0
    assert knobs_changed(rec.best.config, current) == 1


def test_headroom_needs_measured_costs() -> None:
    with pytest.raises(ValueError, match=r"capacity: unknown \(run with --probe\)"):
        recommend(BatcherConfig(4), OpenLoop(100), FLAT, 0.05, objective="headroom")


def test_the_instance_count_is_kept_unless_other_counts_are_asked_for() -> None:
    # The same overloaded instance as above: a second one would win, but the hand-offs
    # were measured with one, so by default only configs with one instance are tried.
    current = BatcherConfig(1, (), 0, 1)
    space = SearchSpace(max_batch_sizes=(1, 2), delays_us=(0,))
    assert space.instance_counts(current) == (1,)
    assert {c.instances for c in space.configs(current)} == {1}
    rec = recommend(current, OpenLoop(730), FLAT, 0.100, space=space, requests=1500, seeds=2)
    assert all(p.config.instances == 1 for p in rec.candidates)
    two = SearchSpace(max_batch_sizes=(1, 2), delays_us=(0,), instances=(1, 2))
    assert {c.instances for c in two.configs(current)} == {1, 2}


def test_a_search_past_its_budget_stops_and_says_so() -> None:
    """A budget of 0 s: no config of the space is simulated, the current one's runs are cut
    (never recommended), and the recommendation's note says what was left out."""
    current = BatcherConfig(4, (2, 4), 500)
    rec = recommend(current, OpenLoop(200), ServiceModel(0.001, 0.0002), 0.02, budget_s=0.0)
    assert rec.considered == 1 and rec.skipped > 10
    assert rec.best is None or rec.keep
    note = rec.cut_note()
    assert note is not None and note.startswith("the search stopped at its 0 s budget: ")
    assert f"{rec.skipped} configs of the space not simulated" in note
    whole = recommend(current, OpenLoop(200), ServiceModel(0.001, 0.0002), 0.02, budget_s=600)
    assert whole.cut_note() is None and whole.skipped == 0 and whole.considered > 10


@pytest.mark.parametrize("budget_s", [0.5, 2.0, 4.0])
def test_a_search_cut_anywhere_recommends_no_cut_run(budget_s: float) -> None:
    """Whichever phase the deadline falls in (the space, the finalists' other seeds), the
    search ends with a recommendation and its note, and never one whose runs were cut (a
    finalist cut to a throughput of 0 once divided the gain by zero)."""
    current = BatcherConfig(4, (), 0, dynamic_batching=False)
    cpu = CpuModel(cores=2, request_s=2e-4)
    service = ServiceModel(0.0028, 0.0002)
    rec = recommend(current, OpenLoop(0.07), service, 0.01, cpu=cpu, budget_s=budget_s)
    assert rec.cut_note() is not None
    assert rec.best is None or not rec.best.cut
    if rec.best_interval is not None:
        assert not any(p.cut for p in rec.best_interval.runs)


@pytest.mark.parametrize(
    ("objective", "traffic"),
    [("throughput", ClosedLoop(32)), ("headroom", OpenLoop(1500))],
)
def test_the_search_in_worker_processes_gives_the_same_recommendation(
    objective: str, traffic: ClosedLoop | OpenLoop
) -> None:
    """Every simulation is seeded: the configs, their figures and the pick are those of the
    search run in this process, whichever process ran each (headroom: each candidate that
    meets the bound simulated again for its throughput limit, in the worker)."""
    run, service, cpu = recorded()
    args = (run.config, traffic, service, 0.050, cpu, objective, SPACE)
    here = recommend(*args, requests=1500, seeds=2)
    pooled = recommend(*args, requests=1500, seeds=2, workers=2)
    assert pooled == here
    assert pooled.best is not None and pooled.considered == here.considered > 10
