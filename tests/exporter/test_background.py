"""Reading the targets off the scrape path (``read_interval_s``), on real captures.

The fetch function serves recorded snapshots and counts its calls, so the tests see
when the reader reads, how old the served data is, and that it stops when nobody scrapes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry

from exporter.collector import BatchingCollector, _Reader
from exporter.scrape import Snapshot
from exporter.targets import Target
from tests.exporter.replay import snapshot

INTERVAL_S = 0.2
TARGETS = [Target(f"http://127.0.0.1:{8000 + i}", "m") for i in range(3)]
EXECUTIONS = "triton_batching_executions_total"


class Source:
    """Every target answers the current moment; ``down`` ones raise."""

    def __init__(self, moment: str) -> None:
        self.moment = moment
        self.down: set[str] = set()
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, target: Target, _timeout_s: float) -> Snapshot:
        with self._lock:
            self.calls += 1
        if target.url in self.down:
            raise ConnectionError("down")
        return snapshot(self.moment)


@pytest.fixture
def registry() -> Iterator[Callable[[Source], CollectorRegistry]]:
    """Registries whose collectors read ``source`` in the background; closed when the test
    ends, so that no reader of this test reads or logs during the next one (a reader left
    running logged "scrape failed: ConnectionError: down" into another test's capture)."""
    made: list[BatchingCollector] = []

    def make(source: Source) -> CollectorRegistry:
        collector = BatchingCollector(
            TARGETS, timeout_s=1.0, fetch=source, read_interval_s=INTERVAL_S
        )
        made.append(collector)
        reg = CollectorRegistry(auto_describe=False)
        reg.register(collector)
        return reg

    yield make
    for collector in made:
        collector.close()


def executions(reg: CollectorRegistry, target: Target) -> float | None:
    labels = {"target": target.url, "model": "batch_add_model", "version": "1"}
    return reg.get_sample_value(EXECUTIONS, labels)


def ages(reg: CollectorRegistry) -> list[float]:
    values = [
        reg.get_sample_value("triton_batching_data_age_seconds", {"target": t.url}) for t in TARGETS
    ]
    assert all(v is not None for v in values)
    return [v for v in values if v is not None]


def test_the_first_scrape_waits_for_a_read_and_later_ones_serve_fresh_data(
    registry: Callable[[Source], CollectorRegistry],
) -> None:
    source = Source("rest")
    reg = registry(source)
    assert source.calls == 0  # registering reads nothing
    rest = executions(reg, TARGETS[0])
    assert rest is not None
    source.moment = "after_load"
    deadline = time.monotonic() + 4 * INTERVAL_S
    while executions(reg, TARGETS[0]) == rest and time.monotonic() < deadline:
        time.sleep(0.02)
    after = executions(reg, TARGETS[0])
    assert after is not None and after > rest
    assert max(ages(reg)) <= 2 * INTERVAL_S


def test_a_target_that_fails_is_down_in_the_next_read(
    registry: Callable[[Source], CollectorRegistry],
) -> None:
    source = Source("rest")
    reg = registry(source)
    up = "triton_batching_target_up"
    assert reg.get_sample_value(up, {"target": TARGETS[1].url}) == 1
    source.down.add(TARGETS[1].url)
    time.sleep(3 * INTERVAL_S)
    assert reg.get_sample_value(up, {"target": TARGETS[1].url}) == 0
    assert executions(reg, TARGETS[1]) is None
    assert reg.get_sample_value(up, {"target": TARGETS[0].url}) == 1


def test_the_reader_stops_without_scrapes_and_the_next_scrape_reads_afresh(
    monkeypatch: pytest.MonkeyPatch, registry: Callable[[Source], CollectorRegistry]
) -> None:
    monkeypatch.setattr(_Reader, "IDLE_READS", 3)
    source = Source("rest")
    reg = registry(source)
    ages(reg)
    time.sleep(6 * INTERVAL_S)  # idle after 3 intervals
    calls = source.calls
    time.sleep(5 * INTERVAL_S)
    assert source.calls == calls  # nobody scrapes: no reads
    assert max(ages(reg)) <= 2 * INTERVAL_S  # the scrape waited for a fresh read
    assert source.calls > calls


def test_a_read_running_long_does_not_hold_a_scrape_up() -> None:
    """With a read stuck in flight (its budget 36 s), a scrape whose data is older than two
    intervals serves the last read at once, its age above two intervals, instead of waiting
    for the stuck read (45 s: the join below would give up first)."""
    source = Source("rest")
    stuck, released, reading = threading.Event(), threading.Event(), threading.Event()

    def fetch(target: Target, timeout_s: float) -> Snapshot:
        if stuck.is_set():
            reading.set()
            released.wait(60)
        return source(target, timeout_s)

    collector = BatchingCollector(TARGETS, timeout_s=30.0, fetch=fetch, read_interval_s=INTERVAL_S)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    try:
        assert max(ages(reg)) <= 2 * INTERVAL_S
        stuck.set()
        assert reading.wait(10)
        time.sleep(3 * INTERVAL_S)  # the last read's data is now older than two intervals
        served: list[float] = []
        scrape = threading.Thread(target=lambda: served.extend(ages(reg)))
        scrape.start()
        scrape.join(timeout=10)
        assert not scrape.is_alive()
        assert min(served) > 2 * INTERVAL_S
    finally:
        released.set()  # the stuck read ends, so that close() does not wait for it
        collector.close()


def test_a_closed_collector_reads_and_logs_no_more(caplog: pytest.LogCaptureFixture) -> None:
    source = Source("rest")
    source.down.add(TARGETS[1].url)
    collector = BatchingCollector(TARGETS, timeout_s=1.0, fetch=source, read_interval_s=INTERVAL_S)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    assert reg.get_sample_value("triton_batching_target_up", {"target": TARGETS[1].url}) == 0
    collector.close()
    calls = source.calls
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="exporter.collector"):
        time.sleep(5 * INTERVAL_S)  # an open reader reads 5 times here, logging each
    assert source.calls == calls
    assert not caplog.records, caplog.text


def test_a_negative_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="read_interval_s"):
        BatchingCollector(TARGETS, read_interval_s=-1)
