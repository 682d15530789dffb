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
from advisor.model import ClosedLoop, OpenLoop
from advisor.predict import SearchSpace, recommend

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
