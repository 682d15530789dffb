"""A lean HTTP/1.1 client for Triton's KServe v2 API, built for throughput on few cores.

Why not tritonclient: one ``tritonclient.http`` client per thread or its aio client tops
out at 3,000-4,000 requests/s on 2 cores, half of what perf_analyzer drives. Here each slot
is a keep-alive connection driven by an asyncio Protocol (no task per request): the request
head and JSON header are encoded once, the inputs travel with the binary tensor extension
(so a request is one bytes concatenation), and a response is checked with a bytes compare
of its JSON header against the last one validated plus a bytes compare of OUTPUT_SUM.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from typing import Any

from loadgen.clients.checks import WRONG_SUM, check_outputs, wrong_output
from loadgen.clients.payloads import Expected, Tensor
from loadgen.clients.slots import FAILED, ID_DIGITS, OK, TIMED_OUT, Client, Pending, request_id

SETTLE_S = 0.05  # for a burst: time for the server to read everything but the last bytes


def request_head(client: Client, tensors: Sequence[Tensor] | None = None) -> bytes:
    """HTTP head plus JSON inference header of every request; only the inputs follow.

    With an id token the header carries ``"id": "<token>-0000000000"``: the digits are
    the request's index, fixed width, so every request's head has the same length.
    """
    tensors = client.tensors if tensors is None else tensors
    ident = {"id": request_id(client.id_token, 0)} if client.id_token else {}
    header = json.dumps(
        {
            **ident,
            "inputs": [
                {
                    "name": t.name,
                    "shape": list(t.shape),
                    "datatype": t.datatype,
                    "parameters": {"binary_data_size": t.nbytes},
                }
                for t in tensors
            ],
            "outputs": [
                {"name": o.name, "parameters": {"binary_data": True}} for o in client.outputs
            ],
        },
        separators=(",", ":"),
    ).encode()
    body_len = len(header) + sum(t.nbytes for t in tensors)
    a = client.address
    return (
        f"POST /v2/models/{client.model.name}/infer HTTP/1.1\r\n"
        f"Host: {a.host}:{a.port}\r\n"
        "Content-Type: application/octet-stream\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\n"
        f"Content-Length: {body_len}\r\n\r\n"
    ).encode() + header


def _header_value(head: bytes, name: bytes) -> int | None:
    k = head.find(name)
    if k < 0:
        return None
    k += len(name)
    end = head.find(b"\r", k)
    return int(head[k:] if end < 0 else head[k:end])


def _header_text(head: bytes, name: bytes) -> bytes:
    """A header's value in a lowercased head, b"" when absent."""
    k = head.find(name)
    if k < 0:
        return b""
    end = head.find(b"\r", k + len(name))
    return head[k + len(name) : None if end < 0 else end].strip()


def http_error(status: int, body: bytes) -> str:
    try:
        message = str(json.loads(body).get("error", ""))
    except (ValueError, AttributeError):
        message = body[:120].decode(errors="replace")
    return f"HTTP {status}: {message}"[:200]


class UnreadableResponse(ValueError):
    """Bytes from the server that are no HTTP/1.1 response; the message says what they held."""


def next_response(buf: bytes) -> tuple[int, bytes, bytes, bytes] | None:
    """The first whole response in ``buf`` as (status, lowercased head, body, the bytes after
    it), or None while it is incomplete. The body is delimited by Content-Length (what Triton
    sends for inference) or by chunked transfer coding (what any HTTP/1.1 server may send);
    a response with neither, or with a chunk that does not parse, is UnreadableResponse."""
    end_head = buf.find(b"\r\n\r\n")
    if end_head < 0:
        return None
    head = buf[:end_head].lower()
    start = end_head + 4
    length = _header_value(head, b"\r\ncontent-length:")
    if length is not None:
        end = start + length
        if len(buf) < end:
            return None
        return int(buf[9:12]), head, buf[start:end], buf[end:]
    if b"chunked" in _header_text(head, b"\r\ntransfer-encoding:"):
        whole = _dechunk(buf, start)
        if whole is None:
            return None
        body, end = whole
        return int(buf[9:12]), head, body, buf[end:]
    # The first line and the header names say whose fault it is (a status line, or bytes
    # mid-body).
    raise UnreadableResponse(f"no Content-Length and not chunked: {buf[:end_head][:300]!r}")


