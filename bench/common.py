"""Shared by the benchmarks: a private Triton started with the launcher's own code."""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from stack.services import service_table
from stack.settings import PORTS, Settings, from_env
from stack.supervisor import Supervisor


def free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


@contextlib.contextmanager
def private_triton() -> Iterator[Settings]:
    """Triton alone (no Prometheus) on free ports, in a temp state folder."""
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if k == "STACK_TRITON_VENV"}
        ports = dict(zip(PORTS, free_ports(len(PORTS)), strict=True))
        settings = replace(
            from_env(env), state_dir=Path(tmp), ports=ports, skip=frozenset({"prometheus"})
        )
        supervisor = Supervisor(settings, service_table(settings), log=lambda _: None)
        supervisor.up()
        try:
            yield settings
        finally:
            supervisor.down()


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
