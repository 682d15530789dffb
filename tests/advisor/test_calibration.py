"""The closed-loop model, calibrated on this project's Triton, against the issue's measured case.

perf_analyzer on 2 cores (the issue): at concurrency 8, max_batch_size 64 + 1,000 us
and no preferred sizes serves fewer inferences/s than max_batch_size 4 + preferred
[2, 4] (4,529 against 8,614): 8 clients can never fill 64, so every batch waits the
full delay. At concurrency 32 the order flips (10,746 against 8,558): big batches
save per-execution CPU that the 2 cores need.

The model's costs come from ``data/calibration.json``, a capture taken by
``bench/advisor_calibrate.py`` on this machine: service times per batch size from
the statistics API, CPU per request from the CPU seconds of the client, tritonserver
and its stubs. Nothing here is tuned to the issue's figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.calibrate import CalibrationRun, front_end_cost_s, load_capture
from advisor.config import BatcherConfig
from advisor.model import ClosedLoop
from advisor.predict import predict

DATA = Path(__file__).parent / "data" / "calibration.json"
BIG = BatcherConfig(64, (), 1000)
SMALL = BatcherConfig(4, (2, 4), 500)


def throughput(config: BatcherConfig, concurrency: int) -> float:
    service, cpu = load_capture(DATA).calibrate()
    p = predict(config, ClosedLoop(concurrency), service, cpu, requests=8000, with_limit=False)
    return p.throughput_per_s


def test_calibrated_costs_are_physical() -> None:
    service, cpu = load_capture(DATA).calibrate()
    assert cpu.cores == 2
    assert 0 < service.base_s < 5e-3
    assert 0 < cpu.request_s < 1e-3
    assert cpu.timer_slack_s >= 0 and cpu.request_latency_s >= 0


def test_concurrency_8_prefers_small_batches_sent_early() -> None:
    assert throughput(BIG, 8) < throughput(SMALL, 8)


def test_concurrency_32_prefers_big_batches() -> None:
    assert throughput(BIG, 32) > throughput(SMALL, 32)


def test_at_concurrency_8_big_batches_wait_the_whole_delay() -> None:
    service, cpu = load_capture(DATA).calibrate()
    p = predict(BIG, ClosedLoop(8), service, cpu, requests=8000, with_limit=False)
    assert p.mean_batch_size <= 8
    assert p.queue_delay_p50_s >= BIG.delay_s * 0.5


def test_the_capture_itself_shows_the_crossover() -> None:
    """What perf_analyzer measured on this machine when the capture was taken."""
    runs = load_capture(DATA).crossover
    measured = {(name, r.concurrency): r.infer_per_s for name, rs in runs.items() for r in rs}
    assert measured["max64_delay1000", 8] < measured["max4_pref2_4", 8]
    assert measured["max64_delay1000", 32] > measured["max4_pref2_4", 32]


def test_front_end_cost_is_cpu_left_after_executions() -> None:
    run = load_capture(DATA).service_runs[0]
    service, _ = load_capture(DATA).calibrate()
    executions = sum(n * service.time_s(s) for s, n in run.delta.executions_by_size().items())
    expected = (run.cpu_s - executions) / run.delta.inference_count
    assert front_end_cost_s(run, service) == pytest.approx(max(expected, 0.0))


def test_a_run_without_requests_cannot_calibrate() -> None:
    run = load_capture(DATA).service_runs[0]
    empty = CalibrationRun(1, run.config, 1.0, run.delta.minus(run.delta), 0.0, 0.0)
    service, _ = load_capture(DATA).calibrate()
    with pytest.raises(ValueError, match="no requests"):
        front_end_cost_s(empty, service)


def test_not_a_capture(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"cores": 2}')
    with pytest.raises(ValueError, match="not a calibration capture"):
        load_capture(bad)
    with pytest.raises(ValueError, match="cannot read"):
        load_capture(tmp_path / "missing.json")


def test_predicted_throughput_tracks_the_recorded_runs() -> None:
    """The crossover runs were not used for calibration: they check the model.

    Recorded with perf_analyzer on this machine while other processes used under
    1 core (see "other_cores" in the capture). Within 20 % each.
    """
    capture = load_capture(DATA)
    service, cpu = capture.calibrate()
    for runs in capture.crossover.values():
        for run in runs:
            p = predict(
                run.config, ClosedLoop(run.concurrency), service, cpu, 8000, with_limit=False
            )
            assert p.throughput_per_s == pytest.approx(run.infer_per_s, rel=0.20), (
                run.config.describe(),
                run.concurrency,
            )
