"""The doctor reading the exporter's counters from the stack's real Prometheus."""

from __future__ import annotations

import json

import pytest

from stack.cli import main as stack_main
from stacksettings import PORTS, Settings
from tests.dashboard.conftest import loaded_stack  # noqa: F401 - a fixture

pytestmark = pytest.mark.integration


def test_prometheus_window(
    loaded_stack: Settings,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    s = loaded_stack
    argv = ["doctor", "--url", s.url("triton_http"), "--prometheus", s.url("prometheus")]
    assert stack_main([*argv, "--model", "add_unbatched", "--window", "600", "--json"]) == 1
    [model] = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in model["findings"]] == ["batching-off"]
    assert any(f.startswith(f"window: Prometheus at {s.url('prometheus')}") for f in model["facts"])
    # Every request of the unbatched twin ran alone: Prometheus' increases say so too.
    assert model["findings"][0]["numbers"]["average batch size in the window"] == "1.00"


def test_the_stacks_prometheus_is_the_default(
    loaded_stack: Settings,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, (_, var) in PORTS.items():
        monkeypatch.setenv(var, str(loaded_stack.port(name)))
    assert stack_main(["doctor", "--model", "add_unbatched", "--json"]) == 1
    [model] = json.loads(capsys.readouterr().out)
    window = next(f for f in model["facts"] if f.startswith("window: "))
    assert f"Prometheus at {loaded_stack.url('prometheus')}" in window and "last 300s" in window


def test_another_name_for_the_server_sums_every_target(
    loaded_stack: Settings,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    s = loaded_stack
    other_name = s.url("triton_http").replace("127.0.0.1", "localhost")
    argv = ["doctor", "--url", other_name, "--prometheus", s.url("prometheus"), "--json"]
    assert stack_main([*argv, "--model", "add_unbatched", "--window", "600"]) == 1
    [model] = json.loads(capsys.readouterr().out)
    assert model["notes"] == [f"no series with target={other_name}: every target's are summed"]
    assert [f["code"] for f in model["findings"]] == ["batching-off"]
