"""The exporter's command line: flags, environment fallbacks, misuse, and the real process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import requests

from batchscope.main import main as batchscope
from batchscope.main import parse
from exporter.options import Options, options_from
from exporter.targets import Target
from stacksettings import ROOT, free_ports
from tests.exporter.replay import captured_replies, replay_server


def options(argv: list[str], env: dict[str, str] | None = None) -> Options:
    return options_from(parse(["exporter", *argv]), env or {})


def main(argv: list[str]) -> int:
    return batchscope(["exporter", *argv])


def test_defaults() -> None:
    opts = options([])
    assert opts.targets == [Target("http://127.0.0.1:8000", "http://127.0.0.1:8002/metrics")]
    assert (opts.host, opts.port, opts.timeout_s) == ("127.0.0.1", 9733, 2.0)


def test_several_targets_with_their_metrics_urls_in_order() -> None:
    opts = options(
        [
            "--triton-url=http://a:8000",
            "--triton-url=b:9000/",
            "--triton-metrics-url=http://a:18002/metrics",
            "--triton-metrics-url=http://b:19002/metrics",
        ]
    )
    assert opts.targets == [
        Target("http://a:8000", "http://a:18002/metrics"),
        Target("http://b:9000", "http://b:19002/metrics"),
    ]


def test_environment_fallbacks_and_flags_win() -> None:
    env = {
        "TRITON_URL": "http://a:8000, http://b:8000",
        "TRITON_TIMEOUT": "0.5",
        "EXPORTER_LISTEN_ADDRESS": ":9999",
    }
    opts = options([], env)
    assert [t.metrics_url for t in opts.targets] == [
        "http://a:8002/metrics",
        "http://b:8002/metrics",
    ]
    assert (opts.host, opts.port, opts.timeout_s) == ("0.0.0.0", 9999, 0.5)
    opts = options(["--triton-url=http://c:8000", "--web.listen-address=127.0.0.2:1234"], env)
    assert [t.url for t in opts.targets] == ["http://c:8000"]
    assert (opts.host, opts.port) == ("127.0.0.2", 1234)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--triton-url=ftp://x"], "--triton-url: 'ftp://x' is not an http(s) URL"),
        (["--triton-url=http://x:99999"], "has a bad port"),
        (["--triton-url=http://a", "--triton-url=http://a/"], "the same Triton is given twice"),
        (
            ["--triton-url=a:1", "--triton-url=b:2", "--triton-metrics-url=http://a:3/metrics"],
            "--triton-metrics-url given 1 time(s) for 2 --triton-url",
        ),
        (["--triton-timeout=0"], "--triton-timeout: '0' is not a number of seconds"),
        (["--triton-timeout=soon"], "--triton-timeout: 'soon'"),
        (["--web.listen-address=localhost"], "--web.listen-address: 'localhost' is not HOST:PORT"),
        (["--web.listen-address=:0"], "is not HOST:PORT"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_bad_flags_give_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("batchscope exporter: error: ")
    assert err.endswith(" (see 'batchscope exporter --help')")
    assert message in err


def test_bad_environment_is_reported_like_a_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("EXPORTER_LOG_LEVEL", "loud")
    assert main([]) == 2
    assert "EXPORTER_LOG_LEVEL: 'loud'" in capsys.readouterr().err


def wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.ConnectionError:
            time.sleep(0.1)
    raise AssertionError(f"{url} not healthy within 20 s")


def test_the_process_serves_landing_page_health_metrics_and_stops_on_sigterm() -> None:
    (port,) = free_ports(1)
    base = f"http://127.0.0.1:{port}"
    with replay_server(captured_replies("after_load")) as triton:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "batchscope",
                "exporter",
                f"--triton-url={triton.target.url}",
                f"--triton-metrics-url={triton.target.metrics_url}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            wait_healthy(f"{base}/healthz", proc)
            page = requests.get(base, timeout=5)
            assert page.status_code == 200 and "/metrics" in page.text
            assert triton.target.url in page.text
            metrics = requests.get(f"{base}/metrics", timeout=5).text
            assert (
                'triton_batching_executions_total{model="batch_add_model",'
                f'target="{triton.target.url}",version="1"}} 2213.0'
            ) in metrics
            assert requests.get(f"{base}/nothing", timeout=5).status_code == 404
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    stream.close()


def test_a_taken_listen_address_is_misuse(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        code = main([f"--web.listen-address=127.0.0.1:{port}"])
    assert code == 2
    assert "cannot listen on 127.0.0.1:" in capsys.readouterr().err
