"""The exporter's row in the service table and its Prometheus scrape job."""

from __future__ import annotations

import sys
from pathlib import Path

from rules.prometheus_config import local_targets
from stack.services import service_table
from stacksettings import isolated


def test_exporter_starts_after_triton_and_before_prometheus(tmp_path: Path) -> None:
    names = [s.name for s in service_table(isolated(tmp_path))]
    assert names.index("triton") < names.index("exporter") < names.index("prometheus")


def test_exporter_reads_the_stacks_triton(tmp_path: Path) -> None:
    settings = isolated(tmp_path)
    row = next(s for s in service_table(settings) if s.name == "exporter")
    assert row.argv[:4] == [sys.executable, "-m", "batchscope", "exporter"]
    assert f"--triton-url={settings.url('triton_http')}" in row.argv
    # The stack's own Triton is read at scrape time.
    assert not [a for a in row.argv if a.startswith("--read-interval")]
    assert f"--triton-metrics-url={settings.url('triton_metrics')}/metrics" in row.argv
    assert f"--web.listen-address={settings.host}:{settings.port('exporter')}" in row.argv
    # 1 s scrapes in tests: Prometheus times out at 1 s, the exporter's reads at half that.
    assert "--triton-timeout=0.5" in row.argv
    assert row.health_url == f"{settings.url('exporter')}/healthz"
    assert row.ports == [settings.port("exporter")]


def test_prometheus_scrapes_the_exporter(tmp_path: Path) -> None:
    settings = isolated(tmp_path)
    targets = local_targets(settings)
    assert targets["exporter"] == [f"{settings.host}:{settings.port('exporter')}"]
