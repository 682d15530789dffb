"""Alerts end to end in the running stack: real Triton, Prometheus and Alertmanager.

The stack runs with test settings (short windows and ``for`` durations, 1 s
scrapes, Alertmanager flushing after 1 s) and sends critical and warning
notifications to a webhook receiver in this test, so each step is seconds. TritonDown
keeps its shipped ``for`` and threshold (only its window is short), and the stack runs
supervised, as `up` runs it, so that a killed Triton is restarted within seconds.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from loadgen.clients.burst import infer_body
from stack.supervisor import Supervisor, running
from stacksettings import RULES_SETTINGS, Settings, isolated
from tests.helpers import wait_for

pytestmark = pytest.mark.integration


class Webhook:
    """Collects Alertmanager's webhook notifications (JSON bodies) in a list."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", 0))
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.received = received
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, name: str, status: str) -> list[dict[str, Any]]:
        return [
            alert
            for note in list(self.received)
            for alert in note["alerts"]
            if alert["labels"]["alertname"] == name and alert["status"] == status
        ]


@dataclass
class Stack:
    settings: Settings
    supervisor: Supervisor
    webhook: Webhook

    def am_alerts(self, name: str) -> list[dict[str, Any]]:
        response = requests.get(
            f"{self.settings.url('alertmanager')}/api/v2/alerts",
            params={"filter": f'alertname="{name}"'},
            auth=self.settings.alertmanager_auth(),
            timeout=5,
        )
        response.raise_for_status()
        alerts: list[dict[str, Any]] = response.json()
        return alerts

    def firing(self, name: str) -> list[dict[str, Any]]:
        """Alerts that Prometheus itself has firing (not pending)."""
        response = requests.get(f"{self.settings.url('prometheus')}/api/v1/alerts", timeout=5)
        response.raise_for_status()
        return [
            a
            for a in response.json()["data"]["alerts"]
            if a["labels"]["alertname"] == name and a["state"] == "firing"
        ]


def test_rules_settings(tmp_path: Path, webhook_url: str) -> Path:
    """The default settings with windows and `for` durations in seconds."""
    data = yaml.safe_load(RULES_SETTINGS.read_text())
    data["windows"] = {"short": "5s", "long": "10s"}
    for name, alert in data["alerts"].items():
        if name != "TritonDown":  # its shipped `for` is what a restart within seconds meets
            alert["for"] = "2s"
    data["alertmanager"].update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    data["alertmanager"]["webhooks"].update(critical=[webhook_url], warning=[webhook_url])
    path = tmp_path / "rules-settings.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


test_rules_settings.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    webhook = Webhook()
    folder = tmp_path_factory.mktemp("alerting")
    settings = isolated(folder / "state")
    settings = replace(settings, rules_settings=test_rules_settings(folder, webhook.url))
    try:
        with running(settings, supervise=True) as supervisor:
            yield Stack(settings, supervisor, webhook)
    finally:
        webhook.server.shutdown()
        webhook.server.server_close()


def firing_spans(stack: Stack, name: str, since: float) -> list[tuple[frozenset, int]]:
    """(labels, number of separate firing spans) of ``name`` since ``since``, from
    Prometheus' ALERTS series at 1 s steps: one outage paged once is one span of one series."""
    response = requests.get(
        f"{stack.settings.url('prometheus')}/api/v1/query_range",
        params={
            "query": f'ALERTS{{alertname="{name}",alertstate="firing"}}',
            "start": f"{since:.3f}",
            "end": f"{time.time():.3f}",
            "step": "1s",
        },
        timeout=5,
    )
    response.raise_for_status()
    spans = []
    for series in response.json()["data"]["result"]:
        times = [float(t) for t, _ in series["values"]]
        gaps = sum(1 for a, b in zip(times, times[1:], strict=False) if b - a > 1.5)
        spans.append((frozenset(series["metric"].items()), gaps + 1))
    return spans


def test_triton_down_fires_once_reaches_alertmanager_and_resolves(stack: Stack) -> None:
    """A long outage (Triton stopped for several windows) is one alert and one page."""
    triton = stack.settings.url("triton_http")
    assert not stack.am_alerts("TritonDown")
    pages_before = len(stack.webhook.alerts("TritonDown", "firing"))
    since = time.time()

    stack.supervisor.stop_service("triton")
    received = wait_for("Alertmanager holds TritonDown", lambda: stack.am_alerts("TritonDown"))
    # Prometheus' scrape of Triton fails too, but one outage pages once: the exporter's view.
    time.sleep(3)
    (alert,) = stack.am_alerts("TritonDown")
    assert alert["labels"]["target"] == triton
    assert alert["labels"]["severity"] == "critical"
    assert alert["status"]["state"] == "active"
    assert [r["name"] for r in alert["receivers"]] == ["critical"]
    description = alert["annotations"]["description"]
    assert description.startswith(f"The exporter could not read Triton at {triton} ")
    assert description.endswith(" times in the last 5s.")
    assert "tritonserver process" in alert["annotations"]["runbook"]
    assert len(stack.firing("TritonDown")) == 1, received
    notes = wait_for(
        "a firing notification at the webhook", lambda: stack.webhook.alerts("TritonDown", "firing")
    )
    assert notes[0]["labels"]["severity"] == "critical"
    assert {n["labels"].get("target") for n in notes} == {triton}
    # Still down three windows later: the same one alert, paged once.
    time.sleep(15)
    assert len(stack.am_alerts("TritonDown")) == 1
    assert len(stack.webhook.alerts("TritonDown", "firing")) == pages_before + 1
    spans = firing_spans(stack, "TritonDown", since)
    assert [n for _, n in spans] == [1], spans

    stack.supervisor.start_service("triton")
    wait_for(
        "TritonDown resolved in Alertmanager",
        lambda: not stack.am_alerts("TritonDown") and not stack.firing("TritonDown"),
    )
    resolved = wait_for(
        "a resolved notification at the webhook",
        lambda: stack.webhook.alerts("TritonDown", "resolved"),
    )
    assert resolved[0]["labels"]["target"] == triton


