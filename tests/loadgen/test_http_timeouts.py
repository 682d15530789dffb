"""The HTTP/1.1 client against a server that reads requests and never answers: each request
times out, its connection is dropped and replaced, and a run that ends with replacements on
the way leaves no connection open behind it."""

from __future__ import annotations

import asyncio
import gc
import warnings

from loadgen.clients.http_client import HttpClient
from loadgen.engine import scenarios
from loadgen.results.recorder import Recorder
from tests.loadgen.test_grpc_wire import add_model, client_of


class Silent:
    """Accepts connections and reads what comes; answers nothing. Counts connections."""

    def __init__(self) -> None:
        self.accepted = 0
        self.server: asyncio.Server | None = None
        self.handlers: set[asyncio.Task[None]] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            while await reader.read(65536):
                pass
        finally:
            writer.close()
            self.handlers.discard(task)

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in list(self.handlers):
            task.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)


def test_timed_out_connections_are_replaced_and_none_is_left_open_at_the_end() -> None:
    silent = Silent()

    async def go() -> HttpClient:
        port = await silent.start()
        client = client_of(HttpClient, port, add_model(1), 0.05)
        try:
            await scenarios.closed_loop(client, 8, 1.0, None, lambda: False)
        finally:
            await client.close()
            await silent.stop()
        return client

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        client = asyncio.run(go())
        gc.collect()
    recorder = client.recorder
    assert isinstance(recorder, Recorder)
    s = recorder.summary()
    # Every request timed out, on a connection replaced for the next: far more connections
    # than the 8 slots (the server's count, not the client's).
    assert s.ok == 0 and s.timed_out == s.sent > 8, s.errors
    assert silent.accepted > 8
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == [], f"{len(unclosed)} left open, e.g. {unclosed[:2]}"


def test_a_replacement_still_connecting_when_the_client_closes_is_closed_too() -> None:
    silent = Silent()
    handed: list[object] = []

    async def go() -> None:
        port = await silent.start()
        client = client_of(HttpClient, port, add_model(1), 5.0)
        client.on_done = handed.append
        (conn,) = await client.open_slots(1)
        conn.transport.abort()  # the connection dies: a replacement starts connecting
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        await client.close()  # ... and the run ends before it is connected
        await asyncio.sleep(0.1)  # the connect would be done by now
        await silent.stop()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        asyncio.run(go())
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == [] and handed == [], (unclosed, handed)
