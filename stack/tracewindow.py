"""``python -m stack trace``: a bounded window of Triton's per-request traces for one model."""

from __future__ import annotations

import sys
import threading

from stack.errors import StackError
from tritonapi.client import TritonClient, TritonError, TritonHTTPError
from tritonapi.traces import BYTES_PER_TRACE, start_window, stop_window

MAX_SECONDS = 3600.0
MAX_RATE = 1_000_000


def check(rate: int, seconds: float) -> None:
    if not 1 <= rate <= MAX_RATE:
        raise StackError(f"--rate {rate}: give 1 (every request) to {MAX_RATE:,}", exit_code=2)
    if not 0 < seconds <= MAX_SECONDS:
        raise StackError(f"--seconds {seconds:g}: give a time in (0, {MAX_SECONDS:g}]", exit_code=2)


def run(
    url: str, model: str, rate: int, seconds: float, stop: threading.Event | None = None
) -> int:
    """Trace ``model`` for ``seconds``; Ctrl-C (or ``stop``) ends the window early."""
    check(rate, seconds)
    client = TritonClient(url)
    try:
        client.model_config(model)
        setting = start_window(client, model, rate)
    except TritonHTTPError as exc:
        raise StackError(f"{exc}: is --model {model!r} loaded?", exit_code=2) from None
    except TritonError as exc:
        raise StackError(f"{exc}: start the stack (./stack/up) or fix --url", exit_code=2) from None
    print(
        f"tracing 1 in {rate} request(s) of {model} for {seconds:g} s into "
        f"{setting.get('trace_file')}.N (about {BYTES_PER_TRACE} bytes per traced request "
        "until the exporter reads and removes them); Ctrl-C ends it early"
    )
    stop = stop or threading.Event()
    try:
        stop.wait(seconds)
    except KeyboardInterrupt:
        print("stopping early", file=sys.stderr)
    finally:
        try:
            stop_window(client, model)
        except TritonError as exc:
            raise StackError(f"could not turn tracing off again: {exc}") from None
    print(f"tracing of {model} is off; Triton has written what it buffered")
    return 0
