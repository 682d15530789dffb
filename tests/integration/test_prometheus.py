"""Prometheus, started by the launcher, really scrapes Triton."""

from __future__ import annotations

import time

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from stack.settings import Settings

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
    inputs = []
    for name in ("INPUT_A", "INPUT_B"):
        tensor = httpclient.InferInput(name, [1, 1], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 1), dtype=np.float32))
        inputs.append(tensor)
    client.infer("batch_add_model", inputs)
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
