"""The doctor reads the batch traces the exporter holds (the shared stack, traced at rate 1)."""

from __future__ import annotations

import pytest

from batchscope.main import main as batchscope
from stacksettings import Settings

pytestmark = pytest.mark.integration


def test_the_doctor_summarises_batch_traces(
    traced_stack: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    s = traced_stack
    argv = ["doctor", "--url", s.url("triton_http"), "--model", "batch_add_model"]
    code = batchscope([*argv, "--window", "1", "--exporter-url", s.url("exporter")])
    out = capsys.readouterr().out
    assert code in (0, 1)
    (line,) = [x for x in out.splitlines() if "batch traces:" in x]
    assert "traced requests in the exporter's last 120 s: queue wait p50" in line
    # The bursts of 3 (traced_stack): batches of 2 at once, the third after the delay.
    assert "reached a preferred size" in line and "waited out the queue delay" in line
