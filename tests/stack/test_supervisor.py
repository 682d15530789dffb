"""The launcher's process handling: ports taken, services that fail, clean shutdown."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from stack.errors import StackError
from stack.service import Service
from stack.services import service_table
from stack.supervisor import Supervisor
from stacksettings import Settings, free_ports, isolated, procstat

ROOT = Path(__file__).resolve().parents[2]


def http_service(name: str, port: int, tmp_path: Path) -> Service:
    """A real HTTP server as a service row; its health URL is its root page."""
    return Service(
        name=name,
        argv=[
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(tmp_path),
        ],
        health_url=f"http://127.0.0.1:{port}/",
        ports=[port],
        startup_timeout_s=20,
    )


def failing_service(code: int = 3) -> Service:
    script = (
        f"import sys; print('boom: cannot open the model store', file=sys.stderr); sys.exit({code})"
    )
    return Service(
        name="broken",
        argv=[sys.executable, "-c", script],
        health_url="http://127.0.0.1:1/",
        ports=[],
    )


def alive(pid: int) -> bool:
    return procstat.start_time(pid) is not None


def wait_until(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return isolated(tmp_path / "state")


def test_port_in_use_is_a_clear_error_and_nothing_starts(
    settings: Settings, tmp_path: Path
) -> None:
    (first, second) = free_ports(2)
    services = [http_service("web", first, tmp_path), http_service("other", second, tmp_path)]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", second))
        squatter.listen()
        supervisor = Supervisor(settings, services, log=lambda _: None)
        with pytest.raises(StackError) as err:
            supervisor.up()
    assert err.value.exit_code == 2
    assert f"port {second} on 127.0.0.1 (for other) is already in use" in str(err.value)
    assert supervisor.children == {}
    assert not settings.state_file.exists()


def test_port_error_names_the_flag_to_change(settings: Settings) -> None:

    port = settings.port("triton_grpc")
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(StackError, match="--triton-grpc-port or STACK_TRITON_GRPC_PORT"):
            Supervisor(settings, service_table(settings), log=lambda _: None).up()


def test_failed_service_stops_the_ones_already_started(settings: Settings, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    supervisor = Supervisor(
        settings, [http_service("web", port, tmp_path), failing_service()], log=lambda _: None
    )
    with pytest.raises(StackError) as err:
        supervisor.up()
    message = str(err.value)
    assert "broken exited with code 3 while starting" in message
    assert "boom: cannot open the model store" in message  # the tail of its log
    state = json.loads(settings.state_file.read_text())["services"]
    web_pid = next(s["pid"] for s in state if s["name"] == "web")
    assert not alive(web_pid)


def test_unhealthy_service_times_out_with_its_log(settings: Settings) -> None:
    sleeper = Service(
        name="sleepy",
        argv=[
            sys.executable,
            "-c",
            "print('still loading', flush=True); import time; time.sleep(60)",
        ],
        health_url="http://127.0.0.1:1/",
        ports=[],
        startup_timeout_s=1.5,
    )
    supervisor = Supervisor(settings, [sleeper], log=lambda _: None)
    with pytest.raises(StackError, match=r"(?s)sleepy was not healthy.*still loading"):
        supervisor.up()
    assert supervisor.children == {}


@contextlib.contextmanager
def launcher(settings: Settings, *extra: str) -> Iterator[subprocess.Popen[str]]:
    """``batchscope up`` as a child; killed and its pipe closed on exit."""
    # Triton alone: its python backend stubs are the grandchildren worth checking.
    skip = [a for s in service_table(settings) if s.name != "triton" for a in ("--skip", s.name)]
    args = [sys.executable, "-m", "batchscope", "up", *skip, "--state-dir", str(settings.state_dir)]
    args += extra
    for name in ("triton_http", "triton_grpc", "triton_metrics"):
        args += [f"--{name.replace('_', '-')}-port", str(settings.port(name))]
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()


def wait_for_line(proc: subprocess.Popen[str], text: str) -> list[str]:
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"launcher ended before {text!r}:\n{''.join(lines)}")


@pytest.mark.integration
def test_sigterm_stops_every_child_of_the_foreground_stack(settings: Settings) -> None:
    with launcher(settings) as proc:
        wait_for_line(proc, "Ctrl-C stops it.")
        tree = procstat.descendants(proc.pid)
        triton = json.loads(settings.state_file.read_text())["services"][0]["pid"]
        # tritonserver plus a python backend stub per model instance
        assert triton in tree and len(tree) >= 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert wait_until(lambda: not any(alive(p) for p in tree), 10), [p for p in tree if alive(p)]
    assert not settings.state_file.exists()


@pytest.mark.integration
def test_children_die_with_a_killed_foreground_launcher(settings: Settings) -> None:
    with launcher(settings) as proc:
        wait_for_line(proc, "Ctrl-C stops it.")
        tree = procstat.descendants(proc.pid)
        proc.kill()  # no chance to clean up: the children must notice on their own
        proc.wait(timeout=10)
        assert wait_until(lambda: not any(alive(p) for p in tree), 30)


@pytest.mark.integration
def test_detach_status_down(settings: Settings) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "batchscope", *args, "--state-dir", str(settings.state_dir)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    with launcher(settings, "--detach") as proc:
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    try:
        status = cli("status", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        (row,) = json.loads(status.stdout)["services"]
        assert (row["name"], row["state"]) == ("triton", "healthy")
        with launcher(settings, "--detach") as again:
            again_out, _ = again.communicate(timeout=60)
        assert again.returncode == 1 and "already running" in again_out
    finally:
        down = cli("down")
    assert down.returncode == 0 and "stopped: triton" in down.stdout
    assert not alive(row["pid"])
    status = cli("status")
    assert status.returncode == 1 and "not running" in status.stdout


def test_bad_flags_exit_2() -> None:
    for args in (
        ["up", "--triton-http-port", "http"],
        ["up", "--prometheus-port", "70000"],
        ["up", "--skip", "nosuch"],
        ["frobnicate"],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "batchscope", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2, args
        assert "error:" in result.stderr


def test_skip_leaves_a_service_out(settings: Settings) -> None:

    names = [s.name for s in service_table(replace(settings, skip=frozenset({"prometheus"})))]
    assert "prometheus" not in names and names[0] == "triton"
