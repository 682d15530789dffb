"""Starts the service table, waits for health, stops everything, and reports status.

Children run in their own process groups so that a stop reaches their own children
too (Triton's python backend stubs). A state file in the state folder records
each pid with its start time, so `down` and `status` work from another process
and never signal a recycled pid.
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import requests

from stack.errors import StackError
from stack.services import Service
from stacksettings import PORTS, Settings, procstat

STOP_TIMEOUT_S = 15.0
Log = Callable[[str], None]


@dataclass
class Running:
    name: str
    pid: int
    started: str  # the process' start time in clock ticks (/proc/PID/stat field 22)
    health_url: str
    urls: dict[str, str]
    log: str


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


def is_healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        return requests.get(url, timeout=timeout).status_code == 200
    except requests.RequestException:
        return False


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

    def _write_state(self, running: list[Running]) -> None:
        path = self.settings.state_file
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"services": [asdict(r) for r in running]}, indent=2))
        tmp.replace(path)

    # ---- up ---------------------------------------------------------------------------
    def preflight(self) -> None:
        live = [r for r in self.read_state() if is_alive(r)]
        if live:
            names = ", ".join(f"{r.name} (pid {r.pid})" for r in live)
            raise StackError(
                f"the stack in {self.settings.state_dir} is already running: {names}; "
                "run `python -m stack down` first"
            )
        busy = [
            (svc.name, port)
            for svc in self.services
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

    def up(self, foreground: bool = False) -> list[Running]:
        """Start every service and wait until each is healthy; on failure stop them all."""
        self.preflight()
        self.settings.logs_dir.mkdir(parents=True, exist_ok=True)
        running: list[Running] = []
        try:
            for svc in self.services:
                if self.stop_requested.is_set():
                    raise StackError("interrupted while starting; stopped what had started")
                running.append(self._start(svc, foreground))
                self._write_state(running)
                self._wait_ready(svc, running[-1])
        except BaseException:
            self._stop(running)
            raise
        return running

    def _start(self, svc: Service, foreground: bool) -> Running:
        if svc.prepare is not None:
            svc.prepare()
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
        started = procstat.start_time(proc.pid) or ""
        self.log(f"started {svc.name} (pid {proc.pid}), log: {log_path}")
        return Running(svc.name, proc.pid, started, svc.health_url, svc.urls, str(log_path))

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
            if is_healthy(svc.health_url, timeout=1.0):
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
        """Stop one service of the running stack; the others keep running (an outage drill)."""
        self._stop([self._running(name)])

    def start_service(self, name: str) -> Running:
        """Start one service again (after stop_service) and wait until it is healthy."""
        svc = next((s for s in self.services if s.name == name), None)
        if svc is None:
            raise StackError(f"no service {name!r} in this stack's service table")
        old = self._running(name)
        if self._alive(old):
            raise StackError(f"{name} is already running (pid {old.pid})")
        run = self._start(svc, foreground=False)
        self._write_state([run if r.name == name else r for r in self.read_state()])
        try:
            self._wait_ready(svc, run)
        except BaseException:
            self._stop([run])
            raise
        return run

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

    def watch(self, running: list[Running]) -> None:
        """Block until a stop is requested; report children that die meanwhile."""
        reported: set[str] = set()
        while not self.stop_requested.wait(1.0):
            for run in running:
                proc = self.children.get(run.name)
                if proc is None or run.name in reported:
                    continue
                code = proc.poll()
                if code is not None:
                    reported.add(run.name)
                    # The rest keeps running: Prometheus and the exporter report the outage.
                    self.log(
                        f"{run.name} exited with code {code}; the other services keep "
                        f"running (log: {run.log}). Ctrl-C stops the stack."
                    )

    # ---- down -------------------------------------------------------------------------
    def down(self) -> list[str]:
        running = self.read_state()
        stopped = self._stop(running)
        self.settings.state_file.unlink(missing_ok=True)
        return stopped

    def _stop(self, running: list[Running]) -> list[str]:
        live = [r for r in reversed(running) if self._alive(r)]
        for run in live:
            self._signal(run, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(self._alive(r) for r in live) and time.monotonic() < deadline:
            time.sleep(0.1)
        for run in live:
            if self._alive(run):
                self.log(f"{run.name} (pid {run.pid}) ignored SIGTERM; killing it")
                self._signal(run, signal.SIGKILL)
            # Anything left in its process group (e.g. Triton's backend stubs) goes too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.pid, signal.SIGKILL)
            proc = self.children.pop(run.name, None)
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            self.log(f"stopped {run.name}")
        return [r.name for r in live]

    def _alive(self, run: Running) -> bool:
        proc = self.children.get(run.name)
        if proc is not None:
            return proc.poll() is None
        return is_alive(run)

    def _signal(self, run: Running, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.pid, sig)

    # ---- status -----------------------------------------------------------------------
    def status(self) -> list[dict[str, Any]]:
        rows = []
        for run in self.read_state():
            alive = is_alive(run)
            healthy = alive and is_healthy(run.health_url)
            state = "healthy" if healthy else ("unhealthy" if alive else "exited")
            rows.append(
                {"name": run.name, "pid": run.pid, "state": state, "urls": run.urls, "log": run.log}
            )
        return rows


@contextlib.contextmanager
def running(
    settings: Settings,
    only: Collection[str] | None = None,
    exclude: Collection[str] = (),
    log: Log = lambda _: None,
) -> Iterator[Supervisor]:
    """The stack's services (``only`` those named, less ``exclude``) up for a with-block.

    For tests and benchmarks: everything started is stopped on the way out, whatever
    happens inside.
    """
    from stack.services import service_table

    services = [
        s
        for s in service_table(settings)
        if (only is None or s.name in only) and s.name not in exclude
    ]
    supervisor = Supervisor(settings, services, log=log)
    supervisor.up()
    try:
        yield supervisor
    finally:
        supervisor.down()
