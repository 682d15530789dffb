"""Supervision: a service that dies comes back with backoff, and its whole tree goes first."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from stack import control
from stack.service import Service
from stack.supervisor import Running, Supervisor, _Backoff, group_members, is_healthy
from stacksettings import Settings, free_ports, isolated, procstat

# An HTTP server with a child that ignores SIGTERM, like Triton and its python backend stubs.
STUBBORN = """
import http.server, os, signal, subprocess, sys
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
open(sys.argv[2], "a").write(f"{child.pid}\\n")
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])),
    http.server.SimpleHTTPRequestHandler).serve_forever()
"""


def stubborn(port: int, pids: Path) -> Service:
    return Service(
        name="stubborn",
        argv=[sys.executable, "-c", STUBBORN, str(port), str(pids)],
        health_url=f"http://127.0.0.1:{port}/",
        ports=[port],
        startup_timeout_s=20,
        # Its child ignores SIGTERM whatever the grace: a short one proves the SIGKILL after
        # it as well as the stack's 15 s would, without waiting them out in every test.
        stop_grace_s=1.0,
    )


def alive(pid: int) -> bool:
    return procstat.start_time(pid) is not None


def wait_until(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return isolated(tmp_path / "state")


def test_backoff_doubles_to_a_cap_and_resets_after_a_long_run() -> None:
    track = _Backoff(started_at=100.0)
    assert [track.next_delay(101.0) for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    track.started_at = 200.0
    assert track.next_delay(200.0 + 61) == 1


def test_a_killed_service_loses_its_tree_and_comes_back(settings: Settings, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    pids = tmp_path / "children"
    svc = stubborn(port, pids)
    supervisor = Supervisor(settings, [svc], log=lambda _: None)
    running = supervisor.up()
    keeper = threading.Thread(target=supervisor.supervise, args=(running,), daemon=True)
    keeper.start()
    try:
        first = running[0]
        (stub,) = [int(p) for p in pids.read_text().split()]
        os.kill(first.pid, signal.SIGKILL)

        assert wait_until(lambda: not alive(stub), 15), "the orphaned child outlived its leader"
        assert wait_until(lambda: running[0].pid != first.pid and is_healthy(svc.health_url))
        (row,) = supervisor.status()
        assert row["restarts"] == 1 and row["state"] == "healthy"
        assert row["last_exit"].startswith("killed by SIGKILL")
    finally:
        supervisor.stop_requested.set()
        keeper.join(timeout=30)
        supervisor.down()
    second_stub = int(pids.read_text().split()[1])
    assert wait_until(lambda: not alive(second_stub), 5), "down left the stubborn child running"
    assert not group_members(running[0])


def test_stop_service_is_not_undone_by_the_supervisor(settings: Settings, tmp_path: Path) -> None:
    """A companion killed at the stop is restarted after the first backoff: the supervisor
    has then passed over the stopped service as well, and left it stopped."""
    port, other_port = free_ports(2)
    svc = stubborn(port, tmp_path / "children")
    other = replace(stubborn(other_port, tmp_path / "other"), name="companion")
    logged: list[str] = []
    supervisor = Supervisor(settings, [svc, other], log=logged.append)
    running = supervisor.up()
    keeper = threading.Thread(target=supervisor.supervise, args=(running,), daemon=True)
    keeper.start()
    try:
        companion = running[1].pid
        mark = len(logged)
        supervisor.stop_service("stubborn")
        os.kill(companion, signal.SIGKILL)
        assert wait_until(
            lambda: running[1].pid != companion and is_healthy(other.health_url), 30
        ), logged
        assert not is_healthy(svc.health_url)
        # Neither a death noticed ("stubborn (pid N) ...") nor a start since the stop.
        since = logged[mark:]
        assert "stopped stubborn" in since, logged
        assert not [x for x in since if x.startswith(("stubborn (pid", "started stubborn"))]
        supervisor.start_service("stubborn")
        assert is_healthy(svc.health_url)
    finally:
        supervisor.stop_requested.set()
        keeper.join(timeout=30)
        supervisor.down()


def test_a_dead_leaders_leftovers_are_swept_by_up(settings: Settings, tmp_path: Path) -> None:
    """A launcher killed outright leaves stubs; the next `up` removes them first."""
    (port,) = free_ports(1)
    pids = tmp_path / "children"
    first = Supervisor(settings, [stubborn(port, pids)], log=lambda _: None)
    (run,) = first.up()
    os.kill(run.pid, signal.SIGKILL)
    first.children.pop("stubborn").wait(timeout=10)  # as if this launcher had died too
    (stub,) = [int(p) for p in pids.read_text().split()]
    assert alive(stub)
    second = Supervisor(settings, [stubborn(port, pids)], log=lambda _: None)
    try:
        second.up()
        assert not alive(stub)
    finally:
        second.down()


def test_restart_command_needs_a_running_stack(settings: Settings) -> None:
    with pytest.raises(Exception, match="not running"):
        control.restart(settings, "triton")


def test_restart_of_an_unknown_service_is_misuse(settings: Settings) -> None:
    Supervisor(settings, [])._write_state(
        [Running("triton", 1, "x", "http://127.0.0.1:1/", {}, "log")]
    )
    with pytest.raises(control.StackError, match="no service 'nosuch'") as err:
        control.restart(settings, "nosuch")
    assert err.value.exit_code == 2


def test_a_hung_service_is_killed_with_its_tree_and_comes_back(
    settings: Settings, tmp_path: Path
) -> None:
    """SIGSTOP: alive, but no answer. After ``hung_after_s`` of failed health checks it is
    handled like a dead one: its group killed (the stopped leader and its child), restarted."""
    (port,) = free_ports(1)
    pids = tmp_path / "children"
    svc = stubborn(port, pids)
    settings = replace(settings, hung_after_s=3.0, skip=frozenset({"alertmanager"}))
    supervisor = Supervisor(settings, [svc], log=lambda _: None)
    running = supervisor.up()
    keeper = threading.Thread(target=supervisor.supervise, args=(running,), daemon=True)
    keeper.start()
    try:
        first = running[0]
        (stub,) = [int(p) for p in pids.read_text().split()]
        os.killpg(first.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        assert wait_until(lambda: running[0].pid != first.pid and is_healthy(svc.health_url), 40)
        # Not before the setting: 3 s of failed checks, then the 1 s backoff.
        assert time.monotonic() - stopped_at >= 3.0
        assert not alive(first.pid) and not alive(stub)
        (row,) = supervisor.status()
        assert row["restarts"] == 1 and row["state"] == "healthy"
        hung_s = int(row["last_exit"].removeprefix("restarted: hung for ").split()[0])
        assert 3 <= hung_s <= 10, row["last_exit"]
    finally:
        supervisor.stop_requested.set()
        keeper.join(timeout=30)
        supervisor.down()


def test_hung_after_zero_leaves_a_hung_service_alone(settings: Settings, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    svc = stubborn(port, tmp_path / "children")
    settings = replace(settings, hung_after_s=0.0)
    supervisor = Supervisor(settings, [svc], log=lambda _: None)
    running = supervisor.up()
    keeper = threading.Thread(target=supervisor.supervise, args=(running,), daemon=True)
    keeper.start()
    try:
        first = running[0]
        os.killpg(first.pid, signal.SIGSTOP)
        time.sleep(4)
        assert running[0].pid == first.pid and alive(first.pid)
        os.killpg(first.pid, signal.SIGCONT)
        assert wait_until(lambda: is_healthy(svc.health_url), 10)
    finally:
        supervisor.stop_requested.set()
        keeper.join(timeout=30)
        supervisor.down()


def test_only_the_recorded_process_answering_its_health_check_is_adopted(
    settings: Settings, tmp_path: Path
) -> None:
    """A supervisor that lost its predecessor adopts a service only if the pid is still the
    process it started (start time and argv: a recycled pid is another process) and it
    answers; otherwise it removes what is left and starts it."""
    (port,) = free_ports(1)
    svc = stubborn(port, tmp_path / "children")
    first = Supervisor(settings, [svc], log=lambda _: None)
    first.supervising = True
    (run,) = first.up()
    # The state as a killed supervisor leaves it, with one field changed at a time.
    state = json.loads(settings.state_file.read_text())
    state["supervisor"] = {"pid": 1, "started": "0"}  # not a live supervisor of ours
    try:
        for field_, value, adopted in (
            (None, None, True),
            ("argv", ["/usr/bin/python3", "-m", "something.else"], False),
            ("started", str(int(run.started) + 1), False),
            ("health_url", f"http://127.0.0.1:{port}/missing", False),
        ):
            entry = dict(state["services"][0])
            if field_ is not None:
                entry[field_] = value
            settings.state_file.write_text(json.dumps({**state, "services": [entry]}))
            second = Supervisor(settings, [svc], log=lambda _: None)
            if field_ == "health_url":
                # The table's URL matches what is recorded, but nothing answers there.
                second.services = [replace(svc, health_url=entry["health_url"])]
            if adopted:
                second.preflight()
                assert list(second.adopted) == ["stubborn"], field_
            else:
                assert not second._adoptable(Running(**entry)), field_
        assert alive(run.pid)
    finally:
        settings.state_file.write_text(json.dumps(state))
        first.down()
