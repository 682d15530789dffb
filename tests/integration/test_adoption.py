"""A lost supervisor is replaced: `up` adopts what still runs and starts only what is missing.

The stack runs as a user runs it (`batchscope up --detach`). Its supervising process
is killed with SIGKILL, first alone, then together with Triton. Each time `up --detach`
again must keep every service that still runs and answers (the same pids: no restart,
Prometheus keeps its uptime), start only what is gone, supervise again (a service that
dies comes back) and serve `restart`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from stacksettings import PORTS, Settings, isolated, procstat

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T], timeout_s: float = 60.0) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f}s: {what}")
        time.sleep(0.5)


def cli(settings: Settings, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "batchscope", *args, "--state-dir", str(settings.state_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def up_args(settings: Settings) -> list[str]:
    ports = [
        a for name in PORTS for a in (f"--{name.replace('_', '-')}-port", str(settings.port(name)))
    ]
    return ["up", "--detach", "--no-warmup", "--scrape-interval", "1", *ports]


def status(settings: Settings) -> dict[str, Any]:
    out = cli(settings, "status", "--json", timeout=60)
    body: dict[str, Any] = json.loads(out.stdout)
    return body


def pids(settings: Settings) -> dict[str, int]:
    return {row["name"]: row["pid"] for row in status(settings)["services"]}


def all_healthy(settings: Settings) -> bool:
    return all(row["state"] == "healthy" for row in status(settings)["services"])


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Settings]:
    settings = isolated(tmp_path / "state")
    try:
        started = cli(settings, *up_args(settings))
        assert started.returncode == 0, started.stdout + started.stderr
        yield settings
    finally:
        down = cli(settings, "down")
        assert down.returncode == 0, down.stderr
        left = [p.pid for p in procstat.processes() if _mentions(p.pid, str(settings.state_dir))]
        assert not left, f"leftovers: {left}"


def _mentions(pid: int, text: str) -> bool:
    argv = procstat.cmdline(pid) or []
    return any(text in a for a in argv)


def kill_supervisor(settings: Settings) -> None:
    keeper = status(settings)["supervisor"]
    assert keeper
    os.kill(keeper, signal.SIGKILL)
    wait_for("the supervisor gone", lambda: status(settings)["supervisor"] is None, 10)


def test_up_adopts_the_services_a_killed_supervisor_left(stack: Settings) -> None:
    before = pids(stack)
    prometheus_pid = before["prometheus"]
    kill_supervisor(stack)
    # Nobody restarts anything now: `restart` says what to do instead.
    refused = cli(stack, "restart", "exporter")
    assert refused.returncode != 0 and "up --detach" in refused.stderr
    again = cli(stack, *up_args(stack))
    assert again.returncode == 0, again.stdout + again.stderr
    assert pids(stack) == before, "a healthy service was started again"
    body = status(stack)
    assert body["supervisor"] and all_healthy(stack)
    assert all(row["restarts"] == 0 for row in body["services"])
    assert prometheus_pid == pids(stack)["prometheus"]
    supervisor_log = (stack.state_dir / "logs" / "supervisor.log").read_text()
    for name in before:
        assert f"adopted {name} (pid {before[name]})" in supervisor_log
    # Supervised again: `restart` works, and a service that dies comes back.
    restarted = cli(stack, "restart", "exporter")
    assert restarted.returncode == 0, restarted.stderr
    assert pids(stack)["exporter"] != before["exporter"]
    dashboard = pids(stack)["dashboard"]
    os.kill(dashboard, signal.SIGKILL)
    wait_for(
        "the dashboard restarted by the new supervisor",
        lambda: pids(stack)["dashboard"] != dashboard and all_healthy(stack),
    )


def test_up_adopts_the_survivors_and_starts_a_killed_triton(stack: Settings) -> None:
    before = pids(stack)
    kill_supervisor(stack)
    triton = before["triton"]
    stubs = [p.pid for p in procstat.processes() if p.pgid == triton and p.pid != triton]
    os.kill(triton, signal.SIGKILL)
    wait_for("Triton gone", lambda: procstat.start_time(triton) is None, 10)
    rows = {row["name"]: row for row in status(stack)["services"]}
    assert rows["triton"]["state"] == "exited"
    again = cli(stack, *up_args(stack))
    assert again.returncode == 0, again.stdout + again.stderr
    after = pids(stack)
    assert after["triton"] != triton
    assert {k: v for k, v in after.items() if k != "triton"} == {
        k: v for k, v in before.items() if k != "triton"
    }
    assert all_healthy(stack)
    # The killed Triton's python-backend stubs went before the new one started.
    assert not [p for p in stubs if procstat.start_time(p) is not None]
    restarted = cli(stack, "restart", "prometheus")
    assert restarted.returncode == 0, restarted.stderr
    assert pids(stack)["prometheus"] != before["prometheus"]
    assert all_healthy(stack)
