"""The trace reader on real trace files of this project's Triton (tests/tritonapi/data/traces,
written by capture_traces.py), and the departure rule on batches whose answer is known."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from tritonapi.modelconfig import DynamicBatching, parse_json
from tritonapi.stats import parse_statistics
from tritonapi.traces import (
    INSTANCE_IDLE,
    MAX_BATCH_SIZE,
    PREFERRED_SIZE,
    QUEUE_DELAY,
    TracedRequest,
    TraceFollower,
    group_batches,
    parse_entries,
    percentile,
    salvage,
    with_reasons,
)

DATA = Path(__file__).resolve().parent / "data" / "traces"
CONFIG = parse_json(json.loads((DATA / "config.json").read_text()))


def capture(name: str, tmp_path: Path | None = None) -> TraceFollower:
    """A follower over a capture (a copy in tmp_path when the test removes files)."""
    folder = DATA / name
    if tmp_path is not None:
        folder = tmp_path / name
        shutil.copytree(DATA / name, folder)
    return TraceFollower(folder / "trace.json", remove=tmp_path is not None)


def stats_delta(name: str) -> dict[int, int]:
    before, after = (
        parse_statistics(json.loads((DATA / name / f"stats_{when}.json").read_text()))[0]
        for when in ("before", "after")
    )
    return after.minus(before).executions_by_size()


@pytest.mark.parametrize("name", ["concurrency", "lone", "burst2", "burst4"])
def test_batches_rebuilt_from_traces_equal_the_statistics_api(name: str) -> None:
    batches = group_batches(capture(name).poll())
    assert dict(Counter(b.size for b in batches)) == stats_delta(name)


def test_a_lone_request_waits_out_the_queue_delay() -> None:
    (batch,) = with_reasons(group_batches(capture("lone").poll()), {CONFIG.name: CONFIG})
    assert batch.size == 1
    assert batch.oldest_wait_ns >= 0.9 * 500_000
    assert batch.reason == QUEUE_DELAY


def test_a_burst_of_a_preferred_size_leaves_at_once() -> None:
    batches = with_reasons(group_batches(capture("burst2").poll()), {CONFIG.name: CONFIG})
    assert [b.size for b in batches] == [2] * 5
    assert {b.reason for b in batches} == {PREFERRED_SIZE}
    assert all(b.compute_start_ns - b.last_arrival_ns < 500_000 for b in batches)


def test_a_full_batch_left_because_it_was_full() -> None:
    batches = with_reasons(group_batches(capture("burst4").poll()), {CONFIG.name: CONFIG})
    assert {b.reason for b in batches if b.size == 4} == {MAX_BATCH_SIZE}


def test_without_a_batcher_or_a_delay_an_idle_instance_takes_what_is_there() -> None:
    batch = group_batches(capture("concurrency").poll())[0]
    unbatched = replace(CONFIG, dynamic=None)
    no_delay = replace(CONFIG, dynamic=DynamicBatching((), 0))
    for config in (unbatched, no_delay):
        (b,) = with_reasons([replace(batch, requests=batch.requests[:1])], {CONFIG.name: config})
        assert b.reason == INSTANCE_IDLE


def test_each_request_keeps_its_id_and_timestamps() -> None:
    requests = capture("concurrency").poll()
    assert len(requests) == 180
    assert len({r.request_id for r in requests}) == 180
    assert all(r.compute_start_ns >= r.queue_start_ns for r in requests)
    assert all(r.compute_end_ns > r.compute_start_ns for r in requests)
    first = requests[0]
    assert TracedRequest.from_json(json.loads(json.dumps(first.to_json()))) == first


def test_one_lane_for_one_instance() -> None:
    assert {b.lane for b in group_batches(capture("concurrency").poll())} == {0}


def sequence(tmp_path: Path) -> Path:
    """The four captures' files in one folder, as Triton numbered them (0 to 3)."""
    folder = tmp_path / "all"
    folder.mkdir()
    for name in ("concurrency", "lone", "burst2", "burst4"):
        for path in (DATA / name).glob("trace.json.*"):
            shutil.copy(path, folder / path.name)
    return folder


def test_files_are_read_in_order_and_removed(tmp_path: Path) -> None:
    folder = sequence(tmp_path)
    follower = TraceFollower(folder / "trace.json")
    requests = follower.poll()
    assert len(requests) == 180 + 1 + 10 + 20
    assert requests[180].request_id == "lone"  # file 1 after file 0
    assert follower.stats.files_read == 4 and follower.stats.gaps == 0
    assert not list(folder.glob("trace.json.*"))
    assert follower.poll() == []


def test_a_file_still_being_written_waits_and_a_stale_one_gives_what_it_has(
    tmp_path: Path,
) -> None:
    follower = capture("lone", tmp_path)
    path = tmp_path / "lone" / "trace.json.1"
    whole = (DATA / "concurrency" / "trace.json.0").read_text()
    path.write_text(whole[: len(whole) // 2])  # cut in the middle of an entry
    assert follower.poll() == []  # fresh: Triton may still be writing it
    assert path.exists()
    old = time.time() - 60
    os.utime(path, (old, old))
    salvaged = follower.poll()
    assert 0 < len(salvaged) < 180
    assert follower.stats.gaps == 1
    assert not path.exists()


def test_a_restart_and_a_missing_file(tmp_path: Path) -> None:
    folder = sequence(tmp_path)
    follower = TraceFollower(folder / "trace.json")
    (folder / "trace.json.1").unlink()  # someone removed it before it was read
    follower.poll()
    assert follower.stats.gaps == 1
    # Triton restarted: it numbers its files from 0 again.
    shutil.copy(DATA / "lone" / "trace.json.1", folder / "trace.json.0")
    assert [r.request_id for r in follower.poll()] == ["lone"]
    assert follower.stats.restarts == 1


def test_salvage_keeps_only_whole_entries() -> None:
    text = (DATA / "lone" / "trace.json.1").read_text()
    entries = json.loads(text)
    assert salvage(text) == entries
    assert salvage(text[: text.rindex("{")]) == entries[:-1]
    assert salvage("") == []


def test_a_trace_without_execution_is_counted_not_kept() -> None:
    entries = json.loads((DATA / "lone" / "trace.json.1").read_text())
    cut = [e for e in entries if "COMPUTE_START" not in json.dumps(e)]
    parsed = parse_entries(cut)
    assert parsed.requests == [] and parsed.incomplete == 1


def test_exact_percentiles_of_queue_waits() -> None:
    waits = [r.queue_wait_ns for r in capture("concurrency").poll()]
    assert percentile(waits, 0.5) == sorted(waits)[89]
    assert percentile(waits, 1.0) == max(waits)
    assert percentile([], 0.99) is None


def test_a_config_is_needed_for_a_reason() -> None:
    batches = with_reasons(group_batches(capture("lone").poll()), {})
    assert [b.reason for b in batches] == [""]
