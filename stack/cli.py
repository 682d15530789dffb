"""python -m stack up | down | status | restart | secrets | check-config | doctor | trace | rules |
render"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from doctor import cli as doctor_cli
from rules import alertmanager_config, rulegen, rulesettings
from rules.rulesettings import RuleSettingsError
from stack import (
    alertmanager,
    attach,
    tracewindow,
    warmup,
)
from stack.errors import StackError
from stack.services import service_table
from stack.supervisor import STOP_TIMEOUT_S, Running, Supervisor, restart_requests, tail
from stacksettings import (
    MAX_SCRAPE_INTERVAL_S,
    PORTS,
    RULES_SETTINGS,
    Settings,
    SettingsError,
    admin_headers,
    ensure_secret,
    from_env,
    from_env_or_default,
    parse_port,
    parse_seconds,
)
from tritonapi import repocheck
from tritonapi.client import TritonClient, TritonError
from tritonapi.modelname import model_name
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
    up.add_argument(
        "--expose",
        action="store_true",
        help="allow a --host off loopback (every service becomes reachable from the network)",
    )
    # The detached stack's own supervising process (started by `up --detach`).
    up.add_argument("--supervisor-child", action="store_true", help=argparse.SUPPRESS)
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
        "--hung-after",
        metavar="SECONDS",
        help="restart a running service whose health check has failed this long, as if it "
        "had died (STACK_HUNG_AFTER, 20; 0: never)",
    )
    up.add_argument(
        "--rules-settings",
        type=Path,
        metavar="FILE",
        help="thresholds of the alert rules (STACK_RULES_SETTINGS, rules/settings.yaml)",
    )
    attach = up.add_argument_group(
        "attach mode",
        "watch Tritons that already run; the stack then starts no Triton of its own",
    )
    attach.add_argument(
        "--triton-url",
        action="append",
        default=[],
        metavar="URL",
        help="an existing Triton's HTTP endpoint, http(s)://HOST:PORT; repeatable "
        "(STACK_TRITON_URLS, comma-separated)",
    )
    attach.add_argument(
        "--triton-metrics-url",
        action="append",
        default=[],
        metavar="URL",
        help="its metrics URL, once per --triton-url in the same order (STACK_TRITON_METRICS_URLS;"
        " default: the same host, the HTTP port + 2, /metrics)",
    )
    attach.add_argument(
        "--triton-admin-key-file",
        type=Path,
        metavar="FILE",
        help="the key of the attached Tritons' restricted APIs, sent as the "
        "x-batchscope-admin-key header (STACK_TRITON_ADMIN_KEY_FILE; none by default)",
    )
    up.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="SERVICE",
        help="leave a service out (repeatable)",
    )

    sub.add_parser("down", parents=[common], help="stop a detached stack")
    restart = sub.add_parser(
        "restart", parents=[common], help="stop one service and start it again, wait until healthy"
    )
    restart.add_argument("service", metavar="SERVICE", help="triton, exporter, prometheus, ...")
    sub.add_parser(
        "secrets",
        parents=[common],
        help="make Triton's admin key, the dashboard token and Alertmanager's password "
        "(mode 0600) if missing; compose and `up --expose` use them",
    )
    status = sub.add_parser("status", parents=[common], help="each service, pid, URL, health")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    check = sub.add_parser(
        "check-config",
        parents=[common],
        help="validate every model's config.pbtxt, or with --triton-url the configs a "
        "running Triton serves (exit 2 on errors)",
    )
    check.add_argument(
        "--triton-url",
        action="append",
        default=[],
        metavar="URL",
        help="check the configs this running Triton serves; repeatable (STACK_TRITON_URLS)",
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
    trace.add_argument("--model", type=model_name, required=True, help="the model to trace")
    trace.add_argument(
        "--count",
        type=int,
        default=None,
        metavar="N",
        help=f"traced requests in the window (default {DEFAULT_COUNT:,}, at most {MAX_COUNT:,}; "
        "Triton before 2.57 takes fewer: the default shrinks to its safe region, a larger "
        "--count is refused)",
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
        help="thresholds, windows, severities (default: rules/settings.yaml)",
    )
    rules.add_argument(
        "--output",
        type=Path,
        default=rulegen.GENERATED_DIR,
        help="folder for the generated files (default: rules/generated)",
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
        description="Run the troubleshooting checks against a live Triton and its telemetry.",
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
    if args.command == "up" and not settings.on_loopback and not args.expose:
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


def reachable(settings: Settings) -> str:
    """What binding ``settings.host`` makes reachable, for the refusal and the warning."""
    p = settings.port
    return (
        f"Triton inference, metadata and health on :{p('triton_http')} and "
        f":{p('triton_grpc')} (model-repository, shared-memory, trace and logging need the key "
        f"in {settings.admin_key_file}), Triton's metrics :{p('triton_metrics')}, the exporter "
        f":{p('exporter')} and Prometheus' queries :{p('prometheus')} without authentication, "
        f"Alertmanager :{p('alertmanager')} (user batchscope, the password in "
        f"{settings.alertmanager_password_file}), the dashboard :{p('dashboard')} (load "
        f"runs and the advisor need the token in {settings.dashboard_token_file})"
    )


def check_config(settings: Settings) -> int:
    if settings.attached:
        return check_served(settings)
    try:
        checks = repocheck.check_repository(settings.model_repository)
    except FileNotFoundError as exc:
        raise StackError(
            f"{exc}: pass --model-repository or STACK_MODEL_REPOSITORY", exit_code=2
        ) from None
    if not checks:
        raise StackError(
            f"{settings.model_repository} holds no model (a model is a folder with a "
            "config.pbtxt): pass --model-repository or STACK_MODEL_REPOSITORY with the "
            "repository's folder",
            exit_code=2,
        )
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


def check_served(settings: Settings) -> int:
    """check-config in attach mode: the configs each server serves (no local repository)."""
    checks: list[repocheck.ModelCheck] = []
    for url in settings.triton_urls:
        try:
            served = repocheck.check_server(TritonClient(url, 5.0))
        except TritonError as exc:
            print(f"check-config: {url}: cannot read its models ({exc})", file=sys.stderr)
            return 1
        checks += served
        for check in served:
            for finding in check.findings:
                print(finding, file=sys.stderr)
    problems = repocheck.errors(checks)
    where = ", ".join(settings.triton_urls)
    if problems:
        print(
            f"check-config: {len(problems)} error(s) in the configs served by {where}",
            file=sys.stderr,
        )
        return 2
    print(f"check-config: {len(checks)} model(s) OK on {where}")
    return 0


def generated_files(settings_path: Path) -> dict[str, str]:
    """Every file `rules` writes: the rule files and alertmanager.yml."""
    rule_settings = rulesettings.load(settings_path)
    return {
        **rulegen.render(rule_settings),
        "alertmanager.yml": alertmanager_config.render(rule_settings),
    }


def rules(settings_path: Path, output: Path, check: bool) -> int:
    files = {output / name: text for name, text in generated_files(settings_path).items()}
    return write_or_check("rules", files, check)


def render(check: bool) -> int:
    # Imported here: only this command needs the renderer and the Grafana SDK it brings.
    from deploygen import deployfiles

    return write_or_check("render", deployfiles.render(), check)


def write_or_check(command: str, files: dict[Path, str], check: bool) -> int:
    """Write generated files, or with ``check`` fail (exit 1) if any differs from its source."""
    if not check:
        for path in rulegen.write_files(files):
            print(f"wrote {path}")
        return 0
    stale = rulegen.stale(files)
    for path in stale:
        print(f"{command}: {path} is out of date", file=sys.stderr)
    if stale:
        print(f"{command}: run `batchscope {command}` and commit the result", file=sys.stderr)
        return 1
    print(f"{command}: {len(files)} generated file(s) are up to date")
    return 0


def up(settings: Settings, detach: bool, warm: bool = True, argv: list[str] | None = None) -> int:
    if settings.attached:
        # Bad answers are refused before anything starts; a server that is down is watched.
        targets = attach.targets(settings.triton_urls, settings.triton_metrics_urls)
        for warning in attach.probe(targets):
            print(f"up: {warning}", file=sys.stderr)
        # Someone else's servers get no load unasked.
        warm = False
    elif check_config(settings) != 0:
        print("up: refusing to start with configuration errors", file=sys.stderr)
        return 2
    # Before anything starts: a bad threshold must not leave half a stack running.
    rulesettings.load(settings.rules_settings)
    if not settings.on_loopback:
        print(f"up: --expose: reachable from the network: {reachable(settings)}", file=sys.stderr)
    supervisor = Supervisor(settings, service_table(settings))
    if detach:
        supervisor.preflight()
        running = start_detached(settings, argv or [])
    else:
        supervisor.supervising = True
        supervisor.install_signal_handlers()
        running = supervisor.up(foreground=True)
    # The warm-up is there so the dashboard has something to show at once.
    if warm and not {"triton", "dashboard"} & settings.skip:
        warmup.run_warmup(settings)
    print("\nThe stack is up:")
    for run in running:
        print(f"  {run.name:<13} {'  '.join(f'{k}: {v}' for k, v in run.urls.items())}")
    print(f"Logs: {settings.logs_dir}")
    print("A service that dies is started again; `batchscope status` shows its restarts.")
    if detach:
        print("Stop it with: batchscope down")
        return 0
    print("Ctrl-C stops it.")
    supervisor.supervise(running)
    supervisor.down()
    return 0


def supervise_detached(settings: Settings) -> int:
    """The process `up --detach` leaves behind: starts the stack, keeps it up until SIGTERM."""
    supervisor = Supervisor(settings, service_table(settings), log=_stamped)
    supervisor.supervising = True
    supervisor.install_signal_handlers()
    running = supervisor.up(foreground=False)
    _stamped(f"supervising {', '.join(r.name for r in running)} (pid {os.getpid()})")
    supervisor.supervise(running)
    supervisor.down()
    return 0


def _stamped(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}", flush=True)


def start_detached(settings: Settings, argv: list[str]) -> list[Running]:
    """Start the supervising process in its own session; return once the stack is healthy."""
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    log_path = settings.log_file("supervisor")
    offset = log_path.stat().st_size if log_path.exists() else 0
    child = [sys.executable, "-m", "stack", *[a for a in argv if a != "--detach"]]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*child, "--supervisor-child", "--no-warmup"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    print(f"started the supervisor (pid {proc.pid}), log: {log_path}")
    reader = Supervisor(settings, [])
    budget = sum(s.startup_timeout_s for s in service_table(settings)) + 60
    deadline = time.monotonic() + budget
    try:
        while True:
            code = proc.poll()
            if code is not None:
                with open(log_path, "rb") as log:
                    log.seek(offset)
                    text = log.read().decode(errors="replace")
                lines = text.strip().splitlines()
                start = max((i for i, ln in enumerate(lines) if ln.startswith("up: ")), default=0)
                message = "\n".join(lines[start:]).removeprefix("up: ") or tail(log_path)
                raise StackError(message, exit_code=code or 1)
            if reader.read_supervisor() == proc.pid and _ready(settings):
                return reader.read_state()
            if time.monotonic() > deadline:
                raise StackError(f"the stack was not up within {budget:.0f}s; see {log_path}")
            time.sleep(0.25)
    except BaseException:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_TIMEOUT_S * 6)
            except subprocess.TimeoutExpired:
                proc.kill()
        raise


def _ready(settings: Settings) -> bool:
    try:
        return bool(json.loads(settings.state_file.read_text()).get("ready"))
    except (OSError, ValueError):
        return False


def restart(settings: Settings, name: str) -> int:
    """Ask the supervising process to stop SERVICE and start it again; wait for the answer."""
    supervisor = Supervisor(settings, [])
    names = [r.name for r in supervisor.read_state()]
    if not names:
        raise StackError(f"the stack in {settings.state_dir} is not running: start it with `up`")
    if name not in names:
        raise StackError(
            f"no service {name!r} in this stack (running: {', '.join(names)})",
            exit_code=2,
        )
    if supervisor.read_supervisor() is None:
        raise StackError(
            f"nothing supervises the stack in {settings.state_dir} (its supervisor was killed): "
            "run `batchscope up --detach` (it keeps the services still running and "
            "healthy, and starts the rest), then restart again"
        )
    folder = restart_requests(settings)
    folder.mkdir(parents=True, exist_ok=True)
    result = folder / f"{name}.result"
    result.unlink(missing_ok=True)
    (folder / f"{name}.request").write_text(str(os.getpid()))
    deadline = time.monotonic() + STOP_TIMEOUT_S + 180
    while not result.exists():
        if time.monotonic() > deadline or supervisor.read_supervisor() is None:
            raise StackError(f"{name} was not restarted; see {settings.log_file('supervisor')}")
        time.sleep(0.25)
    answer = result.read_text().strip()
    result.unlink(missing_ok=True)
    if not answer.startswith("ok"):
        raise StackError(f"{name} did not come back healthy ({answer.removeprefix('error: ')})")
    print(f"restarted {name} ({answer.removeprefix('ok: ')})")
    return 0


def status(settings: Settings, as_json: bool) -> int:
    rows = Supervisor(settings, []).status()
    if as_json:
        keeper = Supervisor(settings, []).read_supervisor()
        body = {"state_dir": str(settings.state_dir), "supervisor": keeper, "services": rows}
        body["endpoints"] = attach.endpoint_rows(rows)
        print(json.dumps(body, indent=2))
    elif not rows:
        print(f"the stack is not running (no state in {settings.state_dir})")
    else:
        keeper = Supervisor(settings, []).read_supervisor()
        print(
            f"supervisor    pid {keeper}: restarts services that die"
            if keeper
            else "supervisor    none: a service that dies stays down; `up --detach` supervises "
            "again (keeping what still runs)"
        )
        for row in rows:
            urls = "  ".join(f"{k}: {v}" for k, v in row["urls"].items())
            restarts = f"restarts {row['restarts']}"
            if row["last_exit"]:
                restarts += f" (last: {row['last_exit']})"
            print(f"{row['name']:<13} pid {row['pid']:<8} {row['state']:<10} {urls}  {restarts}")
        for line in attach.endpoint_lines(attach.endpoint_rows(rows)):
            print(line)
    return 0 if rows and all(r["state"] == "healthy" for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
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
            headers = admin_headers(settings.admin_key_file)
            return tracewindow.run(url, args.model, args.count, args.rate, args.seconds, headers)
        if args.command == "up" and args.supervisor_child:
            return supervise_detached(settings)
        if args.command == "up":
            return up(settings, args.detach, warm=not args.no_warmup, argv=argv)
        if args.command == "restart":
            return restart(settings, args.service)
        if args.command == "secrets":
            for path in (settings.admin_key_file, settings.dashboard_token_file):
                ensure_secret(path)
                print(f"{path} (mode 0600)")
            web = alertmanager.write_web_config(
                settings.alertmanager_password_file, settings.state_dir / alertmanager.WEB_CONFIG
            )
            print(f"{settings.alertmanager_password_file} (mode 0600) and its hash, {web}")
            return 0
        if args.command == "down":
            stopped = Supervisor(settings, []).down()
            print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
            return 0
        return status(settings, args.json)
    except SettingsError as exc:
        parser.error(str(exc))
    except (StackError, RuleSettingsError) as exc:
        print(f"{args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        # A file or process the stack needs (a busy binary, a full disk): one line.
        print(f"{args.command}: {exc}; fix that and run it again", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - the launcher never ends in a traceback
        print(
            f"{args.command}: unexpected {type(exc).__name__}: {exc} "
            f"(logs: {settings_dir(args)}); please report it",
            file=sys.stderr,
        )
        return 1
    return 0


def settings_dir(args: argparse.Namespace) -> str:
    return str(getattr(args, "state_dir", None) or ".stack") + "/logs"
