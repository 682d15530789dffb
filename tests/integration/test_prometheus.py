"""Prometheus, started by the launcher, really scrapes Triton."""

from __future__ import annotations

import time

import pytest
import requests
import tritonclient.http as httpclient

from stacksettings import Settings
from tests.helpers import infer_add

pytestmark = pytest.mark.integration


def query(settings: Settings, promql: str) -> list[dict]:
    response = requests.get(
        f"{settings.url('prometheus')}/api/v1/query", params={"query": promql}, timeout=5
    )
    response.raise_for_status()
    return response.json()["data"]["result"]


def test_prometheus_scrapes_triton_inference_count(running_stack: Settings) -> None:
    client = httpclient.InferenceServerClient(
        f"{running_stack.host}:{running_stack.port('triton_http')}"
    )
    assert infer_add(client, "batch_add_model", 1.0, 1.0) == 2.0
    promql = 'nv_inference_count{job="triton",model="batch_add_model"}'
    deadline = time.monotonic() + 30
    value = 0.0
    while time.monotonic() < deadline:
        result = query(running_stack, promql)
        value = float(result[0]["value"][1]) if result else 0.0
        if value >= 1:
            break
        time.sleep(0.5)
    assert value >= 1, f"Prometheus never saw {promql} >= 1"
    (target,) = [
        t
        for t in requests.get(
            f"{running_stack.url('prometheus')}/api/v1/targets", timeout=5
        ).json()["data"]["activeTargets"]
        if t["labels"]["job"] == "triton"
    ]
    assert target["health"] == "up"
    assert target["scrapeUrl"] == f"{running_stack.url('triton_metrics')}/metrics"
