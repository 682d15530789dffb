"""Prometheus, the real server (Debian's ``prometheus``), with a config the launcher writes.

The launcher never touches /etc or the system service: config and data live in
the state folder. ``config()`` is the one place the scrape configuration is
built; the compose and Kubernetes renderings call it with their own targets.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from stack import rulegen, rulesettings
from stack.errors import StackError
from stack.services import Service
from stacksettings import ALERTMANAGER_USER, Settings, ensure_secret

INSTALL_HINT = (
    "install it with `apt-get install prometheus` (Debian/Ubuntu; ./stack/up does this when "
    "run as root), or put a `prometheus` binary on PATH"
)


def find_binary(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise StackError(f"{name} is not installed: {hint}")
    return path


def config(
    targets: dict[str, list[str]],
    scrape_interval_s: float,
    rule_files: Sequence[str] = (),
    alertmanagers: Sequence[str] = (),
    alertmanager_password_file: str = "",
) -> dict[str, Any]:
    """prometheus.yml as a dict: one scrape job per entry of ``targets``, the rule files,
    and the Alertmanagers (host:port) that receive the alerts.

    With ``alertmanager_password_file`` both the alerts and the ``alertmanager`` scrape
    job carry Alertmanager's basic auth (stack.alertmanager: it refuses anything else)."""
    interval = _duration(scrape_interval_s)
    body: dict[str, Any] = {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": interval,
            # Upstream fetches in the exporter time out well before this.
            "scrape_timeout": _duration(min(scrape_interval_s, 10.0)),
        },
        "scrape_configs": [
            {"job_name": job, "static_configs": _static_configs(addrs)}
            for job, addrs in targets.items()
        ],
    }

    def auth() -> dict[str, Any]:
        # A fresh dict each time: a shared one would be dumped as a YAML anchor.
        if not alertmanager_password_file:
            return {}
        return {
            "basic_auth": {
                "username": ALERTMANAGER_USER,
                "password_file": alertmanager_password_file,
            }
        }

    for job in body["scrape_configs"]:
        if job["job_name"] == "alertmanager":
            job.update(auth())
    if rule_files:
        body["rule_files"] = list(rule_files)
    if alertmanagers:
        targets_ = [{"targets": list(alertmanagers)}]
        body["alerting"] = {"alertmanagers": [{**auth(), "static_configs": targets_}]}
    return body


def cors_origin(url: str) -> str:
    """--web.cors.origin: Prometheus' own origin only (the flag is an anchored regex).

    Its default, ``.*``, lets a page of any origin read every query's answer (the fleet's
    model names, rates and configs); its own UI is same-origin and needs no CORS.
    """
    return re.escape(url.rstrip("/"))


def _static_configs(addrs: Sequence[str]) -> list[dict[str, Any]]:
    """host:port targets in one group; a full URL (an attached Triton's metrics) gets a group
    of its own with its scheme and path as the target's ``__scheme__``/``__metrics_path__``."""
    plain = [a for a in addrs if "://" not in a]
    groups: list[dict[str, Any]] = [{"targets": plain}] if plain else []
    for addr in addrs:
        if "://" not in addr:
            continue
        parts = urlsplit(addr)
        group: dict[str, Any] = {"targets": [parts.netloc]}
        labels = {}
        if parts.scheme != "http":
            labels["__scheme__"] = parts.scheme
        if (parts.path or "/metrics") != "/metrics":
            labels["__metrics_path__"] = parts.path
        if labels:
            group["labels"] = labels
        groups.append(group)
    return groups


def _duration(seconds: float) -> str:
    ms = int(round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def local_targets(settings: Settings) -> dict[str, list[str]]:
    host = settings.host
    triton = list(settings.triton_metrics_urls) or [f"{host}:{settings.port('triton_metrics')}"]
    targets = {"triton": triton}
    targets["exporter"] = [f"{host}:{settings.port('exporter')}"]
    if "alertmanager" not in settings.skip:
        targets["alertmanager"] = [f"{host}:{settings.port('alertmanager')}"]
    return targets


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
    body = config(
        local_targets(settings),
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
