"""A fleet of Triton servers on one machine: each in its own Linux network namespace.

Each namespace gets a veth pair with a /30 of one private /24 (``SUBNET``, checked unused
first): the host side holds ``.4i+1``, the namespace ``.4i+2``, so the stack on the host
reaches server i at ``http://10.213.77.(4i+2):8000`` and nothing else can. Triton runs
inside with ``ip netns exec`` and the launcher's own argv and environment
(``stack.triton``). ``/etc/netns/<ns>/hosts`` (bind-mounted over ``/etc/hosts`` by
``ip netns exec``) lets a service name resolve inside one namespace.

:class:`Fleet` removes every process, namespace (with its veth pair) and hosts file on the
way out, also when the body fails; :func:`leftovers` says what is left.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType

import requests

from stack import triton
from stacksettings import ROOT, Settings, from_env_or_default
from tests.rooms import HOST_NETWORK, room

PREFIX = "bsfleet"
SUBNET = ipaddress.ip_network("10.213.77.0/24")
ETC_NETNS = Path("/etc/netns")
STOP_WAIT_S = 10.0


def ip(*argv: str) -> str:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def namespaces() -> list[str]:
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def links() -> list[str]:
    """Host interfaces whose name starts with the fleet's prefix."""
    names = re.findall(r"^\d+: ([^:@]+)", ip("-o", "link"), flags=re.MULTILINE)
    return [n for n in names if n.startswith(PREFIX)]


def subnet_users() -> list[str]:
    """Addresses and routes of the host in ``SUBNET`` (must be none before we start)."""
    prefix = str(SUBNET.network_address).rsplit(".", 1)[0] + "."
    lines = ip("-o", "addr").splitlines() + ip("route").splitlines()
    return [line.strip() for line in lines if prefix in line]


def leftovers() -> list[str]:
    """Everything of a fleet still present on this machine: namespaces, links, hosts files."""
    found = [f"netns {n}" for n in namespaces() if n.startswith(PREFIX)]
    found += [f"link {n}" for n in links()]
    if ETC_NETNS.is_dir():
        found += [f"{p}" for p in ETC_NETNS.iterdir() if p.name.startswith(PREFIX)]
    found += [f"route/address {line}" for line in subnet_users()]
    return found


@dataclass
class Server:
    index: int
    models: dict[str, str]  # model name -> config.pbtxt text
    key: str | None = None  # the key of its restricted APIs; None: open
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def namespace(self) -> str:
        return f"{PREFIX}{self.index}"

    @property
    def veth(self) -> str:
        return f"{PREFIX}{self.index}h"

    @property
    def peer(self) -> str:
        return f"{PREFIX}{self.index}n"

    @property
    def host_address(self) -> str:
        return str(SUBNET.network_address + 4 * self.index + 1)

    @property
    def address(self) -> str:
        return str(SUBNET.network_address + 4 * self.index + 2)

    @property
    def url(self) -> str:
        return f"http://{self.address}:8000"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.address}:8002/metrics"


