"""Late sends in open-loop runs: counted past a threshold, with latency from the due time.

The scenario runs against an in-process client that answers after a fixed service time on
one slot (no server): arrivals faster than it can serve queue up, go out late, and their
latency must include the wait (no coordinated omission).
"""

from __future__ import annotations

import asyncio
from typing import Any

from loadgen.clients.slots import OK, Client
from loadgen.engine import scenarios
from loadgen.engine.shapes import Arrivals, ConstantRate
from loadgen.reports import report
from loadgen.results.recorder import LATE_THRESHOLD_S, Recorder
from loadgen.results.summary import ClientSummary


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_send_counts_as_late_only_past_the_threshold() -> None:
    clock = Clock()
    rec = Recorder(clock=clock, late_threshold_s=0.001)
    clock.t = 0.0009
    rec.mark_sent(0.0)  # 0.9 ms after due: on time
    clock.t = 0.0031
    rec.mark_sent(0.002)  # 1.1 ms after due: late
    clock.t = 0.5
    rec.mark_sent(0.5)
    s = rec.summary()
    assert (s.sent, s.late_sends, s.late_threshold_s) == (3, 1, 0.001)
    assert "late_sends" not in Recorder().summary().to_json()  # closed loop: no such figure


def test_late_sends_survive_the_json_the_store_keeps() -> None:
    rec = Recorder(late_threshold_s=LATE_THRESHOLD_S)
    rec.mark_sent(-1.0)
    data = rec.summary().to_json()
    assert (data["late_sends"], data["late_threshold_s"]) == (1, LATE_THRESHOLD_S)
    assert ClientSummary.from_json(data) == rec.summary()


class OneSlot(Client):
    """One request at a time, each answered ``service_s`` after it went out."""

    def __init__(self, recorder: Recorder, service_s: float) -> None:
        self.recorder = recorder
        self.service_s = service_s
        self.timeout_s = 10.0
        self.closing = False
        self.sent_at: list[tuple[float, float]] = []  # (due, actually sent)

    async def open_slots(self, n: int) -> list[Any]:
        return [0]

    def send(self, slot: Any, index: int, start: float) -> None:
        self.recorder.mark_sent(start)
        self.sent_at.append((start, self.recorder.now()))
        loop = asyncio.get_running_loop()
        loop.call_later(self.service_s, self._answer, slot, start)

    def _answer(self, slot: Any, start: float) -> None:
        self.recorder.record(start, OK)
        self.on_done(slot)


def test_a_backlog_goes_out_late_and_its_latency_counts_from_the_due_time() -> None:
    rec = Recorder(late_threshold_s=LATE_THRESHOLD_S)
    client = OneSlot(rec, service_s=0.010)  # serves 100/s at most
    not_sent = asyncio.run(
        scenarios.open_loop(client, Arrivals(ConstantRate(200, 0.5), False, 0), 1, lambda: False)
    )
    s = rec.summary()
    assert not_sent == 0 and s.sent == s.ok == 100
    waited = sum(1 for due, sent in client.sent_at if sent - due > LATE_THRESHOLD_S)
    assert s.late_sends == waited >= 90  # all but the first few queued behind one slot
    # The last one was due at about 0.5 s and answered at about 1.0 s: its latency is that
    # half second, not the 10 ms it spent on the wire.
    assert s.latency_s.max is not None and s.latency_s.max > 0.4
    assert s.latency_s.p50 is not None and s.latency_s.p50 > 0.1
    line = report.late_sends(s.late_sends, s.sent, s.late_threshold_s)
    assert line.startswith(f"{s.late_sends} of 100 (") and "more than 1 ms" in line
