"""The rules' settings file (rules/settings.yaml): loaded and checked in one place.

Every key is required and unknown keys are refused, so a typo in a threshold name
fails loudly instead of silently keeping the old value.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stacksettings import RULES_SETTINGS

SEVERITIES = ("critical", "warning", "info")
TOP_KEYS = {"windows", "jobs", "min_load_inferences_per_second", "alerts", "alertmanager"}
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")

# Alert name -> its threshold keys (besides severity and for).
THRESHOLDS: dict[str, tuple[str, ...]] = {
    "TritonDown": ("min_failed_reads",),
    "TritonEndpointDown": (),
    "ExporterDown": (),
    "AlertmanagerDown": (),
    "ModelNotReady": (),
    "BatchingIneffective": ("max_average_batch_size",),
    "LowPreferredBatchHitRatio": ("min_hit_ratio",),
    "QueueLatencyHigh": ("max_queue_seconds_per_request",),
    "PendingRequestsBacklog": ("max_pending_requests",),
    "InferenceFailures": ("max_failure_ratio",),
    "QueueFull": (),
    "RequestsRejected": (),
}


class RuleSettingsError(RuntimeError):
    """A bad settings file, phrased for the user as one line; exit code 2 (misuse), as the
    launcher's own errors (stack.errors) that it is reported like."""

    exit_code = 2

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")


Fail = Callable[[str], RuleSettingsError]


@dataclass(frozen=True)
class AlertSettings:
    severity: str
    for_: str
    thresholds: dict[str, float]

    def __getitem__(self, key: str) -> float:
        return self.thresholds[key]


@dataclass(frozen=True)
class RuleSettings:
    source: Path
    short_window: str
    long_window: str
    triton_job: str
    exporter_job: str
    alertmanager_job: str
    min_load: float  # inferences per second
    alerts: dict[str, AlertSettings]
    group_by: list[str]
    group_wait: str
    group_interval: str
    repeat_interval: str
    webhooks: dict[str, list[str]]

    @property
    def windows(self) -> tuple[str, str]:
        return (self.short_window, self.long_window)


def load(path: Path = RULES_SETTINGS) -> RuleSettings:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise RuleSettingsError(
            path,
            f"cannot read it ({exc.strerror}); give --rules-settings (STACK_RULES_SETTINGS) an "
            "existing settings file, e.g. rules/settings.yaml",
        ) from None
    except yaml.YAMLError as exc:
        raise RuleSettingsError(path, f"not valid YAML: {exc}".replace("\n", " ")) from None
    except UnicodeDecodeError:
        raise RuleSettingsError(
            path,
            "not a text file; give --rules-settings (STACK_RULES_SETTINGS) a YAML settings "
            "file, e.g. rules/settings.yaml",
        ) from None
    return parse(data, path)


def parse(data: Any, path: Path) -> RuleSettings:
    def fail(message: str) -> RuleSettingsError:
        return RuleSettingsError(path, message)

    top = _mapping(data, "the file", TOP_KEYS, fail)
    windows = _mapping(top["windows"], "windows", {"short", "long"}, fail)
    jobs = _mapping(top["jobs"], "jobs", {"triton", "exporter", "alertmanager"}, fail)
    alerts_in = _mapping(top["alerts"], "alerts", set(THRESHOLDS), fail)
    am = _mapping(
        top["alertmanager"],
        "alertmanager",
        {"group_by", "group_wait", "group_interval", "repeat_interval", "webhooks"},
        fail,
    )
    alerts = {}
    for name, keys in THRESHOLDS.items():
        entry = _mapping(alerts_in[name], f"alerts.{name}", {"severity", "for", *keys}, fail)
        severity = entry["severity"]
        if severity not in SEVERITIES:
            choices = ", ".join(SEVERITIES)
            raise fail(f"alerts.{name}.severity is {severity!r}; use one of {choices}")
        alerts[name] = AlertSettings(
            severity,
            _duration(entry["for"], f"alerts.{name}.for", fail),
            {k: _number(entry[k], f"alerts.{name}.{k}", fail) for k in keys},
        )
    webhooks = _mapping(am["webhooks"], "alertmanager.webhooks", set(SEVERITIES), fail)
    for severity, urls in webhooks.items():
        if not isinstance(urls, list) or not all(
            isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls
        ):
            raise fail(f"alertmanager.webhooks.{severity} must be a list of http(s) URLs, or []")
    group_by = am["group_by"]
    if not isinstance(group_by, list) or not all(isinstance(g, str) for g in group_by):
        raise fail("alertmanager.group_by must be a list of label names")
    for job_key, job in jobs.items():
        if not isinstance(job, str) or not job:
            raise fail(f"jobs.{job_key} must be a Prometheus job name")
    return RuleSettings(
        source=path,
        short_window=_duration(windows["short"], "windows.short", fail),
        long_window=_duration(windows["long"], "windows.long", fail),
        triton_job=jobs["triton"],
        exporter_job=jobs["exporter"],
        alertmanager_job=jobs["alertmanager"],
        min_load=_number(
            top["min_load_inferences_per_second"], "min_load_inferences_per_second", fail
        ),
        alerts=alerts,
        group_by=group_by,
        group_wait=_duration(am["group_wait"], "alertmanager.group_wait", fail),
        group_interval=_duration(am["group_interval"], "alertmanager.group_interval", fail),
        repeat_interval=_duration(am["repeat_interval"], "alertmanager.repeat_interval", fail),
        webhooks={s: list(webhooks[s]) for s in SEVERITIES},
    )


def _mapping(value: Any, where: str, keys: set[str], fail: Fail) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(f"{where} must be a mapping with keys {', '.join(sorted(keys))}")
    unknown = set(value) - keys
    if unknown:
        raise fail(
            f"{where}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(keys))})"
        )
    missing = keys - set(value)
    if missing:
        raise fail(f"{where}: missing key {sorted(missing)[0]!r}")
    return value


def _duration(value: Any, where: str, fail: Fail) -> str:
    if not isinstance(value, str) or not DURATION.match(value):
        raise fail(f"{where} is {value!r}; use a Prometheus duration such as 30s, 5m or 1h")
    return value


def _number(value: Any, where: str, fail: Fail) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise fail(f"{where} is {value!r}; use a number, 0 or more")
    return float(value)
