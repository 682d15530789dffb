"""One service of the local stack: how to start it and how it says it is healthy.

A module of its own so that the rows (stack.triton, stack.prometheus, ...) import it without
importing the table that imports them (stack.services): no import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# How long a service gets between SIGTERM and SIGKILL when the stack stops it, unless its row
# says otherwise: Triton unloads its models and waits on its stubs within it.
STOP_TIMEOUT_S = 15.0


@dataclass
class Service:
    name: str
    argv: list[str]
    health_url: str
    ports: list[int]
    # URLs shown to the user by `up` and `status`.
    urls: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    startup_timeout_s: float = 60.0
    # SIGTERM, then this long for the whole process group to leave, then SIGKILL.
    stop_grace_s: float = STOP_TIMEOUT_S
    # Answers while the process works, whatever its models' state (Triton's readiness
    # also waits on every model): a hang is judged by it. Empty: the health URL.
    live_url: str = ""
    # The basic-auth password (user stacksettings.ALERTMANAGER_USER) its health URL needs.
    health_auth_file: Path | None = None
    # Writes config files; runs just before the process starts.
    prepare: Callable[[], None] | None = None
