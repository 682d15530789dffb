"""Open-loop sends at their due time to the microsecond, on the event loop that sends them.

asyncio's default selector waits in epoll, whose timeout is whole milliseconds rounded up, so
sends due within a millisecond went out together (docs/validation/pacing.md). Batching feeds
on exactly that error, so open-loop runs are paced here: their loop (``loop_factory``) also
arms a timerfd for each wait's exact timeout (select() would do it too, but refuses
descriptors past 1,024); the loop's thread asks for 1 ns of timer slack (Linux lets a normal
thread's timers fire up to 50 us late to batch wake-ups); and ``until(due)`` sleeps until
``YIELD_S`` before the due time, then turns the loop without sleeping until ``SPIN_S``
before it, then spins on the clock for the last microseconds.

perf_analyzer paces its request-rate mode the same way (sleep, then spin). A send that is
late anyway (a busy core, a long callback) leaves at once, and the recorder keeps how late
it was (``Recorder.mark_sent``): the run's lateness says whether the schedule was kept.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import select
import selectors
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

YIELD_S = 0.0002  # sleep until this long before the due time; then hand the loop turns
SPIN_S = 0.00003  # and spin for the last of it: one turn of the loop may take this long
SWITCH_S = 0.0002  # the GIL switch interval during an open-loop run (Python's default: 5 ms)
PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30
TIGHT_SLACK_NS = 1


class _TimeSpec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _TimeSpec), ("it_value", _TimeSpec)]


CLOCK_MONOTONIC = 1
TFD_NONBLOCK, TFD_CLOEXEC = 0o4000, 0o2000000


class TimerEpollSelector(selectors.EpollSelector):
    """epoll whose waits end at the timeout to the nanosecond: a timerfd armed for each wait
    sits in the epoll set (outside the selector's map, so no caller ever sees it)."""

    def __init__(self, libc: ctypes.CDLL) -> None:
        super().__init__()
        self._settime = libc.timerfd_settime
        self._timer = int(libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC))
        if self._timer < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._selector.register(self._timer, select.EPOLLIN)  # type: ignore[attr-defined]
        self._armed = False

    def _arm(self, seconds: float) -> None:
        ns = max(int(seconds * 1e9), 1)  # 0 would disarm it
        spec = _ITimerSpec(_TimeSpec(0, 0), _TimeSpec(ns // 1_000_000_000, ns % 1_000_000_000))
        self._settime(self._timer, 0, ctypes.byref(spec), None)
        self._armed = True

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout > 0:
            self._arm(timeout)
            timeout += 0.001  # epoll's own timeout only backs the timer up
        try:
            return super().select(timeout)
        finally:
            if self._armed:
                self._armed = False
                self._settime(self._timer, 0, ctypes.byref(_ITimerSpec()), None)
                try:
                    os.read(self._timer, 8)  # it fired: level-triggered, so clear it
                except BlockingIOError:
                    pass

    def close(self) -> None:
        os.close(self._timer)
        super().close()


def loop_factory() -> asyncio.AbstractEventLoop:
    """An event loop whose sleeps end to the microsecond (see the module doc); asyncio's
    default loop where timerfd is missing (not Linux)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "timerfd_create"):
        return asyncio.new_event_loop()
    return asyncio.SelectorEventLoop(TimerEpollSelector(libc))


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _prctl() -> Callable[..., int] | None:
    libc = _libc()
    fn: Callable[..., int] | None = getattr(libc, "prctl", None) if libc is not None else None
    return fn


@contextmanager
def paced() -> Iterator[None]:
    """What an open-loop run sets for its duration, in the thread that runs it (threads it
    starts meanwhile, the store's writer, inherit it), restored after: tight timers, a
    shorter GIL switch interval, and real-time scheduling where the process may have it."""
    interval = sys.getswitchinterval()
    # A thread that holds the GIL keeps it up to the switch interval (5 ms) while the loop
    # waits to send: 200 us bounds that wait.
    sys.setswitchinterval(SWITCH_S)
    try:
        with tight_timers(), realtime():
            yield
    finally:
        sys.setswitchinterval(interval)


@contextmanager
def realtime() -> Iterator[None]:
    """SCHED_FIFO at the lowest real-time priority for the calling thread, where allowed
    (root or CAP_SYS_NICE; elsewhere a no-op), unless LOADGEN_REALTIME=0. On a busy machine
    a normal thread that wakes for a send waits its turn behind every runnable process, and
    the send leaves milliseconds late (the README has the figures). The thread sleeps
    between sends and spins at most ``YIELD_S`` before each, and the kernel keeps 5 % of
    every second for normal threads whatever real-time ones do."""
    if os.environ.get("LOADGEN_REALTIME", "1") == "0" or not hasattr(os, "sched_setscheduler"):
        yield
        return
    try:
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError:  # not allowed: normal scheduling, the lateness figures say how it went
        yield
        return
    try:
        yield
    finally:
        os.sched_setscheduler(0, policy, param)


@contextmanager
def tight_timers() -> Iterator[None]:
    """The calling thread's timer slack at 1 ns while the block runs, restored after (a
    no-op where prctl is missing: the pacing then just wakes a little later)."""
    prctl = _prctl()
    before = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0) if prctl is not None else -1
    if prctl is not None and before > 0:
        prctl(PR_SET_TIMERSLACK, TIGHT_SLACK_NS, 0, 0, 0)
    try:
        yield
    finally:
        if prctl is not None and before > 0:
            prctl(PR_SET_TIMERSLACK, before, 0, 0, 0)


async def until(due: float, now: Callable[[], float]) -> None:
    """Return at ``due`` on the clock ``now`` (seconds), or at once if it has passed."""
    left = due - now()
    if left > YIELD_S:
        await asyncio.sleep(left - YIELD_S)
    while due - now() > SPIN_S:
        await asyncio.sleep(0)  # one turn of the loop: answers are read, nothing sleeps
    while now() < due:
        pass
