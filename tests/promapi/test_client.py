"""The data layer on real Prometheus answers captured from this project's stack.

The files under data/ were written by tests/dashboard/capture_data.py.
"""

from __future__ import annotations

import json
import math
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from promapi import (
    PromClient,
    PrometheusQueryError,
    PrometheusResponseError,
    PrometheusUnreachable,
    Range,
    alerts_frame,
    aligned_range,
    choose_step,
    matrix_frame,
    promql_duration,
    rate_window,
    rate_window_s,
    unwrap,
    vector_frame,
)

DATA = Path(__file__).parent / "data"


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


# ---- parsing ---------------------------------------------------------------------------


def test_vector_values_arrive_as_strings_and_become_floats() -> None:
    frame = vector_frame(unwrap(load("query_vector.json")))
    assert list(frame["model"]) == ["add_unbatched", "batch_add_model"]
    # capture_data.py sent 20 bursts of 2 and of 3 requests.
    assert list(frame["value"]) == [40.0, 60.0]
    assert frame["value"].dtype == float
    assert str(frame["time"].dt.tz) == "UTC"


def test_vector_keeps_every_label() -> None:
    payload = load("query_vector_summary.json")
    (raw,) = [r for r in payload["data"]["result"] if r["metric"]["model"] == "batch_add_model"]
    frame = vector_frame(unwrap(payload))
    row = frame.set_index("model").loc["batch_add_model"]
    assert row["quantile"] == "0.99"
    assert row["job"] == "triton"
    assert row["__name__"] == "nv_inference_request_summary_us"
    assert row["value"] == float(raw["value"][1]) > 0


def test_empty_vector_is_an_empty_frame_with_the_value_column() -> None:
    frame = vector_frame(unwrap(load("query_vector_empty.json")))
    assert frame.empty
    assert "value" in frame


def test_scalar_result_becomes_one_row() -> None:
    frame = vector_frame(unwrap(load("query_scalar.json")))
    assert list(frame["value"]) == [100.0]


def test_nan_and_inf_strings_parse() -> None:
    assert math.isnan(vector_frame(unwrap(load("query_vector_nan.json")))["value"].iloc[0])
    assert vector_frame(unwrap(load("query_vector_inf.json")))["value"].iloc[0] == math.inf


def test_matrix_is_long_form_one_row_per_sample() -> None:
    payload = load("query_range_matrix.json")
    frame = matrix_frame(unwrap(payload))
    series = payload["data"]["result"]
    assert len(frame) == sum(len(s["values"]) for s in series)
    first = series[1]
    rows = frame[frame["model"] == first["metric"]["model"]]
    assert list(rows["value"]) == [float(v) for _, v in first["values"]]
    assert rows["time"].iloc[0] == pd.Timestamp(first["values"][0][0], unit="s", tz="UTC")
    assert rows["time"].is_monotonic_increasing


def test_matrix_parser_refuses_a_vector() -> None:
    with pytest.raises(PrometheusResponseError, match="matrix"):
        matrix_frame(unwrap(load("query_vector.json")))


def test_error_response_becomes_a_query_error_with_prometheus_words() -> None:
    with pytest.raises(PrometheusQueryError) as info:
        unwrap(load("query_bad_data.json"), "sum(rate(x[5m])")
    assert info.value.error_type == "bad_data"
    assert "unclosed left parenthesis" in str(info.value)
    assert "sum(rate(x[5m])" in str(info.value)


def test_too_many_points_is_a_query_error() -> None:
    with pytest.raises(PrometheusQueryError, match="11,000 points"):
        unwrap(load("query_range_too_many_points.json"))


@pytest.mark.parametrize("payload", [[], "ok", {"data": {}}, None])
def test_garbage_is_a_response_error(payload: Any) -> None:
    with pytest.raises(PrometheusResponseError):
        unwrap(payload)


