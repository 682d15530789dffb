"""Attaching to a real Triton on ports of its own, and to one whose metrics are elsewhere.

A Triton moved as a whole (HTTP, gRPC, metrics on three consecutive free ports) is attached
with its HTTP URL only: the metrics URL is found at the HTTP port + 2, the batching series
flow, and `status` names the URL. A Triton whose metrics port is not the HTTP port + 2 is
attached the same way: nothing answers there, and the batch-size distribution still flows
from the statistics API, the metrics endpoint is marked down, and exactly one alert fires.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from streamlit import config as st_config

from loadgen.clients.burst import burst, infer_body
from stack import attach
from stack import dashboard as dashboard_row
from stack.supervisor import running
from stacksettings import PORTS, ROOT, Settings, free_port_run, free_ports, isolated
from tests.fleet import dashboard_run
from tests.helpers import wait_for
from tests.integration.test_alerting import Webhook, test_rules_settings

pytestmark = pytest.mark.integration

MODEL = "batch_add_model"
BODY = infer_body({"INPUT_A": [1.0], "INPUT_B": [2.0]})


def triton_on(folder: Path, http: int, metrics: int) -> Settings:
    """The stack's own Triton alone, on ``http``, ``http`` + 1 and ``metrics``."""
    return isolated(folder).with_ports(
        triton_http=http, triton_grpc=http + 1, triton_metrics=metrics
    )


def infer(settings: Settings, count: int) -> None:
    answers = burst("127.0.0.1", settings.port("triton_http"), MODEL, [BODY] * count)
    assert all(a["outputs"][0]["data"] == [3.0] for a in answers), answers


def samples(url: str) -> list[Any]:
    text = requests.get(f"{url}/metrics", timeout=30).text
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


def scraped(url: str) -> list[Any]:
    """The exporter's samples once a read of its targets has finished (each endpoint marked
    up or down), else none."""
    found = samples(url)
    return found if any(s.name == "triton_batching_endpoint_up" for s in found) else []


def distribution(found: list[Any], target: str) -> dict[str, float]:
    return {
        s.labels["batch_size"]: s.value
        for s in found
        if s.name == "triton_batching_batch_executions_total"
        and s.labels["target"] == target
        and s.labels["model"] == MODEL
    }


