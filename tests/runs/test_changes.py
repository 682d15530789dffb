"""The change log: changes kept and listed, and counted for the exporter without a write."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runs.changes import Change, count_changes
from runs.store import RunStore

OLD_STORE = Path(__file__).parents[1] / "advisor" / "data" / "loadruns.sqlite3"


def change(model: str, outcome: str, server: str = "http://a:8000") -> Change:
    return Change(server, model, {}, {"b": 1}, {}, {}, {}, outcome, "why")


def test_changes_are_listed_newest_first_and_counted_by_server_model_and_outcome(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.sqlite3"
    with RunStore(db, create=True) as store:
        for c in (change("a", "kept"), change("a", "kept"), change("b", "rolled_back", "x")):
            store.record_change(c, now=1.0)
        listed = store.list_changes()
        assert [c.model for c in listed] == ["b", "a", "a"]
        assert listed[0].new_config == {"b": 1} and listed[0].at == 1.0
        assert [c.id for c in store.list_changes("a", limit=1)] == [2]
    assert count_changes(db) == {("http://a:8000", "a", "kept"): 2, ("x", "b", "rolled_back"): 1}


def test_no_store_or_an_old_store_counts_nothing_and_makes_nothing(tmp_path: Path) -> None:
    assert count_changes(tmp_path / "missing.sqlite3") == {}
    assert not (tmp_path / "missing.sqlite3").exists()
    assert count_changes(OLD_STORE) == {}
    with RunStore(OLD_STORE) as store:
        assert store.list_changes() == []


def test_a_file_that_is_not_a_store_is_an_error_for_the_caller_to_report(tmp_path: Path) -> None:
    db = tmp_path / "junk.sqlite3"
    db.write_bytes(b"not SQLite" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        count_changes(db)


def test_an_unknown_outcome_is_refused() -> None:
    with pytest.raises(ValueError, match="outcome 'maybe' is not one of kept"):
        change("a", "maybe")
