"""Attach mode's bad input: one line naming the flag, exit 2, nothing started; and an
attached stack reading a real, restricted Triton with its key.

Fake servers stand in for what a wrong URL finds: a web page, a 404, a Prometheus endpoint
that is not Triton's. A server that does not answer at all is no error: it is watched.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from exporter.targets import Target
from rules import prometheus_config
from stack import attach, prometheus
from stack import exporter as exporter_row
from stack.services import service_table
from stacksettings import PORTS, ROOT, Settings, free_port_run, free_ports, isolated
from tests.deploy.tools import promtool

TRITON_V2 = {"name": "triton", "version": "2.51.0", "extensions": []}


def serve(answers: dict[str, tuple[int, str, str]], port: int = 0) -> ThreadingHTTPServer:
    """A server answering path -> (status, content type, body); 404 for other paths."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            status, kind, body = answers.get(self.path, (404, "text/plain", "not found"))
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, str]]:
    html = "<html><body>Welcome to nginx!</body></html>"
    servers = {
        "html": serve({"/v2": (200, "text/html", html)}),
        "notfound": serve({}),
        "triton": serve(
            {
                "/v2": (200, "application/json", json.dumps(TRITON_V2)),
                "/metrics": (200, "text/plain", "# TYPE go_goroutines gauge\ngo_goroutines 7\n"),
            }
        ),
    }
    yield {name: f"http://127.0.0.1:{s.server_address[1]}" for name, s in servers.items()}
    for s in servers.values():
        s.shutdown()
        s.server_close()


def up(state: Path, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "batchscope", "up", "--no-warmup", "--state-dir", str(state), *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def stack_cli(settings: Settings, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "batchscope", *argv, "--state-dir", str(settings.state_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


(DEAD,) = free_ports(1)
DEAD_URL = f"http://127.0.0.1:{DEAD}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--triton-url", "ftp://gpu-host:8000"], "--triton-url: 'ftp://gpu-host:8000' is not"),
        (["--triton-url", "http://gpu-host:8000/v2"], "is not an http(s)://host:port URL"),
        (["--triton-url", "http://gpu-host:99999"], "--triton-url: 'http://gpu-host:99999' has"),
        (["--triton-url", DEAD_URL, "--triton-url", DEAD_URL + "/"], "the same Triton is given"),
        (["--triton-metrics-url", DEAD_URL], "--triton-metrics-url and --triton-admin-key-file"),
        (
            ["--triton-url", DEAD_URL, "--triton-url", "http://127.0.0.2:1"]
            + ["--triton-metrics-url", DEAD_URL],
            "--triton-metrics-url given 1 time(s) for 2 --triton-url",
        ),
        ("html", "--triton-url: {url} is not a Triton HTTP endpoint"),
        ("notfound", "--triton-url: {url} is not a Triton HTTP endpoint"),
        ("triton", "--triton-metrics-url: {url}/metrics answers, but with no Triton metrics"),
    ],
)
def test_bad_attach_input_is_one_line_exit_2_and_nothing_started(
    tmp_path: Path, fakes: dict[str, str], argv: list[str] | str, message: str
) -> None:
    if isinstance(argv, str):  # one of the fake servers
        url = fakes[argv]
        argv, message = ["--triton-url", url, "--triton-metrics-url", url], message.format(url=url)
    done = up(tmp_path / "state", *argv)
    lines = [ln for ln in done.stderr.splitlines() if ln and not ln.startswith("usage:")]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "state").exists()  # nothing started, nothing written


def test_a_server_that_is_down_at_start_is_watched_not_refused() -> None:
    warnings = attach.probe([Target(DEAD_URL, f"{DEAD_URL}/metrics")], timeout_s=1.0)
    assert len(warnings) == 2
    assert warnings[0].startswith(f"--triton-url {DEAD_URL} does not answer now")
    assert warnings[0].endswith("; watching it")


def test_the_metrics_url_is_found_at_the_http_port_plus_2_and_gets_its_path() -> None:
    """Triton's layout: HTTP, gRPC = HTTP + 1, metrics = HTTP + 2 (8000/8001/8002 by
    default, 18000/18001/18002 for a Triton moved as a whole)."""
    found = attach.targets(["http://gpu-a:8000", "https://gpu-b:9000", "http://gpu-c"], [])
    assert [t.metrics_url for t in found] == [
        "http://gpu-a:8002/metrics",
        "https://gpu-b:9002/metrics",
        "http://gpu-c:8002/metrics",
    ]
    (target,) = attach.targets(["http://gpu-a:8000"], ["http://gpu-a:9102"])
    assert target.metrics_url == "http://gpu-a:9102/metrics"


METRICS_TEXT = '# TYPE nv_inference_count counter\nnv_inference_count{model="m",version="1"} 3\n'


def test_up_reports_the_metrics_url_it_found_at_the_http_port_plus_2() -> None:
    http, _grpc, metrics = free_port_run(3)
    servers = [
        serve({"/v2": (200, "application/json", json.dumps(TRITON_V2))}, http),
        serve({"/metrics": (200, "text/plain", METRICS_TEXT)}, metrics),
    ]
    try:
        found = attach.targets([f"http://127.0.0.1:{http}"], [])
        assert attach.probe(found, timeout_s=2.0) == [
            f"--triton-url http://127.0.0.1:{http}: Triton's metrics found at "
            f"http://127.0.0.1:{metrics}/metrics (the HTTP port + 2)"
        ]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_no_metrics_at_the_http_port_plus_2_is_one_line_naming_the_flag() -> None:
    """Nothing there (a Triton with --allow-metrics false, or its metrics port moved): the
    stack goes on, reading the rest; the line says which flag gives the URL."""
    http, _grpc, metrics = free_port_run(3)
    server = serve({"/v2": (200, "application/json", json.dumps(TRITON_V2))}, http)
    try:
        found = attach.targets([f"http://127.0.0.1:{http}"], [])
        (line,) = attach.probe(found, timeout_s=2.0)
    finally:
        server.shutdown()
        server.server_close()
    assert line == (
        f"--triton-url http://127.0.0.1:{http}: no Triton metrics at "
        f"http://127.0.0.1:{metrics}/metrics (the HTTP port + 2): connection refused; give "
        "--triton-metrics-url URL (the batch sizes are still read from the statistics API)"
    )


