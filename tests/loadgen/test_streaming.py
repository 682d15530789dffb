"""Runs of any length in constant memory, streamed into the store (no server: a synthetic
recorder fed on a fake clock, and the real writer and SQLite)."""

from __future__ import annotations

import json
import sqlite3
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from loadgen.clients.slots import FAILED, OK
from loadgen.engine.runner import RunResult
from loadgen.engine.saved import import_saved
from loadgen.engine.writer import RunWriter, Tick
from loadgen.results.histogram import Histogram
from loadgen.results.params import RunParams
from loadgen.results.recorder import OTHER_ERRORS, Recorder
from loadgen.results.stored import load_run
from loadgen.results.summary import RunSummary
from runs.errors import StoreError
from runs.schema import ABANDONED, IN_PROGRESS, STALE_S
from runs.store import RunStore
from tests.helpers import load as main

OLD_STORE = Path(__file__).parent.parent / "advisor" / "data" / "loadruns.sqlite3"
PARAMS = RunParams("concurrency", url="http://127.0.0.1:1", concurrency=8, duration_s=100)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def feed(rec: Recorder, clock: Clock, n: int, per_second: int, every_second=None) -> None:
    """``n`` requests at ``per_second``, 1 in 50 failed; ``every_second`` as api's ticker."""
    step = 1.0 / per_second
    for i in range(n):
        start = clock.t
        rec.mark_sent(start)
        clock.t += step
        if i % 50 == 49:
            rec.record(start, FAILED, "HTTP 500: boom", i)
        else:
            rec.record(start, OK, None, i)
        if every_second is not None and int(clock.t) != int(clock.t - step):
            every_second()


def result_of(rec: Recorder, status: str = "ok") -> RunResult:
    rec.close_seconds(everything=True)
    return RunResult(
        params=PARAMS,
        status=status,
        started_at=rec.wall_t0,
        finished_at=rec.wall_t0 + rec.now(),
        summary=RunSummary(rec.summary(), None, "no server in this test"),
        timeline=rec.timeline(),
        recorder=rec,
    )


def listed(db: Path) -> list[dict]:
    """The store's runs once the writer's thread has made it (empty before)."""
    try:
        with RunStore(db) as opened:
            return opened.list_runs()
    except (StoreError, sqlite3.OperationalError):
        return []


def tick(rec: Recorder) -> Tick:
    return Tick(rec.drain(), rec.errors, rec.per_second.take_changed(), rec.summary(), time.time())


def test_histograms_merge_exactly() -> None:
    rng = np.random.default_rng(4)
    a_values, b_values = rng.lognormal(-6, 1, 5000), rng.lognormal(-5, 0.5, 3000)
    a, b, both = Histogram(), Histogram(), Histogram()
    for v in a_values:
        a.add(float(v))
        both.add(float(v))
    for v in b_values:
        b.add(float(v))
        both.add(float(v))
    merged = Histogram.merged([a, b])
    assert merged.counts == both.counts
    assert (merged.n, merged.low, merged.high) == (both.n, both.low, both.high)
    assert merged.total == pytest.approx(both.total)
    for q in (0.5, 0.9, 0.99, 1.0):
        assert merged.quantile(q) == both.quantile(q)
    assert a.merge(Histogram()).n == 5000  # an empty one changes nothing
    assert Histogram().merge(b).quantile(0.5) == b.quantile(0.5)


def test_a_recorder_aggregates_as_it_goes_and_drains_its_records() -> None:
    clock = Clock()
    rec = Recorder(clock=clock)
    feed(rec, clock, 10_000, 1000)
    first = rec.drain()
    assert len(first) == 10_000 and first.first_seq == 0
    feed(rec, clock, 500, 1000)
    second = rec.drain()
    assert (second.first_seq, len(second)) == (10_000, 500)
    s = rec.summary()
    assert (s.sent, s.ok, s.failed) == (10_500, 10_290, 210)
    assert s.errors == {"HTTP 500: boom": 210}
    rec.close_seconds(everything=True)
    rows = rec.timeline()
    assert [r["second"] for r in rows] == list(range(11))
    assert sum(r["sent"] for r in rows) == 10_500 and sum(r["ok"] for r in rows) == 10_290
    assert rows[0]["p50_s"] == pytest.approx(0.001, rel=0.01)


