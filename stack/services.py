"""The service table: what `up` starts, in order, and how each one says it is healthy.

Each row is built by a small function in its own module (``stack.triton``,
``stack.prometheus``, ...). Later parts of the stack slot in by adding a row here.
"""

from __future__ import annotations

from collections.abc import Callable

from stack import alertmanager, dashboard, exporter, prometheus, triton
from stack.service import Service
from stacksettings import Settings


def service_table(settings: Settings) -> list[Service]:
    """Every service of the local stack, in start order (stopped in reverse)."""
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