def test_garbage_sample_value_is_a_response_error() -> None:
    data = {"resultType": "vector", "result": [{"metric": {}, "value": [1.0, "many"]}]}
    with pytest.raises(PrometheusResponseError, match="'many'"):
        vector_frame(data)


def test_alerts_firing_first_with_summaries() -> None:
    frame = alerts_frame(unwrap(load("alerts.json")))
    assert list(frame["alertname"]) == ["CaptureAlwaysFiring", "CapturePending"]
    assert list(frame["state"]) == ["firing", "pending"]
    assert frame["summary"].iloc[0] == "Always firing: proves the alerts API is read"
    assert frame["severity"].iloc[0] == "warning"
    assert frame["value"].iloc[1] == 100.0
    assert frame["active_at"].iloc[0].year == 2026


# ---- steps and windows ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window_s", "min_step", "step"),
    [(300, 1, 1), (300, 5, 5), (3600, 1, 15), (3 * 3600, 1, 60), (86400, 1, 300), (60, 1, 1)],
)
def test_step_keeps_points_under_the_limit_and_at_least_the_scrape_interval(
    window_s: float, min_step: float, step: int
) -> None:
    assert choose_step(window_s, min_step) == step
    assert window_s / step <= 300


def test_a_huge_window_still_gets_a_step_prometheus_accepts() -> None:
    step = choose_step(400 * 86400)
    assert 400 * 86400 / step <= 11_000


def test_aligned_range_ends_on_a_step_multiple_so_refreshes_share_a_cache_key() -> None:
    a = aligned_range(3600, end=1_000_000_007.0)
    b = aligned_range(3600, end=1_000_000_014.9)
    assert a == b == Range(start=1_000_000_005.0 - 3600, end=1_000_000_005.0, step_s=15)


def test_rate_window_covers_four_scrapes_and_one_step() -> None:
    assert rate_window(step_s=1, scrape_interval_s=5) == "20s"
    assert rate_window(step_s=60, scrape_interval_s=5) == "65s"
    assert rate_window_s(step_s=60, scrape_interval_s=5) == 65
    assert promql_duration(0.5) == "500ms"
    with pytest.raises(ValueError):
        promql_duration(0)


# ---- the client against servers that misbehave ------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_prometheus_says_what_to_do() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(PrometheusUnreachable) as info:
        PromClient(url, timeout_s=2).query("up")
    message = str(info.value)
    assert url in message and "connection refused" in message and "./stack/up" in message


class _Handler(BaseHTTPRequestHandler):
    status = 200
    body = b""
    delay = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_server() -> Iterator[tuple[str, type[_Handler]]]:
    """Not a Prometheus: a web server answering whatever the test sets."""
    handler = type("Handler", (_Handler,), {})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_web_page_instead_of_prometheus_is_a_response_error(
    fake_server: tuple[str, type[_Handler]],
) -> None:
    url, handler = fake_server
    handler.body = b"<html>Grafana</html>"
    with pytest.raises(PrometheusResponseError, match="not JSON"):
        PromClient(url).query("up")


def test_an_http_400_with_a_prometheus_error_body_is_a_query_error(
    fake_server: tuple[str, type[_Handler]],
) -> None:
    url, handler = fake_server
    handler.status = 400
    handler.body = (DATA / "query_bad_data.json").read_bytes()
    with pytest.raises(PrometheusQueryError, match="bad_data"):
        PromClient(url).query("sum(")


def test_scalar_of_a_replayed_answer(fake_server: tuple[str, type[_Handler]]) -> None:
    url, handler = fake_server
    handler.body = (DATA / "query_vector_empty.json").read_bytes()
    assert PromClient(url).scalar("nothing") is None
    handler.body = (DATA / "query_scalar.json").read_bytes()
    assert PromClient(url).scalar("scalar(x)") == 100.0
    handler.body = (DATA / "query_vector.json").read_bytes()
    with pytest.raises(PrometheusResponseError, match="one series"):
        PromClient(url).scalar("two series")
