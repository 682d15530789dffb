"""Prometheus, the real server (Debian's ``prometheus``), with a config the launcher writes.

The launcher never touches /etc or the system service: config and data live in
the state folder. The config's content comes from :mod:`rules.prometheus_config`, which
the compose and Kubernetes renderings call with their own targets.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import yaml

from rules import prometheus_config, rulegen, rulesettings
from stack.errors import StackError
from stack.service import Service
from stacksettings import Settings, ensure_secret

INSTALL_HINT = (
    "install it with `apt-get install prometheus` (Debian/Ubuntu; ./stack/up does this when "
    "run as root), or put a `prometheus` binary on PATH"
)


def find_binary(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise StackError(f"{name} is not installed: {hint}")
    return path


def cors_origin(url: str) -> str:
    """--web.cors.origin: Prometheus' own origin only (the flag is an anchored regex).

    Its default, ``.*``, lets a page of any origin read every query's answer (the fleet's
    model names, rates and configs); its own UI is same-origin and needs no CORS.
    """
    return re.escape(url.rstrip("/"))


def write_config(settings: Settings) -> Path:
    folder = settings.state_dir / "prometheus"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "prometheus.yml"
    rules = rulegen.write(
        rulegen.render(rulesettings.load(settings.rules_settings)), folder / "rules"
    )
    alertmanagers = []
    password_file = ""
    if "alertmanager" not in settings.skip:
        alertmanagers.append(f"{settings.host}:{settings.port('alertmanager')}")
        password_file = str(settings.alertmanager_password_file)
        ensure_secret(settings.alertmanager_password_file)
    body = prometheus_config.config(
        prometheus_config.local_targets(settings),
        settings.scrape_interval_s,
        rule_files=[str(p) for p in rules],
        alertmanagers=alertmanagers,
        alertmanager_password_file=password_file,
    )
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        "# Written by `batchscope up`; edits are overwritten.\n"
        + yaml.safe_dump(body, sort_keys=False)
    )
    tmp.replace(path)
    return path


def service(settings: Settings) -> Service:
    folder = settings.state_dir / "prometheus"
    url = settings.url("prometheus")
    svc = Service(
        name="prometheus",
        argv=[],
        health_url=f"{url}/-/ready",
        live_url=f"{url}/-/healthy",
        ports=[settings.port("prometheus")],
        urls={"ui": url},
    )

    def prepare() -> None:
        binary = find_binary("prometheus", INSTALL_HINT)
        cfg = write_config(settings)
        svc.argv = [
            binary,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address={settings.host}:{settings.port('prometheus')}",
            f"--web.cors.origin={cors_origin(url)}",
            "--storage.tsdb.retention.time=7d",
        ]

    # Go's default GOGC=100 lets Prometheus' heap grow to twice its live size between
    # collections, and the process keeps that peak as RSS. At 50 the peak is 1.5 times the
    # live heap (a few hundred series here: the extra GC work is negligible). A GOGC in the
    # environment wins.
    svc.env = {"GOGC": os.environ.get("GOGC", "50")}
    svc.prepare = prepare
    return svc
