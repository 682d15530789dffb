"""The few pieces of HTTP/2 (RFC 9113) and HPACK (RFC 7541) a gRPC load client needs.

Frames are built and parsed here as bytes; the connection logic is in
``loadgen.clients.grpc_client``.
The client asks the server for an HPACK dynamic table of size 0, so every header block the
server sends decodes the same way whatever came before: a decoded block can be looked up
by its bytes (``HeaderCache``) instead of decoded again (a gRPC server sends the same two
blocks for every successful answer).
"""

from __future__ import annotations

import struct

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20

HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE = 0x4, 0x5
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65_535
DEFAULT_FRAME = 16_384
CANCEL = 0x8  # RST_STREAM error code


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, kind, flags, stream) + payload


def parse_head(buf: bytes | bytearray | memoryview, at: int) -> tuple[int, int, int, int]:
    """(length, type, flags, stream id) of the frame whose 9-byte head starts at ``at``."""
    hi, lo, kind, flags, stream = struct.unpack_from(">BHBBI", buf, at)
    return (hi << 16) | lo, kind, flags, stream & 0x7FFFFFFF


def settings(values: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in values.items()))


def parse_settings(payload: bytes) -> dict[int, int]:
    return {
        k: v for k, v in (struct.unpack_from(">HI", payload, i) for i in range(0, len(payload), 6))
    }


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", increment))


def rst_stream(stream: int, code: int = CANCEL) -> bytes:
    return frame(RST_STREAM, 0, stream, struct.pack(">I", code))


def _integer(value: int, prefix_bits: int, first: int) -> bytes:
    """HPACK's integer: ``first`` holds the pattern bits above the prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(text: str) -> bytes:
    data = text.encode()
    return _integer(len(data), 7, 0) + data  # no Huffman coding


# RFC 7541 appendix A: the static table entries the request uses.
_METHOD_POST, _SCHEME_HTTP, _NAME_AUTHORITY, _NAME_PATH, _NAME_CONTENT_TYPE = 3, 6, 1, 4, 31


def request_headers(authority: str, path: str) -> bytes:
    """A gRPC request's header block, as literals never added to the server's table, so the
    same bytes serve every request of the connection."""
    return b"".join(
        [
            _integer(_METHOD_POST, 7, 0x80),
            _integer(_SCHEME_HTTP, 7, 0x80),
            _integer(_NAME_PATH, 4, 0x00) + _string(path),
            _integer(_NAME_AUTHORITY, 4, 0x00) + _string(authority),
            _integer(_NAME_CONTENT_TYPE, 4, 0x00) + _string("application/grpc"),
            b"\x00" + _string("te") + _string("trailers"),
        ]
    )


class HeaderCache:
    """Header blocks decoded with a dynamic table of size 0 (stateless), kept by their bytes."""

    MAX_ENTRIES = 256  # error answers carry their message: distinct blocks, bounded memory

    def __init__(self) -> None:
        self.decoder = hpack.Decoder()
        self.decoder.max_allowed_table_size = 0
        self.decoder.header_table_size = 0
        self.seen: dict[bytes, dict[str, str]] = {}

    def decode(self, block: bytes) -> dict[str, str]:
        found = self.seen.get(block)
        if found is None:
            found = {str(k): str(v) for k, v in self.decoder.decode(block, raw=False)}
            if len(self.seen) < self.MAX_ENTRIES:
                self.seen[block] = found
        return found
