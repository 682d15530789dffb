"""The traffic patterns, each an async driver of a client's slots.

- serial: N requests one at a time, a fixed gap after each answer.
- concurrent: N requests at once (last-byte synchronised over HTTP, see loadgen.clients.burst).
- closed loop: C requests always in flight for a duration (or N requests).
- open loop: arrivals at the rate a load shape gives (constant or Poisson), whether or not
  earlier answers came back. A request that finds every slot busy waits in a backlog and its
  latency counts from when it was due, so a slow server cannot hide its queue (no
  coordinated omission).

Every driver stops sending when ``stop`` is set and returns once nothing is in flight.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from typing import Any

from loadgen.clients.slots import Client, wait_idle
from loadgen.engine import pacing
from loadgen.engine.shapes import Arrivals

Stop = Callable[[], bool]
SLOTS_AHEAD_S = 0.025  # open loop: connections opened up front, in seconds of arrivals


async def serial(client: Client, n: int, gap_s: float, stop: Stop) -> None:
    rec = client.recorder
    idle: deque[Any] = deque(await client.open_slots(1))
    client.on_done = idle.append
    for i in range(n):
        if stop():
            break
        if not idle:  # the connection died with the last request: a fresh one, or OSError
            idle.extend(await client.open_slots(1))
        done = rec.done
        client.send(idle.popleft(), i, rec.now())
        # Low rate by definition: a short poll costs nothing and also wakes on a request
        # that failed with its connection (which hands no slot back).
        while rec.done == done:
            await asyncio.sleep(0.0002)
        if i < n - 1 and gap_s > 0:
            await asyncio.sleep(gap_s)
        await asyncio.sleep(0)  # let a replacement connection arrive


async def concurrent(client: Client, n: int, stop: Stop) -> None:
    slots = await client.open_slots(n)
    if stop():
        return
    await client.burst(slots, 0)
    await wait_idle(client.recorder)


async def closed_loop(
    client: Client, concurrency: int, duration_s: float | None, limit: int | None, stop: Stop
) -> None:
    slots = await client.open_slots(concurrency)
    rec = client.recorder
    deadline = rec.now() + duration_s if duration_s else None
    state = {"next": 0, "sending": True}

    def on_done(slot: Any) -> None:
        if state["sending"]:
            i = state["next"]
            now = rec.now()
            if stop() or (deadline is not None and now >= deadline) or (limit and i >= limit):
                state["sending"] = False
                return
            state["next"] = i + 1
            client.send(slot, i, now)

    client.on_done = on_done
    for slot in slots:
        on_done(slot)
    while state["sending"] or rec.in_flight:
        if stop() or (deadline is not None and rec.now() >= deadline):
            state["sending"] = False
        await asyncio.sleep(0.01)


async def open_loop(
    client: Client,
    arrivals: Arrivals,
    max_in_flight: int,
    stop: Stop,
    origin: float | None = None,
) -> int:
    """Sends at ``arrivals``' due times, each at its microsecond (``pacing.until``); returns
    how many due requests were never sent (a backlog cut short by a stop, or one that no
    connection could take within the request timeout). ``origin``: when, on the recorder's
    clock, the schedule starts (now if None; the workers of ``--processes`` share one)."""
    rec = client.recorder
    # Enough connections for the first rate's arrivals over SLOTS_AHEAD_S of slow answers:
    # a request that finds none free waits for one to open, and leaves late.
    first_rate = arrivals.rate() or 0.0
    ahead = max(8, math.ceil(first_rate * SLOTS_AHEAD_S))
    idle: deque[Any] = deque(await client.open_slots(min(max_in_flight, ahead)))
    opened = [len(idle), 0]  # slots open, slots opening
    backlog: deque[tuple[int, float]] = deque()

    def on_done(slot: Any) -> None:
        if backlog and not stop():
            i, due = backlog.popleft()
            client.send(slot, i, due)
        else:
            idle.append(slot)

    async def grow() -> None:
        opened[1] += 1
        try:
            (slot,) = await client.open_slots(1)
            opened[0] += 1
        except OSError:  # server gone: the backlog waits, and is dropped at the end
            return
        finally:
            opened[1] -= 1
        on_done(slot)

    client.on_done = on_done
    t0 = rec.now() if origin is None else origin
    due, i = t0 + arrivals.offset, 0
    while not stop():
        now = rec.now()
        rate = None
        while due <= now:
            rate = arrivals.rate()
            if rate is None:
                break
            if idle:
                client.send(idle.pop(), i, due)
            else:
                backlog.append((i, due))
                if sum(opened) < max_in_flight:
                    asyncio.ensure_future(grow())
            i += 1
            arrivals.advance(rate)
            due = t0 + arrivals.offset
        if due <= now and rate is None:
            break
        await pacing.until(due, rec.now)
    drain_until = rec.now() + client.timeout_s
    while backlog and not stop() and rec.now() < drain_until:
        await asyncio.sleep(0.01)
    dropped = len(backlog)
    backlog.clear()
    while rec.in_flight:
        await asyncio.sleep(0.01)
    return dropped
