"""Tracing on the real Triton 2.51, which can crash while it traces (server PR #8144).

A private, supervised Triton and exporter (as ./stack/up runs them). Every window here
lies inside the safe region (``tritonapi.tracesafety``), and the one crash is made on
purpose: SIGKILL to tritonserver in the middle of a window, which leaves what the upstream
crash leaves (a dead process, a window cut short).
"""

from __future__ import annotations

import io
import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import requests

from exporter.tracing import Sampler
from loadgen.engine.runner import RunParams, run
from loadgen.errors import LoadgenError
from stack import tracewindow
from stack.errors import StackError
from stack.supervisor import Supervisor, running
from stacksettings import PORTS, Settings, isolated
from tests.helpers import TritonCrashes, served_whole, wait_for, wire_seen
from tritonapi.client import TritonClient
from tritonapi.traces import (
    WRITE_EVERY,
    ExporterWindow,
    TracedRequest,
    read_exporter,
    start_window,
    stop_window,
    window_left,
)
from tritonapi.tracesafety import Load, safe_count

CRASHES = TritonCrashes()
pytestmark = [
    pytest.mark.integration,
    # Rerun only for Triton 2.51's tracing bug (tests/helpers.TritonCrashes): a crash by a
    # signal it logs or the supervisor records (the SIGKILL these tests send is neither),
    # or a traced request it corrupted, proven on the wire.
    pytest.mark.flaky(reruns=2, condition=CRASHES.crashed),
]

