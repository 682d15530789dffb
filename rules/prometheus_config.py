"""prometheus.yml's content: the scrape jobs, the rule files and the Alertmanagers.

``config()`` is the one place the scrape configuration is built: the launcher
(stack.prometheus) writes it at start with the local targets, and the compose and
Kubernetes renderings (deploygen) call it with their own, so the three cannot drift.
It lives beside the rules rather than in the launcher so that the renderer needs no
import of the launcher.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from stacksettings import ALERTMANAGER_USER, Settings


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
