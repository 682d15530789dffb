"""The gRPC client's HTTP/2 against grpcio's own server (the C-core server Triton's gRPC
endpoint is built on), where a test can make answers slow, wrong or absent at will.

It serves ``ModelInfer`` for an add model: the sum of the inputs, or a sleep (timeouts), or
an error status, and it can be stopped and started again on the same port mid-run. The
happy path against Triton itself is in test_runs.py and test_verification.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from loadgen.clients import http2
from loadgen.clients.checks import WRONG_SUM
from loadgen.clients.grpc_client import GrpcClient
from loadgen.clients.payloads import Payloads, request_tensors
from loadgen.clients.slots import Client
from loadgen.clients.target import Address, ModelSpec, TensorSpec
from loadgen.engine import scenarios
from loadgen.results.recorder import Recorder

C = TypeVar("C", bound=Client)
SERVICE = "inference.GRPCInferenceService"
SLEEP_S = 3.0  # how long a "sleep" answer takes: past every client timeout here


def add_model(width: int) -> ModelSpec:
    spec = TensorSpec("INPUT_A", "FP32", (width,)), TensorSpec("INPUT_B", "FP32", (width,))
    return ModelSpec("add", "1", 4, spec, (TensorSpec("OUTPUT_SUM", "FP32", (width,)),))


class Server:
    """grpcio's aio server with one ModelInfer; ``behave(n)`` picks what request n gets."""

    def __init__(self, behave: Callable[[int], str]) -> None:
        self.behave = behave
        self.calls = 0
        self.port = 0
        self.server: grpc.aio.Server | None = None

    async def infer(self, request: Any, context: Any) -> Any:
        n, self.calls = self.calls, self.calls + 1
        what = self.behave(n)
        if what == "sleep":
            await asyncio.sleep(SLEEP_S)
        if what == "error":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad input: 100% wrong")
        a, b = (np.frombuffer(raw, np.float32) for raw in request.raw_input_contents)
        total = a - b if what == "wrong" else a + b
        response = service_pb2.ModelInferResponse(model_name=request.model_name)
        out = response.outputs.add(name="OUTPUT_SUM", datatype="FP32")
        out.shape.extend(request.inputs[0].shape)
        response.raw_output_contents.append(total.astype(np.float32).tobytes())
        return response

    async def start(self) -> None:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", 64 << 20),
                ("grpc.max_send_message_length", 64 << 20),
                # HTTP/2's defaults, kept: a 64 KiB window, 16 KiB frames (grpcio would
                # otherwise announce 4 MiB of each, and grow them as it measures).
                ("grpc.http2.lookahead_bytes", 65_535),
                ("grpc.http2.bdp_probe", 0),
                ("grpc.http2.max_frame_size", 16_384),
            ]
        )
        handler = grpc.unary_unary_rpc_method_handler(
            self.infer,
            request_deserializer=service_pb2.ModelInferRequest.FromString,
            response_serializer=service_pb2.ModelInferResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"ModelInfer": handler}),)
        )
        self.port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        await server.start()
        self.server = server

    async def stop(self) -> None:
        assert self.server is not None
        await self.server.stop(grace=None)


def client_of(kind: type[C], port: int, model: ModelSpec, timeout_s: float, **kwargs: Any) -> C:
    """A ``kind`` client (HTTP or gRPC) of ``model`` on loopback ``port``: batches of 1, the
    payloads seeded, the outcomes into a fresh recorder."""
    tensors, outputs = request_tensors(model, 1, {}, {})
    payloads = Payloads(model, tensors, seed=1)
    address = Address("127.0.0.1", port)
    return kind(address, model, tensors, outputs, payloads, Recorder(), timeout_s, **kwargs)


def client_for(server: Server, width: int = 1, timeout_s: float = 5.0) -> GrpcClient:
    return client_of(GrpcClient, server.port, add_model(width), timeout_s)


