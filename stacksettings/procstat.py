"""Processes on this machine, from ``/proc``: one parser for the launcher and the benchmarks.

``/proc/<pid>/stat`` puts the command name in parentheses, and a name may hold spaces
or parentheses itself, so the fields are read after the last ``)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str  # R, S, D, Z, ...
    ppid: int
    pgid: int
    cpu_s: float  # user + system time so far, all threads
    start: str  # start time in clock ticks since boot: with the pid, names one process

    @property
    def zombie(self) -> bool:
        return self.state == "Z"


def read(pid: int | str = "self") -> ProcStat | None:
    """The process' stat line, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    return ProcStat(
        pid=int(head.split(" (", 1)[0]),
        state=fields[0],
        ppid=int(fields[1]),
        pgid=int(fields[2]),
        cpu_s=(int(fields[11]) + int(fields[12])) / TICK,
        start=fields[19],
    )


def processes() -> Iterator[ProcStat]:
    """Every process that is there while the folder is read."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = read(entry)
            if stat is not None:
                yield stat


def start_time(pid: int) -> str | None:
    """Start time of a live (non-zombie) process, or None if it is gone."""
    stat = read(pid)
    return None if stat is None or stat.zombie else stat.start


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for stat in processes():
        children.setdefault(stat.ppid, []).append(stat.pid)
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found.update(below)
        frontier.extend(below)
    return found


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU of the processes (those that are gone count 0)."""
    return sum(stat.cpu_s for pid in pids if (stat := read(pid)) is not None)


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU of every process in a process group (a service and its children)."""
    return sum(stat.cpu_s for stat in processes() if stat.pgid == pgid)


def machine_busy_seconds() -> float:
    """CPU seconds every process on the machine has used (``/proc/stat``, all cores)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / TICK


def cmdline(pid: int) -> list[str] | None:
    """The process' argv as it exec'd it, or None if it is gone (or a zombie: empty)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")[:-1] if raw else None
