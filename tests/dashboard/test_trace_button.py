"""The batch timeline's trace button keeps to the safe region of the Triton it traces.

The idle stack's Triton is 2.51 (the tracing crash of server PR #8144): the button's
window of 1,000 is shrunk to what ``tritonapi.tracesafety`` allows, and Triton's own trace
setting shows the count it was asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from streamlit.testing.v1 import AppTest

from dashboard.views.timeline_view import TRACE_COUNT, switch
from stacksettings import Settings
from tritonapi.client import TritonClient
from tritonapi.traces import stop_window
from tritonapi.tracesafety import safe_count

pytestmark = pytest.mark.integration

MODEL = "batch_add_model"


def test_the_trace_button_asks_2_51_for_a_window_inside_the_region(
    make_app: Callable[..., AppTest], idle_stack: Settings
) -> None:
    s = idle_stack
    triton = TritonClient(s.url("triton_http"), headers=s.admin_headers())
    version = triton.server_metadata()["version"]
    limit = safe_count(version, None)
    assert limit < TRACE_COUNT
    at = make_app(
        s.url("prometheus"),
        s.url("triton_http"),
        exporter_url=s.url("exporter"),
        admin_key_file=str(s.admin_key_file),
    )
    at.run()
    at.sidebar.radio(key="view").set_value("Batch timeline").run()
    (button,) = [b for b in at.button if b.label == f"Trace the next {TRACE_COUNT:,} requests"]
    try:
        button.click().run()
        assert not at.exception
        asked = triton.trace_settings(MODEL)
    finally:
        stop_window(triton, MODEL)
        # The switch is one per process: let its watcher see the window end.
        deadline = time.monotonic() + 10
        while switch().active and time.monotonic() < deadline:
            time.sleep(0.2)
    assert asked["trace_level"] == ["TIMESTAMPS"] and int(asked["trace_count"]) == limit
    success = " ".join(str(e.value) for e in at.success)
    assert f"Tracing the next {limit:,} requests of {MODEL}" in success
    captions = " ".join(str(c.value) for c in at.caption)
    assert f"shrunk from {TRACE_COUNT:,} to {limit:,}: Triton {version}" in captions
    assert "Triton 2.57 (25.04) or newer" in captions
