"""gRPC client on grpc.aio with Triton's generated stubs (the ``--protocol grpc`` option).

The request message is built once and copied per request, with the inputs as
``raw_input_contents``; the answer is checked like the HTTP one (metadata shapes and
datatypes, OUTPUT_SUM bytes). All slots share one HTTP/2 channel, as perf_analyzer does.
There is no last-byte trick for gRPC: a burst sends its requests back to back.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from loadgen.checks import WRONG_SUM, check_outputs
from loadgen.clients import Client, Pending
from loadgen.errors import LoadgenError
from loadgen.limits import MAX_REQUEST_BYTES
from loadgen.recorder import FAILED, OK, TIMED_OUT
from loadgen.tracing import request_id

MAX_MESSAGE = 2 * MAX_REQUEST_BYTES


class GrpcClient(Client):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.template = service_pb2.ModelInferRequest(model_name=self.model.name)
        for t in self.tensors:
            tensor = self.template.inputs.add(name=t.name, datatype=t.datatype)
            tensor.shape.extend(t.shape)
        for o in self.outputs:
            self.template.outputs.add(name=o.name)
        self.offsets = []
        offset = 0
        for t in self.tensors:
            self.offsets.append((offset, offset + t.nbytes))
            offset += t.nbytes
        self.channel: grpc.aio.Channel | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self._valid_outputs: Any = None

    async def open_slots(self, n: int) -> list[Any]:
        if self.channel is None:
            a = self.address
            self.channel = grpc.aio.insecure_channel(
                f"{a.host}:{a.port}",
                options=[
                    ("grpc.max_send_message_length", MAX_MESSAGE),
                    ("grpc.max_receive_message_length", MAX_MESSAGE),
                ],
            )
            self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
            try:
                await asyncio.wait_for(self.channel.channel_ready(), timeout=5.0)
            except asyncio.TimeoutError:
                raise LoadgenError(
                    f"cannot reach Triton's gRPC port at {a.host}:{a.port}"
                ) from None
        return list(range(n))

    def send(self, slot: Any, index: int, start: float) -> None:
        inputs, expected = self.payloads.take(index)
        request = service_pb2.ModelInferRequest()
        request.CopyFrom(self.template)
        request.raw_input_contents.extend([inputs[a:b] for a, b in self.offsets])
        if self.id_token:
            request.id = request_id(self.id_token, index)
        self.recorder.mark_sent(start)
        task = asyncio.ensure_future(self._one(slot, Pending(index, start, expected), request))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _one(self, slot: Any, p: Pending, request: Any) -> None:
        outcome, error = OK, None
        try:
            response = await self.stub.ModelInfer(request, timeout=self.timeout_s)
            error = self.check(response, p.expected)
            if error is not None:
                outcome = FAILED
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                outcome, error = TIMED_OUT, f"no answer within {self.timeout_s:g}s"
            else:
                outcome, error = FAILED, f"gRPC {exc.code().name}: {exc.details()}"[:200]
        except asyncio.CancelledError:
            outcome, error = FAILED, "abandoned at a second Ctrl-C"
        except Exception as exc:
            outcome, error = FAILED, f"unreadable response: {type(exc).__name__}"
        finally:
            self.recorder.record(p.start, outcome, error, p.index)
        if outcome != OK or not self.closing:
            self.on_done(slot)

    def check(self, response: Any, expected: bytes) -> str | None:
        outputs = response.outputs
        if self._valid_outputs != outputs:
            contents = response.raw_output_contents
            got = [
                (o.name, o.datatype, list(o.shape), len(contents[i]) if i < len(contents) else None)
                for i, o in enumerate(outputs)
            ]
            error = check_outputs(got, self.outputs, self.lead)
            if error is not None:
                return error
            self._valid_outputs = outputs
            self._sum_index = next((i for i, o in enumerate(outputs) if o.name == "OUTPUT_SUM"), -1)
        if expected:
            i = self._sum_index
            if i < 0 or response.raw_output_contents[i] != expected:
                return WRONG_SUM
        return None

    async def burst(self, slots: list[Any], first_index: int) -> None:
        start = self.recorder.now()
        for k, slot in enumerate(slots):
            self.send(slot, first_index + k, start)

    def abandon_all(self, error: str) -> None:
        for task in list(self.tasks):
            task.cancel()

    async def close(self) -> None:
        self.closing = True
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.channel is not None:
            await self.channel.close()
