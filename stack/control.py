"""What the launcher's commands do: start, supervise, restart, stop and report the stack,
and check the model configs it serves.

``batchscope.commands`` turns the flags into ``Settings`` and calls these; the detached
stack's supervising process is ``batchscope up --supervisor-child``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from rules import rulesettings
from stack import alertmanager, attach
from stack.errors import StackError
from stack.service import STOP_TIMEOUT_S
from stack.services import service_table
from stack.supervisor import Running, Supervisor, restart_requests, tail
from stacksettings import Settings, ensure_secret
from tritonapi import repocheck
from tritonapi.client import TritonClient, TritonError

# How the supervising child says why it stopped: a warning, or its error line.
SAID = ("batchscope up: error: ", "up: ")


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
        from stack import warmup  # the load generator: imported only by `up` that warms up

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
    child = [sys.executable, "-m", "batchscope", "up", *[a for a in argv if a != "--detach"]]
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
                start = max((i for i, ln in enumerate(lines) if ln.startswith(SAID)), default=0)
                message = "\n".join(lines[start:])
                for said in SAID:
                    message = message.removeprefix(said)
                message = message or tail(log_path)
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


def secrets(settings: Settings) -> int:
    """Make the stack's secrets if missing (mode 0600) and say where they are."""
    for path in (settings.admin_key_file, settings.dashboard_token_file):
        ensure_secret(path)
        print(f"{path} (mode 0600)")
    web = alertmanager.write_web_config(
        settings.alertmanager_password_file, settings.state_dir / alertmanager.WEB_CONFIG
    )
    print(f"{settings.alertmanager_password_file} (mode 0600) and its hash, {web}")
    return 0


def down(settings: Settings) -> int:
    stopped = Supervisor(settings, []).down()
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    return 0
