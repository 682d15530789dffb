"""Stored runs read back as typed runs: a real store written before the types existed.

``tests/advisor/data/loadruns.sqlite3`` was recorded by ``bench/advisor_capture_runs.py``
against this project's Triton: run 1 a Poisson rate run at 400/s, run 2 a concurrency-8 run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from loadgen.reports import report
from loadgen.results.params import RunParams
from loadgen.results.recorder import LATE_THRESHOLD_S, Recorder
from loadgen.results.result import RunResult
from loadgen.results.stored import load_lateness, load_run, save
from loadgen.results.summary import Latency, RunSummary
from runs.store import RunStore

DB = Path(__file__).parent.parent / "advisor" / "data" / "loadruns.sqlite3"


def test_an_old_store_reads_as_typed_runs() -> None:
    with RunStore(DB) as opened:
        rate = load_run(opened, 1)
    assert rate.params == RunParams(
        "rate",
        url="http://127.0.0.1:54429",
        grpc_url="127.0.0.1:8001",
        rate=400,
        poisson=True,
        duration_s=3,
        seed=7,
    )
    assert (rate.run_id, rate.status, rate.group_id) == (1, "ok", "")
    c = rate.summary.client
    assert (c.sent, c.ok, c.failed, c.timed_out, c.not_sent, c.errors) == (1190, 1190, 0, 0, 0, {})
    assert c.throughput_per_s == pytest.approx(396.96, abs=0.01)
    assert c.latency_s == Latency(
        p50=0.0015315,
        p90=0.0021835,
        p95=0.0027755,
        p99=0.0063195,
        max=0.028822080538598492,
        mean=0.0017495929648936853,
    )
    server = rate.summary.server
    assert server is not None and not rate.summary.server_restarted
    assert (server.requests, server.inferences, server.executions) == (1190, 1190, 956)
    assert server.executions_by_batch_size == {1: 733, 2: 217, 3: 1, 4: 5}
    assert set(server.compute_infer_s_per_execution_by_batch_size) == {1, 2, 3, 4}
    with RunStore(DB) as opened:
        closed = load_run(opened, 2)
    assert closed.params.concurrency == 8 and closed.summary.client.not_sent is None


@pytest.mark.parametrize("run_id", [1, 2])
def test_the_types_write_the_shape_the_store_has_always_had(run_id: int) -> None:
    with RunStore(DB) as opened:
        row = opened.load_row(run_id)
    with RunStore(DB) as opened:
        run = load_run(opened, run_id)
    assert run.params.to_json() == row["params"]
    assert run.summary.client.to_json() == row["summary"]
    assert run.summary.server_json() == row["server"]


def test_b_faster_than_a_gives_a_throughput_ratio_above_one() -> None:
    with RunStore(DB) as opened:
        a, b = load_run(opened, 1), load_run(opened, 2)  # 397/s, then 5,773/s
    table = report.compare_table(a, b)
    header = table.splitlines()[3]
    assert header.split() == ["A", "B", "B", "/", "A"]
    (row,) = [line for line in table.splitlines() if line.startswith("throughput (req/s)")]
    assert row.split()[-3:] == ["396.960", "5,772.650", "14.54x"]
    (row,) = [line for line in table.splitlines() if line.startswith("average batch size")]
    assert row.split()[-1] == "2.51x"  # 3.125 / 1.245


def test_an_old_store_learns_send_lateness_from_its_next_writer(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite3"
    shutil.copy(DB, db)  # written before send lateness was kept
    with RunStore(db) as opened:
        assert load_run(opened, 1).summary.client.send_lateness_s is None
        assert load_lateness(opened, 1) is None  # no such table: read as "not kept"
        before = opened.load_row(1)

    clock = [0.0]
    rec = Recorder(clock=lambda: clock[0], late_threshold_s=LATE_THRESHOLD_S)
    for i, late in enumerate((0.000004, 0.000006, 0.0025)):
        clock[0] = i * 0.01 + late
        rec.mark_sent(i * 0.01)
    rec.close_seconds(everything=True)
    result = RunResult(
        params=RunParams("rate", rate=100, duration_s=0.03),
        status="ok",
        started_at=rec.wall_t0,
        finished_at=rec.wall_t0 + 0.03,
        summary=RunSummary(rec.summary(), None, "not asked"),
        timeline=rec.timeline(),
        recorder=rec,
    )
    with RunStore(db, create=True) as opened:  # the writer's connection adds the table
        run_id = save(opened, result)
    with RunStore(db) as opened:
        assert opened.load_row(1) == before  # nothing already recorded is lost
        stored = load_run(opened, run_id).summary.client.send_lateness_s
        hist = load_lateness(opened, run_id)
    assert stored is not None and stored.max == pytest.approx(0.0025)
    assert stored.p50 == pytest.approx(0.0000065, abs=1e-6)
    assert hist is not None and hist.n == 3 and hist.high == pytest.approx(0.0025)
    with RunStore(db) as opened:
        table = report.run_table(load_run(opened, run_id))
    assert "SCHEDULE NOT KEPT" in table and "send lateness p50" in table
