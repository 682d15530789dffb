"""The launcher's flags and how they become ``Settings``: the state folder and model
repository every stack command takes, the ports, hosts and attach targets of ``up``.

A bad value is one ``SettingsError``; ``run`` turns it, and the launcher's own errors,
into the command's one error line with the launcher's exit codes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from batchscope.base import CommandError
from rules.rulesettings import RuleSettingsError
from stack import attach
from stack.control import reachable
from stack.errors import StackError
from stack.services import service_table
from stacksettings import (
    MAX_SCRAPE_INTERVAL_S,
    PORTS,
    Settings,
    SettingsError,
    from_env,
    from_env_or_default,
    parse_port,
    parse_seconds,
)

if TYPE_CHECKING:  # the doctor (numpy, the advisor) only for the doctor's command
    from doctor.checkup import Defaults


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, help="logs, configs and data (STACK_STATE_DIR)")
    parser.add_argument(
        "--model-repository", type=Path, help="Triton model repository (STACK_MODEL_REPOSITORY)"
    )


def run(args: argparse.Namespace, command: Callable[[Settings], int]) -> int:
    """``command`` with the settings from ``args``; every failure is one line."""
    return guarded(args, lambda: command(settings_from(args)))


def guarded(args: argparse.Namespace, command: Callable[[], int]) -> int:
    """``command()``, its failures turned into the one error line and the launcher's codes."""
    try:
        return command()
    except SettingsError as exc:
        raise CommandError(str(exc)) from None
    except (StackError, RuleSettingsError) as exc:
        raise CommandError(str(exc), exc.exit_code) from None
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        # A file or process the stack needs (a busy binary, a full disk): one line.
        raise CommandError(f"{exc}; fix that and run it again", 1) from None
    except Exception as exc:  # noqa: BLE001 - the launcher never ends in a traceback
        logs = str(getattr(args, "state_dir", None) or ".stack") + "/logs"
        raise CommandError(
            f"unexpected {type(exc).__name__}: {exc} (logs: {logs}); please report it", 1
        ) from None


def doctor_defaults() -> Defaults:
    """The local stack's Triton, its metrics and its Prometheus (STACK_* settings)."""
    from doctor.checkup import Defaults

    settings = from_env_or_default()
    return Defaults(
        triton_url=settings.url("triton_http"),
        metrics_url=settings.url("triton_metrics") + "/metrics",
        prometheus_url=settings.url("prometheus"),
        exporter_url=settings.url("exporter"),
        admin_headers=settings.admin_headers(),
    )


def resolved(path: Path, flag: str, folder: bool = False) -> Path:
    """``path`` made absolute; one SettingsError line when it cannot be (a symlink loop) or
    when a folder is wanted and it is something else (a file, a device)."""
    try:
        full = path.resolve()
        is_other = folder and full.exists() and not full.is_dir()
    except (OSError, RuntimeError) as exc:  # RuntimeError: Python's "Symlink loop"
        raise SettingsError(f"{flag} {path}: cannot be read ({exc}); give another path") from None
    if is_other:
        raise SettingsError(f"{flag} {path} is not a folder; give a folder's path")
    return full


def settings_from(args: argparse.Namespace) -> Settings:
    settings = from_env()
    if getattr(args, "rules_settings", None):
        rules = resolved(args.rules_settings, "--rules-settings")
        settings = replace(settings, rules_settings=rules)
    if args.state_dir:
        settings = replace(settings, state_dir=resolved(args.state_dir, "--state-dir", True))
    if args.model_repository:
        repository = resolved(args.model_repository, "--model-repository", True)
        settings = replace(settings, model_repository=repository)
    if getattr(args, "host", None):
        settings = replace(settings, host=args.host)
    if not getattr(args, "expose", True) and not settings.on_loopback:
        raise SettingsError(
            f"--host/STACK_HOST {settings.host} is not loopback: every service would be "
            f"reachable from the network ({reachable(settings)}); add --expose if that is "
            "what you want, or leave --host out"
        )
    ports = {
        name: parse_port(value, f"--{name.replace('_', '-')}-port")
        for name in PORTS
        if (value := getattr(args, f"port_{name}", None)) is not None
    }
    settings = settings.with_ports(**ports)
    if getattr(args, "scrape_interval", None) is not None:
        if not 0 < args.scrape_interval <= MAX_SCRAPE_INTERVAL_S:
            raise SettingsError(
                f"--scrape-interval must be a positive number of seconds, at most "
                f"{MAX_SCRAPE_INTERVAL_S:g}"
            )
        settings = replace(settings, scrape_interval_s=args.scrape_interval)
    if getattr(args, "hung_after", None) is not None:
        hung = parse_seconds(args.hung_after, "--hung-after", settings.hung_after_s)
        settings = replace(settings, hung_after_s=hung)
    settings = attached_from(args, settings)
    if getattr(args, "skip", None):
        known = {s.name for s in service_table(settings)}
        unknown = set(args.skip) - known
        if unknown:
            raise SettingsError(
                f"--skip: unknown service {sorted(unknown)[0]!r} "
                f"(known: {', '.join(sorted(known))})"
            )
        settings = replace(settings, skip=frozenset(args.skip))
    return settings


def attached_from(args: argparse.Namespace, settings: Settings) -> Settings:
    """Attach mode's targets from the flags (or STACK_TRITON_URLS), checked and paired."""
    urls = getattr(args, "triton_url", None) or list(settings.triton_urls)
    metrics = getattr(args, "triton_metrics_url", None) or list(settings.triton_metrics_urls)
    key_file = getattr(args, "triton_admin_key_file", None)
    if not urls:
        if metrics or key_file:
            raise SettingsError(
                "--triton-metrics-url and --triton-admin-key-file need --triton-url (attach mode)"
            )
        return settings
    found = attach.targets(urls, metrics)
    if key_file is not None:
        if not key_file.is_file():
            raise SettingsError(f"--triton-admin-key-file: {key_file} is not a readable file")
        settings = replace(settings, attached_admin_key_file=key_file.resolve())
    return replace(
        settings,
        triton_urls=tuple(t.url for t in found),
        triton_metrics_urls=tuple(t.metrics_url for t in found),
    )
