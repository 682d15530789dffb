"""The local Triton's CPU over a window: its process found by its listening port, and the
CPU seconds of it and of its children (python-backend stubs) read from ``/proc``.

A remote server's CPU cannot be read from here: :func:`meter` is None then, and the
advisor asks for ``--cores`` or fits the costs another way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from stacksettings import is_loopback, procstat


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(inode)
    return inodes


def local_server_pid(url: str) -> int | None:
    """The pid of the process listening on ``url``'s port, if ``url`` is on this machine and
    the process can be seen (same user or root); None otherwise."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if not parts.hostname or not is_loopback(parts.hostname):
        return None
    inodes = {f"socket:[{i}]" for i in _listening_inodes(parts.port or 80)}
    if not inodes:
        return None
    holders = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                holders.add(int(proc.name))
        except OSError:  # gone, or not ours to see
            continue
    # A child that inherited the socket (a backend stub) is not the server: the topmost is.
    for pid in sorted(holders):
        stat = procstat.read(pid)
        if stat is not None and stat.ppid not in holders:
            return pid
    return None


def process_tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants (Triton and its python-backend stubs)."""
    return procstat.cpu_seconds({pid} | procstat.descendants(pid))


def local_cores(url: str) -> float | None:
    """This machine's cores when ``url`` is on loopback (the server ran here); else None."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.hostname and is_loopback(parts.hostname):
        return float(len(os.sched_getaffinity(0)))
    return None


def process_cores(pid: int) -> int:
    return len(os.sched_getaffinity(pid))


@dataclass(frozen=True)
class ServerCpu:
    """CPU seconds of the server process itself and of its children (backend stubs)."""

    own_s: float
    children_s: float


class CpuMeter:
    """The local server's CPU over a window: ``start()``, then ``stop()``. Each child is
    counted by its own delta, so that a stub that ends during the window (a model unloaded)
    takes nothing away, and one that starts counts from zero."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cores = process_cores(pid)
        self._own = 0.0
        self._children: dict[int, float] = {}

    def _read(self) -> tuple[float, dict[int, float]]:
        children = {
            child: stat.cpu_s
            for child in procstat.descendants(self.pid)
            if (stat := procstat.read(child)) is not None
        }
        return procstat.cpu_seconds([self.pid]), children

    def start(self) -> None:
        self._own, self._children = self._read()

    def stop(self) -> ServerCpu:
        own, children = self._read()
        spent = sum(cpu - self._children.get(child, 0.0) for child, cpu in children.items())
        return ServerCpu(own - self._own, max(spent, 0.0))


def meter(url: str) -> CpuMeter | None:
    """The local server's CPU meter; None when ``url`` is not on this machine."""
    pid = local_server_pid(url)
    try:
        return CpuMeter(pid) if pid is not None else None
    except OSError:  # gone meanwhile
        return None
