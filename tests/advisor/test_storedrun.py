"""The advisor's inputs from stored load runs: a real store recorded by the load generator.

``data/loadruns.sqlite3`` and ``data/loadruns_config.json`` come from
``bench/advisor_capture_runs.py``: run 1 is a Poisson rate run at 400/s, run 2 a
concurrency-8 run, both against the spec's config on this project's Triton.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor import storedrun
from advisor.calibrate import load_capture
from advisor.config import BatcherConfig, from_model_config
from advisor.model import ClosedLoop, OpenLoop
from advisor.predict import predict
from batchscope.main import main
from loadgen.results.params import RunParams
from loadgen.results.stored import load_run
from runs.store import RunStore

DATA = Path(__file__).parent / "data"
DB = DATA / "loadruns.sqlite3"


def test_a_rate_run_is_open_loop_traffic_from_its_due_times() -> None:
    run = storedrun.load(DB, 1)
    assert isinstance(run.traffic, OpenLoop)
    assert run.traffic.rate_per_s == pytest.approx(400, rel=0.1)
    assert 0.8 < run.traffic.cv < 1.2  # Poisson
    assert run.service.time_s(1) > 0
    assert run.measured_batch_size is not None and run.measured_batch_size > 1


def test_a_concurrency_run_is_closed_loop() -> None:
    assert storedrun.load(DB, 2).traffic == ClosedLoop(8)


def test_the_model_predicts_the_rate_runs_batch_size() -> None:
    run = storedrun.load(DB, 1)
    config = from_model_config(json.loads((DATA / "loadruns_config.json").read_text()))
    assert config == BatcherConfig(4, (2, 4), 500)
    _, cpu = load_capture(DATA / "calibration.json").calibrate()
    p = predict(config, run.traffic, run.service, cpu, 10_000, with_limit=False)
    assert p.mean_batch_size == pytest.approx(run.measured_batch_size, rel=0.10)


def test_missing_runs_and_stores_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no run 99"):
        storedrun.load(DB, 99)
    with pytest.raises(ValueError, match="no load-run store"):
        storedrun.load(tmp_path / "none.sqlite3", 1)


def test_service_times_count_every_phase_of_an_execution() -> None:
    """Triton counts a batch's compute once per request in it (inference statistics), and
    per execution by size (batch statistics). The service times, fitted from the second
    with compute_input and compute_output spread in, give the first's total."""
    run = storedrun.load(DB, 1)
    with RunStore(DB) as runs:
        server = load_run(runs, 1).summary.server
    assert server is not None and server.compute_s_by_phase["compute_input"] > 0
    by_size = server.executions_by_batch_size
    fitted = sum(n * size * run.service.time_s(size) for size, n in by_size.items())
    assert fitted == pytest.approx(server.compute_s_total, rel=0.03)


def test_runs_of_another_traffic_are_not_pooled() -> None:
    with pytest.raises(ValueError, match=r"runs 1 and 2 differ in their traffic \(rate"):
        storedrun.load_runs(DB, (1, 2))
    with pytest.raises(ValueError, match="a run is named twice"):
        storedrun.load_runs(DB, (1, 1))


def test_bursts_have_no_steady_traffic() -> None:
    with pytest.raises(ValueError, match="no steady traffic"):
        storedrun.traffic_from_run(RunParams("concurrent"), [])


def test_advise_from_a_stored_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(
        [
            "advise",
            "--store",
            str(DB),
            "--run",
            "2",
            "--max-batch-size",
            "4",
            "--preferred",
            "2,4",
            "--delay-us",
            "500",
            "--p99-ms",
            "20",
            "--max-batch-limit",
            "8",
            "--requests",
            "800",
            "--cores",
            "2",
            "--calibrations",
            str(tmp_path / "calibrations.json"),
            "--json",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    result = json.loads(out)
    assert "from stored run 2 (concurrency, ok, 1500 requests)" in result["notes"]
    assert result["current"]["traffic"] == "closed loop, concurrency 8"
    # The closed-loop run's throughput calibrates the costs: the capacity is known, and the
    # simulated throughput at the run's concurrency is the measured one.
    calibration = result["calibration"]
    assert calibration["source"].startswith("the throughput of stored run 2 at concurrency 8")
    assert (calibration["cores"], calibration["requests"]) == (2, 1500)
    assert 0 < calibration["request_s"] < 0.001
    assert result["capacity_known"] and result["current"]["throughput_limit_per_s"] > 0
    measured = 5773  # the run's client throughput
    assert result["current_interval"]["low"] <= measured * 1.1
    assert result["current_interval"]["high"] >= measured * 0.9
    assert result["keep"] or result["recommended"] is not None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--store", str(DB), "--p99-ms", "5"], "--store needs --run ID"),
        (["--store", str(DB), "--run", "1", "--p99-ms", "5"], "give the config"),
        (["--p99-ms", "5"], "give --url URL --model M"),
        (["--store", str(DB), "--run", "7", "--p99-ms", "5"], "no run 7"),
        (
            ["--store", str(DB), "--run", "1,2", "--max-batch-size", "4", "--p99-ms", "5"],
            "runs 1 and 2 differ in their traffic",
        ),
    ],
)
def test_advise_usage_errors(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["advise", *argv]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert len(err.strip().splitlines()) == 1
