"""The Grafana dashboard: its SDK types, datasource, variables, and every query checked.

No Grafana server runs here. What is tested instead: the JSON is what Grafana's own
SDK builds and reads back; every panel and query reads the ``$datasource`` variable;
every query uses the ``$target`` and ``$model`` variables (but the two the live view
also runs without them); promtool parses every query; and in a running stack every
panel's query, with the variables filled in as Grafana fills them, returns data from the
real Prometheus (the GPU panels from recorded series through ``promtool test rules``:
this machine has no GPU).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from dashboard import live
from dashboard import queries as q
from deploygen import deployfiles, grafana
from loadgen.engine.runner import RunParams, run
from promapi import MAX_POINTS
from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.dashboard.conftest import prom_has, wait_for

COMMITTED = deployfiles.GRAFANA_DASHBOARD
BUILTIN = {"__range", "__rate_interval"}


def board() -> dict[str, Any]:
    return json.loads(COMMITTED.read_text())


def panels() -> list[dict[str, Any]]:
    return [p for p in board()["panels"] if p["type"] != "row"]


def test_the_committed_json_is_what_the_sdk_builds_and_reads_back() -> None:
    assert COMMITTED.read_text() == grafana.render()
    # Grafana's SDK parses it into its typed model and writes the same JSON again.
    again = Dashboard.from_json(board())
    assert json.loads(json.dumps(again, cls=JSONEncoder)) == board()
    assert board()["uid"] == grafana.UID and board()["schemaVersion"] >= 39


def test_every_panel_and_query_reads_the_datasource_variable() -> None:
    ref = {"type": "prometheus", "uid": "${datasource}"}
    variables = {v["name"]: v for v in board()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for p in panels():
        assert p["datasource"] == ref, p["title"]
        assert p["targets"], p["title"]
        for target in p["targets"]:
            assert target["datasource"] == ref, p["title"]
    for name in ("target", "model"):
        assert variables[name]["datasource"] == ref
        assert variables[name]["type"] == "query"


def test_every_query_uses_the_server_and_model_variables() -> None:
    defined = {v["name"] for v in board()["templating"]["list"]}
    for p in panels():
        for target in p["targets"]:
            expr = target["expr"]
            used = set(re.findall(r"\$(\w+)", expr)) - {"1"}  # label_replace's $1
            assert used <= defined | BUILTIN, (p["title"], used - defined - BUILTIN)
            # Triton's own latency summary has no target label; the GPUs no model.
            if "nv_inference_request_summary_us" not in expr:
                assert "$target" in expr, p["title"]
            if "triton_batching_gpu_" not in expr:
                assert "$model" in expr, p["title"]
    # The model list follows the chosen server.
    model = next(v for v in board()["templating"]["list"] if v["name"] == "model")
    assert "$target" in model["query"]


def test_the_panels_are_the_live_views_queries() -> None:
    """No drift: each KPI and chart of the Streamlit view is a panel, with its template."""
    exprs = {t["expr"] for p in panels() for t in p["targets"]}
    for template in live.KPI_QUERIES.values():
        sel = grafana.MODEL_ONLY if template is q.P99_REQUEST_SECONDS else grafana.SELECTOR
        assert q.build(template, sel, "$__range") in exprs
    for template in live.SERIES_QUERIES.values():
        assert q.build(template, grafana.SELECTOR, "$__rate_interval") in exprs
    # The KPIs that are the charts' last point: the chart's query, range, on the chart's step.
    latest = {grafana.LATEST_PANELS[name][0]: t for name, t in live.LATEST_QUERIES.items()}
    for p in panels():
        if p["title"] in latest:
            (target,) = p["targets"]
            assert target["expr"] == q.build(
                latest[p["title"]], grafana.SELECTOR, "$__rate_interval"
            )
            assert target["range"] and not target["instant"], p["title"]
            assert p["options"]["reduceOptions"]["calcs"] == ["last"], p["title"]
    stats = [p for p in panels() if p["title"] in latest]
    assert len(stats) == len(live.LATEST_QUERIES)
    charts = [p for p in panels() if p["type"] == "timeseries" and not p["title"].startswith("GPU")]
    assert {p["maxDataPoints"] for p in stats + charts} == {MAX_POINTS}
    assert q.build(q.BATCH_SIZE_DISTRIBUTION, grafana.SELECTOR, "$__range") in exprs
    assert q.build(q.PREFERRED_BATCH_SIZES, grafana.SELECTOR) in exprs
    titles = [p["title"] for p in panels()]
    assert "Batch sizes formed in the time range" in titles
    assert "Alerts (firing and pending)" in titles
    assert next(p for p in panels() if p["title"].startswith("Batch sizes"))["type"] == "barchart"


def filled(expr: str, target: str, model: str, scrape_s: float = 1.0) -> str:
    """A panel's query with the variables filled in as Grafana does.

    A variable with "All" is regex-escaped (Grafana's Prometheus datasource), and the
    escape doubles inside a PromQL string.
    """
    escaped = re.escape(target).replace("\\", "\\\\")
    return (
        expr.replace("$__rate_interval", f"{int(4 * scrape_s)}s")
        .replace("$__range", "300s")
        .replace("$target", escaped)
        .replace("$model", model)
    )


def test_promtool_parses_every_query(tmp_path: Path) -> None:
    rules = [
        {"record": f"grafana:panel_{i}", "expr": filled(expr, "http://127.0.0.1:8000", "m")}
        for i, expr in enumerate(t["expr"] for p in panels() for t in p["targets"])
    ]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "grafana", "rules": rules}]}))
    out = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules)} rules found" in out.stdout


def test_gpu_panels_on_recorded_gpu_series(tmp_path: Path) -> None:
    """No GPU here: the GPU panels' queries run on series as a GPU host's exporter has them."""
    target = "http://10.0.0.5:8000"
    labels = f'{{target="{target}",gpu_uuid="GPU-a"}}'
    series = [
        {"series": f"triton_batching_gpu_utilization_ratio{labels}", "values": "0.25+0x10"},
        {"series": f"triton_batching_gpu_memory_used_bytes{labels}", "values": "2e9+0x10"},
        {  # another server: the $target variable keeps it out
            "series": 'triton_batching_gpu_utilization_ratio{target="http://other:8000",gpu_uuid="GPU-b"}',
            "values": "0.9+0x10",
        },
    ]
    gpu = [p for p in panels() if p["title"].startswith("GPU")]
    assert len(gpu) == 2
    expected = {"GPU utilisation": 0.25, "GPU memory used": 2e9}
    tests = [
        {
            "expr": filled(p["targets"][0]["expr"], target, "m"),
            "eval_time": "5m",
            "exp_samples": [
                {
                    "labels": f'{{gpu_uuid="GPU-a", target="{target}"}}',
                    "value": expected[p["title"]],
                }
            ],
        }
        for p in gpu
    ]
    path = tmp_path / "gpu_test.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}],
            }
        )
    )
    out = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stdout + out.stderr


# ---- against the real Prometheus of a running stack ---------------------------------------


@pytest.fixture(scope="module")
def busy_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A private stack after serial and concurrent load on batch_add_model.

    The serial part (one request at a time: every batch of 1, no preferred size) makes
    LowPreferredBatchHitRatio pending, so the alerts panel has an alert to show.
    """
    settings = isolated(tmp_path_factory.mktemp("grafana"))
    with running(settings, exclude={"dashboard"}):
        wait_for(
            lambda: prom_has(settings, 'triton_batching_executions_total{model="batch_add_model"}'),
            30,
            "the exporter's first scrape",
        )
        url = settings.url("triton_http")
        # Over several scrapes: a counter's first sample is not counted by rate().
        run(RunParams("concurrency", concurrency=1, duration_s=4.0, url=url))
        # About 30 batches of 4 against thousands of 1: the hit ratio stays far under 50 %.
        run(RunParams("concurrency", concurrency=8, requests=120, duration_s=5.0, url=url))
        wait_for(
            lambda: prom_has(settings, 'ALERTS{alertname="LowPreferredBatchHitRatio"}'),
            30,
            "LowPreferredBatchHitRatio to be pending",
        )
        yield settings


@pytest.mark.integration
def test_every_panel_returns_data_from_the_real_prometheus(busy_stack: Settings) -> None:
    s = busy_stack
    api = s.url("prometheus") + "/api/v1"
    now = time.time()
    empty = []
    for p in panels():
        if p["title"].startswith("GPU"):
            continue  # no GPU on this machine: test_gpu_panels_on_recorded_gpu_series
        for target in p["targets"]:
            expr = filled(target["expr"], s.url("triton_http"), "batch_add_model")
            if target.get("instant"):
                params: dict[str, Any] = {"query": expr, "time": now}
                body = requests.get(f"{api}/query", params=params, timeout=10).json()
            else:
                params = {"query": expr, "start": now - 60, "end": now, "step": 2}
                body = requests.get(f"{api}/query_range", params=params, timeout=10).json()
            assert body["status"] == "success", (p["title"], body)
            if not body["data"]["result"]:
                empty.append((p["title"], expr))
    assert not empty, empty
