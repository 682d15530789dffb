"""Trace windows a Triton survives: one answer for every place that starts tracing.

Triton before 2.57 (release 25.04) can die while it traces: server PR #8144 found that
``TraceRelease`` deleted a trace while holding its mutex, undefined behaviour that ends in
SIGSEGV or SIGABRT once enough traced requests have gone through. ``bench/trace_safety.py``
maps how often a window takes 2.51 down (docs/validation/trace-safety.md); this module holds
the limits chosen from that map, so that every place that traces (the trace command, the
dashboard's button, traced load runs, the benches, the always-on sampler) asks the same::

    window = plan(server_version(client), Load.closed(8), count=5_000, rate=1, shrink=True)
    window.count, window.rate, window.note     # the count to ask for, and why it shrank

On a fixed release a window is taken as asked (up to ``MAX_COUNT``, a bound on its disk);
before it (or on a version that cannot be read), a window must lie where the map's crash
probability is under ``BOUND``: shrunk if the caller allows, else refused (:class:`UnsafeTrace`).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

from tritonapi.client import TritonClient
from tritonapi.traces import MAX_COUNT  # what a window takes on disk until it is read

# The first release with server PR #8144 (container 25.04).
FIXED_IN = (2, 57, 0)
# Largest crash probability per window the limits accept, at the 95 % upper limit of the
# crash rate the map measured (the validation page's table).
BOUND = 0.01
# --- the safe region on releases before FIXED_IN (docs/traces.md, "Tracing on Triton before 2.57")
# Traced requests per window, by the most requests the server holds at once (the mean in
# flight, Little's law over the statistics API; None: unknown, the last row). The map's
# crashes came at every load, at any point of a Triton process's life, in windows of every
# size: each traced request carries a small risk. The count is the largest round window
# whose crash probability stays under BOUND at the 95 % upper limit of the crashes per
# traced request pooled over the map's closed-loop windows at concurrency 8 (the load with
# the most data); lighter loads crashed no more often, but too few of their requests were
# traced to allow more.
SAFE_COUNTS: tuple[tuple[float, int], ...] = ((math.inf, 500),)
# A continuous sampled stream is a window that never ends: only on fixed releases.
FIX_HINT = "Triton 2.57 (25.04) or newer fixes it (server PR #8144)"

_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?")


class UnsafeTrace(ValueError):
    """A trace request outside the safe region of this server; the message is one line."""


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``"2.51.0"`` -> (2, 51, 0); None for what is not a release number."""
    match = _VERSION.match(text or "")
    if not match:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def has_fix(version: str) -> bool:
    """Whether this server release traces without the crash (unknown versions: no)."""
    parsed = parse_version(version)
    return parsed is not None and parsed >= FIXED_IN


def server_version(client: TritonClient, timeout_s: float | None = None) -> str:
    """The server's release number from ``GET /v2`` (e.g. ``"2.51.0"``)."""
    return str(client.server_metadata(timeout_s).get("version", ""))


@dataclass(frozen=True)
class Load:
    """How busy the traced model is while the window runs."""

    in_flight: float  # mean requests in the server at once
    requests_per_s: float = 0.0

    @classmethod
    def closed(cls, concurrency: int) -> Load:
        """A closed loop of ``concurrency`` clients keeps that many in flight (at most)."""
        return cls(in_flight=float(concurrency))

    def describe(self) -> str:
        rate = f", {self.requests_per_s:,.0f} requests/s" if self.requests_per_s else ""
        return f"{self.in_flight:.1f} in flight{rate}"


def measure_load(client: TritonClient, model: str, seconds: float = 1.0) -> Load:
    """The model's load now, from two reads of Triton's statistics ``seconds`` apart.

    The time requests spent in the server (``success`` ns) per second of wall time is the
    mean number in flight (Little's law), whoever sends them.
    """
    before, t0 = client.model_stats(model), time.monotonic()
    time.sleep(seconds)
    after, wall = client.model_stats(model), time.monotonic() - t0
    if after.is_reset_since(before):
        return Load(0.0)  # restarted in between: nothing known about the load yet
    delta = after.minus(before)
    return Load(
        in_flight=delta.phase("success").ns / 1e9 / wall,
        requests_per_s=delta.phase("success").count / wall,
    )


def safe_count(version: str, load: Load | None) -> int:
    """The largest window (traced requests) this server takes under ``load``
    (None: unknown, taken as the heaviest the map covered)."""
    if has_fix(version):
        return MAX_COUNT
    in_flight = load.in_flight if load is not None else math.inf
    return next(count for up_to, count in SAFE_COUNTS if in_flight <= up_to)


@dataclass(frozen=True)
class Window:
    """The trace window to ask for: ``count`` traced requests, 1 in ``rate`` traced."""

    count: int
    rate: int
    note: str = ""  # one line when it differs from what was asked


def _limit_text(version: str, limit: int, load: Load | None) -> str:
    under = f" under {load.describe()}" if load is not None else ""
    return (
        f"Triton {version or '(unknown version)'} takes at most {limit:,} traced requests "
        f"per window{under} to keep its crash risk under {BOUND:.0%} per window; {FIX_HINT}"
    )


def plan(version: str, load: Load | None, count: int, rate: int = 1, shrink: bool = True) -> Window:
    """The window to ask ``version`` for instead of ``count`` (1 in ``rate``): the same
    inside the safe region; outside it, shrunk (``shrink``) or refused (UnsafeTrace)."""
    if count < 1 or rate < 1:
        raise ValueError(f"trace count {count}, rate {rate}: give 1 or more of each")
    if count > MAX_COUNT:
        raise UnsafeTrace(f"trace count {count:,}: give 1 to {MAX_COUNT:,}")
    limit = safe_count(version, load)
    if count <= limit:
        return Window(count, rate)
    if not shrink:
        raise UnsafeTrace(
            f"a trace window of {count:,} requests can crash this Triton: "
            + _limit_text(version, limit, load)
        )
    return Window(
        limit, rate, f"shrunk from {count:,} to {limit:,}: " + _limit_text(version, limit, load)
    )


def continuous_allowed(version: str) -> str:
    """Why always-on sampled tracing may not run on ``version`` ("" when it may)."""
    if has_fix(version):
        return ""
    return (
        f"always-on trace sampling is off on Triton {version or '(unknown version)'}: a "
        f"stream that never ends crashes it; {FIX_HINT}"
    )


def safe_window(
    client: TritonClient,
    model: str,
    count: int,
    rate: int = 1,
    shrink: bool = True,
    load: Load | None = None,
    sample_s: float = 0.5,
) -> tuple[Window, str]:
    """(the window to ask for, the server's version): ``plan`` for this server, whose load
    is measured over ``sample_s`` when not given (and only where the version needs it)."""
    version = server_version(client)
    if load is None and not has_fix(version):
        load = measure_load(client, model, sample_s)
    return plan(version, load, count, rate, shrink), version
