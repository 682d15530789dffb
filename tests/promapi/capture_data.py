"""Capture real Prometheus API answers for the Prometheus client's parsing tests.

Starts this project's stack with the launcher's code on free ports, sends a few
requests to Triton, waits for Prometheus to scrape them, loads a rules file with
one firing and one pending alert, and saves the raw HTTP bodies under
tests/promapi/data/. Run it again after changing what is captured:

    .venv/bin/python -m tests.promapi.capture_data
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import requests
import yaml

from loadgen.clients.burst import burst, infer_body
from stack.supervisor import Supervisor, running
from stacksettings import Settings, isolated

DATA = Path(__file__).parent / "data"

RULES = {
    "groups": [
        {
            "name": "capture",
            "rules": [
                {
                    "alert": "CaptureAlwaysFiring",
                    "expr": "vector(1) > 0",
                    "labels": {"severity": "warning"},
                    "annotations": {
                        "summary": "Always firing: proves the alerts API is read",
                        "description": "A rule used only to capture a real /api/v1/alerts answer.",
                    },
                },
                {
                    "alert": "CapturePending",
                    "expr": "sum(nv_inference_count) > 0",
                    "for": "1h",
                    "labels": {"severity": "info"},
                    "annotations": {"summary": "Pending for an hour before it fires"},
                },
            ],
        }
    ]
}


def save(name: str, response: requests.Response) -> None:
    (DATA / name).write_text(response.text)
    print(f"{name}: HTTP {response.status_code}, {len(response.text)} bytes")


def main() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        settings = isolated(Path(tmp))
        with running(settings, log=print) as supervisor:
            capture(settings, supervisor)


def capture(settings: Settings, supervisor: Supervisor) -> None:
    prom = settings.url("prometheus")
    host, port = settings.host, settings.port("triton_http")
    body = infer_body({"INPUT_A": [1.0], "INPUT_B": [2.0]})
    start = time.time()
    for _ in range(20):
        burst(host, port, "batch_add_model", [body] * 3)
        burst(host, port, "add_unbatched", [body] * 2)
        time.sleep(0.2)
    time.sleep(3 * settings.scrape_interval_s + 1)

    cfg_path = settings.state_dir / "prometheus" / "prometheus.yml"
    rules_path = settings.state_dir / "prometheus" / "capture-rules.yml"
    rules_path.write_text(yaml.safe_dump(RULES))
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["rule_files"] = [str(rules_path)]
    cfg_path.write_text(yaml.safe_dump(cfg))
    # No lifecycle API (a cross-origin POST could use it): SIGHUP reloads the config.
    supervisor.reload("prometheus")
    time.sleep(3 * settings.scrape_interval_s)

    def get(path: str, **params: str) -> requests.Response:
        return requests.get(f"{prom}{path}", params=params, timeout=10)

    end = time.time()
    save("query_vector.json", get("/api/v1/query", query="sum by (model) (nv_inference_count)"))
    save(
        "query_vector_summary.json",
        get("/api/v1/query", query='nv_inference_request_summary_us{quantile="0.99"}'),
    )
    save("query_vector_empty.json", get("/api/v1/query", query="nv_no_such_metric_total"))
    save("query_scalar.json", get("/api/v1/query", query="scalar(sum(nv_inference_count))"))
    save(
        "query_vector_nan.json",
        get("/api/v1/query", query="sum(nv_inference_count) / 0 - sum(nv_inference_count) / 0"),
    )
    save("query_vector_inf.json", get("/api/v1/query", query="sum(nv_inference_count) / 0"))
    save("query_bad_data.json", get("/api/v1/query", query="sum(rate(nv_inference_count[5m])"))
    save(
        "query_range_matrix.json",
        get(
            "/api/v1/query_range",
            query="sum by (model) (rate(nv_inference_count[4s]))",
            start=f"{start:.3f}",
            end=f"{end:.3f}",
            step="1",
        ),
    )
    save(
        "query_range_too_many_points.json",
        get(
            "/api/v1/query_range",
            query="nv_inference_count",
            start=f"{end - 86400:.3f}",
            end=f"{end:.3f}",
            step="1",
        ),
    )
    save("alerts.json", get("/api/v1/alerts"))
    meta = {"captured_at": end, "load_started_at": start, "scrape_interval_s": 1.0}
    (DATA / "capture.json").write_text(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
