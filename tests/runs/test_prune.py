"""The store's own upkeep: an old store migrated by its next writer, and prune (with the
load generator's writer and recorder making the runs, as a real run would)."""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from loadgen.actions import parse_age
from loadgen.engine.writer import RunWriter
from loadgen.errors import LoadgenError
from loadgen.results.recorder import Recorder
from loadgen.results.stored import save
from runs.errors import StoreError
from runs.prune import check_rules
from runs.store import RunStore
from tests.helpers import load as main
from tests.loadgen.test_streaming import (
    OLD_STORE,
    PARAMS,
    Clock,
    feed,
    listed,
    result_of,
    tick,
)


def test_an_old_store_learns_the_running_status_and_keeps_its_runs(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite3"
    shutil.copy(OLD_STORE, db)
    with RunStore(db) as opened:
        before = [opened.load_row(i) for i in (1, 2)]
    with RunStore(db) as opened:
        records = len(opened.load_records(1))
    clock = Clock()
    rec = Recorder(clock=clock)
    writer = RunWriter(db, PARAMS)
    writer.start(time.time(), rec.summary())
    feed(rec, clock, 100, 1000)
    writer.finish(result_of(rec), tick(rec))
    assert writer.run_id == 3 and writer.note == ""
    with RunStore(db) as opened:
        assert [opened.load_row(i) for i in (1, 2)] == before
    with RunStore(db) as opened:
        assert len(opened.load_records(1)) == records
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'runs'").fetchone() == (
            3,
        )


def saved_run(db: Path, started_at: float, n: int = 10) -> int:
    clock = Clock()
    rec = Recorder(clock=clock)
    feed(rec, clock, n, 1000)
    result = result_of(rec)
    result.started_at = started_at
    with RunStore(db, create=True) as opened:
        return save(opened, result)


def test_prune_keeps_the_newest_and_the_young_and_a_run_still_going(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.sqlite3"
    now = time.time()
    ids = [saved_run(db, now - age * 86400, n=1000) for age in (40, 20, 10, 2, 1)]
    live = RunWriter(db, PARAMS)
    live.start(now, Recorder().summary())
    live.push(tick(Recorder()))
    while listed(db)[0]["status"] != "running":
        time.sleep(0.02)
    assert main(["prune", "--older-than", "15d", "--db", str(db)]) == 0
    assert "pruned 2 runs (2,000 records)" in capsys.readouterr().out
    with RunStore(db) as opened:
        assert [r["id"] for r in opened.list_runs()] == [ids[-1] + 1, *reversed(ids[2:])]
    with RunStore(db) as opened:
        pruned = opened.prune(keep=2)
    assert pruned.runs == [ids[2], ids[3]] and pruned.records == 2000
    assert pruned.bytes_after < pruned.bytes_before
    with RunStore(db) as opened:
        remaining = [r["id"] for r in opened.list_runs()]
    assert remaining == [ids[-1] + 1, ids[-1]]  # the running one is kept, and counts
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM records").fetchone()[0] == 1000
        assert conn.execute("SELECT COUNT(DISTINCT run_id) FROM timeline").fetchone()[0] == 1
    with RunStore(db) as opened:
        assert opened.prune(keep=0).runs == [ids[-1]]  # never the run still going
    live.abort("interrupted", "test over")


def test_prune_refuses_no_rule_and_bad_ages(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="--keep N, --older-than AGE"):
        check_rules(None, None)
    assert parse_age("30d") == 30 * 86400 and parse_age("90s") == 90
    for bad in ("30", "d", "-1h", "3x"):
        with pytest.raises(LoadgenError, match="--older-than"):
            parse_age(bad)