def _dechunk(buf: bytes, pos: int) -> tuple[bytes, int] | None:
    """A chunked body from ``pos``: (the body, where the response ends), or None while
    incomplete (RFC 9112 section 7.1; chunk extensions and trailer fields are skipped)."""
    parts: list[bytes] = []
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        try:
            size = int(buf[pos:eol].split(b";")[0].strip(), 16)
        except ValueError:
            raise UnreadableResponse(f"bad chunk size {buf[pos:eol][:20]!r}") from None
        if size == 0:
            trailers = buf.find(b"\r\n\r\n", eol)  # the last CRLF, after any trailer fields
            if trailers < 0:
                return None
            return b"".join(parts), trailers + 4
        data = eol + 2
        if len(buf) < data + size + 2:
            return None
        if buf[data + size : data + size + 2] != b"\r\n":
            raise UnreadableResponse("a chunk longer than its size")
        parts.append(buf[data : data + size])
        pos = data + size + 2


class _Conn(asyncio.Protocol):
    def __init__(self, client: HttpClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.pending: Pending | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        while True:
            try:
                answer = next_response(buf)
            except UnreadableResponse as exc:
                self.client.fail(self, f"unreadable response: {exc}")
                return
            if answer is None:
                break
            status, head, body, buf = answer
            self.client.complete(self, status, head, body)
        self.buf = buf

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.client.connection_lost(self, exc)


class HttpClient(Client):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head = request_head(self)
        # Where the id's digits stand in the head (traced runs), else -1.
        self._id_at = self._digits_at(self.head)
        # Requests of other sizes (strings, shape ranges, data): head and id place by tensors.
        self._heads: dict[tuple[Tensor, ...], tuple[bytes, int]] = {}
        self.busy: set[_Conn] = set()
        self.conns: set[_Conn] = set()
        self._valid: tuple[bytes, int, int] | None = None  # (json header, sum offset, size)
        self._valid_headers: set[bytes] = set()  # other right headers (requests that vary)
        self._sweeper: asyncio.Task[None] | None = None
        self._reconnects: set[asyncio.Task[None]] = set()  # replacements still connecting

    # ---- slots ------------------------------------------------------------------------
    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(
            lambda: _Conn(self), self.address.host, self.address.port
        )
        self.conns.add(conn)
        return conn

    async def open_slots(self, n: int) -> list[Any]:
        if self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep())
        return list(await asyncio.gather(*(self._connect() for _ in range(n))))

    def _replace(self, conn: _Conn) -> None:
        """A connection died (timeout, reset): hand a fresh one to the scenario instead."""
        self.conns.discard(conn)
        if self.closing:
            return

        async def reconnect() -> None:
            while not self.closing:
                try:
                    new = await self._connect()
                except OSError:
                    await asyncio.sleep(0.1)
                    continue
                if self.closing:  # the run ended while it connected: not handed out
                    if new.transport is not None:
                        new.transport.close()
                    return
                self.on_done(new)
                return

        task = asyncio.ensure_future(reconnect())
        self._reconnects.add(task)
        task.add_done_callback(self._reconnects.discard)

    # ---- requests ---------------------------------------------------------------------
    def _digits_at(self, head: bytes) -> int:
        if not self.id_token:
            return -1
        return head.find(request_id(self.id_token, 0).encode()) + len(self.id_token) + 1

    def head_of(self, index: int, tensors: tuple[Tensor, ...] | None = None) -> bytes:
        head, at = self.head, self._id_at
        if tensors is not None:
            known = self._heads.get(tensors)
            if known is None:
                if len(self._heads) > 4096:  # strings of many lengths: bounded memory
                    self._heads.clear()
                made = request_head(self, tensors)
                known = self._heads[tensors] = (made, self._digits_at(made))
            head, at = known
        if at < 0:
            return head
        digits = b"%0*d" % (ID_DIGITS, index)
        return head[:at] + digits + head[at + ID_DIGITS :]

    def send(self, slot: Any, index: int, start: float) -> None:
        conn: _Conn = slot
        inputs, expected, tensors = self.payloads.take(index)
        conn.pending = Pending(index, start, expected)
        self.busy.add(conn)
        self.recorder.mark_sent(start)
        assert conn.transport is not None
        conn.transport.write(self.head_of(index, tensors) + inputs)

    async def burst(self, slots: list[Any], first_index: int) -> None:
        """Last-byte synchronisation (as in loadgen.clients.burst): every request goes out complete
        but for its last byte, then all last bytes are written back to back, so the server
        can parse none before the final write and all arrive within microseconds."""
        datas = []
        for k, conn in enumerate(slots):
            inputs, expected, tensors = self.payloads.take(first_index + k)
            datas.append(self.head_of(first_index + k, tensors) + inputs)
            conn.pending = Pending(first_index + k, 0.0, expected)
            conn.transport.write(datas[-1][:-1])
        await asyncio.sleep(SETTLE_S)
        start = self.recorder.now()
        for conn, data in zip(slots, datas, strict=True):
            conn.pending.start = start
            self.busy.add(conn)
            self.recorder.mark_sent(start)
            conn.transport.write(data[-1:])

    def complete(self, conn: _Conn, status: int, head: bytes, body: bytes) -> None:
        p = conn.pending
        if p is None:  # an answer nobody waits for (its request timed out): drop it
            return
        conn.pending = None
        self.busy.discard(conn)
        outcome, error = OK, None
        try:
            error = self.check(status, head, body, p.expected)
            if error is not None:
                outcome = FAILED
        except Exception as exc:  # garbage from upstream is a failed request, not a crash
            outcome, error = FAILED, f"unreadable response: {type(exc).__name__}"
        finally:
            self.recorder.record(p.start, outcome, error, p.index)
        if b"\r\nconnection: close" in head:
            assert conn.transport is not None
            conn.transport.close()
            return  # connection_lost replaces it
        self.on_done(conn)

    def check(self, status: int, head: bytes, body: bytes, expected: Expected) -> str | None:
        if status != 200:
            return http_error(status, body)
        json_len = _header_value(head, b"\r\ninference-header-content-length:")
        if json_len is None:
            return "bad answer: outputs not in binary form"
        header = body[:json_len]
        valid = self._valid
        if (valid is None or valid[0] != header) and header not in self._valid_headers:
            error = self._validate(header, len(body) - json_len)
            if error is not None:
                return error
            valid = self._valid
            assert valid is not None
        if isinstance(expected, dict):
            return self._compare(header, body[json_len:], expected) if expected else None
        if expected:
            assert valid is not None
            offset = json_len + valid[1]
            if body[offset : offset + valid[2]] != expected:
                return WRONG_SUM
        return None

    def _compare(self, header: bytes, binary: bytes, expected: dict[str, bytes]) -> str | None:
        """Each output the data gives an expected value for, byte for byte."""
        offset = 0
        for out in json.loads(header).get("outputs") or []:
            size = int((out.get("parameters") or {}).get("binary_data_size", 0))
            want = expected.get(out["name"])
            if want is not None and binary[offset : offset + size] != want:
                return wrong_output(out["name"])
            offset += size
        return None

    def _validate(self, header: bytes, binary_len: int) -> str | None:
        """Full check of a JSON header not seen before; caches it when it is right."""
        outputs = json.loads(header).get("outputs") or []
        got, offset, sum_at, sum_size = [], 0, -1, 0
        for out in outputs:
            size = int((out.get("parameters") or {}).get("binary_data_size", -1))
            got.append((out["name"], out["datatype"], out["shape"], size))
            if out["name"] == "OUTPUT_SUM":
                sum_at, sum_size = offset, size
            offset += max(size, 0)
        error = check_outputs(got, self.outputs, self.lead)
        if error is not None:
            return error
        if offset != binary_len:
            return f"bad answer: {binary_len} binary bytes, header announces {offset}"
        if self.payloads.verify_sum and sum_at < 0:
            return "bad answer: output OUTPUT_SUM missing"
        if self.payloads.varies and len(self._valid_headers) < 4096:
            self._valid_headers.add(header)
        self._valid = (header, sum_at, sum_size)
        return None

    def fail(self, conn: _Conn, error: str, outcome: int = FAILED) -> None:
        p = conn.pending
        conn.pending = None
        self.busy.discard(conn)
        try:
            if p is not None:
                self.recorder.record(p.start, outcome, error, p.index)
        finally:
            if conn.transport is not None and not conn.lost:
                conn.transport.abort()  # connection_lost() replaces it

    def connection_lost(self, conn: _Conn, exc: Exception | None) -> None:
        if conn.pending is not None:
            reason = f": {type(exc).__name__}" if exc else ""
            self.fail(conn, f"connection lost{reason}")
        self._replace(conn)

    async def _sweep(self) -> None:
        """Time out requests past the deadline (one timer for all, not one per request)."""
        period = min(self.timeout_s / 4, 0.1)
        while True:
            await asyncio.sleep(period)
            deadline = self.recorder.now() - self.timeout_s
            for conn in [c for c in self.busy if c.pending and c.pending.start < deadline]:
                self.fail(conn, f"no answer within {self.timeout_s:g}s", TIMED_OUT)

    def abandon_all(self, error: str) -> None:
        for conn in list(self.busy):
            self.fail(conn, error)

    async def close(self) -> None:
        self.closing = True
        # The sweeper, and replacements still connecting: a connection made after the
        # loop below would be handed to a finished run and never closed.
        for task in (self._sweeper, *self._reconnects):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for conn in list(self.conns):
            if conn.transport is not None:
                conn.transport.close()
        await asyncio.sleep(0)
