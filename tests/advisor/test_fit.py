"""Fitting service times, traffic and configs from what Triton reports."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from advisor.config import BatcherConfig, from_model_config
from advisor.fit import (
    batch_times,
    fit_service_times,
    fit_traffic,
    received_counts,
    saturated_traffic,
    saturation,
)
from advisor.inputs import fit_window, metrics_url_of
from advisor.model import OpenLoop
from observe.window import Window, from_statistics
from tritonapi.stats import Duration, ModelStats, parse_statistics

DATA = Path(__file__).parent / "data"


def capture() -> dict:
    return json.loads((DATA / "calibration.json").read_text())


def test_points_on_a_line_give_the_line_back() -> None:
    # 400 us per execution + 50 us per request, 10 executions of each size.
    data = {s: (10, 10 * (400e-6 + 50e-6 * s)) for s in (1, 2, 4, 8)}
    service = fit_service_times(data)
    assert service.base_s == pytest.approx(400e-6)
    assert service.per_item_s == pytest.approx(50e-6)


def test_sizes_weigh_by_their_executions() -> None:
    # A size seen once with a wild time hardly moves a fit made of 1,000 executions.
    data = {1: (500, 500 * 450e-6), 2: (500, 500 * 500e-6), 8: (1, 0.05)}
    service = fit_service_times(data)
    assert service.time_s(1) == pytest.approx(450e-6, rel=0.2)


def test_one_size_gives_a_flat_cost() -> None:
    service = fit_service_times({4: (10, 10e-3)})
    assert (service.base_s, service.per_item_s) == (pytest.approx(1e-3), 0.0)


def test_no_executions_is_an_error() -> None:
    with pytest.raises(ValueError, match="no executions"):
        fit_service_times({})


def test_fit_from_a_real_statistics_delta() -> None:
    run = capture()["service_runs"][2]  # concurrency 4, max_batch_size 64, 2 ms delay
    delta = parse_statistics(run["stats_after"])[0].minus(parse_statistics(run["stats_before"])[0])
    times = batch_times(delta)
    assert sum(n for n, _ in times.values()) == delta.execution_count
    service = fit_service_times(delta)
    # Every per-size mean lies within the fit's range over the observed sizes.
    low, high = service.time_s(min(times)), service.time_s(max(times))
    assert service.base_s > 0
    assert low <= high
    mean = sum(t for _, t in times.values()) / delta.execution_count
    assert low <= mean <= high or mean == pytest.approx(low, rel=0.05)


def test_triton_normalises_missing_preferred_sizes_to_the_max() -> None:
    # The captured config of a model written without preferred sizes.
    config_json = capture()["service_config"]
    assert config_json["dynamic_batching"]["preferred_batch_size"] == [64]
    config = from_model_config(config_json)
    assert config == BatcherConfig(64, (), 2000, 1)
    assert config.effective_preferred == (64,)


def test_config_with_preferred_sizes() -> None:
    config = from_model_config(capture()["crossover"]["max4_pref2_4"]["config"])
    assert config == BatcherConfig(4, (2, 4), 500, 1)


def test_not_a_model_config() -> None:
    with pytest.raises(ValueError, match="not a Triton model config"):
        from_model_config({"error": "Request for unknown model"})


def test_constant_traffic_has_no_burstiness() -> None:
    samples = [(t * 0.5, 100.0 * t) for t in range(21)]
    traffic = fit_traffic(samples)
    assert traffic.rate_per_s == pytest.approx(200.0)
    assert traffic.cv == pytest.approx(0.0)


def test_constant_traffic_read_at_uneven_steps_has_no_burstiness() -> None:
    # 2,000/s read by a poller whose steps wander between 0.15 and 0.25 s, as a busy
    # machine's do: each bin holds the rate times its own length, and that is no burst.
    times = [0.0]
    for i in range(20):
        times.append(times[-1] + (0.15 if i % 2 else 0.25))
    traffic = fit_traffic([(t, 2000.0 * t) for t in times])
    assert traffic.rate_per_s == pytest.approx(2000.0)
    assert traffic.cv == pytest.approx(0.0, abs=1e-6)


def test_poisson_counts_read_at_uneven_steps_have_a_cv_near_1() -> None:
    rng = random.Random(5)
    cvs = []
    for _ in range(200):
        samples, t, n = [(0.0, 0.0)], 0.0, 0.0
        for i in range(20):
            step = 0.15 if i % 2 else 0.25
            t += step
            n += poisson(rng, 2000.0 * step)
            samples.append((t, n))
        cvs.append(fit_traffic(samples).cv)
    cvs.sort()
    assert 0.9 < cvs[100] < 1.1  # the median
    assert cvs[190] < 1.4  # read as equal bins, these were cv 5.2 at the median


def poisson(rng: random.Random, mean: float) -> float:
    """A Poisson draw by counting exponential gaps (the means here are a few hundred)."""
    count, t = 0, rng.expovariate(1.0)
    while t < mean:
        count += 1
        t += rng.expovariate(1.0)
    return float(count)


def test_bursty_traffic_has_a_large_cv() -> None:
    # All requests of each 5 s arrive in one 0.5 s bin.
    counts, total = [], 0.0
    for i in range(41):
        counts.append((i * 0.5, total))
        total += 1000 if i % 10 == 0 else 0
    traffic = fit_traffic(counts)
    assert traffic.cv > 3


def test_traffic_needs_samples_and_requests() -> None:
    with pytest.raises(ValueError, match="at least"):
        fit_traffic([(0.0, 0.0), (1.0, 5.0)])
    with pytest.raises(ValueError, match="no requests"):
        fit_traffic([(t, 7.0) for t in range(10)])
    with pytest.raises(ValueError, match="backwards"):
        fit_traffic([(t, 100.0 - t) for t in range(10)])


def stalled(stall_bins: range) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """200/s sent evenly, read every 0.2 s, by a Triton that executes nothing in
    ``stall_bins``: what arrived there waits in its queue (the pending gauge) and is
    answered in the first bin after; an execution in flight (2 requests) is in neither.
    Returns the answered counts and the received ones (executed + pending)."""
    answered, received, waiting = [], [], 0.0
    done = 0.0
    for i in range(21):
        sent = 40.0 * i
        if i in stall_bins:
            waiting = sent - done - 2.0
        else:
            done, waiting = sent, 0.0
        answered.append((0.2 * i, done))
        received.append((0.2 * i, done + waiting))
    return answered, received


def test_a_stall_reads_as_a_burst_in_the_answered_count_and_not_in_the_received() -> None:
    answered, received = stalled(range(8, 13))
    assert fit_traffic(answered).cv > 3  # 200 answered at once after a second of none
    traffic = fit_traffic(received_counts(received))
    assert traffic.rate_per_s == pytest.approx(200.0)
    assert traffic.cv < 0.2  # the 2 in flight, held back for a second, and no more


def test_a_dip_in_the_received_count_is_held_at_the_count_before() -> None:
    # a batch taken from the queue and not yet answered is in neither series
    assert received_counts([(0.0, 5.0), (1.0, 3.0), (2.0, 13.0)]) == [
        (0.0, 5.0),
        (1.0, 5.0),
        (2.0, 13.0),
    ]
    assert received_counts([]) == []


def window_of(
    samples: list[tuple[float, float]], received: list[tuple[float, float]], note: str = ""
) -> Window:
    empty = ModelStats("m", "1", 0, 0)
    return from_statistics(empty, empty, 4.0, samples=samples, received=received, pending_note=note)


def test_the_window_says_which_count_its_traffic_came_from() -> None:
    answered, received = stalled(range(8, 13))
    seen = fit_window(window_of(answered, received))
    assert seen.traffic is seen.received and seen.received is not None
    assert seen.received.cv < 0.2 < 3 < seen.answered.cv
    assert "from the requests received" in seen.describe()
    unread = fit_window(
        window_of(answered, received[:3], "Triton's metrics at http://x/metrics not read")
    )
    assert unread.received is None and unread.traffic is unread.answered
    assert unread.describe().endswith(
        "from the requests answered (Triton's metrics at http://x/metrics not read)"
    )
    not_asked = fit_window(window_of(answered, []))
    assert "give --metrics-url" in not_asked.describe()
    with pytest.raises(ValueError, match="no requests"):
        fit_window(window_of([(t, 7.0) for t in range(10)], [(t, 7.0) for t in range(10)]))


def _stats(count: int, queue_ms: float, execution_ms: float) -> ModelStats:
    """``count`` requests answered, each having waited ``queue_ms`` and run ``execution_ms``
    (Triton's per-request phase sums, as its statistics API gives them)."""
    ns = int(count * 1e6)
    phases = {
        "success": Duration(count, ns * int(queue_ms + execution_ms)),
        "queue": Duration(count, int(ns * queue_ms)),
        "compute_infer": Duration(count, int(ns * execution_ms)),
    }
    return ModelStats("m", "1", count, count, phases)


def test_a_backlog_is_saturation_and_a_busy_queue_is_not() -> None:
    # 6 ms executions, 500 us delay: saturated past 0.5 + 20 * 6 + 10 = 130.5 ms of waiting.
    assert saturation(_stats(600, 1500.0, 6.0), 0.0005).startswith(
        "its requests waited 1,500.0 ms in Triton's queue on average, past 20 executions"
    )
    assert saturation(_stats(600, 131.0, 6.0), 0.0005)
    assert saturation(_stats(600, 130.0, 6.0), 0.0005) == ""
    # A long delay is waited on purpose, not behind a backlog.
    assert saturation(_stats(600, 100.0, 1.0), 0.1) == ""
    assert saturation(ModelStats("m", "1", 0, 0), 0.0) == ""
    # Advised for twice the rate answered, with Poisson's burstiness unless burstier.
    assert saturated_traffic(OpenLoop(160.0, 0.15)) == OpenLoop(320.0, 1.0)
    assert saturated_traffic(OpenLoop(160.0, 2.5)) == OpenLoop(320.0, 2.5)


def test_the_metrics_url_is_guessed_only_beside_tritons_default_port() -> None:
    assert metrics_url_of("http://gpu-a:8000") == "http://gpu-a:8002/metrics"
    assert metrics_url_of("http://[::1]:8000/") == "http://[::1]:8002/metrics"
    # another port: its metrics are elsewhere, and port 8002 may be another Triton's
    assert metrics_url_of("http://gpu-a:9000") == ""
    assert metrics_url_of("http://gpu-a") == ""


def test_a_window_across_a_reload_says_its_statistics_started_over() -> None:
    """Triton starts a model's statistics over when it reloads it: a window whose counts go
    back is one the present is not checked on (advisor.inputs.RELOADED)."""
    before, after = ModelStats("m", "1", 200, 103), ModelStats("m", "1", 40, 20)
    assert from_statistics(before, after, 4.0).reset
    assert not from_statistics(after, before, 4.0).reset