def stack_cli(state: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "batchscope", *argv, "--state-dir", str(state)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_a_triton_on_its_own_ports_is_attached_with_its_http_url_only(tmp_path: Path) -> None:
    http, _grpc, metrics = free_port_run(3)
    triton = triton_on(tmp_path / "triton", http, metrics)
    url, metrics_url = triton.url("triton_http"), f"http://127.0.0.1:{metrics}/metrics"
    mine = isolated(tmp_path / "attached")
    ports = [a for n in PORTS for a in (f"--{n.replace('_', '-')}-port", str(mine.port(n)))]
    skip = [a for s in ("prometheus", "alertmanager", "dashboard") for a in ("--skip", s)]
    with running(triton, only={"triton"}):
        infer(triton, 4)
        try:
            started = stack_cli(
                mine.state_dir, "up", "--detach", "--no-warmup", "--triton-url", url, *ports, *skip
            )
            assert started.returncode == 0, started.stdout + started.stderr
            assert (
                f"up: --triton-url {url}: Triton's metrics found at {metrics_url} "
                "(the HTTP port + 2)"
            ) in started.stderr.splitlines(), started.stderr
            found = samples(mine.url("exporter"))
            sizes = distribution(found, url)
            assert sizes and sum(int(k) * v for k, v in sizes.items()) >= 4, sizes
            pending = [
                s
                for s in found
                if s.name == "triton_batching_pending_requests" and s.labels["model"] == MODEL
            ]
            assert pending, "nothing read from the metrics URL that was found"
            # `status` names the metrics URL it found, and that it answers.
            status = stack_cli(mine.state_dir, "status", "--json")
            rows = {r["endpoint"]: r for r in json.loads(status.stdout)["endpoints"]}
            assert rows["metrics"] == {
                "target": url,
                "endpoint": "metrics",
                "url": metrics_url,
                "up": True,
                "reason": "",
            }
            statistics = rows["statistics"]
            assert statistics["url"] == f"{url}/v2/models/stats" and statistics["up"]
            text = stack_cli(mine.state_dir, "status").stdout
            assert f"  {url}  metrics    {metrics_url}  up" in text.splitlines(), text
        finally:
            down = stack_cli(mine.state_dir, "down")
            assert down.returncode == 0, down.stdout + down.stderr


def test_metrics_elsewhere_keeps_the_distribution_and_fires_one_alert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    http, _grpc, _skipped = free_port_run(3)
    (metrics,) = free_ports(1)
    assert metrics != http + 2
    triton = triton_on(tmp_path / "triton", http, metrics)
    url = triton.url("triton_http")
    (target,) = attach.targets([url], [])  # as `up --triton-url URL` finds it
    assert target.metrics_url == f"http://127.0.0.1:{http + 2}/metrics"
    webhook = Webhook()
    settings = replace(
        isolated(tmp_path / "attached"),
        rules_settings=test_rules_settings(tmp_path, webhook.url),
        triton_urls=(url,),
        triton_metrics_urls=(target.metrics_url,),
        attached_admin_key_file=triton.admin_key_file,  # the repository endpoint answers
    )
    try:
        with running(triton, only={"triton"}):
            (line,) = attach.probe([target], timeout_s=2.0)
            assert line.startswith(f"--triton-url {url}: no Triton metrics at {target.metrics_url}")
            assert "connection refused; give --triton-metrics-url URL" in line
            # A few requests: a distribution to read, too few to count as load for the
            # load-based alerts (fewer than 1 inference/s over the 10 s window).
            infer(triton, 3)
            with running(settings):
                _one_alert_for_the_metrics_endpoint(settings, url, webhook, monkeypatch)
    finally:
        webhook.server.shutdown()
        webhook.server.server_close()


def _one_alert_for_the_metrics_endpoint(
    settings: Settings, url: str, webhook: Webhook, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = settings.url("exporter")
    # A scrape waits for the exporter's reader at most one and a half fetch timeouts, then
    # answers every target down; on a loaded machine (a whole-suite run's) its first read
    # took longer, and this test's first scrape held no endpoint series at all.
    found = wait_for("the exporter's first scrape of the target", lambda: scraped(exporter))
    up = {s.labels["endpoint"]: s.value for s in found if s.name == "triton_batching_endpoint_up"}
    assert up == {"metrics": 0.0, "statistics": 1.0, "repository": 1.0, "config": 1.0}
    assert [s.value for s in found if s.name == "triton_batching_target_up"] == [1.0]
    sizes = distribution(found, url)
    assert sizes and sum(int(k) * v for k, v in sizes.items()) >= 3, sizes
    assert not [s for s in found if s.name == "triton_batching_pending_requests"]

    prometheus = settings.url("prometheus")

    def firing() -> list[dict[str, Any]]:
        body = requests.get(f"{prometheus}/api/v1/alerts", timeout=5).json()
        return [a for a in body["data"]["alerts"] if a["state"] == "firing"]

    wait_for("TritonEndpointDown firing", firing, timeout_s=60)
    wait_for(
        "its notification at the webhook",
        lambda: webhook.alerts("TritonEndpointDown", "firing"),
        timeout_s=60,
    )
    time.sleep(6)  # a few more evaluations: nothing else may fire
    alerts = firing()
    assert [(a["labels"]["alertname"], a["labels"].get("endpoint")) for a in alerts] == [
        ("TritonEndpointDown", "metrics")
    ], alerts
    assert alerts[0]["labels"]["target"] == url
    notes = webhook.alerts("TritonEndpointDown", "firing")
    assert {n["labels"]["endpoint"] for n in notes} == {"metrics"}
    assert {n["labels"]["alertname"] for note in webhook.received for n in note["alerts"]} == {
        "TritonEndpointDown"
    }

    # The fleet view says which endpoint of which server is down, where it was read, and why.
    env = dashboard_row.environment(settings)
    for name, value in {**env, "DASHBOARD_STORE": str(settings.store)}.items():
        monkeypatch.setenv(name, value)
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "127.0.0.1")
    try:
        at = dashboard_run.AppTest.from_file(str(dashboard_run.APP), default_timeout=60).run()
        at.sidebar.radio(key="view").set_value("Fleet").run()
    finally:
        st_config.set_option("server.address", before)
    assert not at.exception
    warnings = [str(w.value) for w in at.warning if "endpoint" in str(w.value)]
    assert any(
        w.startswith(f"Triton at {url}: its metrics endpoint (http://127.0.0.1:")
        and "connection refused" in w
        and "--triton-metrics-url" in w
        for w in warnings
    ), warnings
    table = at.dataframe[0].value
    assert set(table.loc[table["server"] == url, "endpoints down"]) == {
        "metrics (connection refused)"
    }
