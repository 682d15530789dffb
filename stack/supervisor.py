"""Starts the service table, waits for health, keeps it running, stops it, reports status.

Children run in their own process groups so that a stop reaches their own children
too (Triton's python backend stubs, which ignore SIGTERM and outlive a killed Triton).
A service that dies is restarted with backoff (:meth:`Supervisor.supervise`), after
whatever is left of its process group is removed. A state file in the state folder
records each pid with its start time, its restarts and the supervising process, so
`down`, `status` and `restart` work from another process and never signal a
recycled pid.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import requests

from rules.rulesettings import RuleSettingsError
from stack.errors import StackError
from stack.service import STOP_TIMEOUT_S, Service
from stack.services import service_table
from stacksettings import ALERTMANAGER_USER, PORTS, Settings, procstat, read_secret

# Restart backoff: 1 s, 2 s, 4 s, ... at most 30 s; a service that stayed up for
# BACKOFF_RESET_S since its last start begins again at 1 s.
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
BACKOFF_RESET_S = 60.0
TICK_S = 0.5
# What is left of a service whose main process died gets this long after SIGTERM.
LOST_GRACE_S = 2.0
# A running service's health is checked this often (each check waits at most
# HEALTH_TIMEOUT_S: a stopped process accepts connections but never answers).
HEALTH_EVERY_S = 1.0
HEALTH_TIMEOUT_S = 1.0
# The alert the supervisor sends Alertmanager itself when it restarts a hung service
# (Triton's hang already pages as TritonDown: the exporter cannot read it).
HUNG_ALERT = "ServiceHung"
HUNG_ALERT_S = 300.0  # how long the alert stays active unless sent again
Log = Callable[[str], None]


@dataclass
class Running:
    name: str
    pid: int
    started: str  # the process' start time in clock ticks (/proc/PID/stat field 22)
    health_url: str
    urls: dict[str, str]
    log: str
    restarts: int = 0  # times the supervisor started it again after it died or on request
    last_exit: str = ""  # how the previous process ended, e.g. "killed by SIGKILL at 02:41:07"
    health_auth_file: str = ""  # the basic-auth password its health URL needs, if any
    live_url: str = ""  # what a hang is judged by (Service.live_url); empty: health_url
    argv: list[str] = field(default_factory=list)  # what was exec'd: checked before adopting
    stop_grace_s: float = STOP_TIMEOUT_S  # Service.stop_grace_s


@dataclass
class _Backoff:
    failures: int = 0
    started_at: float = 0.0  # monotonic
    due: float | None = None  # when the next start is due; None while it runs
    checked_at: float = 0.0  # monotonic: the last health check while it runs
    unhealthy_since: float | None = None  # monotonic: the first of the failed checks in a row

    def next_delay(self, now: float) -> float:
        if now - self.started_at >= BACKOFF_RESET_S:
            self.failures = 0
        delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2**self.failures)
        self.failures += 1
        return delay


def describe_exit(code: int | None) -> str:
    when = time.strftime("%H:%M:%S")
    if code is None:
        return f"gone at {when}"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name} at {when}"
        except ValueError:
            return f"killed by signal {-code} at {when}"
    return f"exited with code {code} at {when}"


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Servers bind with SO_REUSEADDR; do the same so TIME_WAIT leftovers are not "in use".
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _port_flag(port: int, settings: Settings) -> str:
    for name, (_, var) in PORTS.items():
        if settings.ports.get(name) == port:
            return f"--{name.replace('_', '-')}-port or {var}"
    return "the port settings"


def is_alive(run: Running) -> bool:
    return procstat.start_time(run.pid) == run.started


def group_members(run: Running) -> list[int]:
    """Live processes left in the service's process group (its pgid is the leader's pid).

    Empty when the pid now names another process: Linux does not reuse a pid while a
    process group of that number exists, so the old group is gone.
    """
    leader = procstat.start_time(run.pid)
    if leader is not None and leader != run.started:
        return []
    return [p.pid for p in procstat.processes() if p.pgid == run.pid and not p.zombie]


def is_healthy(url: str, timeout: float = 2.0, auth_file: Path | str | None = None) -> bool:
    auth = None
    if auth_file:
        auth = (ALERTMANAGER_USER, read_secret(auth_file) or "")
    try:
        return requests.get(url, timeout=timeout, auth=auth).status_code == 200
    except requests.RequestException:
        return False


def run_healthy(run: Running, timeout: float = 2.0) -> bool:
    return is_healthy(run.health_url, timeout, run.health_auth_file)


def tail(path: Path | str, lines: int = 20) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    # Foreground mode: if the launcher is killed outright, take the child with it.
    PR_SET_PDEATHSIG = 1
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Supervisor:
    def __init__(self, settings: Settings, services: list[Service], log: Log = print) -> None:
        self.settings = settings
        self.services = services
        self.log = log
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.stop_requested = threading.Event()
        # Set by the process that keeps the stack running (foreground `up`, the detached
        # supervisor): `restart` and `down` from another shell talk to it.
        self.supervising = False
        self.ready = False
        # Stopped on purpose (stop_service): not restarted until start_service.
        self.held: set[str] = set()
        # Children die with a foreground launcher (PR_SET_PDEATHSIG), restarted ones too.
        self.foreground = False
        # The list supervise() keeps; start_service() from another thread updates it.
        self.watched: list[Running] = []
        # Services a lost supervisor left running and healthy, kept by up() (preflight).
        self.adopted: dict[str, Running] = {}
        # Alerts about hung services not yet accepted by Alertmanager.
        self.pages: list[dict[str, Any]] = []
        # Every child this object started, reaped on down() whatever path it left by.
        self._spawned: list[subprocess.Popen[bytes]] = []
        self._lock = threading.RLock()

    # ---- state file -------------------------------------------------------------------
    def read_state(self) -> list[Running]:
        try:
            data = json.loads(self.settings.state_file.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise StackError(
                f"state file {self.settings.state_file} is unreadable ({exc}); "
                "stop leftover processes by hand and delete it"
            ) from None
        return [Running(**entry) for entry in data.get("services", [])]

    def read_supervisor(self) -> int | None:
        """The pid of the live process that supervises this stack, if there is one."""
        try:
            data = json.loads(self.settings.state_file.read_text())
        except (OSError, ValueError):
            return None
        sup = data.get("supervisor") or {}
        pid, started = sup.get("pid"), sup.get("started")
        if pid and started and procstat.start_time(pid) == started:
            return int(pid)
        return None

    def _write_state(self, running: list[Running]) -> None:
        path = self.settings.state_file
        path.parent.mkdir(parents=True, exist_ok=True)
        body: dict[str, Any] = {"services": [asdict(r) for r in running]}
        if self.supervising:
            body["supervisor"] = {"pid": os.getpid(), "started": procstat.start_time(os.getpid())}
            body["ready"] = self.ready
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(body, indent=2))
        tmp.replace(path)

    # ---- up ---------------------------------------------------------------------------
    def preflight(self) -> None:
        """Refuse a stack that is running and supervised; adopt what a lost supervisor left.

        With the supervising process gone, the services that still run as recorded (the
        same pid, start time and argv: not a recycled pid) and answer their health check
        are kept (:attr:`adopted`); what is left of the others is removed, to be started.
        """
        previous = self.read_state()
        live = [r for r in previous if is_alive(r)]
        keeper = self.read_supervisor()
        if live and keeper is not None and keeper != os.getpid():
            names = ", ".join(f"{r.name} (pid {r.pid})" for r in live)
            raise StackError(
                f"the stack in {self.settings.state_dir} is already running: {names}; "
                "run `batchscope down` first, or `batchscope restart SERVICE`"
            )
        self.adopted = {r.name: r for r in live if self._adoptable(r)}
        # A stack that was killed outright can leave grandchildren behind (Triton's
        # stubs hold the backend folder busy): remove them before starting again.
        for run in previous:
            if run.name not in self.adopted and group_members(run):
                self.log(f"removing what is left of {run.name}'s processes (group {run.pid})")
                self._kill_tree(run)
        busy = [
            (svc.name, port)
            for svc in self.services
            if svc.name not in self.adopted
            for port in svc.ports
            if port_in_use(self.settings.host, port)
        ]
        if busy:
            name, port = busy[0]
            raise StackError(
                f"port {port} on {self.settings.host} (for {name}) is already in use: stop "
                f"whatever holds it, or choose another port with {_port_flag(port, self.settings)}",
                exit_code=2,
            )

    def _adoptable(self, run: Running) -> bool:
        svc = next((s for s in self.services if s.name == run.name), None)
        return (
            svc is not None
            and svc.health_url == run.health_url
            and bool(run.argv)
            and procstat.cmdline(run.pid) == run.argv
            and is_alive(run)
            and run_healthy(run)
        )

    def up(self, foreground: bool = False) -> list[Running]:
        """Start every service and wait until each is healthy; on failure stop them all.

        Services adopted by :meth:`preflight` are kept as they run, not started again.
        """
        self.foreground = foreground
        self.preflight()
        self.settings.logs_dir.mkdir(parents=True, exist_ok=True)
        running: list[Running] = []
        try:
            for svc in self.services:
                if self.stop_requested.is_set():
                    raise StackError("interrupted while starting; stopped what had started")
                adopted = self.adopted.get(svc.name)
                if adopted is not None:
                    self.log(f"adopted {svc.name} (pid {adopted.pid}): it still runs and answers")
                    running.append(adopted)
                    self._write_state(running)
                    continue
                running.append(self._start(svc, foreground))
                self._write_state(running)
                self._wait_ready(svc, running[-1])
        except BaseException:
            self._stop(running)
            raise
        self.ready = True
        self._write_state(running)
        return running

    def _start(self, svc: Service, foreground: bool) -> Running:
        if svc.prepare is not None:
            try:
                svc.prepare()
            except OSError as exc:
                raise StackError(f"{svc.name}: cannot prepare its files: {exc}") from None
            except RuleSettingsError as exc:
                # A settings file edited since `up` checked it: a restart fails as any
                # other start does, logged and retried, rather than ending the supervisor.
                raise StackError(str(exc), exit_code=exc.exit_code) from None
        log_path = self.settings.logs_dir / f"{svc.name}.log"
        log_file: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                svc.argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env={**os.environ, **svc.env},
                cwd=svc.cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent if foreground else None,
            )
        except OSError as exc:
            raise StackError(f"{svc.name}: cannot start {svc.argv[0]}: {exc}") from None
        finally:
            log_file.close()
        self.children[svc.name] = proc
        self._spawned.append(proc)
        started = procstat.start_time(proc.pid) or ""
        self.log(f"started {svc.name} (pid {proc.pid}), log: {log_path}")
        return Running(
            svc.name,
            proc.pid,
            started,
            svc.health_url,
            svc.urls,
            str(log_path),
            health_auth_file=str(svc.health_auth_file or ""),
            live_url=svc.live_url,
            argv=list(svc.argv),
            stop_grace_s=svc.stop_grace_s,
        )

    def _wait_ready(self, svc: Service, run: Running) -> None:
        deadline = time.monotonic() + svc.startup_timeout_s
        proc = self.children[svc.name]
        while time.monotonic() < deadline and not self.stop_requested.is_set():
            code = proc.poll()
            if code is not None:
                raise StackError(
                    f"{svc.name} exited with code {code} while starting. "
                    f"Last lines of {run.log}:\n{tail(run.log)}"
                )
            if is_healthy(svc.health_url, timeout=1.0, auth_file=svc.health_auth_file):
                self.log(f"{svc.name} is healthy: {svc.health_url}")
                return
            time.sleep(0.25)
        if self.stop_requested.is_set():
            raise StackError("interrupted while starting; stopped what had started")
        raise StackError(
            f"{svc.name} was not healthy at {svc.health_url} within "
            f"{svc.startup_timeout_s:.0f}s. Last lines of {run.log}:\n{tail(run.log)}"
        )

    # ---- one service of a running stack -------------------------------------------------
    def stop_service(self, name: str) -> None:
        """Stop one service of the running stack; the others keep running (an outage drill).

        The supervisor does not start it again until :meth:`start_service`.
        """
        with self._lock:
            self.held.add(name)
            self._stop([self._running(name)])

    def start_service(self, name: str) -> Running:
        """Start one service again (after stop_service) and wait until it is healthy."""
        svc = next((s for s in self.services if s.name == name), None)
        if svc is None:
            raise StackError(f"no service {name!r} in this stack's service table")
        old = self._running(name)
        if self._alive(old):
            raise StackError(f"{name} is already running (pid {old.pid})")
        with self._lock:
            # A leader that died while held (killed from outside) may leave its stubs or
            # workers behind: they go before the new one starts, as after any death.
            self._stop([old], quiet=True, grace_s=LOST_GRACE_S)
            run = self._start(svc, foreground=False)
            run.restarts, run.last_exit = old.restarts, old.last_exit
            self._write_state([run if r.name == name else r for r in self.read_state()])
            self.watched[:] = [run if r.name == name else r for r in self.watched]
            self.held.discard(name)
        try:
            self._wait_ready(svc, run)
        except BaseException:
            self._stop([run])
            raise
        return run

    def reload(self, name: str) -> None:
        """SIGHUP to a service's main process: Prometheus and Alertmanager re-read their
        config (the stack runs Prometheus without the lifecycle API's POST /-/reload)."""
        run = self._running(name)
        if not self._alive(run):
            raise StackError(f"{name} is not running; start it first")
        os.kill(run.pid, signal.SIGHUP)

    def _running(self, name: str) -> Running:
        for run in self.read_state():
            if run.name == name:
                return run
        raise StackError(f"{name} is not part of the stack in {self.settings.state_dir}")

    # ---- foreground -------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        def handle(signum: int, _frame: Any) -> None:
            # Only record it; the main loop does the work (uvicorn's pattern).
            self.log(f"received {signal.Signals(signum).name}, stopping")
            self.stop_requested.set()

        signal.signal(signal.SIGINT, handle)
        signal.signal(signal.SIGTERM, handle)

    def supervise(self, running: list[Running]) -> None:
        """Block until a stop is requested; restart services that die, with backoff.

        Also serves `batchscope restart SERVICE` from another shell (a request
        file in the state folder). ``running`` is updated in place.
        """
        tracks = {run.name: _Backoff(started_at=time.monotonic()) for run in running}
        self.watched = running
        while not self.stop_requested.wait(TICK_S):
            self._serve_restart_requests(running, tracks)
            self._send_pages()
            for index in range(len(running)):
                if self.stop_requested.is_set():
                    return
                with self._lock:
                    # Read under the lock: start_service() may have replaced the entry.
                    run = running[index]
                    if run.name in self.held:
                        continue
                    running[index] = self._tend(run, tracks[run.name])

    def _tend(self, run: Running, track: _Backoff) -> Running:
        now = time.monotonic()
        if track.due is None:
            if self._alive(run):
                hung_s = self._hung_for(run, track, now)
                if hung_s is None:
                    return run
                # Stopped or deadlocked: SIGTERM may never be handled, and nothing of it
                # is worth waiting for. Killed, it is restarted like a dead one.
                self._kill_tree(run)
                run.last_exit = (
                    f"restarted: hung for {hung_s:.0f} s (health check failing; killed at "
                    f"{time.strftime('%H:%M:%S')})"
                )
                self._page_hung(run, hung_s)
            else:
                proc = self.children.get(run.name)
                run.last_exit = describe_exit(proc.poll() if proc is not None else None)
                # Its stubs or workers may live on: the restart needs the whole tree gone.
                # The leader is dead, so there is no clean shutdown to wait for.
                self._stop([run], quiet=True, grace_s=LOST_GRACE_S)
            track.unhealthy_since = None
            delay = track.next_delay(now)
            track.due = now + delay
            self.log(f"{run.name} (pid {run.pid}) {run.last_exit}; starting it again in {delay:g}s")
            self._write_state(self._replace(run))
            return run
        if now < track.due:
            return run
        track.due, track.started_at = None, now
        return self._restart(run, f"restart {run.restarts + 1}")

    def _hung_for(self, run: Running, track: _Backoff, now: float) -> float | None:
        """Seconds its health check has failed in a row, once that reaches the setting."""
        limit = self.settings.hung_after_s
        if limit <= 0 or now - track.checked_at < HEALTH_EVERY_S:
            return None
        track.checked_at = now
        url = run.live_url or run.health_url
        if is_healthy(url, HEALTH_TIMEOUT_S, run.health_auth_file):
            track.unhealthy_since = None
            return None
        if track.unhealthy_since is None:
            track.unhealthy_since = now
            self.log(f"{run.name} (pid {run.pid}) fails its health check: {url}")
        failing = time.monotonic() - track.unhealthy_since
        return failing if failing >= limit else None

    def _page_hung(self, run: Running, hung_s: float) -> None:
        """Send Alertmanager one alert for the hang (none for Triton: TritonDown pages)."""
        self.log(f"{run.name} (pid {run.pid}) {run.last_exit}")
        if run.name == "triton" or "alertmanager" in self.settings.skip:
            return
        self.pages.append(
            {
                "labels": {"alertname": HUNG_ALERT, "service": run.name, "severity": "warning"},
                "annotations": {
                    "summary": f"{run.name} hung and was restarted",
                    "description": f"{run.name}'s health check failed for "
                    f"{hung_s:.0f} s; the supervisor killed its processes and started it again. "
                    f"Its log: {run.log}",
                },
            }
        )

    def _send_pages(self) -> None:
        """Hand queued alerts to Alertmanager; they wait while it is down (or hung itself)."""
        if not self.pages:
            return
        now = time.time()
        body = [
            {
                **page,
                "startsAt": _rfc3339(now),
                "endsAt": _rfc3339(now + HUNG_ALERT_S),
            }
            for page in self.pages
        ]
        try:
            response = requests.post(
                f"{self.settings.url('alertmanager')}/api/v2/alerts",
                json=body,
                auth=self.settings.alertmanager_auth(),
                timeout=HEALTH_TIMEOUT_S,
            )
        except requests.RequestException:
            return
        if response.status_code == 200:
            self.pages.clear()

    def _restart(self, old: Running, why: str) -> Running:
        svc = next(s for s in self.services if s.name == old.name)
        try:
            run = self._start(svc, foreground=self.foreground)
        except StackError as exc:
            self.log(f"{old.name}: {why} failed: {exc}")
            old.restarts += 1
            return old
        run.restarts, run.last_exit = old.restarts + 1, old.last_exit
        self._write_state(self._replace(run))
        try:
            self._wait_ready(svc, run)
        except StackError as exc:
            # Dead or unhealthy: the next tick finds it dead and backs off further.
            self.log(f"{old.name}: {why} failed: {exc}")
            self._stop([run], quiet=True)
        else:
            self.log(f"{old.name} is back (pid {run.pid}, {why})")
        return run

    def _replace(self, run: Running) -> list[Running]:
        return [run if r.name == run.name else r for r in self.read_state()]

    def _serve_restart_requests(self, running: list[Running], tracks: dict[str, _Backoff]) -> None:
        folder = restart_requests(self.settings)
        if not folder.is_dir():
            return
        for request in sorted(folder.glob("*.request")):
            name = request.stem
            result = request.with_suffix(".result")
            index = next((i for i, r in enumerate(running) if r.name == name), None)
            if index is None:
                result.write_text(f"error: {name} is not part of this stack")
                request.unlink(missing_ok=True)
                continue
            with self._lock:
                old = running[index]
                self._stop([old], quiet=True)
                old.last_exit = f"stopped for `restart` at {time.strftime('%H:%M:%S')}"
                self.held.discard(name)
                new = self._restart(old, "on request")
                running[index] = new
                tracks[name] = _Backoff(started_at=time.monotonic())
            ok = self._alive(new) and run_healthy(new)
            result.write_text(f"ok: pid {new.pid}" if ok else f"error: see {new.log}")
            request.unlink(missing_ok=True)

    # ---- down -------------------------------------------------------------------------
    def down(self) -> list[str]:
        """Stop the stack: its supervising process first (so nothing is restarted), then
        whatever is left of each service. Returns the services that were running."""
        running = self.read_state()
        had = [r.name for r in reversed(running) if self._alive(r) or group_members(r)]
        keeper = self.read_supervisor()
        if keeper is not None and keeper != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(keeper, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S * (len(running) + 1)
            while procstat.start_time(keeper) is not None and time.monotonic() < deadline:
                time.sleep(0.1)
        self._stop(running)
        self.settings.state_file.unlink(missing_ok=True)
        for proc in self._spawned:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._spawned.clear()
        return had

    def _stop(
        self, running: list[Running], quiet: bool = False, grace_s: float | None = None
    ) -> list[str]:
        """Stop each service's whole process group: SIGTERM, a grace period (``grace_s``, or
        the longest of the services' own), then SIGKILL.

        Groups whose leader is already dead are swept too (a killed Triton's stubs).
        Returns the names of services that had anything left to stop.
        """
        live = [r for r in reversed(running) if self._alive(r) or group_members(r)]
        for run in live:
            self._signal(run, signal.SIGTERM)
        if grace_s is None:
            grace_s = max((r.stop_grace_s for r in live), default=0.0)
        deadline = time.monotonic() + grace_s
        while any(self._alive(r) or group_members(r) for r in live):
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        for run in live:
            if self._alive(run) or group_members(run):
                self.log(f"{run.name} (group {run.pid}) ignored SIGTERM; killing it")
            self._kill_tree(run)
            if not quiet:
                self.log(f"stopped {run.name}")
        for run in running:
            proc = self.children.get(run.name)
            if proc is not None and proc.pid == run.pid:
                del self.children[run.name]
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        return [r.name for r in live]

    def _kill_tree(self, run: Running) -> None:
        if group_members(run):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.pid, signal.SIGKILL)
        proc = self.children.get(run.name)
        if proc is not None and proc.pid == run.pid:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        # SIGKILL is delivered asynchronously: return once the group is really gone, so
        # that a restart never meets a stub of the old process (or its busy files).
        deadline = time.monotonic() + 5.0
        while group_members(run) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _alive(self, run: Running) -> bool:
        proc = self.children.get(run.name)
        if proc is not None and proc.pid == run.pid:
            return proc.poll() is None
        return is_alive(run)

    def _signal(self, run: Running, sig: signal.Signals) -> None:
        if self._alive(run) or group_members(run):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.pid, sig)

    # ---- status -----------------------------------------------------------------------
    def status(self) -> list[dict[str, Any]]:
        rows = []
        for run in self.read_state():
            alive = is_alive(run)
            healthy = alive and run_healthy(run)
            state = "healthy" if healthy else ("unhealthy" if alive else "exited")
            rows.append(
                {
                    "name": run.name,
                    "pid": run.pid,
                    "state": state,
                    "restarts": run.restarts,
                    "last_exit": run.last_exit,
                    "urls": run.urls,
                    "log": run.log,
                }
            )
        return rows


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def restart_requests(settings: Settings) -> Path:
    """Where `batchscope restart` leaves requests for the supervising process."""
    return settings.state_dir / "requests"


@contextlib.contextmanager
def running(
    settings: Settings,
    only: Collection[str] | None = None,
    exclude: Collection[str] = (),
    log: Log = lambda _: None,
    supervise: bool = False,
) -> Iterator[Supervisor]:
    """The stack's services (``only`` those named, less ``exclude``) up for a with-block.

    For tests and benchmarks: everything started is stopped on the way out, whatever
    happens inside. With ``supervise`` a thread restarts services that die, as `up` does,
    and serves `batchscope restart` (the state names this process as the supervisor).
    """
    services = [
        s
        for s in service_table(settings)
        if (only is None or s.name in only) and s.name not in exclude
    ]
    supervisor = Supervisor(settings, services, log=log)
    # Recorded as the stack's supervising process, so `restart` requests reach the thread.
    supervisor.supervising = supervise
    running_ = supervisor.up()
    keeper = threading.Thread(target=supervisor.supervise, args=(running_,), daemon=True)
    if supervise:
        keeper.start()
    try:
        yield supervisor
    finally:
        supervisor.stop_requested.set()
        if keeper.is_alive():
            keeper.join(timeout=STOP_TIMEOUT_S + 130)
        supervisor.down()
