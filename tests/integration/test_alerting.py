"""Alerts end to end in the running stack: real Triton, Prometheus and Alertmanager.

The stack runs with test settings (short windows and ``for`` durations, 1 s
scrapes, Alertmanager flushing after 1 s) and sends critical and warning
notifications to a webhook receiver in this test, so each step is seconds.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from loadgen.burst import infer_body
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
    for alert in data["alerts"].values():
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
        with running(settings) as supervisor:
            yield Stack(settings, supervisor, webhook)
    finally:
        webhook.server.shutdown()
        webhook.server.server_close()


def test_triton_down_fires_once_reaches_alertmanager_and_resolves(stack: Stack) -> None:
    triton = stack.settings.url("triton_http")
    assert not stack.am_alerts("TritonDown")

    stack.supervisor.stop_service("triton")
    received = wait_for("Alertmanager holds TritonDown", lambda: stack.am_alerts("TritonDown"))
    # Prometheus' scrape of Triton fails too, but one outage pages once: the exporter's view.
    time.sleep(3)
    (alert,) = stack.am_alerts("TritonDown")
    assert alert["labels"]["target"] == triton
    assert alert["labels"]["severity"] == "critical"
    assert alert["status"]["state"] == "active"
    assert [r["name"] for r in alert["receivers"]] == ["critical"]
    assert alert["annotations"]["description"] == f"The exporter cannot read Triton at {triton}."
    assert "tritonserver process" in alert["annotations"]["runbook"]
    assert len(stack.firing("TritonDown")) == 1, received
    notes = wait_for(
        "a firing notification at the webhook", lambda: stack.webhook.alerts("TritonDown", "firing")
    )
    assert notes[0]["labels"]["severity"] == "critical"
    assert {n["labels"].get("target") for n in notes} == {triton}

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
