"""The HTTP/1.1 client against a server that reads requests and never answers: each request
times out, its connection is dropped and replaced, and a run that ends with replacements on
the way leaves no connection open behind it."""

from __future__ import annotations

import asyncio
import gc
import warnings

from loadgen.clients.http_client import HttpClient
from loadgen.clients.payloads import Payloads, request_tensors
from loadgen.clients.target import Address
from loadgen.engine import scenarios
from loadgen.results.recorder import Recorder
from tests.loadgen.test_grpc_wire import add_model


class Silent:
    """Accepts connections and reads what comes; answers nothing. Counts connections."""

    def __init__(self) -> None:
        self.accepted = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while await reader.read(65536):
                pass
        finally:
            writer.close()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])


def test_timed_out_connections_are_replaced_and_none_is_left_open_at_the_end() -> None:
    silent = Silent()

    async def go() -> HttpClient:
        port = await silent.start()
        model = add_model(1)
        tensors, outputs = request_tensors(model, 1, {}, {})
        client = HttpClient(
            Address("127.0.0.1", port),
            model,
            tensors,
            outputs,
            Payloads(model, tensors, seed=1),
            Recorder(),
            0.05,
        )
        try:
            await scenarios.closed_loop(client, 8, 1.0, None, lambda: False)
        finally:
            await client.close()
            assert silent.server is not None
            silent.server.close()
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
