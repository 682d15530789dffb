"""The batching exporter (``batchscope exporter``), reading the stack's own Triton."""

from __future__ import annotations

import os
import sys

from stack.service import Service
from stacksettings import ROOT, Settings, ensure_secret


def triton_timeout_s(settings: Settings) -> float:
    """Half of Prometheus' scrape timeout (see rules.prometheus_config.config), at most 2 s."""
    return min(2.0, 0.5 * min(settings.scrape_interval_s, 10.0))


def targets(settings: Settings) -> list[str]:
    """The exporter's Triton flags: the attached servers, or the stack's own Triton with
    its trace file (an attached Triton writes its traces on its own host)."""
    if settings.attached:
        argv = [f"--triton-url={url}" for url in settings.triton_urls]
        # Servers elsewhere, perhaps many or far: read them off the scrape path once per
        # scrape interval, so that a scrape neither grows with the fleet nor waits for
        # the slowest server (the data's age is triton_batching_data_age_seconds).
        # EXPORTER_READ_INTERVAL, when set, wins (0: read at each scrape).
        interval = os.environ.get("EXPORTER_READ_INTERVAL") or f"{settings.scrape_interval_s:g}"
        argv.append(f"--read-interval={interval}")
        argv += [f"--triton-metrics-url={url}" for url in settings.triton_metrics_urls]
        if settings.attached_admin_key_file is not None:
            argv.append(f"--triton-admin-key-file={settings.attached_admin_key_file}")
        return argv
    return [
        f"--triton-url={settings.url('triton_http')}",
        f"--triton-metrics-url={settings.url('triton_metrics')}/metrics",
        f"--trace-file={settings.trace_file}",
        # The repository index is one of Triton's restricted APIs.
        f"--triton-admin-key-file={settings.admin_key_file}",
    ]


def service(settings: Settings) -> Service:
    url = settings.url("exporter")
    return Service(
        name="exporter",
        argv=[
            sys.executable,
            "-m",
            "batchscope",
            "exporter",
            *targets(settings),
            f"--triton-timeout={triton_timeout_s(settings):g}",
            # The changes `batchscope advise --apply` records, counted by outcome.
            f"--changes-db={settings.store}",
            f"--web.listen-address={settings.host}:{settings.port('exporter')}",
        ],
        health_url=f"{url}/healthz",
        ports=[settings.port("exporter")],
        urls={"metrics": f"{url}/metrics", "traces": f"{url}/api/traces?model=MODEL"},
        cwd=ROOT,
        prepare=lambda: prepare(settings),
    )


def prepare(settings: Settings) -> None:
    if settings.attached:
        return
    # Triton writes the trace files there; the exporter reads and removes them.
    settings.trace_file.parent.mkdir(parents=True, exist_ok=True)
    # The key Triton will be started with: the exporter must start without its Triton too
    # (a stack whose Triton is left out or down is what TritonDown reports).
    ensure_secret(settings.admin_key_file)
