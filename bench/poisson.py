"""A minimal bounded open-loop Poisson sender for the advisor's validation bench.

The load generator's API (branch ``loadgen``) was not in main when this bench was
written, so this is a small stand-in: raw HTTP/1.1 keep-alive connections on
asyncio (cheaper per request than tritonclient, so the sender disturbs the 2 cores
less), requests sent at precomputed exponential inter-arrival times whatever the
server does, and a cap on connections in flight (the load is bounded: a request
that would need more is counted as dropped, not queued).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from loadgen.clients.burst import infer_body


@dataclass
class SendResult:
    send_times: list[float] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    dropped: int = 0
    client_cpu_s: float = 0.0


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer


async def _infer(conn: _Conn, request: bytes) -> bool:
    conn.writer.write(request)
    await conn.writer.drain()
    status = await conn.reader.readline()
    length = 0
    while True:
        line = await conn.reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    await conn.reader.readexactly(length)
    return status.split()[1:2] == [b"200"]


async def _run(
    host: str, port: int, model: str, rate: float, duration_s: float, seed: int, max_conns: int
) -> SendResult:
    body = infer_body({"INPUT_A": [1.0], "INPUT_B": [2.0]})
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    request = head + body
    rng = random.Random(seed)
    idle: list[_Conn] = []
    open_conns = 0
    result = SendResult()
    tasks: set[asyncio.Task[None]] = set()
    loop = asyncio.get_running_loop()

    async def one(conn: _Conn, sent: float) -> None:
        try:
            ok = await _infer(conn, request)
            result.latencies_s.append(loop.time() - sent)
            result.errors += not ok
            idle.append(conn)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            result.errors += 1
            conn.writer.close()

    start = loop.time()
    cpu_start = time.process_time()
    due = start
    while due - start < duration_s:
        due += rng.expovariate(rate)
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if idle:
            conn = idle.pop()
        elif open_conns < max_conns:
            reader, writer = await asyncio.open_connection(host, port)
            conn = _Conn(reader, writer)
            open_conns += 1
        else:
            result.dropped += 1
            continue
        now = loop.time()
        result.send_times.append(now)
        task = asyncio.create_task(one(conn, now))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=30)
    result.client_cpu_s = time.process_time() - cpu_start
    for conn in idle:
        conn.writer.close()
    return result


def poisson_load(
    host: str,
    port: int,
    model: str,
    rate: float,
    duration_s: float,
    seed: int = 1,
    max_conns: int = 128,
) -> SendResult:
    """Send Poisson arrivals at ``rate``/s for ``duration_s``; wait for the answers."""
    return asyncio.run(_run(host, port, model, rate, duration_s, seed, max_conns))
