"""Supervisor.stop_service / start_service: one service of a running stack goes and comes back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stack.errors import StackError
from stack.service import Service
from stack.supervisor import Supervisor, is_alive, is_healthy
from stacksettings import free_ports, isolated


def web_server(name: str, port: int) -> Service:
    url = f"http://127.0.0.1:{port}/"
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    return Service(name=name, argv=argv, health_url=url, ports=[port], startup_timeout_s=20)


def test_stop_and_start_one_service(tmp_path: Path) -> None:
    settings = isolated(tmp_path)
    first, second = free_ports(2)
    services = [web_server("one", first), web_server("two", second)]
    supervisor = Supervisor(settings, services, log=lambda _: None)
    supervisor.up()
    try:
        supervisor.stop_service("one")
        states = {row["name"]: row["state"] for row in supervisor.status()}
        assert states == {"one": "exited", "two": "healthy"}
        assert not is_healthy(services[0].health_url)

        run = supervisor.start_service("one")
        assert is_alive(run) and is_healthy(services[0].health_url)
        states = {row["name"]: row["state"] for row in supervisor.status()}
        assert states == {"one": "healthy", "two": "healthy"}
        assert [r.pid for r in supervisor.read_state() if r.name == "one"] == [run.pid]

        with pytest.raises(StackError, match="already running"):
            supervisor.start_service("one")
        with pytest.raises(StackError, match="not part of the stack"):
            supervisor.stop_service("three")
    finally:
        assert sorted(supervisor.down()) == ["one", "two"]
