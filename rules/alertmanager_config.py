"""alertmanager.yml's content, from the rules' settings file: route by severity, one receiver
per severity.

Each alert goes to the receiver named after its ``severity`` label. Receivers send to the
webhook URLs listed in the settings, if any; with none, the alert is still received and
grouped, and shows in Alertmanager's UI and API. The launcher (stack.alertmanager) writes it
at start; ``batchscope rules`` writes the copy compose mounts.
"""

from __future__ import annotations

from typing import Any

from rules.rulegen import dump
from rules.rulesettings import SEVERITIES, RuleSettings


def config(s: RuleSettings) -> dict[str, Any]:
    """alertmanager.yml as a dict: route by severity, one receiver per severity."""
    return {
        "route": {
            "receiver": "default",
            "group_by": list(s.group_by),
            "group_wait": s.group_wait,
            "group_interval": s.group_interval,
            "repeat_interval": s.repeat_interval,
            "routes": [
                {"matchers": [f'severity="{severity}"'], "receiver": severity}
                for severity in SEVERITIES
            ],
        },
        "receivers": [{"name": "default"}]
        + [_receiver(severity, s.webhooks[severity]) for severity in SEVERITIES],
    }


def _receiver(severity: str, urls: list[str]) -> dict[str, Any]:
    receiver: dict[str, Any] = {"name": severity}
    if urls:
        receiver["webhook_configs"] = [{"url": url, "send_resolved": True} for url in urls]
    return receiver


def render(s: RuleSettings) -> str:
    return dump(config(s), s.source)
