"""python -m stack up | down | status | check-config | doctor | trace | rules | render"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from doctor import cli as doctor_cli
from stack import alertmanager, deployfiles, rulegen, rulesettings, tracewindow, warmup
from stack.errors import StackError
from stack.services import service_table
from stack.supervisor import Supervisor
from stacksettings import (
    PORTS,
    RULES_SETTINGS,
    Settings,
    SettingsError,
    from_env,
    from_env_or_default,
    parse_port,
)
from tritonapi import repocheck
from tritonapi.traces import DEFAULT_COUNT, MAX_COUNT


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m stack",
        description="Run the Triton dynamic-batching observability stack on this machine.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-dir", type=Path, help="logs, configs and data (STACK_STATE_DIR)")
    common.add_argument(
        "--model-repository", type=Path, help="Triton model repository (STACK_MODEL_REPOSITORY)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", parents=[common], help="start every service, wait until healthy")
    up.add_argument(
        "--detach",
        action="store_true",
        help="return once everything is healthy; `down` stops it later",
    )
    up.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the few seconds of load sent after start so the dashboard has data",
    )
    up.add_argument("--host", help="address every service binds (STACK_HOST, 127.0.0.1)")
    for name, (default, var) in PORTS.items():
        up.add_argument(
            f"--{name.replace('_', '-')}-port",
            dest=f"port_{name}",
            metavar="PORT",
            help=f"{name.replace('_', ' ')} port ({var}, {default})",
        )
    up.add_argument(
        "--scrape-interval",
        type=float,
        metavar="SECONDS",
        help="Prometheus scrape and rule interval (STACK_SCRAPE_INTERVAL, 5)",
    )
    up.add_argument(
        "--rules-settings",
        type=Path,
        metavar="FILE",
        help="thresholds of the alert rules (STACK_RULES_SETTINGS, stack/rules/settings.yaml)",
    )
    up.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="SERVICE",
        help="leave a service out (repeatable)",
    )

    sub.add_parser("down", parents=[common], help="stop a detached stack")
    status = sub.add_parser("status", parents=[common], help="each service, pid, URL, health")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    sub.add_parser(
        "check-config",
        parents=[common],
        help="validate every model's config.pbtxt (exit 2 on errors)",
    )
    trace = sub.add_parser(
        "trace",
        parents=[common],
        help="trace a model's next requests in Triton (the batch timeline's data)",
        description="Trace the next --count requests of one model with Triton's own "
        "per-request tracing. Triton writes them to its trace file when the last one is "
        "done; the exporter reads (and removes) it: the dashboard's batch timeline and "
        "triton_batching_queue_wait_seconds show them. Exit 0 when the window completed, "
        "1 when --seconds ran out first (its traces are then not written), 2 on misuse.",
    )
    trace.add_argument("--model", required=True, help="the model to trace")
    trace.add_argument(
        "--count",
        type=int,
        default=DEFAULT_COUNT,
        metavar="N",
        help=f"traced requests in the window (default {DEFAULT_COUNT:,}, at most {MAX_COUNT:,})",
    )
    trace.add_argument(
        "--rate",
        type=int,
        default=1,
        metavar="N",
        help="trace 1 request in N (default 1: every request, which batch sizes and "
        "departure reasons need; queue-wait percentiles are fine with a sample)",
    )
    trace.add_argument(
        "--seconds",
        type=float,
        default=60.0,
        help=f"the longest to wait for the window (default 60, at most "
        f"{tracewindow.MAX_SECONDS:g})",
    )
    trace.add_argument(
        "--url", help="Triton's HTTP endpoint (default: the stack's, from STACK_* settings)"
    )
    rules = sub.add_parser(
        "rules",
        help="generate the Prometheus rules and Alertmanager config from the settings file",
    )
    rules.add_argument(
        "--settings",
        type=Path,
        default=RULES_SETTINGS,
        help="thresholds, windows, severities (default: stack/rules/settings.yaml)",
    )
    rules.add_argument(
        "--output",
        type=Path,
        default=rulegen.GENERATED_DIR,
        help="folder for the generated files (default: stack/rules/generated)",
    )
    rules.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the files in --output differ from what would be written",
    )
    render = sub.add_parser(
        "render",
        help="generate the compose and Kubernetes configs (deploy/) from the local ones",
    )
    render.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a committed file differs from what would be written",
    )
    doctor = sub.add_parser(
        "doctor",
        help="why isn't batching working? the troubleshooting guide's checks on a live server",
        description="Run the spec's batching checks against a live Triton and its telemetry.",
    )
    doctor_cli.add_arguments(doctor, doctor_defaults())
    return parser


def doctor_defaults() -> doctor_cli.Defaults:
    """The local stack's Triton, its metrics and its Prometheus (STACK_* settings)."""
    settings = from_env_or_default()
    return doctor_cli.Defaults(
        triton_url=settings.url("triton_http"),
        metrics_url=settings.url("triton_metrics") + "/metrics",
        prometheus_url=settings.url("prometheus"),
    )


