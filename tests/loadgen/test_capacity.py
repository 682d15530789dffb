"""``loadgen capacity``: the binary search against known answers, then on a real Triton.

The search is checked with a server whose p99 is a known function of the rate; the command
runs against a private Triton (its own, started with the launcher's code) with small, fast
bounds: a bound the max rate meets (the max rate ends the search) and one nothing meets
(the step count ends it), each step a stored run.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from loadgen.engine import capacity
from loadgen.engine.capacity import CapacityParams, Step
from loadgen.errors import LoadgenError
from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.helpers import load


def server(limit: float, fail_from: float = float("inf")) -> Callable[[float], Step]:
    """A server whose p99 is rate / limit * 10 ms: within 10 ms up to ``limit``/s."""

    def probe(rate: float) -> Step:
        p99 = rate / limit * 0.010
        bad = 1 if rate >= fail_from else 0
        return Step(rate, p99, 100, 100 - bad, bad, 0, p99 <= 0.010 and not bad)

    return probe


def test_the_search_closes_in_on_the_highest_rate_under_the_bound() -> None:
    found = capacity.search(CapacityParams(0.010, max_rate=1000, steps=8), server(300))
    assert [s.rate for s in found.steps] == [1000, 500, 250, 375, 312.5, 281.25, 296.875, 304.6875]
    assert found.best_rate == 296.875 and found.lowest_failed == 304.6875
    assert found.ended == "steps"
    assert "capacity: 296.9/s passed, under 304.7/s (failed)" in capacity.table(found)
    assert "ended by: its step count" in capacity.table(found)


def test_a_max_rate_that_passes_ends_the_search_and_says_so() -> None:
    found = capacity.search(CapacityParams(0.010, max_rate=200, steps=8), server(300))
    assert [s.rate for s in found.steps] == [200]
    assert (found.best_rate, found.ended) == (200, "max-rate")
    assert "raise --max-rate" in capacity.table(found)


def test_failed_requests_fail_a_step_whatever_its_p99() -> None:
    found = capacity.search(CapacityParams(0.010, 1000, 4), server(10_000, fail_from=400))
    assert [(s.rate, s.passed) for s in found.steps] == [
        (1000, False),
        (500, False),
        (250, True),
        (375, True),
    ]
    assert (found.best_rate, found.lowest_failed) == (375, 500)


def test_no_rate_under_the_bound_is_said_plainly() -> None:
    found = capacity.search(CapacityParams(0.010, 1000, 3), server(1))
    assert found.best_rate is None and found.ended == "steps"
    assert "no rate passed: even 250.0/s" in capacity.table(found)


def test_a_stop_ends_the_search_without_a_verdict() -> None:
    def probe(rate: float) -> Step:
        return replace(server(300)(rate), status="interrupted" if rate < 1000 else "ok")

    found = capacity.search(CapacityParams(0.010, 1000, 8), probe)
    assert [s.rate for s in found.steps] == [1000, 500] and found.ended == "stop"
    assert found.lowest_failed == 1000  # the interrupted step is no failure


@pytest.mark.parametrize(
    ("params", "flag"),
    [
        (CapacityParams(0.0), "--p99-ms"),
        (CapacityParams(0.01, max_rate=1e9), "--max-rate"),
        (CapacityParams(0.01, steps=0), "--steps"),
        (CapacityParams(0.01, steps=1000), "--steps"),
        (CapacityParams(0.01, step_s=float("nan")), "--step-duration"),
    ],
)
def test_bounds_are_checked(params: CapacityParams, flag: str) -> None:
    with pytest.raises(LoadgenError, match=flag):
        params.check()


# ---- on a real Triton ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    settings = isolated(tmp_path_factory.mktemp("capacity") / "state")
    with running(settings, only={"triton"}):
        yield settings


def _capacity(
    settings: Settings, db: Path, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = load(
        [
            "capacity",
            "--url",
            settings.url("triton_http"),
            "--db",
            str(db),
            "--json",
            "--step-duration",
            "0.5",
            *argv,
        ]
    )
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_bound_the_max_rate_meets_ends_at_the_max_rate(
    triton: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str], protocol: str
) -> None:
    db = tmp_path / "runs.sqlite3"
    grpc = ["--protocol", protocol, "--grpc-url", triton.grpc_address]
    code, out = _capacity(triton, db, capsys, "--p99-ms", "2000", "--max-rate", "200", *grpc)
    assert code == 0, out
    assert (out["ended"], out["best_rate"], out["max_rate"]) == ("max-rate", 200, 200)
    assert (out["p99_bound_s"], out["steps_asked"], out["step_s"]) == (2.0, 8, 0.5)
    (step,) = out["steps"]
    assert step["passed"] and step["bad"] == 0 and 99 <= step["sent"] <= 101
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT id, status, summary FROM runs").fetchall()
    assert [(r[0], r[1]) for r in stored] == [(step["run_id"], "ok")]
    summary = json.loads(stored[0][2])
    assert summary["sent"] == step["sent"]
    # Open loop, so the run counted its late sends (a closed loop stores none), and the
    # step reports the stored figure, a share of what it sent.
    assert isinstance(summary["late_sends"], int), summary
    assert summary["late_sends"] == step["late_sends"] <= step["sent"]
    assert summary["late_threshold_s"] == 0.001


@pytest.mark.integration
def test_a_bound_nothing_meets_spends_the_steps_and_says_so(
    triton: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.sqlite3"
    code, out = _capacity(
        triton, db, capsys, "--p99-ms", "0.001", "--max-rate", "200", "--steps", "3"
    )
    assert code == 1
    assert out["ended"] == "steps" and out["best_rate"] is None
    assert [s["rate"] for s in out["steps"]] == [200, 100, 50]
    with sqlite3.connect(db) as conn:
        groups = conn.execute("SELECT DISTINCT group_id FROM runs").fetchall()
    assert groups == [(out["group_id"],)]
    load(["runs", "--db", str(db)])
    assert capsys.readouterr().out.count(" rate ") >= 3
