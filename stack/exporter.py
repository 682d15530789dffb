"""The batching exporter (``python -m exporter``), reading the stack's own Triton."""

from __future__ import annotations

import sys

from stack.services import Service
from stacksettings import ROOT, Settings, ensure_secret


def triton_timeout_s(settings: Settings) -> float:
    """Half of Prometheus' scrape timeout (see stack.prometheus.config), at most 2 s."""
    return min(2.0, 0.5 * min(settings.scrape_interval_s, 10.0))


def service(settings: Settings) -> Service:
    url = settings.url("exporter")
    svc = Service(
        name="exporter",
        argv=[
            sys.executable,
            "-m",
            "exporter",
            f"--triton-url={settings.url('triton_http')}",
            f"--triton-metrics-url={settings.url('triton_metrics')}/metrics",
            f"--triton-timeout={triton_timeout_s(settings):g}",
            f"--trace-file={settings.trace_file}",
            f"--web.listen-address={settings.host}:{settings.port('exporter')}",
            # The repository index is one of Triton's restricted APIs.
            f"--triton-admin-key-file={settings.admin_key_file}",
        ],
        health_url=f"{url}/healthz",
        ports=[settings.port("exporter")],
        urls={"metrics": f"{url}/metrics", "traces": f"{url}/api/traces?model=MODEL"},
        cwd=ROOT,
    )

    def prepare() -> None:
        # Triton's row makes the key too; this covers a stack started without Triton.
        ensure_secret(settings.admin_key_file)
        # Triton writes the trace files there; the exporter reads and removes them.
        settings.trace_file.parent.mkdir(parents=True, exist_ok=True)

    svc.prepare = prepare
    return svc
