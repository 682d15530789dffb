"""The service table: what `up` starts, in order, and how each one says it is healthy.

Each row is built by a small function in its own module (``stack.triton``,
``stack.prometheus``, ...). Later parts of the stack slot in by adding a row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from stacksettings import Settings


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
    # Answers while the process works, whatever its models' state (Triton's readiness
    # also waits on every model): a hang is judged by it. Empty: the health URL.
    live_url: str = ""
    # The basic-auth password (user stacksettings.ALERTMANAGER_USER) its health URL needs.
    health_auth_file: Path | None = None
    # Writes config files; runs just before the process starts.
    prepare: Callable[[], None] | None = None


def service_table(settings: Settings) -> list[Service]:
    """Every service of the local stack, in start order (stopped in reverse)."""
    # Imported here so that each row's module can import Service from this one.
    from stack import alertmanager, dashboard, exporter, prometheus, triton

    # Attach mode watches Tritons that already run: none of our own.
    own_triton: list[Callable[[Settings], Service]] = [] if settings.attached else [triton.service]
    builders: list[Callable[[Settings], Service]] = [
        *own_triton,
        exporter.service,
        # Before Prometheus, so that no alert is sent to an Alertmanager not yet listening.
        alertmanager.service,
        prometheus.service,
        # Last: it reads everything above.
        dashboard.service,
    ]
    table = [build(settings) for build in builders]
    return [s for s in table if s.name not in settings.skip]
