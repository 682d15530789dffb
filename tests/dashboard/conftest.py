"""Fixtures of the dashboard's tests: an idle stack, load on the shared stack, the app."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from loadgen.clients.burst import burst, infer_body
from stack.supervisor import running
from stacksettings import Settings, free_ports, isolated
from tritonapi.client import TritonClient
from tritonapi.traces import start_window, stop_window

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"


def closed_url() -> str:
    """A loopback URL where nothing listens."""
    return f"http://127.0.0.1:{free_ports(1)[0]}"


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def prom_has(settings: Settings, promql: str) -> bool:
    url = f"{settings.url('prometheus')}/api/v1/query"
    result = requests.get(url, params={"query": promql}, timeout=5).json()["data"]["result"]
    return bool(result)


def scraped_after(settings: Settings, job: str, after: float) -> Callable[[], bool]:
    """True once Prometheus holds a sample of ``job`` taken after ``after`` (unix time)."""
    return lambda: prom_has(settings, f'timestamp(up{{job="{job}"}}) > {after:.3f}')


def send_bursts(settings: Settings, model: str, bursts: int, size: int = 3) -> int:
    body = infer_body({"INPUT_A": [1.0], "INPUT_B": [2.0]})
    sent = 0
    for _ in range(bursts):
        answers = burst(settings.host, settings.port("triton_http"), model, [body] * size)
        assert all(a["outputs"][0]["data"] == [3.0] for a in answers)
        sent += size
    return sent


@contextmanager
def busy(settings: Settings, model: str, size: int = 3) -> Iterator[float]:
    """Bursts of ``size`` to ``model`` without a pause until the block ends, entered once
    Prometheus holds scrapes that show them (the live KPIs are the charts' last point: the
    last seconds, not the time range). Yields when the load began (unix time)."""
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            send_bursts(settings, model, 1, size)

    sender = threading.Thread(target=send, daemon=True)
    started = time.time()
    sender.start()
    try:
        # Three scrapes in: a chart point at a whole second from now on holds the load.
        later = started + 3 * settings.scrape_interval_s
        wait_for(scraped_after(settings, "exporter", later), 30, "scrapes of the load")
        yield started
    finally:
        stop.set()
        sender.join(timeout=30)


# How old the shared stack's last load may be when a test starts. The pages and the doctor
# read windows of 5 minutes and more; a load sent once per session was older than that for
# the tests a long session ran last ("it executed nothing in the last 5 minutes").
LOAD_FRESH_S = 60.0
# State dir -> when its last load was sent (the stack is the worker's session stack).
_loaded_at: dict[Path, float] = {}


@pytest.fixture
def loaded_stack(running_stack: Settings) -> Settings:
    """The shared stack after some batched load within the last minute, scraped by
    Prometheus (sent again when the last load is older)."""
    if time.time() - _loaded_at.get(running_stack.state_dir, 0.0) < LOAD_FRESH_S:
        return running_stack
    # Load sent before a counter's first sample never shows in increase() or rate().
    wait_for(
        lambda: prom_has(running_stack, 'triton_batching_executions_total{model="add_unbatched"}'),
        30,
        "the exporter's first scrape",
    )
    started = time.time()
    send_bursts(running_stack, "batch_add_model", 30)
    send_bursts(running_stack, "add_unbatched", 10, size=2)
    done = time.time()
    wait_for(scraped_after(running_stack, "exporter", done + 0.5), 30, "a scrape after the load")
    _loaded_at[running_stack.state_dir] = started
    return running_stack


@pytest.fixture
def traced_stack(running_stack: Settings) -> Settings:
    """The shared stack after bursts of batch_add_model traced at rate 1 (the timeline's data),
    sent for each test: the exporter keeps 120 s of traces, and a test that ran longer after
    a session-wide window found none."""
    # The statistics API's mean over the traced seconds needs scrapes before and after them.
    wait_for(
        lambda: prom_has(running_stack, 'count_over_time(up{job="exporter"}[5s]) >= 4'),
        30,
        "a few scrapes of the exporter",
    )
    triton = TritonClient(running_stack.url("triton_http"), headers=running_stack.admin_headers())
    start_window(triton, "batch_add_model", count=30)
    try:
        sent = send_bursts(running_stack, "batch_add_model", 10, size=3)
    finally:
        stop_window(triton, "batch_add_model")
    url = f"{running_stack.url('exporter')}/api/traces"

    def traced() -> int:
        params = {"model": "batch_add_model", "seconds": "120"}
        return len(requests.get(url, params=params, timeout=5).json()["requests"])

    wait_for(lambda: traced() >= sent, 15, "the exporter to read the traces")
    # The statistics API's side of the same seconds comes through Prometheus.
    wait_for(scraped_after(running_stack, "exporter", time.time() + 1.5), 30, "a later scrape")
    return running_stack


@pytest.fixture(scope="module")
def idle_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Triton, exporter and Prometheus on their own ports, never sent a request.

    The dashboard row is left out: the tests drive the app with AppTest.
    """
    settings = isolated(tmp_path_factory.mktemp("idle"))
    with running(settings, exclude={"dashboard"}):
        wait_for(
            lambda: prom_has(settings, "triton_batching_model_ready"),
            30,
            "the exporter's first scrape",
        )
        yield settings


@pytest.fixture
def make_app(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., AppTest]]:
    """An AppTest of dashboard/app.py with DASHBOARD_* set to the given URLs.

    The app runs as the launcher starts it, on loopback (``address`` changes that: off
    loopback the page asks for a token before load runs and the advisor).
    """
    before = st_config.get_option("server.address")

    def make(prometheus: str, triton: str, address: str = "127.0.0.1", **extra: str) -> AppTest:
        st_config.set_option("server.address", address)
        monkeypatch.setenv("DASHBOARD_PROMETHEUS_URL", prometheus)
        monkeypatch.setenv("DASHBOARD_TRITON_URL", triton)
        monkeypatch.setenv("DASHBOARD_SCRAPE_INTERVAL", "1")
        for name, value in extra.items():
            monkeypatch.setenv(f"DASHBOARD_{name.upper()}", value)
        return AppTest.from_file(str(APP), default_timeout=60)

    yield make
    st_config.set_option("server.address", before)


@pytest.fixture(scope="module")
def tritonless_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The stack with Triton down: every other service runs, Triton's ports are closed."""
    settings = isolated(tmp_path_factory.mktemp("tritonless"))
    with running(settings, exclude={"triton", "dashboard"}):
        wait_for(scraped_after(settings, "triton", time.time()), 30, "a failed scrape of Triton")
        wait_for(
            lambda: prom_has(settings, "triton_batching_target_up == 0"),
            30,
            "the exporter to report Triton down",
        )
        wait_for(
            lambda: prom_has(settings, 'ALERTS{alertname="TritonDown"}'),
            30,
            "the TritonDown alert to be pending",
        )
        yield settings
