"""gRPC client (the ``--protocol grpc`` option): unary ``ModelInfer`` calls written as
HTTP/2 frames on asyncio transports, as the HTTP client writes HTTP/1.1.

Why not grpc.aio: its call machinery and its poller thread's hand-offs to the event loop
cost several times the CPU of everything else loadgen does per request, and neither pre-
encoded bytes nor one ``ModelStreamInfer`` stream per slot removed the cross-thread wake-
ups. Why not python-hyper's ``h2``, the sans-IO HTTP/2 library: its client side alone costs
about what grpc.aio costs in all. The frames a gRPC client needs are few, so they are
written here, and HPACK, the part with real state, is python-hyper's ``hpack``. (The
profiles and runs behind these choices: docs/validation/client-efficiency.md.) How a
request and its answer travel: :class:`GrpcClient`.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import deque
from typing import Any
from urllib.parse import unquote

import grpc
from tritonclient.grpc import service_pb2

from loadgen.clients import http2
from loadgen.clients.checks import WRONG_SUM, check_outputs, wrong_output
from loadgen.clients.payloads import Expected, Tensor
from loadgen.clients.slots import FAILED, OK, TIMED_OUT, Client, Pending, request_id
from loadgen.errors import LoadgenError

METHOD = "/inference.GRPCInferenceService/ModelInfer"
SLOTS_PER_CONNECTION = 256
CONNECT_TIMEOUT_S = 5.0
STATUS_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}
_FIELDS = service_pb2.ModelInferRequest.DESCRIPTOR.fields_by_name


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field_tag(name: str) -> bytes:
    """The key of a length-delimited field (wire type 2) of ModelInferRequest."""
    return _varint(_FIELDS[name].number << 3 | 2)


RAW_INPUT_TAG = _field_tag("raw_input_contents")
ID_TAG = _field_tag("id")


def encode_field(tag: bytes, data: bytes) -> bytes:
    return tag + _varint(len(data)) + data


class _Slot:
    """One place a request can be in flight: a stream of some connection, at most one."""

    __slots__ = ("conn", "stream", "pending", "data", "status")

    def __init__(self, conn: _Conn) -> None:
        self.conn = conn
        self.stream = 0
        self.pending: Pending | None = None
        self.data: list[bytes] = []  # the answer's DATA frames so far
        self.status = ""  # the answer's :status


class _Conn(asyncio.Protocol):
    """One HTTP/2 connection: frames in and out, the streams of the slots using it."""

    def __init__(self, client: GrpcClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.streams: dict[int, _Slot] = {}
        self.next_stream = 1
        self.live = True  # false once lost or told to go away: no new requests
        self.slots = 0
        # Sending: the server's windows and frame size; requests waiting for window.
        self.send_window = http2.DEFAULT_WINDOW
        self.initial_window = http2.DEFAULT_WINDOW
        self.max_frame = http2.DEFAULT_FRAME
        self.max_streams = SLOTS_PER_CONNECTION
        self.stream_windows: dict[int, int] = {}
        self.queued: deque[list[Any]] = deque()  # [stream, body, bytes sent]
        self.received = 0  # DATA bytes since the last connection WINDOW_UPDATE
        self.fragment: tuple[int, int, bytearray] | None = None  # HEADERS + CONTINUATIONs
        # While the answers of one read are handled, the requests they make way for are
        # held and go out in one write (one system call, not one per request).
        self.holding = False
        self.held: list[bytes] = []

    # ---- asyncio --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        wide = {
            http2.HEADER_TABLE_SIZE: 0,
            http2.ENABLE_PUSH: 0,
            http2.INITIAL_WINDOW_SIZE: http2.MAX_WINDOW,
        }
        transport.write(
            http2.PREFACE
            + http2.settings(wide)
            + http2.window_update(0, http2.MAX_WINDOW - http2.DEFAULT_WINDOW)
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self.live = False
        if not self.ready.done():
            self.ready.set_exception(ConnectionError("closed before its HTTP/2 settings"))
        self.client.connection_lost(self, exc)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        at, n = 0, len(buf)
        self.holding = True
        try:
            while n - at >= 9:
                length, kind, flags, stream = http2.parse_head(buf, at)
                end = at + 9 + length
                if end > n:
                    break
                self.frame(kind, flags, stream, bytes(buf[at + 9 : end]))
                at = end
        finally:
            del buf[:at]
            self.holding = False
            if self.held:
                held, self.held = self.held, []
                self.write(b"".join(held))

    # ---- frames in ------------------------------------------------------------------
    def frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == http2.DATA:
            self.received += len(payload)
            if self.received > http2.MAX_WINDOW // 2:
                self.write(http2.window_update(0, self.received))
                self.received = 0
            slot = self.streams.get(stream)
            if slot is not None:
                slot.data.append(_unpad(flags, payload))
                if flags & http2.END_STREAM:  # no trailers: no grpc-status
                    self.client.finish(slot, {})
        elif kind == http2.HEADERS:
            block = _unpad(flags, payload)
            if flags & http2.PRIORITY_FLAG:
                block = block[5:]
            if flags & http2.END_HEADERS:
                self.headers(stream, flags, block)
            else:
                self.fragment = (stream, flags, bytearray(block))
        elif kind == http2.CONTINUATION and self.fragment is not None:
            self.fragment[2].extend(payload)
            if flags & http2.END_HEADERS:
                stream, first_flags, fragments = self.fragment
                self.fragment = None
                self.headers(stream, first_flags, bytes(fragments))
        elif kind == http2.SETTINGS and not flags & http2.ACK:
            self.apply_settings(http2.parse_settings(payload))
        elif kind == http2.PING and not flags & http2.ACK:
            self.write(http2.frame(http2.PING, http2.ACK, 0, payload))
        elif kind == http2.WINDOW_UPDATE:
            (increment,) = struct.unpack(">I", payload[:4])
            if stream == 0:
                self.send_window += increment & 0x7FFFFFFF
            elif stream in self.stream_windows:
                self.stream_windows[stream] += increment & 0x7FFFFFFF
            self.write(self.flush())
        elif kind == http2.RST_STREAM:
            slot = self.streams.get(stream)
            if slot is not None:
                (code,) = struct.unpack(">I", payload[:4])
                self.client.fail(slot, f"gRPC stream reset by the server (HTTP/2 error {code})")
        elif kind == http2.GOAWAY:
            (last,) = struct.unpack(">I", payload[:4])
            self.client.go_away(self, last & 0x7FFFFFFF)

    def headers(self, stream: int, flags: int, block: bytes) -> None:
        slot = self.streams.get(stream)
        try:
            headers = self.client.header_cache.decode(block)
        except Exception as exc:  # a block we cannot read: the connection is unusable
            if slot is not None:
                self.client.fail(slot, f"unreadable response headers: {type(exc).__name__}")
            if self.transport is not None:
                self.transport.abort()
            return
        if slot is None:
            return
        if flags & http2.END_STREAM:
            self.client.finish(slot, headers)
        else:
            slot.status = headers.get(":status", "")

    def apply_settings(self, values: dict[int, int]) -> None:
        if http2.INITIAL_WINDOW_SIZE in values:
            delta = values[http2.INITIAL_WINDOW_SIZE] - self.initial_window
            self.initial_window += delta
            for stream in self.stream_windows:
                self.stream_windows[stream] += delta
        self.max_frame = values.get(http2.MAX_FRAME_SIZE, self.max_frame)
        self.max_streams = min(values.get(http2.MAX_CONCURRENT_STREAMS, 2**31), 2**31)
        self.write(http2.frame(http2.SETTINGS, http2.ACK, 0) + self.flush())
        if not self.ready.done():
            self.ready.set_result(None)

    # ---- frames out -----------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self.holding:
            self.held.append(data)
        elif data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def request(self, slot: _Slot, body: bytes) -> bytes:
        """The frames that open a stream for ``slot`` and send ``body`` (as far as the
        server's windows allow; the rest goes when they open)."""
        stream = self.next_stream
        self.next_stream += 2
        slot.stream, slot.data, slot.status = stream, [], ""
        self.streams[stream] = slot
        head = http2.frame(http2.HEADERS, http2.END_HEADERS, stream, self.client.header_block)
        n = len(body)
        if not self.queued and n <= self.send_window and n <= self.initial_window:
            if n <= self.max_frame:
                self.send_window -= n
                return head + http2.frame(http2.DATA, http2.END_STREAM, stream, body)
        self.stream_windows[stream] = self.initial_window
        self.queued.append([stream, body, 0])
        return head + self.flush()

    def flush(self) -> bytes:
        out = []
        while self.queued:
            item = self.queued[0]
            stream, body, sent = item
            if stream not in self.streams:  # cancelled meanwhile
                self.queued.popleft()
                self.stream_windows.pop(stream, None)
                continue
            room = min(
                len(body) - sent, self.send_window, self.stream_windows[stream], self.max_frame
            )
            if room <= 0:
                break
            last = sent + room == len(body)
            flags = http2.END_STREAM if last else 0
            out.append(http2.frame(http2.DATA, flags, stream, body[sent : sent + room]))
            self.send_window -= room
            self.stream_windows[stream] -= room
            item[2] += room
            if last:
                self.queued.popleft()
                del self.stream_windows[stream]
        return b"".join(out)

    def cancel(self, slot: _Slot) -> None:
        if self.streams.pop(slot.stream, None) is not None:
            self.write(http2.rst_stream(slot.stream))


def _unpad(flags: int, payload: bytes) -> bytes:
    if flags & http2.PADDED:
        return payload[1 : len(payload) - payload[0]]
    return payload


class GrpcClient(Client):
    """Unary ``ModelInfer`` calls over connections of our own frames.

    A request is two frames in one ``write()``, the requests made while one read's answers are
    handled go out in one ``write()`` together, and an answer is parsed from the bytes
    ``data_received`` hands over.

    A request is the gRPC message bytes: the fixed part (model, input and output specs)
    serialized once, and each request's ``raw_input_contents`` (and id, in traced runs)
    appended as protobuf fields; protobuf parses concatenated messages as one merged message.
    The header block is the same bytes for every request (literals the server never indexes),
    and the client asks for an HPACK table of size 0, so the server's header blocks decode
    without state and are looked up by their bytes (``loadgen.clients.http2``). Flow control: the
    client opens its receive windows wide at the start and tops the connection's up; its
    sends respect the server's windows and frame size (a request that does not fit waits for
    the server's WINDOW_UPDATE). PINGs are answered, SETTINGS acknowledged, a GOAWAY moves
    new requests to a fresh connection.

    The answer is checked like the HTTP one (grpc-status, metadata shapes and datatypes,
    OUTPUT_SUM bytes). Slots share one connection up to ``SLOTS_PER_CONNECTION``, as
    perf_analyzer's workers share tritonclient's cached channel (smaller connections measured
    no better: docs/validation/client-efficiency.md). A request past its timeout is cancelled
    with RST_STREAM and recorded as timed out; its slot goes on at once on the same connection.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.template, self.offsets = self._template(self.tensors)
        # Requests of other sizes (strings, shape ranges, data): template by tensors.
        self._templates: dict[tuple[Tensor, ...], tuple[bytes, list[tuple[int, int]]]] = {}
        a = self.address
        self.header_block = http2.request_headers(f"{a.host}:{a.port}", METHOD)
        self.header_cache = http2.HeaderCache()
        self.conns: list[_Conn] = []
        self.busy: set[_Slot] = set()
        self.waiting: list[_Slot] = []  # slots whose connection died, until a new one is up
        self._reconnecting: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._valid_outputs: Any = None
        self._sum_index = -1

    def _template(self, tensors: Any) -> tuple[bytes, list[tuple[int, int]]]:
        """The message's fixed part for these tensors, and where each one's bytes lie in
        the request's inputs."""
        template = service_pb2.ModelInferRequest(model_name=self.model.name)
        for t in tensors:
            tensor = template.inputs.add(name=t.name, datatype=t.datatype)
            tensor.shape.extend(t.shape)
        for o in self.outputs:
            template.outputs.add(name=o.name)
        offsets = []
        offset = 0
        for t in tensors:
            offsets.append((offset, offset + t.nbytes))
            offset += t.nbytes
        return template.SerializeToString(), offsets

    # ---- connections and slots --------------------------------------------------------
    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        a = self.address
        _, conn = await loop.create_connection(lambda: _Conn(self), a.host, a.port)
        try:
            await asyncio.wait_for(conn.ready, CONNECT_TIMEOUT_S)
        except (asyncio.TimeoutError, ConnectionError):
            if conn.transport is not None:
                conn.transport.abort()
            raise LoadgenError(
                f"{a.host}:{a.port} does not answer as a gRPC (HTTP/2) server: is --grpc-url "
                "Triton's gRPC port (8001 by default)?"
            ) from None
        self.conns.append(conn)
        return conn

    def _live(self) -> _Conn | None:
        return next((c for c in self.conns if c.live), None)

    async def open_slots(self, n: int) -> list[Any]:
        if self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep())
        slots = []
        for _ in range(n):
            conn = next(
                (
                    c
                    for c in self.conns
                    if c.live and c.slots < min(c.max_streams, SLOTS_PER_CONNECTION)
                ),
                None,
            )
            if conn is None:
                conn = await self._connect()
            conn.slots += 1
            slots.append(_Slot(conn))
        return slots

    def connection_lost(self, conn: _Conn, exc: Exception | None) -> None:
        with contextlib.suppress(ValueError):
            self.conns.remove(conn)
        reason = f": {type(exc).__name__}" if exc else ""
        for slot in list(conn.streams.values()):
            self.fail(slot, f"connection lost{reason}", hand_back=False)
            self._park(slot)

    def go_away(self, conn: _Conn, last_stream: int) -> None:
        """The server closes the connection: streams past ``last_stream`` were never seen."""
        conn.live = False
        for slot in [s for s in conn.streams.values() if s.stream > last_stream]:
            self.fail(slot, "connection closed by the server (GOAWAY)", hand_back=False)
            self._park(slot)

    def _park(self, slot: _Slot) -> None:
        """Hand ``slot`` back once a live connection exists (at once if one does)."""
        if self.closing:
            return
        conn = self._live()
        if conn is not None:
            slot.conn = conn
            self.on_done(slot)
            return
        self.waiting.append(slot)
        if self._reconnecting is None or self._reconnecting.done():
            self._reconnecting = asyncio.ensure_future(self._reconnect())

    async def _reconnect(self) -> None:
        while not self.closing:
            try:
                conn = await self._connect()
            except (OSError, LoadgenError):
                await asyncio.sleep(0.1)
                continue
            waiting, self.waiting = self.waiting, []
            for slot in waiting:
                slot.conn = conn
                self.on_done(slot)
            return

    # ---- requests ---------------------------------------------------------------------
    def encode(self, index: int, inputs: bytes, tensors: tuple[Tensor, ...] | None = None) -> bytes:
        """The request's gRPC message, length-prefixed (uncompressed)."""
        template, offsets = self.template, self.offsets
        if tensors is not None:
            known = self._templates.get(tensors)
            if known is None:
                if len(self._templates) > 4096:  # strings of many lengths: bounded memory
                    self._templates.clear()
                known = self._templates[tensors] = self._template(tensors)
            template, offsets = known
        parts = [template]
        parts.extend(encode_field(RAW_INPUT_TAG, inputs[a:b]) for a, b in offsets)
        if self.id_token:
            parts.append(encode_field(ID_TAG, request_id(self.id_token, index).encode()))
        message = b"".join(parts)
        return b"\x00" + struct.pack(">I", len(message)) + message

    def _frames(self, slot: _Slot, index: int, start: float) -> bytes:
        inputs, expected, tensors = self.payloads.take(index)
        slot.pending = Pending(index, start, expected)
        self.busy.add(slot)
        self.recorder.mark_sent(start)
        return slot.conn.request(slot, self.encode(index, inputs, tensors))

    def send(self, slot: Any, index: int, start: float) -> None:
        s: _Slot = slot
        if not s.conn.live:
            conn = self._live()
            if conn is None:  # its connection died while it was idle: the request fails
                self.recorder.mark_sent(start)  # (it was due) and the slot waits for a new one
                self.recorder.record(start, FAILED, "connection lost", index)
                self._park(s)
                return
            s.conn = conn
        s.conn.write(self._frames(s, index, start))

    async def burst(self, slots: list[Any], first_index: int) -> None:
        """Every request of the burst in one write per connection."""
        start = self.recorder.now()
        by_conn: dict[_Conn, list[bytes]] = {}
        for k, slot in enumerate(slots):
            by_conn.setdefault(slot.conn, []).append(self._frames(slot, first_index + k, start))
        for conn, frames in by_conn.items():
            conn.write(b"".join(frames))

    def finish(self, slot: _Slot, trailers: dict[str, str]) -> None:
        """The stream ended: its answer is complete."""
        p = slot.pending
        slot.conn.streams.pop(slot.stream, None)
        if p is None:
            return
        slot.pending = None
        self.busy.discard(slot)
        outcome, error = OK, None
        try:
            error = self.check(slot.status, trailers, b"".join(slot.data), p.expected)
            if error is not None:
                outcome = FAILED
        except Exception as exc:
            outcome, error = FAILED, f"unreadable response: {type(exc).__name__}"
        finally:
            slot.data = []
            self.recorder.record(p.start, outcome, error, p.index)
        if outcome != OK or not self.closing:
            self.on_done(slot)

    def check(
        self, status: str, trailers: dict[str, str], data: bytes, expected: Expected
    ) -> str | None:
        grpc_status = trailers.get("grpc-status")
        if grpc_status is None:
            return f"bad answer: HTTP {status or '?'} without a grpc-status"
        if grpc_status != "0":
            name = STATUS_NAMES.get(int(grpc_status), grpc_status)
            return f"gRPC {name}: {unquote(trailers.get('grpc-message', ''))}"[:200]
        if len(data) < 5 or data[0] != 0 or len(data) != 5 + int.from_bytes(data[1:5], "big"):
            return f"bad answer: {len(data)} bytes are not one uncompressed gRPC message"
        response = service_pb2.ModelInferResponse.FromString(data[5:])
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
        if isinstance(expected, dict):
            contents = response.raw_output_contents
            for i, o in enumerate(outputs):
                want = expected.get(o.name)
                if want is not None and (i >= len(contents) or contents[i] != want):
                    return wrong_output(o.name)
            return None
        if expected:
            i = self._sum_index
            if i < 0 or response.raw_output_contents[i] != expected:
                return WRONG_SUM
        return None

    def fail(self, slot: _Slot, error: str, outcome: int = FAILED, hand_back: bool = True) -> None:
        """Record the slot's request as failed and cancel its stream; with ``hand_back``
        the slot goes back to the scenario (its connection is still good)."""
        p = slot.pending
        slot.pending = None
        self.busy.discard(slot)
        slot.conn.cancel(slot)
        slot.data = []
        if p is None:
            return
        self.recorder.record(p.start, outcome, error, p.index)
        if hand_back and not self.closing:
            self.on_done(slot)

    async def _sweep(self) -> None:
        """Time out requests past the deadline (one timer for all, not one per request)."""
        period = min(self.timeout_s / 4, 0.1)
        while True:
            await asyncio.sleep(period)
            deadline = self.recorder.now() - self.timeout_s
            for s in [s for s in self.busy if s.pending and s.pending.start < deadline]:
                self.fail(s, f"no answer within {self.timeout_s:g}s", TIMED_OUT)

    def abandon_all(self, error: str) -> None:
        self.closing = True  # nothing is handed back: the run is ending
        for slot in list(self.busy):
            self.fail(slot, error)

    async def close(self) -> None:
        self.closing = True
        for task in (self._sweeper, self._reconnecting):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for conn in list(self.conns):
            if conn.transport is not None:
                conn.write(http2.frame(http2.GOAWAY, 0, 0, struct.pack(">II", 0, 0)))
                conn.transport.close()
        await asyncio.sleep(0)
