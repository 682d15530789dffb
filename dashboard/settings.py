"""Where the dashboard's data comes from: URLs and paths, from environment variables.

The launcher's ``dashboard`` row sets these; run by hand, the defaults match a
stack started with ``./stack/up`` on this machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import stacksettings

ENV = {
    "prometheus_url": "DASHBOARD_PROMETHEUS_URL",
    "triton_url": "DASHBOARD_TRITON_URL",
    "triton_urls": "DASHBOARD_TRITON_URLS",
    "exporter_url": "DASHBOARD_EXPORTER_URL",
    "store": "DASHBOARD_STORE",
    "model_repository": "DASHBOARD_MODEL_REPOSITORY",
    "logs_dir": "DASHBOARD_LOGS_DIR",
    "admin_key_file": "DASHBOARD_ADMIN_KEY_FILE",
    "scrape_interval_s": "DASHBOARD_SCRAPE_INTERVAL",
    "refresh_s": "DASHBOARD_REFRESH_S",
    "token": "DASHBOARD_TOKEN",
    "token_file": "DASHBOARD_TOKEN_FILE",
}


@dataclass(frozen=True)
class DashboardSettings:
    prometheus_url: str
    # The server the pages read (health, configs, load runs): the chosen one of triton_urls.
    triton_url: str
    # Every Triton the stack watches (the server selector); the first is the default.
    triton_urls: tuple[str, ...]
    # The exporter's trace API (/api/traces), for the batch timeline.
    exporter_url: str
    # The load generator's SQLite results store.
    store: Path
    # None when the stack watches Tritons whose repositories are elsewhere (attach mode):
    # the config view then reads each server's served configs.
    model_repository: Path | None
    # The stack's service logs (named in messages that send the user to them).
    logs_dir: Path
    # The key of Triton's restricted APIs: the timeline's trace switch needs it.
    admin_key_file: Path
    # Prometheus' scrape interval: the finest step a chart can use.
    scrape_interval_s: float = 5.0
    # How often the live view refreshes itself.
    refresh_s: float = 5.0
    # The access token for load runs and the advisor off loopback (dashboard/access.py).
    token: str | None = None
    token_file: Path | None = None


def stack_defaults(env: dict[str, str]) -> DashboardSettings:
    """The local stack's (its STACK_* variables in ``env``), for a dashboard run by hand.

    Read from the environment given, each time: a value kept from the first import would
    outlive a change of the environment in the same process (a test's, or an embedder's).
    """
    stack = stacksettings.from_env_or_default(env)
    return DashboardSettings(
        prometheus_url=stack.url("prometheus"),
        triton_url=stack.triton_targets[0],
        triton_urls=stack.triton_targets,
        exporter_url=stack.url("exporter"),
        store=stack.store,
        model_repository=stack.model_repository,
        logs_dir=stack.logs_dir,
        admin_key_file=stack.admin_key_file,
    )


class SettingsError(ValueError):
    """A DASHBOARD_* variable is unusable."""


def _seconds(env: dict[str, str], name: str, default: float) -> float:
    text = env.get(ENV[name], "")
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{ENV[name]}={text!r} is not a number of seconds") from None
    if value <= 0:
        raise SettingsError(f"{ENV[name]}={text!r} must be positive")
    return value


def from_env(env: dict[str, str] | None = None) -> DashboardSettings:
    env = dict(os.environ if env is None else env)
    base = stack_defaults(env)
    listed = stacksettings.env_list(env, ENV["triton_urls"])
    named = env.get(ENV["triton_url"])
    first = named or (listed[0] if listed else base.triton_url)
    # The default server first, then every other listed one, once each.
    urls = tuple(dict.fromkeys((first, *listed))) if named or listed else base.triton_urls
    repository = env.get(ENV["model_repository"])
    return DashboardSettings(
        prometheus_url=env.get(ENV["prometheus_url"]) or base.prometheus_url,
        triton_url=first,
        triton_urls=urls,
        exporter_url=env.get(ENV["exporter_url"]) or base.exporter_url,
        store=Path(env.get(ENV["store"]) or base.store),
        # Set but empty: no local repository (attach mode).
        model_repository=(
            base.model_repository
            if repository is None
            else Path(repository)
            if repository
            else None
        ),
        logs_dir=Path(env.get(ENV["logs_dir"]) or base.logs_dir),
        admin_key_file=Path(env.get(ENV["admin_key_file"]) or base.admin_key_file),
        scrape_interval_s=_seconds(env, "scrape_interval_s", base.scrape_interval_s),
        refresh_s=_seconds(env, "refresh_s", base.refresh_s),
        token=env.get(ENV["token"]) or None,
        token_file=Path(env[ENV["token_file"]]) if env.get(ENV["token_file"]) else None,
    )