def settings_from(args: argparse.Namespace) -> Settings:
    settings = from_env()
    if getattr(args, "rules_settings", None):
        settings = replace(settings, rules_settings=args.rules_settings.resolve())
    if args.state_dir:
        settings = replace(settings, state_dir=args.state_dir.resolve())
    if args.model_repository:
        settings = replace(settings, model_repository=args.model_repository.resolve())
    if getattr(args, "host", None):
        settings = replace(settings, host=args.host)
    ports = {
        name: parse_port(value, f"--{name.replace('_', '-')}-port")
        for name in PORTS
        if (value := getattr(args, f"port_{name}", None)) is not None
    }
    settings = settings.with_ports(**ports)
    if getattr(args, "scrape_interval", None) is not None:
        if args.scrape_interval <= 0:
            raise SettingsError("--scrape-interval must be a positive number of seconds")
        settings = replace(settings, scrape_interval_s=args.scrape_interval)
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


def check_config(settings: Settings) -> int:
    try:
        checks = repocheck.check_repository(settings.model_repository)
    except FileNotFoundError as exc:
        raise StackError(
            f"{exc}: pass --model-repository or STACK_MODEL_REPOSITORY", exit_code=2
        ) from None
    for check in checks:
        for finding in check.findings:
            print(finding, file=sys.stderr)
    problems = repocheck.errors(checks)
    if problems:
        print(
            f"check-config: {len(problems)} error(s) in {settings.model_repository}; "
            "fix them and run again",
            file=sys.stderr,
        )
        return 2
    print(f"check-config: {len(checks)} model(s) OK in {settings.model_repository}")
    return 0


def generated_files(settings_path: Path) -> dict[str, str]:
    """Every file `rules` writes: the rule files and alertmanager.yml."""
    rule_settings = rulesettings.load(settings_path)
    return {
        **rulegen.render(rule_settings),
        "alertmanager.yml": alertmanager.render(rule_settings),
    }


def rules(settings_path: Path, output: Path, check: bool) -> int:
    files = {output / name: text for name, text in generated_files(settings_path).items()}
    return write_or_check("rules", files, check)


def render(check: bool) -> int:
    return write_or_check("render", deployfiles.render(), check)


def write_or_check(command: str, files: dict[Path, str], check: bool) -> int:
    """Write generated files, or with ``check`` fail (exit 1) if any differs from its source."""
    if not check:
        for path in deployfiles.write(files):
            print(f"wrote {path}")
        return 0
    stale = deployfiles.stale(files)
    for path in stale:
        print(f"{command}: {path} is out of date", file=sys.stderr)
    if stale:
        print(f"{command}: run `python -m stack {command}` and commit the result", file=sys.stderr)
        return 1
    print(f"{command}: {len(files)} generated file(s) are up to date")
    return 0


def up(settings: Settings, detach: bool, warm: bool = True) -> int:
    if check_config(settings) != 0:
        print("up: refusing to start with configuration errors", file=sys.stderr)
        return 2
    # Before anything starts: a bad threshold must not leave half a stack running.
    rulesettings.load(settings.rules_settings)
    supervisor = Supervisor(settings, service_table(settings))
    if not detach:
        supervisor.install_signal_handlers()
    running = supervisor.up(foreground=not detach)
    # The warm-up is there so the dashboard has something to show at once.
    if warm and not {"triton", "dashboard"} & settings.skip:
        warmup.run_warmup(settings)
    print("\nThe stack is up:")
    for run in running:
        print(f"  {run.name:<13} {'  '.join(f'{k}: {v}' for k, v in run.urls.items())}")
    print(f"Logs: {settings.logs_dir}")
    if detach:
        print("Stop it with: python -m stack down")
        return 0
    print("Ctrl-C stops it.")
    supervisor.watch(running)
    supervisor.down()
    return 0


def status(settings: Settings, as_json: bool) -> int:
    rows = Supervisor(settings, []).status()
    if as_json:
        print(json.dumps({"state_dir": str(settings.state_dir), "services": rows}, indent=2))
    elif not rows:
        print(f"the stack is not running (no state in {settings.state_dir})")
    else:
        for row in rows:
            urls = "  ".join(f"{k}: {v}" for k, v in row["urls"].items())
            print(f"{row['name']:<13} pid {row['pid']:<8} {row['state']:<10} {urls}")
    return 0 if rows and all(r["state"] == "healthy" for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "rules":
            return rules(args.settings.resolve(), args.output.resolve(), args.check)
        if args.command == "render":
            return render(args.check)
        if args.command == "doctor":
            return doctor_cli.run(args, doctor_defaults())
        settings = settings_from(args)
        if args.command == "check-config":
            return check_config(settings)
        if args.command == "trace":
            url = args.url or settings.url("triton_http")
            return tracewindow.run(url, args.model, args.count, args.rate, args.seconds)
        if args.command == "up":
            return up(settings, args.detach, warm=not args.no_warmup)
        if args.command == "down":
            stopped = Supervisor(settings, []).down()
            print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
            return 0
        return status(settings, args.json)
    except SettingsError as exc:
        parser.error(str(exc))
    except StackError as exc:
        print(f"{args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    return 0
