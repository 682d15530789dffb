"""The one search stands on the present: calibrated, every prediction uses the inferred release
time; off, nothing is searched; not checkable, the line says why. Synthetic windows whose
hidden unavailability is known (tests/advisor/test_present.py's)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from advisor import advice
from advisor.advice import SearchOptions
from advisor.inputs import Costs, Inputs, Prepared
from advisor.predict import predict
from advisor.present import CALIBRATED, OFF, Measured, not_executed
from observe.window import Window
from tests.advisor.test_present import SETTINGS, window

QUICK = SearchOptions(p99_bound_s=0.02, requests=800, seeds=2, max_batch_limit=8)
SETTING = "shared cores"


def prepared(present: Measured | None, why: str = "") -> Prepared:
    config, service, traffic, cpu = SETTINGS[SETTING]
    inputs = Inputs(config, service, traffic, [], present=present, present_why=why)
    return Prepared(inputs, Costs(cpu, "given"), "")


def test_a_calibrated_present_carries_its_release_time_into_every_prediction() -> None:
    seen = window(SETTING, 100e-6)
    found = advice.search(prepared(seen), QUICK)
    assert found.present is not None and found.present.status == CALIBRATED
    assert not found.silent
    assert found.present_line().startswith("present: batch ")
    assert "unavailable after each execution" in found.present_line()
    rec = found.recommendation
    assert rec.considered > 1 and rec.best is not None
    # The current config predicted on the calibrated model reproduces the window's batch
    # (without the inferred time it batches less: the check's own figure at no hidden time).
    measured = seen.avg_batch
    assert rec.current.mean_batch_size == pytest.approx(measured, rel=0.10)
    config, service, traffic, cpu = SETTINGS[SETTING]
    uncalibrated = predict(config, traffic, service, cpu, QUICK.requests, with_limit=False)
    assert uncalibrated.mean_batch_size < measured * 0.95
    assert found.present_json()["status"] == CALIBRATED


def test_a_present_off_its_bounds_recommends_nothing_and_says_why() -> None:
    # Batches four times the size the fitted traffic forms, at executions so frequent that
    # the fitted compute alone fills the instance: no hidden time can be inferred.
    real = window(SETTING, 0.0)
    off = replace(
        real,
        avg_batch=real.avg_batch * 4,
        size_shares={},
        executions_per_s=real.executions_per_s * 100,
    )
    found = advice.search(prepared(off), QUICK)
    assert found.present is not None and found.present.status == OFF
    assert found.silent
    rec = found.recommendation
    assert rec.best is None and rec.considered == 0  # nothing searched
    line = found.present_line()
    assert "off by" in line and "nothing recommended: try a longer window (--window)" in line
    assert "the fitted compute alone fills the instances" in line
    assert found.present_json()["recommend_ready"] is False


def test_a_present_not_checked_says_why_and_advice_goes_on() -> None:
    found = advice.search(prepared(None, "the traffic was given"), QUICK)
    assert found.present is None and not found.silent
    assert found.present_line() == "present: not checked (the traffic was given)"
    assert found.present_json()["status"] == "not checked"
    assert found.recommendation.considered > 1


def test_measured_from_a_window_without_the_statistics_delta() -> None:
    """Prometheus' or a stored run's window: its counts, over the part with traffic."""
    w = Window(
        seconds=60.0,
        source="test",
        requests_ok=300.0,
        requests_failed=0.0,
        inferences=300.0,
        executions=200.0,
        queue_s=0.6,
        compute_s=0.1,
        executions_by_size={1: 100.0, 2: 100.0},
        active_seconds=20.0,
    )
    m = Measured.from_window(w)
    assert m.avg_batch == pytest.approx(1.5)
    assert m.size_shares == {1: 0.5, 2: 0.5}
    assert m.mean_queue_s == pytest.approx(0.002)
    assert m.executions_per_s == pytest.approx(10.0)


def test_a_model_that_never_executed_says_what_would_help() -> None:
    check = not_executed(note="send load while advise watches")
    assert check.line() == (
        "present: not executed yet (no executions in the window; send load while advise "
        "watches): nothing recommended"
    )
    assert not check.recommend_ready