def test_a_run_without_a_store_keeps_its_first_records_and_counts_the_rest() -> None:
    clock = Clock()
    rec = Recorder(clock=clock, keep=100)
    feed(rec, clock, 250, 1000)
    assert len(rec.records()) == 100 and rec.dropped == 150
    assert rec.summary().sent == 250


def test_error_kinds_are_bounded() -> None:
    rec = Recorder(clock=Clock())
    for i in range(1500):
        rec.mark_sent(0.0)
        rec.record(0.0, FAILED, f"HTTP 400: request {i} is wrong")
    errors = rec.summary().errors
    assert len(errors) == 1001 and errors[OTHER_ERRORS] == 500
    assert sum(errors.values()) == 1500


def test_memory_stays_flat_over_200k_requests_streamed_into_the_store(tmp_path: Path) -> None:
    """The recorder and the writer over 200,000 requests (200 s at 1,000/s on a fake clock):
    what they hold after 200k is what they held after 20k, give or take the timeline's 56
    bytes a second and SQLite's page cache."""
    db = tmp_path / "runs.sqlite3"
    clock = Clock()
    rec = Recorder(clock=clock)
    writer = RunWriter(db, PARAMS)
    writer.start(time.time(), rec.summary())

    def drained(limit: int = 0, timeout_s: float = 30.0) -> None:
        """Let the writer keep up, as seconds of real time would (on a busy machine too)."""
        deadline = time.monotonic() + timeout_s
        while writer.queued > limit and time.monotonic() < deadline:
            time.sleep(0.01)

    def every_second() -> None:
        rec.close_seconds()
        writer.push(tick(rec))
        drained(limit=5)

    tracemalloc.start()
    try:
        feed(rec, clock, 20_000, 1000, every_second)
        drained()
        time.sleep(0.2)  # the last item taken is being committed
        early, _ = tracemalloc.get_traced_memory()
        feed(rec, clock, 180_000, 1000, every_second)
        drained()
        time.sleep(0.2)
        late, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert late - early < 512 * 1024, (early, late)
    assert len(rec.pending) < 2000
    writer.finish(result_of(rec), tick(rec))
    assert writer.note == ""
    with RunStore(db) as opened:
        run = load_run(opened, writer.run_id or 0)
    assert run.status == "ok" and run.summary.client.sent == 200_000
    with sqlite3.connect(db) as conn:
        count, seqs = conn.execute("SELECT COUNT(*), COUNT(DISTINCT seq) FROM records").fetchone()
        assert count == seqs == 200_000
        sent, ok = conn.execute("SELECT SUM(sent), SUM(ok) FROM timeline").fetchone()
        assert (sent, ok) == (200_000, 196_000)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_run_in_progress_reads_as_running_with_what_is_committed(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    clock = Clock()
    rec = Recorder(clock=clock)
    writer = RunWriter(db, PARAMS)
    writer.start(time.time(), rec.summary())
    feed(rec, clock, 3000, 1000)
    rec.close_seconds()
    writer.push(tick(rec))
    deadline = time.monotonic() + 10
    while not listed(db) or listed(db)[0]["sent"] < 3000:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with RunStore(db) as opened:
        (row,) = opened.list_runs()
    assert row["status"] == "running"
    with RunStore(db) as opened:
        running = load_run(opened, row["id"])
    assert running.summary.server is None and running.summary.server_error == IN_PROGRESS
    with RunStore(db) as opened:
        assert len(opened.load_records(row["id"])) == 3000
    with RunStore(db) as opened:
        assert sum(r["sent"] for r in opened.load_timeline(row["id"])) == 3000
    # Its process dies here: the next writer, a minute on, marks it failed and says why.
    with RunStore(db, create=True) as opened:
        assert opened.settle_abandoned(time.time()) == []
        assert opened.settle_abandoned(time.time() + STALE_S + 1) == [row["id"]]
    with RunStore(db) as opened:
        dead = load_run(opened, row["id"])
    assert dead.status == "failed" and dead.summary.client.error == ABANDONED
    assert dead.summary.client.sent == 3000


def test_a_locked_store_costs_nothing_and_says_where_the_run_went(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    RunStore(db, create=True).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock to the end
    try:
        clock = Clock()
        rec = Recorder(clock=clock)
        writer = RunWriter(db, PARAMS, busy_s=0.1, final_busy_s=0.3)
        writer.start(time.time(), rec.summary())
        feed(rec, clock, 2500, 1000)
        writer.push(tick(rec))
        feed(rec, clock, 500, 1000)
        result = result_of(rec)
        writer.finish(result, tick(rec))
    finally:
        holder.rollback()
        holder.close()
    assert result.run_id is None
    assert writer.saved_to is not None and writer.saved_to.parent == tmp_path
    assert "database is locked" in writer.note and str(writer.saved_to) in writer.note
    assert "\n" not in writer.note
    saved = json.loads(writer.saved_to.read_text())
    assert saved["client"]["sent"] == 3000 and saved["status"] == "ok"
    assert sum(r["sent"] for r in saved["timeline"]) == 3000
    records = (tmp_path / saved["records_file"]).read_text().splitlines()
    assert records[0] == "seq,start_s,latency_s,outcome,error" and len(records) == 3001
    with RunStore(db) as opened:
        assert opened.list_runs() == []
    # Once the lock is gone, `loadgen import` puts it where it belongs, once.
    assert main(["import", str(writer.saved_to), "--db", str(db)]) == 0
    assert main(["import", str(writer.saved_to), "--db", str(db)]) == 0
    with RunStore(db) as opened:
        (row,) = opened.list_runs()
    with RunStore(db) as opened:
        imported = load_run(opened, row["id"])
    assert imported.summary == result.summary and imported.status == "ok"
    with RunStore(db) as opened:
        assert len(opened.load_records(row["id"])) == 3000
    with RunStore(db) as opened:
        assert sum(r["sent"] for r in opened.load_timeline(row["id"])) == 3000


def test_a_store_locked_midway_keeps_its_first_part_and_imports_the_rest(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.sqlite3"
    clock = Clock()
    rec = Recorder(clock=clock)
    writer = RunWriter(db, PARAMS, busy_s=0.1, final_busy_s=0.2)
    writer.start(time.time(), rec.summary())
    feed(rec, clock, 1200, 1000)
    rec.close_seconds()
    writer.push(tick(rec))
    while not listed(db) or listed(db)[0]["sent"] < 1200:
        time.sleep(0.02)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        feed(rec, clock, 800, 1000)
        result = result_of(rec)
        writer.finish(result, tick(rec))
    finally:
        holder.rollback()
        holder.close()
    assert writer.saved_to is not None and writer.run_id is not None
    assert f"1,200 records are in the store's run #{writer.run_id}" in writer.note
    with RunStore(db) as opened:
        assert opened.list_runs()[0]["status"] == "running"
    with RunStore(db, create=True) as opened:
        run_id, added = import_saved(opened, writer.saved_to)
    assert (run_id, added) == (writer.run_id, 800)
    with RunStore(db) as opened:
        assert load_run(opened, run_id).summary == result.summary
    with RunStore(db) as opened:
        assert len(opened.load_records(run_id)) == 2000


def test_a_lock_that_goes_away_costs_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    RunStore(db, create=True).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    clock = Clock()
    rec = Recorder(clock=clock)
    writer = RunWriter(db, PARAMS, busy_s=0.1)
    writer.start(time.time(), rec.summary())
    feed(rec, clock, 1000, 1000)
    writer.push(tick(rec))
    time.sleep(0.3)  # a commit or two fail meanwhile
    holder.rollback()
    holder.close()
    writer.finish(result_of(rec), tick(rec))
    assert writer.note == "" and writer.saved_to is None
    with RunStore(db) as opened:
        assert len(opened.load_records(writer.run_id or 0)) == 1000


def test_a_file_that_is_not_a_store_costs_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    db.write_bytes(b"this is not SQLite at all" * 100)
    clock = Clock()
    rec = Recorder(clock=clock)
    writer = RunWriter(db, PARAMS)
    writer.start(time.time(), rec.summary())
    feed(rec, clock, 700, 1000)
    writer.finish(result_of(rec), tick(rec))
    assert writer.saved_to is not None and "is not a usable load-run store" in writer.note
    assert json.loads(writer.saved_to.read_text())["records_in_file"] == 700
