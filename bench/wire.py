"""Send times as the wire sees them: a packet capture on loopback, in a process of its own.

``Capture(port, protocol)`` runs Debian's ``tcpdump`` on ``lo`` while a load goes to
``port`` and stamps, with the kernel's nanosecond timestamps, every request that left:

- HTTP: each inference request (``POST .../infer``, not the exporter's repository index) at
  the start of a TCP segment to the port (loadgen and perf_analyzer write one in one go);
- gRPC: each HTTP/2 HEADERS frame (type 1) at a frame boundary of a segment to the port (a
  request opens with it; SETTINGS, WINDOW_UPDATE and PING frames are skipped by type).

The observer is independent of the sender's clock, which is the point: a load generator that
says it kept its schedule is checked by a process it does not control. ``gap_stats`` turns
the stamps into what the pacing goals are written in (gap percentiles, the error against the
ideal gap, the share of gaps under half the ideal, a Kolmogorov-Smirnov test against the
exponential for Poisson schedules).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

SNAP = 4096  # bytes kept of each packet: the frames of several gRPC requests in one segment


class CaptureError(RuntimeError):
    pass


def tcpdump_path() -> str:
    path = shutil.which("tcpdump")
    if path is None:
        raise CaptureError("tcpdump is missing: apt-get install tcpdump (./stack/test does)")
    return path


class Capture:
    """``with Capture(port, "http") as cap: ...`` then ``cap.stamps()`` (seconds, sorted).

    ``direction="from"`` captures what the server on ``port`` sends instead (its answers:
    ``cap.payloads()``)."""

    def __init__(self, port: int, protocol: str, direction: str = "to") -> None:
        if direction not in ("to", "from"):
            raise ValueError(f"direction {direction!r}: 'to' or 'from' the port")
        self.port, self.protocol, self.direction = port, protocol, direction
        self._dir = Path(tempfile.mkdtemp(prefix="wire-"))
        self.file = self._dir / "capture.pcap"
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Capture:
        # Real-time like loadgen's sender (engine.pacing) where allowed: a starved
        # observer drops packets, and a missing stamp merges two gaps into one.
        rt = ["chrt", "-f", "2"] if os.geteuid() == 0 and shutil.which("chrt") else []
        argv = [
            *rt,
            tcpdump_path(),
            "-i",
            "lo",
            "-n",
            "-U",  # write each packet as it comes: nothing is lost at the stop
            "-B",
            "65536",  # KiB of kernel buffer: a busy machine delays tcpdump, not the capture
            "-s",
            str(SNAP),
            "--time-stamp-precision=nano",
            "-w",
            str(self.file),
            f"tcp {'dst' if self.direction == 'to' else 'src'} port {self.port}",
        ]
        self._proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        deadline = time.monotonic() + 10
        # tcpdump says "listening on lo" once the capture is open.
        assert self._proc.stderr is not None
        os.set_blocking(self._proc.stderr.fileno(), False)
        seen = b""
        while b"listening on" not in seen:
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._stop()
                raise CaptureError(f"tcpdump did not start: {seen.decode(errors='replace')}")
            seen += self._proc.stderr.read() or b""
            time.sleep(0.02)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            # A busy tcpdump lags: what is still in its kernel buffer at SIGINT is lost.
            time.sleep(1.0)
            os.killpg(self._proc.pid, signal.SIGINT)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        if self._proc is not None and self._proc.stderr is not None:
            self._proc.stderr.close()

    def stamps(self) -> list[float]:
        """When each request went out (seconds of the kernel's clock), in order."""
        out, seen = [], set()
        for ts, key, payload in read_pcap(self.file):
            if key in seen:  # a retransmission: the request left the first time
                continue
            seen.add(key)
            out.extend([ts] * requests_in(payload, self.protocol))
        out.sort()
        return out

    def payloads(self) -> list[bytes]:
        """Each captured segment's TCP payload (up to SNAP bytes), retransmissions once."""
        out, seen = [], set()
        for _, key, payload in read_pcap(self.file):
            if key not in seen:
                seen.add(key)
                out.append(payload)
        return out

    def close(self) -> None:
        self._stop()
        shutil.rmtree(self._dir, ignore_errors=True)


def read_pcap(path: Path) -> list[tuple[float, tuple[int, int], bytes]]:
    """(timestamp, (source port, sequence number), TCP payload captured) of each packet of
    an Ethernet/loopback capture."""
    data = path.read_bytes()
    if len(data) < 24:
        return []
    magic = struct.unpack("<I", data[:4])[0]
    if magic == 0xA1B23C4D:
        scale, order = 1e-9, "<"
    elif magic == 0xA1B2C3D4:
        scale, order = 1e-6, "<"
    else:
        raise CaptureError(f"{path}: not a little-endian pcap file")
    linktype = struct.unpack(order + "I", data[20:24])[0]
    link = 14 if linktype == 1 else 16 if linktype == 113 else 0
    out, off = [], 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(order + "IIII", data[off : off + 16])
        pkt = data[off + 16 : off + 16 + incl]
        off += 16 + incl
        ip = pkt[link:]
        if len(ip) < 20 or ip[0] >> 4 != 4:
            continue
        ihl = (ip[0] & 0x0F) * 4
        total = struct.unpack("!H", ip[2:4])[0]
        tcp = ip[ihl:]
        if len(tcp) < 20:
            continue
        doff = (tcp[12] >> 4) * 4
        payload_len = total - ihl - doff
        if payload_len <= 0:
            continue
        key = (struct.unpack("!H", tcp[0:2])[0], struct.unpack("!I", tcp[4:8])[0])
        out.append((sec + frac * scale, key, tcp[doff : doff + payload_len]))
    return out


def requests_in(payload: bytes, protocol: str) -> int:
    """Requests that start in one captured segment (see the module doc)."""
    if protocol == "http":  # a request's head is at a segment's start (several: pipelined)
        return payload.count(b"/infer HTTP/1.") if payload.startswith(b"POST ") else 0
    n, off = 0, 0
    if payload.startswith(b"PRI * HTTP/2.0"):
        off = 24  # the connection preface
    while off + 9 <= len(payload):
        length = int.from_bytes(payload[off : off + 3], "big")
        kind = payload[off + 3]
        if kind > 9:  # not a frame boundary: the rest is a frame's payload
            break
        n += kind == 1
        off += 9 + length
    return n


@dataclass
class GapStats:
    requests: int
    gap_us: dict[str, float]  # p10 p50 p90 p99
    error_us: dict[str, float]  # |gap - ideal|: p50 p99
    under_half: float  # share of gaps under half the ideal
    ks: float | None  # Kolmogorov-Smirnov statistic against Exp(rate); None unless poisson
    ks_p: float | None
    # Of a constant-rate run: the share of gaps sent while the sender was behind its schedule
    # (behind_schedule), how many gaps it sent on schedule, and the share of those under half
    # the ideal: the spacing the pacer chose, where the machine let it keep the schedule.
    behind_share: float = 0.0
    on_schedule: int = 0
    under_half_on_schedule: float = 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


# A sender this far behind its schedule (judged on the wire, below) is catching up: 4 ideal
# gaps at 2,000/s. A pacer on a 1 ms tick is never more than a tick behind.
BEHIND_S = 0.002
# How far back the wire looks for the sender's best moment. Longer than any stall seen here
# (250 ms); short enough that stamps the capture dropped (each makes the sender look one ideal
# gap later from then on) cannot add up to BEHIND_S unless a handful go in one second.
ANCHOR_S = 1.0


def behind_schedule(
    stamps: list[float], ideal: float, behind_s: float = BEHIND_S, anchor_s: float = ANCHOR_S
) -> list[bool]:
    """For each gap of a constant-rate sender's stamps, whether the sender was more than
    ``behind_s`` late on its schedule at either end of it, as the wire sees it.

    Request k is due at t0 + k * ideal. The wire does not know t0, but a sender is never
    early, so its best moment bounds it: request k left at least
    (s_k - k * ideal) - min_j (s_j - j * ideal) late, j over the requests in the
    ``anchor_s`` before it. A sender behind by more than a few gaps sends what is due back to
    back, as it must (each is already late): short gaps the pacer did not choose. A machine
    that stalls the sender for 150 ms makes one such run; one that keeps it 40 ms behind for
    a whole run (a CI run at load average 2.5) makes most of them."""
    late = [0.0] * len(stamps)
    window: deque[tuple[float, float]] = deque()  # (stamp, offset), offsets increasing
    for k, stamp in enumerate(stamps):
        offset = stamp - k * ideal
        while window and window[-1][1] >= offset:
            window.pop()
        window.append((stamp, offset))
        while window[0][0] < stamp - anchor_s:
            window.popleft()
        late[k] = offset - window[0][1]
    return [max(a, b) > behind_s for a, b in zip(late, late[1:], strict=False)]


def gap_stats(stamps: list[float], rate: float, poisson: bool) -> GapStats:
    """What the pacing goals are written in, from send times (seconds, sorted)."""
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    if not gaps:
        raise CaptureError("fewer than two requests seen on the wire")
    ideal = 1.0 / rate
    errors = [abs(g - ideal) for g in gaps]
    # Lateness on the wire means something only against a constant schedule.
    flagged = [False] * len(gaps) if poisson else behind_schedule(stamps, ideal)
    kept = [g for g, behind in zip(gaps, flagged, strict=True) if not behind]
    ks = ks_p = None
    if poisson:
        ks, ks_p = ks_exponential(gaps, rate)
    return GapStats(
        requests=len(stamps),
        gap_us={f"p{q}": percentile(gaps, q) * 1e6 for q in (10, 50, 90, 99)},
        error_us={f"p{q}": percentile(errors, q) * 1e6 for q in (50, 99)},
        under_half=sum(g < ideal / 2 for g in gaps) / len(gaps),
        ks=ks,
        ks_p=ks_p,
        behind_share=sum(flagged) / len(gaps),
        on_schedule=len(kept),
        under_half_on_schedule=sum(g < ideal / 2 for g in kept) / len(kept) if kept else 1.0,
    )


def ks_exponential(gaps: list[float], rate: float) -> tuple[float, float]:
    """One-sample Kolmogorov-Smirnov test of ``gaps`` against Exp(``rate``): the statistic
    D and its asymptotic p-value (Kolmogorov's distribution; n is in the thousands here)."""
    xs = sorted(gaps)
    n = len(xs)
    d = 0.0
    for i, x in enumerate(xs):
        cdf = 1.0 - math.exp(-rate * x)
        d = max(d, (i + 1) / n - cdf, cdf - i / n)
    return d, kolmogorov_p(d, n)


def kolmogorov_p(d: float, n: int) -> float:
    """P(D_n >= d) for large n (with Stephens' small-n correction)."""
    t = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
    if t < 0.2:
        return 1.0
    total = sum((-1) ** (k - 1) * math.exp(-2 * k * k * t * t) for k in range(1, 101))
    return max(0.0, min(1.0, 2 * total))
