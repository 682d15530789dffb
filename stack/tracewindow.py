"""``batchscope trace``: trace the next N requests of one model, within a time limit.

Triton writes the window's traces to its trace file when the N-th traced request is done
(see ``tritonapi.traces`` for why windows are counted, not timed); the exporter reads and
removes the file at its next scrape. On a Triton with the tracing crash (before 2.57) the
window is kept inside the measured safe region (``tritonapi.tracesafety``): the default
count is shrunk to fit, an explicit ``--count`` outside it is refused with one line.
"""

from __future__ import annotations

import threading
import time

from stack.errors import StackError
from tritonapi.client import TritonClient, TritonError, TritonHTTPError
from tritonapi.traces import (
    BYTES_PER_TRACE,
    DEFAULT_COUNT,
    MAX_COUNT,
    WRITE_EVERY,
    start_window,
    stop_window,
)
from tritonapi.tracesafety import UnsafeTrace, safe_window

MAX_SECONDS = 3600.0
MAX_RATE = 1_000_000
POLL_S = 0.5


def check(count: int | None, rate: int, seconds: float) -> None:
    if count is not None and not 1 <= count <= MAX_COUNT:
        raise StackError(f"--count {count}: give 1 to {MAX_COUNT:,} requests", exit_code=2)
    if not 1 <= rate <= MAX_RATE:
        raise StackError(f"--rate {rate}: give 1 (every request) to {MAX_RATE:,}", exit_code=2)
    if not 0 < seconds <= MAX_SECONDS:
        raise StackError(f"--seconds {seconds:g}: give a time in (0, {MAX_SECONDS:g}]", exit_code=2)


def run(
    url: str,
    model: str,
    count: int | None,
    rate: int,
    seconds: float,
    headers: dict[str, str] | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Trace until ``count`` traced requests are done (0) or ``seconds`` pass (1);
    ``count`` None: the default, shrunk to this server's safe region."""
    check(count, rate, seconds)
    # Trace settings are one of Triton's restricted APIs: ``headers`` carry the stack's key.
    client = TritonClient(url, headers=headers)
    try:
        client.model_config(model)
        window, _ = safe_window(client, model, count or DEFAULT_COUNT, rate, count is None)
        count = window.count
        if window.note:
            print(window.note)
        setting = start_window(client, model, count, rate)
    except UnsafeTrace as exc:
        raise StackError(str(exc), exit_code=2) from None
    except TritonHTTPError as exc:
        raise StackError(f"{exc}: is --model {model!r} loaded?", exit_code=2) from None
    except TritonError as exc:
        raise StackError(f"{exc}: start the stack (./stack/up) or fix --url", exit_code=2) from None
    sampled = "every request" if rate == 1 else f"1 request in {rate}"
    print(
        f"tracing the next {count:,} traced requests of {model} ({sampled}), for at most "
        f"{seconds:g} s; Triton writes them to {setting.get('trace_file')}.N "
        f"(about {count * BYTES_PER_TRACE / 1e6:.1f} MB) in parts of {WRITE_EVERY}, the rest "
        "when the last one is done"
    )
    stop = stop or threading.Event()
    deadline = time.monotonic() + seconds
    left = count
    try:
        while left and time.monotonic() < deadline and not stop.is_set():
            stop.wait(POLL_S)
            setting = client.trace_settings(model)
            if "OFF" in (setting.get("trace_level") or ["OFF"]):
                # Not by this command: a restarted Triton starts with tracing off.
                raise StackError(
                    f"tracing of {model} went off during the window: Triton restarted "
                    "(batchscope status) or someone stopped it; the traces written "
                    "before are kept, marked incomplete"
                )
            left = max(int(setting.get("trace_count", "0") or 0), 0)
    except KeyboardInterrupt:
        pass
    except TritonError as exc:
        raise StackError(
            f"lost Triton during the window ({exc}); the stack's supervisor starts it again "
            "(batchscope status), and the traces written before it died are kept, "
            "marked incomplete"
        ) from None
    if not left:
        print(f"done: {count:,} traced requests of {model} written; tracing is off again")
        return 0
    try:
        stop_window(client, model)
    except TritonError as exc:
        raise StackError(f"could not turn tracing off again: {exc}") from None
    print(
        f"stopped with {left:,} of {count:,} traced requests still to come: the parts Triton "
        f"had written (every {WRITE_EVERY}) are shown, marked incomplete. Send more traffic, "
        "or ask for fewer with --count"
    )
    return 1