@dataclass
class Fleet:
    """Namespaces and Tritons, created by ``with Fleet(...)``, removed on the way out."""

    root: Path
    servers: list[Server]
    venv: Path = field(default_factory=lambda: from_env_or_default().triton_venv)

    def __enter__(self) -> Fleet:
        # The links change: no page is loading in Chromium meanwhile (tests/rooms.py).
        with room(HOST_NETWORK, alone=True):
            self._cleanup()  # a run that was killed outright may have left its own
            users = subnet_users()
            if users:
                raise RuntimeError(f"{SUBNET} is in use on this machine: {users[0]}")
            try:
                for server in self.servers:
                    self._namespace(server)
            except BaseException:
                self._cleanup()
                raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

    def _namespace(self, server: Server) -> None:
        ns, host_side, peer = server.namespace, server.veth, server.peer
        ip("netns", "add", ns)
        ip("link", "add", host_side, "type", "veth", "peer", "name", peer)
        ip("link", "set", peer, "netns", ns)
        ip("addr", "add", f"{server.host_address}/30", "dev", host_side)
        ip("link", "set", host_side, "up")
        ip("-n", ns, "addr", "add", f"{server.address}/30", "dev", peer)
        ip("-n", ns, "link", "set", peer, "up")
        ip("-n", ns, "link", "set", "lo", "up")

    def hosts(self, server: Server, names: dict[str, str]) -> None:
        """``/etc/hosts`` inside ``server``'s namespace: name -> address, plus localhost."""
        folder = ETC_NETNS / server.namespace
        folder.mkdir(parents=True, exist_ok=True)
        lines = ["127.0.0.1 localhost"] + [f"{addr} {name}" for name, addr in names.items()]
        (folder / "hosts").write_text("\n".join(lines) + "\n")

    def start(self, server: Server) -> None:
        """Start Triton in ``server``'s namespace on 8000/8001/8002 (not waiting); again after
        :meth:`kill`, on the same repository."""
        state = self.root / server.namespace
        repository = state / "models"
        for name, config in server.models.items():
            folder = repository / name
            source = ROOT / "model_repository" / "batch_add_model" / "1"
            shutil.copytree(source, folder / "1", dirs_exist_ok=True)
            (folder / "config.pbtxt").write_text(config)
        runtime = triton.find_runtime(self.venv)
        backends = triton.assemble_backends(runtime, state / "backends")
        settings = replace(
            Settings(), host="0.0.0.0", state_dir=state, model_repository=repository
        ).with_ports(triton_http=8000, triton_grpc=8001, triton_metrics=8002)
        settings.trace_file.parent.mkdir(parents=True, exist_ok=True)
        argv = triton.server_argv(runtime, settings, backends, server.key)
        env = {**os.environ, **triton.environment(runtime, triton.python_libdir(runtime.venv))}
        server.log = state / "triton.log"
        with open(server.log, "ab") as log:
            server.process = subprocess.Popen(
                self.exec_argv(server, argv),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @staticmethod
    def exec_argv(server: Server, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", server.namespace, *argv]

    def wait_ready(self, timeout_s: float = 150.0) -> None:
        deadline = time.monotonic() + timeout_s
        waiting = [s for s in self.servers if s.process is not None]
        while waiting:
            for server in list(waiting):
                assert server.process is not None
                if server.process.poll() is not None:
                    raise RuntimeError(f"Triton in {server.namespace} exited: {_tail(server.log)}")
                try:
                    ok = requests.get(f"{server.url}/v2/health/ready", timeout=2).ok
                except requests.RequestException:
                    ok = False
                if ok:
                    waiting.remove(server)
            if waiting and time.monotonic() > deadline:
                names = ", ".join(s.namespace for s in waiting)
                raise RuntimeError(f"Triton not ready within {timeout_s:.0f}s in {names}")
            time.sleep(0.5)

    def kill(self, server: Server) -> None:
        """SIGKILL every process of ``server``'s namespace (Triton and its stubs)."""
        kill_namespace(server.namespace)
        if server.process is not None:
            server.process.wait(timeout=STOP_WAIT_S)

    def cleanup(self) -> None:
        """Stop every process in the fleet's namespaces, delete them (a namespace takes its
        veth pair with it) and the hosts files. Idempotent."""
        with room(HOST_NETWORK, alone=True):
            self._cleanup()

    def _cleanup(self) -> None:
        for server in self.servers:
            if server.process is not None and server.process.poll() is None:
                _stop_group(server.process)
        for ns in namespaces():
            if ns.startswith(PREFIX):
                kill_namespace(ns)
                # A name left without its mount is removed too; what stays is for
                # leftovers() to report.
                subprocess.run(["ip", "netns", "delete", ns], capture_output=True, check=False)
        for _ in range(20):  # a namespace takes its veth pair with it, a moment later
            if not links():
                break
            time.sleep(0.1)
        for name in links():
            subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)
        if ETC_NETNS.is_dir():
            for folder in ETC_NETNS.iterdir():
                if folder.name.startswith(PREFIX):
                    shutil.rmtree(folder)


def kill_namespace(ns: str) -> None:
    """SIGKILL every process that runs in namespace ``ns``."""
    for _ in range(20):
        try:
            pids = [int(p) for p in ip("netns", "pids", ns).split()]
        except RuntimeError as exc:
            # Listed but not mounted (a delete caught half way): nothing can run in it.
            if "Cannot open network namespace" in str(exc):
                return
            raise
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    raise RuntimeError(f"processes survive SIGKILL in {ns}")


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, then SIGKILL what is left after a while."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=STOP_WAIT_S)


def _tail(path: Path | None, lines: int = 15) -> str:
    if path is None or not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