def test_status_lines_name_each_endpoint_its_url_and_the_fix() -> None:
    exporter_text = (
        "# TYPE triton_batching_endpoint_up gauge\n"
        'triton_batching_endpoint_up{target="http://h:18000",endpoint="metrics"} 0.0\n'
        'triton_batching_endpoint_up{target="http://h:18000",endpoint="statistics"} 1.0\n'
        "# TYPE triton_batching_endpoint_info gauge\n"
        'triton_batching_endpoint_info{target="http://h:18000",endpoint="metrics",'
        'url="http://h:18002/metrics",reason="connection refused"} 1.0\n'
        'triton_batching_endpoint_info{target="http://h:18000",endpoint="statistics",'
        'url="http://h:18000/v2/models/stats",reason=""} 1.0\n'
    )
    server = serve({"/metrics": (200, "text/plain", exporter_text)})
    try:
        exporter = {"metrics": f"http://127.0.0.1:{server.server_address[1]}/metrics"}
        rows = attach.endpoint_rows([{"name": "exporter", "urls": exporter}])
    finally:
        server.shutdown()
        server.server_close()
    assert attach.endpoint_lines(rows) == [
        "triton endpoints, as the exporter reads them:",
        "  http://h:18000  metrics    http://h:18002/metrics  down (connection refused): "
        "give --triton-metrics-url",
        "  http://h:18000  statistics http://h:18000/v2/models/stats  up",
    ]
    dead = {"metrics": f"{DEAD_URL}/metrics"}
    assert attach.endpoint_rows([{"name": "exporter", "urls": dead}]) == []
    assert attach.endpoint_rows([]) == []


def test_attach_mode_wires_every_service_to_the_given_servers(tmp_path: Path) -> None:
    found = attach.targets(
        ["http://gpu-a:8000", "http://gpu-b:8000"],
        ["http://gpu-a:8002", "https://gpu-b:9443/x/metrics"],
    )
    settings = Settings(
        state_dir=tmp_path,
        triton_urls=tuple(t.url for t in found),
        triton_metrics_urls=tuple(t.metrics_url for t in found),
    )
    assert [s.name for s in service_table(settings)] == [
        "exporter",
        "alertmanager",
        "prometheus",
        "dashboard",
    ]
    argv = exporter_row.service(settings).argv
    assert "--triton-url=http://gpu-a:8000" in argv and "--triton-url=http://gpu-b:8000" in argv
    assert not [a for a in argv if a.startswith(("--trace-file", "--triton-admin-key-file"))]
    # Attached servers are read off the scrape path, once per scrape interval.
    assert f"--read-interval={settings.scrape_interval_s:g}" in argv
    targets = prometheus_config.local_targets(settings)
    jobs = prometheus_config.config(targets, 5.0)["scrape_configs"]
    triton_job = next(j for j in jobs if j["job_name"] == "triton")
    assert triton_job["static_configs"] == [
        {"targets": ["gpu-a:8002"]},
        {
            "targets": ["gpu-b:9443"],
            "labels": {"__scheme__": "https", "__metrics_path__": "/x/metrics"},
        },
    ]
    # Prometheus itself accepts the per-target scheme and path.
    path = prometheus.write_config(settings)
    out = promtool("check", "config", "--syntax-only", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.integration
def test_an_attached_stack_reads_a_restricted_triton_with_its_key(
    running_stack: Settings, tmp_path: Path
) -> None:
    """`batchscope up --detach --triton-url ... --triton-admin-key-file ...` against a
    real Triton whose repository index is restricted (the session stack's, with its key):
    the attached exporter reads the index with the key, so model_ready is exported."""
    mine = isolated(tmp_path / "attached")
    ports = [a for n in PORTS for a in (f"--{n.replace('_', '-')}-port", str(mine.port(n)))]
    key = running_stack.admin_key_file
    triton = running_stack.url("triton_http")
    index = requests.post(f"{triton}/v2/repository/index", json={}, timeout=10)
    assert index.status_code in (401, 403), "the index must be restricted for this test"
    argv = ["--detach", "--triton-url", triton, "--triton-admin-key-file", str(key), *ports]
    argv += ["--triton-metrics-url", running_stack.url("triton_metrics")]
    try:
        started = up(mine.state_dir, *argv, timeout=240)
        assert started.returncode == 0, started.stdout + started.stderr
        exporter = next(
            r
            for r in json.loads(stack_cli(mine, "status", "--json").stdout)["services"]
            if r["name"] == "exporter"
        )
        assert exporter["state"] == "healthy", exporter
        text = requests.get(f"{mine.url('exporter')}/metrics", timeout=10).text
        ready = [
            s
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "triton_batching_model_ready" and s.labels["target"] == triton
        ]
        assert {s.labels["model"]: s.value for s in ready}.get("batch_add_model") == 1.0, text
        cmdline = Path(f"/proc/{exporter['pid']}/cmdline").read_bytes().split(b"\0")
        assert f"--triton-admin-key-file={key.resolve()}".encode() in cmdline
    finally:
        down = stack_cli(mine, "down")
        assert down.returncode == 0, down.stdout + down.stderr
