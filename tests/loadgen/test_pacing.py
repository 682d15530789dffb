"""Open-loop sends on schedule (issue 25).

The unit tests drive the pacer and the open-loop scenario on a fake clock. The integration
test checks the schedule where it matters, on the wire: tcpdump, a process the load
generator does not control, stamps every HTTP POST that reaches Triton's port on loopback.
Sends that left on asyncio's millisecond tick went in pairs at 2,000/s (36 % of the gaps
under half the ideal on an idle machine, 54 % on a loaded one); the bound here, 25 %, is what
the new pacer keeps while the suite's other worker loads the second core (16.6 % seen there,
0.1-0.2 % with the machine to itself): the tick breaks it, the machine's load does not. The
sends of a sender the machine holds behind its schedule (a stall, or a whole run behind) are
told apart on the wire and left out.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from bench.wire import Capture, behind_schedule, gap_stats
from loadgen.clients.slots import OK, Client
from loadgen.engine import pacing, scenarios
from loadgen.engine.runner import RunParams, run
from loadgen.engine.shapes import Arrivals, ConstantRate, count_arrivals
from loadgen.results.recorder import LATE_THRESHOLD_S, Recorder
from stacksettings import Settings


class TickingClock:
    """A clock that moves ``step`` seconds each time it is read: a pacer that stops reading
    it before the due time returns early, one that reads it past the due time returns late."""

    def __init__(self, step: float) -> None:
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


UNDER_HALF_BOUND = 0.25
# Gaps sent on schedule that the wire test needs to judge the spacing: a tick's pairs would
# put about 50 of them under half the ideal, where the bound allows 25.
MIN_ON_SCHEDULE = 100


def test_the_pacer_returns_at_the_due_time_not_a_tick_later() -> None:
    clock = TickingClock(step=1e-6)
    for due in (0.0005, 0.0021, 0.0107):  # under, around and well past the yield margin
        clock.t = 0.0
        asyncio.run(pacing.until(due, clock))
        assert due <= clock.t <= due + 2e-6  # the first read at or past the due time


def test_the_pacer_returns_at_once_for_a_send_already_due() -> None:
    clock = TickingClock(step=1e-6)
    clock.t = 0.5
    asyncio.run(pacing.until(0.1, clock))
    assert clock.t <= 0.5 + 5e-6  # a few reads, no sleep and no spin


class Stamping(Client):
    """Answers at once and keeps (due, sent) of each request on the recorder's clock."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.timeout_s = 10.0
        self.closing = False
        self.sent_at: list[tuple[float, float]] = []

    async def open_slots(self, n: int) -> list[Any]:
        return list(range(n))

    def send(self, slot: Any, index: int, start: float) -> None:
        self.recorder.mark_sent(start)
        self.sent_at.append((start, self.recorder.now()))
        self.recorder.record(start, OK)
        asyncio.get_running_loop().call_soon(self.on_done, slot)


def test_open_loop_sends_each_request_at_its_due_time_on_a_fake_clock() -> None:
    clock = TickingClock(step=2e-7)  # the clock moves only as the scenario reads it
    rec = Recorder(clock=clock, late_threshold_s=LATE_THRESHOLD_S)
    client = Stamping(rec)
    arrivals = Arrivals(ConstantRate(2000, 0.05), False, 0)
    not_sent = asyncio.run(scenarios.open_loop(client, arrivals, 8, lambda: False))
    assert not_sent == 0 and len(client.sent_at) == 100
    lateness = [sent - due for due, sent in client.sent_at]
    assert min(lateness) >= 0 and max(lateness) < 5e-6
    gaps = [b[1] - a[1] for a, b in zip(client.sent_at, client.sent_at[1:], strict=False)]
    assert all(abs(g - 0.0005) < 5e-6 for g in gaps)
    late = rec.summary().send_lateness_s
    assert late is not None and late.max is not None and late.max < 1e-5