MODEL = "batch_add_model"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    settings = isolated(tmp_path_factory.mktemp("trace-safety"))
    # The exporter is asked for always-on sampling: it must refuse it on this 2.51.
    env = {"TRITON_TRACE_SAMPLE": "100"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with running(settings, only={"triton", "exporter"}, supervise=True):
            CRASHES.watch(settings)
            yield settings
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(autouse=True)
def stack_state(
    stack: Settings, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """loadgen finds the key of the stack's restricted APIs as a user's loadgen does; a
    Triton killed by a test before is back, and one that crashed and hung serving nothing is
    restarted (TritonCrashes.serving, as the other traced modules wait). A crash from now on
    is this test's."""
    CRASHES.forget()
    CRASHES.serving(stack)
    CRASHES.begin(request.node.nodeid)
    monkeypatch.setenv("STACK_STATE_DIR", str(stack.state_dir))
    for name, (_, var) in PORTS.items():
        monkeypatch.setenv(var, str(stack.port(name)))


def admin(settings: Settings) -> TritonClient:
    return TritonClient(settings.url("triton_http"), headers=settings.admin_headers())


def triton_pid(settings: Settings) -> int:
    return next(r.pid for r in Supervisor(settings, []).read_state() if r.name == "triton")


def metric(settings: Settings, name: str) -> float | None:
    for line in requests.get(f"{settings.url('exporter')}/metrics", timeout=10).text.splitlines():
        if line.startswith(name):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_loadgen_refuses_a_traced_run_past_the_region_before_sending(stack: Settings) -> None:
    triton = admin(stack)
    limit = safe_count(triton.server_metadata()["version"], Load.closed(8))
    before = triton.model_stats(MODEL).inference_count
    setting = triton.trace_settings(MODEL)
    params = RunParams(
        "concurrency",
        url=stack.url("triton_http"),
        exporter_url=stack.url("exporter"),
        concurrency=8,
        requests=limit + 1,
        trace=True,
    )
    with pytest.raises(LoadgenError) as refused:
        run(params)
    line = str(refused.value)
    assert "\n" not in line and "2.51.0" in line and "2.57" in line and "1%" in line
    # Nothing was sent, and tracing never started (Triton's own counts and setting).
    assert triton.model_stats(MODEL).inference_count == before
    assert triton.trace_settings(MODEL) == setting


def test_stack_trace_under_load_shrinks_its_window_to_the_region(stack: Settings) -> None:
    triton = admin(stack)
    version = triton.server_metadata()["version"]
    limit = safe_count(version, None)
    stop = threading.Event()
    # Closed-loop load that outlives the window, as a user's does.
    params = RunParams("concurrency", url=stack.url("triton_http"), concurrency=4, duration_s=30)
    load = threading.Thread(target=run, args=(params,), kwargs={"stop": stop})
    load.start()
    out = io.StringIO()
    try:
        wait_for("load on the model", lambda: triton.model_stats(MODEL).inference_count > 200)
        opened = time.time()  # the exporter keeps 120 s: other tests' windows may be in it
        with redirect_stdout(out):
            code = tracewindow.run(
                stack.url("triton_http"), MODEL, None, 1, 30.0, stack.admin_headers()
            )
    finally:
        stop.set()
        load.join(timeout=60)
    text = out.getvalue()
    assert code == 0, text
    assert f"shrunk from 2,000 to {limit:,}: Triton {version}" in text and "in flight" in text

    # What Triton wrote for the window (read by the exporter): exactly the shrunk count
    # (2.51 sometimes leaves a window's last trace out).
    # Only requests that started after the window opened: the exporter's seconds may also
    # hold the end of an earlier test's window, read after this one opened.
    def window() -> list[TracedRequest]:
        read = read_exporter(stack.url("exporter"), MODEL, math.ceil(time.time() - opened) + 1)
        since_ns = int(opened * 1e9) - read.clock_offset_ns  # Triton's steady clock
        return [r for r in read.requests if r.request_start_ns >= since_ns]

    wait_for("the window's traces at the exporter", lambda: len(window()) >= limit - 1)
    found = window()
    assert limit - 1 <= len(found) <= limit
    assert window_left(triton, MODEL) == 0


def test_parts_of_a_window_are_read_as_triton_writes_them(stack: Settings) -> None:
    """The always-on sampler's file rotation, tried with a window inside the region."""
    triton = admin(stack)
    files_before = metric(stack, "triton_batching_trace_files_read_total") or 0.0
    count = 3 * WRITE_EVERY
    assert count <= safe_count(triton.server_metadata()["version"], Load.closed(2))
    start_window(triton, MODEL, count)
    try:
        params = RunParams(
            "concurrency", url=stack.url("triton_http"), concurrency=2, requests=count
        )
        with wire_seen(stack) as wire:
            client = run(params).summary.client
        served_whole(client.failed, client.errors, wire)
    finally:
        left = window_left(triton, MODEL)
        stop_window(triton, MODEL)
    assert left == 0
    # PREFIX.0, .1, .2: one file per WRITE_EVERY traces, each read and removed.
    read = wait_for(
        "three more files read",
        lambda: (
            (n := metric(stack, "triton_batching_trace_files_read_total")) is not None
            and n - files_before >= 3
            and n
        ),
    )
    assert read - files_before == 3
    assert not list(Path(stack.trace_file).parent.glob(Path(stack.trace_file).name + ".*"))


def test_the_exporter_leaves_always_on_sampling_off_on_2_51(stack: Settings) -> None:
    triton = admin(stack)
    assert metric(stack, "triton_batching_trace_sampler_on") == 0.0
    assert "OFF" in triton.trace_settings()["trace_level"]


def test_a_crash_during_a_window_is_one_line_a_restart_and_kept_marked_traces(
    stack: Settings,
) -> None:
    triton = admin(stack)
    limit = safe_count(triton.server_metadata()["version"], None)
    assert limit > 2 * WRITE_EVERY
    pid = triton_pid(stack)
    outcome: list[BaseException | int] = []

    def window() -> None:
        try:
            outcome.append(
                tracewindow.run(
                    stack.url("triton_http"), MODEL, limit, 1, 60.0, stack.admin_headers()
                )
            )
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcome.append(exc)

    thread = threading.Thread(target=window)
    thread.start()
    wait_for("the window to open", lambda: window_left(triton, MODEL) == limit)
    # Two parts' worth, slowly: Triton writes them, the window stays open.
    params = RunParams(
        "concurrency", url=stack.url("triton_http"), concurrency=1, requests=2 * WRITE_EVERY + 10
    )
    assert run(params).summary.client.failed == 0
    exporter = stack.url("exporter")
    wait_for(
        "the exporter to read the written parts",
        lambda: len(read_exporter(exporter, MODEL, 120).requests) >= 2 * WRITE_EVERY,
    )
    os.kill(pid, signal.SIGKILL)  # what the upstream crash does, on purpose
    thread.join(timeout=60)
    assert len(outcome) == 1 and isinstance(outcome[0], StackError), outcome
    line = str(outcome[0])
    assert "\n" not in line and ("lost Triton" in line or "went off" in line)
    assert "supervisor starts it again" in line or "restarted" in line
    # The supervisor started a new Triton.
    wait_for(
        "a restarted Triton",
        lambda: TritonClient(stack.url("triton_http")).is_ready(2.0) and triton_pid(stack) != pid,
        120,
    )

    # The parts written before the kill are kept, and marked incomplete.
    def marked() -> ExporterWindow | None:
        window = read_exporter(exporter, MODEL, 120)
        return window if window.incomplete else None

    found = wait_for("the cut window marked", marked, 30)
    assert found is not None
    mine = [r for r in found.requests if found.cut([r])]
    assert len(mine) >= 2 * WRITE_EVERY
    assert metric(stack, f'triton_batching_trace_windows_cut_total{{model="{MODEL}"') == 1.0


def test_always_on_sampling_rotates_its_files_inside_the_region(stack: Settings) -> None:
    """The exporter's sampler as it runs on a fixed Triton, tried on this 2.51 told it is
    2.63, inside the safe region (20 traced requests); the stack's exporter reads the files
    as Triton rotates them."""
    triton = admin(stack)
    model = "add_unbatched"  # no window in this module touches its own setting
    waits = f'triton_batching_queue_wait_seconds_count{{model="{model}"'
    waits_before = metric(stack, waits) or 0.0
    files_before = metric(stack, "triton_batching_trace_files_read_total") or 0.0
    # A finished window leaves its model's own settings (TIMESTAMPS, count 0) behind, and
    # while any are there 2.51 refuses every server-wide update ("Attempting to set invalid
    # trace setting"). On a real 2.63 no window is shrunk that way; here, clear them first.
    for name in (MODEL, model):
        cleared = dict.fromkeys(("trace_level", "trace_rate", "trace_count", "log_frequency"))
        triton.update_trace_settings(cleared, model=name)
    sampler = Sampler(triton, 100, log_frequency=5, version_of=lambda: "2.63.0")
    sent = 2_000
    try:
        sampler.ensure(now=0.0)
        assert sampler.on, sampler.state
        setting = triton.trace_settings()
        assert setting["trace_level"] == ["TIMESTAMPS"] and setting["trace_rate"] == "100"
        assert setting["trace_count"] == "-1" and setting["log_frequency"] == "5"
        params = RunParams(
            "concurrency", model=model, url=stack.url("triton_http"), concurrency=2, requests=sent
        )
        with wire_seen(stack) as wire:
            client = run(params).summary.client
        served_whole(client.failed, client.errors, wire)
    finally:
        triton.update_trace_settings({"trace_level": ["OFF"]})
    traced = sent // 100
    # 1 in 100 traced, a file every 5 traces: 4 files, read as they came.
    read = wait_for(
        "the sampled traces at the exporter",
        lambda: (n := metric(stack, waits)) is not None and n - waits_before >= traced - 1 and n,
    )
    assert traced - 1 <= read - waits_before <= traced
    files = (metric(stack, "triton_batching_trace_files_read_total") or 0.0) - files_before
    assert files >= 3