def test_a_triton_restarted_within_seconds_pages_once(stack: Stack) -> None:
    """SIGKILL: the supervisor has Triton back within seconds, and TritonDown still fires
    for the gap, once, under one label set; then it resolves."""
    triton = stack.settings.url("triton_http")
    wait_for("no TritonDown left", lambda: not stack.am_alerts("TritonDown"), timeout_s=60)
    wait_for(
        "the exporter reads Triton",
        lambda: _exporter_up(stack.settings) == 1.0,
        timeout_s=60,
    )
    # Prometheus must already be scraping: an outage shorter than its first scrape after a
    # fresh start is never seen (what the test would then measure is Prometheus starting).
    wait_for(
        "Prometheus holding 3 up samples of Triton from the exporter",
        lambda: _prom_value(stack.settings, "sum_over_time(triton_batching_target_up[5s])") >= 3,
        timeout_s=60,
    )
    pages_before = len(stack.webhook.alerts("TritonDown", "firing"))
    resolved_before = len(stack.webhook.alerts("TritonDown", "resolved"))
    (old,) = [r for r in stack.supervisor.read_state() if r.name == "triton"]
    since = time.time()
    os.kill(old.pid, signal.SIGKILL)
    started = time.monotonic()

    def back() -> bool:
        (now,) = [r for r in stack.supervisor.read_state() if r.name == "triton"]
        if now.pid == old.pid:
            return False
        return requests.get(f"{triton}/v2/health/ready", timeout=1).status_code == 200

    wait_for("Triton restarted by the supervisor", lambda: _quietly(back), timeout_s=60)
    gap_s = time.monotonic() - started
    resolved = wait_for(
        "TritonDown fired and resolved at the webhook",
        lambda: len(stack.webhook.alerts("TritonDown", "resolved")) > resolved_before,
        timeout_s=60,
    )
    assert resolved
    pages = stack.webhook.alerts("TritonDown", "firing")[pages_before:]
    assert len(pages) == 1, f"{len(pages)} pages for one restart ({gap_s:.1f} s down)"
    assert pages[0]["labels"]["target"] == triton
    spans = firing_spans(stack, "TritonDown", since)
    assert [n for _, n in spans] == [1], spans
    assert gap_s < 30, f"the restart took {gap_s:.1f} s: not a short outage"


def _exporter_up(settings: Settings) -> float | None:
    text = requests.get(f"{settings.url('exporter')}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith("triton_batching_target_up{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def _prom_value(settings: Settings, expr: str) -> float:
    """The single value of ``expr`` in Prometheus now; 0 when it has none."""
    response = requests.get(
        f"{settings.url('prometheus')}/api/v1/query", params={"query": expr}, timeout=5
    )
    response.raise_for_status()
    result = response.json()["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def _quietly(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except requests.RequestException:
        return False


class SerialLoad(threading.Thread):
    """One request at a time, about 20 a second: load that can never be batched."""

    def __init__(self, settings: Settings, model: str) -> None:
        super().__init__()
        self.settings, self.model = settings, model
        self.stop = threading.Event()
        self.sent = 0
        self.errors: list[str] = []

    def run(self) -> None:
        body = infer_body({"INPUT_A": [1.0], "INPUT_B": [2.0]})
        host, port = self.settings.host, self.settings.port("triton_http")
        conn = http.client.HTTPConnection(host, port, timeout=10)
        try:
            while not self.stop.is_set():
                conn.request("POST", f"/v2/models/{self.model}/infer", body)
                response = conn.getresponse()
                text = response.read()
                if response.status != 200:
                    self.errors.append(f"HTTP {response.status}: {text[:200]!r}")
                self.sent += 1
                self.stop.wait(0.05)
        except (OSError, http.client.HTTPException) as exc:
            self.errors.append(repr(exc))
        finally:
            conn.close()


def test_load_on_the_unbatched_twin_fires_batching_ineffective(stack: Stack) -> None:
    load = SerialLoad(stack.settings, "add_unbatched")
    load.start()

    def fired() -> list[dict[str, Any]]:
        # A failing load ends the wait at once: the assertion below then names its errors.
        return (
            [{"load errors": load.errors}]
            if load.errors
            else stack.am_alerts("BatchingIneffective")
        )

    try:
        received = wait_for("Alertmanager holds BatchingIneffective", fired, timeout_s=45)
    finally:
        load.stop.set()
        load.join(timeout=15)
    assert not load.errors and load.sent > 0, load.errors
    assert [a["labels"]["model"] for a in received] == ["add_unbatched"]
    alert = received[0]
    assert alert["labels"]["severity"] == "warning"
    assert [r["name"] for r in alert["receivers"]] == ["warning"]
    description = alert["annotations"]["description"]
    assert " is 1.00 over 10s under load, although it accepts batches up to 4." in description
    assert description.endswith("dynamic_batching is off.")
    wait_for(
        "a warning notification at the webhook",
        lambda: stack.webhook.alerts("BatchingIneffective", "firing"),
    )