def closed_loop(
    behave: Callable[[int], str],
    requests: int,
    concurrency: int = 4,
    width: int = 1,
    timeout_s: float = 5.0,
) -> tuple[GrpcClient, Server]:
    async def go() -> tuple[GrpcClient, Server]:
        server = Server(behave)
        await server.start()
        client = client_for(server, width, timeout_s)
        try:
            await scenarios.closed_loop(client, concurrency, None, requests, lambda: False)
        finally:
            await client.close()
            await server.stop()
        return client, server

    return asyncio.run(go())


def recorded(client: GrpcClient) -> Recorder:
    assert isinstance(client.recorder, Recorder)
    return client.recorder


def test_answers_are_checked_and_big_requests_respect_flow_control() -> None:
    # 12,000 floats per input: 96 kB a request, past the server's 64 KiB window and its
    # 16 KiB frames, so requests go out in pieces and wait for its WINDOW_UPDATEs.
    client, server = closed_loop(lambda n: "add", requests=24, width=12_000)
    s = recorded(client).summary()
    assert (s.sent, s.ok, s.failed, s.timed_out) == (24, 24, 0, 0), s.errors
    assert server.calls == 24 and len(client.conns) <= 1
    wrong, _ = closed_loop(lambda n: "wrong" if n % 2 else "add", requests=20)
    assert recorded(wrong).summary().errors == {WRONG_SUM: 10}


def test_an_error_status_is_a_failure_named_by_its_code_and_message() -> None:
    client, _ = closed_loop(lambda n: "error" if n < 5 else "add", requests=20)
    s = recorded(client).summary()
    assert (s.sent, s.ok, s.failed) == (20, 15, 5)
    assert s.errors == {"gRPC INVALID_ARGUMENT: bad input: 100% wrong": 5}


def test_a_late_answer_times_out_and_its_slot_goes_on_on_the_same_connection() -> None:
    # The timeout leaves the answers that come a second: a CI run on the 2 shared cores once
    # stalled one for more than 0.3 s (3 timed out, not 2). The late ones sleep SLEEP_S.
    client, server = closed_loop(
        lambda n: "sleep" if n < 2 else "add", requests=10, concurrency=2, timeout_s=1.0
    )
    s = recorded(client).summary()
    assert (s.sent, s.ok, s.timed_out, s.failed) == (10, 8, 2, 0)
    assert s.errors == {"no answer within 1s": 2}
    assert server.calls == 10


def test_a_server_that_goes_away_and_comes_back() -> None:
    async def go() -> Recorder:
        server = Server(lambda n: "add")
        await server.start()
        client = client_for(server, timeout_s=2.0)

        async def bounce() -> None:
            await asyncio.sleep(0.4)
            await server.stop()
            await asyncio.sleep(0.4)
            await server.start()  # the same port

        task = asyncio.ensure_future(bounce())
        try:
            await scenarios.closed_loop(client, 4, 2.0, None, lambda: False)
        finally:
            await task
            await client.close()
            await server.stop()
        return recorded(client)

    rec = asyncio.run(go())
    s = rec.summary()
    assert s.sent == s.ok + s.failed + s.timed_out
    # The ones in flight when it went, and a few the stopping server cancelled: a handful,
    # not a spin of failures while it is away (slots wait for a new connection).
    assert 1 <= s.failed <= 20 and s.timed_out == 0, s.errors
    going = ("connection lost", "connection closed by the server", "gRPC CANCELLED", "gRPC UNAV")
    assert all(kind.startswith(going) for kind in s.errors), s.errors
    late = [row for row in rec.timeline() if row["second"] >= 1]
    assert sum(row["ok"] for row in late) > 0  # it reconnected and went on


def test_request_header_block_decodes_as_the_grpc_request() -> None:
    import hpack

    block = http2.request_headers("127.0.0.1:8001", "/inference.GRPCInferenceService/ModelInfer")
    assert hpack.Decoder().decode(block) == [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/inference.GRPCInferenceService/ModelInfer"),
        (":authority", "127.0.0.1:8001"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]


@pytest.mark.parametrize("value", [0, 14, 15, 16, 300, 70_000])
def test_hpack_integers(value: int) -> None:
    import hpack

    name = "x" * value if value < 20_000 else "y" * value
    block = b"\x00" + http2._string("n") + http2._string(name)
    assert hpack.Decoder(max_header_list_size=10**6).decode(block) == [("n", name)]
