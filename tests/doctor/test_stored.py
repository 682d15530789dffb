"""``batchscope doctor --store DB --run A[,B...]``: the runs' statistics summed for the checks,
and one line with exit 2 for runs that cannot be read or pooled, as ``advise --run`` refuses
them. The store is a real capture (tests/advisor/data/loadruns.sqlite3: run 1 a Poisson rate
run, run 2 a concurrency run, both stored before runs kept their model config); the pooled
diagnosis of runs that can be pooled is checked on the real Triton in
tests/loadgen/test_traced_runs.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchscope.main import main
from observe.window import Window, summed

DB = Path(__file__).resolve().parents[1] / "advisor" / "data" / "loadruns.sqlite3"


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        ("1,2", "runs 1 and 2 differ in their traffic (rate"),
        ("1,1", "names a run twice: each run is pooled once"),
        ("1,x", "is not a run id or a comma-separated list of them"),
        ("7", "no run 7"),
        ("2", "run 2 was stored without its model config"),
    ],
)
def test_runs_that_cannot_be_diagnosed_together_are_one_line_and_exit_2(
    run: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "--store", str(DB), "--run", run]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("batchscope doctor: error: ") and expected in line, captured.err
    assert "Traceback" not in captured.err


def test_windows_sum_into_one() -> None:
    a = Window(2.0, "", 100, 1, 100, 60, 0.5, 0.25, {1: 30, 2: 30})
    b = Window(3.0, "", 150, 0, 150, 50, 0.75, 0.5, {2: 50, 4: 0})
    both = summed([a, b], "stored runs 1, 2")
    assert (both.seconds, both.requests, both.requests_failed) == (5.0, 251, 1)
    assert (both.inferences, both.executions) == (250, 110)
    assert (both.queue_s, both.compute_s) == (1.25, 0.75)
    assert both.executions_by_size == {1: 30, 2: 80, 4: 0}
    assert both.arrival_rate == pytest.approx(251 / 5.0)
    assert both.source == "stored runs 1, 2"
