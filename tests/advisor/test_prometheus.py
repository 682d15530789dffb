"""Fitting from the exporter's counters through the real Prometheus of the running stack."""

from __future__ import annotations

import json
import time

import pytest

from advisor.fit import batch_times_from_prometheus, fit_service_times, traffic_from_prometheus
from batchscope.main import main
from loadgen.clients.burst import burst, infer_body
from stacksettings import Settings

pytestmark = pytest.mark.integration


def test_service_times_and_traffic_from_prometheus(running_stack: Settings) -> None:
    prom = running_stack.url("prometheus")
    bodies = [infer_body({"INPUT_A": [1.0], "INPUT_B": [2.0]}) for _ in range(4)]
    # Bursts of 4 give batches of 2 and 4 (preferred sizes); several scrapes (1 s) pass.
    start = time.monotonic()
    deadline = start + 40
    points: dict[int, tuple[int, float]] = {}
    traffic = None
    while time.monotonic() < deadline:
        for _ in range(5):
            burst(running_stack.host, running_stack.port("triton_http"), "batch_add_model", bodies)
        time.sleep(1.0)
        points = batch_times_from_prometheus(prom, "batch_add_model", window="1m")
        try:
            # Needs a few 1 s samples of the exporter's request counter in Prometheus.
            traffic = traffic_from_prometheus(
                prom, "batch_add_model", window_s=time.monotonic() - start, step_s=1
            )
        except ValueError:
            continue
        if sum(n for n, _ in points.values()) >= 10:
            break
    assert points, "Prometheus has no triton_batching_batch_executions_total for the model"
    assert all(n > 0 and seconds > 0 for n, seconds in points.values())
    assert fit_service_times(points).time_s(1) > 0
    assert traffic is not None and traffic.rate_per_s > 0


def test_unreachable_prometheus_is_one_line() -> None:
    unreachable = r"Prometheus at http://127.0.0.1:9 is unreachable \(connection refused\)"
    with pytest.raises(ValueError, match=unreachable + ": check --prometheus"):
        batch_times_from_prometheus("http://127.0.0.1:9", "m")


def load_until_scraped(stack: Settings, model: str = "batch_add_model") -> None:
    """Bursts until Prometheus holds ten or more of the model's executions by size: the
    state a test of fitting from Prometheus needs, made by the test itself."""
    prom = stack.url("prometheus")
    bodies = [infer_body({"INPUT_A": [1.0], "INPUT_B": [2.0]}) for _ in range(4)]
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        for _ in range(5):
            burst(stack.host, stack.port("triton_http"), model, bodies)
        time.sleep(1.0)
        points = batch_times_from_prometheus(prom, model, window="1m")
        if sum(n for n, _ in points.values()) >= 10:
            return
    raise AssertionError(f"Prometheus did not see 10 executions of {model} in 40 s")


def test_advise_from_prometheus(running_stack: Settings, capsys: pytest.CaptureFixture) -> None:
    load_until_scraped(running_stack)
    code = main(
        [
            "advise",
            "--prometheus",
            running_stack.url("prometheus"),
            "--model",
            "batch_add_model",
            "--url",
            running_stack.url("triton_http"),
            "--window",
            "60",
            "--concurrency",
            "4",
            "--p99-ms",
            "20",
            "--max-batch-limit",
            "4",
            "--requests",
            "800",
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    assert result["notes"][0].startswith("fitted from the exporter's counters")
    assert result["current"]["config"].startswith("max_batch_size 4, preferred [2, 4]")
