"""The doctor reading the exporter's counters from the stack's real Prometheus."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from batchscope.main import main as batchscope
from loadgen.engine.runner import RunParams, run
from stack.supervisor import running
from stacksettings import PORTS, Settings, isolated
from tests.dashboard.conftest import (
    loaded_stack,  # noqa: F401 - a fixture
    prom_has,
    scraped_after,
    wait_for,
)
from tests.doctor.test_states import build_repository, state_codes

pytestmark = pytest.mark.integration


def doctor_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    """``batchscope doctor ARGV --json``, which finds something (exit 1): its JSON report."""
    code = batchscope([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 1 and out, (code, err)
    return json.loads(out)


def test_prometheus_window(
    loaded_stack: Settings,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    s = loaded_stack
    argv = ["doctor", "--url", s.url("triton_http"), "--prometheus", s.url("prometheus")]
    [model] = doctor_json(capsys, [*argv, "--model", "add_unbatched", "--window", "600"])
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
    [model] = doctor_json(capsys, ["doctor", "--model", "add_unbatched"])
    window = next(f for f in model["facts"] if f.startswith("window: "))
    assert f"Prometheus at {loaded_stack.url('prometheus')}" in window and "last 300s" in window


def test_another_name_for_the_server_sums_every_target(
    loaded_stack: Settings,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    s = loaded_stack
    other_name = s.url("triton_http").replace("127.0.0.1", "localhost")
    argv = ["doctor", "--url", other_name, "--prometheus", s.url("prometheus")]
    [model] = doctor_json(capsys, [*argv, "--model", "add_unbatched", "--window", "600"])
    # (Another note may say why the advisor's search could not fit this window.)
    assert model["notes"][0] == f"no series with target={other_name}: every target's are summed"
    assert [f["code"] for f in model["findings"]] == ["batching-off"]


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The test states' models behind an exporter and Prometheus, idle until a test loads
    one of them (:func:`busy_for_a_few_seconds`)."""
    base = tmp_path_factory.mktemp("doctor-prom")
    settings = replace(isolated(base / "state"), model_repository=build_repository(base / "m"))
    with running(settings, only={"triton", "exporter", "prometheus"}):
        wait_for(
            lambda: prom_has(
                settings, 'triton_batching_requests_success_total{model="add_serial"}'
            ),
            30,
            "the exporter's first scrape",
        )
        yield settings


# Each test's own few seconds of load: a module-wide load left a later test's 300 s window
# once the tests before it had searched for minutes.
LOADS = {
    "add_serial": {"scenario": "concurrency", "concurrency": 1},
    "add_nodelay": {"scenario": "rate", "rate": 150.0, "poisson": True},
}


def busy_for_a_few_seconds(settings: Settings, model: str) -> None:
    """4 s of the model's load, then a scrape after it."""
    url = settings.url("triton_http")
    run(RunParams(model=model, duration_s=4.0, url=url, **LOADS[model]))  # type: ignore[arg-type]
    wait_for(scraped_after(settings, "exporter", time.time() + 1), 30, "a scrape after the load")


@pytest.mark.parametrize(
    ("model", "code"), [("add_serial", "no-overlap"), ("add_nodelay", "delay-too-short")]
)
def test_states_from_prometheus_rate_while_busy(
    watched: Settings, capsys: pytest.CaptureFixture[str], model: str, code: str
) -> None:
    """A few seconds of load in a 300 s window: the rate is that of the busy seconds."""
    s = watched
    busy_for_a_few_seconds(s, model)
    argv = ["doctor", "--url", s.url("triton_http"), "--prometheus", s.url("prometheus")]
    assert batchscope([*argv, "--model", model, "--window", "300", "--json"]) == 1
    [report] = json.loads(capsys.readouterr().out)
    assert state_codes([f["code"] for f in report["findings"]]) == [code]
    window = next(f for f in report["facts"] if f.startswith("window: "))
    busy = int(window.split("traffic during ")[1].split(" s")[0])
    assert 4 <= busy <= 12, window
