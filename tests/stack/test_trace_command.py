"""batchscope trace: a bounded trace window on the real Triton of the session's stack."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from batchscope.main import main
from stacksettings import Settings, free_ports
from tests.dashboard.conftest import send_bursts
from tests.helpers import wait_for
from tritonapi.client import TritonClient
from tritonapi.traces import DEFAULT_COUNT, stop_window, window_left
from tritonapi.tracesafety import safe_count

pytestmark = pytest.mark.integration


def where(settings: Settings) -> list[str]:
    """The stack's Triton, and its state folder (which holds the key trace settings need)."""
    return ["--url", settings.url("triton_http"), "--state-dir", str(settings.state_dir)]


def traced(settings: Settings, model: str) -> list[dict[str, object]]:
    url = f"{settings.url('exporter')}/api/traces"
    body = requests.get(url, params={"model": model, "seconds": "120"}, timeout=5).json()
    return list(body["requests"])


def tracing(settings: Settings, model: str) -> bool:
    """Whether a window of ``model`` still waits for traces (a finished one leaves the level
    at TIMESTAMPS with a count of 0: not tracing)."""
    triton = TritonClient(settings.url("triton_http"), headers=settings.admin_headers())
    return window_left(triton, model) > 0


def test_a_window_traces_the_next_requests_then_turns_itself_off(
    running_stack: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    codes: list[int] = []
    window = threading.Thread(
        target=lambda: codes.append(
            main(["trace", "--model", "add_unbatched", "--count", "6", *where(running_stack)])
        )
    )
    window.start()
    wait_for("the window to open", lambda: tracing(running_stack, "add_unbatched"))
    sent = send_bursts(running_stack, "add_unbatched", 3, size=2)
    window.join(timeout=30)
    assert codes == [0]
    out = capsys.readouterr().out
    assert "tracing the next 6 traced requests of add_unbatched (every request)" in out
    assert "done: 6 traced requests of add_unbatched written" in out
    deadline = time.monotonic() + 10
    while len(traced(running_stack, "add_unbatched")) < sent and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(traced(running_stack, "add_unbatched")) == sent


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rate", "0"], "--rate 0: give 1 (every request)"),
        (["--count", "0"], "--count 0: give 1 to 5,000 requests"),
        (["--seconds", "0"], "--seconds 0: give a time in (0, 3600]"),
        (["--seconds", "7200"], "--seconds 7200: give a time in (0, 3600]"),
    ],
)
def test_bad_bounds_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["trace", "--model", "m", "--url", "http://127.0.0.1:9", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_a_window_that_runs_out_of_time_says_so_and_stops(
    running_stack: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    url = running_stack.url("triton_http")
    argv = ["trace", "--model", "add_unbatched", "--count", "200", "--seconds", "1"]
    assert main([*argv, *where(running_stack)]) == 1
    out = capsys.readouterr().out
    assert "stopped with 200 of 200 traced requests still to come" in out
    triton = TritonClient(url, headers=running_stack.admin_headers())
    assert triton.trace_settings("add_unbatched")["trace_level"] == ["OFF"]


def test_unknown_model_and_unreachable_server(
    running_stack: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["trace", "--model", "no_such_model", "--seconds", "1"]
    assert main([*argv, *where(running_stack)]) == 2
    assert "is --model 'no_such_model' loaded?" in capsys.readouterr().err
    closed = f"http://127.0.0.1:{free_ports(1)[0]}"
    assert main(["trace", "--model", "m", "--seconds", "1", "--url", closed]) == 2
    err = capsys.readouterr().err
    assert "is not answering (connection refused): start the stack" in err


def test_a_window_past_the_safe_region_is_refused_and_the_default_shrinks(
    running_stack: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """The session's Triton is 2.51: its safe region is smaller than the default window."""
    triton = TritonClient(running_stack.url("triton_http"), headers=running_stack.admin_headers())
    version = triton.server_metadata()["version"]
    limit = safe_count(version, None)
    assert limit < DEFAULT_COUNT
    argv = ["trace", "--model", "add_unbatched", "--seconds", "3"]
    assert main([*argv, "--count", str(limit + 1), *where(running_stack)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"Triton {version} takes at most {limit:,}" in err
    assert "crash risk under 1% per window" in err and "Triton 2.57 (25.04) or newer" in err
    # Refused before anything started (Triton's own setting says so).
    assert not tracing(running_stack, "add_unbatched")
    # The default window: shrunk to the region, and Triton is asked for that many.
    codes: list[int] = []
    window = threading.Thread(target=lambda: codes.append(main([*argv, *where(running_stack)])))
    window.start()
    try:
        wait_for("the window to open", lambda: tracing(running_stack, "add_unbatched"))
        asked = triton.trace_settings("add_unbatched")["trace_count"]
    finally:
        window.join(timeout=30)
        stop_window(triton, "add_unbatched")
    assert codes == [1] and int(asked) == limit
    out = capsys.readouterr().out
    assert f"shrunk from {DEFAULT_COUNT:,} to {limit:,}: Triton {version}" in out
    assert f"stopped with {limit:,} of {limit:,} traced requests still to come" in out