def test_open_loop_starts_at_the_origin_it_is_given() -> None:
    clock = TickingClock(step=2e-7)
    rec = Recorder(clock=clock, late_threshold_s=LATE_THRESHOLD_S)
    client = Stamping(rec)
    arrivals = Arrivals(ConstantRate(1000, 0.005), False, 0)
    asyncio.run(scenarios.open_loop(client, arrivals, 8, lambda: False, origin=0.0003))
    assert [round(due, 6) for due, _ in client.sent_at] == [
        round(0.0003 + i * 0.001, 6) for i in range(5)
    ]


def stamps_of(gaps: list[float]) -> list[float]:
    stamps = [0.0]
    for gap in gaps:
        stamps.append(stamps[-1] + gap)
    return stamps


def test_a_stall_and_its_catch_up_are_told_from_a_ticking_sender() -> None:
    ideal = 0.0005
    # On schedule, then a 150 ms stall, the 299 requests due in it back to back, then on
    # schedule again: the stall and the catch-up are flagged until the sender is within
    # BEHIND_S (2 ms, 4 ideal gaps) of its schedule; the last 3 sends of the burst are not.
    stamps = stamps_of([ideal] * 100 + [0.15025] + [0.0] * 299 + [ideal] * 100)
    flagged = behind_schedule(stamps, ideal)
    assert flagged == [False] * 100 + [True] * 297 + [False] * 103
    stats = gap_stats(stamps, 2000, poisson=False)
    assert stats.under_half > 0.5 and stats.under_half_on_schedule == pytest.approx(3 / 203)
    assert stats.behind_share == pytest.approx(297 / 500) and stats.on_schedule == 203
    # Sends on a 1 ms tick go in pairs, never more than a tick late: every short gap counts.
    ticking = stamps_of([0.0, 0.001] * 500)
    assert not any(behind_schedule(ticking, ideal))
    stats = gap_stats(ticking, 2000, poisson=False)
    assert stats.under_half_on_schedule == stats.under_half == 0.5
    # A sender that falls behind in many small delays, none a stall, and never catches up.
    assert behind_schedule(stamps_of([0.000575] * 100), ideal) == [False] * 26 + [True] * 74
    # Three stamps the capture dropped in a second do not make an on-time sender look behind.
    dropped = [k * ideal for k in range(2000) if k not in (100, 500, 900)]
    assert not any(behind_schedule(dropped, ideal))


@pytest.mark.integration
@pytest.mark.alone  # a CI run beside another worker's test: a 250 ms stall, 25 % of gaps short
def test_sends_at_2000_per_second_are_spaced_on_the_wire(running_stack: Settings) -> None:
    url = running_stack.url("triton_http")
    run(RunParams("rate", url=url, rate=200, duration_s=0.5, seed=1))  # connections, warm
    with Capture(running_stack.port("triton_http"), "http") as capture:
        result = run(RunParams("rate", url=url, rate=2000, duration_s=2, seed=1))
    stamps = capture.stamps()
    capture.close()
    c = result.summary.client
    assert c.sent == count_arrivals(ConstantRate(2000, 2), False, 1) > 3990
    stats = gap_stats(stamps, 2000, poisson=False)
    # The observer saw nearly every request, each once. A stamp tcpdump dropped on a busy
    # machine only merges two gaps into a longer one: it never makes a short gap.
    assert c.sent >= stats.requests >= 0.95 * c.sent, stats
    # A sender the machine holds back (one 150 ms stall in a CI run at load average 3.5; a
    # whole run 40 ms behind in another, at 2.5) sends what is due back to back, as it must:
    # those gaps are not the pacer's choice. The wire tells them apart
    # (bench.wire.behind_schedule: more than 2 ms behind, where a 1 ms tick never is), and
    # the spacing is judged on the rest, of which there must be enough to see a tick's pairs.
    why = (stats, c.send_lateness_s, os.getloadavg())
    assert stats.on_schedule >= MIN_ON_SCHEDULE, why
    assert stats.under_half_on_schedule < UNDER_HALF_BOUND, why
